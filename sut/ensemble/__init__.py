"""Ensembles of co-located models: several members (any model at any SUT quantmark has) loaded
into one test process on one device, their probabilities combined into one class per sample.

``members`` parses ``MODEL@SUT,...``; ``combine`` turns member scores into the ensemble's class;
``inputs`` keeps one loaded tensor per member input (geometry, layout, encoding); ``backend``
runs the members in turn or side by side; ``build`` makes all of it for the runner. The folder
reaches frameworks only through the registry, like the harness does.
"""
