# Fuzzing (included at the end of the Makefile). Every tests/fuzz/fuzz_T.c
# defines LLVMFuzzerTestOneInput and is built twice:
#   build/fuzz/T         libFuzzer: clang, -fsanitize=fuzzer,address,undefined,
#                        linked with the library compiled by clang with
#                        coverage (build/fuzz/obj, build/fuzz/libdpm-fuzz.a)
#   build/fuzz/replay-T  gcc with the project's ASan flags and libdpm-asan.a,
#                        plus tests/fuzz/replay.c's main(): runs the target
#                        once on each file given; needs no clang.
# Seeds are tests/fuzz/corpus/T/, crash inputs kept as regression tests
# tests/fuzz/regress/T/. tests/fuzz/fuzz.sh runs and replays them.
#
#   make fuzz [FUZZ_SECONDS=60] [FUZZ_TARGETS="idx config"] [FUZZ_JOBS=1]
#             each target for FUZZ_SECONDS (FUZZ_JOBS at once), one line
#             each; fails when any found something
#   make fuzz-replay     replay every corpus and regression input (make test
#                        does this too)
#   make fuzz-build      build every libFuzzer target
#   make fuzz-seeds      rewrite the generated seeds (tests/fuzz/gen_seeds.c)
#   make fuzz-clean      forget the scratch corpora, artifacts and logs

FUZZ_SRC     := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_ALL     := $(patsubst tests/fuzz/fuzz_%.c,%,$(FUZZ_SRC))
FUZZ_TARGETS ?= $(FUZZ_ALL)
FUZZ_SECONDS ?= 60
FUZZ_JOBS    ?= 1
ifneq ($(filter fuzz,$(MAKECMDGOALS)),)
ifneq ($(filter-out $(FUZZ_ALL),$(FUZZ_TARGETS)),)
$(error FUZZ_TARGETS: no target $(filter-out $(FUZZ_ALL),$(FUZZ_TARGETS)); targets: $(FUZZ_ALL))
endif
endif
ifndef FUZZ_CC
FUZZ_CC := $(or $(shell command -v clang-14 2>/dev/null),clang)
endif
export FUZZ_CC
ifndef FUZZ_CXX
FUZZ_CXX := $(or $(shell command -v clang++-14 2>/dev/null),clang++)
endif

FUZZ_SAN    := -fsanitize=address,undefined -fno-sanitize-recover=undefined \
               -fno-omit-frame-pointer
# The project's flags, then clang's: -O1 for speed with sanitizers, line
# tables only (as the gcc sanitizer builds: the Makefile's ASAN), and no
# -Werror (clang warns where gcc does not; the gcc build keeps -Werror).
FUZZ_CFLAGS  = $(ALL_CFLAGS) -O1 -gline-tables-only $(FUZZ_SAN) -fsanitize=fuzzer-no-link \
               -Wno-error -Wno-missing-field-initializers
# The C++ of the library (the Gloo shim) likewise, with clang++, less the
# two checks whose handlers only clang++'s link brings (the targets link
# with clang).
FUZZ_CXXFLAGS = $(ALL_CXXFLAGS) -O1 -gline-tables-only $(FUZZ_SAN) -fsanitize=fuzzer-no-link \
                -Wno-error -fno-sanitize=function,vptr
FUZZ_LIB_OBJ := $(call obj,fuzz/obj,$(LIB_SRC))
FUZZ_BINS    := $(addprefix $(BUILD)/fuzz/,$(FUZZ_ALL))
FUZZ_REPLAY  := $(addprefix $(BUILD)/fuzz/replay-,$(FUZZ_ALL))

.PHONY: fuzz fuzz-build fuzz-replay fuzz-seeds fuzz-clean

$(BUILD)/fuzz/obj/%.o: %.c | $(PROTO_H)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@
$(BUILD)/fuzz/obj/proto/%.o: $(BUILD)/proto/%.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@
$(BUILD)/fuzz/obj/%.o: %.cc | $(PROTO_H)
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -c $< -o $@

$(BUILD)/fuzz/libdpm-fuzz.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_BINS): $(BUILD)/fuzz/%: $(BUILD)/fuzz/obj/tests/fuzz/fuzz_%.o \
                               $(BUILD)/fuzz/libdpm-fuzz.a
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)

# The replay binaries: objects from the Makefile's $(BUILD)/asan/%.o rule.
$(FUZZ_REPLAY): $(BUILD)/fuzz/replay-%: $(BUILD)/asan/tests/fuzz/fuzz_%.o \
                                        $(BUILD)/asan/tests/fuzz/replay.o \
                                        $(BUILD)/libdpm-asan.a
	@mkdir -p $(dir $@)
	$(CC) $(ASAN) -o $@ $^ $(LDLIBS)

# `make test` replays every target (tests/run.sh); with clang's libFuzzer at
# hand, or in CI, it also smoke-runs each libFuzzer target.
FUZZ_HAVE_LIBFUZZER := $(wildcard $(shell $(FUZZ_CC) --print-runtime-dir 2>/dev/null)/libclang_rt.fuzzer-x86_64.a)
test: $(FUZZ_REPLAY) $(if $(or $(FUZZ_HAVE_LIBFUZZER),$(filter true,$(CI))),$(FUZZ_BINS))

fuzz-build: deps $(FUZZ_BINS)

fuzz-replay: deps $(FUZZ_REPLAY)
	@fail=0; for t in $(FUZZ_ALL); do sh tests/fuzz/fuzz.sh replay $$t || fail=1; done; \
	exit $$fail

fuzz: deps $(addprefix $(BUILD)/fuzz/,$(FUZZ_TARGETS))
	@echo "fuzz: $(words $(FUZZ_TARGETS)) targets, $(FUZZ_SECONDS) s each, $(FUZZ_JOBS) at once"
	@printf '%s\n' $(FUZZ_TARGETS) | \
	  xargs -P $(FUZZ_JOBS) -I{} sh tests/fuzz/fuzz.sh run {} $(FUZZ_SECONDS) || \
	  { echo "fuzz: found something; see build/fuzz/artifacts/"; exit 1; }

# Seeds written by the project's own code (tests/fuzz/gen_seeds.c).
$(BUILD)/fuzz/gen_seeds: $(BUILD)/obj/tests/fuzz/gen_seeds.o $(BUILD)/libdpm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

fuzz-seeds: deps $(BUILD)/fuzz/gen_seeds
	OPENBLAS_NUM_THREADS=1 $(BUILD)/fuzz/gen_seeds tests/fuzz/corpus

fuzz-clean:
	rm -rf $(BUILD)/fuzz/work $(BUILD)/fuzz/artifacts $(BUILD)/fuzz/logs
