/* dpmctl predict DIR --input FILE [--labels FILE] [--count N] [--device D]
 *                [--out FILE]:
 * runs the predictor in DIR (include/dpm/predictor.h) on the first N images
 * of an IDX image file (default 10, 0 = all) in batches of up to 256, raw
 * pixels times the predictor's input scale, on device D (default cpu: the
 * host; cuda:N a GPU, refused with the driver's reason when it cannot be
 * used), and prints each image's top-1 class and its probability (output
 * 0's largest value); with --labels, the accuracy. With --out, output 0 of
 * every image is also written to FILE (replaced atomically, common/file.h):
 * raw little-endian float32, N rows of the output's per-image size, in
 * image order, for comparison with other runtimes. No daemon involved. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "dpm/predictor.h"
#include "dpmctl/dpmctl.h"
#include "common/file.h"
#include "common/idx.h"

#define PREDICT_BATCH 256
#define PREDICT_DEFAULT_COUNT 10

static int fail(ctl_ctx *ctx, const dpm_err *err) {
  ctl_error(ctx, dpm_status_name(err->code), "%s", err->msg);
  return CTL_FAILED;
}

int ctl_cmd_predict(ctl_ctx *ctx) {
  const char *dir = ctx->a->pos[0], *input = ctx->a->opt[O_INPUT],
             *labels = ctx->a->opt[O_LABELS];
  uint64_t count = PREDICT_DEFAULT_COUNT;
  if (ctx->a->opt[O_COUNT] && ctl_parse_u64(ctx->a->opt[O_COUNT], INT64_MAX, &count)) {
    ctl_error(ctx, "USAGE", "--count takes a whole number (0: every image)");
    ctl_usage_short(stderr, ctx->a->verb);
    return CTL_USAGE;
  }
  dpm_err err = {0};
  dpm_predictor *p = NULL;
  dpm_idx img = {0}, lab = {0};
  float *buf = NULL, *all = NULL; /* all: --out's rows */
  int64_t all_classes = 0;
  dpm_json j;
  dpm_json_init(&j);
  int rc = CTL_FAILED;

  if (dpm_predictor_load(dir, &p, &err)) {
    rc = fail(ctx, &err);
    goto out;
  }
  if (ctx->a->opt[O_DEVICE] && dpm_predictor_set_device(p, ctx->a->opt[O_DEVICE], &err)) {
    rc = fail(ctx, &err);
    goto out;
  }
  if (dpm_predictor_num_inputs(p) != 1 || dpm_predictor_num_outputs(p) < 1) {
    ctl_error(ctx, "UNSUPPORTED",
              "%s: the predictor has %d inputs and %d outputs; predict feeds one input "
              "of images and reads the first output",
              dir, dpm_predictor_num_inputs(p), dpm_predictor_num_outputs(p));
    goto out;
  }
  int64_t size = dpm_predictor_input_size(p, 0);
  if (dpm_idx_load(NULL, input, 3, &img, &err)) {
    rc = fail(ctx, &err);
    goto out;
  }
  if (img.dim[1] * img.dim[2] != size) {
    int64_t d[3] = {0, 0, 0};
    int nd = dpm_predictor_input_shape(p, 0, d);
    char shape[96] = "";
    size_t k = 0;
    for (int i = 0; i < nd && k < sizeof shape; i++)
      k +=
          (size_t)snprintf(shape + k, sizeof shape - k, "%s%" PRId64, i ? "x" : "", d[i]);
    ctl_error(ctx, "SHAPE",
              "%s: images are %" PRId64 "x%" PRId64 " (%" PRId64
              " values); the predictor's "
              "input '%s' takes %" PRId64 " values (%s)",
              input, img.dim[1], img.dim[2], img.dim[1] * img.dim[2],
              dpm_predictor_input_name(p, 0), size, shape);
    goto out;
  }
  int64_t n = img.dim[0];
  if (count && (int64_t)count < n) n = (int64_t)count;
  if (labels) {
    if (dpm_idx_load(NULL, labels, 1, &lab, &err)) {
      rc = fail(ctx, &err);
      goto out;
    }
    if (lab.dim[0] < n) {
      ctl_error(ctx, "CORRUPT", "%s has %" PRId64 " labels for %" PRId64 " images",
                labels, lab.dim[0], n);
      goto out;
    }
  }
  buf = malloc((size_t)PREDICT_BATCH * (size_t)size * sizeof *buf);
  if (!buf) {
    ctl_error(ctx, "NOMEM", "out of memory");
    goto out;
  }
  float scale = (float)dpm_predictor_input_scale(p);
  int64_t correct = 0;
  if (ctx->json) {
    dpm_json_object(&j, NULL);
    dpm_json_array(&j, "predictions");
  }
  for (int64_t i0 = 0; i0 < n; i0 += PREDICT_BATCH) {
    int b = (int)(n - i0 < PREDICT_BATCH ? n - i0 : PREDICT_BATCH);
    const uint8_t *px = img.data + (size_t)i0 * (size_t)size;
    for (size_t k = 0; k < (size_t)b * (size_t)size; k++) buf[k] = (float)px[k] * scale;
    const float *in = buf;
    if (dpm_predictor_run(p, &in, b, &err)) {
      rc = fail(ctx, &err);
      goto out;
    }
    int64_t dims[4];
    int ndim = 0;
    const float *o = dpm_predictor_output(p, 0, dims, &ndim);
    int64_t classes = 1;
    for (int d = 1; d < ndim; d++) classes *= dims[d];
    if (!o || ndim < 1 || dims[0] != b || classes < 1) {
      ctl_error(ctx, "SHAPE", "%s: output '%s' has no batch dimension of %d", dir,
                dpm_predictor_output_name(p, 0), b);
      goto out;
    }
    if (ctx->a->opt[O_OUT]) {
      if (!all) {
        all_classes = classes;
        if (!(all = malloc((size_t)n * (size_t)classes * sizeof *all))) {
          ctl_error(ctx, "NOMEM", "out of memory");
          goto out;
        }
      }
      memcpy(all + (size_t)i0 * (size_t)classes, o, (size_t)b * (size_t)classes * sizeof *o);
    }
    for (int k = 0; k < b; k++) {
      const float *row = o + (size_t)k * (size_t)classes;
      int64_t best = 0;
      for (int64_t c = 1; c < classes; c++)
        if (row[c] > row[best]) best = c;
      int64_t idx = i0 + k;
      int label = labels ? lab.data[idx] : -1;
      correct += label == best;
      if (ctx->json) {
        dpm_json_object(&j, NULL);
        dpm_json_int(&j, "index", idx);
        dpm_json_int(&j, "class", best);
        dpm_json_float(&j, "p", row[best]);
        if (labels) dpm_json_int(&j, "label", label);
        dpm_json_end(&j);
      } else {
        printf("%" PRId64 "  class %" PRId64 "  p %.4f", idx, best, row[best]);
        if (labels) printf("  label %d%s", label, label == best ? "" : "  (wrong)");
        putchar('\n');
      }
    }
  }
  if (all && dpm_file_write_buffer(NULL, ctx->a->opt[O_OUT], 0, all,
                                   (size_t)n * (size_t)all_classes * sizeof *all, &err)) {
    rc = fail(ctx, &err);
    goto out;
  }
  double accuracy = n ? (double)correct / (double)n : 0;
  if (ctx->json) {
    dpm_json_end(&j);
    if (labels) dpm_json_num(&j, "accuracy", accuracy);
    dpm_json_end(&j);
    rc = ctl_emit(&j);
  } else {
    if (labels) printf("accuracy %.4f (%" PRId64 "/%" PRId64 ")\n", accuracy, correct, n);
    rc = CTL_OK;
  }
out:
  dpm_json_fini(&j);
  free(buf);
  free(all);
  dpm_idx_fini(&img);
  dpm_idx_fini(&lab);
  dpm_predictor_free(p);
  return rc;
}
