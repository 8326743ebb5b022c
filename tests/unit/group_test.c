/* The group core's job queue (comm/group.h), driven by one thread playing
 * every rank, so each case is deterministic: the last arriver's verdict
 * with job-wide rank numbers, slots freed by the last to leave, a slot
 * that is not freed in time, a rank that gives up (the job is never
 * published after it), the sticky fault, and one call per rank. */
#include <stdlib.h>

#include "comm/group.h"
#include "common/clock.h"
#include "test.h"

/* Two local ranks, job ranks 4 and 5 of 8, two slots, 30 ms. */
static int queue(dpm_group_queue *q) {
  return dpm_group_queue_init(q, 2, 2, 4, 8, 30, 0, "local ranks", "failure");
}

static dpm_group_call allreduce(float *buf, size_t n) {
  return (dpm_group_call){
      .op = DPM_GROUP_ALLREDUCE, .root = -1, .n = n, .buf = buf, .t = DPM_COMM_F32};
}

/* Both ranks arrive at their next job with their calls: its number; *last
 * says which rank completed it (-1: none). */
static unsigned long both_arrive(dpm_group_queue *q, dpm_group_call c0, dpm_group_call c1,
                                 int *last) {
  struct timespec until = dpm_mono_deadline(q->timeout_ms);
  char msg[DPM_GROUP_ERR];
  unsigned long k0 = 0, k1 = 1;
  int l0 = 0, l1 = 0;
  dpm_status s0 = dpm_group_arrive(q, 0, &c0, "allreduce", &until, &k0, &l0, msg);
  dpm_status s1 = dpm_group_arrive(q, 1, &c1, "allreduce", &until, &k1, &l1, msg);
  *last = s0 || s1 || k0 != k1 ? -1 : l0 ? 0 : l1 ? 1 : -1;
  return k0;
}

TEST(group_queue_judges_publishes_and_frees_its_slots) {
  dpm_group_queue q;
  CHECK(queue(&q));
  float a[4] = {0}, b[4] = {0};
  char msg[DPM_GROUP_ERR];
  int last;
  unsigned long k = both_arrive(&q, allreduce(a, 3), allreduce(b, 3), &last);
  CHECK(k == 0 && last == 1);
  CHECK_INT(dpm_group_job_of(&q, 0)->verdict, DPM_OK);
  CHECK(dpm_group_publish(&q, 0));
  struct timespec until = dpm_mono_deadline(30);
  CHECK_INT(dpm_group_ready(&q, 0, &until, "allreduce", msg), DPM_OK);
  /* job 1: the counts differ; the verdict names the job-wide ranks */
  k = both_arrive(&q, allreduce(a, 3), allreduce(b, 4), &last);
  CHECK(k == 1 && last == 1);
  CHECK_INT(dpm_group_job_of(&q, 1)->verdict, DPM_INVALID);
  CHECK_HAS(dpm_group_job_of(&q, 1)->msg, "rank 4 has 3, rank 5 has 4");
  /* job 2 reuses job 0's slot once both ranks left job 0 */
  dpm_group_leave(&q, 0, 0);
  dpm_group_leave(&q, 0, 1);
  k = both_arrive(&q, allreduce(a, 2), allreduce(b, 2), &last);
  CHECK(k == 2 && last == 1);
  CHECK(dpm_group_publish(&q, 2));
  /* job 3 needs job 1's slot, which rank 5 has not left: it times out */
  dpm_group_leave(&q, 1, 0);
  until = dpm_mono_deadline(30);
  dpm_group_call c = allreduce(a, 2);
  int l = 0;
  CHECK_INT(dpm_group_arrive(&q, 0, &c, "allreduce", &until, &k, &l, msg), DPM_TIMEOUT);
  CHECK_HAS(msg, "allreduce (the collective 2 calls earlier not yet left)");
  CHECK_HAS(msg, "missing rank(s) 5 (collective 1)");
  CHECK(dpm_group_broken(&q.fault));
  CHECK(!dpm_group_publish(&q, 3));
  dpm_group_queue_fini(&q);
}

TEST(group_queue_give_up_breaks_the_group_and_stops_publication) {
  dpm_group_queue q;
  CHECK(queue(&q));
  float a[2] = {1, 2}, b[2] = {3, 4};
  char msg[DPM_GROUP_ERR];
  struct timespec until = dpm_mono_deadline(30);
  unsigned long k0, k1;
  int l0, l1;
  dpm_group_call c0 = allreduce(a, 2), c1 = allreduce(b, 2);
  CHECK_INT(dpm_group_arrive(&q, 0, &c0, "allreduce", &until, &k0, &l0, msg), DPM_OK);
  CHECK(k0 == 0 && !l0);
  double t0 = (double)dpm_mono_ms();
  CHECK_INT(dpm_group_ready(&q, 0, &until, "allreduce", msg), DPM_TIMEOUT);
  CHECK((double)dpm_mono_ms() - t0 >= 20);
  CHECK_HAS(msg, "allreduce: timed out after 30 ms; 1 of 2 local ranks arrived; "
                 "missing rank(s) 5 (collective 0)");
  /* the late rank completes the job, but it is never published */
  until = dpm_mono_deadline(30);
  CHECK_INT(dpm_group_arrive(&q, 1, &c1, "allreduce", &until, &k1, &l1, msg), DPM_OK);
  CHECK(k1 == 0 && l1);
  CHECK(!dpm_group_publish(&q, 0));
  CHECK(atomic_load(&dpm_group_job_of(&q, 0)->ready) == 0);
  /* its own wait fails with the job's timeout; other calls quote it */
  CHECK_INT(dpm_group_ready(&q, 0, &until, "allreduce", msg), DPM_TIMEOUT);
  CHECK_HAS(msg, "missing rank(s) 5 (collective 0)");
  CHECK_INT(dpm_group_state(&q, "barrier", msg), DPM_STATE);
  CHECK_HAS(msg, "barrier: communicator broken by an earlier failure (allreduce: timed");
  dpm_err err = {0};
  CHECK_INT(dpm_group_queue_failure(&q, &err), DPM_TIMEOUT);
  CHECK_HAS(err.msg, "missing rank(s) 5");
  /* one call per rank at a time */
  CHECK_INT(dpm_group_enter(&q, 1, "barrier", msg), DPM_OK);
  CHECK_INT(dpm_group_enter(&q, 1, "barrier", msg), DPM_INVALID);
  CHECK_HAS(msg, "barrier: rank 5 is already inside a collective");
  dpm_group_exit(&q, 1);
  CHECK_INT(dpm_group_enter(&q, 1, "barrier", msg), DPM_OK);
  dpm_group_queue_fini(&q);
}
