/* The progress bar's ETA (dpmctl.h, ctl_rate): the rate is the iterations
 * the client saw pass per second of wall clock, not the daemon's step time
 * or one chunk's images/s. A step's own time leaves out everything between
 * steps (other models on the same devices, the machine's load), which made
 * the ETA 5x too short under load. Samples are kept at most one a second,
 * so the window is the whole wait for the first CTL_RATE_SAMPLES seconds,
 * then the last CTL_RATE_SAMPLES seconds (a rate that changes shows within
 * that). No I/O, no clock: the unit tests drive it with made-up times. */
#include "dpmctl/dpmctl.h"

#define MIN_SPACING_S 1.0 /* between kept samples */

double ctl_rate_eta(ctl_rate *r, double now_s, uint64_t iter, uint64_t target) {
  if (r->n > 0) {
    int last = (r->head + r->n - 1) % CTL_RATE_SAMPLES;
    if (iter < r->iter[last]) r->n = 0; /* moved back: a load; start over */
  }
  if (r->n == 0) {
    r->head = 0;
    r->n = 1;
    r->t[0] = now_s;
    r->iter[0] = iter;
    return -1;
  }
  int last = (r->head + r->n - 1) % CTL_RATE_SAMPLES;
  if (now_s - r->t[last] >= MIN_SPACING_S) {
    if (r->n == CTL_RATE_SAMPLES) { /* drop the oldest */
      r->head = (r->head + 1) % CTL_RATE_SAMPLES;
      r->n--;
    }
    int k = (r->head + r->n) % CTL_RATE_SAMPLES;
    r->t[k] = now_s;
    r->iter[k] = iter;
    r->n++;
  }
  double dt = now_s - r->t[r->head];
  uint64_t done = iter - r->iter[r->head];
  if (dt <= 0 || done == 0) return -1;
  uint64_t left = target > iter ? target - iter : 0;
  return (double)left * dt / (double)done;
}
