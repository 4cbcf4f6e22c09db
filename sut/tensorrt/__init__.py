"""TensorRT: the engine SUTs (backend), engine building (build), its INT8 calibrator
(calibration), the cuda-python calls (cuda_runtime), its SUT names (suts).

Nothing is imported here: the registry reads ``suts`` without importing the framework.
"""
