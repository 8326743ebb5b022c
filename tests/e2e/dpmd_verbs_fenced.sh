# Every dpmctl verb of dpmd_verbs.sh on fenced devices: the ASan daemon's
# test backend, whose device memory faults when host code touches it
# outside a backend call, so get-blob, checkpoints, loads, sync, eval and
# predictor extraction are shown to move every byte through the backend.
DPM_TEST_KIND=fenced exec sh tests/e2e/dpmd_verbs.sh
