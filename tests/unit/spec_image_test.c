/* The image readers' spec keys (input.shards, path, image, on_bad_sample;
 * eval.reader, shards, path): parsed values, errors at their line, the
 * brace ranges of shard lists, and the wire-side validation of the same. */
#include <stdlib.h>
#include <string.h>

#include "common/shards.h"
#include "common/spec.h"
#include "common/validate.h"
#include "test.h"

#define CHECK_MSG(c, ...)                                                                \
  do {                                                                                   \
    if (!(c)) {                                                                          \
      dpm_test_fail(__FILE__, __LINE__, __VA_ARGS__);                                    \
      return;                                                                            \
    }                                                                                    \
  } while (0)
#define CHECK_STR(a, b)                                                                  \
  CHECK_MSG(strcmp((a), (b)) == 0, "\"%s\", expected \"%s\"", (a), (b))

#define NET                                                                              \
  "forward:\n"                                                                           \
  "  - {op: FC, in: data, out: pred, dim_out: 10}\n"                                     \
  "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"                 \
  "losses: [loss]\n"

static const char TAR[] =
    "name: m\n"
    "input:\n"
    "  reader: tar\n"
    "  shards: [\"s-{08..11}.tar\", extra.tar]\n"
    "  on_bad_sample: skip\n"
    "  image: {channels: 3, crop: 24, resize: 28, area_min: 0.25, mirror: false,\n"
    "          mean: [1, 2, 3], std: [4], decode_threads: 2}\n" NET
    "eval: {reader: tar, shards: v-0.tar, batch_size: 10}\n";

static Dpm__ModelSpec *parse(const char *text, dpm_err *err) {
  Dpm__ModelSpec *s = NULL;
  if (dpm_spec_parse(text, strlen(text), "t.yaml", &s, err)) return NULL;
  return s;
}

TEST(spec_image_reader_keys_parse) {
  dpm_err err = {0};
  Dpm__ModelSpec *s = parse(TAR, &err);
  CHECK_MSG(s != NULL, "%s", err.msg);
  if (!s) return;
  const Dpm__InputSpec *in = s->input;
  CHECK_INT(in->reader, DPM__READER_KIND__READER_TAR);
  CHECK_INT((int)in->n_shards, 5);
  static const char *const want[5] = {"s-08.tar", "s-09.tar", "s-10.tar", "s-11.tar",
                                      "extra.tar"};
  for (int i = 0; i < 5 && i < (int)in->n_shards; i++) CHECK_STR(in->shards[i], want[i]);
  CHECK_INT(in->on_bad_sample, DPM__BAD_SAMPLE__BAD_SAMPLE_SKIP);
  const Dpm__ImageSpec *im = in->image;
  CHECK(im != NULL);
  if (im) {
    CHECK_INT((int)im->crop, 24);
    CHECK_INT((int)im->resize, 28);
    CHECK(im->area_min == 0.25 && im->area_max == 1.0);
    CHECK(!im->mirror && im->random_crop);
    CHECK_INT((int)im->n_mean, 3);
    CHECK_INT((int)im->n_std, 1);
    CHECK(im->mean[2] == 3 && im->std[0] == 4);
    CHECK_INT((int)im->decode_threads, 2);
  }
  CHECK_INT(s->eval->reader, DPM__READER_KIND__READER_TAR);
  CHECK_INT((int)s->eval->n_shards, 1);
  CHECK_INT(dpm_spec_validate(s, &err), DPM_OK);
  dpm_spec_free(s);
}

/* text fails to parse with a message holding at and sub. */
static void refused_at(int line, const char *text, const char *at, const char *sub) {
  dpm_err err = {0};
  Dpm__ModelSpec *s = parse(text, &err);
  if (s) {
    dpm_test_fail(__FILE__, line, "parsed; wanted \"%s\"", sub);
    dpm_spec_free(s);
  } else if (!strstr(err.msg, at) || !strstr(err.msg, sub)) {
    dpm_test_fail(__FILE__, line, "message \"%s\" lacks \"%s\" or \"%s\"", err.msg, at,
                  sub);
  }
}
#define REFUSED(input, at, sub) refused_at(__LINE__, "name: m\n" input NET, at, sub)

TEST(spec_image_reader_errors) {
  REFUSED("input: {reader: tar, image: {crop: 8}}\n",
          "t.yaml:2:8:", "missing key 'shards' in input (reader tar)");
  REFUSED("input: {reader: lmdb, image: {crop: 8}}\n",
          "t.yaml:2:8:", "missing key 'path' in input (reader lmdb)");
  REFUSED("input: {reader: folder, path: d}\n", "t.yaml:2:8:", "missing key 'image'");
  REFUSED("input: {reader: folder, path: d, image: {channels: 3}}\n",
          "t.yaml:2:41:", "missing key 'crop' in input.image");
  REFUSED("input: {reader: folder, path: d, image: {crop: 8, channels: 2}}\n",
          "t.yaml:2:61:", "'channels' must be 1 (gray) or 3 (RGB), got 2");
  REFUSED("input: {reader: folder, path: d, image: {crop: 8, resize: 7}}\n",
          "t.yaml:2:59:", "'resize' 7 must be at least crop 8");
  REFUSED("input: {reader: folder, path: d, image: {crop: 8, mean: [1, 2]}}\n",
          "t.yaml:2:57:", "'mean' must hold 1 or channels (3) numbers, got 2");
  REFUSED("input: {reader: folder, path: d, image: {crop: 8, std: [0]}}\n",
          "t.yaml:2:57:", "'std' must be in (0, 65536]");
  REFUSED("input: {reader: folder, path: d, image: {crop: 8, aspect_min: 2}}\n",
          "t.yaml:2:63:", "'aspect_min' 2 is above aspect_max");
  REFUSED("input: {reader: folder, path: d, image: {crop: 8, area_min: 0}}\n",
          "t.yaml:2:61:", "'area_min' must be in (0, 1]");
  REFUSED("input: {reader: folder, path: d, on_bad_sample: ignore, image: {crop: 8}}\n",
          "t.yaml:2:49:", "'on_bad_sample' must be one of: fail, skip");
  REFUSED("input: {reader: tar, shards: [\"s-{3..1}.tar\"], image: {crop: 8}}\n",
          "t.yaml:2:31:", "the range must run upwards");
  REFUSED("input: {reader: tar, shards: \"s-{a..b}.tar\", image: {crop: 8}}\n",
          "t.yaml:2:30:", "one range {A..B} of decimal digits");
  REFUSED("input: {reader: tar, shards: \"s-{0..9999999}.tar\", image: {crop: 8}}\n",
          "t.yaml:2:30:", "at most 100000 files");
  refused_at(__LINE__,
             "name: m\ninput: {reader: synthetic}\n" NET "eval: {reader: tar}\n",
             "t.yaml:7:7:", "missing key 'shards' in eval (reader tar)");
  refused_at(__LINE__,
             "name: m\ninput: {reader: synthetic}\n" NET "eval: {batch_size: 10}\n",
             "t.yaml:7:7:", "missing key 'images' in eval");
}

TEST(shards_expand_ranges) {
  dpm_err err = {0};
  char **a = NULL;
  size_t n = 0;
  CHECK_INT(dpm_shards_expand("d/x-{0098..0101}.tar", 10, &a, &n, &err), DPM_OK);
  CHECK_INT((int)n, 4);
  if (n == 4) {
    CHECK_STR(a[0], "d/x-0098.tar");
    CHECK_STR(a[3], "d/x-0101.tar");
  }
  for (size_t i = 0; i < n; i++) free(a[i]);
  free(a);
  CHECK_INT(dpm_shards_expand("plain.tar", 10, &a, &n, &err), DPM_OK);
  CHECK_INT((int)n, 1);
  if (n == 1) CHECK_STR(a[0], "plain.tar");
  for (size_t i = 0; i < n; i++) free(a[i]);
  free(a);
  static const char *const bad[] = {"x-{1..2",
                                    "x-1..2}",
                                    "x-{1..2}{3..4}",
                                    "x-{1.2}",
                                    "x-{..2}",
                                    "x-{1..}",
                                    "x-{1234567890123456789..2}",
                                    "x-{5..4}"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    a = (char **)&a;
    CHECK_MSG(dpm_shards_expand(bad[i], 10, &a, &n, &err) == DPM_INVALID, "%s", bad[i]);
    CHECK(a == NULL && n == 0);
  }
  CHECK_INT(dpm_shards_expand("x-{1..11}", 10, &a, &n, &err), DPM_INVALID);
  CHECK_HAS(err.msg, "at most 10 files");
}

/* The wire path: a spec a client builds itself gets the same bounds. */
TEST(validate_image_reader_bounds) {
  dpm_err err = {0};
  Dpm__ModelSpec *s = parse(TAR, &err);
  CHECK_MSG(s != NULL, "%s", err.msg);
  if (!s) return;
  Dpm__ImageSpec *im = s->input->image;
  im->decode_threads = 0;
  CHECK_INT(dpm_spec_validate(s, &err), DPM_SPEC);
  CHECK_HAS(err.msg, "decode_threads must be 1..64");
  im->decode_threads = 2;
  im->std[0] = 0;
  CHECK_INT(dpm_spec_validate(s, &err), DPM_SPEC);
  CHECK_HAS(err.msg, "std finite and > 0");
  im->std[0] = 4;
  im->crop = 30; /* above resize 28 */
  CHECK_INT(dpm_spec_validate(s, &err), DPM_SPEC);
  CHECK_HAS(err.msg, "resize must be crop..");
  im->crop = 24;
  s->eval->reader = DPM__READER_KIND__READER_SYNTHETIC;
  CHECK_INT(dpm_spec_validate(s, &err), DPM_SPEC);
  CHECK_HAS(err.msg, "eval.reader: must be idx, tar, lmdb or folder");
  s->eval->reader = DPM__READER_KIND__READER_TAR;
  s->input->image = NULL;
  CHECK_INT(dpm_spec_validate(s, &err), DPM_SPEC);
  CHECK_HAS(err.msg, "input.image: missing");
  s->input->image = im;
  free(s->input->shards[1]);
  s->input->shards[1] = strdup("bad\nname");
  CHECK_INT(dpm_spec_validate(s, &err), DPM_SPEC);
  CHECK_HAS(err.msg, "input.shards: file name");
  dpm_spec_free(s);
}
