"""What Linux can tell about this machine, for the MLPerf system description.

Every probe reads Linux's own files (``/proc``, ``/sys``, roots injectable for tests) and fails
soft: a value the machine cannot tell is left out, never invented.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from quantmark.ground.board import core_name

# The accelerator fields of the system description (filled with N/A when there is none).
ACCELERATOR_TEXT_KEYS = (
    "accelerator_model_name", "accelerator_memory_capacity", "accelerator_memory_configuration",
    "accelerator_frequency", "accelerator_host_interconnect", "accelerator_interconnect",
    "accelerator_interconnect_topology", "accelerator_on-chip_memories",
)
NA = "N/A"
UNKNOWN = "unknown (not detectable; set it in the system file)"
NVIDIA_SMI_TIMEOUT_S = 10.0

_SOC_VENDORS = {"brcm": "Broadcom", "qcom": "Qualcomm", "rockchip": "Rockchip",
                "nvidia": "NVIDIA", "mediatek": "MediaTek", "amlogic": "Amlogic",
                "allwinner": "Allwinner", "fsl": "NXP", "nxp": "NXP", "ti": "TI",
                "samsung": "Samsung"}
_FS_KINDS = {"overlay": "overlay filesystem", "fuse-overlayfs": "overlay filesystem",
             "aufs": "overlay filesystem", "tmpfs": "RAM (tmpfs)", "ramfs": "RAM (ramfs)",
             "9p": "host-shared filesystem (9p)", "virtiofs": "host-shared filesystem (virtiofs)"}
_NETWORK_FS = ("nfs", "cifs", "smb3", "ceph", "glusterfs", "lustre", "beegfs", "gpfs", "fuse.sshfs")
# Block devices whose "rotational" flag says nothing (virtio and Xen disks report 1) or is moot.
_DISK_PREFIXES = (("vd", "virtual disk"), ("xvd", "virtual disk"),
                  ("mmcblk", "SD card / eMMC flash"), ("loop", "loop device (disk image file)"),
                  ("zram", "RAM disk"), ("ram", "RAM disk"))
_PCI_ADDRESS = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except (OSError, ValueError):
        return None


def _int(text: Any) -> int | None:
    try:
        return int(float(text)) if isinstance(text, float) else int(str(text).strip())
    except ValueError:
        return None


def _run(args: list[str], timeout: float) -> str | None:
    """A tool's stdout, or None if it is missing, fails or hangs (a hung nvidia-smi is common)."""
    try:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, start_new_session=True)
    except OSError:
        return None
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1)
        return None
    return out if proc.returncode == 0 else None


def _size_text(n_bytes: float) -> str:
    gib = n_bytes / 2**30
    if gib >= 1024:
        return f"{gib / 1024:.1f} TiB"
    return f"{round(gib)} GiB" if gib >= 1 else f"{round(n_bytes / 2**20)} MiB"


def _soft(probe: Callable[..., Any], *args: Any) -> Any:
    """Run one probe; odd contents of a system file must not stop the others."""
    try:
        return probe(*args)
    except (OSError, ValueError, LookupError, TypeError, AttributeError,
            subprocess.SubprocessError):
        return None


def _cpuinfo(proc: Path) -> list[dict[str, str]]:
    """/proc/cpuinfo as blocks of lower-cased key: value (ARM adds a block for the board)."""
    blocks = []
    for chunk in re.split(r"\n\s*\n", _read(proc / "cpuinfo") or ""):
        block: dict[str, str] = {}
        for line in chunk.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                block.setdefault(key.strip().lower(), value.strip())
        if block:
            blocks.append(block)
    return blocks


def _device_tree(proc: Path, name: str) -> list[str]:
    try:
        raw = (proc / "device-tree" / name).read_bytes()
    except OSError:
        return []
    return [part for part in raw.decode(errors="replace").split("\0") if part.strip()]


def _processor_name(blocks: list[dict[str, str]], proc: Path) -> str | None:
    """x86: "model name". Arm: the SoC (device tree) and the cores ("CPU part"), since Arm's
    "model name" is generic and "Hardware" names the wrong chip on a Raspberry Pi 4."""
    info = {key: value for block in reversed(blocks) for key, value in block.items()}
    parts: dict[str, int] = {}
    for block in blocks:
        name = core_name(block.get("cpu implementer"), block.get("cpu part"))
        if name:
            parts[name] = parts.get(name, 0) + 1
    cores = None
    if parts:
        cores = "Arm " + (next(iter(parts)) if len(parts) == 1 else
                          " + ".join(f"{count}x {name}" for name, count in parts.items()))
    soc = info.get("hardware") if cores else None
    compatible = _device_tree(proc, "compatible")
    vendor, _, chip = compatible[-1].partition(",") if compatible else ("", "", "")
    if vendor in _SOC_VENDORS and chip:  # "brcm,bcm2711" -> "Broadcom BCM2711"
        chip = chip.upper() if re.fullmatch(r"[a-z]{1,4}\d+\w*", chip) else chip
        soc = f"{_SOC_VENDORS[vendor]} {chip}"
    if cores:
        return f"{soc} ({cores})" if soc else cores
    return info.get("model name") or info.get("hardware") or soc


def _topology(blocks: list[dict[str, str]], sys_root: Path, live: bool) -> tuple[int, int | None]:
    """(processors, physical cores in the node): hyperthreads do not count as cores."""
    procs = [block for block in blocks if "processor" in block]
    sockets = {b["physical id"] for b in procs if "physical id" in b}
    ids = [b for b in procs if "physical id" in b and "core id" in b]
    cores = {(b["physical id"], b["core id"]) for b in ids}
    if not cores:  # Arm: no ids in cpuinfo; a core is a set of hardware threads in sysfs
        for topo in (sys_root / "devices/system/cpu").glob("cpu[0-9]*/topology"):
            package = _read(topo / "physical_package_id")
            threads = _read(topo / "core_cpus_list") or _read(topo / "thread_siblings_list")
            if package is not None and threads:
                cores.add((package, threads))
        sockets = sockets or {package for package, _ in cores if package != "-1"}
    n_sockets = max(len(sockets), 1)
    per_socket = _int(procs[0].get("cpu cores")) if procs else None
    if cores:
        return n_sockets, len(cores)
    if per_socket:
        return n_sockets, per_socket * n_sockets
    if procs:
        return n_sockets, len(procs)
    return n_sockets, os.cpu_count() if live else None


def _frequency(blocks: list[dict[str, str]], sys_root: Path) -> str | None:
    """Highest maximum clock (big.LITTLE: the big cores), else the clock cpuinfo reports."""
    khz = [_int(_read(path)) for path in
           (sys_root / "devices/system/cpu").glob("cpu[0-9]*/cpufreq/cpuinfo_max_freq")]
    if any(khz):
        return f"{round(max(k for k in khz if k) / 1000)} MHz"
    mhz = [float(block["cpu mhz"]) for block in blocks if "cpu mhz" in block]
    return f"{round(max(mhz))} MHz" if mhz else None


def _caches(sys_root: Path, live: bool) -> str | None:
    """Sizes of one instance of each cache level as cpu0 sees it, e.g. "L1d 48 KiB, L2 2 MiB"."""
    suffix = {"Data": "d", "Instruction": "i", "Unified": ""}
    scale = {"": 1, "K": 1, "M": 1024, "G": 1024**2}
    entries = []
    for index in (sys_root / "devices/system/cpu/cpu0/cache").glob("index[0-9]*"):
        level, kind = _int(_read(index / "level")), _read(index / "type")
        size = re.fullmatch(r"(\d+)\s*([KMG]?)", _read(index / "size") or "")
        if level and kind in suffix and size:
            entries.append((level, suffix[kind], int(size[1]) * scale[size[2]]))
    if entries:
        return ", ".join(f"L{lvl}{sfx} " + (f"{kib / 1024:g} MiB" if kib >= 1024 else f"{kib} KiB")
                         for lvl, sfx, kib in sorted(entries))
    if not (live and shutil.which("lscpu")):
        return None
    data = json.loads(_run(["lscpu", "-J"], timeout=10) or "{}")
    found, stack = {}, list(data.get("lscpu", []))
    while stack:
        item = stack.pop()
        stack.extend(item.get("children", []))
        name = re.fullmatch(r"(L\d[di]?) cache:?", str(item.get("field", "")))
        if name and item.get("data"):
            found[name[1]] = str(item["data"])
    return ", ".join(f"{level} {size}" for level, size in sorted(found.items())) or None


def _memory(proc: Path) -> str | None:
    match = re.search(r"^MemTotal:\s+(\d+)\s*kB", _read(proc / "meminfo") or "", re.M)
    return _size_text(int(match[1]) * 1024) if match else None


def _mount_of(proc: Path, path: Path) -> tuple[str, str, str] | None:
    """(major:minor, fstype, source) of the mount holding ``path``: the deepest mount point."""
    best, depth = None, -1
    for line in (_read(proc / "self/mountinfo") or "").splitlines():
        fields = line.split()
        if "-" not in fields[6:]:
            continue
        sep = fields.index("-", 6)
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4])
        inside = str(path) == point or str(path).startswith(point.rstrip("/") + "/")
        if inside and len(point) >= depth and len(fields) > sep + 2:
            best, depth = (fields[2], fields[sep + 1], fields[sep + 2]), len(point)
    return best


def _disk_kind(device: Path) -> str | None:
    device = device.resolve()
    if (device / "partition").exists():
        device = device.parent
    name, model = device.name, _read(device / "device/model")
    kind = next((kind for prefix, kind in _DISK_PREFIXES if name.startswith(prefix)), None)
    if kind is None:
        rotational = _read(device / "queue/rotational")
        if rotational not in ("0", "1"):
            return None
        kind = "HDD" if rotational == "1" else "NVMe SSD" if name.startswith("nvme") else "SSD"
    return f"{kind} ({model})" if model else kind


def _storage(proc: Path, sys_root: Path, storage_path: Path) -> dict[str, str]:
    """Size and kind of the filesystem the results are written to."""
    path = Path(os.path.abspath(storage_path))
    while not path.exists() and path != path.parent:
        path = path.parent
    path = path.resolve()
    found = {}
    with contextlib.suppress(OSError):
        found["host_storage_capacity"] = _size_text(shutil.disk_usage(path).total)
    mount = _mount_of(proc, path)
    if mount is None:
        return found
    majmin, fstype, source = mount
    if fstype in _FS_KINDS:
        found["host_storage_type"] = _FS_KINDS[fstype]
    elif fstype.startswith(_NETWORK_FS):
        found["host_storage_type"] = f"network filesystem ({fstype})"
    else:
        candidates = [sys_root / "dev/block" / majmin]
        if source.startswith("/dev/"):
            candidates.append(sys_root / "class/block" / Path(source).name)
        kinds = [_disk_kind(c) for c in candidates if c.exists()]
        if any(kinds):
            found["host_storage_type"] = next(kind for kind in kinds if kind)
    return found


def _networking(sys_root: Path) -> dict[str, str]:
    """Physical network ports; ports of one PCI device (dual-port NIC) count as one card."""
    cards, ports = set(), []
    for iface in sorted((sys_root / "class/net").glob("*")):
        device = iface / "device"
        if not device.exists():  # lo, bridges, veth, tunnels
            continue
        addresses = _PCI_ADDRESS.findall(str(device.resolve()))
        cards.add(addresses[-1].rsplit(".", 1)[0] if addresses else str(device.resolve()))
        wireless = (iface / "wireless").exists() or (iface / "phy80211").exists()
        kind = "Wi-Fi" if wireless else {"1": "Ethernet", "32": "InfiniBand"}.get(
            _read(iface / "type") or "", "network")
        speed = _int(_read(iface / "speed"))
        ports.append(f"{kind} ({iface.name}{f', {speed} Mb/s' if speed and speed > 0 else ''})")
    if not ports:
        return {}
    return {"host_networking": "; ".join(ports), "host_network_card_count": str(len(cards))}


def _nvidia_gpus() -> dict[str, Any]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {}
    out = _run([exe, "--query-gpu=name,memory.total", "--format=csv,noheader"],
               NVIDIA_SMI_TIMEOUT_S) or ""
    rows = [[cell.strip() for cell in line.split(",")] for line in out.splitlines() if line.strip()]
    names = [row[0] for row in rows if row[0]]
    if not names:
        return {}
    found: dict[str, Any] = {"accelerators_per_node": len(names), "accelerator_model_name":
                             names[0] if len(set(names)) == 1 else " + ".join(
                                 f"{names.count(n)}x {n}" for n in dict.fromkeys(names))}
    mib = _int(re.sub(r"\s*MiB$", "", rows[0][1])) if len(rows[0]) > 1 else None
    if mib:
        found["accelerator_memory_capacity"] = _size_text(mib * 2**20)
    extra = _run([exe, "--query-gpu=clocks.max.sm,pcie.link.gen.max,pcie.link.width.max,"
                  "driver_version", "--format=csv,noheader,nounits"], NVIDIA_SMI_TIMEOUT_S)
    cells = [cell.strip() for cell in (extra or "").splitlines()[0].split(",")] if extra else []
    cells = [cell if cell and not cell.startswith("[") else "" for cell in cells] + [""] * 4
    if cells[0]:
        found["accelerator_frequency"] = f"{cells[0]} MHz"
    if cells[1] and cells[2]:
        found["accelerator_host_interconnect"] = f"PCIe Gen{cells[1]} x{cells[2]}"
    if cells[3]:
        found["sw_notes"] = f"NVIDIA driver {cells[3]}"
    return found


def _accelerators(proc: Path, sys_root: Path, live: bool) -> dict[str, Any]:
    """nvidia-smi's GPUs; else 0 and N/A, but only if no GPU or accelerator is on the PCI bus
    (or a Jetson's SoC) that nvidia-smi failed to describe: then nothing is claimed."""
    gpus = _nvidia_gpus() if live else {}
    if gpus:
        return gpus
    for device in (sys_root / "bus/pci/devices").glob("*"):
        pci_class, vendor = _read(device / "class") or "", _read(device / "vendor") or ""
        if pci_class.startswith("0x12") or (
                pci_class.startswith("0x03") and vendor in ("0x10de", "0x1002")):
            return {}
    if any(entry.startswith("nvidia,tegra") for entry in _device_tree(proc, "compatible")):
        return {}
    return {"accelerators_per_node": 0, **dict.fromkeys(ACCELERATOR_TEXT_KEYS, NA)}


def _operating_system(proc: Path, etc: Path, live: bool) -> str | None:
    text = _read(etc / "os-release") or _read(etc.parent / "usr/lib/os-release") or ""
    match = re.search(r"^PRETTY_NAME=[\"']?(.*?)[\"']?$", text, re.M)
    release = _read(proc / "sys/kernel/osrelease") or (platform.release() if live else None)
    pretty = match[1] if match and match[1] else None
    if pretty and release:
        return f"{pretty}, Linux {release}"
    return pretty or (f"Linux {release}" if release else None)


def _hw_notes(blocks: list[dict[str, str]], proc: Path) -> str | None:
    notes = [f"Board: {model[0]}" for model in [_device_tree(proc, "model")] if model]
    if blocks and "hypervisor" in blocks[0].get("flags", "").split():
        notes.append("Virtual machine (the CPU reports a hypervisor)")
    return "; ".join(notes) or None


def detect_machine(proc: Path = Path("/proc"), sys_root: Path = Path("/sys"),
                   storage_path: Path = Path("."), *, etc: Path = Path("/etc"),
                   probe_live: bool | None = None) -> dict[str, Any]:
    """What Linux can tell about this machine; a value no probe finds is left out.

    ``storage_path`` is where the results live: its filesystem is the storage described.

    ``probe_live`` also asks the running machine (nvidia-smi, lscpu, os.cpu_count); by default
    only when the roots are the real ``/proc`` and ``/sys``, so fake trees stay self-contained.
    """
    live = proc == Path("/proc") and sys_root == Path("/sys") if probe_live is None else probe_live
    blocks = _soft(_cpuinfo, proc) or []
    sockets, cores = _soft(_topology, blocks, sys_root, live) or (1, None)
    found: dict[str, Any] = {
        "number_of_nodes": 1,
        "host_processor_model_name": _soft(_processor_name, blocks, proc),
        "host_processors_per_node": sockets,
        "host_processor_core_count": cores,
        "host_processor_frequency": _soft(_frequency, blocks, sys_root),
        "host_processor_caches": _soft(_caches, sys_root, live),
        "host_memory_capacity": _soft(_memory, proc),
        "operating_system": _soft(_operating_system, proc, etc, live),
        "hw_notes": _soft(_hw_notes, blocks, proc),
    }
    for probe, args in ((_storage, (proc, sys_root, storage_path)), (_networking, (sys_root,)),
                        (_accelerators, (proc, sys_root, live))):
        found.update(_soft(probe, *args) or {})
    return {key: value for key, value in found.items() if value is not None}
