"""The model side every framework shares: zoo specs, torch nets, ONNX export, the converters more
than one framework reads, the artifact cache. A framework's own converter or quantizer lives in
its folder (``sut/<framework>/``), never here.

Modules: ``zoo`` (ModelSpec, get_model, build_torch_model), ``torch_nets`` (hand-written
ResNet-50 / MobileNetV2, random-weight calibration), ``torch_classic`` (VGG-16/19,
MobileNetV1, DenseNet-121/201), ``torch_efficientnet`` (EfficientNet-B0), ``onnx_export``
(export_onnx, load_user_onnx), ``source`` (the FP32 ONNX a SUT starts from), ``exported``
(records of exported models), ``qdq`` (QDQ calibration reader and counts, the symmetric QDQ
model TensorRT runs: ONNX Runtime's and TensorRT's), ``saved_model`` (the onnx2tf SavedModel:
TensorFlow's and TFLite's), ``artifacts`` (Artifact and its cache). Nothing is imported here,
so ``import models.zoo`` stays cheap (no torch) for the QSL and run.py.
"""
