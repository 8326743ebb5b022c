/* Bare Gloo (bench/gloo_bare.cc), for bench/gloo.c to measure dpm's gloo
 * communicator against: Gloo's own rendezvous and ring allreduce, nothing
 * of dpm's. Each function returns 0, or -1 with a message in msg (cap
 * bytes). A context is used by one thread at a time. */
#ifndef DPM_BENCH_GLOO_BARE_H
#define DPM_BENCH_GLOO_BARE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bare_gloo bare_gloo;

/* Process `rank` of `size` meets the others under `prefix` in the file
 * store directory `dir` (which must exist), over interface `iface`. */
int bare_gloo_create(int rank, int size, const char *dir, const char *prefix,
                     const char *iface, int timeout_ms, bare_gloo **out, char *msg,
                     size_t cap);
/* gloo::allreduce, ring, gloo::sum<float>, in place. */
int bare_gloo_allreduce(bare_gloo *g, float *buf, size_t count, char *msg, size_t cap);
int bare_gloo_barrier(bare_gloo *g, char *msg, size_t cap);
void bare_gloo_destroy(bare_gloo *g);

#ifdef __cplusplus
}
#endif

#endif
