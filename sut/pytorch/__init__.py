"""PyTorch: the CPU SUTs (backend; on a text encoder text, text_model and text_compile), the
CUDA SUTs (cuda), INT8 quantization and the FP32 weights artifact (quantize), its SUT names
(suts).

Nothing is imported here: the registry reads ``suts`` without importing the framework.
"""
