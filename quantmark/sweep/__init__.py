"""Sweeps: the plan and its file, one run per cell, the driver, the fleet on Ray and placement."""
