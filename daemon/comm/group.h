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
 *     for good, every later call quotes it, dpm_comm_failure returns it;
 *   - the job queue (dpm_group_queue, below): a ring of job slots where the
 *     ranks of this process meet on each call, the last to arrive judges
 *     and publishes, a rank that gives up breaks the group, and the last to
 *     leave frees the slot; with the group's lock, condition variable,
 *     sleepers and fault, which the backend's own waits share. local runs
 *     its started allreduces through it (its blocking rounds are a
 *     generation barrier of its own, on the queue's lock and fault), gloo
 *     every collective (its thread runs them), nccl its host meeting.
 * Each backend keeps its data movement, and what it keeps per job beside
 * the queue's slot (local: the chunks claimed and summed; gloo: the run's
 * status), indexed by the slot (dpm_group_slot).
 *
 * Threads: the functions above the queue are pure, except dpm_group_fail,
 * dpm_group_failure and dpm_group_fault_msg (under the caller's lock
 * guarding the fault) and dpm_group_broken (any thread); the queue's are
 * described at dpm_group_queue. */
#ifndef DPM_COMM_GROUP_H
#define DPM_COMM_GROUP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

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
  uint32_t wire;  /* float allreduce: the sender's dpm_comm_wire (set by the
                     backend); else 0 */
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

/* ---- the job queue ---------------------------------------------------------
 *
 * Job k is every local rank's k-th call on the queue; it lives in slot
 * k % slots. A rank arrives (dpm_group_arrive): it waits until the slot is
 * free of job k - slots, records its call there, and counts itself in; the
 * last to arrive judges the calls (dpm_group_judge) and publishes the job
 * (dpm_group_publish: ready = k + 1), unless the group is broken. A rank
 * waits for the publication (dpm_group_ready) up to its deadline, then
 * gives up: the group breaks, naming the ranks that did not arrive. Once
 * the backend is done with the job, each rank leaves (dpm_group_leave); the
 * last to leave frees the slot for job k + slots (uses).
 *
 * Memory orderings (every atomic here is sequentially consistent):
 *   - arriving: a rank writes its call and then increments arrived; the
 *     increments form one release sequence, so the rank whose increment
 *     completes the count reads every call (and whatever each rank wrote
 *     before arriving, such as a backend's per-slot fields);
 *   - publishing: the judge writes the verdict (and the backend its
 *     per-job fields) before it stores ready; a rank that loads ready =
 *     k + 1 reads them;
 *   - leaving: each rank stops touching the job before it increments left;
 *     the last one resets the slot before it increments uses, and a rank
 *     reads uses before it writes its call for job k + slots;
 *   - publishing against giving up: both happen under mu, publishing only
 *     while the group is unbroken and giving up only while the job is
 *     unpublished, and giving up breaks the group. So once a rank has given
 *     up on a job, no job of the group is published again: no peer touches
 *     the buffer of a rank that returned, and no job runs behind one that
 *     never will (gloo runs its jobs in order);
 *   - sleeping: a waiter increments sleepers and then loads the counter it
 *     waits for, under mu; a waker stores the counter and then loads
 *     sleepers, and broadcasts under mu when it is not zero. Of the two
 *     loads at least one sees the other's store (a total order), so a
 *     waiter either sees the new value or is woken.
 *
 * Threads: a rank's own calls are sequential (comm.h); next[rank] is the
 * rank's own. dpm_group_broken and the atomics may be read by any thread;
 * everything else named "under mu" is written under mu. */

/* Rank r's state in a job (dpm_group_job.here). */
enum { DPM_GROUP_ABSENT, DPM_GROUP_ARRIVED, DPM_GROUP_LEFT };

/* One slot of the ring: job k while uses == k / slots. */
typedef struct {
  atomic_ulong uses;       /* jobs that used this slot and were left by every rank */
  atomic_ulong ready;      /* k + 1 once job k is judged and published */
  atomic_int arrived;      /* ranks that arrived at the job */
  atomic_int left;         /* ranks that left it */
  dpm_status verdict;      /* the ranks' agreement (dpm_group_judge), set before ready */
  char msg[DPM_GROUP_MSG]; /* the verdict's message; the backend may write its
                              result's there after ready */
  dpm_group_call *calls;   /* [size] what each rank called */
  atomic_uchar *here;      /* [size] DPM_GROUP_ABSENT, _ARRIVED, _LEFT */
} dpm_group_job;

/* Bytes of a message that quotes the fault ("OP: communicator broken by an
 * earlier CAUSE (MSG)"). */
#define DPM_GROUP_ERR (DPM_GROUP_MSG + 96)

/* A group's queue, its lock and its fault; embedded in the backend's
 * group (dpm_group_queue_init, _fini). */
typedef struct {
  pthread_mutex_t mu;       /* guards publishing, giving up, sleeping, the fault's writes
                               and broken_job (and the backend's own fields under it) */
  pthread_cond_t cv;        /* CLOCK_MONOTONIC; broadcast when a job is published, a slot
                               is freed or the group breaks, and by dpm_group_wake */
  atomic_int sleepers;      /* threads asleep on cv */
  int spin;                 /* spin before sleeping (the ranks have CPUs of their own) */
  int size;                 /* ranks of this process (the queue's ranks) */
  int rank_base, world;     /* job-wide rank of local rank 0; ranks in the job */
  int timeout_ms;           /* bound on the waits for ranks (the caller's deadlines) */
  char who[48];             /* the ranks in a timeout's message: "ranks", "local ranks" */
  dpm_group_fault fault;    /* the group's sticky failure (under mu) */
  unsigned long broken_job; /* under mu: the job whose ranks' timeout broke the
                               group (its ranks get DPM_TIMEOUT); else ULONG_MAX */
  int slots;                /* jobs in the ring */
  dpm_group_job *jobs;      /* [slots] */
  unsigned long *next;      /* [size] each rank's next job */
  atomic_uchar *inside;     /* [size] 1 while the rank is inside a call (enter) */
} dpm_group_queue;

/* Initializes q for `size` local ranks (job ranks rank_base .. of world),
 * `slots` jobs, waits bounded by timeout_ms; spin: spin before sleeping;
 * who and cause as in dpm_group_timeout_msg and dpm_group_fault_init.
 * 1 when done; 0 when out of memory (q holds nothing then). */
int dpm_group_queue_init(dpm_group_queue *q, int slots, int size, int rank_base,
                         int world, int timeout_ms, int spin, const char *who,
                         const char *cause);
/* Frees what init allocated. No thread may be inside q. */
void dpm_group_queue_fini(dpm_group_queue *q);

/* The slot of job k (its index: k % slots, for the backend's own arrays). */
static inline int dpm_group_slot(const dpm_group_queue *q, unsigned long k) {
  return (int)(k % (unsigned long)q->slots);
}
static inline dpm_group_job *dpm_group_job_of(dpm_group_queue *q, unsigned long k) {
  return &q->jobs[dpm_group_slot(q, k)];
}

/* A wake-up from a condition variable costs tens of microseconds, which is
 * most of a small collective: when every rank could have a CPU of its own
 * (q->spin), a waiting rank first watches its counter for up to this many
 * nanoseconds, yielding its CPU every 64 checks so that a peer (or another
 * process) sharing it runs (spin.h). Measured on 2 shared cores, 256 KiB
 * allreduce over 2 local ranks: ~10 us with the spin, ~25-60 us without; a
 * spin without the yields doubled the time when the machine was loaded. */
#define DPM_GROUP_SPIN_NS 200000

/* Waits until *w >= want (a counter that only grows): spinning first (with
 * q->spin, up to DPM_GROUP_SPIN_NS), then asleep on cv. 1 once there; 0
 * when `until` (NULL: no deadline) passed or, with stop_on_broken, the
 * group broke. */
int dpm_group_await(dpm_group_queue *q, const atomic_ulong *w, unsigned long want,
                    const struct timespec *until, int stop_on_broken);
/* After storing a counter that threads may await: wakes those asleep. */
void dpm_group_wake(dpm_group_queue *q);

/* One call per rank at a time (comm.h): DPM_OK once rank is marked inside;
 * DPM_INVALID, with the message in msg (DPM_GROUP_MSG bytes), when it
 * already is. dpm_group_exit marks it out. */
dpm_status dpm_group_enter(dpm_group_queue *q, int rank, const char *op, char *msg);
void dpm_group_exit(dpm_group_queue *q, int rank);

/* Rank `rank` arrives at its next job (*job) with call. Waits until
 * `until` for the slot; the rank that completes the count judges the calls
 * and sets *last: it must publish the job (after filling the backend's
 * per-job fields). DPM_OK; or, the slot not freed in time or the group
 * broken, nothing recorded and DPM_TIMEOUT (the group now broken, naming
 * the ranks that had not left job *job - slots) or DPM_STATE, with the
 * message in msg (DPM_GROUP_ERR bytes); op names the call in it. */
dpm_status dpm_group_arrive(dpm_group_queue *q, int rank, const dpm_group_call *call,
                            const char *op, const struct timespec *until,
                            unsigned long *job, int *last, char *msg);
/* Under mu: publishes job k (ready), unless the group is broken; returns
 * whether it did. dpm_group_publish takes mu itself. */
int dpm_group_publish_locked(dpm_group_queue *q, unsigned long k);
int dpm_group_publish(dpm_group_queue *q, unsigned long k);
/* Waits until `until` for job k's publication: DPM_OK (its verdict in the
 * slot). Else the rank gives up: DPM_TIMEOUT when this job's timeout broke
 * the group (now, naming the ranks that did not arrive, or earlier by a
 * peer of the same job: the fault's message), DPM_STATE quoting the fault
 * when something else broke it; message in msg (DPM_GROUP_ERR bytes). */
dpm_status dpm_group_ready(dpm_group_queue *q, unsigned long k,
                           const struct timespec *until, const char *op, char *msg);
/* Rank leaves job k, done with it; the last to leave frees the slot. */
void dpm_group_leave(dpm_group_queue *q, unsigned long k, int rank);

/* Breaks the group with msg (the first failure wins) and wakes every
 * sleeper; dpm_group_break takes mu, _locked is under it. */
void dpm_group_break_locked(dpm_group_queue *q, dpm_status code, const char *msg);
void dpm_group_break(dpm_group_queue *q, dpm_status code, const char *msg);
/* DPM_STATE, with a later call's message into msg (DPM_GROUP_ERR bytes):
 * "OP: communicator broken by an earlier CAUSE (MSG)". Takes mu. */
dpm_status dpm_group_state(dpm_group_queue *q, const char *op, char *msg);
/* dpm_group_failure of q's fault, under mu (dpm_comm_failure). */
dpm_status dpm_group_queue_failure(dpm_group_queue *q, dpm_err *err);

#endif
