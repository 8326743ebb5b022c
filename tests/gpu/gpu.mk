# The GPU checks (tests/gpu/run.sh): build/tests/gpu_test, linked like the
# benchmark programs (the CUDA plugin is dlopened at run time, never
# linked). Its objects see the unit tests' folder as the tests do.
# bench/gpu.c is built with every bench/*.c by `make all`.
$(BUILD)/obj/tests/gpu/%.o: INC = -Iinclude -Idaemon -Itests/unit -I.

$(BUILD)/tests/gpu_test: $(BUILD)/obj/tests/gpu/gpu_test.o $(BUILD)/libdpm.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
