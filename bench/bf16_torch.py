"""dpm's bf16 mixed precision against PyTorch's torch.autocast("cpu",
dtype=torch.bfloat16), from the same initial parameters and batches.

  build/torch-venv/bin/python bench/bf16_torch.py [--models mlp,cnn] [--steps 50]
      [--dpm build/dpm-train] [--time-rounds 5] [--time-steps N] [--keep DIR]

Needs torch and numpy (scripts/torch-venv.sh) and build/dpm-train; not run
by any test. Prints figures, asserts nothing but the 2e-2 loss criterion
(exit 1 if a step misses it). For each model (examples/fmnist_mlp.yaml,
examples/fmnist_cnn.yaml), in a temporary directory:

  specs     copies of the example with input.shuffle false (the batches are
            then images [64 i, 64 i + 64) of the training file, which the
            torch side reads with numpy), without eval, and with
            precision {compute: bf16} for the bf16 runs; one replica (cpu:0)
  init      dpm's seeded initial parameters: a copy with lr.base 0 trains one
            step and checkpoints (the parameters do not move; the init does
            not depend on the rate), read from the checkpoint file
            (daemon/io/checkpoint.h's format) into an nn.Module of the same
            layout (FC/Linear weights [out, in], Conv [out, in, kh, kw])
  dpm       fp32 and bf16: a chain of `dpm-train --iters 1 --resume --json`
            runs, one step each, so every step's loss (the JSON "loss", 6
            significant digits) and parameters are read; the chain's last
            checkpoint is compared with one uninterrupted --iters N run
  forced    also, at every step of dpm's chains, torch's one step from dpm's
            state before it (parameters and momentum): the loss and update
            differences of the implementations alone, without the drift of
            two trajectories
  spread    torch fp32 again with mkldnn off (other summation orders): how
            far fp32 rounding alone moves a trajectory in N steps (the CNN's
            max-pool and ReLU switches amplify it; the MLP's barely move)
  torch     fp32, and bf16 with the forward and the loss under autocast;
            the update mirrors dpm's momentum_sgd in numpy float32 (m = mu m
            + lr (g + wd p), p -= m, wd on _w only; lr = base * gamma^floor(it
            / stepsize) * warm-up, in double then rounded to float32, it the
            completed steps)
  speed     medians of per-step times over alternating rounds, on 1 and on 2
            threads: dpm-train --devices cpu:0 (cpu:0,cpu:1: one thread a
            replica, 64 images each, shuffled as in the example) fp32 and
            bf16 (its step_ms_median), and torch with set_num_threads(1)
            (2) on batches of 64 (128), fp32 and autocast, each step timed
            from zero_grad to the optimizer step (torch.optim.SGD), the
            first two of a round left out

The parameter bound, derived (first order; printed with its terms): bf16
rounds to nearest with unit roundoff u = 2^-8. In a product the relative
errors of the factors add, and each rounding adds u; counting along the
rewritten plan (`dpm-train --dump-plan`) gives each parameter gradient c
roundings (Relu, MaxPool and up-casts are exact). So each framework's bf16
update at a step is within c u (in norm) of the exact update, the two
frameworks within 2 c u of each other, and after N steps, neglecting the
feedback of the parameter difference into later gradients (checked: each
framework's own bf16-vs-fp32 gap must also stay within c u times the path),
    ||p_dpm - p_torch||_2 <= 2 c u sum_t ||p_t - p_(t-1)||_2
(the path length from dpm's bf16 chain). The empirical anchor is printed
beside it: dpm-bf16 vs dpm-fp32 and torch-autocast vs torch-fp32; their sum
plus the fp32 gap bounds the bf16 gap by the triangle inequality, so it is
a ceiling that holds by construction, not a test."""
import argparse
import gzip
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
U = 2.0 ** -8  # bf16 unit roundoff (8 significant bits, round to nearest)
LOSS_TOL = 2e-2


# ---- the spec ---------------------------------------------------------------

def spec_text(path):
    with open(path) as f:
        return f.read()


def without_eval(text):
    out, skip = [], False
    for line in text.splitlines(True):
        if re.match(r"^eval:", line):
            skip = True
            continue
        if skip and re.match(r"^\S", line):
            skip = False
        if not skip:
            out.append(line)
    return "".join(out)


def update_params(text):
    """The update block's keys that the mirror needs (flat keys and the lr
    flow mapping), checked to be what it implements."""
    block = re.search(r"^update:\n((?:[ \t]+.*\n)+)", text, re.M).group(1)
    kv = dict(re.findall(r"^\s+(\w+):\s*([^#{\n]+?)\s*(?:#.*)?$", block, re.M))
    lr = dict(re.findall(r"(\w+):\s*([\w.]+)", re.search(r"lr:\s*\{([^}]*)\}", block).group(1)))
    assert kv.get("optimizer") == "momentum_sgd", kv
    assert kv.get("nesterov", "false") == "false", "nesterov not mirrored"
    assert lr.get("policy", "fixed") == "step", lr
    assert "start_multiplier" not in lr and "warmup_start" not in lr, lr
    return dict(mu=float(kv.get("momentum", 0.9)), wd=float(kv.get("weight_decay", 0)),
                base=float(lr["base"]), gamma=float(lr.get("gamma", 1)),
                stepsize=float(lr.get("stepsize", 1)), warmup=int(lr.get("warmup_iters", 0)),
                start=0.1)


def lr_at(u, it):
    """dpm's LearningRate op (daemon/backend/cpu/optim.c), double then float."""
    rate = u["base"] * u["gamma"] ** np.floor(it / u["stepsize"])
    if it < u["warmup"]:
        rate *= u["start"] + (1.0 - u["start"]) * it / u["warmup"]
    return np.float32(rate)


def spec_input(text):
    g = lambda k: re.search(r"^\s+%s:\s*(\S+)" % k, text, re.M).group(1)
    return g("images"), g("labels"), int(g("batch_size")), float(g("scale"))


# ---- dpm --------------------------------------------------------------------

def read_ckpt(path):
    """{name: array} of a dpm checkpoint (daemon/io/checkpoint.h, version 1)."""
    with open(path, "rb") as f:
        b = f.read()
    assert b[:8] == b"DPMCKPT\0", path
    count = struct.unpack_from("<I", b, 64)[0]
    off, out = 96, {}
    for _ in range(count):
        name_len, kind, dtype, ndim = struct.unpack_from("<HBBB", b, off)
        dims = struct.unpack_from("<4Q", b, off + 8)[:ndim]
        doff, nbytes = struct.unpack_from("<QQ", b, off + 40)
        name = b[off + 64:off + 64 + name_len].decode()
        dt = np.dtype({1: "<f4", 2: "<i4", 3: "<i8"}[dtype])
        out[name] = np.frombuffer(b, dt, nbytes // dt.itemsize, doff).reshape(dims).copy()
        off += 64 + (name_len + 7) // 8 * 8
    return out


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit("failed: %s\n%s%s" % (" ".join(cmd), p.stdout, p.stderr))
    return p.stdout


def json_lines(out):
    import json
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def dpm_chain(dpm, spec, steps, d, tag, names, forced):
    """Every step's loss and parameters from a chain of one-step runs, and
    forced(step, state before, state after, dpm's loss) for each."""
    losses, params, prev, state = [], [], None, None
    for s in range(steps):
        ck = os.path.join(d, "%s-%d.ckpt" % (tag, s + 1))
        cmd = [dpm, spec, "--iters", "1", "--json", "--checkpoint", ck]
        if prev:
            cmd += ["--resume", prev]
        losses.append(json_lines(run(cmd))[0]["loss"])
        c = read_ckpt(ck)
        forced(s, state, c, losses[-1])
        state = c
        params.append({n: c[n] for n in names})
        if prev:
            os.unlink(prev)
        prev = ck
    whole = os.path.join(d, "%s-whole.ckpt" % tag)
    run([dpm, spec, "--iters", str(steps), "--json", "--checkpoint", whole])
    w = read_ckpt(whole)
    same = all(np.array_equal(w[n], params[-1][n]) for n in names)
    return losses, params, same


def plan_roundings(dpm, spec, names):
    """c per parameter: bf16 roundings on its gradient's path in the plan,
    relative errors of a product's factors added, 1 per rounding to bf16;
    exact ops (Relu, MaxPool and their gradients, up-casts) add nothing.
    The working copies' Casts (the refresh lines, "r0 Cast ...", which the
    update's rounding replaces at every step) come first."""
    depth = {}
    exact = {"Relu", "ReluGradient", "MaxPool", "MaxPoolGradient", "Flatten", "Reshape",
             "Copy", "StopGradient"}
    lines = run([dpm, spec, "--dump-plan"]).splitlines()
    refresh = [l for l in lines if l.startswith("r")]
    for line in refresh + [l for l in lines if not l.startswith("r")]:
        m = re.match(r"^r?\d+ (\w+) (.*?) <- ?(.*)$", line)
        if not m:
            continue
        op, outs, ins = m.group(1), m.group(2).split(", "), m.group(3)
        ins = [i for i in ins.split(", ") if i]
        di = [depth.get(i.split(":")[0], 0) for i in ins]
        if op in ("FC", "Conv"):  # x and W multiply; the bias adds
            base = max(di[0] + di[1], max(di[2:], default=0))
        else:
            base = max(di, default=0)
        if op in ("FCGradient", "ConvGradient"):  # in x, W, dY; out dW = x dY, db, dX = dY W
            base = [di[0] + di[2], di[2], di[1] + di[2]]
        for k, o in enumerate(outs):
            name, _, ty = o.partition(":")
            low = ty.startswith("bf16") or ty.startswith("f16")
            b = base[k] if isinstance(base, list) else base
            depth[name] = b + (1 if low and op not in exact else 0)
    return {n: depth.get(n + "_grad", 0) for n in names}


# ---- torch ------------------------------------------------------------------

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.pred = nn.Linear(784, 256), nn.Linear(256, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x.flatten(1)))
        return self.pred(F.relu(self.fc2(x)))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc3, self.pred = nn.Linear(3136, 1024), nn.Linear(1024, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2, 2)
        return self.pred(F.relu(self.fc3(x.flatten(1))))


def dpm_names(model):
    """dpm's blob name of each torch parameter: fc1.weight -> fc1_w."""
    return {n: n.replace(".weight", "_w").replace(".bias", "_b") for n, _ in model.named_parameters()}


def idx(path, n):
    with gzip.open(path, "rb") as f:
        magic = struct.unpack(">I", f.read(4))[0]
        nd = magic & 0xFF
        dims = struct.unpack(">%dI" % nd, f.read(4 * nd))
        k = min(n, dims[0])
        per = int(np.prod(dims[1:])) if nd > 1 else 1
        return np.frombuffer(f.read(k * per), np.uint8).reshape((k,) + tuple(dims[1:]))


def torch_run(model_cls, init, upd, x, y, batch, steps, bf16, first=0, mom=None):
    """steps steps from init (and momentum mom, default 0) at iteration first."""
    model = model_cls()
    names = dpm_names(model)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(torch.from_numpy(init[names[n]]))
    mom = {n: (mom[names[n] + "_momentum"].copy() if mom else np.zeros_like(init[names[n]]))
           for n in names}
    mu = np.float32(upd["mu"])
    losses, params = [], []
    for it in range(first, first + steps):
        xb = x[it * batch:(it + 1) * batch].unsqueeze(1)
        yb = y[it * batch:(it + 1) * batch]
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        losses.append(loss.item())
        lr = lr_at(upd, it)
        with torch.no_grad():
            for n, p in model.named_parameters():
                pn, g, m = p.numpy(), p.grad.numpy(), mom[n]
                wd = np.float32(upd["wd"] if names[n].endswith("_w") else 0.0)
                m[...] = mu * m + lr * (g + wd * pn)
                pn -= m
        params.append({names[n]: p.detach().numpy().copy() for n, p in model.named_parameters()})
    return losses, params


def autocast_types(model_cls, x):
    """What autocast does with each op of the model: output dtypes, and
    whether cross_entropy on bf16 logits is the fp32 computation."""
    model, seen = model_cls(), []
    for name, mod in model.named_children():
        mod.register_forward_hook(lambda m, i, o, name=name: seen.append(
            "%s(%s)->%s" % (name, str(i[0].dtype)[6:], str(o.dtype)[6:])))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(x[:8].unsqueeze(1))
        r = F.relu(logits)
        mp = F.max_pool2d(logits.view(8, 1, 10, 1).expand(8, 1, 10, 2), (1, 2))
        ce = F.cross_entropy(logits, torch.zeros(8, dtype=torch.long))
    ce32 = F.cross_entropy(logits.float(), torch.zeros(8, dtype=torch.long))
    return ("%s; relu %s, max_pool2d %s; cross_entropy(bf16 logits) -> %s, %s the fp32 "
            "loss of the up-cast logits" % (", ".join(seen), str(r.dtype)[6:], str(mp.dtype)[6:],
                                             str(ce.dtype)[6:],
                                             "bitwise equal to" if torch.equal(ce, ce32) else "NOT"))


# ---- timing -----------------------------------------------------------------

def time_dpm(dpm, spec, devices, steps):
    out = json_lines(run([dpm, spec, "--devices", devices, "--iters", str(steps), "--json"]))
    return out[-1]["step_ms_median"]


def time_torch(model, x, y, batch, steps, bf16, lr=1e-3):
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    ts = []
    for it in range(steps + 2):
        xb = x[it * batch:(it + 1) * batch].unsqueeze(1)
        yb = y[it * batch:(it + 1) * batch]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts[2:]) * 1e3  # the first two warm up


# ---- main -------------------------------------------------------------------

def fmt(v):
    return "%.3g" % v


def compare(name, model_cls, a, d):
    text = spec_text(os.path.join(ROOT, "examples", "fmnist_%s.yaml" % name))
    upd = update_params(text)
    images, labels, batch, scale = spec_input(text)
    base = without_eval(text).replace("shuffle: true", "shuffle: false")
    assert "shuffle: false" in base and "precision:" not in base
    base = re.sub(r"devices: \[[^\]]*\]", "devices: [cpu:0]", base)
    specs = {}
    for tag, extra, src in (("fp32", "", base), ("bf16", "precision: {compute: bf16}\n", base),
                            ("lr0", "", re.sub(r"base: [\d.e-]+", "base: 0", base, count=1))):
        specs[tag] = os.path.join(d, "%s-%s.yaml" % (name, tag))
        with open(specs[tag], "w") as f:
            f.write(src + extra)
    tm = model_cls()
    names = sorted(dpm_names(tm).values())
    init_ck = os.path.join(d, name + "-init.ckpt")
    run([a.dpm, specs["lr0"], "--iters", "1", "--json", "--checkpoint", init_ck])
    init = {n: v for n, v in read_ckpt(init_ck).items() if n in names}
    assert sorted(init) == names, (sorted(init), names)

    n_img = batch * a.steps
    time_steps = a.time_steps or {"mlp": 200, "cnn": 20}[name]
    x = torch.from_numpy(idx(images, max(n_img, 128 * (time_steps + 2))).astype(np.float32)
                         * np.float32(scale))
    y = torch.from_numpy(idx(labels, x.shape[0]).astype(np.int64))

    print("\n== %s (examples/fmnist_%s.yaml): %d steps of batch %d, 1 replica, no shuffling, "
          "lr %g momentum %g wd %g, warm-up %d ==" % (name.upper(), name, a.steps, batch,
                                                     upd["base"], upd["mu"], upd["wd"],
                                                     upd["warmup"]), flush=True)
    print("autocast: " + autocast_types(model_cls, x))
    runs, forced = {}, {}
    for prec in ("fp32", "bf16"):
        t0 = time.perf_counter()
        fl, fu = [], []
        def one(s, before, after, loss):
            """torch's step from dpm's state before step s + 1: loss and update."""
            src = before or dict(init, **{n + "_momentum": np.zeros_like(init[n]) for n in names})
            (lt,), (pt,) = torch_run(model_cls, {n: src[n] for n in names}, upd, x, y, batch, 1,
                                     prec == "bf16", first=s, mom=src)
            fl.append(abs(loss - lt) / abs(lt))
            fu.append(max(float(np.max(np.abs(pt[n] - after[n]))) for n in names)
                      / max(float(np.max(np.abs(after[n] - src[n]))) for n in names))
        l, p, same = dpm_chain(a.dpm, specs[prec], a.steps, d, "%s-%s" % (name, prec), names, one)
        runs["dpm", prec] = (l, p)
        forced[prec] = (np.array(fl), np.array(fu))
        print("dpm %s: %d one-step runs in %.1f s; the chain's end %s one --iters %d run's"
              % (prec, a.steps, time.perf_counter() - t0,
                 "bitwise equals" if same else "DIFFERS FROM", a.steps), flush=True)
        runs["torch", prec] = torch_run(model_cls, init, upd, x, y, batch, a.steps, prec == "bf16")
    c = plan_roundings(a.dpm, specs["bf16"], names)

    ok = True
    for prec in ("fp32", "bf16"):
        ld, lt = np.array(runs["dpm", prec][0]), np.array(runs["torch", prec][0])
        rel = np.abs(ld - lt) / np.abs(lt)
        w = int(np.argmax(rel))
        print("loss %s, dpm vs torch%s: worst relative difference %s at step %d (dpm %.6g, torch "
              "%.6g); median %s; step 1 %.6g vs %.6g, step %d %.6g vs %.6g"
              % (prec, " autocast" if prec == "bf16" else "", fmt(rel[w]), w + 1, ld[w], lt[w],
                 fmt(np.median(rel)), ld[0], lt[0], a.steps, ld[-1], lt[-1]))
        if prec == "bf16":
            print("  per step: " + " ".join("%d:%.1e" % (i + 1, r) for i, r in enumerate(rel)))
            if not rel.max() <= LOSS_TOL:
                ok = False
                print("  FAIL: a step's loss differs by more than %g" % LOSS_TOL)
    for prec in ("fp32", "bf16"):
        fl, fu = forced[prec]
        print("step by step from dpm's state (torch's step from dpm's parameters and momentum "
              "before each step), %s: loss worst relative difference %s (step %d), median %s; "
              "update max |d| / max |update| worst %s (step %d), median %s"
              % (prec, fmt(fl.max()), fl.argmax() + 1, fmt(np.median(fl)), fmt(fu.max()),
                 fu.argmax() + 1, fmt(np.median(fu))))
    torch.backends.mkldnn.enabled = False
    lo, po = torch_run(model_cls, init, upd, x, y, batch, a.steps, False)
    torch.backends.mkldnn.enabled = True
    lt, pt = runs["torch", "fp32"]
    rel = np.abs(np.array(lo) - lt) / np.abs(lt)
    print("fp32 spread of torch itself (mkldnn off vs on: other conv/matmul summation orders): "
          "loss worst relative difference %s (step %d); parameters max |d| %s"
          % (fmt(rel.max()), rel.argmax() + 1,
             fmt(max(np.max(np.abs(po[-1][n] - pt[-1][n])) for n in names))))
    lbf = np.array(runs["dpm", "bf16"][0]); l32 = np.array(runs["dpm", "fp32"][0])
    print("loss, dpm bf16 vs dpm fp32 (for scale): worst relative difference %s"
          % fmt(np.max(np.abs(lbf - l32) / l32)))

    last = lambda k: runs[k][1][-1]
    def dist(k1, k2, n):
        return np.linalg.norm((last(k1)[n].astype(np.float64) - last(k2)[n]).ravel())
    print("parameters after %d steps (L2 norms per tensor; path = sum_t ||p_t - p_(t-1)||_2 of "
          "dpm bf16; c from the plan; u = 2^-8):" % a.steps)
    print("  %-8s %9s %3s %9s %9s %9s | %9s %9s %9s %9s | %9s %9s %9s"
          % ("tensor", "path", "c", "2cu*path", "bf16 gap", "gap/bound", "dpm self", "/(cu*path)",
             "torch self", "/(cu*path)", "fp32 gap", "max|d| bf16", "max|d| fp32"))
    pb = runs["dpm", "bf16"][1]
    worst = worst_self = 0.0
    for n in names:
        path = sum(np.linalg.norm((pb[t][n].astype(np.float64)
                                   - (pb[t - 1][n] if t else init[n])).ravel())
                   for t in range(a.steps))
        gap = dist(("dpm", "bf16"), ("torch", "bf16"), n)
        ds, ts = dist(("dpm", "bf16"), ("dpm", "fp32"), n), dist(("torch", "bf16"), ("torch", "fp32"), n)
        g32 = dist(("dpm", "fp32"), ("torch", "fp32"), n)
        bound = 2 * c[n] * U * path
        worst = max(worst, gap / bound)
        worst_self = max(worst_self, ds / (c[n] * U * path), ts / (c[n] * U * path))
        mb = np.max(np.abs(last(("dpm", "bf16"))[n] - last(("torch", "bf16"))[n]))
        m32 = np.max(np.abs(last(("dpm", "fp32"))[n] - last(("torch", "fp32"))[n]))
        print("  %-8s %9.3g %3d %9.3g %9.3g %9.3g | %9.3g %9.3g %9.3g %9.3g | %9.3g %9.3g %9.3g"
              % (n, path, c[n], bound, gap, gap / bound, ds, ds / (c[n] * U * path), ts,
                 ts / (c[n] * U * path), g32, mb, m32))
    allp = lambda k: np.concatenate([last(k)[n].ravel() for n in names]).astype(np.float64)
    for prec in ("fp32", "bf16"):
        dd, tt = allp(("dpm", prec)), allp(("torch", prec))
        print("all parameters, %s dpm vs torch: max |d| %s, max |d| / max |p| %s, "
              "||d|| / ||p|| %s" % (prec, fmt(np.max(np.abs(dd - tt))),
                                    fmt(np.max(np.abs(dd - tt)) / np.max(np.abs(tt))),
                                    fmt(np.linalg.norm(dd - tt) / np.linalg.norm(tt))))
    db, df, tb, tf = (allp(("dpm", "bf16")), allp(("dpm", "fp32")), allp(("torch", "bf16")),
                      allp(("torch", "fp32")))
    anchor = np.max(np.abs(db - df)) + np.max(np.abs(tb - tf)) + np.max(np.abs(df - tf))
    print("anchor (max |d|): dpm bf16 vs fp32 %s + torch autocast vs fp32 %s + fp32 gap %s = %s "
          "(a ceiling by the triangle inequality); dpm bf16 vs torch autocast %s"
          % (fmt(np.max(np.abs(db - df))), fmt(np.max(np.abs(tb - tf))),
             fmt(np.max(np.abs(df - tf))), fmt(anchor), fmt(np.max(np.abs(db - tb)))))
    print("worst gap / derived bound over the tensors: %s (%s); the first-order premise, each "
          "framework's own bf16-vs-fp32 gap / (c u path): worst %s (%s)"
          % (fmt(worst), "within" if worst <= 1 else "OUTSIDE", fmt(worst_self),
             "holds" if worst_self <= 1 else "DOES NOT HOLD: the bound is not derived"))
    ok = ok and worst <= 1

    # speed: alternating rounds, each a fresh dpm run and a fresh torch model
    tspec = os.path.join(d, name + "-time-%s.yaml")
    for prec, extra in (("fp32", ""), ("bf16", "precision: {compute: bf16}\n")):
        with open(tspec % prec, "w") as f:
            f.write(without_eval(text) + extra)
    for threads in (1, 2) if a.time_rounds else ():
        tb = 64 * threads
        devs = ",".join("cpu:%d" % i for i in range(threads))
        torch.set_num_threads(threads)
        tx, ty = x[:tb * (time_steps + 2)], y[:tb * (time_steps + 2)]
        t = {k: [] for k in ("dpm fp32", "dpm bf16", "torch fp32", "torch autocast")}
        for r in range(a.time_rounds):
            t["dpm fp32"].append(time_dpm(a.dpm, tspec % "fp32", devs, time_steps))
            t["dpm bf16"].append(time_dpm(a.dpm, tspec % "bf16", devs, time_steps))
            for bf16, k in ((False, "torch fp32"), (True, "torch autocast")):
                m = model_cls()
                m.load_state_dict({k: torch.from_numpy(init[v]) for k, v in dpm_names(m).items()})
                t[k].append(time_torch(m, tx, ty, tb, time_steps, bf16))
        torch.set_num_threads(1)
        med = {k: statistics.median(v) for k, v in t.items()}
        print("step time, batch %d on %d thread%s (dpm: %d replica%s x 64, one thread each; "
              "torch: set_num_threads(%d)), medians of %d alternating rounds of %d steps, ms: %s"
              % (tb, threads, "s" if threads > 1 else "", threads, "s" if threads > 1 else "",
                 threads, a.time_rounds, time_steps,
                 ", ".join("%s %.2f [%s]" % (k, med[k], " ".join("%.2f" % v for v in t[k]))
                           for k in t)))
        print("  bf16 / fp32 time: dpm %.2f, torch %.2f; dpm bf16 / torch autocast %.2f; "
              "dpm fp32 / torch fp32 %.2f" % (med["dpm bf16"] / med["dpm fp32"],
                                              med["torch autocast"] / med["torch fp32"],
                                              med["dpm bf16"] / med["torch autocast"],
                                              med["dpm fp32"] / med["torch fp32"]), flush=True)
    return ok


MODELS = {"mlp": MLP, "cnn": CNN}


def each_model(a, prefix, compare):
    """compare(name, model class, a, directory) for each of a.models, in a
    temporary directory (a.keep: that one, kept); the exit status: 1 if
    one of them returned false."""
    d = a.keep or tempfile.mkdtemp(prefix=prefix)
    os.makedirs(d, exist_ok=True)
    ok = True
    try:
        for name in a.models.split(","):
            ok = compare(name, MODELS[name], a, d) and ok
    finally:
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--dpm", default=os.path.join(ROOT, "build", "dpm-train"))
    ap.add_argument("--time-rounds", type=int, default=5, help="0: no timing")
    ap.add_argument("--time-steps", type=int, default=0,
                    help="steps a timing round (default: MLP 200, CNN 20)")
    ap.add_argument("--keep", help="work in this directory and keep it")
    a = ap.parse_args()
    torch.set_num_threads(1)
    print("torch %s (%d threads for the comparison, 2 for the timing), CPU capability %s, "
          "bf16 on this CPU: %s" % (torch.__version__, torch.get_num_threads(),
                                    torch.backends.cpu.get_cpu_capability(),
                                    "avx512_bf16" in open("/proc/cpuinfo").read()))
    sys.exit(each_model(a, "bf16_torch.", compare))


if __name__ == "__main__":
    main()
