# Image decode and augment against Pillow: tests/tools/image_ref.py writes
# JPEG and PNG files (gray, RGB, RGBA, LA, palette; baseline, progressive
# and 4:4:4 JPEGs; 150x90 to 3000x2400 pixels), runs build/tests/image_tool
# over them (training boxes for three epochs, evaluation boxes, one and three
# channels) and recomputes every output with Pillow (draft, convert, the box
# resampled BILINEAR, mirror, normalise): PNG outputs must be equal, JPEG
# ones within 1 level (0 seen with the Pillow 13.0 wheel), every box where
# torchvision's arithmetic puts it, every DCT scale the one Pillow's draft
# rule picks, and scales 1 and 8 both exercised. Pillow comes from PyPI in
# build/onnx-venv (make deps); without it the test says why and fails.
. tests/e2e_lib.sh
PY=build/onnx-venv/bin/python
[ -x "$PY" ] || die "image_vs_pil: no build/onnx-venv: make deps creates it (numpy and pillow \
from PyPI)"
"$PY" -c 'import PIL, numpy' 2>/dev/null ||
  die "image_vs_pil: build/onnx-venv lacks pillow or numpy (make deps installs them from PyPI)"
[ -x build/tests/image_tool ] || die "image_vs_pil: build/tests/image_tool is not built"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$PY" tests/tools/image_ref.py build/tests/image_tool "$T"
