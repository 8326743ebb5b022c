#!/bin/sh
# make gpu-bundle: everything the GPU checks need on a host that has
# nothing of ours installed (a bare CUDA image), in one folder:
#   run.sh          the entry script (tests/gpu/entry.sh)
#   bin/*.gz        dpmd, dpmctl, dpm-train, gpu_test, bench-gpu (debug info
#                   stripped, gzipped)
#   lib/*.gz        the shared libraries they load that are neither glibc,
#                   libstdc++, libgcc_s nor CUDA's (OpenBLAS, protobuf-c, ...:
#                   what ldd resolves here), gzipped
#   lib/dpm/*.gz    the CUDA plugin and its probe (stripped, gzipped)
#   cuda-libs       the CUDA libraries the plugin and probe need (their
#                   NEEDED entries), which the host must have
#   data/fashion-mnist/*.gz  Fashion-MNIST as Debian ships it (all of it)
#   examples/*.yaml the examples, their data paths made relative
#                   (data/fashion-mnist/...), which run.sh makes absolute
#   MANIFEST        "sha256 size path" of every file above
# Built from make's outputs (nothing is compiled here); fails when the
# bundle would pass its size limit.
#
#   sh tests/gpu/bundle.sh OUTDIR BUILD
set -eu
out=$1
build=$2
max_bytes=$((56 * 1024 * 1024))
data=/usr/share/datasets/fashion-mnist
progs="dpmd dpmctl dpm-train tests/gpu_test bench/gpu"
plugin="libdpm_cuda.so libdpm_cuda_probe.so"

die() {
  echo "gpu-bundle: $*" >&2
  exit 1
}
for p in $progs $plugin; do
  [ -f "$build/$p" ] || die "$build/$p is not built (make CUDA=0 builds no plugin)"
done
tmp="$out.tmp"
rm -rf "$tmp"
mkdir -p "$tmp/bin" "$tmp/lib/dpm" "$tmp/data/fashion-mnist" "$tmp/examples"

# name SRC DEST: stripped of debug info, gzipped
pack() {
  strip --strip-debug -o "$2" "$1"
  gzip -n -f "$2"
}
for p in $progs; do
  pack "$build/$p" "$tmp/bin/$(echo "$p" | sed 's|^bench/|bench-|; s|.*/||')"
done
for p in $plugin; do
  pack "$build/$p" "$tmp/lib/dpm/$p"
done

# The libraries the host lacks: every one ldd resolves, less the C and C++
# runtimes (the host's own must serve) and CUDA's (the host's).
system='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s)\.so'
cuda='^lib(cuda|cudart|cublas|cublasLt|cudnn|cudnn_[a-z_]*|nccl|nvrtc|nvJitLink|cufft|curand|cusparse|cusolver)\.so'
for p in $progs $plugin; do
  ldd "$build/$p"
done | awk '$2 == "=>" { print $1, $3 } $2 == "=>" && $3 == "not" { print "missing", $1 }' |
  sort -u >"$tmp/ldd"
if grep '^missing' "$tmp/ldd"; then
  die "libraries not found here (ldd): $(grep '^missing' "$tmp/ldd" | cut -d' ' -f2 | tr '\n' ' ')"
fi
while read -r name path; do
  echo "$name" | grep -Eq "$system|$cuda" && continue
  cp -L "$path" "$tmp/lib/$name"
  gzip -n -f "$tmp/lib/$name"
done <"$tmp/ldd"
rm "$tmp/ldd"
for p in $plugin; do
  objdump -p "$build/$p" | awk '$1 == "NEEDED" { print $2 }'
done | grep -E "$cuda" | sort -u >"$tmp/cuda-libs"

for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
  t10k-labels-idx1-ubyte.gz; do
  cp "$data/$f" "$tmp/data/fashion-mnist/$f"
done
for f in fmnist_mlp.yaml fmnist_cnn.yaml; do
  sed "s|$data/|data/fashion-mnist/|" "examples/$f" >"$tmp/examples/$f"
  grep -q "/usr/share" "$tmp/examples/$f" && die "examples/$f names /usr/share beyond $data"
done
cp tests/gpu/entry.sh "$tmp/run.sh"
chmod 755 "$tmp/run.sh"

(cd "$tmp" && find . -type f ! -name MANIFEST | sed 's|^\./||' | sort | while read -r f; do
  echo "$(sha256sum "$f" | cut -d' ' -f1) $(stat -c %s "$f") $f"
done >MANIFEST)
total=$(du -sb "$tmp" | cut -f1)
[ "$total" -le "$max_bytes" ] || die "$total bytes, over the $max_bytes limit"
rm -rf "$out"
mv "$tmp" "$out"
echo "gpu-bundle: $out, $(wc -l <"$out/MANIFEST") files, $total bytes"
