/* A program of a dpm user, built by tests/e2e/install.sh against the
 * installed libdpmpredict only (pkg-config dpmpredict): it loads a
 * predictor directory and runs one batch of COUNT images, read from stdin
 * as raw pixels (COUNT x the input's size bytes, 0..255, as in an IDX file
 * after its header), scaled as dpm/predictor.h says. It prints each image's
 * top-1 class as `dpmctl predict` does ("I  class C  p P"), so that the two
 * can be compared.
 *
 *   predict DIR COUNT < PIXELS */
#include <dpm/predictor.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  if (argc != 3 || atoi(argv[2]) < 1) {
    fprintf(stderr, "usage: predict DIR COUNT < PIXELS\n");
    return 2;
  }
  int count = atoi(argv[2]);
  dpm_predictor *p;
  dpm_err err = {0};
  if (dpm_predictor_load(argv[1], &p, &err)) {
    fprintf(stderr, "load: %s: %s\n", dpm_status_name(err.code), err.msg);
    return 1;
  }
  int64_t size = dpm_predictor_input_size(p, 0);
  size_t n = (size_t)count * (size_t)size;
  unsigned char *px = malloc(n);
  float *in = malloc(n * sizeof *in);
  if (!px || !in || fread(px, 1, n, stdin) != n) {
    fprintf(stderr, "predict: want %zu bytes of pixels on stdin\n", n);
    return 1;
  }
  float scale = (float)dpm_predictor_input_scale(p);
  for (size_t k = 0; k < n; k++) in[k] = (float)px[k] * scale;
  const float *inputs[1] = {in};
  if (dpm_predictor_run(p, inputs, count, &err)) {
    fprintf(stderr, "run: %s: %s\n", dpm_status_name(err.code), err.msg);
    return 1;
  }
  int64_t dims[4];
  int ndim = 0;
  const float *out = dpm_predictor_output(p, 0, dims, &ndim);
  if (!out || ndim != 2 || dims[0] != count) {
    fprintf(stderr, "predict: output '%s' is not [%d, classes]\n",
            dpm_predictor_output_name(p, 0), count);
    return 1;
  }
  for (int i = 0; i < count; i++) {
    const float *row = out + (size_t)i * (size_t)dims[1];
    int best = 0;
    for (int c = 1; c < dims[1]; c++)
      if (row[c] > row[best]) best = c;
    printf("%d  class %d  p %.4f\n", i, best, row[best]);
  }
  free(px);
  free(in);
  dpm_predictor_free(p);
  return 0;
}
