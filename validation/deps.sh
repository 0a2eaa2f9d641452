#!/usr/bin/env bash
# deps.sh — install the Debian/Ubuntu packages llmtrain needs (make deps), or say what to do.
#   bash validation/deps.sh              install whatever is missing (root), else print the command
#   bash validation/deps.sh --if-missing same, but silent when everything is present (make check,
#                                        make demo); without dpkg (a cluster) it leaves the build
#                                        to find the site's libraries
#   bash validation/deps.sh --missing    print the missing Debian packages (nothing when none is,
#                                        or without dpkg) and install nothing (the Makefile's check)
# Where packages are missing and this is not root or has no apt-get, it prints the packages and the
# modules INSTALL names for a cluster, installs nothing and exits 2.
set -u
PACKAGES="make gcc pkg-config openmpi-bin libopenmpi-dev libhdf5-openmpi-dev hdf5-tools \
libhwloc-dev hwloc libpapi-dev libopenblas-dev libdnnl-dev libcmocka-dev python3 python3-numpy python3-h5py \
python3-torch"
PACKAGES="$PACKAGES libpcre2-dev python3-pip" # the tokenizer's regex (PCRE2); pip for tiktoken
# tokenizer.json (jansson; utf8proc for its NFC normalizer), SentencePiece models (the library;
# its Python module for the tests)
PACKAGES="$PACKAGES libjansson-dev libutf8proc-dev libsentencepiece-dev sentencepiece python3-sentencepiece"
PACKAGES="$PACKAGES fortunes" # the demo corpus (make demo)
PACKAGES="$PACKAGES python3-matplotlib" # llmsweep's plots
PACKAGES="$PACKAGES python3-protobuf python3-absl" # tensorboard's reader (validation/tensorboard_check.py)
# make fuzz and validation/e2e/fuzz_namelist.sh: clang with libFuzzer (libclang-rt-dev holds the
# runtime; clang alone only recommends it). make SANITIZE=1 needs nothing more: gcc brings ASan/UBSan.
PACKAGES="$PACKAGES clang libclang-rt-dev"
# the HPC workflow tests: a private Slurm on localhost (validation/e2e/lib_slurm.bash; the
# daemons are started by the tests themselves, never as services) and Lmod for the modulefile
PACKAGES="$PACKAGES slurmctld slurmd slurm-client munge lmod"
quiet=0 list_only=0
case "${1:-}" in
--if-missing) quiet=1 ;;
--missing) list_only=1 ;;
"") ;;
*) echo "deps.sh: unknown option '$1' (--if-missing, --missing)"; exit 2 ;;
esac
DEPS_DIR=$(cd "$(dirname "$0")/.." && pwd)/.deps # the PyPI folders below it are git-ignored

# pip_into DIR PIP_ARGS...: pip install PIP_ARGS into the folder DIR (--target), quietly.
pip_into() {
    local dir=$1
    shift
    PIP_ROOT_USER_ACTION=ignore "${PYTHON:-/usr/bin/python3}" -m pip install -q --disable-pip-version-check \
        --target "$dir" "$@"
}
# pip_if_missing DIR IMPORT NOTE FAILURE PIP_ARGS...: nothing when Python runs IMPORT with DIR on
# its path; else "deps: installing NOTE" and pip_into DIR PIP_ARGS, and "deps: FAILURE" with status
# 1 when that fails.
pip_if_missing() {
    local dir=$1 import=$2 note=$3 failure=$4
    shift 4
    PYTHONPATH=$dir "${PYTHON:-/usr/bin/python3}" -c "$import" 2>/dev/null && return 0
    echo "deps: installing $note"
    pip_into "$dir" "$@" || { echo "deps: $failure"; return 1; }
}

# The tokenizer's data and reference, from PyPI (after the Debian packages, which bring pip):
# GPT-2's vocabulary data/gpt2/gpt2.tiktoken, taken from the openai-whisper source archive
# (whisper/assets/gpt2.tiktoken, checked by sha256), and tiktoken in .deps/python for the tests
# (they set PYTHONPATH). Both folders are git-ignored.
GPT2_VOCAB_SHA256=306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930
fetch_tokenizer_deps() {
    local root py=${PYTHON:-/usr/bin/python3} tmp
    root=$(cd "$(dirname "$0")/.." && pwd)
    local vocab=$root/data/gpt2/gpt2.tiktoken pydir=$root/.deps/python
    if [ ! -f "$vocab" ]; then
        echo "deps: fetching GPT-2's vocabulary (openai-whisper source archive, PyPI)"
        tmp=$(mktemp -d)
        if "$py" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
                "openai-whisper==20250625" -d "$tmp" && mkdir -p "$(dirname "$vocab")" &&
            tar -xzf "$tmp"/openai_whisper-*.tar.gz -O --wildcards '*/whisper/assets/gpt2.tiktoken' >"$tmp/v" &&
            [ "$(sha256sum <"$tmp/v" | cut -d' ' -f1)" = "$GPT2_VOCAB_SHA256" ]; then
            mv "$tmp/v" "$vocab"
        else
            echo "deps: could not get gpt2.tiktoken (no PyPI access, or its sha256 differs)"
            rm -rf "$tmp"
            return 1
        fi
        rm -rf "$tmp"
    fi
    pip_if_missing "$pydir" "import tiktoken, regex" "tiktoken into .deps/python (PyPI)" \
        "pip install tiktoken failed" "tiktoken>=0.7" || return 1
    [ $quiet -eq 1 ] || echo "deps: tokenizer data and tiktoken present"
}

# Optuna (PyPI), only for validation/e2e/sweep_analytic.sh's comparison with its TPE sampler, in its
# own folder .deps/optuna: it brings numpy 2, which must not shadow Debian's numpy (h5py and torch
# are built against it) in .deps/python.
fetch_sweep_deps() {
    pip_if_missing "$DEPS_DIR/optuna" "import optuna" "optuna into .deps/optuna (PyPI; for the llmsweep test)" \
        "pip install optuna failed" "optuna>=3"
}

# llmmerge's reference (validation/merge_reference.py): mergekit's merge kernels in .deps/python.
# mergekit itself needs torch >= 2 (Debian has 1.13), so it goes in without its dependencies;
# its kernels need only pydantic (installed with its own dependencies, none of them torch).
fetch_merge_deps() {
    local pydir=$DEPS_DIR/python
    PYTHONPATH=$pydir "${PYTHON:-/usr/bin/python3}" -c "import mergekit.merge_methods.registry" 2>/dev/null && return 0
    echo "deps: installing mergekit's kernels (mergekit 0.1.5 without its dependencies, pydantic) into .deps/python (PyPI)"
    pip_into "$pydir" "pydantic>=2.10.6,<3" && pip_into "$pydir" --no-deps "mergekit==0.1.5" ||
        { echo "deps: pip install mergekit failed (the merge tests use numpy instead)"; return 1; }
}

# The TensorBoard test's reader (validation/tensorboard_check.py): tensorboard's EventAccumulator,
# in .deps/python without its dependencies (their pip versions would bring numpy 2 and protobuf 5
# over Debian's). 2.18.0: the newest whose generated protos run on Debian's protobuf 3.21 (later
# ones import google.protobuf.runtime_version); it needs numpy, protobuf and absl (Debian).
fetch_tensorboard_deps() {
    pip_if_missing "$DEPS_DIR/python" "from tensorboard.backend.event_processing import event_accumulator" \
        "tensorboard 2.18.0 (without its dependencies) into .deps/python (PyPI; for the TensorBoard test)" \
        "pip install tensorboard failed (tensorboard_roundtrip skips)" --no-deps "tensorboard==2.18.0"
}

# llmconvert (src/tools/llmconvert.py) and its tests: safetensors, onnx, and for the tests the real
# transformers (4.36.2: the newest that runs on Debian's torch 1.13) and onnxruntime, in
# .deps/python without their dependencies (pip's numpy 2 and protobuf 5 must not shadow Debian's,
# which h5py, torch and tensorboard are built against; yaml, packaging, requests are Debian's or
# already there). onnx 1.16.2: the newest whose generated protos run on Debian's protobuf 3.21.
CONVERT_PY_PACKAGES="transformers==4.36.2 tokenizers==0.15.2 huggingface-hub==0.24.7 safetensors==0.8.0 \
onnx==1.16.2 onnxruntime==1.32.0 filelock==4.3.1 tqdm==4.70.1 fsspec==2026.9.0"
fetch_convert_deps() {
    # onnx imported first: after torch (which transformers imports) it fails
    # shellcheck disable=SC2086
    pip_if_missing "$DEPS_DIR/python" "import onnx, onnxruntime, safetensors, transformers" \
        "transformers, safetensors, onnx, onnxruntime (without their dependencies) into .deps/python (PyPI; for llmconvert)" \
        "pip install for llmconvert failed (its tests skip)" --no-deps $CONVERT_PY_PACKAGES
}

# cannot_install WHY: what to install by hand (the packages, the modules INSTALL names), exit 2
cannot_install() {
    local modules
    modules=$(sed -n 's/^ *\(module load [^#]*\).*/\1/p' "$(dirname "$0")/../INSTALL" | head -1 | sed 's/ *$//')
    echo "deps: $1, so nothing was installed. The Debian/Ubuntu packages to install (as root, or ask an administrator):"
    echo "  sudo apt-get update && sudo apt-get install -y${missing:- $PACKAGES}"
    echo "deps: on a cluster, load your site's modules of the same libraries instead (INSTALL, section 2):"
    echo "  ${modules:-module load gcc openmpi hdf5 openblas hwloc papi}"
    echo "  and set their paths in Makefile.inc where pkg-config does not find them."
    exit 2
}

if ! command -v dpkg-query >/dev/null 2>&1; then
    [ $quiet -eq 1 ] || [ $list_only -eq 1 ] && exit 0
    missing=""
    cannot_install "no dpkg here (not Debian or Ubuntu)"
fi

missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ $list_only -eq 1 ]; then
    echo $missing
    exit 0
fi
if [ -z "$missing" ]; then
    [ $quiet -eq 1 ] || echo "deps: all packages present"
    fetch_tokenizer_deps || [ $quiet -eq 1 ] || exit 1 # make check goes on: only tokenizer tests fail
    fetch_sweep_deps || [ $quiet -eq 1 ] || exit 1     # likewise: only sweep_analytic skips its TPE part
    fetch_merge_deps || [ $quiet -eq 1 ] || exit 1     # likewise: the merge tests use numpy
    fetch_tensorboard_deps || [ $quiet -eq 1 ] || exit 1 # likewise: tensorboard_roundtrip skips
    fetch_convert_deps || [ $quiet -eq 1 ] || exit 1   # likewise: the llmconvert tests skip
    exit 0
fi
echo "deps: missing Debian packages:$missing"
[ "$(id -u)" -eq 0 ] || cannot_install "not root"
command -v apt-get >/dev/null 2>&1 || cannot_install "no apt-get here"
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null &&
    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends $missing ||
    { echo "deps: apt-get install failed (see above)"; exit 1; }
echo "deps: installed$missing"
fetch_tokenizer_deps || [ $quiet -eq 1 ] || exit 1
fetch_sweep_deps || [ $quiet -eq 1 ] || exit 1
fetch_merge_deps || [ $quiet -eq 1 ] || exit 1
fetch_tensorboard_deps || [ $quiet -eq 1 ] || exit 1
fetch_convert_deps || [ $quiet -eq 1 ] || exit 1
