#!/usr/bin/env bash
# quantmark on an emulated Raspberry-Pi-like arm64 Debian bookworm userland, end to end.
#
#   sudo tools/arm_check.sh [--images N] [--setup-only]
#
# Run as root on an x86-64 Debian machine with qemu-user-static, binfmt-support and debootstrap.
# 1. Builds (once; cached in $QUANTMARK_ARM_CACHE, default /var/cache/quantmark-arm) an arm64
#    bookworm userland with python3, g++ and python3-dev, run through qemu's binfmt handler.
# 2. Installs quantmark's lean Pi set inside it with tools/pi_install.sh (LoadGen built from
#    source, as on a Pi), then checks that a SUT whose framework is absent, a missing compiler
#    and a model exported for another input size each give one clear line.
# 3. Exports MobileNetV2 for tflite-fp32 and tflite-int8 on this machine (run.py export).
# 4. Runs SingleStream and Offline (performance) and accuracy for both SUTs inside the userland
#    on N images of the exported dataset, the same accuracy runs here on x86, and asserts VALID
#    logs, an aarch64 fingerprint, INT8 executed as INT8, and the same predicted class for every
#    image on both machines (report.agreement).
# Emulated speed means nothing (float runs ~350x slower than native); correctness does.
set -euo pipefail

PROJECT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${QUANTMARK_ARM_CACHE:-/var/cache/quantmark-arm}
ROOTFS=$CACHE/bookworm-arm64
READY=$ROOTFS/.quantmark-rootfs-1
WORK=$CACHE/work
CORE=${QUANTMARK_ARM_CORE:-cortex-a76}  # QEMU's core; the fake cpuinfo says the same
IMAGES=32
SETUP_ONLY=0
HOST_PY=${PYTHON:-}
[ -n "$HOST_PY" ] || { [ -x "$PROJECT/.venv/bin/python" ] && HOST_PY=$PROJECT/.venv/bin/python; } ||
    HOST_PY=python3

while [ $# -gt 0 ]; do
    case $1 in
        --images) IMAGES=$2; shift 2 ;;
        --setup-only) SETUP_ONLY=1; shift ;;
        *) echo "arm_check: unknown argument $1 (use --images N, --setup-only)" >&2; exit 2 ;;
    esac
done

say() { echo "[arm_check $(date +%H:%M:%S)] $*"; }
die() { echo "arm_check: FAILED: $*" >&2; exit 1; }
trap 'echo "arm_check: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR

# ------------------------------------------------------------------ host preflight
[ "$(id -u)" = 0 ] || die "run as root (it mounts and chroots): sudo $0"
[ "$(uname -m)" = x86_64 ] || die "this emulates arm64 on an x86-64 host; on a real Pi follow docs/commands/export.md"
for tool in debootstrap qemu-aarch64-static update-binfmts chroot; do
    command -v $tool >/dev/null ||
        die "$tool not found: apt install qemu-user-static binfmt-support debootstrap"
done
mountpoint -q /proc/sys/fs/binfmt_misc ||
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
update-binfmts --enable qemu-aarch64 2>/dev/null || true
grep -q '^flags:.*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null ||
    die "qemu-aarch64 binfmt handler not registered with the F flag (update-binfmts failed)"

MOUNTS=()
cleanup() {
    local i
    for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do umount -R -l "${MOUNTS[i]}" 2>/dev/null || true; done
    MOUNTS=()
}
trap cleanup EXIT

mount_system() {  # $1: rootfs
    mount -t proc proc "$1/proc" && MOUNTS+=("$1/proc")
    mount --rbind /sys "$1/sys" && mount --make-rslave "$1/sys" && MOUNTS+=("$1/sys")
    mount --rbind /dev "$1/dev" && mount --make-rslave "$1/dev" && MOUNTS+=("$1/dev")
    # LiteRT crashes at start when the guest reads the host's x86 cpuinfo: show it an ARM one
    fake_cpuinfo >"$CACHE/cpuinfo"
    mount --bind "$CACHE/cpuinfo" "$1/proc/cpuinfo" && MOUNTS+=("$1/proc/cpuinfo")
}

fake_cpuinfo() {  # a Cortex-A76 (Raspberry Pi 5) or -A72 (Pi 4), one entry per host CPU
    local part=0xd0b variant=0x4 features="fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp"
    [ "$CORE" = cortex-a72 ] && { part=0xd08; variant=0x0; features="fp asimd evtstrm crc32 cpuid"; }
    for ((cpu = 0; cpu < $(nproc); cpu++)); do
        printf 'processor\t: %d\nBogoMIPS\t: 108.00\nFeatures\t: %s\nCPU implementer\t: 0x41\n' \
            "$cpu" "$features"
        printf 'CPU architecture: 8\nCPU variant\t: %s\nCPU part\t: %s\nCPU revision\t: 1\n\n' \
            "$variant" "$part"
    done
}

in_arm() {  # run a bash script inside the userland, with a clean environment
    chroot "$ROOTFS" /usr/bin/env -i HOME=/root LANG=C.UTF-8 QEMU_CPU="$CORE" \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        PIP_CERT=/etc/ssl/certs/ca-certificates.crt PIP_DISABLE_PIP_VERSION_CHECK=1 \
        QUANTMARK_CACHE=/opt/qm-work/cache-arm /bin/bash -euo pipefail -c "$1"
}

# ------------------------------------------------------------------ 1. the userland
mirror() {  # the Debian mirror this host's apt uses
    local uri
    uri=$(grep -hoE '^(URIs:|deb) +https?://[^ ]+' /etc/apt/sources.list.d/*.sources \
        /etc/apt/sources.list 2>/dev/null | grep -v security | head -1 | awk '{print $2}')
    echo "${uri:-http://deb.debian.org/debian}"
}

build_rootfs() {
    local tmp=$ROOTFS.tmp started=$SECONDS
    cleanup
    rm -rf "$tmp"
    mkdir -p "$CACHE"
    say "building the arm64 bookworm userland in $ROOTFS (once; about 15 minutes)"
    debootstrap --arch=arm64 --foreign --variant=minbase --include=ca-certificates \
        bookworm "$tmp" "$(mirror)" >"$CACHE/debootstrap.log" 2>&1 ||
        die "debootstrap (download) failed; see $CACHE/debootstrap.log"
    chroot "$tmp" /debootstrap/debootstrap --second-stage >>"$CACHE/debootstrap.log" 2>&1 ||
        die "debootstrap second stage (emulated) failed; see $CACHE/debootstrap.log"
    # this host's apt sources and settings, DNS and extra CA certificates (HTTPS here may be
    # re-signed by a local CA: without it pip fails with CERTIFICATE_VERIFY_FAILED)
    if compgen -G "/etc/apt/sources.list.d/*" >/dev/null; then
        rm -f "$tmp/etc/apt/sources.list"  # debootstrap's own line would be listed twice
        cp -a /etc/apt/sources.list.d/. "$tmp/etc/apt/sources.list.d/"
    fi
    if [ -f /etc/apt/sources.list ]; then cp /etc/apt/sources.list "$tmp/etc/apt/"; fi
    cp -a /etc/apt/apt.conf.d/. "$tmp/etc/apt/apt.conf.d/" 2>/dev/null || true
    cp -L /etc/resolv.conf "$tmp/etc/resolv.conf"
    mkdir -p "$tmp/usr/local/share/ca-certificates"
    cp -a /usr/local/share/ca-certificates/. "$tmp/usr/local/share/ca-certificates/" 2>/dev/null || true
    mount_system "$tmp"
    ROOTFS=$tmp in_arm "update-ca-certificates >/dev/null 2>&1
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            python3 python3-venv python3-pip python3-dev g++ >/dev/null" \
        >>"$CACHE/debootstrap.log" 2>&1 || die "apt in the userland failed; see $CACHE/debootstrap.log"
    cleanup
    touch "$tmp/.quantmark-rootfs-1"
    rm -rf "$ROOTFS"
    mv "$tmp" "$ROOTFS"
    say "userland ready in $((SECONDS - started)) s ($(du -sh "$ROOTFS" | cut -f1))"
}

[ -f "$READY" ] || build_rootfs
mount_system "$ROOTFS"
[ "$(in_arm 'uname -m')" = aarch64 ] || die "the userland does not run as aarch64"

# ------------------------------------------------------------------ 2. the Pi install
mkdir -p "$WORK"
mkdir -p "$ROOTFS/opt/qm-work"
mount --bind "$WORK" "$ROOTFS/opt/qm-work" && MOUNTS+=("$ROOTFS/opt/qm-work")
say "copying the project into the userland"
rm -rf "$ROOTFS/opt/quantmark"
mkdir -p "$ROOTFS/opt/quantmark"
if git -C "$PROJECT" rev-parse --git-dir >/dev/null 2>&1; then  # the files git would commit
    git -C "$PROJECT" ls-files -co --exclude-standard -z |
        tar -C "$PROJECT" --null --no-recursion -T - -cf - | tar -xf - -C "$ROOTFS/opt/quantmark"
else
    tar -C "$PROJECT" --exclude=.venv --exclude=results -cf - . | tar -xf - -C "$ROOTFS/opt/quantmark"
fi
started=$SECONDS
say "tools/pi_install.sh inside the userland (LoadGen builds from source the first time)"
in_arm "cd /opt/quantmark && tools/pi_install.sh /opt/qm-venv" >"$WORK/pi_install.log" 2>&1 ||
    die "tools/pi_install.sh failed in the userland; see $WORK/pi_install.log"
say "installed in $((SECONDS - started)) s: $(tail -1 "$WORK/pi_install.log")"
in_arm "/opt/qm-venv/bin/python -c 'import sys; import quantmark.commands, quantmark.run.test_process, quantmark.sut.tflite.backend
heavy = [m for m in (\"torch\", \"tensorflow\", \"openvino\", \"onnxruntime\", \"matplotlib\") if m in sys.modules]
assert not heavy, heavy'" || die "importing quantmark pulled a heavy framework on arm64"
[ "$SETUP_ONLY" = 1 ] && { say "setup done (--setup-only)"; exit 0; }

# ------------------------------------------------------------------ 3. export on x86
say "exporting MobileNetV2 tflite-fp32 and tflite-int8 on this machine with $HOST_PY"
"$HOST_PY" "$PROJECT/run.py" export --sut tflite-fp32,tflite-int8 --model mobilenetv2 \
    --output "$WORK/export" >"$WORK/export.log" 2>&1 || die "export failed; see $WORK/export.log"
rm -rf "$WORK/data" "$WORK/x86" "$WORK/arm" "$WORK/x86.log" "$WORK/arm.log"
mkdir -p "$WORK/data/val"
head -n "$IMAGES" "$WORK/export/dataset/val_map.txt" >"$WORK/data/val_map.txt"
while read -r image _; do cp "$WORK/export/dataset/$image" "$WORK/data/$image"; done <"$WORK/data/val_map.txt"
printf '*.*.min_duration = 1000\n' >"$WORK/short.conf"

# ------------------------------------------------------------------ bad input, one line each
one_line() {  # $1: what, $2: expected words, $3: the captured stderr, $4: the exit code
    [ "$4" != 0 ] || die "$1: exited 0"
    [ "$(printf '%s\n' "$3" | grep -c .)" = 1 ] || die "$1: not one line: $3"
    printf '%s' "$3" | grep -q -- "$2" || die "$1: no '$2' in: $3"
    say "bad input, $1 -> $3"
}
rc=0; err=$(in_arm "cd /opt/quantmark && CXX=no-such-g++ \
    tools/pi_install.sh /opt/qm-work/venv-nocc" 2>&1 >/dev/null) || rc=$?
one_line "no compiler for LoadGen" "sudo apt install g++" "$err" "$rc"
rc=0; err=$(in_arm "cd /opt/quantmark && /opt/qm-venv/bin/python run.py --scenario Offline \
    --sut ort-int8 --model mobilenetv2 --dataset-path /opt/qm-work/data --output /tmp/x" 2>&1) || rc=$?
one_line "a SUT whose framework is absent" "pip install 'quantmark\[ort\]'" "$err" "$rc"
"$HOST_PY" "$PROJECT/tools/make_tflite.py" --size 160 "$WORK/mobilenetv2-160.tflite" \
    >"$WORK/make_tflite.log" 2>&1 || die "could not write the 160x160 model; see $WORK/make_tflite.log"
rc=0; err=$(in_arm "cd /opt/quantmark && /opt/qm-venv/bin/python run.py --scenario Offline \
    --sut tflite-fp32 --model mobilenetv2 --model-path /opt/qm-work/mobilenetv2-160.tflite \
    --dataset-path /opt/qm-work/data --output /tmp/x" 2>&1) || rc=$?
one_line "a model exported for another input size" "re-export the classifier for this size" "$err" "$rc"

# ------------------------------------------------------------------ 4. runs and checks
run_x86() {
    "$HOST_PY" "$PROJECT/run.py" --output "$WORK/x86" --dataset-path "$WORK/data" \
        --user-conf "$WORK/short.conf" "$@" >>"$WORK/x86.log" 2>&1 || die "x86 run $* failed; see $WORK/x86.log"
}
run_arm() {
    local started=$SECONDS
    in_arm "cd /opt/quantmark && /opt/qm-venv/bin/python run.py --output /opt/qm-work/arm \
        --dataset-path /opt/qm-work/data --user-conf /opt/qm-work/short.conf $*" >>"$WORK/arm.log" 2>&1 ||
        die "arm64 run $* failed; see $WORK/arm.log"
    say "arm64 $*: $(tail -1 "$WORK/arm.log" | cut -c1-110) ($((SECONDS - started)) s)"
}
for sut in tflite-fp32 tflite-int8; do
    model="--model-path /opt/qm-work/export/mobilenetv2-$sut.tflite"
    # emulated float runs ~350x slower: batch 1 for accuracy (the fewest warm-up samples),
    # batch 4 for Offline so the batched invoke runs too (SingleStream invokes one sample)
    run_x86 --scenario Offline --sut "$sut" --mode accuracy --batch-size 1 \
        --model-path "$WORK/export/mobilenetv2-$sut.tflite"
    run_arm --scenario Offline --sut "$sut" --mode accuracy --batch-size 1 "$model"
    run_arm --scenario SingleStream --sut "$sut" "$model"
    run_arm --scenario Offline --sut "$sut" --batch-size 4 "$model"
done

say "checking the logs"
for sut in tflite-fp32 tflite-int8; do
    for scenario in SingleStream Offline; do
        summary=$(ls "$WORK"/arm/*-"$sut"/mobilenetv2/$scenario/performance/run_1/mlperf_log_summary.txt)
        grep -q "Result is : VALID" "$summary" || die "$summary is not VALID"
    done
    results=$(ls "$WORK"/arm/*-"$sut"/mobilenetv2/SingleStream/performance/run_1/results.json)
    facts=$("$HOST_PY" - "$results" "$sut" <<'EOF'
import json, sys
results, sut = json.load(open(sys.argv[1])), sys.argv[2]
machine = results["machine"]
assert machine["arch"] == "aarch64", machine["arch"]
assert machine["board"]["cpu_core"] in ("Cortex-A76", "Cortex-A72"), machine["board"]
assert "thermal" in machine and "throttled" in machine["thermal"], machine.get("thermal")
assert results["sut"]["executed_precision"] == sut.split("-")[1], results["sut"]
assert results["sut"]["xnnpack"]["delegated_nodes"] > 0, results["sut"]["xnnpack"]
record = results["model"]["meta"]["export_record"]
assert record and record["sut"] == sut and record["exported_on"]["arch"] == "x86_64", record
if sut == "tflite-int8":
    assert record["calibration"]["count"] > 0, record["calibration"]
print(f"{sut}: {machine['arch']} {machine['board']['cpu_core']}, executed "
      f"{results['sut']['executed_precision']}, {results['sut']['threads']} XNNPACK threads")
EOF
    ) || die "$results: wrong fingerprint or precision"
    say "$facts"
    x86_log=$(ls "$WORK"/x86/*-"$sut"/mobilenetv2/Offline/accuracy/mlperf_log_accuracy.json)
    arm_log=$(ls "$WORK"/arm/*-"$sut"/mobilenetv2/Offline/accuracy/mlperf_log_accuracy.json)
    (cd "$PROJECT" && "$HOST_PY" -m quantmark.report.agreement "$x86_log" "$arm_log") \
        >"$WORK/agreement-$sut.txt" 2>&1 || die "x86 and arm64 predictions differ: $(cat "$WORK/agreement-$sut.txt")"
    say "$sut x86 vs arm64 predictions: $(head -1 "$WORK/agreement-$sut.txt")"
done
# ------------------------------------------------------------------ 5. ONNX Runtime on aarch64
# its aarch64 wheel exists: the ORT SUT runs there too (installed for this step, then removed
# so the Pi venv stays lean for the next check)
say "ONNX Runtime's aarch64 wheel: ort-fp32 SingleStream on a small ONNX model"
(cd "$PROJECT" && "$HOST_PY" -c "import sys; from pathlib import Path
from tests.quantmark.test_cli import tiny_onnx; tiny_onnx(Path(sys.argv[1]))" "$WORK/tiny.onnx") ||
    die "could not write the small ONNX model"
in_arm "/opt/qm-venv/bin/pip install -q --no-compile onnxruntime onnx" >>"$WORK/pi_install.log" 2>&1 ||
    die "pip could not install onnxruntime in the userland; see $WORK/pi_install.log"
rc=0
in_arm "cd /opt/quantmark && /opt/qm-venv/bin/python run.py --output /opt/qm-work/arm \
    --dataset-path /opt/qm-work/data --user-conf /opt/qm-work/short.conf --scenario SingleStream \
    --sut ort-fp32 --model mobilenetv2 --model-path /opt/qm-work/tiny.onnx" >>"$WORK/arm.log" 2>&1 || rc=$?
in_arm "/opt/qm-venv/bin/pip uninstall -q -y onnxruntime onnx" >/dev/null 2>&1 || true
[ "$rc" = 0 ] || die "ort-fp32 failed on arm64; see $WORK/arm.log"
say "arm64 ort-fp32 SingleStream: $(tail -1 "$WORK/arm.log" | cut -c1-110)"
summary=$(ls "$WORK"/arm/*-ort-fp32/mobilenetv2/SingleStream/performance/run_1/mlperf_log_summary.txt)
grep -q "Result is : VALID" "$summary" || die "$summary is not VALID"
say "PASS: quantmark runs on arm64 (emulated $CORE); logs in $WORK/arm, x86 reference in $WORK/x86"
