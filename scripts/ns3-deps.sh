#!/bin/sh
# Installs what the ns-3 cross-validation needs (Debian/Ubuntu packages), if it is not there yet:
# ns-3's headers and libraries (libns3-dev) and GSL (libgsl-dev), and a C++ compiler.
set -eu
need=""
for p in libns3-dev libgsl-dev g++ pkg-config; do
    dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
[ -z "$need" ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ccjax: error: ns-3 is missing ($need) and apt-get is not available: install ns-3.37+ with its pkg-config files" >&2
    exit 2
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq $need >/dev/null
