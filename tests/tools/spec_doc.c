/* Writes the spec reference, docs/SPEC.md, from docs/SPEC.md.in: the
 * template's hand-written text, with the line "@SPEC_KEYS@" replaced by a
 * table of every key of every section (from the parser's tables, common/spec.h
 * dpm_spec_describe: what each takes, its default from dpm.proto) and
 * "@OPS@" by every operator a spec may use (from the op table,
 * engine/op.h: inputs, outputs, the parameters it creates, each argument's
 * type, default and bounds). The one-line descriptions below are the only
 * text kept here; the program fails, naming it, on a key or op without one
 * and on a description of a key, op or argument that no longer exists, so
 * the reference cannot drift from the code. `make test` checks that
 * docs/SPEC.md is what this prints (tests/run.sh, spec-doc).
 *
 *   build/tests/spec_doc docs/SPEC.md.in >docs/SPEC.md
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/spec.h"
#include "engine/op.h"

typedef struct {
  const char *name; /* "input.batch_size", "name" (top level), "FC", "FC.dim_out" */
  const char *text;
} doc;

/* clang-format off */
static const doc key_docs[] = {
    {"name", "The model's name: its directory in dpmd's state dir and the NAME of dpmctl's commands (dpmctl submit --name overrides it)."},
    {"input", "The training data: one reader shared by every device of a host, each device taking its slice of the global batch."},
    {"forward", "The forward net: operators over named blobs, in order; parameters are created by the ops (Operators, below), gradients are generated."},
    {"losses", "The blobs whose gradients start the backward pass (each scaled by 1 / (devices x shards))."},
    {"update", "How parameters are updated from their gradients: the optimizer and its learning rate."},
    {"eval", "Test data for `dpmctl eval` and dpm-train's per-epoch evaluation (IDX files, like input's)."},
    {"parallel", "Devices, the gradient reduction and, for a job over several daemons, how they meet."},
    {"precision", "Mixed precision: the type FC and Conv compute in, with f32 master weights, the type gradients cross processes in, and loss scaling (Precision, below)."},
    {"precision.compute", "fp32: everything in f32 (today's behaviour); bf16 or fp16: FC and Conv read and write 16-bit tensors with f32 accumulation, the loss, softmax, Accuracy, SpatialBN and the optimizer stay f32, element-wise ops, pooling, Dropout, Concat and reshapes keep their input's type. cpu and fenced devices; cuda: bf16 only, for nets whose 16-bit ops are FC, Relu, Copy, Flatten, Reshape, Concat and their gradients (other ops are refused naming op and device). Not part of the spec hash."},
    {"precision.master", "The type of the parameters the optimizer updates and checkpoints hold: fp32 only (a 16-bit master loses updates below its precision)."},
    {"precision.allreduce", "bf16: gradients cross processes (the Gloo path of a job over several daemons) rounded to bf16 and are summed in fp32, every replica ending with the same sums; half the bytes at 2 shards. Within one process nothing is rounded. Not for CUDA (nccl) jobs."},
    {"checkpoint_every", "Periodic checkpoints of a model served by dpmd; overrides the daemon's checkpoint_every."},
    {"input.reader", "idx: an IDX image file and its label file (Bring your own data); synthetic: generated examples, no files; tar: WebDataset shards of JPEG/PNG images and `.cls` labels; lmdb: a Caffe/Caffe2 LMDB of Datum records; folder: one sub-folder of images per class (Image data)."},
    {"input.images", "idx: the image file, `.gz` or raw; a relative path is taken from dpmctl's directory."},
    {"input.labels", "idx: the label file, `.gz` or raw."},
    {"input.batch_size", "Examples per device per step; the global batch is batch_size x devices x shards."},
    {"input.scale", "Each pixel (0..255) is multiplied by it: 0.00392156862 maps pixels to [0, 1]."},
    {"input.shuffle", "A seeded permutation of the examples each epoch (else file order)."},
    {"input.seed", "Seeds the shuffle and the synthetic data."},
    {"input.outputs", "The names of the two blobs the reader writes: the images (float32 [N, C, H, W]) and the labels (int32 [N])."},
    {"input.shard_id", "This process's part of the data when several read one set; a fleet job sets it per shard."},
    {"input.num_shards", "How many parts the data is split into (see shard_id)."},
    {"input.prefetch", "Global batches the reader prepares ahead of the devices."},
    {"input.num_examples", "synthetic: the number of examples in an epoch."},
    {"input.shape", "synthetic: the image shape [C, H, W]."},
    {"input.num_classes", "Labels are 0..num_classes-1; idx labels at or above it are refused."},
    {"input.shards", "tar: the shard files, read in this order and split across replicas and shards by sample; `train-{000000..000146}.tar` stands for the 147 names of its range."},
    {"input.path", "lmdb: the database directory (or its data.mdb); folder: the root whose sub-folders are the classes."},
    {"input.image", "How encoded images become the data blob: decode, crop, mirror, normalise (image readers only)."},
    {"input.on_bad_sample", "What a corrupt image, a sample without a label or a label out of range does: fail stops the model naming the shard and sample; skip takes the next good sample in its place and counts it (status, metrics)."},
    {"input.image.channels", "1: gray, 3: RGB (Caffe2 ImageInput: color). Gray images are repeated into RGB; colour ones give their luma for 1."},
    {"input.image.crop", "The side of the square output, [N, channels, crop, crop] (Caffe2: crop)."},
    {"input.image.resize", "Evaluation (and training with random_crop: false): the short side is resized to this before the centre crop (Caffe2: scale); default crop x 8/7."},
    {"input.image.random_crop", "Training: a random-resized crop (torchvision's RandomResizedCrop: area and aspect drawn per sample, then resized to crop); false: resize and centre crop, as in evaluation."},
    {"input.image.area_min", "Smallest fraction of the image's area a random crop covers (Caffe2 scale_jitter_type 1: 0.08)."},
    {"input.image.area_max", "Largest fraction of the image's area a random crop covers."},
    {"input.image.aspect_min", "Smallest aspect ratio (width / height) of a random crop."},
    {"input.image.aspect_max", "Largest aspect ratio of a random crop."},
    {"input.image.mirror", "Training: flip each sample left-right with probability 1/2 (Caffe2: mirror)."},
    {"input.image.mean", "Subtracted from each channel, in pixel units 0..255, RGB order; one number for every channel (Caffe2: mean, mean_per_channel, which is BGR)."},
    {"input.image.std", "Each channel is divided by it after the mean, in pixel units (Caffe2: std, std_per_channel)."},
    {"input.image.decode_threads", "Threads that read, decode and augment samples ahead of the devices (Caffe2: decode_threads)."},
    {"input.image.max_pixels", "Images declaring more pixels than this are refused from their header (a decompression bomb is a few bytes)."},
    {"update.optimizer", "sgd: p -= lr * g; momentum_sgd: Caffe2's MomentumSGD (nesterov optional); adam: Caffe2's Adam (Adam, below)."},
    {"update.momentum", "momentum_sgd: m = momentum * m + lr * g, p -= m."},
    {"update.nesterov", "momentum_sgd: Nesterov's momentum, p -= (1 + momentum) * m_new - momentum * m_old."},
    {"update.weight_decay", "L2 decay added to the gradient, g + weight_decay * p, for weights (FC's and Conv's _w) only."},
    {"update.weight_decay_bias", "Decay biases and SpatialBN's scale and shift too."},
    {"update.beta1", "adam: decay of the first moment."},
    {"update.beta2", "adam: decay of the second moment."},
    {"update.epsilon", "adam: added to the square root of the second moment, outside the bias correction (Adam, below)."},
    {"update.lr", "The learning rate: a base rate, a policy over the iterations and a linear warm-up."},
    {"update.lr.base", "The base rate."},
    {"update.lr.policy", "fixed: base; step: base * gamma^floor(it / stepsize); multistep: base * gamma^(stepvalues passed); exp: base * gamma^it; inv: base * (1 + gamma * it)^-power; poly: base * (1 - it / max_iter)^power; cosine: base * (final_multiplier + (1 - final_multiplier) * (1 + cos(pi * min(it, max_iter) / max_iter)) / 2). A warm-up multiplies the policy's rate over its first warmup_iters iterations, which count inside max_iter."},
    {"update.lr.stepsize", "step: iterations between two multiplications by gamma."},
    {"update.lr.gamma", "The factor of step, multistep, exp and inv."},
    {"update.lr.power", "The exponent of inv and poly."},
    {"update.lr.stepvalues", "multistep: the iterations (increasing) at which the rate is multiplied by gamma."},
    {"update.lr.max_iter", "poly: the iteration at which the rate reaches 0; cosine: the one at which it reaches base * final_multiplier (and stays)."},
    {"update.lr.final_multiplier", "cosine: the factor of base at max_iter, in [0, 1]."},
    {"update.lr.warmup_iters", "Linear warm-up (Goyal et al.): for it < warmup_iters the rate is multiplied by start_multiplier + (1 - start_multiplier) * it / warmup_iters."},
    {"update.lr.start_multiplier", "The warm-up's factor at iteration 0 (Caffe2's start_warmup_multiplier)."},
    {"update.lr.warmup_start", "Give it or start_multiplier, not both."},
    {"update.accumulate_steps", "K micro-batches of batch_size per device whose gradients are summed locally (the loss gradient carries 1/K) before one reduction and one optimizer step: an update of K x the global batch. Iterations, train --iters and checkpoints count updates (Accumulation, clipping, loss scaling, below)."},
    {"update.clip_grad_norm", "Clip the reduced, unscaled gradients to this global L2 norm (PyTorch's clip_grad_norm_): g *= min(1, max / (norm + 1e-6)); 0: off."},
    {"precision.loss_scale", "none; dynamic: GradScaler's (start 2^16, x0.5 and the update skipped when a reduced gradient is inf or NaN, x2 after growth_interval clean updates); a number: a static scale (updates with inf/NaN gradients skipped)."},
    {"precision.growth_interval", "dynamic: clean updates after which the scale doubles."},
    {"precision.max_skipped", "Updates skipped in a row that fail the model (it diverged, or overflows at any scale)."},
    {"eval.images", "The test image file (IDX, `.gz` or raw)."},
    {"eval.labels", "The test label file."},
    {"eval.batch_size", "Examples per evaluation batch."},
    {"eval.reader", "idx (images and labels), or an image reader: tar, lmdb or folder, whose images are resized and centre-cropped with input.image's resize, crop, mean and std."},
    {"eval.shards", "tar: the test shards (as input.shards)."},
    {"eval.path", "lmdb or folder: the test set (as input.path)."},
    {"parallel.devices", "One replica per device. `dpmctl submit --devices` and `dpm-train --devices` override it; without either, dpmd uses the devices it serves and dpm-train cpu:0."},
    {"parallel.net_type", "simple: reduce the gradients after the whole backward pass; dag: start each bucket's reduction as soon as its gradients are ready, overlapping the backward pass."},
    {"parallel.broadcast_computed_params", "After each step, copy computed parameters (SpatialBN's running statistics) from the master device to the others."},
    {"parallel.optimize_gradient_memory", "Share the storage of activations and gradients whose lifetimes do not overlap (Caffe2's memonger)."},
    {"parallel.bucket_bytes", "dag: the gradient bytes reduced together in one collective."},
    {"parallel.allow_tf32", "CUDA: matrix products may use TF32 (faster, about 1e-3 relative)."},
    {"parallel.deterministic", "CUDA: only algorithms whose results repeat bitwise from run to run."},
    {"parallel.cuda_graphs", "CUDA: capture a step as a CUDA graph once shapes are static, and replay it."},
    {"parallel.combine_spatial_bn", "SpatialBN's batch statistics over the global batch (every replica of the job), as PyTorch's SyncBatchNorm."},
    {"parallel.mode", "sync: gradients all-reduced every step (Caffe2's Parallelize); bmuf: block-wise model update filtering (Caffe2's Parallelize_BMUF)."},
    {"parallel.bmuf", "bmuf's arguments: with g the parameters at a block's start and avg the replicas' mean at its end, v = block_momentum * v + block_learning_rate * (avg - g), g += v."},
    {"parallel.shards", "The daemons of a job over several hosts (tcp://HOST:PORT each); the first coordinates."},
    {"parallel.keep_blobs", "With optimize_gradient_memory: blobs that keep their own storage, for get-blob."},
    {"parallel.rendezvous", "How the shards of a job meet."},
    {"parallel.bmuf.block_momentum", "Default: Caffe2's, 1 - 1 / (the job's replicas)."},
    {"parallel.bmuf.block_learning_rate", "The step towards the replicas' mean."},
    {"parallel.bmuf.nesterov", "Nesterov's form of the block momentum."},
    {"parallel.bmuf.local_steps", "Steps each replica runs on its own per block."},
    {"parallel.rendezvous.store", "daemon: the coordinating dpmd's store; redis://HOST:PORT; file:///DIR on a directory every shard reaches."},
    {"parallel.rendezvous.interface", "The network interface of the collectives (eth0); default: any."},
    {"parallel.rendezvous.timeout_ms", "The longest any wait for a peer may take; a shard that dies fails the others' step within it."},
};

static const doc op_docs[] = {
    {"Relu", "y = max(x, 0). In place allowed."},
    {"Sigmoid", "y = 1 / (1 + exp(-x))."},
    {"Tanh", "y = tanh(x)."},
    {"Add", "y = a + b, same shapes."},
    {"Sum", "y = the sum of its inputs, same shapes."},
    {"Scale", "y = scale * x."},
    {"Copy", "y = x."},
    {"StopGradient", "y = x; no gradient flows back through it."},
    {"Flatten", "[d0 .. d(axis-1), d(axis) ..] -> [product of the first, product of the rest]."},
    {"Reshape", "To `shape` (Caffe2's: 0 keeps the input's dimension there, one -1 is inferred)."},
    {"Concat", "Joins its inputs along `axis` (1: channels)."},
    {"FC", "Fully connected: y = x W^T + b, x flattened to [N, K]; creates `<out>_w` [dim_out, K] and `<out>_b` [dim_out]."},
    {"Conv", "2-D convolution over NCHW, square kernel; creates `<out>_w` [dim_out, C / group, kernel, kernel] and `<out>_b` [dim_out] (no `_b` with `no_bias`)."},
    {"MaxPool", "Max over square windows (NCHW); output size floor((H + 2 pad - kernel) / stride) + 1; padding never takes part."},
    {"AveragePool", "Average over the in-bounds elements of square windows (NCHW), as MaxPool's sizes; with `global_pooling`, the average of each whole plane, [N, C, 1, 1]."},
    {"SpatialBN", "Batch normalisation per channel (NCHW); creates scale `_s`, shift `_b` and the computed running mean `_rm` and variance `_riv` (BN's running variance, below). Test mode uses the running statistics."},
    {"Dropout", "Inverted dropout: train mode keeps each element with probability 1 - ratio and scales it by 1 / (1 - ratio); test mode is the identity. Seeded per device and step."},
    {"Softmax", "Softmax over the last dimension."},
    {"SoftmaxWithLoss", "Inputs: scores [N, K] and int32 labels [N]; outputs: the softmax and the mean cross-entropy loss (against the smoothed target with `label_smoothing`)."},
    {"SoftmaxWithLoss.label_smoothing", "eps in [0, 1): the target is (1 - eps) onehot + eps / K, the loss -sum q log p, its gradient p - q. 0: plain cross-entropy."},
    {"Accuracy", "Inputs: scores [N, K] and int32 labels [N]; output: the fraction whose label is among the top `top_k` classes. No gradient. The trainer reports the first Accuracy with top_k 1 (else the first)."},
    {"Accuracy.top_k", "How many of the best classes count (at most K). Ranking as Caffe2's: by score, ties to the lower class index; 1: the row's first maximum."},
    {"ConstantFill", "A tensor of `shape` filled with `value`."},
    {"XavierFill", "Uniform in +-sqrt(3 / fan_in) (Caffe2's Xavier), seeded."},
    {"MSRAFill", "Gaussian with std sqrt(2 / fan_out) (Caffe2's MSRA), seeded."},
    {"GaussianFill", "Gaussian(mean, std), seeded."},
    {"UniformFill", "Uniform in [min, max], seeded."},
    {"Scale.scale", "The factor."},
    {"Flatten.axis", "The first dimension of the second part."},
    {"Reshape.shape", "The new dimensions."},
    {"Concat.axis", "The dimension joined."},
    {"FC.dim_out", "Output features."},
    {"FC.weight_init", "The fill of `_w`."},
    {"FC.weight_std", "`_w`'s std (gaussian) or half-range (uniform)."},
    {"FC.bias_init", "The fill of `_b`."},
    {"FC.bias_value", "`_b`'s constant value."},
    {"Conv.dim_out", "Output channels."},
    {"Conv.kernel", "The window's side."},
    {"Conv.stride", "The step between windows."},
    {"Conv.pad", "Zeros added on each side."},
    {"Conv.weight_init", "The fill of `_w`."},
    {"Conv.weight_std", "`_w`'s std (gaussian) or half-range (uniform)."},
    {"Conv.bias_init", "The fill of `_b`."},
    {"Conv.bias_value", "`_b`'s constant value."},
    {"Conv.group", "Grouped convolution (ResNeXt): G divides C and dim_out; output channels [i dim_out/G, (i+1) dim_out/G) see input channels [i C/G, (i+1) C/G) only."},
    {"Conv.no_bias", "true: no bias at all (no `_b` parameter, in checkpoints and predictors neither), as before a SpatialBN."},
    {"MaxPool.kernel", "The window's side."},
    {"MaxPool.stride", "The step between windows."},
    {"MaxPool.pad", "Padding on each side (below kernel)."},
    {"AveragePool.kernel", "The window's side; required (>= 1) unless `global_pooling`, which refuses it."},
    {"AveragePool.global_pooling", "true: one window, the whole H x W plane (ResNet's global average pool); kernel, stride and pad must stay unset."},
    {"AveragePool.stride", "The step between windows."},
    {"AveragePool.pad", "Padding on each side (below kernel)."},
    {"SpatialBN.epsilon", "Added to the variance before its inverse square root."},
    {"SpatialBN.momentum", "Running statistics: r = momentum * r + (1 - momentum) * batch's."},
    {"Dropout.ratio", "The probability of dropping an element (below 1)."},
};
/* clang-format on */
#define N_KEY_DOCS (sizeof key_docs / sizeof *key_docs)
#define N_OP_DOCS (sizeof op_docs / sizeof *op_docs)

static int failed;
static unsigned char key_used[N_KEY_DOCS], op_used[N_OP_DOCS]; /* described */

static const char *find_doc(const doc *docs, unsigned char *used, size_t n,
                            const char *name, int required) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(docs[i].name, name)) {
      used[i] = 1;
      return docs[i].text;
    }
  if (required) {
    fprintf(stderr,
            "spec_doc: no description of %s (add one to tests/tools/spec_doc.c)\n", name);
    failed = 1;
  }
  return "";
}

/* ---- keys ------------------------------------------------------------------ */

typedef struct {
  FILE *out;
  const char *section; /* the table being written */
} keys_ctx;

static void key_row(void *p, const dpm_spec_key *k) {
  keys_ctx *c = p;
  if (!c->section || strcmp(c->section, k->section)) {
    c->section = k->section;
    fprintf(c->out, "\n### %s\n\n| key | takes | default | |\n|---|---|---|---|\n",
            *k->section ? k->section : "top level");
  }
  char name[128];
  snprintf(name, sizeof name, "%s%s%s", k->section, *k->section ? "." : "", k->key);
  const char *text = find_doc(key_docs, key_used, N_KEY_DOCS, name, 1);
  char def[80] = "";
  if (k->required)
    snprintf(def, sizeof def, "required");
  else if (*k->def)
    snprintf(def, sizeof def, "`%s`", k->def);
  fprintf(c->out, "| `%s` | %s | %s | %s%s%s%s |\n", k->key, k->type, def, text,
          k->alias ? " (Another name for `" : "", k->alias ? k->alias : "",
          k->alias ? "`.)" : "");
}

/* ---- ops ------------------------------------------------------------------- */

static const char *arg_type(const dpm_arg_def *a, char *buf, size_t cap) {
  switch (a->type) {
  case DPM_ARG_INT:
    return "integer";
  case DPM_ARG_FLOAT:
    return "number";
  case DPM_ARG_BOOL:
    return "true or false";
  case DPM_ARG_STRING:
    if (!a->choices) return "string";
    snprintf(buf, cap, "one of %s", a->choices);
    for (char *p = buf; *p; p++)
      if (*p == '|') *p = '/';
    return buf;
  case DPM_ARG_INTS:
    return "list of integers";
  case DPM_ARG_FLOATS:
    return "list of numbers";
  }
  return "?";
}

static void count(FILE *out, const char *what, int lo, int hi) {
  if (lo == hi)
    fprintf(out, "%d %s%s", lo, what, lo == 1 ? "" : "s");
  else
    fprintf(out, "%d..%d %ss", lo, hi, what);
}

static void op_section(FILE *out, const dpm_op_def *d) {
  char key[96], buf[160];
  fprintf(out, "\n### %s\n\n%s\n\n", d->name,
          find_doc(op_docs, op_used, N_OP_DOCS, d->name, 1));
  count(out, "input", d->min_in, d->max_in);
  fputs(", ", out);
  count(out, "output", d->min_out, d->max_out);
  if (d->params) {
    fputs("; creates", out);
    for (int i = 0; d->params[i].suffix; i++) {
      const dpm_param_def *p = &d->params[i];
      fprintf(out, "%s `<out>%s` (%s, ", i ? "," : "", p->suffix,
              p->kind == DPM_BLOB_COMPUTED ? "computed" : "parameter");
      if (p->init_arg)
        fprintf(out, "filled as `%s` says)", p->init_arg);
      else
        fprintf(out, "%s %g)", p->init, p->value);
    }
  }
  if (d->aux) {
    fputs("; hidden outputs", out);
    for (int i = 0; d->aux[i]; i++) fprintf(out, "%s `<out>%s`", i ? "," : "", d->aux[i]);
  }
  fputs(".\n", out);
  if (!d->args || !d->args[0].name) return;
  fputs("\n| argument | takes | default | bounds | |\n|---|---|---|---|---|\n", out);
  for (int i = 0; d->args[i].name; i++) {
    const dpm_arg_def *a = &d->args[i];
    snprintf(key, sizeof key, "%s.%s", d->name, a->name);
    char bounds[64] = "";
    if (a->min != 0 || a->max != 0)
      snprintf(bounds, sizeof bounds,
               a->type == DPM_ARG_FLOAT ? "[%g, %g]" : "[%.0f, %.0f]", a->min, a->max);
    fprintf(out, "| `%s` | %s | %s%s%s | %s | %s |\n", a->name,
            arg_type(a, buf, sizeof buf),
            !a->def   ? "required"
            : *a->def ? "`"
                      : "none",
            a->def ? a->def : "", a->def && *a->def ? "`" : "", bounds,
            find_doc(op_docs, op_used, N_OP_DOCS, key, 0));
  }
}

static void ops(FILE *out) {
  int n;
  const dpm_op_def *const *all = dpm_op_all(&n);
  for (int i = 0; i < n; i++)
    if (!(all[i]->flags & DPM_OP_HIDDEN)) op_section(out, all[i]);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: spec_doc docs/SPEC.md.in >docs/SPEC.md\n");
    return 2;
  }
  FILE *in = fopen(argv[1], "r");
  if (!in) {
    perror(argv[1]);
    return 1;
  }
  char line[4096];
  while (fgets(line, sizeof line, in)) {
    if (!strcmp(line, "@SPEC_KEYS@\n")) {
      keys_ctx c = {stdout, NULL};
      dpm_spec_describe(key_row, &c);
    } else if (!strcmp(line, "@OPS@\n")) {
      ops(stdout);
    } else {
      fputs(line, stdout);
    }
  }
  fclose(in);
  for (size_t i = 0; i < N_KEY_DOCS; i++)
    if (!key_used[i]) {
      fprintf(stderr, "spec_doc: %s is described but is no spec key\n", key_docs[i].name);
      failed = 1;
    }
  for (size_t i = 0; i < N_OP_DOCS; i++)
    if (!op_used[i]) {
      fprintf(stderr,
              "spec_doc: %s is described but is no op or argument a spec may use\n",
              op_docs[i].name);
      failed = 1;
    }
  if (fflush(stdout) || ferror(stdout)) return 1;
  return failed;
}
