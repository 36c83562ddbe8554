#!/usr/bin/env bash
# The full nodegate flow on the embedded lab: lab up -> deploy -> gate -> join/drain in Slurm.
# Three simulated H100 nodes; node3's board has a downed NVLink, so the gate must drain it.
# Ends by checking its own outcome (node1/node2 idle, node3 drained naming the NVLink check, a
# second deploy that changes nothing but runs the gate's battery again) and exits non-zero when
# any of that does not hold.
set -euo pipefail
cd "$(dirname "$0")/.."
NODEGATE="$PWD/.venv/bin/nodegate"
LAB="$PWD/.venv/bin/nodegate-lab"
PYINFRA="$PWD/.venv/bin/pyinfra"
OUT="${NODEGATE_DEMO_DIR:-$PWD/reports/demo-lab}"
FAULT="${NODEGATE_DEMO_FAULT:-node3:nvlink-down@gpu3.link5}"
FAULTY="${FAULT%%:*}"
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
"$PYINFRA" -y inventory.py deploy.py --data gate_fetch_dir="$OUT" > "$OUT/redeploy.log" 2>&1 || true
grep -E "Grand total" "$OUT/redeploy.log" || true
changed=$("$PWD/.venv/bin/python" -c 'import sys; from nodegate_lab import deploys
print(", ".join(sorted(deploys.role_changes(sys.stdin.read()))))' < "$OUT/redeploy.log")
if ! grep -qE "Grand total +[0-9]+ +[0-9-]+ +- +" "$OUT/redeploy.log" || [[ -n "$changed" ]]; then
  problems+=("the second deploy changed something (${changed:-or failed}): see $OUT/redeploy.log")
fi

step "Slurm: sinfo on the controller"
"$LAB" shell slurmctl -- sinfo -N -o "%N %T %E" | tee "$OUT/sinfo.txt"
while read -r node state reason; do
  case "$node" in
    NODELIST) ;;
    "$FAULTY")
      [[ "$state" == drained* && "$reason" == "nodegate: nvlink_state"* ]] \
        || problems+=("$node should be drained naming nvlink_state, is: $state $reason") ;;
    *) [[ "$state" == idle* ]] || problems+=("$node should be idle, is: $state $reason") ;;
  esac
done < "$OUT/sinfo.txt"

step "fleet report"
"$NODEGATE" report "$OUT" --html "$OUT/fleet.html" || true
echo "HTML report: $OUT/fleet.html"

if ((${#problems[@]})); then
  step "demo: FAILED"
  printf '  - %s\n' "${problems[@]}"
  exit 1
fi
step "demo: OK (healthy nodes idle, $FAULTY drained by the gate, re-deploy changed nothing)"
