#!/usr/bin/env bash
# The nodegate demo: the gate on simulated 8-GPU H100 boards.
#
# With the lab available (root, systemd-nspawn), the full flow runs there: lab up -> deploy ->
# gate -> join/drain (scripts/demo-lab.sh). Without it, the gate runs on simulated boards
# directly: a healthy one and one with a downed NVLink, the way a node would see them.
set -euo pipefail
cd "$(dirname "$0")/.."
NODEGATE=".venv/bin/nodegate"
OUT="${NODEGATE_DEMO_DIR:-$PWD/reports/demo}"
mkdir -p "$OUT"
export NODEGATE_LOCK_FILE="$OUT/.lock"

if [ -x scripts/demo-lab.sh ] && [ "$(id -u)" -eq 0 ] && command -v systemd-nspawn >/dev/null; then
  exec scripts/demo-lab.sh
fi

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "Hardware profile the nodes are judged against"
"$NODEGATE" profiles show xe9680-h100 | sed -n '1,3p'

run_node() {  # name scenario
  local name=$1 scenario=$2 rc=0
  step "node $name: simulated board $scenario -> nodegate health"
  "$NODEGATE" sim run "$scenario" -- "$NODEGATE" health --profile xe9680-h100 \
    --checks gpu,log --node-name "$name" --report-dir "$OUT/$name" \
    --textfile-dir "$OUT/$name" || rc=$?
  echo "exit code $rc"
  return 0
}
run_node node1 h100-hgx
run_node node2 h100-hgx+nvlink-down@gpu3.link5
run_node node3 h100-hgx+xid79@gpu6+pcie-downtrain@gpu2

step "node node4: a downed RDMA rail (rail-down@nic3) -> the network group"
rc=0
"$NODEGATE" sim run h100-hgx+rail-down@nic3 -- "$NODEGATE" health --profile xe9680-h100 \
  --checks network --node-name node4 --report-dir "$OUT/node4" --no-textfile || rc=$?
echo "exit code $rc"
step "node4's rails: rank -> GPU -> NIC -> NUMA node -> CPUs ($OUT/node4/rail-map.json)"
.venv/bin/python - "$OUT/node4/rail-map.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
print("NCCL_IB_HCA", m["nccl_ib_hca"])
for r in m["ranks"]:
    print(r["rank"], r["gpu"], r["gpu_bus_id"], [n["device"] for n in r["nics"]],
          "numa", r["numa_node"], "cpus", r["cpus"])
PY

step "The same checks as a pytest battery (node2)"
"$NODEGATE" sim run h100-hgx+nvlink-down@gpu3.link5 -- .venv/bin/python -m pytest validation \
  -q -p no:cacheprovider --nodegate-profile xe9680-h100 --nodegate-checks gpu,log \
  2>&1 | grep -E "FAILED|passed|failed" || true

step "Reports"
ls "$OUT"/*/quick-latest.json
