/* Asynchronous collectives for one device: a FIFO of allreduce jobs run by
 * a communication thread, so reduction overlaps the backward pass (dag
 * mode). Jobs run in submission order; every replica submits the same
 * sequence, so the collectives match across ranks.
 *
 * Threads: submit and wait are called by the device's worker thread only;
 * the queue's own thread runs dpm_comm_allreduce. Errors of a job are
 * returned by the wait for it. */
#ifndef DPM_PARALLEL_QUEUE_H
#define DPM_PARALLEL_QUEUE_H

#include <stddef.h>

#include "dpm/status.h"

struct dpm_comm;
typedef struct dpm_comm_queue dpm_comm_queue;

dpm_status dpm_queue_create(struct dpm_comm *comm, int rank, dpm_comm_queue **out,
                            dpm_err *err);
/* Enqueue an allreduce (sum, in place) of count floats at buf. */
dpm_status dpm_queue_allreduce(dpm_comm_queue *q, float *buf, size_t count, dpm_err *err);
/* Wait for the oldest job not yet waited for; its status. */
dpm_status dpm_queue_wait(dpm_comm_queue *q, dpm_err *err);
/* Stops the thread (after running what was queued) and frees the queue. */
void dpm_queue_destroy(dpm_comm_queue *q);

#endif
