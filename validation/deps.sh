#!/usr/bin/env bash
# deps.sh — install the Debian/Ubuntu packages llmtrain needs (make deps), or say what to do.
#   bash validation/deps.sh              install whatever is missing (root), else print the command
#   bash validation/deps.sh --if-missing same, but silent when everything is present
# On a cluster without apt, load the modules listed in INSTALL instead (see modules/).
set -u
PACKAGES="make gcc pkg-config openmpi-bin libopenmpi-dev libhdf5-openmpi-dev hdf5-tools \
libhwloc-dev hwloc libpapi-dev libopenblas-dev libcmocka-dev python3 python3-numpy python3-h5py \
python3-torch"
quiet=0
[ "${1:-}" = "--if-missing" ] && quiet=1

if ! command -v dpkg-query >/dev/null 2>&1; then
    [ $quiet -eq 1 ] && exit 0
    echo "deps: no dpkg here: install OpenMPI, parallel HDF5, hwloc, PAPI, a CBLAS and cmocka"
    echo "      with your site's modules (see INSTALL) and set paths in Makefile.inc."
    exit 0
fi

missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    [ $quiet -eq 1 ] || echo "deps: all packages present"
    exit 0
fi
echo "deps: missing Debian packages:$missing"
if [ "$(id -u)" -ne 0 ]; then
    echo "deps: not root. Ask an administrator, or run:"
    echo "  sudo apt-get update && sudo apt-get install -y$missing"
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null &&
    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends $missing ||
    { echo "deps: apt-get install failed (see above)"; exit 1; }
echo "deps: installed$missing"
