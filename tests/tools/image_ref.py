#!/usr/bin/env python3
"""Reference check of dpm's image decode and augment against Pillow.

  image_ref.py IMAGE_TOOL WORKDIR

Writes JPEG and PNG files of several sizes and kinds into WORKDIR (Pillow
encodes them), runs IMAGE_TOOL (build/tests/image_tool) over them in
training mode (three epochs), evaluation mode, and with one channel, and
recomputes each output with Pillow: Image.draft at the scale the tool chose
(checked against draft's own rule applied to the box: the largest of 8, 4,
2, 1 not above min(box w // crop, box h // crop)), convert, the box / scale
resampled to crop x crop with BILINEAR as two resize calls (the horizontal
pass: resize((crop, height), box=(x0, 0, x1, height)), then the vertical
one), mirror, (x - mean) / std. Two calls fix the order of the passes:
Pillow's source (ImagingResampleInner) runs the horizontal one first, as
dpm does, but the Pillow 13.0 wheel's single resize call runs the vertical
one first for some tall boxes, which moves some values by one level (the
intermediate rounding); the script prints that gap without checking it. It checks every
box: training boxes lie inside the image with an area fraction in [0.08, 1]
and aspect in [3/4, 4/3] (or are the fallback centre crop); evaluation boxes
are torchvision's Resize + CenterCrop arithmetic.

PNG outputs must equal Pillow's bit for bit; JPEG outputs within
JPEG_BOUND pixel levels (both decode with libjpeg-turbo's ISLOW IDCT and
fancy upsampling; Pillow's wheel bundles its own build). Prints the largest
difference seen per kind, and, for information only, how far Pillow's
torchvision-style resize-then-crop (eval) lies from the box resample.
Exit 0 when every check passes, 1 otherwise."""
import math
import os
import subprocess
import sys

import numpy as np
from PIL import Image

JPEG_BOUND = 1.0  # pixel levels (of 255), before normalisation
CROP, RESIZE = 224, 256
MEAN = (123.675, 116.28, 103.53)
STD = (58.395, 57.12, 57.375)


def pattern(w, h, rng):
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1),
                     ((x // 8 + y // 8) % 2) * 200 + 20], -1)
    noise = rng.integers(0, 48, (h, w, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def make_images(d):
    rng = np.random.default_rng(27)
    files = []

    def save(name, img, **kw):
        p = os.path.join(d, name)
        img.save(p, **kw)
        files.append(p)

    rgb = lambda w, h: Image.fromarray(pattern(w, h, rng), "RGB")
    save("imagenet.jpg", rgb(500, 375), quality=90)
    save("large.jpg", rgb(1600, 1200), quality=90)
    save("huge.jpg", rgb(3000, 2400), quality=80)
    save("tall.jpg", rgb(333, 517), quality=85, subsampling=0)
    save("prog.jpg", rgb(640, 480), quality=90, progressive=True)
    save("gray.jpg", rgb(900, 700).convert("L"), quality=90)
    save("small.jpg", rgb(150, 90), quality=95)
    save("wide.png", rgb(800, 200))
    save("rgb.png", rgb(500, 375))
    save("gray.png", rgb(400, 300).convert("L"))
    save("rgba.png", rgb(320, 240).convert("RGBA"))
    save("la.png", rgb(260, 300).convert("LA"))
    save("palette.png", rgb(300, 300).quantize(64))
    return files


def draft_scale(bw, bh):
    scale = min(int(bw // CROP), int(bh // CROP))
    for s in (8, 4, 2, 1):
        if scale >= s:
            return s
    return 1


def eval_box(w, h):
    short, long_ = (w, h) if w <= h else (h, w)
    nshort, nlong = RESIZE, int(RESIZE * long_ / short)
    nw, nh = (nshort, nlong) if w <= h else (nlong, nshort)
    left = int(round((nw - CROP) / 2.0))
    top = int(round((nh - CROP) / 2.0))
    sx, sy = w / nw, h / nh
    x, y = left * sx, top * sy
    return (x, y, min((left + CROP) * sx, w) - x, min((top + CROP) * sy, h) - y), (nw, nh, left, top)


def check_box(train, w, h, box, flip, errors, name):
    x, y, bw, bh = box
    if train:
        if any(v != int(v) for v in box):
            errors.append(f"{name}: training box not integral: {box}")
        if not (x >= 0 and y >= 0 and bw > 0 and bh > 0 and x + bw <= w and y + bh <= h):
            errors.append(f"{name}: box {box} outside {w}x{h}")
        frac, aspect = bw * bh / (w * h), bw / bh
        fallback = (bw == w or bh == h) and x == (w - bw) // 2 and y == (h - bh) // 2
        # w and h are rounded: the aspect of the rounded box is within a pixel.
        lo_a, hi_a = (0.75 * (bh - 0.5) - 0.5) / bh, (4 / 3 * (bh + 0.5) + 0.5) / bh
        if not fallback and not (0.08 * 0.98 <= frac <= 1 and lo_a <= aspect <= hi_a):
            errors.append(f"{name}: box {box} area {frac:.3f} aspect {aspect:.3f} out of range")
    else:
        want, _ = eval_box(w, h)
        if any(abs(a - b) > 1e-9 * max(1, abs(b)) for a, b in zip(box, want)) or flip:
            errors.append(f"{name}: eval box {box} flip {flip}, torchvision's is {want}")


def reference(path, channels, scale, box, flip):
    mode = "RGB" if channels == 3 else "L"
    im = Image.open(path)
    if im.format == "JPEG":
        w, h = im.size
        im.draft(mode, (w // scale, h // scale))
    im = im.convert(mode)
    x0, y0 = box[0] / scale, box[1] / scale
    x1, y1 = (box[0] + box[2]) / scale, (box[1] + box[3]) / scale
    # The horizontal pass, then the vertical one, each a resize of one axis.
    h = im.resize((CROP, im.size[1]), Image.BILINEAR, box=(x0, 0, x1, im.size[1]))
    r = h.resize((CROP, CROP), Image.BILINEAR, box=(0, y0, CROP, y1))
    one = im.resize((CROP, CROP), Image.BILINEAR, box=(x0, y0, x1, y1))
    a, b = (np.asarray(v, np.float32).reshape(CROP, CROP, channels) for v in (r, one))
    if flip:
        a, b = a[:, ::-1], b[:, ::-1]
    return a, b, im


def run(tool, files, args):
    out = subprocess.run([tool, "--crop", str(CROP), "--resize", str(RESIZE),
                          "--mean", ",".join(map(str, MEAN)), "--std", ",".join(map(str, STD))]
                         + args + files, capture_output=True, text=True)
    if out.returncode not in (0, 1) or out.stderr:
        sys.exit(f"image_ref: {tool} failed ({out.returncode}): {out.stderr}")
    return out.stdout.splitlines()


def main():
    tool, d = sys.argv[1], sys.argv[2]
    files = make_images(d)
    errors, worst = [], {"png": 0.0, "jpeg": 0.0}
    tv_gap, seen_scales, compared = 0.0, set(), 0
    one_gap, one_diff, pixels = 0.0, 0, 0
    runs = [(["--epoch", str(e), "--seed", "5"], 3, True) for e in range(3)]
    runs += [(["--eval"], 3, False), (["--channels", "1", "--seed", "9"], 1, True),
             (["--eval", "--channels", "1"], 1, False)]
    for args, channels, train in runs:
        for line in run(tool, files, args):
            f = line.split()
            name = os.path.basename(f[0])
            if f[1] == "error":
                errors.append(f"{name} {' '.join(args)}: {' '.join(f[2:])}")
                continue
            w, h, scale, dw, dh = map(int, f[1:6])
            box = tuple(map(float, f[6:10]))
            flip = int(f[10])
            check_box(train, w, h, box, flip, errors, f"{name} {' '.join(args)}")
            is_jpeg = name.endswith(".jpg")
            want_scale = draft_scale(box[2], box[3]) if is_jpeg else 1
            if scale != want_scale:
                errors.append(f"{name}: scale {scale}, draft's rule gives {want_scale}")
            seen_scales.add(scale)
            ref, one, im = reference(f[0], channels, scale, box, flip)
            one_gap = max(one_gap, float(np.max(np.abs(one - ref))))
            one_diff += int(np.count_nonzero(one != ref))
            pixels += ref.size
            if im.size != (dw, dh):
                errors.append(f"{name}: decoded {dw}x{dh}, Pillow's draft {im.size}")
                continue
            got = np.fromfile(f[0] + ".f32", np.float32).reshape(channels, CROP, CROP)
            mean = np.array(MEAN[:channels], np.float32)
            std = np.array(STD[:channels], np.float32)
            want = ((ref - mean) / std).transpose(2, 0, 1)
            diff = float(np.max(np.abs(got - want) * std[:, None, None]))
            kind = "jpeg" if is_jpeg else "png"
            worst[kind] = max(worst[kind], diff)
            compared += 1
            if (kind == "png" and not np.array_equal(got, want)) or diff > JPEG_BOUND:
                errors.append(f"{name} {' '.join(args)}: differs from Pillow by {diff:.3g} levels")
            if not train and scale == 1:
                _, (nw, nh, left, top) = eval_box(w, h)
                tv = im.resize((nw, nh), Image.BILINEAR).crop((left, top, left + CROP, top + CROP))
                tv = np.asarray(tv, np.float32).reshape(CROP, CROP, channels)
                tv_gap = max(tv_gap, float(np.max(np.abs(tv - ref))))
    print(f"image_ref: {compared} outputs compared, scales seen {sorted(seen_scales)}")
    print(f"image_ref: largest difference to Pillow: PNG {worst['png']:g}, "
          f"JPEG {worst['jpeg']:g} levels (bound {JPEG_BOUND:g})")
    print(f"image_ref: Pillow's one-call resize against its two passes: up to {one_gap:g} "
          f"levels, {one_diff} of {pixels} values differ (not checked)")
    print(f"image_ref: eval, Pillow's resize-then-crop against its box resample: "
          f"up to {tv_gap:g} levels (not checked)")
    for e in errors:
        print("image_ref: FAIL", e)
    if 8 not in seen_scales or 1 not in seen_scales:
        print("image_ref: FAIL scales 1 and 8 not both exercised")
        return 1
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
