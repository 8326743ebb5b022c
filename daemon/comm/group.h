/* The group core: what every communicator (comm.h) does the same way around
 * its data movement, written once for local.c, gloo.c, loop.c and the
 * cuda plugin's nccl.c (compiled into the plugin as backend/pool.c is, so
 * it names no engine symbol: messages go into the caller's buffers or
 * straight into a dpm_err, never through dpm_errf).
 *   - the agreement on a collective: what each rank called (dpm_group_call)
 *     and the verdict on the ranks' calls (dpm_group_judge), with the
 *     messages every backend gives; across processes, the header a process
 *     sends the others (dpm_group_header: kind, count, dtype, root and
 *     sequence number) and the verdict on the headers (dpm_group_agree);
 *   - timeouts that name the collective, the missing ranks and the
 *     collective's sequence number (dpm_group_timeout_msg), waited for on
 *     condition variables of the monotonic clock (dpm_group_cond_init);
 *   - sticky failure (dpm_group_fault): the first failure breaks the group
 *     for good, every later call quotes it, dpm_comm_failure returns it.
 * Each backend keeps its own meeting and job queue (spinning rounds and a
 * ring of started jobs summed in the waits: local; a job ring run by a
 * thread: gloo; a mutex meeting, then streams: nccl) and its data movement.
 *
 * Threads: the functions are pure, except dpm_group_fail, dpm_group_failure
 * and dpm_group_fault_msg (under the caller's lock guarding the fault) and
 * dpm_group_broken (any thread). */
#ifndef DPM_COMM_GROUP_H
#define DPM_COMM_GROUP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"

/* The collectives, as a group records them. */
typedef enum {
  DPM_GROUP_ALLREDUCE,
  DPM_GROUP_BROADCAST,
  DPM_GROUP_BARRIER,
  DPM_GROUP_OP_COUNT
} dpm_group_op;

/* "allreduce", "broadcast", "barrier"; "?" outside the enum. */
const char *dpm_group_op_name(dpm_group_op op);

/* What one rank called. */
typedef struct {
  dpm_group_op op;
  int root;         /* broadcast: the job-wide root; else -1 */
  size_t n;         /* elements (allreduce) or bytes (broadcast) */
  void *buf;        /* the rank's buffer */
  dpm_comm_dtype t; /* allreduce: the element type (started ones: floats) */
} dpm_group_call;

/* Bytes of a group's messages (verdicts, faults). */
#define DPM_GROUP_MSG 512

/* The verdict on the calls of `size` local ranks (job ranks rank_base ..,
 * of a job of `world` ranks; rank numbers in messages are job-wide): the
 * same collective on every rank, and for an allreduce the same element
 * type and count, for a broadcast the same bytes and root (inside the
 * job), a buffer wherever n > 0, sizes that fit in memory. DPM_OK, or
 * DPM_INVALID with the message in msg (DPM_GROUP_MSG bytes). */
dpm_status dpm_group_judge(const dpm_group_call *calls, int size, int rank_base,
                           int world, char *msg);

/* "collective mismatch: rank A called X, rank B called Y" into msg. */
dpm_status dpm_group_mismatch(char *msg, int a, dpm_group_op x, int b, dpm_group_op y);

/* What a process tells the others about its sequence number seq's
 * collective before any data moves. Hosts of one byte order (the fields
 * are sent as they lie in memory). */
typedef struct {
  uint32_t op;    /* dpm_group_op + 1; 0: this process's ranks disagreed */
  int32_t root;   /* broadcast: the job-wide root; else -1 */
  uint64_t n;     /* count or bytes; 0 for a barrier */
  uint64_t seq;   /* the collective's sequence number in the group */
  uint32_t dtype; /* allreduce: dpm_comm_dtype; else 0 */
  uint32_t zero;  /* 0 (padding, sent as such) */
} dpm_group_header;

/* The header of call c (agreed: whether the local ranks agreed on it). */
dpm_group_header dpm_group_header_of(const dpm_group_call *c, int agreed,
                                     unsigned long seq);

/* Names process p in a message ("process 1 (job ranks 2-3, HOST:PORT)"). */
typedef const char *(*dpm_group_describe_fn)(void *ctx, int p, char *buf, size_t cap);

/* The verdict on the headers of `nproc` processes (every process reaches
 * the same one from the same headers): DPM_OK, or DPM_INVALID with the
 * message in msg (DPM_GROUP_MSG bytes). */
dpm_status dpm_group_agree(const dpm_group_header *h, int nproc,
                           dpm_group_describe_fn describe, void *ctx, char *msg);

/* Whether rank r (local) is missing, for a timeout's message. */
typedef int (*dpm_group_absent_fn)(void *ctx, int r);

/* A timeout's message into msg (DPM_GROUP_MSG bytes): "OP: timed out after
 * T ms; A of N WHO arrived; missing rank(s) 1, 2 (collective SEQ)": the
 * collective, the ranks of the `size` local ones (numbered from rank_base)
 * that absent names, and the collective's sequence number in the group
 * (from 0; local counts its started allreduces apart).
 * who: "ranks", "local ranks", "ranks of process 1". */
void dpm_group_timeout_msg(char *msg, const char *op, unsigned long seq, int timeout_ms,
                           const char *who, int size, int rank_base,
                           dpm_group_absent_fn absent, void *ctx);

/* Initializes cv on CLOCK_MONOTONIC (for dpm_mono_deadline's deadlines);
 * 1 when done. */
int dpm_group_cond_init(pthread_cond_t *cv);

/* Sticky failure: set once, by the first failure, never cleared. */
typedef struct {
  atomic_int broken;
  dpm_status code;         /* what broke it: DPM_TIMEOUT, DPM_IO */
  const char *cause;       /* "timeout", "failure": in later calls' messages */
  char msg[DPM_GROUP_MSG]; /* the failure's message */
} dpm_group_fault;

/* A group's fault, not broken; cause as above. */
void dpm_group_fault_init(dpm_group_fault *f, const char *cause);
/* Under the caller's lock: the first failure wins (code and message);
 * returns whether this call broke the group. */
int dpm_group_fail(dpm_group_fault *f, dpm_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int dpm_group_broken(dpm_group_fault *f) { return atomic_load(&f->broken); }
/* Under the caller's lock: dpm_comm_failure of a broken group, the
 * failure's own code and message into err (NULL: none); returns the code. */
dpm_status dpm_group_failure(const dpm_group_fault *f, dpm_err *err);
/* Under the caller's lock: a later call's message into out (cap bytes):
 * "OP: communicator broken by an earlier CAUSE (MSG)". */
void dpm_group_fault_msg(const dpm_group_fault *f, const char *op, char *out, size_t cap);

#endif
