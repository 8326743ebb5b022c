"""Checks one ONNX export of dpm (tests/e2e/onnx_export.sh): the model passes
onnx.checker.check_model(full_check=True), declares IR 8 and opset 17, and
onnxruntime's output 0 on the first COUNT images of an IDX file (raw pixels
times the model's dpm.input_scale, which must equal --scale) equals the
reference written by `dpmctl predict --out` within --tol (max |ort - dpm|).

usage: onnx_check.py MODEL.onnx REF.bin IMAGES.gz COUNT SCALE [--tol T]
Prints "NAME: checker ok, max |ort - dpm| = X over N x D"; exits 1 on any
failure, saying which."""
import gzip
import struct
import sys

import numpy as np
import onnx
import onnxruntime as ort


def fail(msg):
    print("onnx_check: " + msg, file=sys.stderr)
    sys.exit(1)


def main(argv):
    tol = 1e-5
    if "--tol" in argv:
        i = argv.index("--tol")
        tol = float(argv[i + 1])
        del argv[i:i + 2]
    if len(argv) != 6:
        fail("usage: onnx_check.py MODEL.onnx REF.bin IMAGES.gz COUNT SCALE [--tol T]")
    path, ref_path, images, count, scale = argv[1], argv[2], argv[3], int(argv[4]), float(argv[5])

    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    if m.ir_version != 8:
        fail("ir_version %d, expected 8" % m.ir_version)
    opsets = {o.domain: o.version for o in m.opset_import}
    if opsets != {"": 17}:
        fail("opset_import %r, expected {'': 17}" % opsets)
    meta = {p.key: p.value for p in m.metadata_props}
    if np.float32(float(meta.get("dpm.input_scale", "nan"))) != np.float32(scale):
        fail("dpm.input_scale %r, the spec's input.scale is %r" % (meta.get("dpm.input_scale"), scale))
    ops = sorted({n.op_type for n in m.graph.node})

    with gzip.open(images, "rb") as f:
        magic, n, h, w = struct.unpack(">IIII", f.read(16))
        if magic != 0x803:
            fail("%s is not an IDX image file" % images)
        n = min(n, count)
        px = np.frombuffer(f.read(n * h * w), dtype=np.uint8)
    inp = m.graph.input[0]
    dims = [d.dim_value for d in inp.type.tensor_type.shape.dim[1:]]
    if inp.type.tensor_type.shape.dim[0].dim_param != "N":
        fail("input %s has no batch dimension N" % inp.name)
    x = (px.astype(np.float32) * np.float32(scale)).reshape([n] + dims)

    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    y = sess.run(None, {inp.name: x})[0]
    ref = np.fromfile(ref_path, dtype="<f4")
    if ref.size != y.size:
        fail("dpm wrote %d values, onnxruntime computed %d (%s)" % (ref.size, y.size, y.shape))
    ref = ref.reshape(y.shape)
    diff = float(np.max(np.abs(y.astype(np.float64) - ref.astype(np.float64))))
    print("%s: checker ok (ops %s), max |ort - dpm| = %.3g over %s"
          % (m.graph.name, " ".join(ops), diff, "x".join(map(str, y.shape))))
    if not diff <= tol:
        fail("%s: max |ort - dpm| = %g exceeds %g" % (m.graph.name, diff, tol))


main(sys.argv)
