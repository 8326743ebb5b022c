/* The communication thread of one device. */
#include "parallel/queue.h"

#include <pthread.h>
#include <stdlib.h>

#include "comm/comm.h"

#define QUEUE_CAP 64 /* jobs in flight; a plan has at most this many buckets */

typedef struct {
  float *buf;
  size_t count;
  dpm_status status;
  dpm_err err;
} job;

struct dpm_comm_queue {
  dpm_comm *comm;
  int rank;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  job jobs[QUEUE_CAP];
  unsigned long submitted, done, waited; /* job k lives at jobs[k % QUEUE_CAP] */
  int stop;
};

static void *run(void *arg) {
  dpm_comm_queue *q = arg;
  pthread_mutex_lock(&q->mu);
  for (;;) {
    while (q->done == q->submitted && !q->stop) pthread_cond_wait(&q->cv, &q->mu);
    if (q->done == q->submitted) break;
    job *j = &q->jobs[q->done % QUEUE_CAP];
    pthread_mutex_unlock(&q->mu);
    j->status = dpm_comm_allreduce(q->comm, q->rank, j->buf, j->count, &j->err);
    pthread_mutex_lock(&q->mu);
    q->done++;
    pthread_cond_broadcast(&q->cv);
  }
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

dpm_status dpm_queue_create(dpm_comm *comm, int rank, dpm_comm_queue **out,
                            dpm_err *err) {
  dpm_comm_queue *q = calloc(1, sizeof *q);
  if (!q) return dpm_errf(err, DPM_NOMEM, "out of memory");
  q->comm = comm;
  q->rank = rank;
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cv, NULL);
  if (pthread_create(&q->thread, NULL, run, q)) {
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
    return dpm_errf(err, DPM_NOMEM, "cannot start a communication thread");
  }
  *out = q;
  return DPM_OK;
}

dpm_status dpm_queue_allreduce(dpm_comm_queue *q, float *buf, size_t count,
                               dpm_err *err) {
  pthread_mutex_lock(&q->mu);
  if (q->submitted - q->waited == QUEUE_CAP) {
    pthread_mutex_unlock(&q->mu);
    return dpm_errf(err, DPM_INTERNAL, "more than %d collectives in flight", QUEUE_CAP);
  }
  q->jobs[q->submitted % QUEUE_CAP] = (job){.buf = buf, .count = count};
  q->submitted++;
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
  return DPM_OK;
}

dpm_status dpm_queue_wait(dpm_comm_queue *q, dpm_err *err) {
  pthread_mutex_lock(&q->mu);
  if (q->waited == q->submitted) {
    pthread_mutex_unlock(&q->mu);
    return dpm_errf(err, DPM_INTERNAL, "no collective to wait for");
  }
  while (q->done <= q->waited) pthread_cond_wait(&q->cv, &q->mu);
  job *j = &q->jobs[q->waited++ % QUEUE_CAP];
  pthread_mutex_unlock(&q->mu);
  if (j->status && err) *err = j->err;
  return j->status;
}

void dpm_queue_destroy(dpm_comm_queue *q) {
  if (!q) return;
  pthread_mutex_lock(&q->mu);
  q->stop = 1;
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
  pthread_join(q->thread, NULL);
  pthread_mutex_destroy(&q->mu);
  pthread_cond_destroy(&q->cv);
  free(q);
}
