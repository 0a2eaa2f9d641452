#!/usr/bin/env bash
# bundle.sh — on the BUILD machine: the Debian runtime libraries llmtrain's CUDA build needs and the
# GPU machine lacks (OpenMPI with mpirun, HDF5, hwloc, PAPI, the GEMM library, PCRE2, cmocka),
# unpacked with dpkg -x into .gpu-bundle/root of the working tree (git-ignored; the device tool
# carries it), with .gpu-bundle/env.sh setting PATH, LD_LIBRARY_PATH and OPAL_PREFIX for it.
# The packages are those owning the libraries the binaries of build-cuda/ link (ldd), plus
# openmpi-bin for mpirun; the .deb files come from /var/cache/apt/archives, else apt-get download.
#   make CUDA=1 build-cuda/llmtrain build-cuda/gpu/test_cuda_ops build-cuda/gpu/device_probe
#   bash validation/gpu/bundle.sh          (then carry .gpu-bundle and build-cuda: README.md here)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=.gpu-bundle
bins=$(ls build-cuda/llmtrain build-cuda/gpu/* 2>/dev/null | grep -v '\.d$' || true)
[ -n "$bins" ] || { echo "bundle.sh: build first: make CUDA=1 build-cuda/gpu/device_probe ..." >&2; exit 2; }
# libraries every Linux with PyTorch and CUDA has (glibc, gcc runtime, the CUDA toolkit's own)
base='/(libc|libm|libdl|librt|libpthread|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcudart|libcublas|libcublasLt|libnccl)\.so'
libs=$(for b in $bins; do ldd "$b" | awk '$3 ~ /^\// {print $3}'; done | sort -u | grep -Ev "$base" || true)
pkgs=$(for l in $libs; do dpkg -S "$(readlink -f "$l")" 2>/dev/null || dpkg -S "$l" 2>/dev/null; done |
       cut -d: -f1 | sort -u)
pkgs="$pkgs openmpi-bin openmpi-common"
rm -rf "$OUT" && mkdir -p "$OUT/debs" "$OUT/root"
for p in $pkgs; do
    v=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || true)
    deb=$(ls /var/cache/apt/archives/"${p}"_*.deb 2>/dev/null | grep -F "_${v//:/%3a}_" | head -1 || true)
    if [ -z "$deb" ]; then (cd "$OUT/debs" && apt-get download "$p${v:+=$v}" >/dev/null) && deb=$(ls "$OUT/debs/${p}"_*.deb | head -1); fi
    dpkg -x "$deb" "$OUT/root"
    echo "  $p $v"
done
rm -rf "$OUT/debs" "$OUT/root/usr/share/doc" "$OUT/root/usr/share/man"
cat >"$OUT/env.sh" <<'ENV'
# source .gpu-bundle/env.sh: run the bundled OpenMPI and libraries from this working tree
b="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/root"
export PATH="$b/usr/bin:$PATH"
export LD_LIBRARY_PATH="$b/usr/lib/x86_64-linux-gnu:$b/usr/lib/x86_64-linux-gnu/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$b/usr" OPAL_LIBDIR="$b/usr/lib/x86_64-linux-gnu/openmpi/lib"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ENV
echo "bundle.sh: $(du -sh "$OUT" | cut -f1) in $OUT (the device tool carries at most 64 MiB with build-cuda/)"
