# Where a client's paths and a fleet job's rendezvous store may lead, end
# to end, on two daemons A and B (127.0.0.1, one token):
#  1. extract-predictor --out into a model's checkpoints folder is refused
#     as one of dpmd's own files, and creates nothing on the way;
#  2. directories and a symlink named like checkpoints numbered above a
#     model's iteration (planted in its checkpoints folder): three
#     checkpoints each answer OK and each survives retention (keep 3); the
#     planted entries stay untouched; a restart brings the model back at
#     its iteration;
#  3. a file store (file:///DIR) outside the state dir and allowed_paths:
#     a submit is refused (DENIED) at A before any shard is asked; a join
#     at B, whose allowed_paths do not hold DIR while A's do, is refused
#     and fails the submit; nothing is created at DIR either way;
#  4. a file store under both daemons' allowed paths forms the job and
#     trains; a symlink in the store's path is refused;
#  5. redis://HOST:PORT, not in A's rendezvous_stores, is refused at once
#     (DENIED, naming rendezvous_stores), and so is a file store on a
#     daemon whose rendezvous_stores leaves file out.
# The daemons run under ASan+UBSan (DPMD, default build/asan-bin/dpmd) and
# report nothing.
. tests/e2e_lib.sh
DPMD=${DPMD:-build/asan-bin/dpmd}
. tests/dpmd_lib.sh
. tests/fleet_lib.sh
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1

PA=$(free_port)
PB=$(free_port)
while [ "$PB" = "$PA" ]; do PB=$(free_port); done
EA=tcp://127.0.0.1:$PA EB=tcp://127.0.0.1:$PB
mkdir -p "$T/allowed" "$T/shared" "$T/outside" "$T/a-only"
cat >"$T/a.yaml" <<EOF
allowed_paths: [$T/allowed, $T/shared, $T/a-only]
EOF
cat >"$T/b.yaml" <<EOF
allowed_paths: [$T/shared]
EOF
up A "$EA" "$TOK" "--config $T/a.yaml"
up B "$EB" "$TOK" "--config $T/b.yaml"
SA=$T/A

# spec NAME PARALLEL: the tiny model with parallel: {PARALLEL}
spec() {
  echo "name: $1"
  echo "input: {reader: synthetic, batch_size: 8, num_examples: 64, shape: [1, 8, 8], num_classes: 4}"
  echo "forward:"
  tiny_ops
  echo "parallel: {$2}"
}
# down NAME ENDPOINT: shuts daemon NAME down; it must exit 0
down() {
  eval "_p=\$PID_$1"
  at "$2" shutdown >/dev/null
  wait "$_p" || die "$1 exited with $?: $(tail -5 "$T/$1.log")"
  PIDS=$(echo " $PIDS " | sed "s/ $_p / /")
}
no_model() {
  case $(at "$1" list) in *"\"name\":\"$2\""*) die "$2 is listed at $1: $(at "$1" list)" ;; esac
}

# ---- 1. a refused --out creates nothing -------------------------------------------
spec t "devices: [cpu:0]" >"$T/t.yaml"
at "$EA" submit "$T/t.yaml" >/dev/null
at "$EA" train t --iters 5 --wait --no-progress >/dev/null
C=$SA/models/t/checkpoints
for it in 997 998 999; do
  o=$(refused_at "$EA" DENIED extract-predictor t --inputs data --outputs softmax \
    --out "$(ckpt_path "$C" $it)")
  mentions "one of dpmd's own files" "$o"
  [ ! -e "$(ckpt_path "$C" $it)" ] || die "a refused --out left $(ckpt_path "$C" $it): $(ls -la "$C")"
done
o=$(refused_at "$EA" DENIED extract-predictor t --inputs data --outputs softmax \
  --out "$SA/models/new/p")
[ ! -e "$SA/models/new" ] || die "a refused --out left $SA/models/new"

# ---- 2. planted entries do not erase checkpoints ------------------------------------
mkdir "$(ckpt_path "$C" 997)" "$(ckpt_path "$C" 998)"
ln -s "$T/outside" "$(ckpt_path "$C" 999)"
for it in 10 15 20; do
  at "$EA" train t --iters 5 --wait --no-progress >/dev/null
  o=$(at "$EA" checkpoint t)
  expect "checkpoint at $it: path" "$(json_str "$o" path)" "$(ckpt_path "$C" $it)"
  [ -f "$(ckpt_path "$C" $it)" ] || die "checkpoint $it answered OK but is gone: $(ls -la "$C")"
done
for it in 10 15 20; do
  [ -f "$(ckpt_path "$C" $it)" ] || die "checkpoint $it is gone: $(ls -la "$C")"
done
[ ! -e "$(ckpt_path "$C" 5)" ] || die "retention kept 4 checkpoints: $(ls -la "$C")"
[ -d "$(ckpt_path "$C" 997)" ] && [ -d "$(ckpt_path "$C" 998)" ] && [ -L "$(ckpt_path "$C" 999)" ] ||
  die "the planted entries changed: $(ls -la "$C")"
down A "$EA"
up A "$EA" "$TOK" "--config $T/a.yaml"
expect "t's iteration after a restart" "$(json_field "$(at "$EA" status t)" iter)" 20
at "$EA" delete t >/dev/null

# ---- 3. a file store outside the allowed paths ----------------------------------------
spec f "devices: [cpu:0], rendezvous: {store: file://$T/outside/store, timeout_ms: 3000}" >"$T/f.yaml"
o=$(refused_at "$EA" DENIED submit "$T/f.yaml" --shards "$EA,$EB")
mentions "parallel.rendezvous.store 'file://$T/outside/store'" "$o"
mentions "is not under the state dir or an allowed path" "$o"
no_model "$EA" f
no_model "$EB" f
spec g "devices: [cpu:0], rendezvous: {store: file://$T/a-only/store, timeout_ms: 3000}" >"$T/g.yaml"
o=$(refused_at "$EA" DENIED submit "$T/g.yaml" --shards "$EA,$EB")
mentions "shard 1 did not join" "$o"
mentions "is not under the state dir or an allowed path" "$o"
no_model "$EA" g
no_model "$EB" g
for d in "$T/outside" "$T/a-only"; do
  [ -z "$(ls -A "$d")" ] || die "a refused store made: $(ls -laR "$d")"
done

# ---- 4. a file store under the allowed paths ------------------------------------------
spec s "devices: [cpu:0], rendezvous: {store: file://$T/shared/rdv/store, timeout_ms: 5000}" >"$T/s.yaml"
at "$EA" submit "$T/s.yaml" --shards "$EA,$EB" >/dev/null
at "$EA" train s --iters 4 --wait --no-progress >/dev/null
expect "s at B" "$(json_field "$(at "$EB" status s)" iter)" 4
[ -n "$(ls -A "$T/shared/rdv/store")" ] || die "the file store holds nothing"
at "$EA" delete s >/dev/null
mkdir -p "$T/shared/ln"
ln -s "$T/outside" "$T/shared/ln/store"
spec l "devices: [cpu:0], rendezvous: {store: file://$T/shared/ln/store/x, timeout_ms: 3000}" >"$T/l.yaml"
o=$(refused_at "$EA" DENIED submit "$T/l.yaml" --shards "$EA,$EB")
mentions "crosses a symbolic link" "$o"
no_model "$EA" l
no_model "$EB" l
[ -z "$(ls -A "$T/outside")" ] || die "a store through a symlink made: $(ls -laR "$T/outside")"

# ---- 5. only the stores rendezvous_stores allows ------------------------------------------
RP=$(free_port)
spec r "devices: [cpu:0], rendezvous: {store: \"redis://127.0.0.1:$RP\", timeout_ms: 3000}" >"$T/r.yaml"
t=$(ms)
o=$(refused_at "$EA" DENIED submit "$T/r.yaml" --shards "$EA,$EB")
within_ms "$t" 2000 "the refusal of a store not allowed"
mentions "is not allowed on this dpmd (rendezvous_stores in its config: daemon, file)" "$o"
no_model "$EA" r
down A "$EA"
printf 'rendezvous_stores: [daemon]\n' >>"$T/a.yaml"
up A "$EA" "$TOK" "--config $T/a.yaml"
o=$(refused_at "$EA" DENIED submit "$T/s.yaml" --shards "$EA,$EB")
mentions "(rendezvous_stores in its config: daemon)" "$o"
no_model "$EA" s
down A "$EA"
down B "$EB"
sanitizers_quiet "$T/A.log"
sanitizers_quiet "$T/B.log"
echo "ok: paths and rendezvous stores confined"
exit 0
