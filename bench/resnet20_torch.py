"""PyTorch's run of examples/resnet20_fmnist_jpeg.yaml: the same net, recipe
and JPEG tar shards, to set the goal dpm's run is held to.

  python bench/resnet20_torch.py [SHARD_DIR] [--steps N]

SHARD_DIR is `make fmnist-shards`'s build/data/fmnist-jpeg. Needs torch and
torchvision (scripts/torch-venv.sh makes a venv with both); not run by any
test. What is the same as dpm's run, and how:
  data      the tar shards read with tarfile, torchvision's transforms on
            PIL images through a DataLoader with 2 workers: train
            RandomResizedCrop(28, scale (0.5, 1), ratio (3/4, 4/3)) and
            RandomHorizontalFlip; eval Resize(32) and CenterCrop(28);
            (pixel - 72.9) / 90.0; a shuffled global batch of 128
  net       ResNet-20 as the spec writes it: bias-less 3x3 Convs with MSRA
            init (normal, std sqrt(2 / fan_out)), SpatialBN (eps 1e-5,
            running statistics' momentum 0.9 in Caffe2's sense), 1x1
            projection shortcuts, global average pool, FC with Caffe2's
            Xavier init (uniform, +-sqrt(3 / fan_in)) and bias 0
  replicas  2 of 64: each half of the batch normalises with its own
            statistics, the loss is the mean of the halves' means, and the
            running statistics are the first half's (the master device's,
            broadcast), as dpm's parallel.devices [cpu:0, cpu:1] does
  update    Caffe2's Nesterov momentum SGD (dpm's: m' = mu m + lr (g + wd
            p); p -= (1 + mu) m' - mu m), mu 0.9, weight decay 1e-4 on
            Conv and FC weights only; lr 0.1 x cosine over 469 steps x
            linear warm-up from 0 over 50, read at the step's iteration
            (0 at the first)
  length    one epoch: 469 steps
It prints the test accuracy and the median step time."""
import argparse
import io
import math
import statistics
import tarfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision.transforms as T
from PIL import Image

MEAN, STD = 72.9 / 255, 90.0 / 255


def index(paths):
    """(path, offset, size, label) of every sample, in shard order."""
    out = []
    for path in paths:
        with tarfile.open(path) as tf:
            jpg, cls = {}, {}
            for m in tf.getmembers():
                stem, ext = m.name.rsplit(".", 1)
                if ext == "jpg":
                    jpg[stem] = (m.offset_data, m.size)
                elif ext == "cls":
                    cls[stem] = int(tf.extractfile(m).read())
            out += [(path, *jpg[k], cls[k]) for k in sorted(jpg)]
    return out


class Shards(torch.utils.data.Dataset):
    def __init__(self, samples, transform):
        self.samples, self.transform, self.files = samples, transform, {}

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, off, size, label = self.samples[i]
        f = self.files.get(path) or self.files.setdefault(path, open(path, "rb"))
        f.seek(off)
        im = Image.open(io.BytesIO(f.read(size))).convert("L")
        return self.transform(im), label


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.a_bn = nn.BatchNorm2d(cout)
        self.b = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b_bn = nn.BatchNorm2d(cout)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.b_bn(self.b(F.relu(self.a_bn(self.a(x)))))
        return F.relu(y + (self.proj(x) if self.proj else x))


class ResNet20(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, 1, 1, bias=False)
        self.conv1_bn = nn.BatchNorm2d(16)
        blocks, cin = [], 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(3):
                blocks.append(Block(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, 10)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                m.momentum = 0.1
        r = math.sqrt(3.0 / 64)
        nn.init.uniform_(self.fc.weight, -r, r)
        nn.init.zeros_(self.fc.bias)

    def forward(self, x):
        x = self.blocks(F.relu(self.conv1_bn(self.conv1(x))))
        return self.fc(x.mean((2, 3)))


def lr_at(it, steps):
    t = min(it, steps)
    rate = 0.1 * 0.5 * (1 + math.cos(math.pi * t / steps))
    return rate * (it / 50 if it < 50 else 1.0)


def step(model, bufs, x, y, it, steps):
    halves = torch.chunk(torch.arange(len(x)), 2)
    model.zero_grad(set_to_none=True)
    saved = None
    for k, h in enumerate(halves):
        if k == 1:
            saved = [b.clone() for b in model.buffers()]
        loss = F.cross_entropy(model(x[h]), y[h]) / len(halves)
        loss.backward()
    with torch.no_grad():
        for b, s in zip(model.buffers(), saved):
            b.copy_(s)
        lr = lr_at(it, steps)
        for p, m in bufs:
            wd = 1e-4 if p.dim() > 1 else 0.0
            g = p.grad + wd * p
            old = m.clone()
            m.mul_(0.9).add_(g, alpha=lr)
            p.sub_(1.9 * m - 0.9 * old)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", nargs="?", default="build/data/fmnist-jpeg")
    ap.add_argument("--steps", type=int, default=469)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(2)
    norm = [T.ToTensor(), T.Normalize([MEAN], [STD])]
    train = Shards(index([f"{a.dir}/train-{i:06d}.tar" for i in range(6)]),
                   T.Compose([T.RandomResizedCrop(28, (0.5, 1.0), (3 / 4, 4 / 3)),
                              T.RandomHorizontalFlip()] + norm))
    test = Shards(index([f"{a.dir}/test-000000.tar"]),
                  T.Compose([T.Resize(32), T.CenterCrop(28)] + norm))
    loader = torch.utils.data.DataLoader(train, 128, shuffle=True, num_workers=2,
                                         persistent_workers=True)
    model = ResNet20()
    bufs = [(p, torch.zeros_like(p)) for p in model.parameters()]
    model.train()
    times, it = [], 0
    while it < a.steps:
        for x, y in loader:
            t0 = time.perf_counter()
            step(model, bufs, x, y, it, 469)
            times.append(time.perf_counter() - t0)
            it += 1
            if it % 50 == 0:
                print(f"step {it}  median step {statistics.median(times) * 1e3:.1f} ms",
                      flush=True)
            if it == a.steps:
                break
    model.eval()
    right = 0
    with torch.no_grad():
        for x, y in torch.utils.data.DataLoader(test, 500, num_workers=2):
            right += (model(x).argmax(1) == y).sum().item()
    print(f"steps: {it}\ntest accuracy: {right / len(test):.4f}\n"
          f"median step: {statistics.median(times) * 1e3:.1f} ms (compute, 2 threads)")


if __name__ == "__main__":
    main()
