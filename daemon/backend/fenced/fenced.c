/* The fenced backend (test builds, devices fenced:N): the CPU kernels over
 * device memory that host code cannot touch, so a CPU-only assumption fails
 * a test on the CPU, long before a GPU sees it (like KASAN, for the
 * rule that only backends and kernels touch device bytes).
 *
 * The kernels are the cpu backend's, looked up by op id and each wrapped
 * so that it runs inside the window below; an op the CPU has no kernel for
 * has none here either.
 *
 * Every fenced device allocates from one arena of virtual memory mapped
 * PROT_NONE. It is readable and writable only while a backend call runs
 * (a kernel, a part of one, a copy, a memset, or host code acting as the
 * device between enter and leave): a count of calls in flight opens it at
 * 0 -> 1 and closes it at 1 -> 0, under a lock. Host code that touches
 * device memory at any other moment faults at once (SIGSEGV). With several
 * device workers the arena is open while any of them is inside a call, so
 * a stray touch is certain to fault only when none is; the host code
 * between steps (statistics, checkpoints, get-blob, sync, extraction) runs
 * when none is, which is where such mistakes live.
 *
 * Memory: page-granular first-fit extents in the arena (a free list on the
 * host); freed extents are given back to the kernel (MADV_DONTNEED). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backend/backend.h"

#define ARENA_BYTES ((size_t)1 << 36) /* 64 GiB of address space, reserved */
#define PAGE 4096
#define FENCED_DEVICES 16

typedef struct extent {
  size_t off, len;
  struct extent *next;
} extent;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *arena;   /* NULL until the first device opens */
static size_t used;      /* bump pointer: [0, used) has been handed out */
static extent *holes;    /* freed extents below used */
static int inside;       /* backend calls in flight */
static int open_devices; /* the arena is unmapped when the last closes */

static void window(int delta) {
  pthread_mutex_lock(&mu);
  int was = inside;
  inside += delta;
  if ((was == 0) != (inside == 0) && used)
    mprotect(arena, used, inside ? PROT_READ | PROT_WRITE : PROT_NONE);
  pthread_mutex_unlock(&mu);
}

static void enter(void) { window(1); }
static void leave(void) { window(-1); }

static int fenced_probe(dpm_err *err) {
  (void)err;
  return FENCED_DEVICES;
}

static dpm_status fenced_open(int index, void **state, dpm_err *err) {
  (void)index;
  *state = NULL;
  pthread_mutex_lock(&mu);
  if (!arena) {
    void *p = mmap(NULL, ARENA_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
      pthread_mutex_unlock(&mu);
      return dpm_errf(err, DPM_NOMEM, "fenced: cannot reserve the arena");
    }
    arena = p;
  }
  open_devices++;
  pthread_mutex_unlock(&mu);
  return DPM_OK;
}

static void fenced_close(void *state) {
  (void)state;
  pthread_mutex_lock(&mu);
  if (--open_devices == 0 && arena) {
    munmap(arena, ARENA_BYTES);
    arena = NULL;
    used = 0;
    for (extent *e; (e = holes);) {
      holes = e->next;
      free(e);
    }
  }
  pthread_mutex_unlock(&mu);
}

static void *fenced_alloc(void *state, size_t bytes) {
  (void)state;
  size_t len = (bytes + PAGE - 1) / PAGE * PAGE;
  if (!len) len = PAGE;
  void *p = NULL;
  pthread_mutex_lock(&mu);
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
    p = arena + used;
    used += len;
    if (inside) mprotect(p, len, PROT_READ | PROT_WRITE);
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
  (void)state, (void)kind;
  enter();
  memmove(dst, src, bytes);
  leave();
}

static void fenced_memset(void *state, void *dst, int value, size_t bytes) {
  (void)state;
  enter();
  memset(dst, value, bytes);
  leave();
}

static void fenced_synchronize(void *state) { (void)state; }

/* ---- kernels: the CPU's, each run inside the window ---------------------- */

static const dpm_kernel_def *cpu_kernel_of(const dpm_node *n) {
  return dpm_backend_cpu.kernel(n->def->id);
}

static void fenced_run(const dpm_op *op) {
  enter();
  cpu_kernel_of(op->node)->run(op);
  leave();
}

/* Shapes only: no device bytes, so outside the window. */
static int fenced_parts(const dpm_op *op) { return cpu_kernel_of(op->node)->parts(op); }

static void fenced_run_part(const dpm_op *op, int part) {
  enter();
  cpu_kernel_of(op->node)->run_part(op, part);
  leave();
}

static size_t fenced_scratch(const dpm_node *n, const dpm_shape *in) {
  const dpm_kernel_def *k = cpu_kernel_of(n);
  return k->scratch ? k->scratch(n, in) : 0;
}

static const dpm_kernel_def fenced_whole = {.run = fenced_run, .scratch = fenced_scratch};
static const dpm_kernel_def fenced_split = {
    .run = fenced_run,
    .parts = fenced_parts,
    .run_part = fenced_run_part,
    .scratch = fenced_scratch,
};

/* Every op the CPU has a kernel for, split where the CPU's splits. */
static const dpm_kernel_def *fenced_kernel(dpm_op_id id) {
  const dpm_kernel_def *k = dpm_backend_cpu.kernel(id);
  return !k ? NULL : k->parts ? &fenced_split : &fenced_whole;
}

static void fenced_enter(void *state) {
  (void)state;
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
  int in = arena && (const uint8_t *)p >= arena && (const uint8_t *)p < arena + ARENA_BYTES;
  pthread_mutex_unlock(&mu);
  return in;
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
    .owns = fenced_owns,
};
