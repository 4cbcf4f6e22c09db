"""PyTorch: the CPU SUTs (backend), the CUDA SUTs (cuda), INT8 quantization and the FP32
weights artifact (quantize), its SUT names (suts).

Nothing is imported here: the registry reads ``suts`` without importing the framework.
"""
