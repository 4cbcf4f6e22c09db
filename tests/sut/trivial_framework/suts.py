"""The trivial framework's SUTs as plain data: all the registry reads (no framework import)."""

from __future__ import annotations

from quantmark.sut.info import FrameworkInfo, SutInfo

FRAMEWORK = FrameworkInfo(
    name="trivial",
    suts=(SutInfo("trivial-fp32", "trivial", "fp32 (fixed scores)", "cpu", "trivial", (),
                  ".backend:create",  # relative to this package: trivial_framework.backend
                  precision_key="fp32"),
          # fails on purpose (--sut-option trivial_fault=raise|hang): the ensemble's guards
          SutInfo("trivial-faulty", "trivial", "fp32 (fixed scores, faults)", "cpu", "trivial",
                  (), ".backend:create", options=(("trivial_fault", ("none", "raise", "hang")),),
                  variant="faulty", precision_key="fp32")),
    distributions=("quantmark-trivial",),
    fp32_baseline="trivial-fp32",
    variant_order=("fp32",),
)
