"""The benchmark workloads, defined once for asv and for ``python -m benchmarks``.

A :class:`Problem` is a workload at given sizes: inputs, the NumPy (float64) reference, the work per
call (bytes, FLOPs or training steps). :func:`instantiate` makes it a :class:`Case` for one framework: a
synchronised call whose result :meth:`Case.check` compares with the reference.
popjit and TensorFlow run the *same* user code (``make_chain(tf, ...)``, ``make_matmul(tf)``,
``make_train(tf, ...)``) with ``tf`` bound to ``popjit.tensorflow`` or to ``tensorflow``; JAX gets the
idiomatic equivalent (``jax.jit`` + ``lax.fori_loop`` or ``lax.scan``). popjit runs as an IPU user would:
on ``/device:IPU:0`` of a configured virtual IPU system, through ``IPUStrategy.run``.

The shared parts (frameworks, :class:`Problem`, :class:`Case`, the check) are in
:mod:`benchmarks.core`; the Keras workloads K1 and K2 in :mod:`benchmarks.keras_workloads`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

import numpy as np

from benchmarks import conv_workloads, keras_workloads, tf1_workloads
from benchmarks.core import (  # noqa: F401  (re-exported: the tests and asv use workloads.X)
    BUILT_IN,
    FRAMEWORKS,
    LABELS,
    PEERS,
    Case,
    Problem,
    Unavailable,
    WrongResult,
    available,
    check_result,
    import_peer,
    popjit_strategy,
    quiet_stderr,
)

CHAIN_N = 1 << 22
CHAIN_ITERS = 20
CHAIN_A = 0.7
CHAIN_B = 0.1
MATMUL_SHAPES: dict[str, tuple[int, int, int]] = {"1024x1024x1024": (1024, 1024, 1024), "256x784x256": (256, 784, 256)}
TRAIN_SIZES: dict[str, dict[str, int]] = {"W1": {"batch": 32, "h1": 256, "h2": 128},
                                          "W2": {"batch": 256, "h1": 1024, "h2": 1024}}
TRAIN_STEPS = 100
TRAIN_LR = 0.01
TRAIN_FEATURES = 784
TRAIN_CLASSES = 10


def problem(workload: str, **sizes: int) -> Problem:
    """The :class:`Problem` for ``workload`` (``chain``, ``matmul``, ``conv``, ``convstep``, ``train``, ``keras`` or
    ``tf1``) at ``sizes``."""
    if workload == "chain":
        return chain_problem(**sizes)
    if workload == "matmul":
        return matmul_problem(**sizes)
    if workload == "train":
        return train_problem(**sizes)
    if workload == "conv":
        return conv_workloads.conv_problem(**sizes)
    if workload == "convstep":
        return conv_workloads.step_problem(**sizes)
    if workload == "keras":
        return keras_workloads.keras_problem(**sizes)
    if workload == "tf1":
        return tf1_workloads.tf1_problem(**sizes)
    raise ValueError(f"unknown workload {workload!r}; expected 'chain', 'matmul', 'conv', 'convstep', 'train', 'keras' "
                     "or 'tf1'")


def problem_label(workload: str, **sizes: int) -> str:
    """The label of ``problem(workload, **sizes)`` without building it."""
    if workload == "chain":
        return f"chain {size_label(sizes.get('n', CHAIN_N))} f32 x{sizes.get('iters', CHAIN_ITERS)}"
    if workload == "matmul":
        return f"matmul {sizes.get('m', 1024)}x{sizes.get('k', 1024)}x{sizes.get('n', 1024)} f32"
    if workload == "train":
        s = {**TRAIN_SIZES["W1"], "steps": TRAIN_STEPS, **sizes}
        layers = "-".join(map(str, (TRAIN_FEATURES, s["h1"], s["h2"], TRAIN_CLASSES)))
        return f"train {layers} b{s['batch']} x{s['steps']}"
    if workload == "conv":
        return conv_workloads.conv_label(**sizes)
    if workload == "convstep":
        return conv_workloads.step_label(**sizes)
    if workload == "keras":
        return keras_workloads.keras_label(**sizes)
    if workload == "tf1":
        return tf1_workloads.tf1_label(**sizes)
    raise ValueError(f"unknown workload {workload!r}; expected 'chain', 'matmul', 'conv', 'convstep', 'train', 'keras' "
                     "or 'tf1'")


def frameworks_for(kind: str, frameworks: Iterable[str]) -> list[str]:
    """Those of ``frameworks`` that implement workloads of ``kind`` (``popjit-infeed`` only trains and runs
    TF1 sessions, ``popjit-gemm`` only multiplies)."""
    return [fw for fw in frameworks if fw in IMPLS[kind]]


def instantiate(p: Problem, framework: str) -> Case:
    """Build ``framework``'s implementation of ``p`` (its tracing and compiling happen on the first call)."""
    impls = IMPLS[p.kind]
    if framework not in impls:
        raise ValueError(f"unknown framework {framework!r} for {p.kind}; expected one of {tuple(impls)}")
    call, note = impls[framework](p)
    return Case(p, framework, call, note)


def build(workload: str, framework: str, **sizes: int) -> Case:
    """``instantiate(problem(workload, **sizes), framework)``."""
    return instantiate(problem(workload, **sizes), framework)


# -- (a) the element-wise chain ---------------------------------------------------------------------


def chain_input(n: int, seed: int = 0) -> np.ndarray:
    """``n`` float32 values in [-2, 2)."""
    return np.random.default_rng(seed).uniform(-2.0, 2.0, n).astype(np.float32)


def chain_numpy(x: np.ndarray, iters: int, a: float = CHAIN_A, b: float = CHAIN_B) -> np.ndarray:
    """``iters`` times ``x = tanh(a*x + b) * sigmoid(x) - 0.5*x`` in ``x``'s dtype."""
    dt = x.dtype.type
    a_, b_, half, one = dt(a), dt(b), dt(0.5), dt(1.0)
    for _ in range(iters):
        x = np.tanh(a_ * x + b_) * (one / (one + np.exp(-x))) - half * x
    return x


def chain_bytes(n: int, iters: int) -> float:
    """Bytes moved by the chain: one float32 read and one write per element per iteration."""
    return 2.0 * 4 * n * iters


def size_label(n: int) -> str:
    """``2^22`` for powers of two, else the number."""
    return f"2^{n.bit_length() - 1}" if n > 0 and n & (n - 1) == 0 else str(n)


def chain_problem(n: int = CHAIN_N, iters: int = CHAIN_ITERS) -> Problem:
    """(a) the chain over ``n`` float32, ``iters`` iterations in one call."""
    x = chain_input(n)
    return Problem("chain", problem_label("chain", n=n, iters=iters), (x,), iters,
                   chain_numpy(x.astype(np.float64), iters), chain_bytes(n, iters), "GB/s", rtol=1e-4, atol=1e-5)


def make_chain(tf: ModuleType, iters: int) -> Any:
    """The chain as IPU TensorFlow user code: ``iters`` steps in one on-device ``tf.range`` loop."""

    @tf.function(jit_compile=True)
    def chain(x, a, b):
        for _ in tf.range(iters):
            x = tf.tanh(a * x + b) * tf.sigmoid(x) - 0.5 * x
        return x

    return chain


def make_chain_jax(iters: int) -> Any:
    """The chain in JAX: ``jax.jit`` over a ``lax.fori_loop``."""
    jax = import_peer("jax")
    jnp, lax = jax.numpy, jax.lax

    @jax.jit
    def chain(x, a, b):
        def body(_, x):
            return jnp.tanh(a * x + b) * jax.nn.sigmoid(x) - 0.5 * x

        return lax.fori_loop(0, iters, body, x)

    return chain


def traces_to_one_loop(fn: Any, *args: Any) -> bool:
    """Whether a popjit ``tf.function`` traces to a graph with exactly one ``while`` loop."""
    graph = fn.get_concrete_function(*args).graph
    return sum(node.op == "while" for node in graph.walk()) == 1


def _chain_popjit(p: Problem) -> tuple[Callable[[], Any], str]:
    tf, strategy = popjit_strategy()
    fn = make_chain(tf, p.iters)
    args = (tf.constant(p.inputs[0]), tf.constant(CHAIN_A), tf.constant(CHAIN_B))
    return lambda: strategy.run(fn, args=args).numpy(), "IPUStrategy.run, tf.range"


def _chain_numpy(p: Problem) -> tuple[Callable[[], Any], str]:
    return lambda: chain_numpy(p.inputs[0], p.iters), "float32, a temporary per op"


def _chain_tf(p: Problem) -> tuple[Callable[[], Any], str]:
    tf = import_peer("tensorflow")
    fn = make_chain(tf, p.iters)
    args = (tf.constant(p.inputs[0]), tf.constant(CHAIN_A), tf.constant(CHAIN_B))
    return lambda: fn(*args).numpy(), "tf.function(jit_compile=True), tf.range"


def _chain_jax(p: Problem) -> tuple[Callable[[], Any], str]:
    jax = import_peer("jax")
    fn = make_chain_jax(p.iters)
    args = (jax.device_put(p.inputs[0]), np.float32(CHAIN_A), np.float32(CHAIN_B))
    return lambda: fn(*args).block_until_ready(), "jax.jit, lax.fori_loop"


CHAIN_IMPLS: dict[str, Callable[[Problem], tuple[Callable[[], Any], str]]] = {
    "popjit": _chain_popjit, "numpy": _chain_numpy, "tensorflow": _chain_tf, "jax": _chain_jax,
}


# -- (b) matmul ---------------------------------------------------------------------------------------


def matmul_inputs(m: int, k: int, n: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """float32 ``[m, k]`` and ``[k, n]`` operands in [-1, 1)."""
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)


def matmul_flops(m: int, k: int, n: int) -> float:
    """Multiply-adds counted as two FLOPs."""
    return 2.0 * m * k * n


def matmul_problem(m: int = 1024, k: int = 1024, n: int = 1024) -> Problem:
    """(b) float32 ``[m, k] @ [k, n]``."""
    a, b = matmul_inputs(m, k, n)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    # float32 sums of k products: allow 1e-5 of the largest result (a wrong result is off by O(1))
    atol = 1e-5 * float(np.max(np.abs(expected))) if expected.size else 0.0
    label = problem_label("matmul", m=m, k=k, n=n)
    return Problem("matmul", label, (a, b), 1, expected, matmul_flops(m, k, n), "GFLOP/s", rtol=1e-4, atol=atol)


def make_matmul(tf: ModuleType) -> Any:
    """``tf.matmul`` in a compiled ``tf.function`` (the same user code for popjit and TensorFlow)."""

    @tf.function(jit_compile=True)
    def matmul(a, b):
        return tf.matmul(a, b)

    return matmul


def _matmul_popjit(p: Problem) -> tuple[Callable[[], Any], str]:
    tf, strategy = popjit_strategy()
    fn = make_matmul(tf)
    args = tuple(tf.constant(v) for v in p.inputs)
    return lambda: strategy.run(fn, args=args).numpy(), "IPUStrategy.run"


def _matmul_popjit_gemm(p: Problem) -> tuple[Callable[[], Any], str]:
    """popjit with ``POPJIT_MATMUL=popjit``: its own gemm, whatever the setting outside."""
    from popjit import config

    run, _ = _matmul_popjit(p)

    def own_gemm() -> Any:
        with config.context(MATMUL="popjit"):
            return run()

    return own_gemm, "IPUStrategy.run, POPJIT_MATMUL=popjit"


def _matmul_numpy(p: Problem) -> tuple[Callable[[], Any], str]:
    a, b = p.inputs
    return lambda: a @ b, "BLAS (a @ b)"


def _matmul_tf(p: Problem) -> tuple[Callable[[], Any], str]:
    tf = import_peer("tensorflow")
    fn = make_matmul(tf)
    args = tuple(tf.constant(v) for v in p.inputs)
    return lambda: fn(*args).numpy(), "tf.function(jit_compile=True)"


def _matmul_jax(p: Problem) -> tuple[Callable[[], Any], str]:
    jax = import_peer("jax")
    fn = jax.jit(jax.numpy.matmul)
    args = tuple(jax.device_put(v) for v in p.inputs)
    return lambda: fn(*args).block_until_ready(), "jax.jit"


MATMUL_IMPLS: dict[str, Callable[[Problem], tuple[Callable[[], Any], str]]] = {
    "popjit": _matmul_popjit, "popjit-gemm": _matmul_popjit_gemm, "numpy": _matmul_numpy, "tensorflow": _matmul_tf,
    "jax": _matmul_jax,
}


# -- (d) a training loop ------------------------------------------------------------------------------

Params = list[np.ndarray]
Trainer = tuple[Callable[[], Any], Callable[[], Params]]


def train_init(h1: int, h2: int, seed: int = 2) -> Params:
    """The MLP ``784-h1-h2-10``'s float32 ``[w1, b1, w2, b2, w3, b3]``: Glorot-uniform weights, zero biases."""
    rng = np.random.default_rng(seed)
    sizes = (TRAIN_FEATURES, h1, h2, TRAIN_CLASSES)
    params = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        params += [rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32), np.zeros(fan_out, np.float32)]
    return params


def train_data(steps: int, batch: int, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """``steps`` batches: float32 ``[steps, batch, 784]`` pixels in [0, 1] and int32 ``[steps, batch]`` labels.

    Like MNIST, the classes are easy to tell apart: an image is its class's pattern (a fixed random
    fifth of the pixels) at a random intensity, plus noise. So the loss falls fast (from 2.3 to
    about 0.2 in W1's 100 steps) and a wrong gradient shows in it.
    """
    rng = np.random.default_rng(seed)
    patterns = (rng.uniform(0.0, 1.0, (TRAIN_CLASSES, TRAIN_FEATURES)) < 0.2).astype(np.float32)
    ys = rng.integers(0, TRAIN_CLASSES, (steps, batch)).astype(np.int32)
    intensity = rng.uniform(0.5, 1.0, (steps, batch, 1)).astype(np.float32)
    noise = rng.uniform(0.0, 0.3, (steps, batch, TRAIN_FEATURES)).astype(np.float32)
    return np.minimum(patterns[ys] * intensity + noise, 1.0), ys


def train_step_numpy(params: Params, x: np.ndarray, y: np.ndarray, lr: float = TRAIN_LR) -> tuple[Params, float]:
    """One SGD step of the MLP with hand-written backpropagation, in the parameters' dtype; the new
    parameters and the mean sparse softmax cross-entropy before the step."""
    w1, b1, w2, b2, w3, b3 = params
    x = x.astype(w1.dtype)
    z1 = x @ w1 + b1
    h1 = np.maximum(z1, 0)
    z2 = h1 @ w2 + b2
    h2 = np.maximum(z2, 0)
    logits = h2 @ w3 + b3
    shifted = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    total = e.sum(axis=1, keepdims=True)
    rows = np.arange(len(y))
    loss = float(np.mean(np.log(total[:, 0]) - shifted[rows, y]))
    d3 = e / total
    d3[rows, y] -= 1
    d3 /= len(y)
    d2 = (d3 @ w3.T) * (z2 > 0)
    d1 = (d2 @ w2.T) * (z1 > 0)
    grads = [x.T @ d1, d1.sum(0), h1.T @ d2, d2.sum(0), h2.T @ d3, d3.sum(0)]
    return [p - np.asarray(lr, p.dtype) * g for p, g in zip(params, grads)], loss


def train_numpy(params: Params, xs: np.ndarray, ys: np.ndarray, lr: float = TRAIN_LR) -> tuple[Params, np.ndarray]:
    """One SGD step per batch of ``xs``, ``ys``: the final parameters and the loss of every step."""
    losses = []
    for x, y in zip(xs, ys):
        params, loss = train_step_numpy(params, x, y, lr)
        losses.append(loss)
    return params, np.array(losses)


def check_training(label: str, variables: list[Any], init: Params, xs: np.ndarray, ys: np.ndarray) -> float:
    """The largest difference between trained ``variables`` and NumPy's float64 SGD from ``init`` on the
    batches ``xs``, ``ys``; ``WrongResult`` naming ``label`` if it is over 1e-3."""
    want, _ = train_numpy([v.astype(np.float64) for v in init], xs, ys)
    error = max(float(np.max(np.abs(v.numpy() - w))) for v, w in zip(variables, want))
    if error > 1e-3:
        raise WrongResult(f"{label}: parameters off by {error:.3g} from NumPy")
    return error


def loss_summary(losses: np.ndarray) -> np.ndarray:
    """What a training call returns: ``[last step's loss, mean loss over the steps]``."""
    return np.array([losses[-1], np.mean(losses)])


def train_reference(p: Problem) -> tuple[Params, np.ndarray]:
    """The float64 NumPy training of ``p`` from its initial parameters: final parameters, losses per step."""
    xs, ys, *init = p.inputs
    return train_numpy([v.astype(np.float64) for v in init], xs, ys)


def train_problem(batch: int = 32, h1: int = 256, h2: int = 128, steps: int = TRAIN_STEPS) -> Problem:
    """(d) ``steps`` SGD steps of the MLP ``784-h1-h2-10`` on ``batch``-sized batches in one call (W1 by default)."""
    xs, ys = train_data(steps, batch)
    label = problem_label("train", batch=batch, h1=h1, h2=h2, steps=steps)
    p = Problem("train", label, (xs, ys, *train_init(h1, h2)), steps, np.zeros(2), float(steps), "steps/s",
                rtol=1e-3, atol=1e-6, scale=1.0, sizes={"batch": batch, "h1": h1, "h2": h2, "steps": steps})
    p.expected = loss_summary(train_reference(p)[1])
    return p


def train_variables(tf: ModuleType, init: Params) -> list[Any]:
    """``tf.Variable`` s holding ``init`` (create them inside ``strategy.scope()`` for popjit)."""
    names = ("w1", "b1", "w2", "b2", "w3", "b3")
    return [tf.Variable(v, name=name) for v, name in zip(init, names)]


def make_train_step(tf: ModuleType, variables: list[Any], lr: float = TRAIN_LR) -> Callable[[Any, Any], Any]:
    """One SGD step of the MLP on a batch, as TensorFlow user code; returns the batch's mean loss."""
    w1, b1, w2, b2, w3, b3 = variables

    def step(x, y):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(x, w1) + b1)
            h = tf.nn.relu(tf.matmul(h, w2) + b2)
            logits = tf.matmul(h, w3) + b3
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        grads = tape.gradient(loss, variables)
        for v, g in zip(variables, grads):
            v.assign_sub(lr * g)
        return loss

    return step


def make_train(tf: ModuleType, variables: list[Any], steps: int, lr: float = TRAIN_LR) -> Any:
    """``steps`` SGD steps in one on-device ``tf.range`` loop over resident batches ``xs[i], ys[i]``
    (the same user code for popjit and TensorFlow); returns ``[last loss, mean loss]``."""
    step = make_train_step(tf, variables, lr)

    @tf.function(jit_compile=True)
    def train(xs, ys):
        last = total = tf.constant(0.0)
        for i in tf.range(steps):
            last = step(xs[i], ys[i])
            total += last
        return tf.stack([last, total / steps])

    return train


def make_train_infeed(tf: ModuleType, variables: list[Any], steps: int, lr: float = TRAIN_LR) -> Any:
    """The training loop of :func:`make_train` with its batches taken from an infeed: ``next(iterator)``
    on an iterator created inside ``IPUStrategy.scope()`` (the seed's pattern)."""
    step = make_train_step(tf, variables, lr)

    @tf.function(jit_compile=True)
    def train(iterator):
        last = total = tf.constant(0.0)
        for _ in tf.range(steps):
            x, y = next(iterator)
            last = step(x, y)
            total += last
        return tf.stack([last, total / steps])

    return train


def train_dataset(tf: ModuleType, xs: np.ndarray, ys: np.ndarray) -> Any:
    """The batches of ``xs``, ``ys`` as a repeating ``tf.data.Dataset``."""
    batch = xs.shape[1]
    ds = tf.data.Dataset.from_tensor_slices((xs.reshape(-1, xs.shape[-1]), ys.reshape(-1)))
    return ds.batch(batch, drop_remainder=True).repeat()


def make_train_jax(steps: int, lr: float = TRAIN_LR) -> Any:
    """The training loop in JAX: ``jax.jit`` over a ``lax.scan`` of ``jax.value_and_grad`` steps; takes and
    returns the parameters (donated, so they are updated in place) and returns ``[last loss, mean loss]``."""
    jax = import_peer("jax")
    jnp, lax = jax.numpy, jax.lax

    def loss_fn(params, x, y):
        w1, b1, w2, b2, w3, b3 = params
        h = jax.nn.relu(x @ w1 + b1)
        h = jax.nn.relu(h @ w2 + b2)
        logits = h @ w3 + b3
        picked = jnp.take_along_axis(logits, y[:, None], axis=1)[:, 0]
        return jnp.mean(jax.nn.logsumexp(logits, axis=1) - picked)

    def step(params, batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, *batch)
        return [p - lr * g for p, g in zip(params, grads)], loss

    def train(params, xs, ys):
        params, losses = lax.scan(step, params, (xs, ys), length=steps)
        return params, jnp.stack([losses[-1], jnp.sum(losses) / steps])

    return jax.jit(train, donate_argnums=0)


def train_popjit(p: Problem, infeed: bool = False) -> Trainer:
    """popjit's training call on a configured IPU, and a function reading its parameters back."""
    tf, strategy = popjit_strategy()
    xs, ys, *init = p.inputs
    with strategy.scope():
        variables = train_variables(tf, init)
        if infeed:
            fn, args = make_train_infeed(tf, variables, p.iters), (iter(train_dataset(tf, xs, ys)),)
        else:
            fn, args = make_train(tf, variables, p.iters), (tf.constant(xs), tf.constant(ys))
    return lambda: strategy.run(fn, args=args).numpy(), lambda: [v.numpy() for v in variables]


def train_tf(p: Problem) -> Trainer:
    """TensorFlow's training call (XLA) and a function reading its parameters back."""
    tf = import_peer("tensorflow")
    xs, ys, *init = p.inputs
    variables = train_variables(tf, init)
    fn = make_train(tf, variables, p.iters)
    args = (tf.constant(xs), tf.constant(ys))
    return lambda: fn(*args).numpy(), lambda: [v.numpy() for v in variables]


def train_jax(p: Problem) -> Trainer:
    """JAX's training call, carrying the parameters from call to call, and a function reading them."""
    jax = import_peer("jax")
    xs, ys, *init = p.inputs
    fn = make_train_jax(p.iters)
    data = (jax.device_put(xs), jax.device_put(ys))
    state = {"params": [jax.numpy.array(v) for v in init]}

    def call() -> Any:
        state["params"], losses = fn(state["params"], *data)
        return losses.block_until_ready()

    return call, lambda: [np.asarray(v) for v in state["params"]]


def train_float32_numpy(p: Problem) -> Trainer:
    """NumPy's float32 training call (one temporary per op), carrying its parameters from call to call."""
    xs, ys, *init = p.inputs
    state = {"params": [v.copy() for v in init]}

    def call() -> np.ndarray:
        state["params"], losses = train_numpy(state["params"], xs, ys)
        return loss_summary(losses)

    return call, lambda: state["params"]


TRAINERS: dict[str, Callable[[Problem], Trainer]] = {
    "popjit": train_popjit, "popjit-infeed": lambda p: train_popjit(p, infeed=True), "numpy": train_float32_numpy,
    "tensorflow": train_tf, "jax": train_jax,
}
TRAIN_NOTES = {
    "popjit": "IPUStrategy.run, tf.range over xs[i]", "popjit-infeed": "IPUStrategy.run, next(iterator) in tf.range",
    "numpy": "float32, hand-written backprop", "tensorflow": "tf.function(jit_compile=True), tf.range",
    "jax": "jax.jit, lax.scan, value_and_grad",
}


def _train_impl(framework: str) -> Callable[[Problem], tuple[Callable[[], Any], str]]:
    return lambda p: (TRAINERS[framework](p)[0], TRAIN_NOTES[framework])


TRAIN_IMPLS: dict[str, Callable[[Problem], tuple[Callable[[], Any], str]]] = {fw: _train_impl(fw) for fw in TRAINERS}
IMPLS = {"chain": CHAIN_IMPLS, "matmul": MATMUL_IMPLS, "conv": conv_workloads.CONV_IMPLS,
         "convstep": conv_workloads.STEP_IMPLS, "train": TRAIN_IMPLS,
         "keras": keras_workloads.KERAS_IMPLS, "tf1": tf1_workloads.TF1_IMPLS}
