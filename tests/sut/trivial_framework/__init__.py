"""A trivial framework living outside quantmark, as a third party would write one: its SUT
names as plain data (``suts``), its backend (``backend``). ``tests/sut/test_framework_plugin.py``
copies this folder next to a ``*.dist-info`` whose entry point registers it, and runs it.
"""
