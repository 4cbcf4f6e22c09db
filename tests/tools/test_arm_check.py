"""tools/arm_check.sh, the whole arm64 check, where its emulated userland has been built.

Building the userland takes ~15 minutes and root (sudo tools/arm_check.sh --setup-only); CI
machines start without it, so there this test is skipped and says why. Where it exists, the
check runs for real: Pi install, export on x86, SingleStream and Offline for tflite-fp32 and
tflite-int8 under emulation, VALID logs, and x86 vs arm64 predictions compared image by image.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

CACHE = Path(os.environ.get("QUANTMARK_ARM_CACHE", "/var/cache/quantmark-arm"))
READY = CACHE / "bookworm-arm64" / ".quantmark-rootfs-1"


@pytest.mark.arm
@pytest.mark.skipif(not READY.is_file() or os.geteuid() != 0,
                    reason=f"no emulated arm64 userland at {READY.parent} (root: "
                           "sudo tools/arm_check.sh --setup-only builds it)")
def test_arm_check_passes_under_emulation():
    env = {**os.environ, "PYTHON": sys.executable}
    proc = subprocess.run([str(ROOT / "tools/arm_check.sh"), "--images", "16"],
                          capture_output=True, text=True, timeout=3600, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "PASS: quantmark runs on arm64" in proc.stdout
    for sut in ("tflite-fp32", "tflite-int8"):
        # 16 images, one held out (a tenth of a folder without a calibration list): 15 scored
        assert f"{sut} x86 vs arm64 predictions: agreement 15/15 (100.000%)" in proc.stdout
        assert f"{sut}: aarch64 Cortex-A76, executed {sut.split('-')[1]}" in proc.stdout
    assert "arm64 ort-fp32 SingleStream: ort-fp32 SingleStream performance: VALID" in proc.stdout
