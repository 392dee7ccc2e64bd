"""asv benchmarks (a), (b), (d), (e) and (j): element-wise chain bandwidth, matmul FLOP rate, training steps/s
and Keras fit samples/s, per framework.

A framework that is not installed is skipped (its setup raises ``NotImplementedError``); one that
computes a wrong result fails in setup, so it is never reported as fast.
"""

from __future__ import annotations

from benchmarks import conv_workloads, keras_workloads, tf1_workloads, workloads
from benchmarks.timing import best_of


class _Throughput:
    """Shared setup: build the case for one framework and check it against NumPy."""

    number = 1
    warmup_time = 0.5
    timeout = 600
    case: workloads.Case

    def _prepare(self, workload: str, framework: str, **sizes: int) -> None:
        self.case = workloads.build(workload, framework, **sizes)
        self.case.check()

    def _rate(self) -> float:
        return self.case.rate(best_of(self.case.call, repeat=5, warmup=1, min_seconds=1.0).best)


class ElementwiseChain(_Throughput):
    """(a) ``x = tanh(a*x + b) * sigmoid(x) - 0.5*x`` over 2^22 float32, 20 iterations in one call."""

    params = [list(workloads.CHAIN_IMPLS)]
    param_names = ["framework"]

    def setup(self, framework: str) -> None:
        self._prepare("chain", framework)

    def time_chain(self, framework: str) -> None:
        self.case.call()

    def track_chain_bandwidth(self, framework: str) -> float:
        return self._rate()

    track_chain_bandwidth.unit = "GB/s"


class MatMul(_Throughput):
    """(b) float32 matmul, GFLOP/s (2 FLOPs per multiply-add)."""

    params = [list(workloads.MATMUL_IMPLS), list(workloads.MATMUL_SHAPES)]
    param_names = ["framework", "shape"]

    def setup(self, framework: str, shape: str) -> None:
        m, k, n = workloads.MATMUL_SHAPES[shape]
        self._prepare("matmul", framework, m=m, k=k, n=n)

    def time_matmul(self, framework: str, shape: str) -> None:
        self.case.call()

    def track_matmul_flops(self, framework: str, shape: str) -> float:
        return self._rate()

    track_matmul_flops.unit = "GFLOP/s"


class Convolution(_Throughput):
    """(j) a forward 3x3 convolution and ReLU, GFLOP/s (C1: a ResNet stage, C2: the Keras CNN's second)."""

    kind = "conv"
    params = [list(conv_workloads.CONV_IMPLS), list(conv_workloads.CONV_SIZES)]
    param_names = ["framework", "shape"]

    def setup(self, framework: str, shape: str) -> None:
        self._prepare(self.kind, framework, **conv_workloads.CONV_SIZES[shape])

    def time_conv(self, framework: str, shape: str) -> None:
        self.case.call()

    def track_conv_flops(self, framework: str, shape: str) -> float:
        return self._rate()

    track_conv_flops.unit = "GFLOP/s"


class ConvolutionStep(Convolution):
    """(k) the same convolutions' training steps: the gradients of x and w, GFLOP/s (three products' worth)."""

    kind = "convstep"
    params = [list(conv_workloads.STEP_IMPLS), list(conv_workloads.CONV_SIZES)]


class Training(_Throughput):
    """(d) 100 SGD steps of the MLP 784-h1-h2-10 in one call (W1: batch 32, 256/128; W2: batch 256, 1024/1024)."""

    params = [list(workloads.TRAIN_IMPLS), list(workloads.TRAIN_SIZES)]
    param_names = ["framework", "workload"]
    timeout = 1800

    def setup(self, framework: str, workload: str) -> None:
        self._prepare("train", framework, **workloads.TRAIN_SIZES[workload])

    def time_train(self, framework: str, workload: str) -> None:
        self.case.call()

    def track_train_steps(self, framework: str, workload: str) -> float:
        return self._rate()

    track_train_steps.unit = "steps/s"


class KerasFit(_Throughput):
    """(e) one epoch of Keras ``fit``: K1, a CNN on 28x28x1; K2, an LSTM(128) over 64 steps (batch 32, 100 steps)."""

    params = [list(keras_workloads.KERAS_IMPLS), list(keras_workloads.KERAS_SIZES)]
    param_names = ["framework", "workload"]
    timeout = 1800

    def setup(self, framework: str, workload: str) -> None:
        self._prepare("keras", framework, **keras_workloads.KERAS_SIZES[workload])

    def time_fit_epoch(self, framework: str, workload: str) -> None:
        self.case.call()

    def track_fit_samples(self, framework: str, workload: str) -> float:
        return self._rate()

    track_fit_samples.unit = "samples/s"


class TF1Session(_Throughput):
    """(f) seed 004's TF1 graph: a feed_dict Session.run per step against infeed + loops.repeat in one run."""

    params = [list(tf1_workloads.TF1_IMPLS), list(tf1_workloads.TF1_SIZES)]
    param_names = ["framework", "workload"]

    def setup(self, framework: str, workload: str) -> None:
        self._prepare("tf1", framework, **tf1_workloads.TF1_SIZES[workload])

    def time_session_steps(self, framework: str, workload: str) -> None:
        self.case.call()

    def track_session_steps(self, framework: str, workload: str) -> float:
        return self._rate()

    track_session_steps.unit = "steps/s"
