"""What the machine probes read from /proc and /sys: an x86 server, a Pi, GPUs, bad files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from quantmark.submission import machine
from quantmark.submission.machine import detect_machine
from quantmark.submission.system import NA, UNKNOWN, missing_user_fields
from tests.submission.conftest import build, detect, mountinfo, put


def test_x86_server_from_proc_and_sys(x86, tmp_path):
    found = detect(x86, tmp_path / "results" / "run1")  # not created yet: its parent decides
    assert found["host_processor_model_name"] == "Intel(R) Xeon(R) Gold 6430"
    assert found["host_processors_per_node"] == 2
    assert found["host_processor_core_count"] == 8  # 16 threads, 8 physical cores
    assert found["host_processor_frequency"] == "3400 MHz"  # cpufreq max, not cpu MHz
    assert found["host_processor_caches"] == "L1d 48 KiB, L1i 32 KiB, L2 2 MiB, L3 60 MiB"
    assert found["host_memory_capacity"] == "63 GiB"
    assert found["host_storage_type"] == "NVMe SSD"  # the deepest mount, not /
    assert found["host_storage_capacity"].endswith(("GiB", "TiB", "MiB"))
    assert found["operating_system"] == "Ubuntu 24.04.1 LTS, Linux 6.8.0-45-generic"
    assert found["host_network_card_count"] == "1"
    assert found["host_networking"] == "Ethernet (eno1, 10000 Mb/s); Ethernet (eno2, 10000 Mb/s)"
    assert found["accelerators_per_node"] == 0  # a BMC's VGA is no accelerator
    assert found["accelerator_model_name"] == NA
    assert "hw_notes" not in found


def test_x86_root_disk_and_filesystem_kinds(x86, tmp_path):
    proc = x86[0]
    assert detect(x86, Path("/"))["host_storage_type"] == "HDD (ST4000NM000A)"
    put(proc, "self/mountinfo", mountinfo(("0:52", "/", "overlay", "overlay")))
    assert detect(x86, tmp_path)["host_storage_type"] == "overlay filesystem"
    put(proc, "self/mountinfo", mountinfo(("0:60", "/", "nfs4", "srv:/export")))
    assert detect(x86, tmp_path)["host_storage_type"] == "network filesystem (nfs4)"
    put(proc, "self/mountinfo", mountinfo(("8:9", "/", "ext4", "/dev/sdz9")))
    assert "host_storage_type" not in detect(x86, tmp_path)  # no such device: not invented


def test_raspberry_pi_4(pi4, tmp_path):
    found = detect(pi4, tmp_path)
    assert found["host_processor_model_name"] == "Broadcom BCM2711 (Arm Cortex-A72)"
    assert found["host_processors_per_node"] == 1
    assert found["host_processor_core_count"] == 4
    assert "host_processor_frequency" not in found
    assert "host_processor_caches" not in found
    assert found["host_memory_capacity"] == "4 GiB"
    assert found["host_storage_type"] == "SD card / eMMC flash"
    assert found["hw_notes"] == "Board: Raspberry Pi 4 Model B Rev 1.4"
    assert found["accelerators_per_node"] == 0
    assert "host_networking" not in found
    system = build(found)
    assert system["host_processor_frequency"] == UNKNOWN
    assert system["host_processor_interconnect"] == NA  # one socket
    assert {"host_processor_frequency", "host_processor_caches", "host_networking",
            "host_network_card_count", "cooling"} <= set(missing_user_fields(system))


@pytest.mark.parametrize(("parts", "expected"), [
    (["0xd03"] * 4, "Arm Cortex-A53"),
    (["0xd0b"] * 4, "Arm Cortex-A76"),
    (["0xd05"] * 4 + ["0xd0b"] * 4, "Arm 4x Cortex-A55 + 4x Cortex-A76"),
])
def test_arm_core_names(tmp_path, parts, expected):
    put(tmp_path / "proc", "cpuinfo", "\n".join(
        f"processor\t: {n}\nCPU implementer\t: 0x41\nCPU part\t: {part}\n"
        for n, part in enumerate(parts)))
    found = detect((tmp_path / "proc", tmp_path / "sys", tmp_path / "etc"), tmp_path)
    assert found["host_processor_model_name"] == expected
    assert found["host_processor_core_count"] == len(parts)


def test_cores_from_sysfs_topology_when_cpuinfo_has_no_ids(pi4, tmp_path):
    proc, sys_root, _ = pi4
    for cpu, (package, threads) in enumerate([("0", "0-1"), ("0", "0-1"), ("0", "2-3"),
                                              ("0", "2-3")]):
        put(sys_root, f"devices/system/cpu/cpu{cpu}/topology/physical_package_id", package)
        put(sys_root, f"devices/system/cpu/cpu{cpu}/topology/core_cpus_list", threads)
    assert detect(pi4, tmp_path)["host_processor_core_count"] == 2


def test_garbage_files_fail_soft(tmp_path):
    roots = (tmp_path / "proc", tmp_path / "sys", tmp_path / "etc")
    put(roots[0], "cpuinfo", "processor : 0\ncpu MHz : fast\n")
    put(roots[0], "meminfo", "MemTotal: lots\n")
    put(roots[0], "self/mountinfo", "garbage\n1 2\n")
    put(roots[1], "devices/system/cpu/cpu0/cache/index0/level", "one")
    found = detect(roots, tmp_path)
    assert found["host_processor_core_count"] == 1
    for key in ("host_processor_frequency", "host_memory_capacity", "host_processor_caches",
                "host_storage_type", "host_processor_model_name", "operating_system"):
        assert key not in found


def fake_nvidia_smi(tmp_path: Path, monkeypatch, script: str) -> None:
    bin_dir = tmp_path / "bin"
    exe = put(bin_dir, "nvidia-smi", "#!/bin/sh\n" + script)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")


def test_nvidia_gpus_from_nvidia_smi(x86, tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, """case "$*" in
  *memory.total*) printf 'NVIDIA H100 80GB HBM3, 81559 MiB\\nNVIDIA H100 80GB HBM3, 81559 MiB\\n';;
  *clocks.max.sm*) printf '1980, 5, 16, 550.54.15\\n1980, 5, 16, 550.54.15\\n';;
  *) exit 1;;
esac
""")
    proc, sys_root, etc = x86
    found = detect_machine(proc, sys_root, tmp_path, etc=etc, probe_live=True)
    assert found["accelerators_per_node"] == 2
    assert found["accelerator_model_name"] == "NVIDIA H100 80GB HBM3"
    assert found["accelerator_memory_capacity"] == "80 GiB"
    assert found["accelerator_frequency"] == "1980 MHz"
    assert found["accelerator_host_interconnect"] == "PCIe Gen5 x16"
    assert found["sw_notes"] == "NVIDIA driver 550.54.15"
    system = build(found)
    assert system["accelerators_per_node"] == 2
    assert system["accelerator_interconnect"] == UNKNOWN  # NVLink or PCIe: only the user knows
    assert "accelerator_memory_configuration" in missing_user_fields(system)


def test_gpu_that_nvidia_smi_cannot_describe_is_not_reported_absent(x86, tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, "exit 9\n")
    proc, sys_root, etc = x86
    put(sys_root, "bus/pci/devices/0000:41:00.0/class", "0x030200\n")
    put(sys_root, "bus/pci/devices/0000:41:00.0/vendor", "0x10de\n")
    found = detect_machine(proc, sys_root, tmp_path, etc=etc, probe_live=True)
    assert not any(key.startswith("accelerator") for key in found)
    assert build(found)["accelerators_per_node"] == UNKNOWN


def test_hung_nvidia_smi_times_out(x86, tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, "exec sleep 30\n")
    monkeypatch.setattr(machine, "NVIDIA_SMI_TIMEOUT_S", 0.3)
    proc, sys_root, etc = x86
    found = detect_machine(proc, sys_root, tmp_path, etc=etc, probe_live=True)
    assert found["accelerators_per_node"] == 0  # no GPU on the fake PCI bus
