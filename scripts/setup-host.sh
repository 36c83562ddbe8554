#!/usr/bin/env bash
# Install the Debian packages the tests and the lab need (only when root and missing).
set -euo pipefail
PACKAGES=(gcc make python3-venv ruby chromium)
# each subsystem lists what its tests need (power, cluster, ...; the lab's is in lab/)
for list in src/nodegate/*/host-packages.txt lab/src/nodegate_lab/host-packages.txt; do
  [ -f "$list" ] && mapfile -t -O "${#PACKAGES[@]}" PACKAGES < <(grep -v '^#' "$list" | grep -v '^$')
done
missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-host: missing Debian packages (${missing[*]}); run as root to install them" >&2
    exit 0
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "setup-host: installed ${missing[*]}"
fi
# the lab's kernel features: modules on most kernels, built in on others
if [ "$(id -u)" -eq 0 ]; then
  for mod in overlay loop veth bridge; do
    modprobe -q "$mod" 2>/dev/null || true
  done
fi
