# The CNN with precision.compute bf16 (f32 masters, bf16 working copies,
# activations and products) reaches >= 0.91 test accuracy with
# cnn_reaches_091.sh's recipe: two CPU replicas of 32, lr 0.03 decaying
# linearly to 0 over 4 epochs. Measured 0.9168 in 1 min 54 s (fp32:
# 0.9153).
CNN_PRECISION=bf16 . tests/e2e/cnn_reaches_091.sh
