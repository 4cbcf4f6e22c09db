"""Training benchmarks (run.py train-bench): FP32 vs mixed-precision training steps."""
