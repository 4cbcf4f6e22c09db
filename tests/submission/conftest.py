"""Hand-made /proc, /sys and /etc trees (an x86 server, a Raspberry Pi 4) for the
system-description tests, and helpers to detect and build from them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from quantmark.submission.system import build_system_json, detect_machine


def put(root: Path, rel: str, text: str | bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def link(root: Path, rel: str, target: Path) -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    target.mkdir(parents=True, exist_ok=True)
    os.symlink(target, root / rel)


def mountinfo(*mounts: tuple[str, str, str, str]) -> str:
    """Lines of /proc/self/mountinfo for (major:minor, mount point, fstype, source)."""
    return "".join(f"{i + 20} 1 {dev} / {point} rw,relatime shared:1 - {fs} {src} rw\n"
                   for i, (dev, point, fs, src) in enumerate(mounts))


@pytest.fixture
def x86(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A 2-socket server: 4 cores per socket, 2 threads per core, HDD root, NVMe results disk."""
    proc, sys_root, etc = tmp_path / "proc", tmp_path / "sys", tmp_path / "etc"
    blocks, n = [], 0
    for socket in (0, 1):
        for core in range(4):
            for _thread in (0, 1):
                blocks.append(f"processor\t: {n}\nvendor_id\t: GenuineIntel\n"
                              f"model name\t: Intel(R) Xeon(R) Gold 6430\ncpu MHz\t\t: 800.000\n"
                              f"physical id\t: {socket}\nsiblings\t: 8\ncore id\t\t: {core}\n"
                              f"cpu cores\t: 4\nflags\t\t: fpu sse avx2 avx512f\n")
                n += 1
    put(proc, "cpuinfo", "\n".join(blocks))
    put(proc, "meminfo", "MemTotal:       65856844 kB\nMemFree:        1000 kB\n")
    put(proc, "sys/kernel/osrelease", "6.8.0-45-generic\n")
    put(etc, "os-release", 'NAME="Ubuntu"\nPRETTY_NAME="Ubuntu 24.04.1 LTS"\nID=ubuntu\n')
    for cpu in range(n):
        put(sys_root, f"devices/system/cpu/cpu{cpu}/cpufreq/cpuinfo_max_freq", "3400000\n")
    caches = [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"),
              (3, "Unified", "61440K")]
    for index, (level, kind, size) in enumerate(caches):
        base = f"devices/system/cpu/cpu0/cache/index{index}"
        put(sys_root, f"{base}/level", f"{level}\n")
        put(sys_root, f"{base}/type", f"{kind}\n")
        put(sys_root, f"{base}/size", f"{size}\n")
    results = tmp_path / "results"
    results.mkdir()
    results = results.resolve()
    put(proc, "self/mountinfo", mountinfo(("8:2", "/", "ext4", "/dev/sda2"),
                                          ("259:1", str(results), "xfs", "/dev/nvme0n1p1")))
    put(sys_root, "block/sda/queue/rotational", "1\n")
    put(sys_root, "block/sda/device/model", "ST4000NM000A    \n")
    put(sys_root, "block/sda/sda2/partition", "2\n")
    link(sys_root, "dev/block/8:2", sys_root / "block/sda/sda2")
    put(sys_root, "block/nvme0n1/queue/rotational", "0\n")
    put(sys_root, "block/nvme0n1/nvme0n1p1/partition", "1\n")
    link(sys_root, "dev/block/259:1", sys_root / "block/nvme0n1/nvme0n1p1")
    for port, function in (("eno1", 0), ("eno2", 1)):  # two ports of one card
        put(sys_root, f"class/net/{port}/type", "1\n")
        put(sys_root, f"class/net/{port}/speed", "10000\n")
        link(sys_root, f"class/net/{port}/device",
             sys_root / f"devices/pci0000:16/0000:17:00.{function}")
    put(sys_root, "class/net/lo/type", "772\n")
    put(sys_root, "bus/pci/devices/0000:03:00.0/class", "0x030000\n")  # the BMC's VGA
    put(sys_root, "bus/pci/devices/0000:03:00.0/vendor", "0x1a03\n")
    return proc, sys_root, etc


@pytest.fixture
def pi4(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A Raspberry Pi 4 (32-bit kernel): no cpufreq, no cache sysfs, root on the SD card."""
    proc, sys_root, etc = tmp_path / "proc", tmp_path / "sys", tmp_path / "etc"
    cpu = ("processor\t: {n}\nmodel name\t: ARMv7 Processor rev 3 (v7l)\nBogoMIPS\t: 108.00\n"
           "Features\t: half thumb fastmult vfp edsp neon vfpv3 tls vfpv4 idiva idivt lpae\n"
           "CPU implementer\t: 0x41\nCPU architecture: 7\nCPU variant\t: 0x0\n"
           "CPU part\t: 0xd08\nCPU revision\t: 3\n")
    board = ("Hardware\t: BCM2835\nRevision\t: d03114\nSerial\t\t: 10000000deadbeef\n"
             "Model\t\t: Raspberry Pi 4 Model B Rev 1.4\n")
    put(proc, "cpuinfo", "\n".join([*(cpu.format(n=n) for n in range(4)), board]))
    put(proc, "meminfo", "MemTotal:        3884272 kB\n")
    put(proc, "device-tree/model", b"Raspberry Pi 4 Model B Rev 1.4\0")
    put(proc, "device-tree/compatible", b"raspberrypi,4-model-b\0brcm,bcm2711\0")
    put(etc, "os-release", 'PRETTY_NAME="Raspbian GNU/Linux 11 (bullseye)"\n')
    put(proc, "self/mountinfo", mountinfo(("179:2", "/", "ext4", "/dev/root")))
    put(sys_root, "block/mmcblk0/queue/rotational", "0\n")
    put(sys_root, "block/mmcblk0/mmcblk0p2/partition", "2\n")
    link(sys_root, "dev/block/179:2", sys_root / "block/mmcblk0/mmcblk0p2")
    return proc, sys_root, etc


def detect(roots: tuple[Path, Path, Path], storage: Path, **kwargs) -> dict:
    proc, sys_root, etc = roots
    return detect_machine(proc, sys_root, storage, etc=etc, probe_live=False, **kwargs)


def build(machine: dict, **kwargs) -> dict:
    args = {"submitter": "Acme", "division": "open", "system_name": "Acme box",
            "frameworks": {"ONNX Runtime": "1.23.2"}, "machine": machine}
    return build_system_json(**{**args, **kwargs})
