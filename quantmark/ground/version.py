"""quantmark's version: one place, read by the package, setup.py and every fingerprint."""

VERSION = "0.1.0"
