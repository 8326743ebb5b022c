# Several dpmd train one model (a fleet job) on 127.0.0.1: three daemons
# A, B and D share a token (D may not read the dataset), C has another.
# Refusals first: shards whose first is not the daemon that takes the
# submit, a peer with a wrong token (DENIED, naming it), a peer nobody
# listens at (naming it), each leaving no model behind; a peer that accepts
# but cannot build fails the submit within seconds (not at the rendezvous
# timeout), with its reason. Then the MLP as 2 shards x 1 device, submitted to A with
# --shards: status at B says shard 1 coordinated by A, train or pause sent
# to B are refused, train --iters 20 at A trains both, status and
# list at A show both shards at iteration 20, every parameter on both
# shards equals (to 1e-5 of the tensor's largest value) that of the same
# spec on 1 shard x 2 devices in one dpmd (the same global batch), A's
# rendezvous store holds the job's formation until delete, which removes
# the job and its files on both daemons. Then parallel.shards in the spec
# forms a job too; with B killed, status at A gives shard 1 no state and
# says it cannot be reached, and delete at A deletes it there and fails
# naming shard 1.
. tests/e2e_lib.sh
. tests/dpmd_lib.sh
. tests/fleet_lib.sh

BAD=$T/bad-token
printf 'another-secret\n' >"$BAD"
chmod 600 "$BAD"
PA=$(free_port)
PB=$(free_port)
while [ "$PB" = "$PA" ]; do PB=$(free_port); done
PC=$(free_port)
while [ "$PC" = "$PA" ] || [ "$PC" = "$PB" ]; do PC=$(free_port); done
PD=$(free_port)
while [ "$PD" = "$PA" ] || [ "$PD" = "$PB" ] || [ "$PD" = "$PC" ]; do PD=$(free_port); done
EA=tcp://127.0.0.1:$PA EB=tcp://127.0.0.1:$PB EC=tcp://127.0.0.1:$PC ED=tcp://127.0.0.1:$PD
up A "$EA" "$TOK"
up B "$EB" "$TOK"
up C "$EC" "$BAD"
echo "data_paths: [$T]" >"$T/d.yaml"
up D "$ED" "$TOK" "--config $T/d.yaml"

# no_model ENDPOINT NAME: NAME is neither listed nor in the state dir
no_model() {
  case $(at "$1" list) in *"\"name\":\"$2\""*) die "$2 is listed at $1: $(at "$1" list)" ;; esac
}
# shard_of JSON ID: the object of shard ID in a status answer's shards
shard_of() { echo "$1" | grep -o "{\"shard_id\":$2,\"endpoint\":[^}]*}"; }
metric_at() {
  build/dpmctl --token-file "$TOK" --endpoint "$1" metrics |
    awk -v k="$2" '$1 == k { print $2 }'
}
SPEC=examples/fmnist_mlp.yaml
t0=$(ms)

# ---- refusals ------------------------------------------------------------------
o=$(refused_at "$EA" INVALID submit $SPEC --name m --shards "$EB,$EA")
mentions "$EB is another daemon" "$o"
no_model "$EA" m
no_model "$EB" m
o=$(refused_at "$EA" DENIED submit $SPEC --name m --shards "$EA,$EC")
mentions "shard 1 did not join: $EC refused: bad or missing token" "$o"
mentions "share one token" "$o"
no_model "$EA" m
grep -q "request refused: bad or missing token" "$T/C.log" || die "C logged no refusal"
FREE=$(free_port)
while [ "$FREE" = "$PA" ] || [ "$FREE" = "$PB" ] || [ "$FREE" = "$PC" ]; do FREE=$(free_port); done
t=$(ms)
o=$(refused_at "$EA" TIMEOUT submit $SPEC --name m --shards "$EA,tcp://127.0.0.1:$FREE")
mentions "shard 1 did not join: cannot reach tcp://127.0.0.1:$FREE" "$o"
within_ms "$t" 12000 "the refusal of an unreachable shard"
no_model "$EA" m
t=$(ms)
o=$(refused_at "$EA" IO submit $SPEC --name m --shards "$EA,$ED")
mentions "shard 1 could not build" "$o"
mentions "$DATA" "$o"
within_ms "$t" 15000 "the refusal of a shard that cannot build (rendezvous timeout 60 s)"
no_model "$EA" m
no_model "$ED" m
expect "formations after refusals" "$(metric_at "$EA" dpmd_rendezvous_formations)" 0

# ---- 2 shards x 1 device ------------------------------------------------------------
s=$(at "$EA" submit $SPEC --name m --devices cpu:0 --shards "$EA,$EB")
expect "submit state" "$(json_str "$s" state)" ready
expect "submit shard_id" "$(json_field "$s" shard_id)" 0
expect "submit num_shards" "$(json_field "$s" num_shards)" 2
s=$(at "$EB" status m)
expect "B's shard" "$(json_field "$s" shard_id)" 1
expect "B's coordinator" "$(json_str "$s" coordinator)" "$EA"
[ -f "$T/B/models/m/spec.pb" ] || die "B saved no spec"
expect "formations while m exists" "$(metric_at "$EA" dpmd_rendezvous_formations)" 1
at_least "$(metric_at "$EA" dpmd_rendezvous_keys)" 1 || die "no rendezvous keys at A"
o=$(refused_at "$EB" STATE train m --iters 5)
mentions "shard 1 of 2 of a job coordinated by $EA" "$o"
o=$(refused_at "$EB" STATE pause m)
mentions "shard 1 of 2 of a job coordinated by $EA: send pause there" "$o"
s=$(at "$EA" train m --iters 20 --wait --no-progress)
expect "iter after train --wait" "$(json_field "$s" iter)" 20
s=$(at "$EA" status m)
for id in 0 1; do
  sh=$(shard_of "$s" $id)
  expect "shard $id iter" "$(json_field "$sh" iter)" 20
  expect "shard $id state" "$(json_str "$sh" state)" ready
done
expect "shard 1 endpoint" "$(json_str "$(shard_of "$s" 1)" endpoint)" "$EB"
expect "B's own iter" "$(json_field "$(at "$EB" status m)" iter)" 20
l=$(at "$EA" list)
[ -n "$(shard_of "$l" 1)" ] || die "list shows no shards: $l"
build/dpmctl --token-file "$TOK" --endpoint "$EA" list | grep -q "^m  *ready  *20/20  .*  shards 2$" ||
  die "human list: $(build/dpmctl --token-file "$TOK" --endpoint "$EA" list)"

# ---- the same spec on 1 shard x 2 devices -----------------------------------------------
at "$EA" submit $SPEC --name r --devices cpu:0,cpu:1 >/dev/null
at "$EA" train r --iters 20 --wait --no-progress >/dev/null
# close A B: the raw float32 files hold as many values, and they differ by at
# most 1e-5 of B's largest magnitude
close() {
  [ "$(wc -c <"$1")" = "$(wc -c <"$2")" ] || die "$1 and $2 differ in size"
  od -An -v -tf4 "$1" | tr -s ' ' '\n' | sed '/^$/d' >"$1.txt"
  od -An -v -tf4 "$2" | tr -s ' ' '\n' | sed '/^$/d' >"$2.txt"
  paste "$1.txt" "$2.txt" | awk '
    { d = $1 - $2; if (d < 0) d = -d; if (d > md) md = d
      b = $2 < 0 ? -$2 : $2; if (b > mb) mb = b; n++ }
    END { if (n == 0 || md > 1e-5 * mb) { print "max diff " md ", largest " mb ", " n " values"; exit 1 } }'
}
for b in fc1_w fc1_b fc2_w fc2_b pred_w pred_b; do
  at "$EA" get-blob m $b --out "$T/m0.$b" >/dev/null
  at "$EB" get-blob m $b --out "$T/m1.$b" >/dev/null
  at "$EA" get-blob r $b --out "$T/r.$b" >/dev/null
  why=$(close "$T/m0.$b" "$T/r.$b") || die "$b: 2 shards x 1 device vs 1 x 2: $why"
  why=$(close "$T/m1.$b" "$T/r.$b") || die "$b on shard 1 vs 1 x 2: $why"
done
equal=0
for b in fc1_w fc1_b fc2_w fc2_b pred_w pred_b; do
  cmp -s "$T/m0.$b" "$T/r.$b" && equal=$((equal + 1))
done
at "$EA" delete r >/dev/null

# ---- delete: everywhere, with the formation --------------------------------------------
at "$EA" delete m >/dev/null
no_model "$EA" m
no_model "$EB" m
[ ! -e "$T/A/models/m" ] || die "A kept m's files"
[ ! -e "$T/B/models/m" ] || die "B kept m's files"
expect "formations after delete" "$(metric_at "$EA" dpmd_rendezvous_formations)" 0
expect "keys after delete" "$(metric_at "$EA" dpmd_rendezvous_keys)" 0

# ---- parallel.shards in the spec --------------------------------------------------------
{
  sed '/^parallel:/,$d' $SPEC
  cat <<YAML
parallel:
  devices: [cpu:0]
  net_type: simple
  shards: [$EA, $EB]
  rendezvous: {store: daemon, timeout_ms: 30000}
YAML
} >"$T/fleet.yaml"
s=$(at "$EA" submit "$T/fleet.yaml" --name s)
expect "spec shards: num_shards" "$(json_field "$s" num_shards)" 2
expect "spec shards: B's shard" "$(json_field "$(at "$EB" status s)" shard_id)" 1
at "$EA" delete s >/dev/null
no_model "$EB" s

# ---- a shard's daemon gone: status names it, delete says where it failed ----------------
at "$EA" submit "$T/fleet.yaml" --name s >/dev/null
kill -9 "$PID_B"
wait "$PID_B" 2>/dev/null || true
t=$(ms)
s=$(at "$EA" status s)
within_ms "$t" 6000 "status with a shard's daemon gone"
sh=$(shard_of "$s" 1)
case $sh in *'"state"'*) die "shard 1 of a dead daemon has a state: $sh" ;; esac
case $(json_str "$sh" error) in "cannot reach $EB"*) ;; *) die "shard 1's error: $sh" ;; esac
o=$(refused_at "$EA" TIMEOUT delete s)
mentions "s: deleted here, not on every shard: shard 1: cannot reach $EB" "$o"
no_model "$EA" s
expect "formations after a delete with a shard gone" \
  "$(metric_at "$EA" dpmd_rendezvous_formations)" 0

for d in A C D; do
  build/dpmctl --token-file "$([ $d = C ] && echo "$BAD" || echo "$TOK")" \
    --endpoint "$(eval echo "\$E$d")" shutdown >/dev/null || die "shutdown $d"
  wait "$(eval echo "\$PID_$d")" || die "dpmd $d exited with $?: $(tail -5 "$T/$d.log")"
done
PIDS=""
for d in A C D; do sanitizers_quiet "$T/$d.log"; done
echo "fleet_loopback: ok ($(($(ms) - t0)) ms; $equal of 6 parameters bitwise equal to 1 x 2)"
