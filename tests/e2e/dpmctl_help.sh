# Help and errors that say what was meant:
#  1. dpmctl help VERB (and VERB --help) for every verb of the table: the
#     usage, a description, each of the verb's options with its help, the
#     global options, an example that parses; dpmctl help lists every verb
#     with a summary. dpmctl help and the bash completion name the verbs of
#     the command list (common/commands.def), in its order, internal
#     commands left out.
#  2. dpmd --help and dpm-train --help: each flag with its help.
#  3. A spec with op ReLU gets "did you mean 'Relu'"; --devices gpu:0 points
#     at cuda:N; a mistyped command or option gets the nearest one.
#  4. predict on a folder holding an ONNX export says so (no daemon).
. tests/e2e_lib.sh
. tests/dpmd_lib.sh

# ---- 1. dpmctl help ------------------------------------------------------------
list=$(build/dpmctl help) || die "dpmctl help exited $?"
verbs=$(echo "$list" | sed -n '/^commands:/,/^$/s/^  \([a-z-]*\)  *[a-z].*/\1/p')
[ "$(echo "$verbs" | wc -l)" -ge 20 ] || die "dpmctl help lists too few commands: $list"
# the list's verbs: each row's first string, rows joined up to the next one
listed=$(awk '/^DPM_(REQUEST|LOCAL)\(/ { if (row) print row; row = $0; next }
  row { row = row " " $0 } END { if (row) print row }' common/commands.def |
  grep -v DPM_CMDF_INTERNAL | sed 's/^[^"]*"\([a-z-]*\)".*/\1/')
expect "dpmctl help's commands" "$(echo $verbs)" "$(echo $listed)"
completion=$(build/dpmctl --completion bash | sed -n "s/^  local verbs='\(.*\)'$/\1/p")
expect "the completion's commands" "$completion" "$(echo $listed)"
for v in $verbs; do
  h=$(build/dpmctl help "$v") || die "dpmctl help $v exited $?"
  expect "dpmctl $v --help" "$(build/dpmctl "$v" --help)" "$h"
  echo "$h" | grep -q "^usage: dpmctl \[global options\] $v" || die "help $v: no usage: $h"
  # a description: the paragraph after the usage
  desc=$(echo "$h" | sed -n '/^$/,/^$/p' | sed -n 2p)
  [ "$(echo "$desc" | wc -w)" -ge 5 ] || die "help $v: no description: $h"
  echo "$h" | grep -q '^global options:' || die "help $v: no global options: $h"
  echo "$h" | grep -q '^  --timeout MS  .*milliseconds' || die "help $v: --timeout: $h"
  # every option of the usage line is listed with its help
  for o in $(echo "$h" | sed -n '/^usage:/,/^$/p' | grep -o -- '--[a-z-]*' | sort -u); do
    echo "$h" | grep -q "^  $o\( [^ ]*\)\{0,1\}  *[a-z(]" ||
      echo "$h" | grep -A1 "^  $o" | sed -n 2p | grep -q '^   *[a-z(]' ||
      die "help $v: option $o has no help: $h"
  done
  ex=$(echo "$h" | sed -n '/^example:/{n;p;}' | sed 's/^ *//')
  case $ex in "dpmctl "*"$v"*) ;; *) die "help $v: example '$ex'" ;; esac
done
h=$(build/dpmctl help submit)
echo "$h" | grep -q '^  --checkpoint-every N|Ns' || die "help submit: $h"
echo "$h" | grep -q 'examples/fmnist_mlp.yaml' || die "help submit example: $h"
echo "$h" | grep -q 'docs/SPEC.md' || die "help submit does not point at the spec reference"
# an option's help for one verb: predict's --count counts images
build/dpmctl help predict | grep -q '^  --count N  .*images' || die "help predict --count"
build/dpmctl help watch | grep -q '^  --count N  .*events' || die "help watch --count"

# ---- 2. dpmd and dpm-train --help ----------------------------------------------
h=$("$DPMD" --help) || die "dpmd --help exited $?"
for o in --config --listen --events --state-dir --devices --token-file --log-level \
  --foreground --version; do
  echo "$h" | grep -q "^  $o\( [^ ]*\)\{0,1\}  *[A-Za-z]" || die "dpmd --help: $o: $h"
done
echo "$h" | grep -q 'config key log_level' || die "dpmd --help: no config keys: $h"
h=$(build/dpm-train --help) || die "dpm-train --help exited $?"
for o in --devices --epochs --iters --json --resume --checkpoint --shard; do
  echo "$h" | grep -q "^  $o  *[A-Za-z(]" || die "dpm-train --help: $o: $h"
done

# ---- 3. errors that say what was meant -----------------------------------------
out=$(build/dpmctl staus 2>&1) && die "dpmctl staus succeeded"
case $out in *"did you mean 'status'"*) ;; *) die "dpmctl staus: $out" ;; esac
out=$(build/dpmctl train m --iter 3 2>&1) && die "dpmctl train --iter succeeded"
case $out in *"did you mean '--iters'"*) ;; *) die "dpmctl train --iter: $out" ;; esac

start_dpmd
spec() {
  printf 'name: %s\ninput: {reader: synthetic, batch_size: 4, num_examples: 64, shape: [1, 4, 4], num_classes: 4}\nforward:\n' "$1"
  tiny_ops | sed "s/op: Relu/op: $2/"
}
spec relu ReLU >"$T/relu.yaml"
out=$(refused 1 SPEC submit "$T/relu.yaml")
mentions "unknown op 'ReLU'; did you mean 'Relu'?" "$out"
spec good Relu >"$T/good.yaml"
out=$(ctl_fails 1 submit "$T/good.yaml" --devices gpu:0)
mentions "GPUs are cuda:N" "$out"
echo 'parallel: {devices: [gpu:0]}' >>"$T/good.yaml"
out=$(build/dpmctl --json submit "$T/good.yaml" 2>/dev/null) && die "gpu:0 in a spec accepted"
mentions "GPUs are cuda:N" "$out"
stop_dpmd

# ---- 4. predict on an ONNX export ----------------------------------------------
mkdir "$T/onnx"
printf '\010\007' >"$T/onnx/model.onnx"
out=$(ctl_fails 1 predict "$T/onnx" --input "$DATA/t10k-images-idx3-ubyte.gz")
mentions "holds an ONNX model (model.onnx), not a dpm predictor" "$out"
mentions "use onnxruntime" "$out"
echo "ok"
