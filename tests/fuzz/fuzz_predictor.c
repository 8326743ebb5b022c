/* Fuzz target: the predictor runtime (include/dpm/predictor.h) loading a
 * PredictorDef from arbitrary bytes. A predictor that loads is described
 * through every accessor and, when small, run on zero inputs at batch 1 and
 * then 2 (which rebinds the net), reading every output.
 *
 * Memory: the header promises that a predictor that loaded fails to run
 * only for a batch the ops cannot take or for lack of memory, yet a file of
 * a few bytes may declare a huge tensor (a Fill op's shape, a Conv's pad).
 * Running those for real would only measure the machine, so this target
 * makes any single allocation over 32 MiB fail (ASan's
 * max_allocation_size_mb with allocator_may_return_null; libFuzzer itself
 * needs about 20 MiB at once): the runtime must then answer DPM_NOMEM
 * instead of crashing. At most 16 ops are run, so a run stays near 1 GiB;
 * the RSS limit leaves room for that beside the fuzzer, and the per-input
 * timeout for such a run's arithmetic under ASan.
 * fuzz-flags: -rss_limit_mb=4096 -timeout=30 */
#include <stdlib.h>
#include <string.h>

#include "dpm/predictor.h"
#include "fuzz.h"

#define RUN_MAX_OPS 16
#define RUN_MAX_FLOATS (1 << 14) /* floats of all inputs for one example */

const char *__asan_default_options(void);
const char *__asan_default_options(void) {
  return "allocator_may_return_null=1:max_allocation_size_mb=32";
}

static void describe(const dpm_predictor *p) {
  FUZZ_CHECK(dpm_predictor_name(p) != NULL);
  int n_in = dpm_predictor_num_inputs(p), n_out = dpm_predictor_num_outputs(p);
  FUZZ_CHECK(n_in >= 1 && n_out >= 1);
  for (int i = 0; i < n_in; i++) {
    int64_t dims[3];
    int nd = dpm_predictor_input_shape(p, i, dims);
    FUZZ_CHECK(dpm_predictor_input_name(p, i) != NULL && nd >= 0 && nd <= 3);
    int64_t numel = 1;
    for (int k = 0; k < nd; k++) numel *= dims[k];
    FUZZ_CHECK(dpm_predictor_input_size(p, i) == numel);
  }
  for (int i = 0; i < n_out; i++) FUZZ_CHECK(dpm_predictor_output_name(p, i) != NULL);
  int64_t dims[3];
  FUZZ_CHECK(!dpm_predictor_input_name(p, n_in) && !dpm_predictor_output_name(p, n_out));
  FUZZ_CHECK(dpm_predictor_input_shape(p, n_in, dims) == -1);
  FUZZ_CHECK(dpm_predictor_input_size(p, -1) == -1);
  FUZZ_CHECK(dpm_predictor_input_scale(p) > 0);
  FUZZ_CHECK(dpm_predictor_num_ops(p) >= 0);
}

/* Runs p on zero inputs of `batch` examples and reads every output. */
static void run(dpm_predictor *p, int batch) {
  int n_in = dpm_predictor_num_inputs(p), n_out = dpm_predictor_num_outputs(p);
  float **in = calloc((size_t)n_in, sizeof *in);
  int ok = in != NULL;
  for (int i = 0; ok && i < n_in; i++)
    ok = (in[i] = calloc((size_t)dpm_predictor_input_size(p, i) * (size_t)batch + 1,
                         sizeof **in)) != NULL;
  dpm_err err = {0};
  if (ok && dpm_predictor_run(p, (const float *const *)in, batch, &err) == DPM_OK) {
    for (int i = 0; i < n_out; i++) {
      int64_t dims[4];
      int nd = -1;
      const float *y = dpm_predictor_output(p, i, dims, &nd);
      FUZZ_CHECK(y != NULL && nd >= 0 && nd <= 4);
      size_t numel = 1;
      for (int k = 0; k < nd; k++) {
        FUZZ_CHECK(dims[k] >= 0);
        numel *= (size_t)dims[k];
      }
      fuzz_touch(y, numel * sizeof *y);
    }
    int nd = -1;
    FUZZ_CHECK(!dpm_predictor_output(p, n_out, NULL, &nd) && nd == 0);
  } else if (ok) {
    FUZZ_CHECK(err.code == DPM_SHAPE || err.code == DPM_NOMEM);
  }
  for (int i = 0; in && i < n_in; i++) free(in[i]);
  free(in);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dpm_predictor *p = NULL;
  dpm_err err = {0};
  if (dpm_predictor_load_buffer(data, size, "fuzz", &p, &err) != DPM_OK) {
    /* Messages name the source, except plain "out of memory". */
    FUZZ_CHECK(p == NULL && err.code != DPM_OK &&
               (err.code == DPM_NOMEM || !strncmp(err.msg, "fuzz: ", 6)));
    return 0;
  }
  describe(p);
  int64_t floats = 0;
  for (int i = 0; i < dpm_predictor_num_inputs(p); i++)
    floats += dpm_predictor_input_size(p, i);
  if (dpm_predictor_num_ops(p) <= RUN_MAX_OPS && floats <= RUN_MAX_FLOATS) {
    run(p, 1);
    run(p, 2);
  }
  dpm_predictor_free(p);
  return 0;
}
