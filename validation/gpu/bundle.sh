#!/usr/bin/env bash
# bundle.sh — on the BUILD machine: what the CUDA build's binaries need at run time and a GPU
# machine with only the CUDA toolkit, NCCL and PyTorch lacks, into .gpu-bundle/root of the working
# tree (git-ignored; the device tool carries it), with .gpu-bundle/env.sh to use it.
#  - OpenMPI's packages (libopenmpi3, openmpi-bin, openmpi-common, libpmix2): programs, plugins
#    (dlopen'ed, so ldd does not see them) and help texts: the files the installed packages list
#    (dpkg -L), which is what `dpkg -x` of their .debs unpacks, taken from the disk because apt may
#    no longer offer the installed version (it did not for libcom-err2 once);
#  - every shared library the binaries and those plugins load (ldd: the whole closure), by soname
#    into root/usr/lib/x86_64-linux-gnu, except the C and C++ runtime and the CUDA libraries: the
#    GPU machine has its own, and a bundled glibc would break its programs.
# The binaries are its own build, into build-gpu/ (CUDA_BUILD), for x86-64-v3 (AVX2, FMA): the
# GPU machine's processor is not this one, and -march=native here (an AMX Xeon) could emit
# AVX-512 or AVX512-FP16 instructions it lacks (MARCH=native to keep this machine's).
# Then it checks itself: with env.sh each of those libraries resolves inside the bundle (ldd), and
# the archive of bundle + binaries fits the device tool's 64 MiB. env.sh finds libcudart, cuBLAS
# and NCCL on the GPU machine at run time (the CUDA toolkit's lib64, the loader's cache,
# PyTorch's nvidia/*/lib).
#   bash validation/gpu/bundle.sh          (then carry .gpu-carry: README.md here)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=.gpu-bundle
ROOT=$OUT/root
LIB=$ROOT/usr/lib/x86_64-linux-gnu
GPU_BUILD=build-gpu
mkdir -p "$GPU_BUILD"
make --no-print-directory -j"$(nproc)" CUDA=1 CUDA_BUILD=$GPU_BUILD \
    OPTFLAGS="-O3 -march=${MARCH:-x86-64-v3} -fno-math-errno" $GPU_BUILD/llmtrain \
    $GPU_BUILD/gpu/test_cuda_ops $GPU_BUILD/gpu/device_probe $GPU_BUILD/gpu/check_attn_matmul \
    >"$GPU_BUILD/build.log" 2>&1 || { tail -20 "$GPU_BUILD/build.log"; echo "bundle.sh: the build failed" >&2; exit 1; }
bins=$(for f in $GPU_BUILD/llmtrain $GPU_BUILD/gpu/*; do
    [ -f "$f" ] && [ -x "$f" ] && echo "$f"; done || true)
# what every Linux with PyTorch and CUDA has: glibc, the gcc runtime, the CUDA toolkit's own
base='^(linux-vdso|libc|libm|libdl|librt|libpthread|libresolv|libutil|libnsl|libanl|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia-[a-z-]*)\.so'
rm -rf "$OUT" && mkdir -p "$LIB"
for p in libopenmpi3 openmpi-bin openmpi-common libpmix2; do
    n=0
    while read -r f; do
        case "$f" in /usr/share/doc/* | /usr/share/man/* | /usr/share/lintian/*) continue ;; esac
        if [ -L "$f" ] || [ -f "$f" ]; then
            mkdir -p "$ROOT$(dirname "$f")" && cp -a "$f" "$ROOT$f" && n=$((n + 1))
        fi
    done < <(dpkg -L "$p")
    echo "  $p $(dpkg-query -W -f='${Version}' "$p"): $n files"
done
# the names Debian gives them through update-alternatives (not in the packages' lists)
for n in mpirun mpiexec; do ln -sf orterun "$ROOT/usr/bin/$n"; done
# NAME PATH pairs of the libraries OBJECTS load, the base set left out
needed() { for o in "$@"; do ldd "$o" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'; done |
    sort -u | grep -Ev "$base" || true; }
plugins=$(find "$ROOT" -name '*.so' -type f)
n=0
while read -r name path; do
    [ -e "$LIB/$name" ] || [ -e "$ROOT/lib/x86_64-linux-gnu/$name" ] || { cp -L "$path" "$LIB/$name"; n=$((n + 1)); }
done < <(needed $bins $plugins)
echo "  $n shared libraries (ldd of the binaries and OpenMPI's plugins)"
cat >"$OUT/env.sh" <<'ENV'
# source .gpu-bundle/env.sh: run the bundled OpenMPI and libraries from this working tree. Only for
# llmtrain and its tools: validation/gpu/run.sh keeps Python (PyTorch) on the machine's own.
b="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/root"
cuda=""
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    ldconfig -p 2>/dev/null | grep -q "$lib " && continue
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 \
             $(python3 -c 'import glob, os, site; print(" ".join(sorted({os.path.dirname(p) for s in site.getsitepackages() for p in glob.glob(s + "/nvidia/*/lib/lib*.so*")})))' 2>/dev/null); do
        if [ -e "$d/$lib" ]; then case ":$cuda:" in *":$d:"*) ;; *) cuda="${cuda:+$cuda:}$d" ;; esac; break; fi
    done
done
export PATH="$b/usr/bin:$PATH"
export LD_LIBRARY_PATH="$b/usr/lib/x86_64-linux-gnu:$b/lib/x86_64-linux-gnu:$b/usr/lib/x86_64-linux-gnu/openmpi/lib${cuda:+:$cuda}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$b/usr" OPAL_LIBDIR="$b/usr/lib/x86_64-linux-gnu/openmpi/lib"
export PMIX_MCA_mca_base_component_path="$b/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix" # its plugins (else at their absolute path)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ENV
# the check: with env.sh, nothing outside the base set resolves outside the bundle
outside=$( (source "$OUT/env.sh"; needed $bins $plugins) | awk -v r="$(cd "$ROOT" && pwd)" 'index($2, r) != 1')
[ -z "$outside" ] || { echo "bundle.sh: resolved outside the bundle:"; echo "$outside"; exit 1; } >&2
# What travels: one xz archive of the bundle and the binaries (oneDNN alone is 38 MiB unpacked, the
# whole 90; the device tool carries at most 64 MiB), unpacked on the GPU machine by
#   tar -xJf .gpu-carry/bundle.tar.xz && bash validation/gpu/run.sh $OUT   (it takes build-gpu/)
mkdir -p .gpu-carry
tar -cf - "$OUT" $bins | xz -6 -T0 >.gpu-carry/bundle.tar.xz
kib=$(du -sk .gpu-carry/bundle.tar.xz | cut -f1)
echo "bundle.sh: $(du -sh "$OUT" | cut -f1) in $OUT; .gpu-carry/bundle.tar.xz (with the binaries) $((kib / 1024)) MiB of the device tool's 64"
[ "$kib" -lt $((48 * 1024)) ] || { echo "bundle.sh: the archive is over 48 MiB" >&2; exit 1; }
