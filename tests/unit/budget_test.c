/* A trainer counts everything a model will allocate before it allocates any
 * of it (trainer.h, dpm_trainer_memory): a spec asking for 2^31-1 shuffled
 * synthetic examples once took the daemon to 8.6 GB. And everything dpm-train
 * refuses about an eval section, dpmd refuses at create, not at eval. */
#include <stdlib.h>
#include <time.h>

#include "common/spec.h"
#include "test.h"
#include "train/trainer.h"

#define DATA "/usr/share/datasets/fashion-mnist/"

static Dpm__ModelSpec *spec_of(const char *input, const char *eval) {
  char yaml[2048];
  snprintf(yaml, sizeof yaml,
           "name: b\ninput: %s\n"
           "forward:\n"
           "  - {op: FC, in: [data], out: pred, dim_out: 10}\n"
           "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
           "losses: [loss]\n%s",
           input, eval);
  Dpm__ModelSpec *s = NULL;
  dpm_err err = {0};
  if (dpm_spec_parse(yaml, strlen(yaml), "b.yaml", &s, &err))
    dpm_test_fail(__FILE__, __LINE__, "%s", err.msg);
  return s;
}

static dpm_status create(const Dpm__ModelSpec *s, uint64_t max, dpm_trainer **t,
                         dpm_err *err) {
  dpm_trainer_options o = {.devices = 2, .net_type = -1, .max_bytes = max,
                           .max_bytes_name = "max_model_bytes"};
  return dpm_trainer_create(s, &o, t, err);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

TEST(budget_counts_the_reader_before_allocating) {
  Dpm__ModelSpec *s = spec_of("{reader: synthetic, batch_size: 8, num_examples: 100000000,"
                              " shape: [1, 4, 4], shuffle: true}",
                              "");
  CHECK(s);
  dpm_trainer *t = NULL;
  dpm_err err = {0};
  double t0 = now();
  CHECK_INT(create(s, 64u << 20, &t, &err), DPM_DENIED);
  CHECK(now() - t0 < 1.0); /* refused before a 400 MB permutation is made */
  CHECK_HAS(err.msg, "reader 4");          /* 4 bytes of order per example */
  CHECK_HAS(err.msg, "(max_model_bytes)"); /* names the setting */
  CHECK(t == NULL);
  dpm_spec_free(s);
}

TEST(budget_adds_up_what_the_model_holds) {
  Dpm__ModelSpec *s = spec_of("{reader: synthetic, batch_size: 8, num_examples: 4096,"
                              " shape: [1, 4, 4]}",
                              "");
  CHECK(s);
  dpm_trainer *t = NULL;
  dpm_err err = {0};
  CHECK_INT(create(s, 0, &t, &err), DPM_OK);
  const dpm_trainer_memory *m = dpm_trainer_memory_of(t);
  /* tensors: at least FC's weights, bias and their gradients on 2 replicas */
  CHECK(m->tensors >= 2 * 2 * (16 * 10 + 10) * 4);
  CHECK(m->reader >= 4096 * 4); /* the shuffle order */
  CHECK(m->total == m->tensors + m->scratch + m->reader + m->eval);
  /* the same limit, just below what it needs: refused */
  dpm_trainer *t2 = NULL;
  CHECK_INT(create(s, m->total - 1, &t2, &err), DPM_DENIED);
  CHECK_INT(create(s, m->total, &t2, &err), DPM_OK);
  dpm_trainer_destroy(t2);
  dpm_trainer_destroy(t);
  dpm_spec_free(s);
}

TEST(eval_sections_are_checked_at_create) {
  static const char *const input = "{reader: synthetic, batch_size: 8, num_examples: 256,"
                                   " shape: [1, 28, 28]}";
  static const struct {
    const char *eval;
    dpm_status want;
    const char *msg;
  } cases[] = {
      {"eval: {images: " DATA "t10k-images-idx3-ubyte.gz, labels: /nonexistent/l.gz}\n",
       DPM_IO, "/nonexistent/l.gz"},
      {"eval: {images: " DATA "t10k-images-idx3-ubyte.gz, labels: " DATA
       "train-labels-idx1-ubyte.gz}\n",
       DPM_CORRUPT, "has 10000 images but"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    Dpm__ModelSpec *s = spec_of(input, cases[i].eval);
    CHECK(s);
    dpm_trainer *t = NULL;
    dpm_err err = {0};
    dpm_status st = create(s, 0, &t, &err);
    dpm_spec_free(s);
    if (st != cases[i].want || !strstr(err.msg, cases[i].msg))
      dpm_test_fail(__FILE__, __LINE__, "case %zu: %d %s", i, st, err.msg);
    dpm_trainer_destroy(t);
  }
  /* eval batch 0: the YAML front end and validation refuse it before */
  char yaml[512];
  Dpm__ModelSpec *s = NULL;
  dpm_err err = {0};
  snprintf(yaml, sizeof yaml,
           "name: b\ninput: %s\nforward: [{op: FC, in: [data], out: p, dim_out: 2}]\n"
           "losses: [p]\neval: {images: /a, labels: /b, batch_size: 0}\n",
           input);
  CHECK_INT(dpm_spec_parse(yaml, strlen(yaml), "e.yaml", &s, &err), DPM_SPEC);
}
