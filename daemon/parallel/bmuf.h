/* Block-wise model update filtering (parallel.mode: bmuf; Caffe2's
 * data_parallel_model.Parallelize_BMUF, after Chen & Huo 2016).
 *
 * Each replica runs its own one-device step plan (no gradient collectives,
 * its own optimizer state) for local_steps steps; then the block update
 * runs on every replica of the job together (dpm_bmuf_block):
 *
 *   avg = (sum over every rank of its params) * (1 / ranks)   one all-reduce
 *   v   = block_momentum * v + block_learning_rate * (avg - g)
 *   g   = g + v
 *   nesterov: prev = block_momentum * (v - prev); g = g - prev; prev = v
 *   every replica's params = g
 *
 * in Caffe2's order of float operations (its _global_model_param_updates_net:
 * Scale, Sub, Scale, Scale, Add, Add, then Sub, Scale, Sub, Copy). g is the
 * parameters at the block's start. Every replica computes the same update
 * from the same all-reduced sum, so all end bitwise equal with no
 * broadcast; computed parameters (BN running statistics) are broadcast
 * from the master when parallel.broadcast_computed_params says so (Caffe2
 * leaves them per device). Optimizer state stays each replica's own.
 *
 * The block state of param P is optimizer-state blobs in every replica's
 * workspace: P_bmuf_g, P_bmuf_v and, with nesterov, P_bmuf_prev; their
 * names are appended to the plan's synced blobs, so init, sync and
 * checkpoints carry them. The sum is taken in the gradient arena (the
 * trainer's, laid out in plan order): the gradients are dead between
 * steps, and the params are copied there on the device.
 *
 * Device memory is touched only through the backend: device-to-device
 * copies, the communicator (between dpm_dev_enter/leave, as the collective
 * ops do: engine/collective.h) and dpm_tensor_read/write of host copies for the
 * arithmetic (4 floats per parameter element per block), so the same code serves every
 * backend.
 *
 * Ownership: a dpm_bmuf owns its name arrays and the state names; the
 * other names are borrowed from the model and the plan, which must outlive
 * it. Threads: dpm_bmuf_block runs on each replica's own thread, every
 * rank of the job together; the rest on the trainer's thread. */
#ifndef DPM_PARALLEL_BMUF_H
#define DPM_PARALLEL_BMUF_H

#include <stdint.h>

#include "comm/comm.h"
#include "engine/model.h"
#include "engine/workspace.h"
#include "parallel/plan.h"
#include "proto/dpm.pb-c.h"

struct dpm_dev;

enum { DPM_BMUF_G, DPM_BMUF_V, DPM_BMUF_PREV, DPM_BMUF_STATE };

typedef struct dpm_bmuf {
  int on;          /* parallel.mode is bmuf */
  int local_steps; /* steps per block: the block update follows step iter when
                      iter % local_steps == 0 */
  float momentum;  /* block_momentum (absent from the spec: 1 - 1/ranks) */
  float lr;        /* block_learning_rate */
  int nesterov;
  int n_state;        /* block state blobs per param: 2, 3 with nesterov */
  int ranks;          /* the job's replicas, every shard's */
  int n;              /* params the optimizer updates (model order) */
  const char **param; /* [n] their names */
  const char **grad;  /* [n] their gradients, where the sum is taken */
  char **state;       /* [n * DPM_BMUF_STATE] block state names (owned; unused NULL) */
  int64_t max_numel;  /* the largest param's elements (host copies' size) */
  const char *arena_first; /* the plan's first gradient: the arena's start */
  size_t arena_span;       /* bytes from it to the end of its last gradient */
  const char **computed;   /* computed params broadcast from the master per block */
  int n_computed;
  const char **local; /* [n_local] what differs between replicas inside a block:
                         params, computed params, optimizer state (not the block's) */
  int n_local;
  uint64_t state_bytes; /* the block state's bytes per replica (aligned) */
} dpm_bmuf;

/* From the spec's parallel section (NULL: off) and the built model and
 * plan (the one-device plan), for a job of `ranks` replicas. When on,
 * appends the block state names to p->synced. DPM_NOMEM. */
dpm_status dpm_bmuf_init(dpm_bmuf *b, const Dpm__ParallelSpec *par, const dpm_model *m,
                         int ranks, int broadcast_computed, dpm_plan *p, dpm_err *err);
/* Creates the block state blobs in a replica's workspace (on its device)
 * and its host copies (*host, 4 * max_numel floats; free with dpm_free);
 * the master's (master 1) start the block: g = params, v = prev = 0. */
dpm_status dpm_bmuf_replica(const dpm_bmuf *b, dpm_workspace *ws, int master,
                            float **host, dpm_err *err);
/* The block update on replica `rank` of the job (every rank together; comm
 * NULL for one replica alone). A failed collective's error (DPM_TIMEOUT). */
dpm_status dpm_bmuf_block(const dpm_bmuf *b, dpm_workspace *ws, struct dpm_dev *dev,
                          dpm_comm *comm, int rank, float *host, dpm_err *err);
/* Whether a blob name is block state (a checkpoint of a bmuf model holds some). */
int dpm_bmuf_is_state(const char *name);
void dpm_bmuf_fini(dpm_bmuf *b);

#endif
