# One model, three topologies, the same parameters: two dpmd on 127.0.0.1
# (A coordinates, B joins; a shared token) train the Fashion-MNIST MLP and
# CNN (no BN), each in `simple` and `dag`, for 20 steps as 2 shards x 1
# device, as 1 shard x 2 devices and as 1 shard x 1 device at the same
# global batch (twice the per-device batch). Every parameter of the 2 x 1
# job, on both shards, and of the 1 x 1 model equals the 1 x 2 model's to
# 1e-5 of the tensor's largest magnitude (their checkpoints, compared by
# build/tests/ckpt_diff); the two shards of the 2 x 1 job hold bitwise the
# same values (get-blob).
. tests/e2e_lib.sh
. tests/dpmd_lib.sh
. tests/fleet_lib.sh

PA=$(free_port)
PB=$(free_port_not "$PA")
EA=tcp://127.0.0.1:$PA EB=tcp://127.0.0.1:$PB
up A "$EA"
up B "$EB"
# spec EXAMPLE NET BATCH OUT: the example with net_type NET and BATCH
# examples per device (the input's batch_size, the first in the file)
spec() {
  sed -e "0,/batch_size:/s/batch_size: *[0-9]*/batch_size: $3/" \
    -e "s/net_type: [a-z]*/net_type: $2/" "$1" >"$4"
  grep -q "net_type: $2" "$4" || die "$1 has no net_type to set"
}

DIFF=build/tests/ckpt_diff
MLP_BLOBS="fc1_w fc1_b fc2_w fc2_b pred_w pred_b"
CNN_BLOBS="conv1_w conv1_b conv2_w conv2_b fc3_w fc3_b pred_w pred_b"
for model in mlp cnn; do
  case $model in
  mlp) ex=examples/fmnist_mlp.yaml blobs=$MLP_BLOBS b=32 ;;
  cnn) ex=examples/fmnist_cnn.yaml blobs=$CNN_BLOBS b=8 ;;
  esac
  for net in simple dag; do
    spec "$ex" $net $b "$T/$model-$net.yaml"
    spec "$ex" $net $((2 * b)) "$T/$model-$net-x1.yaml"
    at "$EA" submit "$T/$model-$net.yaml" --name s --devices cpu:0 --shards "$EA,$EB" >/dev/null
    at "$EA" submit "$T/$model-$net.yaml" --name d --devices cpu:0,cpu:1 >/dev/null
    at "$EA" submit "$T/$model-$net-x1.yaml" --name o --devices cpu:0 >/dev/null
    for m in s d o; do
      expect "$model $net $m iter" "$(json_field "$(at "$EA" train $m --iters 20 --wait \
        --no-progress)" iter)" 20
    done
    ck_s=$(json_str "$(at "$EA" checkpoint s)" path)
    ck_d=$(json_str "$(at "$EA" checkpoint d)" path)
    ck_o=$(json_str "$(at "$EA" checkpoint o)" path)
    # every tensor within 1e-5 of the 1 x 2 model's (max |a-b| / max |a|)
    r=$($DIFF --max 1e-5 "$ck_d" "$ck_s") || die "$model $net: 2x1 vs 1x2: $r"
    r1=$($DIFF --max 1e-5 "$ck_d" "$ck_o") || die "$model $net: 1x1 vs 1x2: $r1"
    for blob in $blobs; do
      at "$EA" get-blob s "$blob" --out "$T/s0.$blob" >/dev/null
      at "$EB" get-blob s "$blob" --out "$T/s1.$blob" >/dev/null
      cmp -s "$T/s0.$blob" "$T/s1.$blob" || die "$model $net: $blob differs between the shards"
    done
    echo "$model $net after 20 steps, max relative difference to 1x2:" \
      "2x1 $(echo "$r" | sed -n 's/^max //p'), 1x1 $(echo "$r1" | sed -n 's/^max //p')"
    for m in s d o; do at "$EA" delete $m >/dev/null; done
  done
done
exit 0
