"""ONNX Runtime: the CPU SUTs (backend), the GPU SUTs on the CUDA and TensorRT execution
providers (gpu), its quantizer and FP16 converter (quantize), its SUT names (suts).

Nothing is imported here: the registry reads ``suts`` without importing the framework.
"""
