#!/usr/bin/env bash
# The full nodegate flow on the embedded lab: lab up -> deploy -> gate -> join/drain in Slurm.
# Three simulated H100 nodes; node3's board has a downed NVLink, so the gate must drain it.
set -euo pipefail
cd "$(dirname "$0")/.."
NODEGATE="$PWD/.venv/bin/nodegate"
PYINFRA="$PWD/.venv/bin/pyinfra"
OUT="${NODEGATE_DEMO_DIR:-$PWD/reports/demo-lab}"
FAULT="${NODEGATE_DEMO_FAULT:-node3:nvlink-down@gpu3.link5}"
export NODEGATE_SITE=lab
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "lab up: 3 nodes, fault $FAULT"
"$NODEGATE" lab up --nodes 3 --fault "$FAULT"
"$NODEGATE" lab status

step "deploy: pyinfra inventory.py deploy.py (roles, then validate + join)"
rc=0
"$PYINFRA" -y inventory.py deploy.py --data gate_fetch_dir="$OUT" || rc=$?
echo "pyinfra exit $rc (a host that failed its gate fails the run)"

step "second deploy: nothing may change"
"$PYINFRA" -y inventory.py deploy.py --data gate_fetch_dir="$OUT" 2>&1 \
  | grep -E "Changed|No changes|changed" | tail -5 || true

step "Slurm: sinfo on the controller"
"$NODEGATE" lab shell slurmctl -- sinfo -N -o "%N %T %E"

step "fleet report"
"$NODEGATE" report "$OUT" --html "$OUT/fleet.html" || true
echo "HTML report: $OUT/fleet.html"
