"""The model side of quantmark: zoo specs, torch nets, ONNX export, INT8 quantization, cache.

Modules: ``zoo`` (ModelSpec, get_model, build_torch_model), ``torch_nets`` (hand-written
ResNet-50 / MobileNetV2, random-weight calibration), ``torch_classic`` (VGG-16/19,
MobileNetV1, DenseNet-121/201), ``torch_efficientnet`` (EfficientNet-B0), ``onnx_export``
(export_onnx, load_user_onnx), ``ort_quantize`` (quantize_static_int8, count_qdq_nodes),
``artifacts`` (Artifact and its cache). Nothing is imported here, so ``import models.zoo``
stays cheap (no torch) for the QSL and run.py.
"""
