# The GPU checks (tests/gpu/run.sh): build/tests/gpu_test, linked like the
# benchmark programs (the CUDA plugin is dlopened at run time, never
# linked). Its objects see the unit tests' folder as the tests do.
# bench/gpu.c is built with every bench/*.c by `make all`.
$(BUILD)/obj/tests/gpu/%.o: INC = -Iinclude -Idaemon -Itests/unit -I.

# It runs the op table of tests/opcases/ (cases.c, and oprun.c to run them).
OPCASES_SRC := $(wildcard tests/opcases/*.c)

$(BUILD)/tests/gpu_test: $(BUILD)/obj/tests/gpu/gpu_test.o $(call obj,obj,$(OPCASES_SRC)) \
  $(BUILD)/libdpm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# The same program in the test build (ASan, the fenced backend): its checks
# on fenced devices (tests/run.sh: gpu-harness), --kind fenced.
$(BUILD)/asan/tests/gpu/%.o: INC = -Iinclude -Idaemon -Itests/unit -I.
$(BUILD)/asan-bin/gpu_test: $(BUILD)/asan/tests/gpu/gpu_test.o \
  $(call obj,asan,$(OPCASES_SRC)) $(BUILD)/libdpm-asan.a
	@mkdir -p $(dir $@)
	$(CC) $(ASAN) -o $@ $^ $(LDLIBS)

# make gpu-bundle: build/gpu-bundle/, what the GPU checks need on a bare
# CUDA host (tests/gpu/bundle.sh says what is in it; run it with
# build/gpu-bundle/run.sh). Made from make's outputs, so it needs the
# CUDA plugin (CUDA=1).
GPU_BUNDLE := $(BUILD)/gpu-bundle/MANIFEST
.PHONY: gpu-bundle
gpu-bundle: $(GPU_BUNDLE)
$(GPU_BUNDLE): $(PROGS) $(BUILD)/tests/gpu_test $(BUILD)/bench/gpu $(CUDA_PLUGIN) \
  tests/gpu/bundle.sh tests/gpu/entry.sh examples/fmnist_mlp.yaml examples/fmnist_cnn.yaml
	$(if $(CUDA_PLUGIN),,@echo "gpu-bundle: no CUDA plugin (nvcc not found, or CUDA=0)"; exit 1)
	sh tests/gpu/bundle.sh $(BUILD)/gpu-bundle $(BUILD)

# The rehearsal's stand-in probe (tests/gpu/fake_probe.c): one GPU, always.
$(BUILD)/tests/fake-gpu/libdpm_cuda_probe.so: tests/gpu/fake_probe.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(WARN) -shared -fPIC -Iinclude -Idaemon -I. -o $@ $<
