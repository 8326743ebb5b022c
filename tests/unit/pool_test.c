/* The caching allocator's stream-ordered frees (backend/pool.h), on host
 * memory with fake fences (a done flag the test flips): a block freed
 * behind a fence is not reused before the fence is done and is after,
 * oldest first; pending bytes and the bytes requested show in the stats;
 * trim and fini with pending blocks; the raw allocator failing with and
 * without a way to wait; a fragmentation scenario of mixed sizes; and
 * threads allocating and freeing at once (the unit build runs under ASan).
 * The size classes' and plain reuse's first tests are in backend_test.c. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "backend/pool.h"
#include "test.h"

/* Host memory with an optional capacity (0: none). Called under the pool's
 * mutex only, so plain counters do. */
typedef struct {
  size_t live, cap;
  int allocs, frees;
} mem;

static void *mem_alloc(void *arg, size_t bytes) {
  mem *m = arg;
  if (m->cap && m->live + bytes > m->cap) return NULL;
  void *p = malloc(bytes);
  if (!p) return NULL;
  m->allocs++;
  m->live += bytes;
  return p;
}

static void mem_free(void *arg, void *p, size_t bytes) {
  mem *m = arg;
  m->frees++;
  m->live -= bytes;
  free(p);
}

/* A fake fence, and the log of the pool's calls on fences. */
typedef struct {
  int done, released, waited;
} fake_fence;

typedef struct {
  int done_calls, releases, waits;
} fence_log;

static int ff_done(void *arg, void *f) {
  ((fence_log *)arg)->done_calls++;
  return ((fake_fence *)f)->done;
}

static void ff_release(void *arg, void *f) {
  ((fence_log *)arg)->releases++;
  ((fake_fence *)f)->released++;
}

static int ff_wait(void *arg, void *f) {
  ((fence_log *)arg)->waits++;
  ((fake_fence *)f)->waited++;
  ((fake_fence *)f)->done = 1;
  return 1;
}

static void pool_with_fences(dpm_pool *p, mem *m, fence_log *log, int can_wait) {
  dpm_pool_init(p, (dpm_pool_raw){mem_alloc, mem_free, m});
  dpm_pool_set_fences(
      p, (dpm_pool_fences){ff_done, ff_release, can_wait ? ff_wait : NULL, log});
}

TEST(pool_classes_are_monotone_and_waste_at_most_a_fifth) {
  size_t prev = 0;
  for (size_t b = 1; b <= ((size_t)1 << 34); b = b < 65536 ? b + 1 : b + b / 7 + 1) {
    size_t c = dpm_pool_class_size(b);
    CHECK(c >= b && c >= 64);
    if (b > 4096) CHECK((c - b) * 5 <= c);
    CHECK(c >= prev);
    prev = c;
  }
  for (int e = 13; e < 40; e++) /* around each power of two */
    for (int d = -2; d <= 2; d++) {
      size_t b = ((size_t)1 << e) + (size_t)(ptrdiff_t)d, c = dpm_pool_class_size(b);
      CHECK(c >= b && (c - b) * 5 <= c);
    }
  mem m = {0};
  dpm_pool p;
  dpm_pool_init(&p, (dpm_pool_raw){mem_alloc, mem_free, &m});
  size_t got;
  void *a = dpm_pool_alloc(&p, 5000, &got);
  CHECK(a && got == dpm_pool_class_size(5000) && m.live == got);
  dpm_pool_free(&p, a, got);
  dpm_pool_fini(&p);
  CHECK(m.live == 0);
}

TEST(pool_reuses_a_block_for_any_request_of_its_class) {
  mem m = {0};
  dpm_pool p;
  dpm_pool_init(&p, (dpm_pool_raw){mem_alloc, mem_free, &m});
  size_t g1, g2;
  void *a = dpm_pool_alloc(&p, 70000, &g1);
  CHECK(a);
  dpm_pool_stats s = dpm_pool_stats_of(&p);
  CHECK(s.requested_in_use == 70000 && s.in_use == g1 && s.pending == 0);
  dpm_pool_free(&p, a, g1);
  s = dpm_pool_stats_of(&p);
  CHECK(s.requested_in_use == 0 && s.in_use == 0 && s.cached == g1);
  void *b = dpm_pool_alloc(&p, g1 - 10, &g2); /* another request, the same class */
  CHECK(b == a && g2 == g1 && m.allocs == 1);
  s = dpm_pool_stats_of(&p);
  CHECK(s.requested_in_use == g1 - 10 && s.raw_allocs == 1 && s.requests == 2 &&
        s.cached == 0);
  dpm_pool_free(&p, b, g2);
  dpm_pool_fini(&p);
  CHECK(m.live == 0 && m.frees == 1);
}

TEST(pool_fenced_free_waits_for_its_fence) {
  mem m = {0};
  fence_log log = {0};
  dpm_pool p;
  pool_with_fences(&p, &m, &log, 0);
  size_t got, g;
  void *a = dpm_pool_alloc(&p, 3000, &got);
  fake_fence f = {0};
  dpm_pool_free_after(&p, a, got, &f);
  dpm_pool_stats s = dpm_pool_stats_of(&p);
  CHECK(s.pending == got && s.in_use == 0 && s.cached == 0 && s.requested_in_use == 0);
  /* the fence is not done: the same class gets a new block, again and again */
  for (int i = 0; i < 3; i++) {
    void *b = dpm_pool_alloc(&p, 3000, &g);
    CHECK(b && b != a);
    dpm_pool_free(&p, b, g);
  }
  CHECK(m.allocs == 2 && f.released == 0 && log.done_calls >= 3);
  CHECK(dpm_pool_stats_of(&p).pending == got);
  f.done = 1; /* the work finished: a is reused, its fence released once */
  void *c = dpm_pool_alloc(&p, 3000, &g), *d = dpm_pool_alloc(&p, 3000, &g);
  CHECK((c == a || d == a) && c != d && m.allocs == 2);
  CHECK(f.released == 1 && log.releases == 1);
  s = dpm_pool_stats_of(&p);
  CHECK(s.pending == 0 && s.in_use == 2 * got && s.cached == 0);
  dpm_pool_free_after(&p, c, g, NULL); /* no fence: a plain free */
  dpm_pool_free(&p, d, g);
  CHECK(dpm_pool_stats_of(&p).cached == 2 * got && dpm_pool_stats_of(&p).pending == 0);
  dpm_pool_fini(&p);
  CHECK(m.live == 0 && f.released == 1);
}

TEST(pool_fenced_frees_complete_oldest_first) {
  mem m = {0};
  fence_log log = {0};
  dpm_pool p;
  pool_with_fences(&p, &m, &log, 0);
  size_t got[4], g, gs;
  void *b[4];
  fake_fence f[4] = {{0}};
  void *small = dpm_pool_alloc(&p, 100, &gs);
  dpm_pool_free(&p, small, gs); /* cached: the next small request is a hit */
  for (int i = 0; i < 4; i++) b[i] = dpm_pool_alloc(&p, 20000, &got[i]);
  for (int i = 0; i < 4; i++) dpm_pool_free_after(&p, b[i], got[i], &f[i]);
  CHECK(dpm_pool_stats_of(&p).pending == 4 * got[0] && m.allocs == 5);
  /* the second is done but the first is not: a hit polls up to the first */
  f[1].done = 1;
  int calls = log.done_calls;
  void *x = dpm_pool_alloc(&p, 100, &g);
  CHECK(x == small && f[1].released == 0 && log.done_calls == calls + 1);
  dpm_pool_free(&p, x, g);
  /* a miss polls no further: a new block */
  calls = log.done_calls;
  void *y1 = dpm_pool_alloc(&p, 20000, &g);
  CHECK(y1 && y1 != b[1] && f[1].released == 0 && m.allocs == 6 &&
        log.done_calls == calls + 1);
  /* unless the raw allocator fails: then every fence is polled, and the
   * second's block, done out of order, serves the request */
  m.cap = m.live;
  void *y2 = dpm_pool_alloc(&p, 20000, &g);
  CHECK(y2 == b[1] && f[1].released == 1 && f[0].released == 0 && m.allocs == 6);
  m.cap = 0;
  /* the first done: the next poll takes it and stops at the third */
  f[0].done = 1;
  calls = log.done_calls;
  x = dpm_pool_alloc(&p, 100, &g);
  CHECK(x == small && f[0].released == 1 && f[2].released == 0);
  CHECK(log.done_calls == calls + 2); /* f0, then f2 not done */
  dpm_pool_free(&p, x, g);
  dpm_pool_stats s = dpm_pool_stats_of(&p);
  CHECK(s.pending == 2 * got[0] && s.cached == got[0] + gs && s.in_use == 2 * got[0]);
  /* the cache serves b0, then the pending ones are not served: new blocks */
  void *z[3];
  for (int i = 0; i < 3; i++) {
    z[i] = dpm_pool_alloc(&p, 20000, &g);
    CHECK(z[i] && z[i] != b[2] && z[i] != b[3] && z[i] != y1 && z[i] != y2);
  }
  CHECK(z[0] == b[0] && m.allocs == 8);
  for (int i = 0; i < 3; i++) dpm_pool_free(&p, z[i], g);
  dpm_pool_free(&p, y1, g);
  dpm_pool_free(&p, y2, g);
  dpm_pool_fini(&p); /* no wait: the pending blocks go back regardless */
  CHECK(m.live == 0 && f[2].released == 1 && f[3].released == 1 && log.waits == 0);
}

TEST(pool_trim_keeps_blocks_whose_fence_is_not_done) {
  mem m = {0};
  fence_log log = {0};
  dpm_pool p;
  pool_with_fences(&p, &m, &log, 1);
  size_t g[3];
  void *a = dpm_pool_alloc(&p, 10000, &g[0]), *b = dpm_pool_alloc(&p, 50000, &g[1]);
  void *c = dpm_pool_alloc(&p, 1000, &g[2]);
  fake_fence fa = {0}, fb = {0};
  dpm_pool_free_after(&p, a, g[0], &fa);
  dpm_pool_free_after(&p, b, g[1], &fb);
  dpm_pool_free(&p, c, g[2]);
  fb.done = 1; /* behind a's fence, not done: trim reaps it anyway */
  dpm_pool_trim(&p);
  dpm_pool_stats s = dpm_pool_stats_of(&p);
  CHECK(s.cached == 0 && s.pending == g[0] && m.live == g[0] && m.frees == 2);
  CHECK(fa.released == 0 && fb.released == 1 && log.waits == 0);
  /* fini waits for the rest, then gives it back */
  dpm_pool_fini(&p);
  CHECK(m.live == 0 && fa.waited == 1 && fa.released == 1);
}

TEST(pool_waits_for_pending_blocks_only_when_it_can) {
  for (int can_wait = 0; can_wait < 2; can_wait++) {
    mem m = {.cap = 100000};
    fence_log log = {0};
    dpm_pool p;
    pool_with_fences(&p, &m, &log, can_wait);
    size_t ga, gb, gc;
    void *a = dpm_pool_alloc(&p, 60000, &ga);
    fake_fence f = {0};
    dpm_pool_free_after(&p, a, ga, &f);
    /* the same class: only a would fit, and its fence is not done */
    void *b = dpm_pool_alloc(&p, 60000, &gb);
    if (!can_wait) {
      CHECK(!b && log.waits == 0 && dpm_pool_stats_of(&p).pending == ga && m.live == ga);
      f.done = 1;
      b = dpm_pool_alloc(&p, 60000, &gb);
    }
    CHECK(b == a && f.released == 1 && m.allocs == 1);
    CHECK(log.waits == can_wait);
    /* another class: a pending block of the first is waited for, cached,
     * given back, and the raw allocator asked again */
    fake_fence f2 = {0};
    dpm_pool_free_after(&p, b, gb, &f2);
    void *c = dpm_pool_alloc(&p, 90000, &gc);
    if (can_wait) {
      CHECK(c && f2.waited == 1 && f2.released == 1 && m.frees == 1 && m.live == gc);
      dpm_pool_free(&p, c, gc);
    } else {
      CHECK(!c && f2.released == 0 && m.live == ga);
    }
    dpm_pool_fini(&p);
    CHECK(m.live == 0);
  }
}

/* A deterministic pseudo-random sequence. */
static uint64_t next_rand(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return *s >> 33;
}

TEST(pool_mixed_sizes_settle_after_one_cycle) {
  enum { N = 400, CYCLES = 8 };
  mem m = {0};
  fence_log log = {0};
  dpm_pool p;
  pool_with_fences(&p, &m, &log, 0);
  size_t sizes[N], got[N];
  void *blk[N];
  fake_fence fences[N];
  uint64_t seed = 42;
  for (int i = 0; i < N; i++) /* 1 B .. 4 MiB, spread over the powers of two */
    sizes[i] = 1 + next_rand(&seed) % ((size_t)1 << (1 + next_rand(&seed) % 22));
  uint64_t raw_after_first = 0;
  for (int cycle = 0; cycle < CYCLES; cycle++) {
    int order[N];
    for (int i = 0; i < N; i++) order[i] = i;
    for (int i = N - 1; i > 0; i--) { /* a new order every cycle */
      int j = (int)(next_rand(&seed) % (uint64_t)(i + 1)), t = order[i];
      order[i] = order[j];
      order[j] = t;
    }
    uint64_t requested = 0;
    for (int k = 0; k < N; k++) {
      int i = order[k];
      blk[i] = dpm_pool_alloc(&p, sizes[i], &got[i]);
      CHECK(blk[i] && got[i] >= sizes[i]);
      requested += sizes[i];
    }
    dpm_pool_stats s = dpm_pool_stats_of(&p);
    CHECK(s.requested_in_use == requested && s.pending == 0);
    CHECK((s.in_use - s.requested_in_use) * 5 <= s.in_use + 64 * 5 * N); /* the waste */
    /* half freed behind fences (in flight), half plainly, in the order
     * they were allocated */
    for (int k = 0; k < N; k++) {
      int i = order[k];
      fences[i] = (fake_fence){0};
      if (k % 2)
        dpm_pool_free_after(&p, blk[i], got[i], &fences[i]);
      else
        dpm_pool_free(&p, blk[i], got[i]);
    }
    s = dpm_pool_stats_of(&p);
    CHECK(s.in_use == 0 && s.requested_in_use == 0 && s.pending > 0);
    CHECK(s.pending + s.cached == m.live);
    for (int i = 0; i < N; i++) fences[i].done = 1; /* the stream caught up */
    if (cycle == 0) raw_after_first = s.raw_allocs;
  }
  dpm_pool_stats s = dpm_pool_stats_of(&p);
  CHECK(s.raw_allocs == raw_after_first && s.requests == (uint64_t)N * CYCLES);
  dpm_pool_trim(&p);
  s = dpm_pool_stats_of(&p);
  CHECK(s.pending == 0 && s.cached == 0 && m.live == 0);
  CHECK(log.releases == N / 2 * CYCLES);
  dpm_pool_fini(&p);
}

/* Threads: each allocates blocks of mixed sizes, writes its mark into them,
 * and frees them plainly or behind a fence it marks done a few iterations
 * later, after checking that nobody was handed the block meanwhile. */
typedef struct {
  atomic_int done;
  atomic_int *released;
} shared_fence;

static int sf_done(void *arg, void *f) {
  (void)arg;
  return atomic_load(&((shared_fence *)f)->done);
}

static void sf_release(void *arg, void *f) {
  (void)arg;
  atomic_fetch_add(((shared_fence *)f)->released, 1);
  free(f);
}

typedef struct {
  dpm_pool *p;
  int id;
  atomic_int *errors, *released;
  int fenced;
  int allocs; /* that succeeded */
} stress_arg;

enum { STRESS_ITERS = 20000, STRESS_LIVE = 16, STRESS_FLIGHT = 8 };

static int marked(const uint64_t *b, size_t bytes, uint64_t mark) {
  size_t n = bytes / 8;
  return b[0] == mark && b[n / 2] == mark && b[n - 1] == mark;
}

static void mark(uint64_t *b, size_t bytes, uint64_t m) {
  size_t n = bytes / 8;
  b[0] = b[n / 2] = b[n - 1] = m;
}

static void *stress(void *arg) {
  stress_arg *a = arg;
  struct {
    uint64_t *b;
    size_t bytes, got;
    uint64_t mark;
    shared_fence *f;
  } live[STRESS_LIVE] = {{0}}, flight[STRESS_FLIGHT] = {{0}};
  uint64_t seed = (uint64_t)a->id * 7919 + 1;
  int n_flight = 0;
  for (int it = 0; it < STRESS_ITERS; it++) {
    int k = (int)(next_rand(&seed) % STRESS_LIVE);
    if (live[k].b) { /* give it back */
      if (!marked(live[k].b, live[k].bytes, live[k].mark)) atomic_fetch_add(a->errors, 1);
      if (a->fenced && next_rand(&seed) % 2) {
        if (n_flight == STRESS_FLIGHT) { /* the oldest in flight completes */
          if (!marked(flight[0].b, flight[0].bytes, flight[0].mark))
            atomic_fetch_add(a->errors, 1); /* reused before its fence was done */
          atomic_store(&flight[0].f->done, 1);
          for (int i = 1; i < n_flight; i++) flight[i - 1] = flight[i];
          n_flight--;
        }
        shared_fence *f = malloc(sizeof *f);
        atomic_init(&f->done, 0);
        f->released = a->released;
        flight[n_flight].b = live[k].b;
        flight[n_flight].bytes = live[k].bytes;
        flight[n_flight].mark = live[k].mark;
        flight[n_flight++].f = f;
        dpm_pool_free_after(a->p, live[k].b, live[k].got, f);
      } else {
        dpm_pool_free(a->p, live[k].b, live[k].got);
      }
      live[k].b = NULL;
    } else {
      size_t bytes =
          8 + 8 * (next_rand(&seed) % (1 + ((size_t)1 << (next_rand(&seed) % 15))));
      uint64_t *b = dpm_pool_alloc(a->p, bytes, &live[k].got);
      if (!b || live[k].got < bytes) {
        atomic_fetch_add(a->errors, 1);
        continue;
      }
      a->allocs++;
      live[k].b = b;
      live[k].bytes = bytes;
      live[k].mark = ((uint64_t)a->id << 32) | (uint64_t)it;
      mark(b, bytes, live[k].mark);
    }
  }
  for (int k = 0; k < STRESS_LIVE; k++)
    if (live[k].b) dpm_pool_free(a->p, live[k].b, live[k].got);
  for (int i = 0; i < n_flight; i++) {
    if (!marked(flight[i].b, flight[i].bytes, flight[i].mark))
      atomic_fetch_add(a->errors, 1);
    atomic_store(&flight[i].f->done, 1);
  }
  return NULL;
}

TEST(pool_threads_allocate_and_free_at_once) {
  enum { THREADS = 8 };
  mem m = {0};
  atomic_int errors, released;
  atomic_init(&errors, 0);
  atomic_init(&released, 0);
  dpm_pool p;
  dpm_pool_init(&p, (dpm_pool_raw){mem_alloc, mem_free, &m});
  dpm_pool_set_fences(&p, (dpm_pool_fences){sf_done, sf_release, NULL, NULL});
  pthread_t t[THREADS];
  stress_arg args[THREADS];
  for (int i = 0; i < THREADS; i++) {
    args[i] = (stress_arg){&p, i + 1, &errors, &released, i % 4 != 0, 0};
    CHECK(pthread_create(&t[i], NULL, stress, &args[i]) == 0);
  }
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  CHECK_INT(atomic_load(&errors), 0);
  dpm_pool_stats s = dpm_pool_stats_of(&p);
  CHECK(s.in_use == 0 && s.requested_in_use == 0 && s.pending + s.cached == m.live);
  int allocs = 0;
  for (int i = 0; i < THREADS; i++) allocs += args[i].allocs;
  CHECK(s.requests == (uint64_t)allocs && s.raw_allocs < s.requests);
  dpm_pool_trim(&p); /* every fence is done now */
  s = dpm_pool_stats_of(&p);
  CHECK(s.pending == 0 && s.cached == 0 && m.live == 0);
  dpm_pool_fini(&p);
  CHECK(atomic_load(&released) > 0);
}
