/* dpm-train: train a spec in process, without a daemon.
 *
 *   dpm-train SPEC.yaml [--devices cpu:0] [--epochs N | --iters N] [--json]
 *
 * Evaluates on the spec's eval data after each epoch. With --json it prints
 * one JSON object per line: per epoch {"epoch","loss","test_accuracy",
 * "images_per_s"}, last a summary {"images_per_s","step_ms_median",
 * "test_accuracy","peak_rss_mb"}. Exit codes: 0 ok, 1 failed, 2 usage. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "spec/spec.h"
#include "train/trainer.h"

typedef struct {
  const char *spec, *devices;
  long epochs, iters;
  int json;
} options;

/* Command-line options: one table, parsed in one loop. */
static const struct {
  const char *flag;
  int takes_value;
  size_t offset;
  char type; /* 's' string, 'l' long, 'b' flag */
  const char *help;
} flags[] = {
    {"--devices", 1, offsetof(options, devices), 's', "devices, e.g. cpu:0"},
    {"--epochs", 1, offsetof(options, epochs), 'l', "epochs to train (default 1)"},
    {"--iters", 1, offsetof(options, iters), 'l', "steps to train instead of epochs"},
    {"--json", 0, offsetof(options, json), 'b', "one JSON object per line"},
};

static int usage(const char *msg) {
  if (msg) fprintf(stderr, "dpm-train: %s\n", msg);
  fprintf(stderr, "usage: dpm-train SPEC.yaml [options]\n");
  for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
    fprintf(stderr, "  %-12s %s %s\n", flags[i].flag, flags[i].takes_value ? "V" : " ",
            flags[i].help);
  return 2;
}

static int parse(int argc, char **argv, options *o) {
  for (int i = 1; i < argc; i++) {
    size_t f = 0;
    while (f < sizeof flags / sizeof *flags && strcmp(argv[i], flags[f].flag)) f++;
    if (f == sizeof flags / sizeof *flags) {
      if (argv[i][0] == '-' || o->spec) return usage("unexpected argument");
      o->spec = argv[i];
      continue;
    }
    char *field = (char *)o + flags[f].offset;
    if (flags[f].type == 'b') {
      *(int *)field = 1;
      continue;
    }
    if (++i == argc) return usage("option needs a value");
    if (flags[f].type == 's') {
      *(const char **)field = argv[i];
    } else {
      char *end;
      long v = strtol(argv[i], &end, 10);
      if (*end || v < 1) return usage("expected a positive integer");
      *(long *)field = v;
    }
  }
  return o->spec ? 0 : usage("no spec given");
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double peak_rss_mb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

int main(int argc, char **argv) {
  options o = {.devices = "cpu:0", .epochs = 1};
  int rc = parse(argc, argv, &o);
  if (rc) return rc;
  if (strcmp(o.devices, "cpu:0")) {
    fprintf(stderr, "dpm-train: only --devices cpu:0 is supported by this build\n");
    return 2;
  }
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  dpm_trainer *t = NULL;
  if (dpm_spec_load(o.spec, &spec, &err) || dpm_trainer_create(spec, &t, &err)) {
    fprintf(stderr, "dpm-train: %s\n", err.msg);
    dpm_spec_free(spec);
    return 1;
  }
  int64_t per_epoch = dpm_trainer_steps_per_epoch(t);
  int64_t total = o.iters ? o.iters : o.epochs * per_epoch;
  int64_t epochs = o.iters ? (o.iters + per_epoch - 1) / per_epoch : o.epochs;
  double *ms = malloc((size_t)total * sizeof *ms), acc = NAN, train_ms = 0;
  int64_t done = 0;
  rc = 0;
  for (int64_t e = 0; e < epochs && !rc; e++) {
    int64_t steps = total - done < per_epoch ? total - done : per_epoch;
    double loss_sum = 0, epoch_ms = 0;
    for (int64_t i = 0; i < steps; i++, done++) {
      dpm_step_stats st;
      if (dpm_trainer_step(t, 1, &st, &err)) {
        rc = 1;
        break;
      }
      ms[done] = st.step_ms;
      epoch_ms += st.step_ms;
      loss_sum += st.loss;
    }
    if (rc) break;
    train_ms += epoch_ms;
    double eval_loss;
    if (dpm_trainer_eval(t, &eval_loss, &acc, &err) && err.code != DPM_STATE) {
      rc = 1;
      break;
    }
    double ips = steps * dpm_trainer_batch(t) / (epoch_ms / 1e3);
    if (o.json)
      printf("{\"epoch\":%lld,\"loss\":%.6f,\"test_accuracy\":%.4f,\"images_per_s\":%.0f}\n",
             (long long)e + 1, loss_sum / steps, acc, ips);
    else
      printf("epoch %lld  loss %.4f  test accuracy %.4f  %.0f images/s\n", (long long)e + 1,
             loss_sum / steps, acc, ips);
    fflush(stdout);
  }
  if (rc) {
    fprintf(stderr, "dpm-train: %s\n", err.msg);
  } else {
    qsort(ms, (size_t)done, sizeof *ms, cmp_double);
    double median = done ? ms[done / 2] : NAN;
    double ips = done * dpm_trainer_batch(t) / (train_ms / 1e3);
    printf(o.json ? "{\"images_per_s\":%.0f,\"step_ms_median\":%.4f,\"test_accuracy\":%.4f,"
                    "\"peak_rss_mb\":%.1f}\n"
                  : "done: %.0f images/s, median step %.4f ms, test accuracy %.4f, "
                    "peak RSS %.1f MB\n",
           ips, median, acc, peak_rss_mb());
  }
  free(ms);
  dpm_trainer_destroy(t);
  dpm_spec_free(spec);
  return rc;
}
