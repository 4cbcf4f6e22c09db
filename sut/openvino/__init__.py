"""OpenVINO: the CPU SUTs (backend), the IR and NNCF INT8 conversion (convert), its SUT names
(suts).

Nothing is imported here: the registry reads ``suts`` without importing the framework.
"""
