"""TensorFlow: the SavedModel SUTs (backend), its SUT names (suts). The SavedModel itself comes
from ``models.saved_model``, which the TFLite converter shares.

Nothing is imported here: the registry reads ``suts`` without importing the framework.
"""
