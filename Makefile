# Makefile — builds llmtrain and its tests. Site settings live in Makefile.inc.
#   make          build ./llmtrain
#   make check    run the test suite (installs missing dependencies first; last line: N passed, N failed)
#   make deps     install missing Debian packages (as root), or say what to install
#   make bench    benchmarks (not tests): tokens/s and GFLOP/s next to PyTorch
#   make demo     install, build, prepare data, train a small model, show results
#   make clean
include Makefile.inc

BUILD   := build
SRC_DIRS := src/core src/config src/parallel src/model src/kernels src/kernels/cpu src/train src/io
LIB_SRC := $(foreach d,$(SRC_DIRS),$(wildcard $(d)/*.c))
LIB_OBJ := $(patsubst src/%.c,$(BUILD)/%.o,$(LIB_SRC))
LIB     := $(BUILD)/libllmtrain.a
ALL_CFLAGS = $(CFLAGS) -Isrc $(BLAS_CFLAGS) $(HDF5_CFLAGS) $(HWLOC_CFLAGS) $(PAPI_CFLAGS) $(PCRE2_CFLAGS)
ALL_LIBS   = $(HDF5_LIBS) $(BLAS_LIBS) $(HWLOC_LIBS) $(PAPI_LIBS) $(PCRE2_LIBS) -lm

UNIT_SRC := $(wildcard validation/unit/test_*.c)
UNIT_BIN := $(patsubst validation/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
REF_SRC  := $(wildcard validation/reference/*.c)
REF_BIN  := $(patsubst validation/reference/%.c,$(BUILD)/ref/%,$(REF_SRC))

.PHONY: all check deps bench demo clean tests
all: llmtrain llmprep

llmtrain: $(BUILD)/main.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(ALL_LIBS)

llmprep: $(BUILD)/tools/llmprep.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(ALL_LIBS)

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/tests/%: validation/unit/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(CMOCKA_CFLAGS) -MMD -MP -o $@ $< $(LIB) $(CMOCKA_LIBS) $(ALL_LIBS) $(LDFLAGS)

$(BUILD)/ref/%: validation/reference/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -o $@ $< $(LIB) $(ALL_LIBS) $(LDFLAGS)

tests: llmtrain llmprep $(UNIT_BIN) $(REF_BIN)

deps:
	@bash validation/deps.sh

data/tiny/train_000.bin: validation/make_synthetic_shards.py
	$(PYTHON) validation/make_synthetic_shards.py data/tiny

check:
	@bash validation/deps.sh --if-missing
	@$(MAKE) --no-print-directory tests data/tiny/train_000.bin
	@MPIRUN="$(MPIRUN)" PYTHON="$(PYTHON)" bash validation/run_tests.sh

bench: llmtrain llmprep
	@MPIRUN="$(MPIRUN)" PYTHON="$(PYTHON)" bash validation/bench/run_bench.sh
	@MPIRUN="$(MPIRUN)" PYTHON="$(PYTHON)" bash validation/bench/bench_tokenizer.sh

demo:
	@bash validation/deps.sh --if-missing
	@$(MAKE) --no-print-directory llmtrain llmprep
	@MPIRUN="$(MPIRUN)" PYTHON="$(PYTHON)" bash validation/demo.sh

clean:
	rm -rf $(BUILD) llmtrain llmprep

-include $(LIB_OBJ:.o=.d) $(BUILD)/main.d $(BUILD)/tools/llmprep.d $(UNIT_BIN:=.d) $(REF_BIN:=.d)
