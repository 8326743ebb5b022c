# The commands only a fleet job's coordinator may send a shard (train, load,
# sync, pause, resume) need the job's secret, which the coordinator hands
# each shard in its join; `forwarded` is a flag any client with the token
# sets. Two dpmd on 127.0.0.1 (A coordinates, B is shard 1) run a tiny job:
# a forged forwarded train sent to B, with no secret or a guessed one, is
# refused (DENIED) and B stays ready at iteration 0, as does A; a train at A
# (forwarded by A with the secret) then trains both shards to the same
# iteration; no status, list or metrics answer mentions a secret. Needs
# build/tests/nnsend.
. tests/e2e_lib.sh
. tests/dpmd_lib.sh
. tests/fleet_lib.sh
NNSEND=build/tests/nnsend
[ -x "$NNSEND" ] || die "missing $NNSEND: make $NNSEND"

PA=$(free_port)
PB=$(free_port_not "$PA")
EA=tcp://127.0.0.1:$PA EB=tcp://127.0.0.1:$PB
up A "$EA"
up B "$EB"
{
  cat <<'YAML'
name: tiny
input: {reader: synthetic, batch_size: 8, num_examples: 64, shape: [1, 8, 8], num_classes: 4}
forward:
YAML
  tiny_ops
  cat <<'YAML'
parallel:
  devices: [cpu:0]
  rendezvous: {store: daemon, timeout_ms: 3000}
YAML
} >"$T/tiny.yaml"
at "$EA" submit "$T/tiny.yaml" --name m --shards "$EA,$EB" >/dev/null
own_state() { json_str "$(at "$1" status m | sed 's/,"shards":.*/}/')" state; }
own_iter() { json_field "$(at "$1" status m | sed 's/,"shards":.*/}/')" iter; }
is_ready() { [ "$(own_state "$1")" = ready ]; }
poll 20 "B ready" is_ready "$EB"

# ---- forged forwarded trains at B: refused -------------------------------------
TOKEN=$(cat "$TOK")
for secret in "" "0123456789abcdef0123456789abcdef"; do
  # shellcheck disable=SC2086
  got=$("$NNSEND" "$EB" forwarded-train m "$TOKEN" $secret)
  case $got in
  "reply DENIED "*"coordinated by $EA: a forwarded train without the job's secret"*) ;;
  *) die "a forged forwarded train (secret '$secret') at B: $got" ;;
  esac
done
sleep 0.5 # a train accepted would be stepping by now
expect "B's state after the forgeries" "$(own_state "$EB")" ready
expect "B's iteration after the forgeries" "$(own_iter "$EB")" 0
expect "A's state after the forgeries" "$(own_state "$EA")" ready

# ---- the coordinator's own train still reaches B ----------------------------------
s=$(at "$EA" train m --iters 7 --wait --no-progress)
expect "A's iteration" "$(json_field "$s" iter)" 7
at_7() { [ "$(own_iter "$EB")" = 7 ] && is_ready "$EB"; }
poll 10 "B ready at iteration 7" at_7

# ---- nothing a client reads shows the secret ------------------------------------------
for ep in "$EA" "$EB"; do
  for v in "status m" list metrics; do
    # shellcheck disable=SC2086
    case $(at "$ep" $v) in *secret*) die "$v at $ep mentions a secret" ;; esac
  done
done
at "$EA" delete m >/dev/null
echo "ok: forged forwarded trains refused at shard 1 (no secret, a guess); the coordinator's train reached it"
