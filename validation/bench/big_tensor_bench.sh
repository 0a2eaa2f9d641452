#!/usr/bin/env bash
# big_tensor_bench.sh — part of `make bench`: one tensor of 2^31 + 4096 fp32 elements (8 GiB, more
# than a 32-bit count holds) written and read back through the checkpoint I/O path in pieces of
# the 64 MiB staging buffer (build/bench/bench_big_tensor, validation/bench/bench_big_tensor.c):
# write and read MiB/s, every element compared and a checksum of the read-back beside the one of
# the values written. The file goes to a temporary directory under build/bench, deleted after.
# Needs ~8.1 GB of free disk; skipped with a message when there is less. Writes
# build/bench/big_tensor.md. Settings (environment): BIG_ELEMENTS (2^31 + 4096), STAGING_MIB (64).
set -u
cd "$(dirname "$0")/../.."
: "${MPIRUN:=mpirun --oversubscribe}" "${BIG_ELEMENTS:=2147487744}" "${STAGING_MIB:=64}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
OUT=build/bench
mkdir -p $OUT
[ -x $OUT/bench_big_tensor ] || { echo "big_tensor_bench: $OUT/bench_big_tensor is not built (make bench)"; exit 1; }
need_kb=$((BIG_ELEMENTS * 4 / 1024 + 65536))
free_kb=$(df -Pk $OUT | awk 'NR == 2 {print $4}')
if [ "$free_kb" -lt "$need_kb" ]; then
    echo "big_tensor_bench: skipped: $((free_kb / 1048576)) GiB free under $OUT, $((need_kb / 1048576)) GiB needed"
    exit 0
fi
dir=$(mktemp -d $OUT/big_tensor.XXXXXX)
trap 'rm -rf "$dir"' EXIT
$MPIRUN -np 1 $OUT/bench_big_tensor "$dir" "$BIG_ELEMENTS" "$STAGING_MIB" >$OUT/big_tensor.log 2>&1
rc=$?
cat $OUT/big_tensor.log
[ $rc -eq 0 ] || { echo "big_tensor_bench: bench_big_tensor failed (exit $rc)"; exit 1; }
{
    echo "One tensor over 2^31 elements through the checkpoint writer and reader (one rank, 64-bit"
    echo "element counts, pieces of one staging buffer; validation/bench/bench_big_tensor.c):"
    echo
    echo '```'
    grep -v '^$' $OUT/big_tensor.log
    echo '```'
} >$OUT/big_tensor.md
