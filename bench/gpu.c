/* GPU benchmark (tests/gpu/run.sh runs it): figures, not assertions.
 *   - submit to first step, cold (the first model on cuda:0 in this
 *     process: streams, handles, pools and algorithm choices made) and
 *     warm (a second model on the same GPU): trainer create + one step;
 *   - MLP and CNN (the examples' layers, synthetic data) images/s at 64
 *     and 256 images per GPU, on 1 GPU and on all of them;
 *   - the MLP step's achieved FLOP/s (3 x the forward's 2*b*sum(in*out):
 *     forward, data and weight gradients) against an FC of 4096x4096x4096
 *     on the same GPU in the same run (cuBLASLt's sgemm with bias, TF32
 *     off);
 *   - the MLP step at 64 with and without the step captured as a CUDA
 *     graph (parallel.cuda_graphs);
 *   - with 2+ GPUs, the NCCL allreduce bus bandwidth (2(n-1)/n x bytes /
 *     time) of the nccl communicator (comm/comm.h) at 4, 64 and 256 MiB.
 * Step figures are medians over rounds of the mean step time.
 *
 *   build/bench/gpu [--rounds N]
 *
 * Without a GPU (or without the plugin) it prints "no GPU: <the loader's
 * line>" and exits 0. Exits 1 when a measurement fails to run. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda_load.h"
#include "backend/device.h"
#include "bench.h"
#include "comm/comm.h"
#include "common/spec.h"
#include "engine/exec.h"
#include "engine/workspace.h"
#include "train/trainer.h"

#define MLP_FORWARD                                                                      \
  "  - {op: FC, in: [data], out: fc1, dim_out: 256}\n"                                   \
  "  - {op: Relu, in: [fc1], out: fc1}\n"                                                \
  "  - {op: FC, in: [fc1], out: fc2, dim_out: 128}\n"                                    \
  "  - {op: Relu, in: [fc2], out: fc2}\n"                                                \
  "  - {op: FC, in: [fc2], out: pred, dim_out: 10}\n"

#define CNN_FORWARD                                                                      \
  "  - {op: Conv, in: [data], out: conv1, dim_out: 32, kernel: 5, pad: 2}\n"             \
  "  - {op: Relu, in: [conv1], out: conv1}\n"                                            \
  "  - {op: MaxPool, in: [conv1], out: pool1, kernel: 2, stride: 2}\n"                   \
  "  - {op: Conv, in: [pool1], out: conv2, dim_out: 64, kernel: 5, pad: 2}\n"            \
  "  - {op: Relu, in: [conv2], out: conv2}\n"                                            \
  "  - {op: MaxPool, in: [conv2], out: pool2, kernel: 2, stride: 2}\n"                   \
  "  - {op: FC, in: [pool2], out: fc3, dim_out: 1024}\n"                                 \
  "  - {op: Relu, in: [fc3], out: fc3}\n"                                                \
  "  - {op: FC, in: [fc3], out: pred, dim_out: 10}\n"

/* The MLP's multiply-adds per image: 784*256 + 256*128 + 128*10. */
#define MLP_MACS (784.0 * 256 + 256.0 * 128 + 128.0 * 10)

static int rounds = 5;

static Dpm__ModelSpec *spec_of(const char *forward, int per_device, int graphs) {
  char yaml[4096];
  snprintf(yaml, sizeof yaml,
           "name: bench\n"
           "input: {reader: synthetic, batch_size: %d, num_examples: 16384,"
           " shape: [1, 28, 28], num_classes: 10, scale: 0.0039, seed: 1}\n"
           "forward:\n%s"
           "  - {op: SoftmaxWithLoss, in: [pred, label], out: [softmax, loss]}\n"
           "  - {op: Accuracy, in: [softmax, label], out: accuracy}\n"
           "losses: [loss]\n"
           "update: {optimizer: momentum_sgd, momentum: 0.9, lr: {base: 0.01}}\n"
           "parallel: {net_type: dag, cuda_graphs: %s}\n",
           per_device, forward, graphs ? "true" : "false");
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  if (dpm_spec_parse(yaml, strlen(yaml), "bench.yaml", &spec, &err))
    fprintf(stderr, "bench: spec: %s\n", err.msg);
  return spec;
}

static dpm_trainer *trainer_of(const Dpm__ModelSpec *spec, int devices) {
  dpm_trainer_options opt = {.devices = devices, .kind = DPM_DEVICE_CUDA, .net_type = -1};
  dpm_trainer *t = NULL;
  dpm_err err = {0};
  if (!spec || dpm_trainer_create(spec, &opt, &t, &err)) {
    fprintf(stderr, "bench: create on %d GPU(s): %s\n", devices, err.msg);
    return NULL;
  }
  return t;
}

static int run_steps(dpm_trainer *t, int n) {
  dpm_err err = {0};
  dpm_step_stats st;
  if (dpm_trainer_step(t, n, &st, &err) || st.steps_done != n) {
    fprintf(stderr, "bench: step: %s\n", err.msg);
    return 0;
  }
  return 1;
}

/* Median over rounds of the mean step time in ms (a warm-up first), or
 * a negative value on failure. */
static double step_ms(const char *forward, int per_device, int devices, int graphs,
                      int steps) {
  Dpm__ModelSpec *spec = spec_of(forward, per_device, graphs);
  dpm_trainer *t = trainer_of(spec, devices);
  double ms[64], med = -1;
  int n = rounds < 64 ? rounds : 64;
  if (t && run_steps(t, 20)) {
    int ok = 1;
    for (int r = 0; r < n && ok; r++) {
      double t0 = bench_now_ms();
      ok = run_steps(t, steps);
      ms[r] = (bench_now_ms() - t0) / steps;
    }
    if (ok) med = bench_median(ms, n);
  }
  dpm_trainer_destroy(t);
  dpm_spec_free(spec);
  return med;
}

/* Trainer create + its first step, in ms. */
static double first_step_ms(void) {
  Dpm__ModelSpec *spec = spec_of(CNN_FORWARD, 64, 1);
  double t0 = bench_now_ms(), ms = -1;
  dpm_trainer *t = trainer_of(spec, 1);
  if (t && run_steps(t, 1)) ms = bench_now_ms() - t0;
  dpm_trainer_destroy(t);
  dpm_spec_free(spec);
  return ms;
}

/* TFLOP/s of an FC of n x n x n on cuda:0 (cuBLASLt's sgemm + bias). */
static double sgemm_tflops(int n) {
  dpm_dev *dev;
  dpm_err err = {0};
  if (dpm_dev_get((dpm_device){DPM_DEVICE_CUDA, 0}, &dev, &err)) return -1;
  dpm_net net = {0};
  dpm_shapes shapes = {0};
  dpm_workspace ws = {.dev = dev};
  dpm_ctx ctx = {.dev = dev};
  dpm_exec x = {0};
  double tflops = -1;
  const char *in[3] = {"x", "w", "b"}, *out[1] = {"y"};
  int64_t d2[2] = {n, n}, d1[1] = {n};
  dpm_shape sx = dpm_shape_make(DPM_F32, 2, d2), sb = dpm_shape_make(DPM_F32, 1, d1);
  char args[32];
  snprintf(args, sizeof args, "dim_out=%d", n);
  dpm_node *node = dpm_net_add(&net, dpm_op_find("FC"), 3, in, 1, out, &err);
  if (node && !dpm_node_set_args(node, args, &err) &&
      !dpm_shapes_set(&shapes, "x", &sx, DPM_BLOB_DATA) &&
      !dpm_shapes_set(&shapes, "w", &sx, DPM_BLOB_DATA) &&
      !dpm_shapes_set(&shapes, "b", &sb, DPM_BLOB_DATA) &&
      !dpm_net_infer(&net, &shapes, -1, "bench", &err) &&
      !dpm_exec_bind(&x, &net, &shapes, &ws, &ctx, &err)) {
    dpm_exec_run(&x); /* warm-up: the algorithm chosen, the workspace touched */
    dpm_dev_synchronize(dev);
    double ms[16];
    int n_rounds = rounds < 16 ? rounds : 16, reps = 20;
    for (int r = 0; r < n_rounds; r++) {
      double t0 = bench_now_ms();
      for (int k = 0; k < reps; k++) dpm_exec_run(&x);
      dpm_dev_synchronize(dev);
      ms[r] = (bench_now_ms() - t0) / reps;
    }
    if (!dpm_dev_failure(dev, &err))
      tflops = 2.0 * n * (double)n * n / (bench_median(ms, n_rounds) * 1e-3) / 1e12;
  }
  if (tflops < 0) fprintf(stderr, "bench: FC %d: %s\n", n, err.msg);
  dpm_exec_fini(&x);
  dpm_ws_fini(&ws);
  dpm_ctx_fini(&ctx);
  dpm_shapes_fini(&shapes);
  dpm_net_fini(&net);
  return tflops;
}

/* ---- NCCL allreduce ------------------------------------------------------------ */

typedef struct {
  dpm_comm *comm;
  int rank, reps;
  float *buf;
  size_t count;
  dpm_status status;
  dpm_err err;
} ar_rank;

static void *ar_run(void *arg) {
  ar_rank *r = arg;
  for (int k = 0; k < r->reps && !r->status; k++)
    r->status = dpm_comm_allreduce(r->comm, r->rank, r->buf, r->count, &r->err);
  return NULL;
}

/* Bus bandwidth in GB/s of `mib` MiB allreduces over n GPUs, or -1. */
static double allreduce_busbw(int n, size_t mib) {
  dpm_dev *dev[DPM_COMM_MAX_RANKS];
  void *streams[DPM_COMM_MAX_RANKS];
  ar_rank r[DPM_COMM_MAX_RANKS];
  pthread_t th[DPM_COMM_MAX_RANKS];
  size_t count = mib << 18, got[DPM_COMM_MAX_RANKS];
  dpm_err err = {0};
  double bw = -1;
  memset(r, 0, sizeof r[0] * (size_t)n);
  for (int d = 0; d < n; d++) {
    if (dpm_dev_get((dpm_device){DPM_DEVICE_CUDA, d}, &dev[d], &err)) goto fail;
    streams[d] = dpm_dev_stream(dev[d]);
    r[d].buf = dpm_dptr_raw(dpm_dev_alloc(dev[d], count * sizeof(float), &got[d]));
    if (!r[d].buf) {
      snprintf(err.msg, sizeof err.msg, "cuda:%d: out of memory", d);
      goto fail;
    }
  }
  dpm_comm_config cfg = {
      .kind = DPM_COMM_NCCL, .size = n, .timeout_ms = 60000, .streams = streams};
  dpm_comm *comm = NULL;
  if (dpm_comm_create(&cfg, &comm, &err)) goto fail;
  double best = 1e300;
  for (int round = 0; round < 1 + rounds; round++) { /* round 0 warms up */
    double t0 = bench_now_ms();
    for (int d = 0; d < n; d++) {
      r[d] =
          (ar_rank){.comm = comm, .rank = d, .reps = 10, .buf = r[d].buf, .count = count};
      pthread_create(&th[d], NULL, ar_run, &r[d]);
    }
    for (int d = 0; d < n; d++) pthread_join(th[d], NULL);
    for (int d = 0; d < n; d++) dpm_dev_synchronize(dev[d]);
    double ms = (bench_now_ms() - t0) / 10;
    for (int d = 0; d < n; d++)
      if (r[d].status) {
        err = r[d].err;
        dpm_comm_destroy(comm);
        goto fail;
      }
    if (round > 0 && ms < best) best = ms;
  }
  dpm_comm_destroy(comm);
  bw = 2.0 * (n - 1) / n * (double)(count * sizeof(float)) / (best * 1e-3) / 1e9;
  for (int d = 0; d < n; d++) dpm_dev_free(dev[d], dpm_dptr_wrap(r[d].buf), got[d]);
  return bw;
fail:
  fprintf(stderr, "bench: allreduce on %d GPUs: %s\n", n, err.msg);
  for (int d = 0; d < n; d++)
    if (r[d].buf) dpm_dev_free(dev[d], dpm_dptr_wrap(r[d].buf), got[d]);
  return -1;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: bench/gpu [--rounds N]\n");
      return 2;
    }
  }
  if (rounds < 1) rounds = 1;
  char line[512] = "";
  int gpus = dpm_cuda_load(line, sizeof line);
  if (gpus <= 0) {
    printf("no GPU: %s\n", line);
    return 0;
  }
  printf("%s\n", line);
  int bad = 0;
#define FIG(cond, ...)                                                                   \
  do {                                                                                   \
    if (cond)                                                                            \
      printf(__VA_ARGS__);                                                               \
    else                                                                                 \
      bad = 1, printf("%-52s | failed\n", what);                                         \
  } while (0)
  char what[96];

  double cold = first_step_ms(), warm = first_step_ms();
  snprintf(what, sizeof what, "submit to first step (CNN, cuda:0)");
  FIG(cold >= 0 && warm >= 0, "%-52s | cold %.1f ms, warm %.1f ms\n", what, cold, warm);

  double mlp64 = -1;
  for (int devices = 1; devices <= gpus;
       devices = devices == 1 && gpus > 1 ? gpus : gpus + 1)
    for (int model = 0; model < 2; model++)
      for (int b = 64; b <= 256; b *= 4) {
        double ms =
            step_ms(model ? CNN_FORWARD : MLP_FORWARD, b, devices, 1, model ? 50 : 200);
        if (!model && b == 64 && devices == 1) mlp64 = ms;
        snprintf(what, sizeof what, "%s images/s, %d per GPU, %d GPU(s)",
                 model ? "CNN" : "MLP", b, devices);
        FIG(ms > 0, "%-52s | %.0f (step %.3f ms)\n", what, b * devices / (ms * 1e-3), ms);
      }

  double tf = sgemm_tflops(4096);
  snprintf(what, sizeof what, "MLP step FLOP/s, 64 per GPU, vs sgemm 4096^3");
  FIG(tf > 0 && mlp64 > 0, "%-52s | %.3f TFLOP/s vs %.2f TFLOP/s (%.1f%%)\n", what,
      3 * 2 * 64 * MLP_MACS / (mlp64 * 1e-3) / 1e12, tf,
      100 * (3 * 2 * 64 * MLP_MACS / (mlp64 * 1e-3) / 1e12) / tf);

  double with = step_ms(MLP_FORWARD, 64, 1, 1, 200),
         without = step_ms(MLP_FORWARD, 64, 1, 0, 200);
  snprintf(what, sizeof what, "MLP step, 64, CUDA graph on / off");
  FIG(with > 0 && without > 0, "%-52s | %.3f ms / %.3f ms (%.2fx)\n", what, with, without,
      without / with);

  for (int n = 2; n <= gpus; n = n * 2 <= gpus || n == gpus ? n * 2 : gpus)
    for (size_t mib = 4; mib <= 256; mib *= 4) {
      double bw = allreduce_busbw(n, mib);
      snprintf(what, sizeof what, "NCCL allreduce bus bandwidth, %d GPUs, %zu MiB", n,
               mib);
      FIG(bw > 0, "%-52s | %.1f GB/s\n", what, bw);
    }
#undef FIG
  dpm_dev_shutdown();
  return bad;
}
