#!/bin/sh
# A virtualenv with PyTorch and torchvision (CPU builds) in build/torch-venv,
# for the comparisons that run PyTorch (bench/resnet20_torch.py,
# bench/bf16_torch.py, bench/clip_torch.py; bench/decode
# --pil build/torch-venv/bin/python adds torchvision's DataLoader rows). No
# test or make target uses it. The README's figures were taken with torch
# 2.15.0 and torchvision 0.29.2 on this project's 2-vCPU VM.
#   sh scripts/torch-venv.sh
set -e
cd "$(dirname "$0")/.."
V=build/torch-venv
[ -x "$V/bin/python" ] || python3 -m venv "$V"
# PyTorch's CPU builds where download.pytorch.org answers, else PyPI's
# (CUDA builds, which run on the CPU as well).
"$V/bin/pip" install --quiet --index-url https://download.pytorch.org/whl/cpu torch torchvision ||
  "$V/bin/pip" install --quiet torch torchvision
"$V/bin/pip" install --quiet numpy pillow
"$V/bin/python" -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__)'
