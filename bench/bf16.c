/* bf16 against fp32 on the CPU: FC's products, and whole training steps.
 *
 * Products: FC's forward (bias, Relu), dW and dX at the Fashion-MNIST
 * MLP's and CNN's shapes (examples/fmnist_*.yaml, batch 64 per replica;
 * dW written in f32, as the bf16 models' FCGradient writes it), in fp32 (dpm_gemm as fc.c calls it: the AVX-512 tiles or cblas), in
 * bf16 natively (backend/cpu/fc_bf16.h, AVX512-BF16) and in bf16 through
 * the fallback (widen the bf16 operands, the fp32 product, round the
 * output, as lowp_run.c does). One thread; the three alternate within
 * each round; median µs and the fp32 / native ratio, and per model the
 * medians summed (the forwards; all three products of every layer).
 *
 * Steps: the MLP and the CNN examples as they run (2 replicas, cpu:0 and
 * cpu:1), fp32 and with precision.compute bf16 (native kernels, then the
 * fallback, switched in the same trainer), each a trainer of its own in
 * this process; rounds alternate the three (a few steps each), median ms
 * per step and the fp32 / bf16 ratio.
 *
 *   build/bench/bf16 [--rounds N] [--steps N] [--model mlp|cnn]
 *                    [--only fp32|bf16|fallback]
 *   (OPENBLAS_NUM_THREADS=1; --model: that model's steps alone, no products;
 *   --only: that precision's steps alone, for a profiler)
 * from the repository root (the examples' data sets must exist). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/fc_bf16.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_bf16.h"
#include "bench.h"
#include "common/spec.h"
#include "engine/lowp.h"
#include "engine/tensor.h"
#include "train/trainer.h"

/* ---- products ------------------------------------------------------------ */

/* An FC product (n, m, k), or one of Conv's per image and kernel row
 * (conv != 0: the forms conv.c runs, rows x cols x inner). */
typedef struct {
  const char *name;
  dpm_fc_bf16_product p;
  int n, m, k;
  int conv;
} shape;

enum { CONV1_FWD = 1, CONV2_FWD, CONV2_DW, CONV2_DL };
/* conv2's L rows: (14 + 4) lowered rows x 14 columns */
#define CONV2_LL 252

enum { FP32, NATIVE, FALLBACK, WAYS };

/* Operands, big enough for every shape: f32 and bf16 X, W, dY, b and the
 * output, and the f32 copies the fallback widens into. */
static float *xf, *wf, *dyf, *bf, *of, *cx, *cw, *co;
static uint16_t *xh, *wh, *dyh, *bh, *oh;
static void *scratch;

/* Conv's products per image and kernel row, each precision in the form
 * conv.c runs it (rows x cols x inner as the bf16 kernels see them): conv1
 * forward (32 filters x 784 pixels over 25 + 1 rows of L), conv2 forward
 * (64 filters x 196 pixels over 160 + 1; fp32 transposed: pixels x
 * filters), conv2's dW (161 x 64 over 196 pixels; fp32 transposed too)
 * and dL (160 x 196 over 64 filters). The fallback column is left out. */
static void run_conv(const shape *s, int way) {
  const int r = s->n, c = s->m, in = s->k;
  dpm_bf16_gemm_args a = {.rows = r, .cols = c, .inner = in, .o32 = of, .ocs = 1};
  switch (s->conv) {
  case CONV1_FWD: /* Y = W L */
    if (way == FP32) dpm_gemm_outer(r, c, in, wf, in, 1, xf, c, 0, of, c);
    a.a = wh, a.ars = in, a.ass = 1, a.b = xh, a.bss = c, a.bcs = 1, a.ors = c;
    break;
  case CONV2_FWD: /* Y = W L (fp32: Y^T = L^T W^T) */
    if (way == FP32) dpm_gemm_outer(c, r, in, xf, 1, CONV2_LL, wf, r, 0, of, r);
    a.a = wh, a.ars = in, a.ass = 1, a.b = xh, a.bss = CONV2_LL, a.bcs = 1, a.ors = c;
    break;
  case CONV2_DW: /* dW^T += L dY^T */
    if (way == FP32) dpm_gemm_outer(r, c, in, xf, CONV2_LL, 1, dyf, c, 1, of, c);
    a.a = xh, a.ars = CONV2_LL, a.ass = 1, a.b = dyh, a.bss = c, a.bcs = 1, a.ors = c;
    a.acc = 1;
    break;
  default: /* dL += W^T dY (bf16: W^T's blocks in place) */
    if (way == FP32) dpm_gemm_outer(r, c, in, wf, 1, r + 1, dyf, c, 1, of, CONV2_LL);
    a.a = wh, a.ars = in, a.ass = 1, a.b = dyh, a.bss = c, a.bcs = 1;
    a.ors = CONV2_LL, a.acc = 1;
    break;
  }
  if (way == NATIVE) dpm_bf16_gemm(&a, scratch);
}

static void run_one(const shape *s, int way) {
  const int n = s->n, m = s->m, k = s->k;
  if (s->conv) {
    run_conv(s, way);
    return;
  }
  if (way == NATIVE) {
    switch (s->p) {
    case DPM_FC_BF16_FORWARD:
      dpm_fc_bf16_forward(n, m, k, xh, wh, bh, 1, oh, scratch);
      break;
    case DPM_FC_BF16_DW:
      dpm_fc_bf16_dw(n, m, k, xh, dyh, NULL, of, scratch); /* f32, as FCGradient writes it */
      break;
    default:
      dpm_fc_bf16_dx(n, m, k, wh, dyh, oh, scratch);
      break;
    }
    return;
  }
  const float *x = xf, *w = wf, *dy = dyf, *b = bf;
  float *o = of;
  size_t nx = (size_t)n * k, nw = (size_t)m * k, ny = (size_t)n * m, no;
  if (way == FALLBACK) { /* the operands' f32 copies, as lowp_run makes them */
    if (s->p != DPM_FC_BF16_DX) dpm_f32_from_bf16(cx, xh, nx);
    if (s->p != DPM_FC_BF16_DW) dpm_f32_from_bf16(cw, wh, nw);
    if (s->p != DPM_FC_BF16_FORWARD) dpm_f32_from_bf16(co, dyh, ny);
    x = cx, w = cw, dy = co, o = of;
  }
  switch (s->p) {
  case DPM_FC_BF16_FORWARD:
    dpm_gemm_nt(&(dpm_gemm_nt_args){.n = n,
                                    .m = m,
                                    .k = k,
                                    .x = x,
                                    .ldx = k,
                                    .w = w,
                                    .ldw = k,
                                    .b = b,
                                    .relu = 1,
                                    .y = o,
                                    .ldy = m});
    no = ny;
    break;
  case DPM_FC_BF16_DW:
    dpm_gemm_outer(m, k, n, dy, 1, m, x, k, 0, o, k);
    no = nw;
    break;
  default:
    dpm_gemm_outer(n, k, m, dy, m, 1, w, k, 0, o, k);
    no = nx;
    break;
  }
  if (way == FALLBACK && s->p != DPM_FC_BF16_DW) dpm_bf16_from_f32(oh, o, no);
}

static void products(int rounds) {
  const shape shapes[] = {
      {"MLP fc1 forward 64x256x784", DPM_FC_BF16_FORWARD, 64, 256, 784, 0},
      {"MLP fc1 dW      64x256x784", DPM_FC_BF16_DW, 64, 256, 784, 0},
      {"MLP fc2 forward 64x128x256", DPM_FC_BF16_FORWARD, 64, 128, 256, 0},
      {"MLP fc2 dW      64x128x256", DPM_FC_BF16_DW, 64, 128, 256, 0},
      {"MLP fc2 dX      64x128x256", DPM_FC_BF16_DX, 64, 128, 256, 0},
      {"MLP pred forward 64x10x128", DPM_FC_BF16_FORWARD, 64, 10, 128, 0},
      {"MLP pred dW     64x10x128", DPM_FC_BF16_DW, 64, 10, 128, 0},
      {"MLP pred dX     64x10x128", DPM_FC_BF16_DX, 64, 10, 128, 0},
      {"CNN fc3 forward 64x1024x3136", DPM_FC_BF16_FORWARD, 64, 1024, 3136, 0},
      {"CNN fc3 dW      64x1024x3136", DPM_FC_BF16_DW, 64, 1024, 3136, 0},
      {"CNN fc3 dX      64x1024x3136", DPM_FC_BF16_DX, 64, 1024, 3136, 0},
      {"CNN pred forward 64x10x1024", DPM_FC_BF16_FORWARD, 64, 10, 1024, 0},
      {"CNN pred dW     64x10x1024", DPM_FC_BF16_DW, 64, 10, 1024, 0},
      {"CNN pred dX     64x10x1024", DPM_FC_BF16_DX, 64, 10, 1024, 0},
      {"CNN conv1 fwd    32x784x26", 0, 32, 784, 26, CONV1_FWD},
      {"CNN conv2 fwd    64x196x161", 0, 64, 196, 161, CONV2_FWD},
      {"CNN conv2 dW     161x64x196", 0, 161, 64, 196, CONV2_DW},
      {"CNN conv2 dL     160x196x64", 0, 160, 196, 64, CONV2_DL},
  };
  const size_t big = (size_t)1024 * 3136;
  size_t sb = 0;
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    const shape *q = &shapes[i];
    size_t s = q->conv ? dpm_bf16_gemm_scratch(q->n, q->m, q->k, 1)
                       : dpm_fc_bf16_scratch(q->n, q->m, q->k, q->p);
    if (s > sb) sb = s;
  }
  float **fs[] = {&xf, &wf, &dyf, &bf, &of, &cx, &cw, &co};
  uint16_t **hs[] = {&xh, &wh, &dyh, &bh, &oh};
  for (int i = 0; i < 8; i++) *fs[i] = dpm_alloc(big * 4);
  for (int i = 0; i < 5; i++) *hs[i] = dpm_alloc(big * 2);
  scratch = dpm_alloc(sb);
  /* every page touched before the clock starts */
  for (int i = 0; i < 8; i++) memset(*fs[i], 0, big * 4);
  for (int i = 0; i < 5; i++) memset(*hs[i], 0, big * 2);
  memset(scratch, 0, sb);
  for (size_t i = 0; i < big; i++) {
    xf[i] = (float)(i % 13) * 0.01f - 0.05f;
    wf[i] = (float)(i % 7) * 0.02f - 0.06f;
    dyf[i] = (float)(i % 5) * 0.03f - 0.06f;
    bf[i] = (float)(i % 3) * 0.1f - 0.1f;
  }
  dpm_bf16_from_f32(xh, xf, big);
  dpm_bf16_from_f32(wh, wf, big);
  dpm_bf16_from_f32(dyh, dyf, big);
  dpm_bf16_from_f32(bh, bf, big);
  printf("FC products: one thread; median µs over %d rounds, the three alternating\n",
         rounds);
  printf("%-30s %10s %10s %10s %9s %8s\n", "product", "fp32 µs", "bf16 µs", "fallbk µs",
         "fp32/bf16", "GFLOP/s");
  double *t[WAYS];
  for (int w = 0; w < WAYS; w++) t[w] = malloc((size_t)rounds * sizeof(double));
  /* medians summed per model (0 MLP, 1 CNN): its FC forwards, and all
   * three products of every FC layer, fp32 and native */
  double fwd[2][2] = {{0}}, all[2][2] = {{0}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    const shape *s = &shapes[i];
    const int reps = 5;
    for (int r = 0; r < rounds; r++)
      for (int w = 0; w < WAYS; w++) {
        if (s->conv && w == FALLBACK) {
          t[w][r] = 0;
          continue;
        }
        run_one(s, w);
        double t0 = bench_now_ms();
        for (int j = 0; j < reps; j++) run_one(s, w);
        t[w][r] = (bench_now_ms() - t0) * 1e3 / reps;
      }
    double us[WAYS];
    for (int w = 0; w < WAYS; w++) us[w] = bench_median(t[w], rounds);
    char fb[16] = "-";
    if (!s->conv) snprintf(fb, sizeof fb, "%.1f", us[FALLBACK]);
    printf("%-30s %10.1f %10.1f %10s %8.2fx %8.1f\n", s->name, us[FP32], us[NATIVE], fb,
           us[FP32] / us[NATIVE], 2.0 * s->n * s->m * s->k / (us[NATIVE] * 1e3));
    if (s->conv) continue;
    int model = strncmp(s->name, "MLP", 3) != 0;
    const int way[2] = {FP32, NATIVE};
    for (int w = 0; w < 2; w++) {
      all[model][w] += us[way[w]];
      if (s->p == DPM_FC_BF16_FORWARD) fwd[model][w] += us[way[w]];
    }
  }
  for (int model = 0; model < 2; model++)
    printf("%s FC products summed: forwards %.1f against %.1f µs, %.2fx; all three "
           "products %.1f against %.1f µs, %.2fx\n",
           model ? "CNN" : "MLP", fwd[model][0], fwd[model][1], fwd[model][0] / fwd[model][1],
           all[model][0], all[model][1], all[model][0] / all[model][1]);
  for (int w = 0; w < WAYS; w++) free(t[w]);
  for (int i = 0; i < 8; i++) dpm_free(*fs[i]);
  for (int i = 0; i < 5; i++) dpm_free(*hs[i]);
  dpm_free(scratch);
}

/* ---- training steps ------------------------------------------------------- */

/* The example at path on cpu:0 and cpu:1, with `precision` appended (""
 * for none); NULL on error (printed). */
static Dpm__ModelSpec *example(const char *path, const char *precision) {
  FILE *f = fopen(path, "rb");
  char *text = calloc(1, 1 << 16);
  size_t len = f && text ? fread(text, 1, (1 << 16) - 256, f) : 0;
  if (f) fclose(f);
  Dpm__ModelSpec *spec = NULL;
  char *dev = len ? strstr(text, "devices: [cpu:0]") : NULL;
  if (!dev) {
    fprintf(stderr, "bench: %s: no 'devices: [cpu:0]' line\n", path);
    free(text);
    return NULL;
  }
  /* "devices: [cpu:0, cpu:1]": shift the rest right by 7 */
  memmove(dev + 23, dev + 16, strlen(dev + 16) + 1);
  memcpy(dev, "devices: [cpu:0, cpu:1]", 23);
  strcat(text, precision);
  dpm_err err = {0};
  if (dpm_spec_parse(text, strlen(text), path, &spec, &err))
    fprintf(stderr, "bench: %s: %s\n", path, err.msg);
  free(text);
  return spec;
}

/* --only fp32|bf16|fallback: that way alone (for a profiler) */
static int only = -1;

static int steps_bench(const char *name, const char *path, int rounds, int per_round) {
  Dpm__ModelSpec *s32 = example(path, ""),
                 *s16 = example(path, "precision: {compute: bf16}\n");
  dpm_trainer *t32 = NULL, *t16 = NULL;
  dpm_err err = {0};
  int rc = !s32 || !s16 || dpm_trainer_create(s32, NULL, &t32, &err) ||
           dpm_trainer_create(s16, NULL, &t16, &err);
  dpm_step_stats st;
  /* warm-up: a few steps each */
  rc = rc || dpm_trainer_step(t32, 5, &st, &err) || dpm_trainer_step(t16, 5, &st, &err);
  int n = rounds * per_round;
  double *t[WAYS];
  for (int w = 0; w < WAYS; w++) t[w] = malloc((size_t)n * sizeof(double));
  for (int r = 0; r < rounds && !rc; r++)
    for (int w = 0; w < WAYS && !rc; w++) {
      if (only >= 0 && w != only) continue;
      dpm_bf16_native_use(w == NATIVE);
      dpm_trainer *tr = w == FP32 ? t32 : t16;
      for (int i = 0; i < per_round && !rc; i++) {
        double t0 = bench_now_ms();
        rc = dpm_trainer_step(tr, 1, &st, &err);
        t[w][r * per_round + i] = bench_now_ms() - t0;
      }
    }
  dpm_bf16_native_use(1);
  if (rc) {
    fprintf(stderr, "bench: %s: %s\n", name, err.msg[0] ? err.msg : "could not start");
  } else {
    double ms[WAYS];
    for (int w = 0; w < WAYS; w++) ms[w] = only < 0 || w == only ? bench_median(t[w], n) : 0;
    printf("%-30s %10.3f %10.3f %10.3f %8.2fx %8.2fx\n", name, ms[FP32], ms[NATIVE],
           ms[FALLBACK], ms[FP32] / ms[NATIVE], ms[FP32] / ms[FALLBACK]);
  }
  for (int w = 0; w < WAYS; w++) free(t[w]);
  dpm_trainer_destroy(t32);
  dpm_trainer_destroy(t16);
  dpm_spec_free(s32);
  dpm_spec_free(s16);
  return rc;
}

int main(int argc, char **argv) {
  int rounds = 21, steps = 0;
  const char *model = "";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--rounds"))
      rounds = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--steps"))
      steps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--model"))
      model = argv[i + 1];
    else if (!strcmp(argv[i], "--only"))
      only = !strcmp(argv[i + 1], "fp32")   ? FP32
             : !strcmp(argv[i + 1], "bf16") ? NATIVE
                                            : FALLBACK;
  }
  if (rounds < 1) return fprintf(stderr, "bad --rounds\n"), 2;
  if (!dpm_bf16_native()) {
    printf("no AVX512-BF16 here (or DPM_CPU_KERNELS=generic): bf16 runs the fallback; "
           "nothing to compare\n");
    return 0;
  }
  if (!*model) products(rounds);
  if (steps < 0) return 0; /* --steps -1: the products alone */
  printf("\ntraining steps, 2 replicas (cpu:0, cpu:1): median ms per step over %d rounds "
         "of %d steps, the three alternating\n",
         rounds, steps ? steps : 10);
  printf("%-30s %10s %10s %10s %9s %9s\n", "model", "fp32 ms", "bf16 ms", "fallbk ms",
         "fp32/bf16", "fp32/fb");
  int rc = 0;
  if (strcmp(model, "cnn"))
    rc |= steps_bench("MLP step (fmnist_mlp, batch 64)", "examples/fmnist_mlp.yaml", rounds,
                      steps ? steps : 10);
  if (strcmp(model, "mlp"))
    rc |= steps_bench("CNN step (fmnist_cnn, batch 64)", "examples/fmnist_cnn.yaml", rounds,
                      steps ? steps : 3);
  return rc;
}
