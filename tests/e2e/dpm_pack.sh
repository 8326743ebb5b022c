# dpm-pack: Fashion-MNIST's test IDX set (10,000 images) packed into PNG tar
# shards and into an LMDB; the summaries' counts; every sample read back
# through dpm's tar and lmdb readers decodes to exactly its IDX pixels
# (build/tests/pack_check, libpng), also after GNU tar re-archives them in
# pax and GNU formats with long names; a JPEG + --resize pack reads back with
# the right sizes; an image folder with a file that is no image and a
# symlink is packed with both rejected and named; usage errors exit 2; a
# progress bar on a terminal; the man page comes from the flag table.
. tests/e2e_lib.sh
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
D=/usr/share/datasets/fashion-mnist
img=$D/t10k-images-idx3-ubyte.gz lab=$D/t10k-labels-idx1-ubyte.gz
field() { echo "$1" | sed -n "s/^$2: //p"; }

out=$(build/dpm-pack --images $img --labels $lab --out "$dir/t" --per-shard 4000) ||
  die "pack tar: $out"
expect samples "$(field "$out" samples)" 10000
expect classes "$(field "$out" classes)" 10
expect shards "$(field "$out" shards)" 3
expect rejected "$(field "$out" rejected)" 0
[ -f "$dir/t-000002.tar" ] && [ ! -e "$dir/t-000003.tar" ] || die "shards: $(ls "$dir")"
tar tf "$dir/t-000001.tar" | head -2 | tr '\n' ' ' | grep -q '^00004000.png 00004000.cls ' ||
  die "tar members: $(tar tf "$dir/t-000001.tar" | head -2)"
chk=$(build/tests/pack_check tar $img $lab "$dir"/t-00000*.tar) || die "tar read-back: $chk"
expect "tar checked" "$(field "$chk" checked)" 10000

# the same samples re-archived by GNU tar under a directory name over 100
# bytes, as pax (path records) and as GNU (././@LongLink names): read alike
long=$dir/x/$(printf 'd%.0s' $(seq 1 120))
mkdir -p "$long"
cat "$dir"/t-00000*.tar | tar xf - -i -C "$long"
for fmt in pax gnu; do
  tar cf "$dir/$fmt.tar" --format=$fmt --sort=name -C "$dir/x" "$(basename "$long")"
  chk=$(build/tests/pack_check tar $img $lab "$dir/$fmt.tar") || die "$fmt tar: $chk"
  expect "$fmt checked" "$(field "$chk" checked)" 10000
done
rm -rf "$dir/x" "$dir/pax.tar" "$dir/gnu.tar"

out=$(build/dpm-pack --images $img --labels $lab --out "$dir/db" --format lmdb) ||
  die "pack lmdb: $out"
expect "lmdb samples" "$(field "$out" samples)" 10000
chk=$(build/tests/pack_check lmdb $img $lab "$dir/db") || die "lmdb read-back: $chk"
expect "lmdb checked" "$(field "$chk" checked)" 10000

# --shard-size: no shard over it, every sample in one
out=$(build/dpm-pack --images $img --labels $lab --out "$dir/s" --shard-size 2000000 \
  --encode jpeg --quality 80 --resize 32) || die "pack jpeg: $out"
for f in "$dir"/s-*.tar; do
  [ "$(stat -c %s "$f")" -le 2000000 ] || die "$f is over --shard-size"
done
n=$(cat "$dir"/s-*.tar | tar tf - -i 2>/dev/null | grep -c '\.jpg$')
expect "jpeg members" "$n" 10000
tar xf "$dir/s-000000.tar" -C "$dir" 00000000.jpg
file "$dir/00000000.jpg" | grep -q 'JPEG image data.*32x32' || die "jpeg: $(file "$dir/00000000.jpg")"

# a folder: 2 classes, one file that is not a PNG, one symlink: 2 rejected
mkdir -p "$dir/f/cat" "$dir/f/dog"
tar xf "$dir/t-000000.tar" -C "$dir" 00000000.png 00000001.png
cp "$dir/00000000.png" "$dir/f/cat/a.png"
cp "$dir/00000001.png" "$dir/f/dog/b.png"
echo "not a png" > "$dir/f/dog/c.png"
ln -s "$dir/00000000.png" "$dir/f/dog/d.png"
out=$(build/dpm-pack --folder "$dir/f" --out "$dir/ft" --no-progress) || die "pack folder: $out"
expect "folder samples" "$(field "$out" samples)" 2
expect "folder classes" "$(field "$out" classes)" 2
expect "folder rejected" "$(field "$out" rejected)" 2
echo "$out" | grep -q "rejected dog/c.png: its first bytes are not a PNG file's" ||
  die "folder reasons: $out"
echo "$out" | grep -q "sample dog/d.png: not a regular file" || die "folder reasons: $out"
[ "$(tar xOf "$dir/ft-000000.tar" 00000001.cls)" = 1 ] || die "folder label of dog"

set +e
build/dpm-pack --images $img --out "$dir/x" >/dev/null 2>&1; [ $? -eq 2 ] || die "no --labels: want 2"
msg=$(build/dpm-pack --folder "$dir/f" --out "$dir/x" --resize 32 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$msg" | grep -q "apply to IDX input" || die "--resize on a folder: $msg"
msg=$(build/dpm-pack --images "$dir/nope" --labels $lab --out "$dir/x" 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$msg" | grep -q "nope" || die "missing input: $rc $msg"
set -e
# a progress bar on a terminal (script gives it one)
script -qec "build/dpm-pack --images $img --labels $lab --out $dir/tty --per-shard 2000" \
  /dev/null >"$dir/tty.out" 2>&1 || die "dpm-pack on a terminal: $(cat "$dir/tty.out")"
grep -aq '\] [0-9]*/10000  [0-9.]* MB of images' "$dir/tty.out" ||
  die "no progress bar: $(cat -v "$dir/tty.out")"
build/dpm-pack --man | grep -q '^\.TH dpm.-pack 1' || die "man page"
echo "dpm_pack: ok"
