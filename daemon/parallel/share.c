/* Work sharing between device workers (share.h).
 *
 * A slot's claim word is round << 32 | next part. The owner opens a round
 * by storing (round, 0) after op, parts and done are set (release); a
 * taker that loads a claim of that round (acquire) sees them, and takes
 * part k by moving the word from (round, k) to (round, k + 1). The owner
 * takes its own parts with fetch_add: only it changes the round. Every
 * part taken is counted in done when finished; the owner waits for done
 * to reach parts before it returns, so no part of a round is running once
 * its owner has moved on, and a stale taker's compare-and-swap fails. op
 * and parts are atomics only because a taker may read them while the owner
 * rewrites them for the next round (with the same values). */
#include "parallel/share.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "comm/spin.h"

typedef struct {
  _Alignas(64) atomic_ullong claim; /* round << 32 | next part to take */
  atomic_ulong done;                /* parts of the round finished */
  _Atomic(const dpm_op *) op;       /* the round's op and its part count */
  atomic_uint parts;
  uint32_t round; /* owner only: rounds opened */
} share_slot;

struct dpm_share {
  int n;
  share_slot *slot;
};

dpm_status dpm_share_create(int n, dpm_share **out, dpm_err *err) {
  *out = NULL;
  if (n < 2 || n > DPM_COMM_MAX_RANKS)
    return dpm_errf(err, DPM_INVALID, "share: %d ranks outside 2..%d", n,
                    DPM_COMM_MAX_RANKS);
  dpm_share *s = calloc(1, sizeof *s);
  if (s) s->slot = aligned_alloc(64, (size_t)n * sizeof *s->slot);
  if (!s || !s->slot) {
    free(s);
    return dpm_errf(err, DPM_NOMEM, "share: out of memory");
  }
  s->n = n;
  for (int r = 0; r < n; r++) {
    share_slot *q = &s->slot[r];
    atomic_init(&q->claim, 0);
    atomic_init(&q->done, 0);
    atomic_init(&q->op, NULL);
    atomic_init(&q->parts, 0);
    q->round = 0;
  }
  *out = s;
  return DPM_OK;
}

void dpm_share_destroy(dpm_share *s) {
  if (!s) return;
  free(s->slot);
  free(s);
}

/* Through the op's kernel, its device's (fenced: inside its window). */
static void run_part(const dpm_op *op, uint32_t k) { op->kernel->run_part(op, (int)k); }

void dpm_share_run(dpm_share *s, int rank, const dpm_op *op) {
  share_slot *me = &s->slot[rank];
  uint32_t parts = (uint32_t)op->kernel->parts(op);
  if (op->kernel->prepare) op->kernel->prepare(op); /* published by the claim below */
  atomic_store_explicit(&me->op, op, memory_order_relaxed);
  atomic_store_explicit(&me->parts, parts, memory_order_relaxed);
  atomic_store_explicit(&me->done, 0, memory_order_relaxed);
  atomic_store_explicit(&me->claim, (uint64_t)++me->round << 32, memory_order_release);
  for (;;) {
    uint32_t k = (uint32_t)atomic_fetch_add_explicit(&me->claim, 1, memory_order_relaxed);
    if (k >= parts) break;
    run_part(op, k);
    atomic_fetch_add_explicit(&me->done, 1, memory_order_relaxed);
  }
  dpm_spin_until(&me->done, parts); /* the peers' parts: they are running */
}

/* One part of peer q's op of `round`: 1 when taken and run, 0 when none is
 * left, -1 when q has not opened the round yet. */
static int take(share_slot *q, uint32_t round) {
  unsigned long long c = atomic_load_explicit(&q->claim, memory_order_acquire);
  for (;;) {
    uint32_t r = (uint32_t)(c >> 32), k = (uint32_t)c;
    if (r != round) return r == round - 1 ? -1 : 0;
    if (k >= atomic_load_explicit(&q->parts, memory_order_relaxed)) return 0;
    if (atomic_compare_exchange_weak_explicit(&q->claim, &c, c + 1, memory_order_acquire,
                                              memory_order_acquire)) {
      run_part(atomic_load_explicit(&q->op, memory_order_relaxed), k);
      atomic_fetch_add_explicit(&q->done, 1, memory_order_release);
      return 1;
    }
  }
}

void dpm_share_help(dpm_share *s, int rank, int wait_ms) {
  uint32_t round = s->slot[rank].round;
  struct timespec start = {0};
  for (unsigned i = 1;; i++) {
    int waiting = 0, took = 0;
    for (int k = 1; k < s->n; k++) {
      int got = take(&s->slot[(rank + k) % s->n], round);
      took |= got > 0;
      waiting |= got < 0;
    }
    if (took) continue;
    if (!waiting || !dpm_spin_step(i, &start, wait_ms * 1000000L)) return;
  }
}
