"""The Pillow side of build/bench/decode (run by it with --pil PYTHON).

  decode_pil.py DIR ROUNDS DPM_TRAIN_IPS DPM_EVAL_IPS

Every DIR/*.jpg read into memory first (as dpm's bench holds its files),
then per image, one thread, images per CPU second (process time), the
median of ROUNDS passes:
  pil-draft train   Image.open, RandomResizedCrop's box (torchvision's
                    algorithm, Python's random), draft at the DCT scale
                    dpm picks, convert RGB, resize((224, 224), BILINEAR,
                    box), mirror with p 1/2, numpy: float32, (x - mean) /
                    std, HWC -> CHW (dpm's pipeline in Pillow)
  pil-draft eval    Resize(256) + CenterCrop(224) as one box resize, draft
  tv train          torchvision's transforms without torch: crop, resize
                    to 224 (no draft), flip, ToTensor (/ 255) and Normalize
                    with numpy
  tv eval           resize the short side to 256, crop 224, as above
  torch train       when torch and torchvision import (scripts/torch-venv.sh):
                    PyTorch's DataLoader (the main process, batches of 32,
                    one thread) over the files with torchvision's
                    RandomResizedCrop(224), RandomHorizontalFlip, ToTensor,
                    Normalize on Image.open(...).convert("RGB")
  torch eval        the same with Resize(256), CenterCrop(224)
and the ratio of dpm's images/s to each."""
import glob
import io
import math
import random
import sys
import time

import numpy as np
from PIL import Image

CROP, RESIZE = 224, 256
MEAN = np.array([123.675, 116.28, 103.53], np.float32)
STD = np.array([58.395, 57.12, 57.375], np.float32)
TV_MEAN = MEAN / 255
TV_STD = STD / 255


def rrc_box(w, h, rng):
    area = w * h
    lo, hi = math.log(3 / 4), math.log(4 / 3)
    for _ in range(10):
        target = area * rng.uniform(0.08, 1.0)
        aspect = math.exp(rng.uniform(lo, hi))
        cw, ch = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            return rng.randint(0, w - cw), rng.randint(0, h - ch), cw, ch
    return 0, 0, w, h


def eval_geometry(w, h):
    if w <= h:
        nw, nh = RESIZE, int(RESIZE * h / w)
    else:
        nw, nh = int(RESIZE * w / h), RESIZE
    return nw, nh, int(round((nw - CROP) / 2.0)), int(round((nh - CROP) / 2.0))


def scale_of(bw, bh):
    fit = min(int(bw // CROP), int(bh // CROP))
    return next((s for s in (8, 4, 2) if fit >= s), 1)


def normalise(im, flip, mean, std, div):
    a = np.asarray(im, np.float32)
    if div != 1:
        a = a / div
    if flip:
        a = a[:, ::-1]
    return ((a - mean) / std).transpose(2, 0, 1).copy()


def pil_draft(data, train, rng):
    im = Image.open(io.BytesIO(data))
    w, h = im.size
    if train:
        x, y, bw, bh = rrc_box(w, h, rng)
        flip = rng.random() < 0.5
    else:
        nw, nh, left, top = eval_geometry(w, h)
        sx, sy = w / nw, h / nh
        x, y, bw, bh = left * sx, top * sy, CROP * sx, CROP * sy
        flip = False
    s = scale_of(bw, bh)
    im.draft("RGB", (w // s, h // s))
    im = im.convert("RGB")
    r = im.resize((CROP, CROP), Image.BILINEAR, box=(x / s, y / s, (x + bw) / s, (y + bh) / s))
    return normalise(r, flip, MEAN, STD, 1)


def torchvision_like(data, train, rng):
    im = Image.open(io.BytesIO(data)).convert("RGB")
    w, h = im.size
    if train:
        x, y, bw, bh = rrc_box(w, h, rng)
        r = im.crop((x, y, x + bw, y + bh)).resize((CROP, CROP), Image.BILINEAR)
        flip = rng.random() < 0.5
    else:
        nw, nh, left, top = eval_geometry(w, h)
        r = im.resize((nw, nh), Image.BILINEAR).crop((left, top, left + CROP, top + CROP))
        flip = False
    return normalise(r, flip, TV_MEAN, TV_STD, 255.0)


def torch_rows(files, rounds, dpm):
    """PyTorch's DataLoader with torchvision's transforms, when installed."""
    try:
        import torch
        import torchvision.transforms as T
    except ImportError:
        print("  (torch rows: torch and torchvision not importable here)")
        return
    torch.set_num_threads(1)
    norm = [T.ToTensor(), T.Normalize(list(TV_MEAN), list(TV_STD))]
    pipes = {"train": T.Compose([T.RandomResizedCrop(CROP), T.RandomHorizontalFlip()] + norm),
             "eval": T.Compose([T.Resize(RESIZE), T.CenterCrop(CROP)] + norm)}

    class Files(torch.utils.data.Dataset):
        def __init__(self, tf):
            self.tf = tf

        def __len__(self):
            return len(files)

        def __getitem__(self, i):
            return self.tf(Image.open(io.BytesIO(files[i])).convert("RGB"))

    for mode in ("train", "eval"):
        times = []
        for r in range(rounds):
            torch.manual_seed(r)
            loader = torch.utils.data.DataLoader(Files(pipes[mode]), 32, num_workers=0)
            t0 = time.process_time()
            for _ in loader:
                pass
            times.append(time.process_time() - t0)
        ips = len(files) / sorted(times)[len(times) // 2]
        print(f"  {'torch ' + mode:<20} {ips:8.1f} images/s   dpm {mode} / this: "
              f"x{dpm[mode] / ips:.2f}")


def main():
    d, rounds = sys.argv[1], int(sys.argv[2])
    dpm = {"train": float(sys.argv[3]), "eval": float(sys.argv[4])}
    files = [open(p, "rb").read() for p in sorted(glob.glob(d + "/*.jpg"))]
    for name, fn in (("pil-draft", pil_draft), ("tv", torchvision_like)):
        for mode in ("train", "eval"):
            times = []
            for r in range(rounds):
                rng = random.Random(r)
                t0 = time.process_time()
                for data in files:
                    fn(data, mode == "train", rng)
                times.append(time.process_time() - t0)
            ips = len(files) / sorted(times)[len(times) // 2]
            print(f"  {name + ' ' + mode:<20} {ips:8.1f} images/s   dpm {mode} / this: "
                  f"x{dpm[mode] / ips:.2f}")
    torch_rows(files, rounds, dpm)


if __name__ == "__main__":
    main()
