# dpm build. Outputs go under build/ (git-ignored); protobuf C code is
# generated there. `make` builds everything, `make test` runs every test,
# `make bench` the benchmarks, `make deps` installs missing Debian packages.

CC       ?= gcc
CXX      ?= g++
BUILD    := build
PKGS     := libprotobuf-c yaml-0.1 zlib openblas libuv nanomsg lmdb libpng libjpeg
# Deferred (=): on a fresh machine the packages exist only once `deps` ran.
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
WARN     := -Wall -Wextra -Werror
CFLAGS   ?= -O2 -g -ftree-vectorize -fno-math-errno
# Include folders by layer: the daemon sees no client headers, the client no
# daemon headers, common/ neither; tests, benchmarks and tools see all.
INC      = -Iinclude -Idaemon -Iclient -I.
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) $(INC) -I$(BUILD) $(PKG_CFLAGS) \
             -MMD -MP
# C++ (the Gloo shim, daemon/**/*.cc): C++17, the same warnings and folders.
# Debian's libgloo-dev ships no pkg-config file; its redis_store.h includes <hiredis.h>.
GLOO_CFLAGS := -I/usr/include/hiredis
GLOO_LIBS   := -lgloo -lhiredis -lstdc++
ALL_CXXFLAGS = -std=c++17 $(WARN) $(CFLAGS) $(INC) -I$(BUILD) $(GLOO_CFLAGS) -MMD -MP
# libjpeg-turbo (libjpeg62-turbo-dev) ships libjpeg.pc, but older releases
# do not: it is linked by name.
LDLIBS   = $(PKG_LIBS) -ljpeg $(GLOO_LIBS) -lpthread -lm
# The ASan build is the test build: it also has the fenced test backend
# (daemon/backend/fenced/, devices fenced:N). The sanitizer builds carry
# line tables only (-g1, clang's -gline-tables-only): their reports still
# name each frame's file:line, inlined ones too, and they compile in about
# 70% of the CPU time of full debug info (the 25 largest sources under
# ASan: 25.3 s against 35.3 s). The programs keep -g.
ASAN     := -O1 -g1 -fsanitize=address,undefined -fno-omit-frame-pointer \
            -fno-sanitize-recover=undefined -DDPM_TEST_BUILD
# The CPU kernels (backend/cpu, the 16-bit conversions) build at -O2 in
# the ASan flavour too, still instrumented: at -O1 the register-tiled
# products spill, and the unit tests and ASan dpmd spent most of their time
# there (the memshare example test: 14.3 s at -O1, 6.0 s at -O2).
ASAN_KERNELS := $(BUILD)/asan/daemon/backend/cpu/%.o $(BUILD)/asan/daemon/engine/lowp.o
# The race tests (tests/race) run under ThreadSanitizer.
TSAN     := -O1 -g1 -fsanitize=thread -fno-omit-frame-pointer

# The CUDA backend: a plugin (build/libdpm_cuda.so) that the programs
# dlopen (daemon/backend/cuda_load.h), built whenever nvcc is found; CUDA=0
# skips it. Its C files (daemon/backend/cuda/*.c, and its own copies of the
# caching allocator's pool.c and the communicators' group core
# comm/group.c) compile with gcc, its kernels (*.cu) with nvcc for sm_80
# and sm_90 plus PTX; it links CUDA's libraries and nothing of the engine (-Wl,--no-undefined holds it to that). Beside it,
# build/libdpm_cuda_probe.so: the driver probe alone (cudart only), which
# the programs ask first, so that a host without a GPU never maps cuBLASLt.

CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(shell command -v nvcc 2>/dev/null || ls $(CUDA_HOME)/bin/nvcc 2>/dev/null)
CUDA      ?= $(if $(NVCC),1,0)
CUDA_ARCH := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90
CUDA_SRC  := $(wildcard daemon/backend/cuda/*.c) daemon/backend/pool.c daemon/comm/group.c
CUDA_CU   := $(wildcard daemon/backend/cuda/*.cu)
CUDA_OBJ  := $(patsubst %.c,$(BUILD)/cuda/%.o,$(CUDA_SRC)) \
             $(patsubst %.cu,$(BUILD)/cuda/%.cu.o,$(CUDA_CU))
CUDA_PLUGIN := $(if $(filter 1,$(CUDA)),$(BUILD)/libdpm_cuda.so $(BUILD)/libdpm_cuda_probe.so)
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudnn -lcublasLt -lcublas \
             -lnccl -lcudart -lstdc++ -lpthread -lm

PROTO_C  := $(BUILD)/proto/dpm.pb-c.c
PROTO_H  := $(BUILD)/proto/dpm.pb-c.h
# ONNX's message subset (proto/onnx.proto), for the predictor's ONNX export.
ONNX_C   := $(BUILD)/proto/onnx.pb-c.c
ONNX_H   := $(BUILD)/proto/onnx.pb-c.h
ENGINE_SRC := $(wildcard daemon/engine/*.c daemon/predictor/*.c daemon/ops/*.c daemon/io/*.c \
                          daemon/comm/*.c daemon/parallel/*.c daemon/backend/*.c \
                          daemon/backend/cpu/*.c daemon/backend/fenced/*.c \
                          daemon/train/*.c daemon/server/*.c daemon/server/*/*.c \
                          daemon/pack/*.c)
ENGINE_SRC := $(filter-out %_main.c,$(ENGINE_SRC)) \
              $(wildcard daemon/*/*.cc daemon/*/*/*.cc)
SPEC_SRC := $(wildcard common/*.c client/lib/*.c)
LIB_SRC  := $(ENGINE_SRC) $(SPEC_SRC) $(PROTO_C) $(ONNX_C)
CTL_SRC  := $(wildcard client/dpmctl/*.c)
# The unit tests, with the op cases that they and the GPU checks run
# (tests/opcases/).
TEST_SRC := $(wildcard tests/unit/*.c tests/opcases/*.c)
BENCH_SRC := $(wildcard bench/*.c)
BENCHES  := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))

obj = $(patsubst %.cc,$(BUILD)/$(1)/%.o,$(patsubst %.c,$(BUILD)/$(1)/%.o,$(patsubst $(BUILD)/%,%,$(2))))
LIB_OBJ      := $(call obj,obj,$(LIB_SRC))
LIB_ASAN_OBJ := $(call obj,asan,$(LIB_SRC))
LIB_TSAN_OBJ := $(call obj,tsan,$(LIB_SRC))
RACE_OBJ     := $(call obj,tsan,$(wildcard tests/race/*.c) tests/unit/main.c \
                                tests/unit/trainer_fixture.c)
TEST_OBJ     := $(call obj,asan,$(TEST_SRC))

# Objects made on the way to a program by the pattern rules of bench/ and
# tests/tools/ are kept: deleted, the .d files of the next make name them,
# so every later make would build them and relink their programs (and
# remake the GPU bundle while the tests use it). Only these: a missing
# object that make counts as secondary is not rebuilt while what it goes
# into is newer than its source (a file moved with git mv keeps its date).
.SECONDARY: $(call obj,obj,$(wildcard bench/*.c tests/tools/*.c))
.PHONY: all deps test bench demo clean format install
PROGS := $(BUILD)/dpmd $(BUILD)/dpmctl $(BUILD)/dpm-train $(BUILD)/dpm-pack
# The man pages and dpmctl's bash completion, which the programs write from
# their own tables (dpmctl --man and --completion bash: its verb and option
# tables; dpmd --man: the config's key table; dpm-train --man: its flags).
DOCS := $(BUILD)/man/dpmctl.1 $(BUILD)/man/dpmd.8 $(BUILD)/man/dpm-train.1 \
        $(BUILD)/man/dpm-pack.1 \
        $(BUILD)/completion/dpmctl
all: $(PROGS) $(BUILD)/tests/unit $(BENCHES) $(CUDA_PLUGIN) $(DOCS)

docs: $(DOCS)
.PHONY: docs
# The spec reference: its tables come from the parser's key tables and the
# op table (tests/tools/spec_doc.c); `make test` checks it is up to date
# (tests/run.sh, spec-doc). Written in the tree, to be committed.
docs/SPEC.md: docs/SPEC.md.in $(BUILD)/tests/spec_doc
	$(BUILD)/tests/spec_doc $< >$@.tmp && mv $@.tmp $@
$(BUILD)/man/dpmctl.1: $(BUILD)/dpmctl
$(BUILD)/man/dpmd.8: $(BUILD)/dpmd
$(BUILD)/man/dpm-train.1: $(BUILD)/dpm-train
$(BUILD)/man/dpm-pack.1: $(BUILD)/dpm-pack
$(BUILD)/man/%:
	@mkdir -p $(dir $@)
	$< --man >$@.tmp && mv $@.tmp $@
$(BUILD)/completion/dpmctl: $(BUILD)/dpmctl
	@mkdir -p $(dir $@)
	$< --completion bash >$@.tmp && mv $@.tmp $@

deps:
	@./scripts/deps.sh

# The ONNX export's test (tests/e2e/onnx_export.sh) needs onnx, onnxruntime
# and numpy: a virtualenv in build/onnx-venv, made by the test targets only.
onnx-venv: deps
	@./scripts/deps.sh --onnx-venv
.PHONY: onnx-venv

$(PROTO_C) $(PROTO_H): proto/dpm.proto | deps
	@mkdir -p $(BUILD)
	protoc-c --c_out=$(BUILD) $<
$(ONNX_C) $(ONNX_H): proto/onnx.proto | deps
	@mkdir -p $(BUILD)
	protoc-c --c_out=$(BUILD) $<
# The exporter includes the generated header (the other objects' order-only
# prerequisite is dpm.pb-c.h).
$(foreach v,obj asan tsan fuzz/obj,$(BUILD)/$(v)/daemon/predictor/onnx_export.o): $(ONNX_H)

$(BUILD)/obj/%.o: %.c | $(PROTO_H)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@
$(BUILD)/obj/proto/%.o: $(BUILD)/proto/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Wno-error -c $< -o $@
$(BUILD)/asan/%.o: %.c | $(PROTO_H)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(ASAN) -c $< -o $@
$(BUILD)/asan/proto/%.o: $(BUILD)/proto/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(ASAN) -Wno-error -c $< -o $@
$(BUILD)/tsan/%.o: %.c | $(PROTO_H)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(TSAN) -c $< -o $@
$(BUILD)/tsan/proto/%.o: $(BUILD)/proto/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(TSAN) -Wno-error -c $< -o $@
$(BUILD)/obj/%.o: %.cc | $(PROTO_H)
	@mkdir -p $(dir $@)
	$(CXX) $(ALL_CXXFLAGS) -c $< -o $@
$(BUILD)/asan/%.o: %.cc | $(PROTO_H)
	@mkdir -p $(dir $@)
	$(CXX) $(ALL_CXXFLAGS) $(ASAN) -c $< -o $@
$(BUILD)/tsan/%.o: %.cc | $(PROTO_H)
	@mkdir -p $(dir $@)
	$(CXX) $(ALL_CXXFLAGS) $(TSAN) -c $< -o $@

$(BUILD)/cuda/%.o: %.c | $(PROTO_H)
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) -fPIC -fvisibility=hidden \
	  -Iinclude -Idaemon -I. -I$(CUDA_HOME)/include -MMD -MP -c $< -o $@
$(BUILD)/cuda/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) -O3 -std=c++17 $(CUDA_ARCH) -Werror all-warnings \
	  -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra,-Werror \
	  -Idaemon -I. -MMD -MP -c $< -o $@
$(BUILD)/libdpm_cuda.so: $(CUDA_OBJ)
	$(CC) -shared -Wl,--no-undefined -o $@ $^ $(CUDA_LIBS)
$(BUILD)/libdpm_cuda_probe.so: $(BUILD)/cuda/daemon/backend/cuda/probe.o
	$(CC) -shared -Wl,--no-undefined -o $@ $^ -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
	  -lcudart

# Archives are written anew: ar r matches members by base name, and two
# objects share one (engine/model.o, server/models/model.o).
$(BUILD)/libdpm.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/libdpm-asan.a: $(LIB_ASAN_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/libdpm-tsan.a: $(LIB_TSAN_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/dpm-train: $(BUILD)/obj/daemon/train/dpm_train_main.o $(BUILD)/libdpm.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# The packing tool (daemon/pack/): image sets into tar shards or an LMDB.
$(BUILD)/dpm-pack: $(BUILD)/obj/daemon/pack/dpm_pack_main.o $(BUILD)/libdpm.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/dpmd: $(BUILD)/obj/daemon/server/dpmd_main.o $(BUILD)/libdpm.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/dpmctl: $(call obj,obj,$(CTL_SRC)) $(BUILD)/libdpm.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# ASan builds of the programs, for the integration tests' bad-input checks.
$(BUILD)/asan-bin/dpmd: $(BUILD)/asan/daemon/server/dpmd_main.o $(BUILD)/libdpm-asan.a
	@mkdir -p $(dir $@)
	$(CC) $(ASAN) -o $@ $^ $(LDLIBS)

# ThreadSanitizer's dpmd, for the restore race (tests/e2e/dpmd_restore_race.sh).
$(BUILD)/tsan-bin/dpmd: $(BUILD)/tsan/daemon/server/dpmd_main.o $(BUILD)/libdpm-tsan.a
	@mkdir -p $(dir $@)
	$(CC) $(TSAN) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/tools/%.o $(BUILD)/libdpm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/obj/daemon/%.o $(BUILD)/asan/daemon/%.o $(BUILD)/tsan/daemon/%.o: \
  INC = -Iinclude -Idaemon -I.
$(BUILD)/obj/client/%.o $(BUILD)/asan/client/%.o $(BUILD)/tsan/client/%.o: \
  INC = -Iinclude -Iclient -I.
$(BUILD)/obj/common/%.o $(BUILD)/asan/common/%.o $(BUILD)/tsan/common/%.o: INC = -Iinclude -I.
$(BUILD)/tsan/tests/race/%.o: INC = -Iinclude -Idaemon -Itests/unit -I.

# The ASan dpmd of the tests has test hooks (DPMD_TEST_GATE:
# server/models/lifecycle.c); they do nothing unless the environment asks,
# and build/dpmd has none.
$(BUILD)/asan/daemon/server/models/lifecycle.o: ALL_CFLAGS += -DDPM_TEST_HOOKS
$(ASAN_KERNELS): ASAN += -O2

$(BUILD)/tests/unit: $(TEST_OBJ) $(BUILD)/libdpm-asan.a
	@mkdir -p $(dir $@)
	$(CC) $(ASAN) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/race: $(RACE_OBJ) $(BUILD)/libdpm-tsan.a
	@mkdir -p $(dir $@)
	$(CC) $(TSAN) -o $@ $^ $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(BUILD)/libdpm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
# bench/gloo measures against bare Gloo (bench/gloo_bare.cc).
$(BUILD)/bench/gloo: $(BUILD)/obj/bench/gloo_bare.o

# ---- libraries -------------------------------------------------------------------
# libdpmclient: the client library of include/dpm/client.h (client/lib/),
# common/ and the generated protobuf code. libdpmpredict: the predictor
# runtime of include/dpm/predictor.h: the engine (less predictor
# extraction), the ops, the backends and the rest of the smallest set that
# links (-Wl,--no-undefined fails the link when a file it needs is missing
# here): the communicators' dispatch (comm.c) and the local one, not the
# factory (factory.c) nor gloo, so it needs no Gloo, C++ or network. Each
# is a shared library (soname lib*.so.MAJOR, file
# lib*.so.DPM_VERSION) that exports only its headers' functions
# (pkgconfig/*.map), and a static one, both from position-independent
# objects (build/pic/); make install puts them, the headers and their
# pkg-config files (pkgconfig/*.pc.in) in place.
DPM_VERSION := $(shell sed -n 's/^.define DPM_VERSION "\([^"]*\)".*/\1/p' include/dpm/protocol.h)
DPM_SOMAJOR := $(firstword $(subst ., ,$(DPM_VERSION)))
CLIENT_LIB_SRC  := $(wildcard client/lib/*.c common/*.c) $(PROTO_C)
PREDICT_LIB_SRC := $(filter-out daemon/predictor/predictor_extract.c \
                                daemon/predictor/onnx_export.c, \
                     $(wildcard daemon/engine/*.c daemon/predictor/*.c daemon/ops/*.c \
                                daemon/backend/*.c daemon/backend/cpu/*.c)) \
                   daemon/comm/comm.c daemon/comm/local.c daemon/comm/group.c \
                   common/status.c common/file.c common/escape.c common/device.c \
                   common/suggest.c $(PROTO_C)
CLIENT_LIB_PKGS  := libprotobuf-c nanomsg yaml-0.1 zlib
PREDICT_LIB_PKGS := libprotobuf-c openblas
CLIENT_PIC  := $(call obj,pic,$(CLIENT_LIB_SRC))
PREDICT_PIC := $(call obj,pic,$(PREDICT_LIB_SRC))
DPM_LIBS := $(foreach l,dpmclient dpmpredict,$(BUILD)/lib/lib$(l).a \
              $(BUILD)/lib/lib$(l).so.$(DPM_VERSION))
libs: $(DPM_LIBS)
.PHONY: libs

$(BUILD)/pic/%.o: %.c | $(PROTO_H)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -fPIC -c $< -o $@
$(BUILD)/pic/%.o: %.cc | $(PROTO_H)
	@mkdir -p $(dir $@)
	$(CXX) $(ALL_CXXFLAGS) -fPIC -c $< -o $@
$(BUILD)/pic/proto/%.o: $(BUILD)/proto/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -fPIC -Wno-error -c $< -o $@
$(BUILD)/pic/daemon/%.o: INC = -Iinclude -Idaemon -I.
$(BUILD)/pic/client/%.o: INC = -Iinclude -Iclient -I.
$(BUILD)/pic/common/%.o: INC = -Iinclude -I.

$(BUILD)/lib/libdpmclient.a: $(CLIENT_PIC)
$(BUILD)/lib/libdpmpredict.a: $(PREDICT_PIC)
$(BUILD)/lib/%.a:
	@mkdir -p $(dir $@)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/lib/libdpmclient.so.$(DPM_VERSION): LIB_PKGS = $(CLIENT_LIB_PKGS)
$(BUILD)/lib/libdpmclient.so.$(DPM_VERSION): $(CLIENT_PIC) pkgconfig/dpmclient.map
$(BUILD)/lib/libdpmpredict.so.$(DPM_VERSION): LIB_PKGS = $(PREDICT_LIB_PKGS)
$(BUILD)/lib/libdpmpredict.so.$(DPM_VERSION): $(PREDICT_PIC) pkgconfig/dpmpredict.map
$(BUILD)/lib/%.so.$(DPM_VERSION):
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,$*.so.$(DPM_SOMAJOR) -Wl,--no-undefined \
	  -Wl,--version-script=$(filter %.map,$^) $(LDFLAGS) -o $@ $(filter %.o,$^) \
	  -Wl,--as-needed $$(pkg-config --libs $(LIB_PKGS)) -lpthread -lm
	ln -sf $(notdir $@) $(BUILD)/lib/$*.so.$(DPM_SOMAJOR)
	ln -sf $*.so.$(DPM_SOMAJOR) $(BUILD)/lib/$*.so

# make test: every test (tests/run.sh: unit tests, every end-to-end script,
# source checks, fuzz replays and smokes); make check: the quick tier for the
# edit loop (tests/run.sh --quick: no slow end-to-end script, no fuzz smoke).
# Unit tests run under ASan+UBSan; OpenBLAS single-threaded (each device
# worker calls BLAS on its own, as dpmd does: openblas_set_num_threads(1)); the
# checks run two at a time (TEST_JOBS=N for more or fewer).
# Both first build what they need with TEST_JOBS jobs (default: the CPUs),
# unless make itself was given -j: test-build has protoc-c write the
# generated code once (its rule makes two files), then runs this make again
# with -j and TEST_RUN=no, which builds the target's prerequisites (the
# ONNX virtualenv's pip install beside the compilers) and runs no test.
# make check builds no ThreadSanitizer flavour and no GPU bundle: the
# checks that need them (race, dpmd_restore_race, gpu-run, gpu-rehearsal:
# tests/run.sh's NOT_QUICK) run in make test.
CHECK_NEEDS := $(BUILD)/tests/unit $(PROGS) $(CUDA_PLUGIN) $(BUILD)/asan-bin/dpmd \
               $(BUILD)/tests/nnsend $(BUILD)/tests/ckpt_diff $(BUILD)/tests/pack_check \
               $(BUILD)/tests/gpu_test $(BUILD)/asan-bin/gpu_test $(BUILD)/tests/spec_doc \
               $(if $(CUDA_PLUGIN),$(BUILD)/tests/fake-gpu/libdpm_cuda_probe.so) \
               $(DPM_LIBS)
TEST_NEEDS := $(CHECK_NEEDS) $(BUILD)/tests/race $(BUILD)/tsan-bin/dpmd $(BUILD)/tests/image_tool \
              $(if $(CUDA_PLUGIN),$(BUILD)/gpu-bundle/MANIFEST)
TEST_FUZZ_REPLAY := $(patsubst tests/fuzz/fuzz_%.c,$(BUILD)/fuzz/replay-%, \
                                $(wildcard tests/fuzz/fuzz_*.c))
TEST_CPUS = $(shell nproc 2>/dev/null || echo 1)
.PHONY: check test-build
test-build: deps
	$(if $(TEST_RUN)$(findstring -j,$(MAKEFLAGS)),@:,$(MAKE) $(PROTO_H) && \
	  $(MAKE) -j$(or $(TEST_JOBS),$(TEST_CPUS)) TEST_RUN=no $(filter test check,$(MAKECMDGOALS)))

test: deps test-build onnx-venv $(TEST_NEEDS)
	$(if $(TEST_RUN),@:,OPENBLAS_NUM_THREADS=1 ./tests/run.sh)

check: deps test-build $(CHECK_NEEDS) $(TEST_FUZZ_REPLAY)
	$(if $(TEST_RUN),@:,OPENBLAS_NUM_THREADS=1 ./tests/run.sh --quick)

bench: deps $(BENCHES) $(BUILD)/dpm-train
	for b in $(BENCHES); do OPENBLAS_NUM_THREADS=1 $$b || exit 1; done

# A real dpmd trains the MLP on two CPU replicas for one epoch, evaluates,
# checkpoints, extracts a predictor and runs it (scripts/demo.sh).
demo: deps $(PROGS) $(CUDA_PLUGIN)
	./scripts/demo.sh

# Two dpmd on 127.0.0.1 train the MLP as one job of 2 shards x 1 device for an
# epoch, then status of both, a checkpoint, a predictor (scripts/demo_fleet.sh).
demo-fleet: deps $(PROGS) $(CUDA_PLUGIN)
	./scripts/demo_fleet.sh
.PHONY: demo-fleet

# Fashion-MNIST as JPEG tar shards (dpm-pack: quality 90, upscaled to 32 x
# 32), in build/data/fmnist-jpeg: what examples/resnet20_fmnist_jpeg.yaml
# trains from.
FMNIST := /usr/share/datasets/fashion-mnist
fmnist-shards: $(BUILD)/data/fmnist-jpeg/test-000000.tar
$(BUILD)/data/fmnist-jpeg/test-000000.tar: $(BUILD)/dpm-pack
	@mkdir -p $(dir $@)
	$(BUILD)/dpm-pack --images $(FMNIST)/train-images-idx3-ubyte.gz \
	  --labels $(FMNIST)/train-labels-idx1-ubyte.gz --out $(dir $@)train \
	  --encode jpeg --quality 90 --resize 32 --per-shard 10000
	$(BUILD)/dpm-pack --images $(FMNIST)/t10k-images-idx3-ubyte.gz \
	  --labels $(FMNIST)/t10k-labels-idx1-ubyte.gz --out $(dir $@)test \
	  --encode jpeg --quality 90 --resize 32 --per-shard 10000
.PHONY: fmnist-shards

# make install [PREFIX=/usr/local] [DESTDIR=...]: binaries, the predictor
# and client headers, the libraries and their pkg-config files (in
# LIBDIR=PREFIX/lib), the systemd unit and the default config (never
# overwriting an existing /etc/dpmd/dpmd.yaml), the man pages (MANDIR),
# dpmctl's bash completion (BASHCOMPDIR) and, when built, the CUDA
# plugin in PREFIX/lib/dpm/ (where the programs look for it: ../lib/dpm/
# from their folder). Without DESTDIR, as root,
# ldconfig then updates the loader's cache.
PREFIX  ?= /usr/local
SYSCONF ?= /etc
UNITDIR ?= /lib/systemd/system
LIBDIR  ?= $(PREFIX)/lib
INCDIR  ?= $(PREFIX)/include
MANDIR  ?= $(PREFIX)/share/man
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
# The .pc files name LIBDIR and INCDIR from ${prefix} when they are under it,
# so that pkg-config --define-variable=prefix=... relocates them.
pc_dir = $(patsubst $(PREFIX)/%,$${prefix}/%,$(1))
install: $(PROGS) $(DPM_LIBS) $(CUDA_PLUGIN) $(DOCS)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(INCDIR)/dpm \
	  $(DESTDIR)$(INCDIR)/dpm/proto $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONF)/dpmd
	install -m 755 $(PROGS) $(DESTDIR)$(PREFIX)/bin/
	install -d $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(BASHCOMPDIR)
	install -m 644 $(BUILD)/man/dpmctl.1 $(BUILD)/man/dpm-train.1 $(BUILD)/man/dpm-pack.1 \
	  $(DESTDIR)$(MANDIR)/man1/
	install -m 644 $(BUILD)/man/dpmd.8 $(DESTDIR)$(MANDIR)/man8/
	install -m 644 $(BUILD)/completion/dpmctl $(DESTDIR)$(BASHCOMPDIR)/dpmctl
	install -m 644 include/dpm/*.h $(DESTDIR)$(INCDIR)/dpm/
	install -m 644 $(PROTO_H) $(DESTDIR)$(INCDIR)/dpm/proto/
	$(MAKE) -s unit UNIT_BINDIR=$(PREFIX)/bin UNIT_OUT=$(DESTDIR)$(UNITDIR)/dpmd.service
	chmod 644 $(DESTDIR)$(UNITDIR)/dpmd.service
	[ -e $(DESTDIR)$(SYSCONF)/dpmd/dpmd.yaml ] || \
	  install -m 644 systemd/dpmd.yaml $(DESTDIR)$(SYSCONF)/dpmd/dpmd.yaml
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig
	for l in dpmclient dpmpredict; do \
	  install -m 644 $(BUILD)/lib/lib$$l.a $(DESTDIR)$(LIBDIR)/ && \
	  install -m 755 $(BUILD)/lib/lib$$l.so.$(DPM_VERSION) $(DESTDIR)$(LIBDIR)/ && \
	  ln -sf lib$$l.so.$(DPM_VERSION) $(DESTDIR)$(LIBDIR)/lib$$l.so.$(DPM_SOMAJOR) && \
	  ln -sf lib$$l.so.$(DPM_SOMAJOR) $(DESTDIR)$(LIBDIR)/lib$$l.so && \
	  sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(call pc_dir,$(LIBDIR))|' \
	    -e 's|@INCLUDEDIR@|$(call pc_dir,$(INCDIR))|' -e 's|@VERSION@|$(DPM_VERSION)|' \
	    pkgconfig/$$l.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/$$l.pc && \
	  chmod 644 $(DESTDIR)$(LIBDIR)/pkgconfig/$$l.pc || exit 1; \
	done
	for p in libdpm_cuda.so libdpm_cuda_probe.so; do \
	  [ ! -f $(BUILD)/$$p ] || install -D -m 755 $(BUILD)/$$p $(DESTDIR)$(PREFIX)/lib/dpm/$$p || exit 1; \
	done
	[ -n "$(DESTDIR)" ] || [ "$$(id -u)" -ne 0 ] || ldconfig

# make unit [UNIT_BINDIR=DIR] [UNIT_OUT=FILE]: the systemd unit from its
# template (systemd/dpmd.service.in), ExecStart in UNIT_BINDIR (default
# PREFIX/bin), into UNIT_OUT (default build/dpmd.service): what `make
# install` installs, and what `systemd-analyze verify` checks.
UNIT_BINDIR ?= $(PREFIX)/bin
UNIT_OUT    ?= $(BUILD)/dpmd.service
.PHONY: unit
unit:
	@mkdir -p $(dir $(UNIT_OUT))
	sed 's|@BINDIR@|$(UNIT_BINDIR)|g' systemd/dpmd.service.in > $(UNIT_OUT)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# Fuzzing (libFuzzer, clang): `make fuzz FUZZ_SECONDS=N`; the regression and
# seed inputs are replayed by `make test`.
include tests/fuzz/fuzz.mk

# The GPU checks (tests/gpu/run.sh): build/tests/gpu_test.
include tests/gpu/gpu.mk
