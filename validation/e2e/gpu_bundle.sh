#!/usr/bin/env bash
# What a GPU session carries works on a machine that has none of the libraries (validation/gpu/
# bundle.sh): the CUDA build's binaries (bundle.sh's own, for x86-64-v3: no AVX-512) and the bundle (OpenMPI with its plugins and mpirun, HDF5,
# oneDNN, hwloc, PAPI and the rest of their closure) are packed, unpacked into a bare copy of the
# tree, and run there in a mount namespace where this machine's own OpenMPI, PMIx, HDF5, oneDNN,
# hwloc and PAPI are hidden: build-gpu/llmtrain (device = 'cpu') trains on 1 rank and, through the
# bundle's mpirun, on 2, with the step records bit-identical to the same binary on the system's
# libraries. The archive must fit the device tool's 64 MiB. Found on the way: the .deb route
# failed (apt no longer had the installed libcom-err2), pulled in libc6, left out mpirun (an
# update-alternatives link) and weighed 81 MiB unpacked (oneDNN alone 38); and PMIx looked for its
# plugins at their build-time path (PMIX_MCA_mca_base_component_path in env.sh now).
# Skipped (77) without nvcc or without mount namespaces.
source "$(dirname "$0")/lib.bash"
command -v "${NVCC:-/usr/local/cuda/bin/nvcc}" >/dev/null 2>&1 || { echo "SKIP: no nvcc"; exit 77; }
unshare -m true 2>/dev/null || { echo "SKIP: no mount namespaces here (unshare -m)"; exit 77; }
bash validation/gpu/bundle.sh >"$TEST_DIR/bundle.log" 2>&1 || { cat "$TEST_DIR/bundle.log"; fail "bundle.sh"; }
# its binaries are for any x86-64-v3 processor: no AVX-512 register (zmm, xmm/ymm 16-31, mask
# registers) in them, where this machine's -march=native puts them in a thousand places, but in
# the peak loops kernels/cpu/peak.c runs only where CPUID says so (fma_rate_avx512, dpbf16_rate)
evex='%zmm|%[xy]mm(1[6-9]|2[0-9]|3[01])|%k[1-7]'
where=$(objdump -d --no-show-raw-insn build-gpu/llmtrain | awk -v re="$evex" '/^[0-9a-f]+ <.*>:$/ {f = $2} $0 ~ re {print f}' |
    sort -u | grep -v -e '^<fma_rate_avx512>:$' -e '^<dpbf16_rate>:$' || true)
[ -z "$where" ] || fail "build-gpu/llmtrain uses AVX-512 outside the CPUID-dispatched loops: $(echo $where)"
native=$(objdump -d --no-show-raw-insn llmtrain | grep -cE "$evex" || true)
echo "AVX-512 registers: in $native instructions of ./llmtrain (-march=native); in build-gpu/llmtrain only in peak.c's dispatched loops"
tail -1 "$TEST_DIR/bundle.log"
mib=$(du -sm .gpu-carry/bundle.tar.xz | cut -f1)
[ "$mib" -lt 48 ] || fail "the archive is $mib MiB: over 48 of the device tool's 64 MiB"
# the GPU machine's view: the tracked tree, the archive, nothing else
BARE=$(cd "$TEST_DIR" && pwd)/bare
mkdir -p "$BARE/data" && git archive HEAD | tar -x -C "$BARE" && cp -r .gpu-carry "$BARE/" && cp -r data/tiny "$BARE/data/"
(cd "$BARE" && tar -xJf .gpu-carry/bundle.tar.xz) || fail "the archive does not unpack"
cat >"$BARE/t.nml" <<NML
&run name = 'b', out_dir = 'OUT', device = 'cpu', seed = 7 /
&model n_layer = 2, n_head = 4, d_model = 64, d_ff = 256, vocab_size = 500, seq_len = 32 /
&train max_steps = 4, micro_batch = 2, global_batch = 8, precision = 'bf16' /
&data train_files = 'data/tiny/train_*.bin' /
&checkpoint save_weights = .false. /
NML
# the runs on the system's libraries (the reference)
for np in 1 2; do
    (cd "$BARE" && timeout 120 $MPIRUN -n $np build-gpu/llmtrain t.nml run.out_dir="'sys$np'" parallel.dp=$np \
        >"../sys$np.log" 2>&1) || { tail "$TEST_DIR/sys$np.log"; fail "build-gpu/llmtrain on $np rank(s), system libraries"; }
done
cat >"$TEST_DIR/hidden.sh" <<'SH'
set -e
cd "$1"
lib=/usr/lib/x86_64-linux-gnu
for d in $lib/openmpi $lib/pmix2 $lib/hdf5 /usr/share/openmpi /etc/openmpi; do
    [ -d "$d" ] && mount -t tmpfs none "$d"
done
for f in $lib/libdnnl.so.2 $lib/libhwloc.so.15 $lib/libpapi.so.7.0 $lib/libhdf5_openmpi.so.103 \
         $lib/libmpi.so.40 $lib/libopen-pal.so.40 /usr/bin/orterun /usr/bin/orted; do
    [ -e "$f" ] && mount --bind /dev/null "$(readlink -f "$f")"
done
source .gpu-bundle/env.sh
case "$(command -v mpirun)" in "$PWD"/.gpu-bundle/*) ;; *) echo "mpirun is not the bundle's: $(command -v mpirun)"; exit 1 ;; esac
ldd build-gpu/llmtrain | grep -E 'libmpi|libhdf5|libdnnl|libhwloc|libpapi'
OMP_NUM_THREADS=1 timeout 120 build-gpu/llmtrain t.nml run.out_dir="'hid1'" >../hid1.log 2>&1
OMP_NUM_THREADS=1 timeout 120 mpirun --oversubscribe -n 2 build-gpu/llmtrain t.nml run.out_dir="'hid2'" parallel.dp=2 >../hid2.log 2>&1
SH
unshare -m bash "$TEST_DIR/hidden.sh" "$BARE" >"$TEST_DIR/hidden.log" 2>&1 ||
    { cat "$TEST_DIR/hidden.log"; tail -5 "$TEST_DIR"/hid*.log; fail "the bundle does not run with the system's libraries hidden"; }
if grep -E '=> /usr/lib|not found' "$TEST_DIR/hidden.log"; then fail "a library resolved outside the bundle (above)"; fi
# OpenMPI and PMIx found their plugins and help texts in the bundle (a plugin looked for at its
# build-time path: 'Sorry! You were supposed to get help about ... couldn't open the help file')
if grep -B2 -A4 -E "Sorry|couldn't open the help file|unavailable" "$TEST_DIR"/hid1.log "$TEST_DIR"/hid2.log; then
    fail "OpenMPI or PMIx looked outside the bundle (above)"
fi
for np in 1 2; do
    a=$(train_records "$BARE/sys$np/b/metrics.jsonl") b=$(train_records "$BARE/hid$np/b/metrics.jsonl")
    [ -n "$a" ] && [ "$a" = "$b" ] || { diff <(echo "$a") <(echo "$b") | head; fail "$np rank(s): step records differ"; }
done
echo "bundle: $mib MiB archive; unpacked into a bare tree and run with the system's MPI, HDF5, oneDNN, hwloc, PAPI hidden: 1 and 2 ranks bit-identical to the system's libraries"
