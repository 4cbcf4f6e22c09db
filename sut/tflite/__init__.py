"""TFLite (LiteRT): the CPU SUTs (backend), the .tflite conversion and reader (convert), its SUT
names (suts).

Nothing is imported here: the registry reads ``suts`` without importing the framework.
"""
