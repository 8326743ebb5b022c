/* The image readers' input pipeline (io/images.h) on Fashion-MNIST packed
 * as PNG tar shards by dpm-pack: batches/s of the tar reader with 1 and 2
 * decode threads against the IDX reader on the same images, alternating
 * rounds, medians; and the process's RSS over one whole epoch of the tar
 * reader without a data cache (every sample read from its shard), sampled
 * every 10 batches: its first, largest and last value after the first
 * batch. Prints figures; not a test.
 *
 *   build/bench/input [--dir DIR] [--rounds N] [--batches N]
 *
 * DIR (default a new temporary folder, removed after) gets the shards once;
 * a DIR holding train-000000.tar already is used as it is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "io/reader.h"

#define FMNIST "/usr/share/datasets/fashion-mnist/"
#define BATCH 64

static const char *shard_names[6];
static char shard_buf[6][512];

static long rss_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6)) kb = strtol(line + 6, NULL, 10);
  if (f) fclose(f);
  return kb;
}

static dpm_reader_config tar_config(int threads) {
  dpm_reader_config c = {.kind = DPM_READER_TAR,
                         .shuffle = 1,
                         .seed = 1,
                         .batch = BATCH,
                         .num_shards = 1,
                         .prefetch = 4,
                         .repeat = 1,
                         .num_classes = 10};
  c.image = (dpm_reader_images){.paths = shard_names,
                                .n_paths = 6,
                                .decode_threads = threads,
                                .max_pixels = 1 << 20};
  dpm_augment_cfg *a = &c.image.aug;
  *a = dpm_augment_defaults();
  a->train = 0;
  a->mirror = 0;
  a->channels = 1;
  a->crop = a->resize = 28;
  a->mean[0] = 0;
  a->std[0] = 255;
  return c;
}

/* ms per batch over n batches of cfg's reader (after one to start it). */
static double ms_per_batch(const dpm_reader_config *cfg, int n) {
  dpm_reader *r;
  dpm_err err = {0};
  const dpm_batch *b;
  if (dpm_reader_create(cfg, &r, &err) || dpm_reader_next(r, &b, &err)) {
    fprintf(stderr, "input: %s\n", err.msg);
    exit(1);
  }
  double t0 = bench_now_ms();
  for (int i = 0; i < n; i++)
    if (dpm_reader_next(r, &b, &err)) {
      fprintf(stderr, "input: %s\n", err.msg);
      exit(1);
    }
  double ms = (bench_now_ms() - t0) / n;
  dpm_reader_destroy(r);
  return ms;
}

int main(int argc, char **argv) {
  const char *dir = NULL;
  int rounds = 5, batches = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--dir"))
      dir = argv[i + 1];
    else if (!strcmp(argv[i], "--rounds"))
      rounds = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--batches"))
      batches = atoi(argv[i + 1]);
  }
  if (rounds < 1 || rounds > 99 || batches < 1) {
    fprintf(stderr, "usage: input [--dir DIR] [--rounds 1..99] [--batches N]\n");
    return 2;
  }
  char tmp[] = "/tmp/dpm-bench-input-XXXXXX", cmd[1024];
  int made = !dir;
  if (made && !(dir = mkdtemp(tmp))) return perror("mkdtemp"), 1;
  for (int k = 0; k < 6; k++) {
    snprintf(shard_buf[k], sizeof shard_buf[k], "%s/train-%06d.tar", dir, k);
    shard_names[k] = shard_buf[k];
  }
  struct stat st;
  if (stat(shard_names[0], &st) != 0) {
    snprintf(cmd, sizeof cmd,
             "build/dpm-pack --images " FMNIST
             "train-images-idx3-ubyte.gz --labels " FMNIST
             "train-labels-idx1-ubyte.gz --out %s/train --per-shard 10000 --no-progress "
             ">/dev/null",
             dir);
    if (system(cmd) != 0 || stat(shard_names[0], &st) != 0)
      return fprintf(stderr, "input: dpm-pack failed\n"), 1;
  }
  dpm_reader_config idx = {.kind = DPM_READER_IDX,
                           .images = FMNIST "train-images-idx3-ubyte.gz",
                           .labels = FMNIST "train-labels-idx1-ubyte.gz",
                           .scale = 1.0 / 255,
                           .shuffle = 1,
                           .seed = 1,
                           .batch = BATCH,
                           .num_shards = 1,
                           .prefetch = 4,
                           .repeat = 1};
  dpm_reader_config t1 = tar_config(1), t2 = tar_config(2);
  double a[99], b[99], c[99];
  for (int i = 0; i < rounds; i++) {
    a[i] = ms_per_batch(&idx, batches);
    b[i] = ms_per_batch(&t1, batches);
    c[i] = ms_per_batch(&t2, batches);
  }
  printf("batches of %d, %d rounds of %d batches, medians\n", BATCH, rounds, batches);
  double ma = bench_median(a, rounds), mb = bench_median(b, rounds),
         mc = bench_median(c, rounds);
  printf("  idx reader (pixels in memory)   %8.3f ms/batch  %8.0f images/s\n", ma,
         BATCH * 1e3 / ma);
  printf("  tar PNG, 1 decode thread        %8.3f ms/batch  %8.0f images/s\n", mb,
         BATCH * 1e3 / mb);
  printf("  tar PNG, 2 decode threads       %8.3f ms/batch  %8.0f images/s\n", mc,
         BATCH * 1e3 / mc);
  /* one epoch without a cache: RSS sampled every 10 batches */
  dpm_reader *r;
  dpm_err err = {0};
  const dpm_batch *bt;
  if (dpm_reader_create(&t2, &r, &err) || dpm_reader_next(r, &bt, &err))
    return fprintf(stderr, "input: %s\n", err.msg), 1;
  long first = rss_kb(), peak = first, last = first;
  int64_t per_epoch = dpm_reader_size(r) / BATCH;
  for (int64_t i = 1; i < per_epoch; i++) {
    if (dpm_reader_next(r, &bt, &err)) return fprintf(stderr, "input: %s\n", err.msg), 1;
    if (i % 10 == 0) {
      last = rss_kb();
      if (last > peak) peak = last;
    }
  }
  dpm_reader_destroy(r);
  printf("RSS over one epoch (%lld batches, shards %lld MB, no cache): after the first "
         "batch %.1f MB, largest %.1f MB, last %.1f MB\n",
         (long long)per_epoch, (long long)(6 * st.st_size >> 20), first / 1024.0,
         peak / 1024.0, last / 1024.0);
  if (made) {
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {
    }
  }
  return 0;
}
