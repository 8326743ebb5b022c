/* dpmd's scheduler: which model trains on which devices, and whose memory
 * is admitted. One per daemon; every model joins it with its devices (its
 * device group) and its schedule.
 *
 * Time. Models whose devices overlap take turns: one turn is one chunk of
 * steps (server/models/lifecycle.c), and no two models that share a device
 * run a turn at once. Among the models that want to run (they are
 * training):
 *   - a model waits while one of higher priority on a device it uses wants
 *     to run (it is preempted: "preempted by NAME"); a higher one that
 *     starts to want interrupts a lower one's turn after the step in flight
 *     (its interrupt callback);
 *   - among equal priorities, the one with the least virtual time runs
 *     next, virtual time being the seconds its turns took divided by its
 *     weight: shares of time in proportion to weight, whatever one step
 *     costs. A model that starts to want joins at the least virtual time of
 *     the equals that want its devices, or when none does, at the most any
 *     equal on them has: an idle spell earns it no credit.
 * A shard of a fleet job is a gang (dpmd_sched_gang_run): it takes no
 * turns, and yields, with its whole job, to a higher priority.
 * A waiting model wakes for its turn, or when kicked (a job was posted for
 * it), or, with policy spill, when it is preempted while resident: the
 * model then checkpoints and frees its memory (lifecycle.c) and waits on.
 *
 * Memory. A model is admitted before it allocates anything, with its bytes
 * as the trainer counts them (dpm_trainer_memory): the total against
 * max_total_bytes and its own max_memory, its device bytes (tensors and
 * scratch over its replicas) against device_memory_bytes on each of its
 * devices. One that can never fit is refused; one that does not fit now is
 * queued (or refused, naming the bytes, when the caller says so). The
 * queue is ordered by priority, then by when the model joined; its head is
 * admitted as soon as it fits, and nobody behind it before (no
 * overtaking), and the model is woken (its wake callback) to build.
 * Leaving, or releasing its memory (a spill, a failed build), frees a
 * model's bytes.
 *
 * Threads: every function from any thread, under the scheduler's mutex.
 * The callbacks (interrupt, wake) run under that mutex: they may take the
 * model's own lock, so a model never calls the scheduler while holding it.
 * acquire blocks its caller (the model's thread) and is the only call that
 * does. Errors: dpmd_sched_new can fail (DPM_NOMEM); admit answers
 * DPM_DENIED with a message naming the bytes. */
#ifndef DPMD_SCHED_H
#define DPMD_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "dpm/status.h"

typedef struct dpmd_sched dpmd_sched;
typedef struct dpmd_sched_entry dpmd_sched_entry;

/* What a model asks of the scheduler; the defaults are all zero but weight
 * (1). */
typedef struct dpmd_schedule {
  int priority;        /* higher first */
  double weight;       /* > 0: share of time among equal priorities */
  int spill;           /* preempted: 1 checkpoint and free the memory; 0 keep */
  uint64_t max_memory; /* refuse a model counted above this; 0: no bound */
} dpmd_schedule;

#define DPMD_PRIORITY_MAX 1000 /* priorities are -1000..1000 */
#define DPMD_WEIGHT_MAX 1000.0 /* weights are (0, 1000] */

/* device_bytes: each device's memory for models (0: unbounded);
 * total_bytes: every model's bytes together (0: unbounded). */
dpm_status dpmd_sched_new(uint64_t device_bytes, uint64_t total_bytes, dpmd_sched **out,
                          dpm_err *err);
/* After every entry has left. NULL is ignored. */
void dpmd_sched_free(dpmd_sched *s);

/* The callbacks of an entry, with their argument (the model). */
typedef struct dpmd_sched_hooks {
  void (*interrupt)(void *arg); /* end the running turn after the step in flight */
  void (*wake)(void *arg);      /* admitted from the queue: build now */
  void *arg;
} dpmd_sched_hooks;

/* A model joins with its name and devices (copied) and schedule: not
 * wanting to run, not admitted. NULL when out of memory. */
dpmd_sched_entry *dpmd_sched_join(dpmd_sched *s, const char *name,
                                  const char *const *devices, size_t n_devices,
                                  const dpmd_schedule *sc, const dpmd_sched_hooks *hooks);
/* Leaves (its memory freed, waiters woken). NULL is ignored. */
void dpmd_sched_leave(dpmd_sched_entry *e);

/* The schedule now, and a new one (takes effect at the next turn; a raised
 * priority may interrupt the running turn of a lower one). */
dpmd_schedule dpmd_sched_schedule(dpmd_sched_entry *e);
void dpmd_sched_set(dpmd_sched_entry *e, const dpmd_schedule *sc);

/* ---- memory ---------------------------------------------------------------- */

typedef enum {
  DPMD_ADMIT_OK,      /* admitted: its bytes are counted; build */
  DPMD_ADMIT_QUEUED,  /* queued: wait for the wake callback, then ask again */
  DPMD_ADMIT_REFUSED, /* never fits, or not now and queue was 0: *err says why */
} dpmd_admit;

/* Asks to hold total bytes, device_bytes of them on each of its devices.
 * queue 0: refuse rather than queue. An entry admitted from the queue (its
 * wake came) is admitted here if its bytes are no more than when it
 * queued. */
dpmd_admit dpmd_sched_admit(dpmd_sched_entry *e, uint64_t total, uint64_t device_bytes,
                            int queue, dpm_err *err);
/* Frees the entry's bytes (a spill, a failed build) and leaves the queue. */
void dpmd_sched_release_memory(dpmd_sched_entry *e);

/* ---- time ------------------------------------------------------------------ */

/* Whether the model wants to run (it is training). */
void dpmd_sched_want(dpmd_sched_entry *e, int want);

typedef enum {
  DPMD_TURN_GRANTED,   /* run a chunk, then dpmd_sched_done */
  DPMD_TURN_KICKED,    /* a job waits: run it, then ask again */
  DPMD_TURN_SPILL,     /* preempted with policy spill while resident: spill, ask again */
  DPMD_TURN_PREEMPTED, /* preempted (once per spell, after any spill): tell, ask again */
} dpmd_turn;

/* Waits for the model's turn. resident: it holds its memory (a spilled
 * model asks with 0, and is never told to spill). */
dpmd_turn dpmd_sched_acquire(dpmd_sched_entry *e, int resident);
/* The turn granted by acquire took `seconds`. */
void dpmd_sched_done(dpmd_sched_entry *e, double seconds);
/* Makes a waiting acquire (or nap) return DPMD_TURN_KICKED (once). */
void dpmd_sched_kick(dpmd_sched_entry *e);

/* A shard of a job over several daemons (a gang: its shards step
 * together, and one held back would stall the others' collectives) takes
 * no turns. Before each chunk of steps it asks here, never waiting:
 * 1, running (until dpmd_sched_done), unless a model of higher priority
 * wants one of its devices: 0, and the job must yield (lifecycle.c). A
 * running gang holds back the models below it on its devices, as a turn
 * does, but not its equals: they run beside it. A gang's policy is keep. */
int dpmd_sched_gang_run(dpmd_sched_entry *e);
/* Waits up to `seconds`, or until kicked (a job was posted). */
void dpmd_sched_nap(dpmd_sched_entry *e, double seconds);

/* ---- views ----------------------------------------------------------------- */

typedef enum {
  DPMD_SCHED_IDLE,      /* not training */
  DPMD_SCHED_RUNNING,   /* in its turn */
  DPMD_SCHED_WAITING,   /* training, waiting for its turn */
  DPMD_SCHED_PREEMPTED, /* training, held back by a higher priority */
  DPMD_SCHED_QUEUED,    /* waiting for memory */
} dpmd_sched_state;

typedef struct dpmd_sched_view {
  dpmd_sched_state state;
  char by[128];    /* PREEMPTED: the model it waits for */
  int position;    /* QUEUED: 1 first in the queue */
  double share;    /* of its devices' time over the last minute, 0..1 */
  uint64_t bytes;  /* admitted or asked for */
  char group[256]; /* its devices, ","-joined (truncated past 255 bytes) */
} dpmd_sched_view;

void dpmd_sched_view_of(dpmd_sched_entry *e, dpmd_sched_view *v);

#endif
