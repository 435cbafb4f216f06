# Specula build. `make` builds the library, the CLI and the tests;
# `make check` runs the suite; `make check SAN=1` runs it under ASan+UBSan
# (with float-cast-overflow, which GCC's -fsanitize=undefined leaves out).
# Sources are globbed: a new src/LAYER/*.c, tools/*.c or tests/test_*.c needs no edit here.
# src/ is split by layer, lowest first (SRC_DIRS; scripts/check_layers.sh
# reads the order from it): base (status, files, clock, threads, GGUF
# reading), text (tokenizers, Unicode, chat templates), engine (kernels, the
# forward pass, samplers), speculation (verifiers, drafters, the speculative loop),
# train (losses, trainer, distillation, online learning); then tools/.
# Internal headers are found by name.

CC      ?= cc
SAN     ?= 0
# test binaries run this many at a time (each has its own temporary directory)
TEST_JOBS ?= 2
ifeq ($(SAN),1)
BUILD   ?= build-san
OPT     := -O1 -g -fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer \
           -fno-sanitize-recover=undefined,float-cast-overflow
else
BUILD   ?= build
OPT     := -O2 -g
endif

SRC_DIRS := base text engine speculation train
SRC_INC  := $(SRC_DIRS:%=-Isrc/%)
CFLAGS  := -std=c11 -D_GNU_SOURCE $(OPT) -ffp-contract=off -Wall -Wextra -Werror -pthread -Iinclude $(SRC_INC) -Itools $(EXTRA_CFLAGS)
LDFLAGS := $(OPT) -pthread
# The library reads JSON (speculation settings); everything linking it links jansson.
LDLIBS  := $(shell pkg-config --libs jansson 2>/dev/null || echo -ljansson) -lm
CLI_LIBS := $(shell pkg-config --libs libmicrohttpd 2>/dev/null || echo -lmicrohttpd)
TEST_LIBS := $(shell pkg-config --libs cmocka 2>/dev/null || echo -lcmocka)

# -ffp-contract=off: no compiler-made FMAs (clang contracts a*b+c by default),
# so kernels compute exactly the operations written and SIMD kernels stay
# bit-identical to their scalar references with either compiler.
# Kernels built per instruction set; dispatch picks one at start-up.
AVX2_FLAGS   := -mavx2 -mfma -mf16c
AVX512_FLAGS := -mavx512f -mavx512dq -mavx512bw -mavx512vl -mavx512vnni -mavx2 -mfma -mf16c

LIB_SRC  := $(wildcard src/*/*.c)
LIB_OBJ  := $(LIB_SRC:src/%.c=$(BUILD)/obj/%.o)
CLI_SRC  := $(wildcard tools/*.c)
CLI_OBJ  := $(CLI_SRC:tools/%.c=$(BUILD)/obj/tools/%.o)
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
# examples/ use the public API only: built with include/ alone on the path
EX_SRC  := $(wildcard examples/*.c)
EX_BIN  := $(EX_SRC:examples/%.c=$(BUILD)/examples/%)
EX_CFLAGS := -std=c11 $(OPT) -Wall -Wextra -Werror -pthread -Iinclude $(EXTRA_CFLAGS)

.PHONY: all lib cli tests benches examples check run deps clean fuzz fuzz-run
all: cli tests benches examples

lib: $(BUILD)/libspecula.a
cli: $(BUILD)/specula
tests: $(TEST_BIN)
benches: $(BENCH_BIN)
examples: $(EX_BIN)

$(BUILD)/obj/%_avx2.o: src/%_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX2_FLAGS) -MMD -MP -c $< -o $@
$(BUILD)/obj/%_avx512.o: src/%_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) -MMD -MP -c $< -o $@
$(BUILD)/obj/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/obj/tools/%.o: tools/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libspecula.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/specula: $(CLI_OBJ) $(BUILD)/libspecula.a
	$(CC) $(LDFLAGS) $^ -o $@ $(CLI_LIBS) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c tests/testutil.h $(BUILD)/libspecula.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP $< $(BUILD)/libspecula.a -o $@ $(TEST_LIBS) $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libspecula.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/libspecula.a -o $@ $(LDLIBS)

$(BUILD)/examples/%: examples/%.c $(BUILD)/libspecula.a
	@mkdir -p $(dir $@)
	$(CC) $(EX_CFLAGS) $< $(BUILD)/libspecula.a -o $@ $(LDLIBS)

# The CLI binary and the examples are needed by the tests that run them.
check: $(TEST_BIN) $(BUILD)/specula $(EX_BIN)
	@scripts/check_layers.sh
	@scripts/check_api.sh
	@scripts/run_tests.sh $(BUILD) $(TEST_JOBS)

run: $(BUILD)/specula
	$(BUILD)/specula run

# libFuzzer harnesses (fuzz/*.c), built with clang against a library built
# with ASan+UBSan and fuzzer coverage; `make fuzz-run` runs each for
# FUZZ_SECONDS on its seed corpus (fuzz/corpus/NAME), as CI does.
FUZZ_SRC := $(wildcard fuzz/fuzz_*.c)
FUZZ_BIN := $(FUZZ_SRC:fuzz/%.c=build-fuzz/%)
FUZZ_SECONDS ?= 20
fuzz:
	$(MAKE) lib BUILD=build-fuzz CC=clang SAN=0 \
	  EXTRA_CFLAGS="-O1 -fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined"
	$(MAKE) $(FUZZ_BIN)
# A harness may link CLI sources too: FUZZ_TOOLS_NAME (the server's
# request side for fuzz_serve_request, without the HTTP server).
FUZZ_TOOLS_serve_request := tools/serve_request.c tools/serve_compat.c tools/cli_util.c
build-fuzz/fuzz_serve_request: $(FUZZ_TOOLS_serve_request) tools/serve_request.h tools/serve_compat.h tools/cli.h
build-fuzz/fuzz_%: fuzz/fuzz_%.c fuzz/fuzz_util.h build-fuzz/libspecula.a
	clang -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Werror -Iinclude $(SRC_INC) -Itools \
	  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined $< $(FUZZ_TOOLS_$*) \
	  build-fuzz/libspecula.a -o $@ $(LDLIBS) -pthread
# The AVX-512 kernels (always-inlined tiles for every packed type and tile
# width) took clang over 5 minutes with the sanitizer and coverage
# instrumentation, a third of CI; the fuzz build compiles that one file
# without the instrumentation (the SAN build runs the whole suite through the same
# kernels under ASan and UBSan).
build-fuzz/obj/engine/ops_avx512.o: CFLAGS := $(filter-out -fsanitize=% -fno-sanitize-recover=%,$(CFLAGS))
fuzz-run: fuzz
	scripts/fuzz_run.sh $(FUZZ_SECONDS)

clean:
	rm -rf build build-san build-clang build-fuzz

-include $(wildcard $(BUILD)/obj/*/*.d $(BUILD)/tests/*.d)
