"""A toy task, outside quantmark: a model that estimates an image's mean brightness."""
