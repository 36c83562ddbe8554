#!/usr/bin/env bash
# The standard level's real-GPU run as one prepared command for a lent H200 machine.
#
# That machine's image has python3 3.12 with torch (CUDA), nvidia-ml-py, PyYAML and attrs, and
# nothing can be fetched there. nodegate runs from src/ (no install); the few wheels it needs
# that the image lacks travel in .whl/ (ignored by git, carried by the device tool).
#
#   here:   bench/h200_device.sh fetch            # wheels for CPython 3.12 -> .whl/
#   there:  bash bench/h200_device.sh run         # device tool: carry [".whl"], timeout_s 600
#   here:   bench/h200_device.sh rehearse         # the run's steps on this machine, CPU/gloo
#
# The table covers the standard level's figures plus the acceptance level's fp8 GEMM
# (torch._scaled_mm) and the whole-HBM pattern test's GB/s (90% of the card's free memory, 30 s).
# `run` writes under $OUT: table.md (the printed table, header included), h200.json (every
# result and both reference sets), progress.log, nvidia-smi.txt; and, from the quick checks run
# first against the real driver: nvidia-smi-q.xml (a capture for the simulator's corpus),
# health.json (the report) and health.txt (the human summary and exit code). Commit table.md
# and the health summary to docs/hardware-runs/ with the date, GPU, driver, torch version and
# command it prints.
set -uo pipefail
cd "$(dirname "$0")/.."

WHEELS=(jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0
        rpds-py==2026.9.1 python-debian==1.1.1)
#: the whole run must end inside the device tool's 10-minute command limit
RUN_LIMIT_S=${RUN_LIMIT_S:-540}
DEVICE_PYTHON=3.12

# fetch DIR PYVER: the wheels, for CPython PYVER on x86-64 Linux, into DIR (emptied first)
fetch() {
    local dir=$1 pyver=$2
    rm -rf "$dir" && mkdir -p "$dir"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$pyver" \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$dir" "${WHEELS[@]}" || exit 2
    ls -l "$dir"
}

# node_checks PYTHON OUT: the quick battery (nodegate health) against the real driver, with the
# shipped h200-single profile as it is, and the capture the simulator's corpus can import.
# Its exit code is recorded (HEALTH_RC), never fatal on the device: a FAIL there is a finding to
# read, not a broken run. The rehearsal fails on 2 or 3 (the step could not run).
node_checks() {
    local python=$1 out=$2 reports
    reports=$(mktemp -d)
    timeout 60 nvidia-smi -q -x > "$out/nvidia-smi-q.xml" 2> /dev/null \
        || echo "nvidia-smi -q -x failed or timed out" >&2
    timeout -k 10 180 "$python" -m nodegate health --profile h200-single --no-textfile \
        --report-dir "$reports" --node-name lent-h200 --color never > "$out/health.txt" 2>&1
    HEALTH_RC=$?
    echo "health exit: $HEALTH_RC" | tee -a "$out/health.txt"
    # the cron path's latency against this driver: process start to exit, 10 runs
    "$python" - "$reports" >> "$out/health.txt" 2>&1 << 'EOF'
import statistics, subprocess, sys, time
argv = [sys.executable, "-m", "nodegate", "health", "--profile", "h200-single", "--quiet",
        "--no-textfile", "--report-dir", sys.argv[1], "--node-name", "lent-h200"]
times, codes = [], set()
for _ in range(10):
    start = time.perf_counter()
    codes.add(subprocess.run(argv, capture_output=True, check=False).returncode)
    times.append(time.perf_counter() - start)
if codes <= {0, 1}:
    print(f"health latency over 10 runs: median {statistics.median(times):.3f} s, "
          f"min {min(times):.3f} s, max {max(times):.3f} s")
else:
    print(f"health latency not measured: exit codes {sorted(codes)}")
EOF
    cp "$reports/quick-latest.json" "$out/health.json" 2> /dev/null || echo "no health report written" >&2
    rm -rf "$reports"
}

# run_bench PYTHON OUT WHEELDIR [bench args...]: install the wheels beside the image's
# packages, then the bench under a deadline
run_bench() {
    local python=$1 out=$2 wheels=$3; shift 3
    mkdir -p "$out"
    if ! compgen -G "$wheels/*.whl" > /dev/null; then
        echo "no wheels in $wheels/: run 'bench/h200_device.sh fetch' first and carry .whl" >&2
        exit 3
    fi
    local site
    site=$(mktemp -d)
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" "$wheels"/*.whl || { echo "wheel install failed" >&2; exit 3; }
    export PYTHONPATH=$site:$PWD/src PYTHONUNBUFFERED=1
    # a sick GPU can leave nvidia-smi stuck: it must not eat the bench's time
    { timeout 30 nvidia-smi -q; timeout 30 nvidia-smi topo -m; } > "$out/nvidia-smi.txt" 2>&1
    node_checks "$python" "$out"
    timeout -k 10 "$RUN_LIMIT_S" "$python" bench/h200_standard.py --json "$out/h200.json" "$@" \
        2> >(tee "$out/progress.log" >&2) | tee "$out/table.md"
    local rc=${PIPESTATUS[0]}
    echo "bench exit: $rc" | tee -a "$out/table.md"
    return "$rc"
}

case "${1:-}" in
    fetch) fetch .whl "${2:-$DEVICE_PYTHON}" ;;
    run) run_bench python3 "${OUT:-/tmp/h200-out}" .whl "${@:2}" ;;
    rehearse)
        # the same steps on this machine, CPU/gloo, in a venv holding only the device image's
        # packages that nodegate's bench path may touch: proves the wheel list and the import
        # path (anything else nodegate imported would fail here first), not any GPU figure.
        # Its wheels are for this machine's python, in a scratch folder: .whl stays the
        # device's. Then it checks that .whl, if present, installs on the device's python.
        scratch=$(mktemp -d)
        trap 'rm -rf "$scratch"' EXIT
        python3 -m venv "$scratch/venv" && "$scratch/venv/bin/python" -m pip install -q \
            torch==2.13.0 pyyaml nvidia-ml-py attrs typing-extensions packaging || exit 2
        fetch "$scratch/whl" "$("$scratch/venv/bin/python" -c \
            'import sys; print("%d.%d" % sys.version_info[:2])')"
        # the simulated one-card H200 below the real nvidia-ml-py, so the health step judges
        # a whole board and reaches every import a real one does (built by the project's venv)
        [ -x .venv/bin/python ] || { echo "rehearse needs the project's venv: make setup" >&2
                                     exit 3; }
        board_env=$(.venv/bin/python -m nodegate sim env h200-single "$scratch/board") || exit 3
        eval "$board_env"
        run_bench "$scratch/venv/bin/python" "${OUT:-/tmp/h200-rehearsal}" "$scratch/whl" \
            --dry-run "${@:2}" || exit $?
        # 0 or 1 is a judged board; 2 or 3 means the health step could not run (a missing
        # package, most likely), which on the device would cost a call
        if [ "${HEALTH_RC:-3}" -gt 1 ]; then
            echo "rehearsal: the health step exited $HEALTH_RC: see health.txt" >&2
            exit 4
        fi
        if compgen -G '.whl/*.whl' > /dev/null; then
            python3 -m pip install --quiet --dry-run --no-deps --no-index --only-binary=:all: \
                --python-version "$DEVICE_PYTHON" --implementation cp \
                --platform manylinux2014_x86_64 --target "$scratch/check" .whl/*.whl \
                && echo ".whl installs on CPython $DEVICE_PYTHON" \
                || { echo ".whl does not install on CPython $DEVICE_PYTHON: fetch again" >&2
                     exit 4; }
        fi ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
esac
