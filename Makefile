# Makefile — builds llmtrain and its tests. Site settings live in Makefile.inc.
#   make          build ./llmtrain
#   make check    run the test suite (installs missing dependencies first; last line: N passed, N failed)
#   make check-unit  its first stage alone: dependencies, build, unit tests
#   make deps     install missing Debian packages (as root), or say what to install
#   make bench    benchmarks (not tests): tokens/s and GFLOP/s next to PyTorch; the performance
#                 model against published runs (docs/planning.md, validation/bench/published_compare.py)
#   make demo     install, build, prepare data, train a small model, show results
#   make fuzz     fuzz the namelist parser and schema with libFuzzer (clang) for FUZZ_SECONDS
#                 (default 300); a crashing input is kept in build/fuzz/crashes/ and printed
#   make fuzz-config  random valid configurations of tiny models for FUZZ_SECONDS (default 300),
#                 each checked for grid, resume, liveness and eval invariants; the seed is printed,
#                 FUZZ_SEED=S repeats it; failures go to validation/fuzz/config_corpus/
#   make SANITIZE=1 [all|tests]  the same programs built with AddressSanitizer + UBSan into
#                 build-asan/ (build-asan/llmtrain, build-asan/llmprep, build-asan/tests/...),
#                 never mixed with the normal build; validation/e2e/sanitizers.sh runs them
#   make CUDA=1 [all|tests]  also the CUDA backend (src/kernels/cuda/*.cu by nvcc, device.c), every
#                 object compiled with -DLLMT_CUDA, into build-cuda/ (build-cuda/llmtrain); never
#                 mixed with the CPU build
#   make CUDA=1 cuda-objects  compile and archive that build (build-cuda/libllmtrain.a and main.o)
#                 without linking and without a GPU: validation/e2e/cuda_build.sh runs it
#   make clean    removes build/, build-asan/, build-cuda/ and the programs
include Makefile.inc

# SANITIZE=1: everything (objects, library, programs, tests) goes to build-asan/ instead.
ifeq ($(SANITIZE)$(CUDA),11)
$(error SANITIZE=1 and CUDA=1 together are not supported: build one of them)
endif
ifeq ($(SANITIZE),1)
BUILD   := build-asan
BIN_DIR := $(BUILD)/
override CFLAGS  += $(SANITIZE_FLAGS)
override LDFLAGS += $(SANITIZE_FLAGS)
override CXXFLAGS += $(SANITIZE_FLAGS)
else ifeq ($(CUDA),1)
# CUDA=1: everything goes to build-cuda/ (or CUDA_BUILD: validation/gpu/bundle.sh builds the
# GPU machine's binaries into build-gpu/ for a portable ISA), and every object knows
# (LLMT_CUDA: config accepts device = 'cuda', main opens the GPU).
BUILD   := $(or $(CUDA_BUILD),build-cuda)
BIN_DIR := $(BUILD)/
override CFLAGS += -DLLMT_CUDA
else
BUILD   := build
BIN_DIR :=
endif
LLMTRAIN := $(BIN_DIR)llmtrain
LLMPREP  := $(BIN_DIR)llmprep
SRC_DIRS := src/core src/config src/parallel src/model src/kernels src/kernels/cpu src/train src/io
# One GEMM implementation: src/kernels/cpu/gemm_$(GEMM).c (Makefile.inc chooses).
GEMM_SRC := src/kernels/cpu/gemm_$(GEMM).c
# src/kernels/cuda/device_plan.c has no CUDA in it (the backend's GPU-free rules, unit-tested
# everywhere); device.c, src/train/device_open.c (its MPI side), src/parallel/comm_nccl.c (NCCL
# under the data path) and the .cu files are the CUDA build's.
LIB_SRC := $(filter-out src/kernels/cpu/gemm_%.c src/parallel/comm_nccl.c src/train/device_open.c,$(foreach d,$(SRC_DIRS),$(wildcard $(d)/*.c))) \
           $(GEMM_SRC) src/kernels/cuda/device_plan.c
# C++ sources: the SentencePiece shim (src/io/tokenizer_spm.cc, an extern "C" API), by CXX
LIB_CXX := $(wildcard src/io/*.cc)
ifeq ($(CUDA),1)
LIB_SRC += src/kernels/cuda/device.c src/train/device_open.c src/parallel/comm_nccl.c
CUDA_SRC := $(wildcard src/kernels/cuda/*.cu)
CUDA_OBJ := $(patsubst src/%.cu,$(BUILD)/%.o,$(CUDA_SRC))
ifeq ($(filter clean deps,$(MAKECMDGOALS)),)
ifeq ($(wildcard $(NVCC)),)
$(error Makefile.inc: CUDA = 1, but $(NVCC) does not exist: set CUDA_HOME (or NVCC) to your CUDA toolkit, see INSTALL)
endif
endif
endif
LIB_OBJ := $(patsubst src/%.c,$(BUILD)/%.o,$(LIB_SRC)) $(patsubst src/%.cc,$(BUILD)/%.o,$(LIB_CXX)) $(CUDA_OBJ)
LIB     := $(BUILD)/libllmtrain.a
# Each GEMM library: its flags (from Makefile.inc), its header, and what to do when it is missing.
onednn_CFLAGS = $(DNNL_CFLAGS)
onednn_LIBS   = $(DNNL_LIBS)
onednn_HEADER = oneapi/dnnl/dnnl.h
onednn_HINT   = install oneDNN (Debian: libdnnl-dev, make deps) or set DNNL_ROOT, or set GEMM = cblas
cblas_CFLAGS  = $(BLAS_CFLAGS)
cblas_LIBS    = $(BLAS_LIBS)
cblas_HEADER  = cblas.h
cblas_HINT    = set BLAS_CFLAGS and BLAS_LIBS to your CBLAS (OpenBLAS, MKL, BLIS), or set GEMM = onednn
ifeq ($(filter onednn cblas,$(GEMM)),)
$(error Makefile.inc: GEMM = '$(GEMM)': use onednn or cblas)
endif
GEMM_CFLAGS := $($(GEMM)_CFLAGS)
GEMM_LIBS   := $($(GEMM)_LIBS)
# $(call gemm_builds,LIBRARY): "ok" when that library's header and libraries build a program.
gemm_builds = $(shell printf '\043include <$($(1)_HEADER)>\nint main(void){return 0;}\n' | $(CC) $($(1)_CFLAGS) -x c - -o /dev/null $($(1)_LIBS) >/dev/null 2>&1 && echo ok)
# $(call lib_builds,HEADER,CFLAGS,LIBS[,c++]): "ok" when that header and those libraries build a
# program (in C++ when the fourth argument is given: SentencePiece's header is C++).
lib_builds = $(shell printf '\043include <$(1)>\nint main(void){return 0;}\n' | $(if $(4),$(CXX) -x c++,$(CC) -x c) $(2) - -o /dev/null $(3) >/dev/null 2>&1 && echo ok)
# "ok" when the tokenizer's libraries build: libjansson and libutf8proc (tokenizer.json, its NFC),
# libsentencepiece (.model)
tok_builds = $(and $(call lib_builds,jansson.h,$(JANSSON_CFLAGS),$(JANSSON_LIBS)),$(call lib_builds,utf8proc.h,$(UTF8PROC_CFLAGS),$(UTF8PROC_LIBS)),$(call lib_builds,sentencepiece_processor.h,$(SPM_CFLAGS),$(SPM_LIBS),c++))
# A GEMM library, or the tokenizer's libjansson, libutf8proc or libsentencepiece, that is not there is a build
# error (not 200 undefined references): on a machine where Debian packages are missing (validation/deps.sh --missing), one line saying that `make deps`
# installs them; else one naming the Makefile.inc variable to set. Checked only when something is
# built here: not for clean, nor for the goals that install the dependencies first and build in a
# make started after that (deps, demo, check, check-unit).
INSTALLING_GOALS := clean deps demo check check-unit
ifeq ($(filter $(INSTALLING_GOALS),$(MAKECMDGOALS)),)
GEMM_OK := $(call gemm_builds,$(GEMM))
TOK_OK  := $(if $(GEMM_OK),$(call tok_builds))
ifneq ($(TOK_OK),ok)
MISSING_PACKAGES := $(shell bash validation/deps.sh --missing 2>/dev/null)
ifneq ($(strip $(MISSING_PACKAGES)),)
$(error llmtrain's dependencies are not installed ($(words $(MISSING_PACKAGES)) Debian packages missing: $(wordlist 1,6,$(MISSING_PACKAGES))$(if $(word 7,$(MISSING_PACKAGES)), ...)): run 'make deps' as root to install them (or 'make demo' / 'make check', which install them first; INSTALL for modules))
endif
ifneq ($(GEMM_OK),ok)
$(error Makefile.inc: GEMM = $(GEMM), but <$($(GEMM)_HEADER)> with $(GEMM_LIBS) does not build: $($(GEMM)_HINT))
endif
$(error Makefile.inc: <jansson.h> with $(strip $(JANSSON_LIBS)), <utf8proc.h> with $(strip $(UTF8PROC_LIBS)) or <sentencepiece_processor.h> with $(strip $(SPM_LIBS)) does not build: install libjansson-dev, libutf8proc-dev and libsentencepiece-dev (make deps), or set JANSSON_CFLAGS, JANSSON_LIBS, UTF8PROC_CFLAGS, UTF8PROC_LIBS, SPM_CFLAGS, SPM_LIBS to where they are)
endif
endif
ALL_CFLAGS = $(CFLAGS) -Isrc $(GEMM_CFLAGS) $(HDF5_CFLAGS) $(HWLOC_CFLAGS) $(PAPI_CFLAGS) $(PCRE2_CFLAGS) $(JANSSON_CFLAGS) $(UTF8PROC_CFLAGS)
ALL_LIBS   = $(HDF5_LIBS) $(GEMM_LIBS) $(HWLOC_LIBS) $(PAPI_LIBS) $(PCRE2_LIBS) $(JANSSON_LIBS) $(UTF8PROC_LIBS) $(SPM_LIBS) $(if $(filter 1,$(CUDA)),$(CUDA_LIBS)) -lm

UNIT_SRC := $(wildcard validation/unit/test_*.c)
UNIT_BIN := $(patsubst validation/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
REF_SRC  := $(wildcard validation/reference/*.c)
REF_BIN  := $(patsubst validation/reference/%.c,$(BUILD)/ref/%,$(REF_SRC))

.PHONY: all check deps bench demo clean tests fuzz
all: $(LLMTRAIN) $(LLMPREP)

$(LLMTRAIN): $(BUILD)/main.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(ALL_LIBS)

$(LLMPREP): $(BUILD)/tools/llmprep.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(ALL_LIBS)

ifneq ($(BIN_DIR),)
.PHONY: llmtrain llmprep
llmtrain: $(LLMTRAIN)
llmprep: $(LLMPREP)
endif

# Provenance compiled in (src/core/buildinfo.c): the commit, whether tracked files differ from it
# ("unknown" without git or outside a git checkout), compiler and flags. Rewritten only when its
# content changes; buildinfo.o is recompiled whenever another object is, so its __DATE__ is the
# build's.
BUILDINFO_H := $(BUILD)/buildinfo_gen.h
.PHONY: FORCE
$(BUILDINFO_H): FORCE
	@mkdir -p $(BUILD)
	@c=unknown; d=unknown; \
	if [ "$$(git -C . rev-parse --show-toplevel 2>/dev/null)" = "$(CURDIR)" ] && c=$$(git rev-parse HEAD 2>/dev/null); then \
	    git update-index -q --refresh >/dev/null 2>&1; if git diff-index --quiet HEAD -- 2>/dev/null; then d=false; else d=true; fi; else c=unknown; fi; \
	printf '#define LLMT_GIT_COMMIT "%s"\n#define LLMT_GIT_DIRTY "%s"\n#define LLMT_CC "%s"\n#define LLMT_CFLAGS "%s"\n#define LLMT_GEMM_IS_ONEDNN %s\n#define LLMT_GEMM_LIBS "%s"\n' \
	    "$$c" "$$d" '$(subst ",\",$(CC))' '$(subst ",\",$(CFLAGS))' $(if $(filter onednn,$(GEMM)),1,0) '$(subst ",\",$(GEMM_LIBS))' >$@.new
	@if cmp -s $@.new $@; then rm -f $@.new; else mv $@.new $@; fi
$(BUILD)/core/buildinfo.o: ALL_CFLAGS += -I$(BUILD)
$(BUILD)/core/buildinfo.o: $(BUILDINFO_H) $(filter-out $(BUILD)/core/buildinfo.o,$(LIB_OBJ)) $(BUILD)/main.o

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%.o: src/%.cc
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -Isrc $(SPM_CFLAGS) -MMD -MP -c $< -o $@

# The CUDA build's kernels (nvcc, both architectures of NVCC_GENCODE) and its plain-C files on the
# CUDA runtime and NCCL APIs (device.c, comm_nccl.c: mpicc with the CUDA headers).
$(BUILD)/kernels/cuda/%.o: src/kernels/cuda/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(NVCC_GENCODE) -Isrc -DLLMT_CUDA $(MPI_CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/kernels/cuda/device.o $(BUILD)/parallel/comm_nccl.o $(BUILD)/core/buildinfo.o: ALL_CFLAGS += $(CUDA_CFLAGS)

.PHONY: cuda-objects
ifeq ($(CUDA),1)
cuda-objects: $(LIB) $(BUILD)/main.o
	@echo "cuda-objects: $(words $(CUDA_OBJ)) CUDA file(s) and the -DLLMT_CUDA objects compiled into $(LIB)"
else
cuda-objects:
	@echo "make cuda-objects needs CUDA=1: make CUDA=1 cuda-objects"; exit 2
endif

# The GPU opening on its own (validation/gpu/device_probe.c; CUDA=1): linked like the tests.
# validation/gpu/test_cuda_ops.c (every op, CUDA against CPU) likewise; it needs every kernel.
$(BUILD)/gpu/test_cuda_ops: validation/gpu/test_cuda_ops.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -o $@ $< $(LIB) $(ALL_LIBS) $(LDFLAGS)
$(BUILD)/gpu/device_probe: validation/gpu/device_probe.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -o $@ $< $(LIB) $(ALL_LIBS) $(LDFLAGS)
# validation/gpu/check_attn_matmul.cu: attention and matmul against double-precision host loops
# written in the file (independent of both backends); CUDA code, so nvcc compiles it.
ifeq ($(CUDA),1)
$(BUILD)/gpu/check_attn_matmul: validation/gpu/check_attn_matmul.cu $(LIB)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(NVCC_GENCODE) -Isrc -DLLMT_CUDA $(MPI_CFLAGS) -c $< -o $@.o
	$(CC) $(LDFLAGS) -o $@ $@.o $(LIB) $(ALL_LIBS)
endif

# GPU-free unit tests of CUDA-build code (validation/unit/cuda/; CUDA=1 only: they link NCCL and
# the CUDA runtime): build-cuda/tests/cuda/test_*, run by validation/e2e/cuda_build.sh.
CUDA_UNIT_SRC := $(wildcard validation/unit/cuda/test_*.c)
CUDA_UNIT_BIN := $(patsubst validation/unit/cuda/%.c,$(BUILD)/tests/cuda/%,$(CUDA_UNIT_SRC))
ifeq ($(CUDA),1)
# test_comm_nccl_fake: comm_nccl.c over fake_nccl.c (MPI on host memory) instead of libnccl and
# libcudart, so the CUDA libraries stay off its link line (the archive's other CUDA objects are
# not pulled in).
$(BUILD)/tests/cuda/test_comm_nccl_fake: validation/unit/cuda/test_comm_nccl_fake.c validation/unit/cuda/fake_nccl.c \
                                         validation/unit/test_comm_seam.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(CUDA_CFLAGS) $(CMOCKA_CFLAGS) -o $@ validation/unit/cuda/test_comm_nccl_fake.c \
	    validation/unit/cuda/fake_nccl.c $(LIB) $(CMOCKA_LIBS) $(HDF5_LIBS) $(GEMM_LIBS) $(HWLOC_LIBS) \
	    $(PAPI_LIBS) $(PCRE2_LIBS) $(JANSSON_LIBS) $(UTF8PROC_LIBS) $(SPM_LIBS) -lm $(LDFLAGS)
$(BUILD)/tests/cuda/%: validation/unit/cuda/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(CUDA_CFLAGS) $(CMOCKA_CFLAGS) -MMD -MP -o $@ $< $(LIB) $(CMOCKA_LIBS) $(ALL_LIBS) $(LDFLAGS)
endif

$(BUILD)/tests/%: validation/unit/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(CMOCKA_CFLAGS) -MMD -MP -o $@ $< $(LIB) $(CMOCKA_LIBS) $(ALL_LIBS) $(LDFLAGS)

$(BUILD)/ref/%: validation/reference/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -o $@ $< $(LIB) $(ALL_LIBS) $(LDFLAGS)

# The GEMM implementation the build does not use, tested too where its library is installed:
# build/tests/test_gemm_<other> is test_gemm.c linked with the other gemm_*.c (an object given
# on the command line wins over the archive's, so the rest of the library uses it as well).
OTHER_GEMM := $(filter-out $(GEMM),onednn cblas)
ifeq ($(filter $(INSTALLING_GOALS),$(MAKECMDGOALS)),)
ifeq ($(call gemm_builds,$(OTHER_GEMM)),ok)
OTHER_GEMM_TEST := $(BUILD)/tests/test_gemm_$(OTHER_GEMM)
endif
endif
$(BUILD)/tests/test_gemm_$(OTHER_GEMM): validation/unit/test_gemm.c validation/unit/test_numeric.h \
                                        src/kernels/cpu/gemm_$(OTHER_GEMM).c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $($(OTHER_GEMM)_CFLAGS) $(CMOCKA_CFLAGS) -o $@ validation/unit/test_gemm.c \
	    src/kernels/cpu/gemm_$(OTHER_GEMM).c $(LIB) $(CMOCKA_LIBS) $($(OTHER_GEMM)_LIBS) $(ALL_LIBS) $(LDFLAGS)

tests: $(LLMTRAIN) $(LLMPREP) $(UNIT_BIN) $(REF_BIN) $(OTHER_GEMM_TEST)

# The fuzz target: the parser, the schema and the core files they need, compiled together
# by clang with libFuzzer and the sanitizers (never with the objects above). See validation/fuzz/.
FUZZ_SRC := validation/fuzz/fuzz_namelist.c $(wildcard src/config/*.c) \
            src/core/error.c src/core/alloc.c src/core/fileio.c src/core/json.c
FUZZ_BIN := build/fuzz/fuzz_namelist
FUZZ_SECONDS ?= 300

$(FUZZ_BIN): $(FUZZ_SRC) $(wildcard src/config/*.h src/core/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Isrc $(MPI_CFLAGS) $(HDF5_CFLAGS) -o $@ $(FUZZ_SRC) $(MPI_LIBS) $(HDF5_LIBS)

fuzz: $(FUZZ_BIN)
	@bash validation/fuzz/run_fuzz.sh $(FUZZ_SECONDS)

# The configuration fuzzer (validation/fuzz/config_fuzz.py): LLMTRAIN_BIN=path tests another build.
.PHONY: fuzz-config
fuzz-config: $(LLMTRAIN) data/tiny/train_000.bin
	@MPIRUN="$(MPIRUN)" OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PYTHON) validation/fuzz/config_fuzz.py \
		--seconds $(FUZZ_SECONDS) $(if $(FUZZ_SEED),--seed $(FUZZ_SEED))

deps:
	@bash validation/deps.sh

data/tiny/train_000.bin: validation/make_synthetic_shards.py
	$(PYTHON) validation/make_synthetic_shards.py data/tiny

check:
	@bash validation/deps.sh --if-missing
	@$(MAKE) --no-print-directory tests data/tiny/train_000.bin
	@MPIRUN="$(MPIRUN)" PYTHON="$(PYTHON)" bash validation/run_tests.sh

# The first stage of make check alone: dependencies, the build, the unit tests (no scenario
# scripts); validation/bare_root.sh runs it in a fresh Debian root.
.PHONY: check-unit
check-unit:
	@bash validation/deps.sh --if-missing
	@$(MAKE) --no-print-directory tests
	@MPIRUN="$(MPIRUN)" PYTHON="$(PYTHON)" bash validation/run_tests.sh --unit

bench: llmtrain llmprep $(BUILD)/bench/bench_gemm $(BUILD)/bench/bench_big_tensor
	@MPIRUN="$(MPIRUN)" PYTHON="$(PYTHON)" bash validation/bench/run_bench.sh
	@MPIRUN="$(MPIRUN)" PYTHON="$(PYTHON)" bash validation/bench/bench_tokenizer.sh
	@bash validation/bench/bench_page.sh
	@$(PYTHON) validation/bench/published_compare.py --search --doc docs/planning.md

# docs: the generated pages of the manual (docs/namelist.md from the key table); make check's
# validation/e2e/docs_current.sh fails when the committed page differs from what this writes.
.PHONY: docs
docs: llmtrain
	$(PYTHON) validation/docs/namelist_ref.py

# bench_gemm: the GEMM rate on the model's shapes through the CPU backend's ops and as one library
# call (validation/bench/bench_gemm.c), linked like the tests; run by run_bench.sh.
$(BUILD)/bench/bench_gemm: validation/bench/bench_gemm.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -o $@ $< $(LIB) $(ALL_LIBS) $(LDFLAGS)
-include $(BUILD)/bench/bench_gemm.d
# bench_big_tensor: one tensor over 2^31 elements written and read back through the checkpoint
# I/O (validation/bench/bench_big_tensor.c); run by validation/bench/big_tensor_bench.sh.
$(BUILD)/bench/bench_big_tensor: validation/bench/bench_big_tensor.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -o $@ $< $(LIB) $(ALL_LIBS) $(LDFLAGS)
-include $(BUILD)/bench/bench_big_tensor.d

demo:
	@bash validation/deps.sh --if-missing
	@$(MAKE) --no-print-directory llmtrain llmprep llmreport
	@MPIRUN="$(MPIRUN)" PYTHON="$(PYTHON)" bash validation/demo.sh

clean:
	rm -rf build build-asan build-cuda build-gpu llmtrain llmprep

-include $(LIB_OBJ:.o=.d) $(BUILD)/main.d $(BUILD)/tools/llmprep.d $(UNIT_BIN:=.d) $(REF_BIN:=.d)

# llmsweep (hyperparameter search; src/tools/llmsweep.py, Python + numpy): ./llmsweep is a small
# wrapper that runs it with $(PYTHON). Built by `make`, `make tests` and `make llmsweep`.
.PHONY: llmsweep-clean
all: llmsweep
tests: llmsweep
llmsweep: src/tools/llmsweep.py
	@printf '#!/bin/sh\n# llmsweep: hyperparameter search over llmtrain runs (see docs/llmsweep.md)\nexec %s "$$(dirname "$$0")/src/tools/llmsweep.py" "$$@"\n' "$(PYTHON)" >$@
	@chmod +x $@
clean: llmsweep-clean
llmsweep-clean:
	rm -f llmsweep

# llmscale (scaling studies; src/tools/llmscale.py, which imports llmsweep.py beside it): the same
# kind of wrapper. Built by `make`, `make tests` and `make llmscale`.
.PHONY: llmscale-clean
all: llmscale
tests: llmscale
llmscale: src/tools/llmscale.py src/tools/llmsweep.py
	@printf '#!/bin/sh\n# llmscale: strong and weak scaling studies of llmtrain (see docs/llmscale.md)\nexec %s "$$(dirname "$$0")/src/tools/llmscale.py" "$$@"\n' "$(PYTHON)" >$@
	@chmod +x $@
clean: llmscale-clean
llmscale-clean:
	rm -f llmscale

# llmconvert (Hugging Face import/export and ONNX export; src/tools/llmconvert.py, Python with
# numpy, h5py, safetensors, onnx): the same kind of wrapper, with .deps/python (validation/deps.sh)
# on PYTHONPATH when it is there. Built by `make`, `make tests` and `make llmconvert`.
.PHONY: llmconvert-clean
all: llmconvert
tests: llmconvert
llmconvert: src/tools/llmconvert.py
	@printf '#!/bin/sh\n# llmconvert: models in and out of llmtrain (Hugging Face, ONNX; see docs/llmconvert.md)\nd="$$(dirname "$$0")"\n[ -d "$$d/.deps/python" ] && export PYTHONPATH="$$d/.deps/python$${PYTHONPATH:+:$$PYTHONPATH}"\nexec %s "$$d/src/tools/llmconvert.py" "$$@"\n' "$(PYTHON)" >$@
	@chmod +x $@
clean: llmconvert-clean
llmconvert-clean:
	rm -f llmconvert

# llmreport (run reports and comparisons; src/tools/llmreport.py, Python + matplotlib): ./llmreport
# is the same kind of wrapper. Built by `make`, `make tests` and `make llmreport`.
.PHONY: llmreport-clean
all: llmreport
tests: llmreport
llmreport: src/tools/llmreport.py
	@printf '#!/bin/sh\n# llmreport: plots and a summary of llmtrain runs (see docs/llmreport.md)\nexec %s "$$(dirname "$$0")/src/tools/llmreport.py" "$$@"\n' "$(PYTHON)" >$@
	@chmod +x $@
clean: llmreport-clean
llmreport-clean:
	rm -f llmreport

# llmmerge: weight merging (src/tools/llmmerge.c with its methods; its HDF5 side is io/checkpoint). Its unit test
# links the methods too (an explicit rule wins over the pattern rule for tests).
LLMMERGE := $(BIN_DIR)llmmerge
MERGE_OBJ := $(BUILD)/tools/llmmerge.o $(BUILD)/tools/merge_methods.o
all: $(LLMMERGE)
tests: $(LLMMERGE)

$(LLMMERGE): $(MERGE_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(ALL_LIBS)

$(BUILD)/tests/test_merge: validation/unit/test_merge.c $(BUILD)/tools/merge_methods.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(CMOCKA_CFLAGS) -MMD -MP -o $@ $< $(BUILD)/tools/merge_methods.o $(LIB) $(CMOCKA_LIBS) $(ALL_LIBS) $(LDFLAGS)

ifneq ($(BIN_DIR),)
.PHONY: llmmerge
llmmerge: $(LLMMERGE)
endif

.PHONY: clean-llmmerge
clean: clean-llmmerge
clean-llmmerge:
	rm -f llmmerge

-include $(MERGE_OBJ:.o=.d)

# bench_ops (not a test): the CPU backend's ops at GPT-2 124M shapes (validation/bench/bench_ops.c).
#   make build/bench/bench_ops && OMP_NUM_THREADS=2 build/bench/bench_ops
#   make build/bench/bench_ops_vs BASE=<commit>: also that commit's non-GEMM kernels (the files
#   BENCH_KERNELS of src/kernels/cpu/, from git, their symbols renamed base_*), timed interleaved
#   with this tree's in the one process: OMP_NUM_THREADS=2 build/bench/bench_ops_vs
BENCH_KERNELS := layernorm gelu xent adamw embed quantize ops_cpu
BENCH_SRC := validation/bench/bench_ops.c validation/bench/bench_kset.c
BENCH_BASE_DIR := $(BUILD)/bench/base
.PHONY: $(BUILD)/bench/bench_ops_vs

$(BUILD)/bench/bench_ops: $(BENCH_SRC) validation/bench/bench_kset.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $(BENCH_SRC) $(LIB) $(ALL_LIBS) $(LDFLAGS)

$(BUILD)/bench/bench_ops_vs: $(BENCH_SRC) validation/bench/bench_kset.h $(LIB)
	@test -n "$(BASE)" || { echo "make $@ BASE=<commit>: the commit to compare with"; exit 2; }
	@rm -rf $(BENCH_BASE_DIR) && mkdir -p $(BENCH_BASE_DIR)
	git archive $(BASE) src/kernels | tar -x -C $(BENCH_BASE_DIR)
	sed -n 's/^[a-z][a-z0-9_ *]* \**\(cpu_[a-z0-9_]*\)(.*/#define \1 base_\1/p' \
	    $(patsubst %,$(BENCH_BASE_DIR)/src/kernels/cpu/%.c,$(BENCH_KERNELS)) | sort -u \
	    >$(BENCH_BASE_DIR)/rename.h
	echo '#define ops_cpu ops_cpu_base' >>$(BENCH_BASE_DIR)/rename.h
	for k in $(BENCH_KERNELS); do \
	    $(CC) -I$(BENCH_BASE_DIR)/src $(ALL_CFLAGS) -include $(BENCH_BASE_DIR)/rename.h \
	        -c $(BENCH_BASE_DIR)/src/kernels/cpu/$$k.c -o $(BENCH_BASE_DIR)/$$k.o || exit 1; done
	$(CC) -I$(BENCH_BASE_DIR)/src $(ALL_CFLAGS) -DKSET_BASE -c validation/bench/bench_kset.c \
	    -o $(BENCH_BASE_DIR)/kset_base.o
	$(CC) $(ALL_CFLAGS) -DBENCH_VS='"$(BASE)"' -o $@ $(BENCH_SRC) \
	    $(patsubst %,$(BENCH_BASE_DIR)/%.o,$(BENCH_KERNELS) kset_base) $(LIB) $(ALL_LIBS) $(LDFLAGS)

# make install PREFIX=/path: binaries and tool wrappers in bin/, the Python tools in
# libexec/llmtrain/, example inputs, jobscripts, README with the docs/ manual it links to and the
# tiny test corpus in share/llmtrain/,
# and a modulefile for that prefix in $(MODULEDIR)/llmtrain/<version>.lua (module use $(MODULEDIR)).
VERSION   := $(shell sed -n 's/^\#define LLMT_VERSION "\(.*\)"/\1/p' src/core/version.h)
PREFIX    ?= /opt/llmtrain/$(VERSION)
MODULEDIR ?= $(PREFIX)/modulefiles
PY_TOOLS  := $(filter $(patsubst src/tools/%.py,%,$(wildcard src/tools/*.py)),llmsweep llmscale llmreport llmconvert)
.PHONY: install
install: $(LLMTRAIN) $(LLMPREP) $(LLMMERGE) data/tiny/train_000.bin
	@case "$(PREFIX)" in /*) ;; *) echo "make install: PREFIX must be an absolute path (got '$(PREFIX)')"; exit 2;; esac
	install -d $(PREFIX)/bin $(PREFIX)/libexec/llmtrain $(PREFIX)/share/llmtrain/inputs \
	    $(PREFIX)/share/llmtrain/jobscripts $(PREFIX)/share/llmtrain/data/tiny $(MODULEDIR)/llmtrain \
	    $(PREFIX)/share/llmtrain/docs
	install -m 755 $(LLMTRAIN) $(LLMPREP) $(LLMMERGE) $(PREFIX)/bin/
	install -m 644 src/tools/*.py $(PREFIX)/libexec/llmtrain/
	@for t in $(PY_TOOLS); do \
	    printf '#!/bin/sh\n# %s (llmtrain %s)\nexec %s "%s/libexec/llmtrain/%s.py" "$$@"\n' \
	        $$t $(VERSION) "$(PYTHON)" "$(PREFIX)" $$t >$(PREFIX)/bin/$$t && chmod 755 $(PREFIX)/bin/$$t; done
	install -m 644 inputs/*.nml README.md $(PREFIX)/share/llmtrain/inputs/
	mv $(PREFIX)/share/llmtrain/inputs/README.md $(PREFIX)/share/llmtrain/
	install -m 644 docs/*.md $(PREFIX)/share/llmtrain/docs/
	install -m 644 jobscripts/* $(PREFIX)/share/llmtrain/jobscripts/
	install -m 644 data/tiny/*.bin $(PREFIX)/share/llmtrain/data/tiny/
	@deps='$(strip $(MODULE_DEPENDS))'; lua=''; for m in $$deps; do lua="$$lua"'depends_on("'$$m'")\n'; done; \
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' \
	    -e "s|@COMMIT@|$$(git rev-parse --short HEAD 2>/dev/null || echo unknown)|g" \
	    -e "s|@DEPENDS_TEXT@|$${deps:-the system's libraries (no modules)}|" \
	    -e "s|@DEPENDS_LUA@|$$lua|" modules/llmtrain.lua.in >$(MODULEDIR)/llmtrain/$(VERSION).lua
	@echo "installed llmtrain $(VERSION) in $(PREFIX); modulefile $(MODULEDIR)/llmtrain/$(VERSION).lua"
	@echo "  module use $(MODULEDIR) && module load llmtrain/$(VERSION)"
