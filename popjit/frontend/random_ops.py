"""``tf.random``: seeded random tensors with TensorFlow's seed semantics, on a counter-based generator.

Every random tensor is Philox-4x32-10 at a key (two 32-bit words) and a counter (element index,
call number), computed per element (see :mod:`popjit.ops.random`), so it fuses with the
element-wise ops around it.

Seeds follow TensorFlow (``tf.random.set_seed``):

- global seed and op seed: the key is ``(global, op)``;
- global seed only: the op seed comes from a counter of random ops created since ``set_seed``
  (per trace inside ``tf.function``), so a program's sequence of random ops is reproducible;
- op seed only: the global seed is TensorFlow's default, 87654321;
- neither: a fresh random key each time an op is created.

Stateful ops (``uniform``, ``normal``, ``truncated_normal``) give new numbers on every call: eagerly
a per-key call counter (reset by ``set_seed``) advances; inside a compiled function each op owns a
hidden int32 variable in device memory that the program reads and increments, so every execution
of the compiled program draws new numbers. Stateless ops depend only on their ``seed`` argument.

Inside a compiled function a stateful op's key is also mixed (xor) with the random generator of the
device the program runs on (:class:`popjit.runtime.device.GeneratorState`, read through the hidden
variable :data:`GENERATOR_WORDS`), as the IPU's random ops draw from its hardware generator: an op
without any seed takes its key from its place among the unseeded ops of the process and the
generator's random words, so ``ipu.utils.reset_ipu_seed(n)`` (:func:`reset_generators`) makes it
reproducible; an op seeded through ``tf.random`` keeps its stream until ``reset_ipu_seed`` is called,
which then moves it to the stream of ``n``.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from popjit import dtypes
from popjit.errors import InvalidArgumentError
from popjit.frontend import math_ops
from popjit.frontend.array_ops import _shape_list
from popjit.frontend.convert import convert_to_tensor
from popjit.frontend.tensor import Tensor
from popjit.frontend.tracing import apply_op, current_trace, tracing
from popjit.frontend.variables import Variable
from popjit.source import user_location, where

__all__ = [
    "normal",
    "set_seed",
    "stateless_normal",
    "stateless_truncated_normal",
    "stateless_uniform",
    "truncated_normal",
    "uniform",
]

DEFAULT_GRAPH_SEED = 87654321
_MAX_SEED = 2**31 - 1


class _SeedState:
    """The eager seed state: global seed, op-seed counter, and per-key call counters."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.global_seed: int | None = None
        self.op_count = 0
        self.calls: dict[tuple[int, int], int] = {}


_STATE = _SeedState()
# Hidden counter variables of traced random ops, kept alive for as long as the process (the
# compiled programs that use them hold only their ids).
_COUNTERS: list[Any] = []
_UNSEEDED = [0]  # traced random ops without any seed so far (their keys), since the last reset_generators
with tracing(None):
    #: The device generator's words as programs read them: a program run on a device reads that
    #: device's words in place of this variable's (``popjit.frontend.function``).
    GENERATOR_WORDS = Variable(np.zeros(4, np.int32), trainable=False, name="ipu_generator")


def _error(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{message}{where(user_location(2))}")


def set_seed(seed: int | None) -> None:
    """``tf.random.set_seed``: set the global seed and restart every op-seed and call counter."""
    with _STATE.lock:
        _STATE.global_seed = None if seed is None else int(seed)
        _STATE.op_count = 0
        _STATE.calls.clear()


def get_global_seed() -> int | None:
    """The seed set by :func:`set_seed` (None if unset)."""
    return _STATE.global_seed


def _next_op_seed() -> int:
    trace = current_trace()
    if trace is not None:
        n = trace.extra.get("random_op_count", 0)
        trace.extra["random_op_count"] = n + 1
        return n
    with _STATE.lock:
        _STATE.op_count += 1
        return _STATE.op_count - 1


def get_seed(op_seed: Any) -> tuple[int, int] | None:
    """TensorFlow's ``random_seed.get_seed``: the (global, op) seed pair, or None for a nondeterministic op."""
    g = _STATE.global_seed
    if op_seed is not None:
        op = int(np.asarray(op_seed).reshape(()))
        return (DEFAULT_GRAPH_SEED if g is None else g, op)
    if g is None:
        return None
    return g, _next_op_seed()


def _bits32(v: int) -> int:
    """A Python int folded to an int32 bit pattern (high bits xor-ed in)."""
    v = int(v) & (2**64 - 1)
    u = (v ^ (v >> 32)) & 0xFFFFFFFF
    return u - 2**32 if u >= 2**31 else u


def _stateful_inputs(seed: Any) -> tuple[Tensor, Tensor]:
    """The key tensor and call counter of one stateful random op call."""
    pair = get_seed(seed)
    if pair is None and current_trace() is not None:  # the device generator's: reproducible after reset_ipu_seed
        with _STATE.lock:
            _UNSEEDED[0] += 1
            index = _UNSEEDED[0]
        return _keyed_inputs((index, -1), continue_stream=False, seeded=False)
    if pair is None:  # nondeterministic: a fresh key
        words = np.frombuffer(os.urandom(8), dtype=np.int32)
        key = (int(words[0]), int(words[1]))
    else:
        key = (_bits32(pair[0]), _bits32(pair[1]))
    # an explicit op seed: later calls continue its stream (derived seeds are unique)
    return _keyed_inputs(key, continue_stream=seed is not None)


def reset_generators() -> None:
    """What ``ipu.utils.reset_ipu_seed`` does to compiled random ops besides reseeding the device: every
    op's call counter back to 0, and unseeded ops traced from now on numbered from the first again."""
    with _STATE.lock:
        _UNSEEDED[0] = 0
        for counter in _COUNTERS:
            counter._write(0)


def _keyed_inputs(key: tuple[int, int], continue_stream: bool = True, seeded: bool = True) -> tuple[Tensor, Tensor]:
    """The key tensor of ``key`` and the call counter of this call: eagerly the key's call count (0 every
    time unless ``continue_stream``), inside a trace a counter variable the program increments, and the
    key mixed with the device generator's words (``seeded``: the words of ops seeded through
    ``tf.random``, zero until ``reset_ipu_seed``)."""
    key_t = convert_to_tensor(np.array(key, dtype=np.int32))
    if current_trace() is None:
        n = 0
        if continue_stream:
            with _STATE.lock:
                n = _STATE.calls.get(key, 0)
                _STATE.calls[key] = n + 1
        return key_t, convert_to_tensor(np.int32(n))

    with tracing(None):  # device state the program owns, not a variable the user's function created
        counter = Variable(np.int32(0), trainable=False, name="random_counter")
    _COUNTERS.append(counter)
    value = counter.read_value()
    stored = counter.assign_add(np.int32(1))
    if isinstance(stored, Tensor):  # TF1 graph: the count the op reads is the assignment's, so running it counts
        value = stored - np.int32(1)
    words = GENERATOR_WORDS.read_value()
    return apply_op("bitwise_xor", [key_t, words[0:2] if seeded else words[2:4]]), value


def _stateless_inputs(seed: Any) -> tuple[Tensor, Tensor]:
    s = convert_to_tensor(seed, dtype_hint=dtypes.int32)
    if s.aval.shape != (2,) or not s.dtype.is_integer:
        raise _error(f"seed must have shape [2], not {list(s.aval.shape)} (an integer tensor such as [1, 2]) "
                     "[Op:StatelessRandomUniformV2]")
    if s.dtype != dtypes.int32:
        if s.is_symbolic:
            # why: math_ops is built on this module (importing it at the top would be circular)
            from popjit.frontend import math_ops

            s = math_ops.cast(s, dtypes.int32)
        else:
            s = convert_to_tensor(np.array([_bits32(v) for v in s.numpy()], dtype=np.int32))
    return s, convert_to_tensor(np.int32(0))


def _shape(shape: Any) -> tuple[int, ...]:
    dims = _shape_list(shape, "RandomUniform")
    if any(d < 0 for d in dims):
        raise _error(f"Dimension -1 must be >= 0: shape {dims} [Op:RandomUniform]")
    return tuple(dims)


def _scale_shift(x: Tensor, scale: Any, shift: Any, default_scale: float, default_shift: float) -> Tensor:
    """``x * scale + shift`` in ``x``'s dtype, skipping the defaults (fuses with ``x``)."""
    if not _is_const(scale, default_scale):
        x = math_ops.multiply(x, convert_to_tensor(scale, dtype_hint=x.dtype))
    if not _is_const(shift, default_shift):
        x = math_ops.add(x, convert_to_tensor(shift, dtype_hint=x.dtype))
    return x


def _is_const(v: Any, c: float) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == c


def _uniform(key: Tensor, counter: Tensor, shape: tuple[int, ...], minval: Any, maxval: Any, dtype: Any) -> Tensor:
    dtype = dtypes.as_dtype(dtype)
    if dtype.is_integer:
        if maxval is None:
            raise ValueError(f"Must specify maxval for integer dtype {dtype.name}{where(user_location(3))}")
        # why: array_ops is built on this module (importing it at the top would be circular)
        from popjit.frontend.array_ops import static_value

        lo = int(np.asarray(static_value(minval, "minval", "RandomUniformInt")).reshape(()))
        hi = int(np.asarray(static_value(maxval, "maxval", "RandomUniformInt")).reshape(()))
        if hi <= lo:
            raise _error(f"Need minval < maxval: {lo} >= {hi} [Op:RandomUniformInt]")
        return apply_op("random_uniform", [key, counter], shape=shape, dtype=dtype, lo=lo, span=hi - lo)
    u = apply_op("random_uniform", [key, counter], shape=shape, dtype=dtype)
    if maxval is None:
        maxval = 1.0
    if _is_const(minval, 0.0):
        return _scale_shift(u, maxval, 0.0, 1.0, 0.0)

    lo_t = convert_to_tensor(minval, dtype_hint=dtype)
    span = math_ops.subtract(convert_to_tensor(maxval, dtype_hint=dtype), lo_t)
    return math_ops.add(math_ops.multiply(u, span), lo_t)


def _normal(key: Tensor, counter: Tensor, shape: tuple[int, ...], mean: Any, stddev: Any, dtype: Any,
            truncated: bool) -> Tensor:
    dtype = dtypes.as_dtype(dtype)
    z = apply_op("random_normal", [key, counter], shape=shape, dtype=dtype, truncated=truncated)
    return _scale_shift(z, stddev, mean, 1.0, 0.0)


def uniform(shape: Any, minval: Any = 0, maxval: Any = None, dtype: Any = dtypes.float32, seed: Any = None,
            name: str | None = None) -> Tensor:
    """``tf.random.uniform``: values in ``[minval, maxval)`` (default ``[0, 1)``; integers need ``maxval``)."""
    key, counter = _stateful_inputs(seed)
    return _uniform(key, counter, _shape(shape), minval, maxval, dtype)


def normal(shape: Any, mean: Any = 0.0, stddev: Any = 1.0, dtype: Any = dtypes.float32, seed: Any = None,
           name: str | None = None) -> Tensor:
    """``tf.random.normal``: normally distributed values."""
    key, counter = _stateful_inputs(seed)
    return _normal(key, counter, _shape(shape), mean, stddev, dtype, False)


def truncated_normal(shape: Any, mean: Any = 0.0, stddev: Any = 1.0, dtype: Any = dtypes.float32, seed: Any = None,
                     name: str | None = None) -> Tensor:
    """``tf.random.truncated_normal``: a normal distribution cut to two standard deviations of the mean."""
    key, counter = _stateful_inputs(seed)
    return _normal(key, counter, _shape(shape), mean, stddev, dtype, True)


def keyed_uniform(shape: Any, key: tuple[int, int], dtype: Any = dtypes.float32) -> Tensor:
    """Values in ``[0, 1)`` from the generator at ``key`` (two integers): every call and every
    execution of a compiled program draws new values, in the same order in every process."""
    stream = _keyed_inputs((_bits32(key[0]), _bits32(key[1])))
    return _uniform(*stream, _shape(shape), 0, None, dtype)


def stateless_uniform(shape: Any, seed: Any, minval: Any = 0, maxval: Any = None, dtype: Any = dtypes.float32,
                      name: str | None = None, alg: Any = None) -> Tensor:
    """``tf.random.stateless_uniform``: like ``uniform`` but a pure function of ``seed`` (shape [2])."""
    key, counter = _stateless_inputs(seed)
    dt = dtypes.as_dtype(dtype)
    if dt.is_integer and maxval is None:
        if minval not in (0, None):
            raise ValueError("For integer dtype, minval and maxval must be both None or both not None"
                             f"{where(user_location(2))}")
        minval, maxval = int(dt.min), int(dt.max) + 1
        if maxval - minval > 2**32:
            raise _error(f"stateless_uniform over the full {dt.name} range is not supported; give minval and "
                         "maxval [Op:StatelessRandomUniformFullInt]")
    return _uniform(key, counter, _shape(shape), minval, maxval, dt)


def stateless_normal(shape: Any, seed: Any, mean: Any = 0.0, stddev: Any = 1.0, dtype: Any = dtypes.float32,
                     name: str | None = None, alg: Any = None) -> Tensor:
    """``tf.random.stateless_normal``: like ``normal`` but a pure function of ``seed`` (shape [2])."""
    key, counter = _stateless_inputs(seed)
    return _normal(key, counter, _shape(shape), mean, stddev, dtype, False)


def stateless_truncated_normal(shape: Any, seed: Any, mean: Any = 0.0, stddev: Any = 1.0,
                               dtype: Any = dtypes.float32, name: str | None = None, alg: Any = None) -> Tensor:
    """``tf.random.stateless_truncated_normal``: a pure function of ``seed``, cut at two standard deviations."""
    key, counter = _stateless_inputs(seed)
    return _normal(key, counter, _shape(shape), mean, stddev, dtype, True)
