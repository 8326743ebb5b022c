/* The fenced backend (test builds, devices fenced:N): the CPU kernels over
 * device memory that host code cannot touch, so a CPU-only assumption fails
 * a test on the CPU, long before a GPU sees it (like KASAN, for the
 * rule that only backends and kernels touch device bytes).
 *
 * The kernels are the cpu backend's, looked up by op id and each wrapped
 * so that it runs inside the window below; an op the CPU has no kernel for
 * has none here either. Host work for an op (the engine's collectives:
 * backend.h, run_host) runs as a kernel does.
 *
 * Every fenced device allocates from one arena of virtual memory that is
 * readable and writable only while a backend call runs (a kernel, a part
 * of one, a copy, a memset, or host code acting as the device between
 * enter and leave). Host code that touches device memory at any other
 * moment faults at once (SIGSEGV). Two ways, chosen when the arena is made:
 * - Where the CPU and kernel have protection keys (x86 PKU), the arena's
 *   pages carry a key of their own and the window is per thread: a call
 *   opens it for its own thread by writing the thread's PKRU register (no
 *   system call, no TLB shootdown) and closes it as it returns. A thread
 *   outside a call faults even while another is inside one.
 * - Elsewhere the arena is mprotect'ed, process wide: a count of calls in
 *   flight opens it at 0 -> 1 and closes it at 1 -> 0, under a lock, so
 *   with several device workers a stray touch is certain to fault only
 *   when none is inside a call. The host code between steps (statistics,
 *   checkpoints, get-blob, sync, extraction) runs when none is, which is
 *   where such mistakes live. Each transition costs a TLB shootdown across
 *   the process's CPUs: tens of times slower than the keys on a loaded VM.
 *
 * Memory: page-granular first-fit extents in the arena (a free list on the
 * host); freed extents are given back to the kernel (MADV_DONTNEED). The
 * arena asks for transparent huge pages, and the part that windows open
 * grows by whole huge pages (HUGE), so that the pages first touched are
 * huge ones: a window's mprotect then rewrites one entry per 2 MiB, not
 * 512 (on a CPU without keys, the fenced tests' system time halves).
 *
 * A fenced device also behaves as a CUDA device with one stream would, in
 * the two ways that host code can get wrong without a GPU:
 * - Step graphs (backend.h: capture_begin .. replay): while a thread
 *   captures, the kernels (and host work for an op: run_host),
 *   device-to-device copies and memsets it queues on the device are
 *   recorded, not run, each kernel with the buffers it names (its tensors'
 *   data, its context's scratch and communicator); a copy between host and
 *   device, a wait, other host code acting as the device (enter) or an
 *   allocation inside the capture fails the capture. A replay runs
 *   the recording, and fails the device when an op now names other buffers
 *   than it did at capture (the CUDA graph would use the old ones: freed
 *   memory).
 * - One job at a time (backend.h: exclusive): kernels of two jobs
 *   (dpm_ctx.job) in flight on one device at once, or work queued by
 *   another thread while one captures (CUDA would put it into that graph),
 *   fail the device.
 * A failure is sticky, as a CUDA device's: reported by failure() until the
 * device closes (or a test clears it: fenced.h). */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backend/cpu/lowp_run.h"
#include "backend/device.h"
#include "backend/fenced/fenced.h"

#define ARENA_BYTES ((size_t)1 << 36) /* 64 GiB of address space, reserved */
#define PAGE 4096
#define HUGE ((size_t)2 << 20) /* a transparent huge page (x86-64) */
#define FENCED_DEVICES 16

typedef struct extent {
  size_t off, len;
  struct extent *next;
} extent;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *arena;          /* NULL until the first device opens */
static size_t used;             /* bump pointer: [0, used) has been handed out */
static size_t opened;           /* [0, opened): what windows open, used rounded up to HUGE */
static extent *holes;           /* freed extents below used */
static int inside;              /* backend calls in flight (no key) */
static int open_devices;        /* the arena is unmapped when the last closes */
static int pkey = -1;           /* the arena's protection key, or -1: mprotect */
static _Thread_local int depth; /* this thread's calls in flight (key) */

static void window(int delta) {
  if (pkey >= 0) { /* set once, before any device memory exists */
    int was = depth;
    depth += delta;
    if ((was == 0) != (depth == 0)) pkey_set(pkey, depth ? 0 : PKEY_DISABLE_ACCESS);
    return;
  }
  pthread_mutex_lock(&mu);
  int was = inside;
  inside += delta;
  if ((was == 0) != (inside == 0) && opened)
    mprotect(arena, opened, inside ? PROT_READ | PROT_WRITE : PROT_NONE);
  pthread_mutex_unlock(&mu);
}

/* A key for the arena, once per process (keys are few, and a process keeps
 * it): pkey_alloc denies this thread access; threads that exist already
 * were denied every key but 0 when the process started (Linux's initial
 * PKRU), and threads made later inherit their maker's rights, which are
 * "deny" outside a call. -1 where the CPU, kernel or a tool (valgrind) has
 * no keys. Under mu. */
static void choose_fence(void) {
  static int chosen;
  if (!chosen) pkey = pkey_alloc(0, PKEY_DISABLE_ACCESS);
  chosen = 1;
}

static void enter(void) { window(1); }
static void leave(void) { window(-1); }

/* ---- per-device state: captures, graphs, the job in flight, failure -------- */

/* What a capture recorded, in order. */
typedef enum { REC_RUN, REC_PART, REC_D2D, REC_MEMSET } rec_kind;
#define REC_PTRS (2 * DPM_OP_MAX_IO + 2)

typedef struct rec {
  rec_kind kind;
  const dpm_op *op; /* REC_RUN, REC_PART: the op (its exec outlives the graph) */
  void (*fn)(const dpm_op *op); /* REC_RUN: what runs it (its CPU kernel's run, or
                                   host work: fenced_run_host) */
  int part;
  const void *ptr[REC_PTRS]; /* the buffers it named: inputs, outputs, scratch, comm */
  void *dst;                 /* REC_D2D, REC_MEMSET */
  const void *src;
  size_t bytes;
  int value;
} rec;

typedef struct fgraph {
  rec *v;
  int n, cap;
} fgraph;

typedef struct fdev {
  int index;
  /* all below under mu */
  int capturing;            /* a capture is open ... */
  pthread_t capturer;       /* ... by this thread ... */
  fgraph *rec;              /* ... into this recording */
  const char *capture_fail; /* why the open capture cannot give a graph (NULL: none) */
  int fail_next_capture;    /* test hook: the next capture_begin fails */
  uint64_t job;             /* the job whose kernels are in flight (dpm_ctx.job) ... */
  int running;              /* ... how many */
  char failure[256];        /* the device's first failure ("": none) */
} fdev;

static fdev devs[FENCED_DEVICES];

/* Records the device's first failure (under mu). */
static void fail(fdev *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(fdev *d, const char *fmt, ...) {
  if (d->failure[0]) return;
  int k = snprintf(d->failure, sizeof d->failure, "fenced:%d: ", d->index);
  va_list ap;
  va_start(ap, fmt);
  if (k > 0 && (size_t)k < sizeof d->failure)
    vsnprintf(d->failure + k, sizeof d->failure - (size_t)k, fmt, ap);
  va_end(ap);
}

/* Another thread's capture is open on d (under mu). */
static int others_capture(const fdev *d) {
  return d->capturing && !pthread_equal(d->capturer, pthread_self());
}

/* The calling thread's capture is open on d (under mu). */
static int own_capture(const fdev *d) {
  return d->capturing && pthread_equal(d->capturer, pthread_self());
}

static int op_ptrs(const dpm_op *op, const void **p) {
  int n = 0;
  for (int k = 0; k < op->n_in; k++) p[n++] = op->in[k] ? op->in[k]->data : NULL;
  for (int k = 0; k < op->n_out; k++) p[n++] = op->out[k] ? op->out[k]->data : NULL;
  p[n++] = op->ctx->scratch;
  p[n++] = op->ctx->comm;
  return n;
}

/* Appends r to the open capture (under mu). */
static void record(fdev *d, const rec *r) {
  fgraph *g = d->rec;
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 64;
    rec *v = realloc(g->v, (size_t)cap * sizeof *v);
    if (!v) {
      d->capture_fail = "out of memory for the recording";
      return;
    }
    g->v = v, g->cap = cap;
  }
  g->v[g->n++] = *r;
}

/* Whether a call that queues work on d may run now; recorded instead (1)
 * inside the caller's capture when `what` can be captured (rec non-NULL),
 * else the capture or the device fails (under mu). */
static int taken_by_capture(fdev *d, const rec *r, const char *what) {
  if (others_capture(d)) {
    fail(d,
         "%s queued by another thread while a step was being captured on this device "
         "(a CUDA capture would take it into that graph)",
         what);
    return 1;
  }
  if (!own_capture(d)) return 0;
  if (r)
    record(d, r);
  else if (!d->capture_fail)
    d->capture_fail = what;
  return 1;
}

static fdev *fdev_of(const dpm_op *op) { return dpm_dev_state(op->ctx->dev); }

/* A kernel (or a part of one) of op on its device, run now: its context is
 * the device's job while it runs (under mu: begin/end). */
static int job_begin(fdev *d, const dpm_op *op) {
  uint64_t job = op->ctx->job ? op->ctx->job : (uint64_t)(uintptr_t)op->ctx;
  if (d->running && d->job != job) {
    fail(d,
         "kernels of two jobs in flight at once (op %s): one stream would interleave "
         "them",
         op->node->def->name);
    return 0;
  }
  d->job = job;
  d->running++;
  return 1;
}

static void job_end(fdev *d) {
  pthread_mutex_lock(&mu);
  if (--d->running == 0) d->job = 0;
  pthread_mutex_unlock(&mu);
}

static int fenced_probe(dpm_err *err) {
  (void)err;
  return FENCED_DEVICES;
}

static dpm_status fenced_open(int index, void **state, dpm_err *err) {
  *state = NULL;
  if (index < 0 || index >= FENCED_DEVICES)
    return dpm_errf(err, DPM_UNSUPPORTED, "fenced: no device %d", index);
  pthread_mutex_lock(&mu);
  if (!arena) {
    choose_fence();
    /* reserved with a huge page to spare, trimmed to HUGE-aligned bounds */
    uint8_t *p = mmap(NULL, ARENA_BYTES + HUGE, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      pthread_mutex_unlock(&mu);
      return dpm_errf(err, DPM_NOMEM, "fenced: cannot reserve the arena");
    }
    size_t head = (HUGE - (uintptr_t)p % HUGE) % HUGE;
    if (head) munmap(p, head);
    munmap(p + head + ARENA_BYTES, HUGE - head);
    arena = p + head;
    madvise(arena, ARENA_BYTES, MADV_HUGEPAGE);
  }
  open_devices++;
  devs[index] = (fdev){.index = index};
  *state = &devs[index];
  pthread_mutex_unlock(&mu);
  return DPM_OK;
}

static void fenced_close(void *state) {
  fdev *d = state;
  pthread_mutex_lock(&mu);
  if (d->rec) free(d->rec->v);
  free(d->rec);
  *d = (fdev){.index = d->index};
  if (--open_devices == 0 && arena) {
    munmap(arena, ARENA_BYTES);
    arena = NULL;
    used = opened = 0;
    for (extent *e; (e = holes);) {
      holes = e->next;
      free(e);
    }
  }
  pthread_mutex_unlock(&mu);
}

static void *fenced_alloc(void *state, size_t bytes) {
  size_t len = (bytes + PAGE - 1) / PAGE * PAGE;
  if (!len) len = PAGE;
  void *p = NULL;
  pthread_mutex_lock(&mu);
  if (own_capture(state) && !((fdev *)state)->capture_fail)
    ((fdev *)state)->capture_fail = "an allocation";
  else if (others_capture(state))
    fail(state, "an allocation by another thread while a step was being captured");
  for (extent **at = &holes; *at && !p; at = &(*at)->next) {
    extent *e = *at;
    if (e->len < len) continue;
    p = arena + e->off;
    e->off += len;
    e->len -= len;
    if (!e->len) {
      *at = e->next;
      free(e);
    }
  }
  if (!p && ARENA_BYTES - used >= len) {
    size_t top = (used + len + HUGE - 1) / HUGE * HUGE; /* ARENA_BYTES is a multiple */
    uint8_t *more = arena + opened;
    int bad = top == opened ? 0
              : pkey >= 0   ? pkey_mprotect(more, top - opened, PROT_READ | PROT_WRITE, pkey)
              : inside      ? mprotect(more, top - opened, PROT_READ | PROT_WRITE)
                            : 0;
    if (!bad) {
      p = arena + used;
      used += len;
      opened = top;
    }
  }
  pthread_mutex_unlock(&mu);
  return p;
}

static void fenced_free(void *state, void *p, size_t bytes) {
  (void)state;
  size_t len = (bytes + PAGE - 1) / PAGE * PAGE;
  extent *e = malloc(sizeof *e);
  pthread_mutex_lock(&mu);
  madvise(p, len ? len : PAGE, MADV_DONTNEED);
  if (e) {
    *e = (extent){(size_t)((uint8_t *)p - arena), len ? len : PAGE, holes};
    holes = e;
  }
  pthread_mutex_unlock(&mu);
}

static void fenced_copy(void *state, void *dst, const void *src, size_t bytes,
                        dpm_copy_kind kind) {
  rec r = {.kind = REC_D2D, .dst = dst, .src = src, .bytes = bytes};
  pthread_mutex_lock(&mu);
  int taken = taken_by_capture(state, kind == DPM_COPY_D2D ? &r : NULL,
                               kind == DPM_COPY_D2D ? "a copy"
                                                    : "a copy between host and device");
  pthread_mutex_unlock(&mu);
  if (taken) return;
  enter();
  memmove(dst, src, bytes);
  leave();
}

static void fenced_memset(void *state, void *dst, int value, size_t bytes) {
  rec r = {.kind = REC_MEMSET, .dst = dst, .bytes = bytes, .value = value};
  pthread_mutex_lock(&mu);
  int taken = taken_by_capture(state, &r, "a memset");
  pthread_mutex_unlock(&mu);
  if (taken) return;
  enter();
  memset(dst, value, bytes);
  leave();
}

static void fenced_synchronize(void *state) {
  pthread_mutex_lock(&mu);
  taken_by_capture(state, NULL, "a wait for the device");
  pthread_mutex_unlock(&mu);
}

static dpm_status fenced_failure(void *state, dpm_err *err) {
  fdev *d = state;
  pthread_mutex_lock(&mu);
  dpm_status s = d->failure[0] ? dpm_errf(err, DPM_IO, "%s", d->failure) : DPM_OK;
  pthread_mutex_unlock(&mu);
  return s;
}

/* ---- kernels: the CPU's, each run inside the window ---------------------- */

static const dpm_kernel_def *cpu_kernel_of(const dpm_node *n) {
  return dpm_backend_cpu.kernel(n->def->id);
}

/* The CPU kernel that splits op: its own, or for an op on bf16/f16 tensors
 * (bound with op->inner) the low-precision wrapper's parts. */
static const dpm_kernel_def *split_of(const dpm_op *op) {
  return op->inner ? &dpm_cpu_lowp_kernel : cpu_kernel_of(op->node);
}

/* Runs fn(op) (part < 0) or one part of op's CPU kernel now, as the
 * device's job. */
static void run_now(fdev *d, const dpm_op *op, void (*fn)(const dpm_op *op), int part) {
  pthread_mutex_lock(&mu);
  int ok = job_begin(d, op);
  pthread_mutex_unlock(&mu);
  if (!ok) return;
  enter();
  if (part < 0)
    fn(op);
  else
    split_of(op)->run_part(op, part);
  leave();
  job_end(d);
}

/* fn(op) (part < 0) or one part of op, queued: recorded by the caller's
 * capture, or run. */
static void queue_op(const dpm_op *op, void (*fn)(const dpm_op *op), int part) {
  fdev *d = fdev_of(op);
  rec r = {.kind = part < 0 ? REC_RUN : REC_PART, .op = op, .fn = fn, .part = part};
  op_ptrs(op, r.ptr);
  char what[64];
  snprintf(what, sizeof what, "a kernel (op %s)", op->node->def->name);
  pthread_mutex_lock(&mu);
  int taken = taken_by_capture(d, &r, what);
  pthread_mutex_unlock(&mu);
  if (!taken) run_now(d, op, fn, part);
}

/* An op on bf16/f16 tensors (bound with op->inner, the CPU's kernel:
 * engine/exec.c) runs the CPU's low-precision wrapper around it
 * (backend/cpu/lowp_run.h), whole. */
static void fenced_run(const dpm_op *op) {
  queue_op(op, op->inner ? dpm_cpu_lowp_kernel.run : cpu_kernel_of(op->node)->run, -1);
}

/* Shapes only: no device bytes, so outside the window. */
static int fenced_parts(const dpm_op *op) { return split_of(op)->parts(op); }

/* The wrapper's packing, inside the window as a kernel (the CPU's f32
 * kernels prepare nothing). */
static void fenced_prepare(const dpm_op *op) {
  if (op->inner) queue_op(op, dpm_cpu_lowp_kernel.prepare, -1);
}

static void fenced_run_part(const dpm_op *op, int part) { queue_op(op, NULL, part); }

/* Host work for op (a collective) runs as a kernel would: recorded inside a
 * capture, else now, inside the window, as the device's job. */
static void fenced_run_host(void *state, void (*fn)(const dpm_op *op), const dpm_op *op) {
  (void)state; /* op's device's */
  queue_op(op, fn, -1);
}

static size_t fenced_scratch(const dpm_node *n, const dpm_shape *in) {
  const dpm_kernel_def *k = cpu_kernel_of(n);
  return k->scratch ? k->scratch(n, in) : 0;
}

#define FENCED_LOWP (DPM_LOWP_BIT(DPM_BF16) | DPM_LOWP_BIT(DPM_F16))
static const dpm_kernel_def fenced_whole = {
    .run = fenced_run, .scratch = fenced_scratch, .lowp = FENCED_LOWP};
static const dpm_kernel_def fenced_split = {
    .run = fenced_run,
    .parts = fenced_parts,
    .run_part = fenced_run_part,
    .prepare = fenced_prepare,
    .scratch = fenced_scratch,
    .lowp = FENCED_LOWP,
};

/* Every op the CPU has a kernel for, split where the CPU's splits. */
static const dpm_kernel_def *fenced_kernel(dpm_op_id id) {
  const dpm_kernel_def *k = dpm_backend_cpu.kernel(id);
  return !k ? NULL : k->parts ? &fenced_split : &fenced_whole;
}

static void fenced_enter(void *state) {
  pthread_mutex_lock(&mu);
  taken_by_capture(state, NULL, "host code acting as the device");
  pthread_mutex_unlock(&mu);
  enter();
}

static void fenced_leave(void *state) {
  (void)state;
  leave();
}

/* Inside the arena: every fenced device's memory (they share it). The
 * arena's address is read under mu, never its bytes. */
static int fenced_owns(void *state, const void *p) {
  (void)state;
  pthread_mutex_lock(&mu);
  int in =
      arena && (const uint8_t *)p >= arena && (const uint8_t *)p < arena + ARENA_BYTES;
  pthread_mutex_unlock(&mu);
  return in;
}

/* ---- step graphs ----------------------------------------------------------- */

static dpm_status fenced_capture_begin(void *state, dpm_err *err) {
  fdev *d = state;
  fgraph *g = calloc(1, sizeof *g);
  dpm_status s = DPM_OK;
  pthread_mutex_lock(&mu);
  if (!g)
    s = dpm_errf(err, DPM_NOMEM, "fenced:%d: out of memory", d->index);
  else if (d->fail_next_capture)
    s = dpm_errf(err, DPM_UNSUPPORTED, "fenced:%d: cannot begin a capture (test hook)",
                 d->index);
  else if (d->capturing)
    s = dpm_errf(err, DPM_STATE, "fenced:%d: a capture is already open", d->index);
  d->fail_next_capture = 0;
  if (!s) {
    d->capturing = 1;
    d->capturer = pthread_self();
    d->rec = g;
    d->capture_fail = NULL;
  }
  pthread_mutex_unlock(&mu);
  if (s) free(g);
  return s;
}

static void graph_free(fgraph *g) {
  if (g) free(g->v);
  free(g);
}

static void *fenced_capture_end(void *state, dpm_err *err) {
  fdev *d = state;
  pthread_mutex_lock(&mu);
  fgraph *g = own_capture(d) ? d->rec : NULL;
  const char *why = own_capture(d) ? d->capture_fail : "no capture open on this thread";
  if (own_capture(d)) {
    d->capturing = 0;
    d->rec = NULL;
  }
  pthread_mutex_unlock(&mu);
  if (why) {
    graph_free(g);
    dpm_errf(err, DPM_UNSUPPORTED,
             "fenced:%d: step not captured as a graph: %s inside it", d->index, why);
    return NULL;
  }
  return g;
}

/* Runs a recording; an op whose buffers are not those it named at capture
 * fails the device, and it and the rest do not run. */
static dpm_status fenced_replay(void *state, void *graph, dpm_err *err) {
  fdev *d = state;
  const fgraph *g = graph;
  for (int i = 0; i < g->n; i++) {
    const rec *r = &g->v[i];
    if (r->kind == REC_D2D || r->kind == REC_MEMSET) {
      enter();
      if (r->kind == REC_D2D)
        memmove(r->dst, r->src, r->bytes);
      else
        memset(r->dst, r->value, r->bytes);
      leave();
      continue;
    }
    const void *now[REC_PTRS] = {0};
    int n = op_ptrs(r->op, now);
    if (memcmp(now, r->ptr, (size_t)n * sizeof *now)) {
      pthread_mutex_lock(&mu);
      fail(d,
           "a step graph replayed op %s with buffers it no longer uses (the graph "
           "outlived a buffer it names)",
           r->op->node->def->name);
      pthread_mutex_unlock(&mu);
      break;
    }
    run_now(d, r->op, r->fn, r->kind == REC_RUN ? -1 : r->part);
  }
  return fenced_failure(d, err);
}

static void fenced_graph_free(void *state, void *graph) {
  (void)state;
  graph_free(graph);
}

/* ---- test hooks (fenced.h) --------------------------------------------------- */

void dpm_fenced_fail_next_capture(int index) {
  pthread_mutex_lock(&mu);
  if (index >= 0 && index < FENCED_DEVICES) devs[index].fail_next_capture = 1;
  pthread_mutex_unlock(&mu);
}

void dpm_fenced_clear_failure(int index) {
  pthread_mutex_lock(&mu);
  if (index >= 0 && index < FENCED_DEVICES) devs[index].failure[0] = 0;
  pthread_mutex_unlock(&mu);
}

const dpm_backend dpm_backend_fenced = {
    .name = "fenced",
    .kind = DPM_DEVICE_FENCED,
    .host_visible = 0,
    .probe = fenced_probe,
    .open = fenced_open,
    .close = fenced_close,
    .alloc = fenced_alloc,
    .free = fenced_free,
    .copy = fenced_copy,
    .memset = fenced_memset,
    .synchronize = fenced_synchronize,
    .kernel = fenced_kernel,
    .enter = fenced_enter,
    .leave = fenced_leave,
    .run_host = fenced_run_host,
    .owns = fenced_owns,
    .failure = fenced_failure,
    .capture_begin = fenced_capture_begin,
    .capture_end = fenced_capture_end,
    .replay = fenced_replay,
    .graph_free = fenced_graph_free,
    .exclusive = 1,
};
