#!/usr/bin/env bash
# The full nodegate flow on the embedded lab: lab up -> deploy -> gate -> join/drain in Slurm.
# Three simulated H100 nodes; node3's board has a downed NVLink (NODEGATE_DEMO_FAULT: e.g.
# node3:rail-down@nic3, a downed RDMA rail), so the gate must drain it.
# Ends by checking its own outcome (node1/node2 idle, node3 drained naming the NVLink check, a
# second deploy that changes nothing but runs the gate's battery again and exits as the first
# did: node3 still drained fails its host again) and exits non-zero when any of that does not
# hold.
set -euo pipefail
cd "$(dirname "$0")/.."
NODEGATE="$PWD/.venv/bin/nodegate"
LAB="$PWD/.venv/bin/nodegate-lab"
PYINFRA="$PWD/.venv/bin/pyinfra"
OUT="${NODEGATE_DEMO_DIR:-$PWD/reports/demo-lab}"
FAULT="${NODEGATE_DEMO_FAULT:-node3:nvlink-down@gpu3.link5}"
FAULTY="${FAULT%%:*}"
# the check the fault must drain on (rail-down@nicN: the RDMA rail's port state)
case "$FAULT" in
  *rail-down@*) CHECK=ib_port_state ;;
  *rail-rate@*) CHECK=ib_port_rate ;;
  *) CHECK=nvlink_state ;;
esac
CHECK="${NODEGATE_DEMO_CHECK:-$CHECK}"
# the lab's site file: `lab` (inventory/lab.yaml) for the default lab, the instance's own
# file for NODEGATE_LAB_INSTANCE=N, so a second lab's demo never deploys to the default one
NODEGATE_SITE=$("$PWD/.venv/bin/python" -c 'from nodegate_lab import config, sitefile
print("lab" if not config.INSTANCE else sitefile.site_path())')
export NODEGATE_SITE
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
problems=()

rm -rf "$OUT"  # reports of an earlier run must not stand in for this one's
mkdir -p "$OUT"

step "lab up: 3 nodes, fault $FAULT"
"$LAB" up --nodes 3 --fault "$FAULT"
"$LAB" status
# the BMC/PDU credentials the pdu_monitor role pushes to the nodes (references in the site file)
set -a
# shellcheck disable=SC1090
. "$("$PWD/.venv/bin/python" -c 'from nodegate_lab import services; print(services.env_file())')"
set +a

step "deploy: pyinfra inventory.py deploy.py (roles, then validate + join)"
set +e
"$PYINFRA" -y inventory.py deploy.py --data gate_fetch_dir="$OUT" 2>&1 | tee "$OUT/deploy.log"
rc=${PIPESTATUS[0]}
set -e
echo "pyinfra exit $rc (a host that failed its gate fails the run)"
if grep -q "pyinfra error" "$OUT/deploy.log"; then
  problems+=("the deploy stopped before the gate: $(grep 'pyinfra error' "$OUT/deploy.log")")
fi

step "second deploy: nothing may change but the gate's battery run (an action on every deploy)"
rerun_rc=0
"$PYINFRA" -y inventory.py deploy.py --data gate_fetch_dir="$OUT" > "$OUT/redeploy.log" 2>&1 \
  || rerun_rc=$?
grep -E "Grand total" "$OUT/redeploy.log" || true
# the same fleet state, the same answer: $FAULTY is still failing and drained, so the rerun
# fails its host as the first deploy did (roles/ops/gate_results.held_out), with the same exit code
echo "pyinfra exit $rerun_rc (a host that failed its gate fails the run)"
changed=$("$PWD/.venv/bin/python" -c 'import sys; from nodegate_lab import deploys
print(", ".join(sorted(deploys.role_changes(sys.stdin.read()))))' < "$OUT/redeploy.log")
errors() {  # the error column of a log's Grand total row ("-" is 0)
  "$PWD/.venv/bin/python" -c 'import sys; from nodegate_lab import deploys
t = deploys.parse_totals(sys.stdin.read()); print("none" if t is None else t.errors)' < "$1"
}
if [[ -n "$changed" ]]; then
  problems+=("the second deploy changed something ($changed): see $OUT/redeploy.log")
fi
if [[ "$rerun_rc" != "$rc" || "$(errors "$OUT/redeploy.log")" != "$(errors "$OUT/deploy.log")" ]]
then
  problems+=("the second deploy exited $rerun_rc with $(errors "$OUT/redeploy.log") error(s), \
the first $rc with $(errors "$OUT/deploy.log"): the same state must give the same answer")
fi

step "Slurm: sinfo on the controller"
"$LAB" shell slurmctl -- sinfo -N -o "%N %T %E" | tee "$OUT/sinfo.txt"
while read -r node state reason; do
  case "$node" in
    NODELIST) ;;
    "$FAULTY")
      [[ "$state" == drained* && "$reason" == "nodegate: $CHECK"* ]] \
        || problems+=("$node should be drained naming $CHECK, is: $state $reason") ;;
    *) [[ "$state" == idle* ]] || problems+=("$node should be idle, is: $state $reason") ;;
  esac
done < "$OUT/sinfo.txt"

step "node1's rails and GPU-NIC-NUMA map (evidence of ib_rail_count; rail-map.json on the node)"
"$PWD/.venv/bin/python" - "$OUT/node1/quick-latest.json" <<'PY' || problems+=("node1 has no rail map")
import json, sys
rail = next(r for r in json.load(open(sys.argv[1]))["results"] if r["check"] == "ib_rail_count")
m = rail["evidence"]["rail_map"]
print("ib_rail_count", rail["verdict"], rail["measured"], "NCCL_IB_HCA", m["nccl_ib_hca"])
for r in m["ranks"]:
    print(r["rank"], r["gpu"], r["gpu_bus_id"], [n["device"] for n in r["nics"]],
          "numa", r["numa_node"], "cpus", r["cpus"])
PY
"$LAB" shell node1 -- cat /etc/nccl.conf

step "fleet report"
"$NODEGATE" report "$OUT" --html "$OUT/fleet.html" || true
echo "HTML report: $OUT/fleet.html"

if ((${#problems[@]})); then
  step "demo: FAILED"
  printf '  - %s\n' "${problems[@]}"
  exit 1
fi
step "demo: OK (healthy nodes idle, $FAULTY drained by the gate, re-deploy changed nothing)"
