"""popjit's benchmarks: asv classes (``bench_*.py``) and a plain runner (``python -m benchmarks``).

The workloads are defined once in :mod:`benchmarks.workloads` and shared by both: (a) the
element-wise chain ``y = tanh(a*x + b) * sigmoid(x) - 0.5*x`` iterated in one on-device loop,
(b) float32 matmul, (c) first-call compile time in fresh processes (:mod:`benchmarks.firstcall`),
(d) an MLP's SGD training loop, 100 steps in one on-device loop (steps/s).
TensorFlow (XLA) and JAX are measured in the same run when they are importable.
"""
