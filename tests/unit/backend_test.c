/* Backends and their memory: the caching allocator's logic (classes, reuse,
 * stats, giving back under pressure) over a counting raw allocator; the
 * device registry; and the fenced test backend, whose memory faults when
 * host code touches it outside a backend call. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/cuda_load.h"
#include "backend/device.h"
#include "backend/pool.h"
#include "test.h"

typedef struct {
  int allocs, frees, fail_after; /* fail_after: raw allocations allowed (-1: any) */
  size_t live;
} counter;

static void *count_alloc(void *arg, size_t bytes) {
  counter *c = arg;
  if (c->fail_after >= 0 && c->allocs >= c->fail_after) return NULL;
  c->allocs++;
  c->live += bytes;
  return malloc(bytes);
}

static void count_free(void *arg, void *p, size_t bytes) {
  counter *c = arg;
  c->frees++;
  c->live -= bytes;
  free(p);
}

TEST(pool_classes_cover_requests_with_little_waste) {
  size_t prev = 0;
  for (size_t b = 1; b < ((size_t)1 << 30); b = b * 3 / 2 + 1) {
    size_t c = dpm_pool_class_size(b);
    CHECK(c >= b && c >= 64 && c % 64 == 0);
    if (b > 4096) CHECK(c - b <= b / 4); /* a quarter of a power of two at most */
    CHECK(c >= prev);
    CHECK(dpm_pool_class_size(c) == c); /* a class size is its own class */
    prev = c;
  }
  CHECK(dpm_pool_class_size(4096) == 4096 && dpm_pool_class_size(4097) == 5120);
}

TEST(pool_reuses_freed_blocks_and_counts) {
  counter c = {.fail_after = -1};
  dpm_pool p;
  dpm_pool_init(&p, (dpm_pool_raw){count_alloc, count_free, &c});
  size_t got[4];
  void *a = dpm_pool_alloc(&p, 1000, &got[0]), *b = dpm_pool_alloc(&p, 100000, &got[1]);
  CHECK(a && b && got[0] == 1024 && got[1] >= 100000);
  dpm_pool_stats s = dpm_pool_stats_of(&p);
  CHECK(s.raw_allocs == 2 && s.requests == 2 && s.in_use == got[0] + got[1]);
  dpm_pool_free(&p, a, got[0]);
  dpm_pool_free(&p, b, got[1]);
  s = dpm_pool_stats_of(&p);
  CHECK(s.in_use == 0 && s.cached == got[0] + got[1] && s.peak == got[0] + got[1]);
  /* a steady state: the same requests again and again, no raw allocation */
  for (int i = 0; i < 100; i++) {
    void *x = dpm_pool_alloc(&p, 1000, &got[2]), *y = dpm_pool_alloc(&p, 99000, &got[3]);
    CHECK(x == a && y == b); /* the cached blocks, same classes */
    dpm_pool_free(&p, y, got[3]);
    dpm_pool_free(&p, x, got[2]);
  }
  s = dpm_pool_stats_of(&p);
  CHECK(s.raw_allocs == 2 && s.requests == 202 && c.allocs == 2);
  dpm_pool_trim(&p);
  CHECK(c.frees == 2 && c.live == 0 && dpm_pool_stats_of(&p).cached == 0);
  dpm_pool_fini(&p);
}

TEST(pool_gives_its_cache_back_when_the_raw_allocator_fails) {
  counter c = {.fail_after = 2};
  dpm_pool p;
  dpm_pool_init(&p, (dpm_pool_raw){count_alloc, count_free, &c});
  size_t g1, g2, g3;
  void *a = dpm_pool_alloc(&p, 5000, &g1), *b = dpm_pool_alloc(&p, 9000, &g2);
  CHECK(a && b);
  dpm_pool_free(&p, a, g1);
  /* a third raw allocation fails: the cache (a's block) is given back, then
   * the raw allocator is asked again (and here still refuses) */
  CHECK(dpm_pool_alloc(&p, 70000, &g3) == NULL);
  CHECK(c.frees == 1 && dpm_pool_stats_of(&p).cached == 0);
  c.fail_after = -1;
  void *d = dpm_pool_alloc(&p, 70000, &g3);
  CHECK(d);
  dpm_pool_free(&p, d, g3);
  dpm_pool_free(&p, b, g2);
  dpm_pool_fini(&p);
  CHECK(c.live == 0);
}

TEST(devices_open_once_and_refuse_kinds_without_a_backend) {
  dpm_dev *a, *b;
  dpm_err err = {0};
  CHECK_INT(dpm_dev_get((dpm_device){DPM_DEVICE_CPU, 1}, &a, &err), DPM_OK);
  CHECK_INT(dpm_dev_get((dpm_device){DPM_DEVICE_CPU, 1}, &b, &err), DPM_OK);
  CHECK(a == b && dpm_dev_host_visible(a));
  if (!dpm_cuda_plugin_get()) { /* the plugin not loaded (cuda_plugin_test.c loads it) */
    CHECK_INT(dpm_dev_get((dpm_device){DPM_DEVICE_CUDA, 0}, &b, &err), DPM_UNSUPPORTED);
    CHECK_HAS(err.msg, "cuda:0: no cuda backend in this build");
  }
  size_t got;
  dpm_dptr d = dpm_dev_alloc(a, 40, &got);
  float *p = dpm_dptr_raw(d);         /* host-visible: host memory */
  CHECK(p && p[0] == 0 && p[9] == 0); /* zeroed */
  dpm_dev_free(a, d, got);
}

/* Exits 0 if reading *p in a child process faults, 1 if the read passed. */
static int read_faults(const volatile float *p) {
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGSEGV, SIG_DFL);
    volatile float x = *p;
    (void)x;
    _exit(0); /* read without a fault */
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The seam's test: host code that reads a fenced tensor's bytes faults at
 * once; the same bytes cross through the backend's copies. */
TEST(fenced_memory_faults_when_host_code_touches_it) {
  dpm_dev *dev;
  dpm_err err = {0};
  CHECK_INT(dpm_dev_get((dpm_device){DPM_DEVICE_FENCED, 0}, &dev, &err), DPM_OK);
  CHECK(!dpm_dev_host_visible(dev));
  size_t got;
  dpm_dptr d = dpm_dev_alloc(dev, 64 * sizeof(float), &got);
  float *p = dpm_dptr_raw(d); /* unwrapped on purpose: the fault is the test */
  CHECK(p);
  float in[64], out[64];
  for (int i = 0; i < 64; i++) in[i] = (float)i * 0.5f;
  dpm_dev_to_device(dev, d, in, sizeof in);
  dpm_dev_to_host(dev, out, d, sizeof out);
  CHECK(!memcmp(in, out, sizeof in));
  CHECK(read_faults(p));
  dpm_dev_enter(dev); /* host code acting as the device: allowed */
  float v = p[3];
  dpm_dev_leave(dev);
  CHECK(v == 1.5f);
  CHECK(read_faults(p)); /* closed again */
  dpm_dev_free(dev, d, got);
}

#include "common/spec.h"
#include "trainer_fixture.h"

/* Once a model's tensors, scratch and arena exist, a step allocates nothing
 * on any of its devices: counted by the pools, over 10 steps. */
static void steady_state_allocates_nothing(dpm_device_kind kind) {
  Dpm__ModelSpec *spec = tf_spec("  - {op: Conv, in: [data], out: c1, dim_out: 4, kernel: 3}\n"
                                 "  - {op: Relu, in: [c1], out: c1}\n"
                                 "  - {op: FC, in: [c1], out: pred, dim_out: 10}\n",
                                 8, 3, 0.01, "dag", 4096);
  CHECK(spec);
  tf_device_kind = kind;
  dpm_trainer *t = tf_trainer(spec, 2, NULL);
  tf_device_kind = DPM_DEVICE_CPU;
  CHECK(t && tf_steps(t, 2));
  dpm_pool_stats before[2], after[2];
  dpm_dev *dev[2];
  dpm_err err = {0};
  for (int d = 0; d < 2; d++) {
    CHECK_INT(dpm_dev_get(*dpm_trainer_device(t, d), &dev[d], &err), DPM_OK);
    before[d] = dpm_dev_stats(dev[d]);
  }
  CHECK(tf_steps(t, 10));
  for (int d = 0; d < 2; d++) {
    after[d] = dpm_dev_stats(dev[d]);
    CHECK(after[d].requests == before[d].requests);
    CHECK(after[d].raw_allocs == before[d].raw_allocs);
    CHECK(after[d].in_use == before[d].in_use && after[d].in_use > 0);
  }
  dpm_trainer_destroy(t);
  /* what it held went back to its devices' caches, not to the system */
  for (int d = 0; d < 2; d++) CHECK(dpm_dev_stats(dev[d]).in_use < after[d].in_use);
  dpm_spec_free(spec);
}

TEST(steady_state_step_allocates_nothing) { steady_state_allocates_nothing(DPM_DEVICE_CPU); }
TEST(fenced_steady_state_step_allocates_nothing) {
  steady_state_allocates_nothing(DPM_DEVICE_FENCED);
}
