"""Loops of element-wise codelets run chunk by chunk (``popjit/loop/interchange.py``, the engine's
``InterchangedLoop``): which loops qualify, and that their results are bit for bit those of the loop
run one iteration at a time, on several threads and on one, over one chunk and over many."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit import config
from popjit.codegen.engine import InterchangedLoop, Loop, render_engine
from popjit.codegen.numerics import Numerics
from popjit.kernels.jit import single_threaded
from popjit.loop import interchange
from popjit.pipeline import lower_graph, optimize_graph


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Chunks of 256 bytes and parallel codelets from 1024 elements: small arrays make many chunks."""
    monkeypatch.setattr(interchange, "CHUNK_BYTES", 256)
    with config.context(PARALLEL_MIN_ELEMENTS=1024):
        yield


def chain_step(x: Any, a: Any, b: Any) -> Any:
    return tf.tanh(a * x + b) * tf.sigmoid(x) - 0.5 * x


def two_states(x: Any, y: Any, z: Any) -> tuple[Any, Any]:
    """Two carried tensors (two codelets, the first reading the second's state) and a loop-invariant array."""
    return tf.tanh(x) * 0.5 + y * z, tf.sigmoid(y) - 0.25 * z


def with_row(x: Any, row: Any) -> Any:
    """A 2-D state and a row broadcast over it (read at another index than the state's, never written)."""
    return tf.maximum(x * row, tf.tanh(x) - row) * 0.75


def looped(step: Callable[..., Any], n: int) -> Any:
    """``step`` applied ``n`` times to the first ``carried`` arguments, in one on-device loop."""

    @tf.function(jit_compile=True)
    def run(*args: Any) -> Any:
        state, rest = _split(step, args)
        for _ in tf.range(n):
            state = _as_tuple(step(*state, *rest))
        return state

    return run


def _carried(step: Callable[..., Any]) -> int:
    return 2 if step is two_states else 1


def _split(step: Callable[..., Any], args: tuple) -> tuple[tuple, tuple]:
    k = _carried(step)
    return tuple(args[:k]), tuple(args[k:])


def _as_tuple(value: Any) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _numpy(values: Any) -> list[np.ndarray]:
    return [v.numpy() for v in _as_tuple(values)]


def one_at_a_time(step: Callable[..., Any], n: int, args: tuple) -> list[np.ndarray]:
    """The loop as written: a one-iteration program called ``n`` times, each on the last one's results."""
    once = looped(step, 1)
    state, rest = _split(step, args)
    values = [np.asarray(s) for s in state]
    for _ in range(n):
        values = _numpy(once(*values, *rest))
    return values


def engine_nodes(step: Callable[..., Any], *args: Any, numerics: Numerics = Numerics()) -> list[type]:
    """The types of the top-level nodes of the engine of ``looped(step, 3)``."""
    graph = optimize_graph(looped(step, 3).get_concrete_function(*args).graph)
    return [type(node) for node in render_engine(lower_graph(graph), numerics).body]


def _repeat_of(step: Callable[..., Any], *args: Any) -> Any:
    graph = optimize_graph(looped(step, 3).get_concrete_function(*args).graph)
    (repeat,) = [s for s in lower_graph(graph).walk() if type(s).__name__ == "Repeat"]
    return repeat


def _inputs(step: Callable[..., Any], rows: int, cols: int, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    if step is chain_step:
        return x, np.float32(0.7), np.float32(0.1)
    if step is two_states:
        y, z = (rng.standard_normal((rows, cols)).astype(np.float32) for _ in range(2))
        return x, y, z
    return x, rng.standard_normal(cols).astype(np.float32)


@pytest.mark.parametrize("step", [chain_step, two_states, with_row])
def test__element_wise_loops__are_interchanged(step: Callable[..., Any]) -> None:
    assert InterchangedLoop in engine_nodes(step, *_inputs(step, 64, 32, 0))


@pytest.mark.parametrize("step", [chain_step, two_states, with_row])
def test__off__loops_run_iteration_by_iteration(step: Callable[..., Any]) -> None:
    with config.context(INTERCHANGE_LOOPS=False):
        nodes = engine_nodes(step, *_inputs(step, 64, 32, 0))
    assert Loop in nodes and InterchangedLoop not in nodes


def centred(x: Any) -> Any:
    return tf.tanh(x - tf.reduce_mean(x))


def shifted(x: Any) -> Any:
    return tf.tanh(tf.concat([x[1:], x[:1]], axis=0))


def transposed(x: Any) -> Any:
    return tf.sigmoid(tf.transpose(x)) * 2.0


def crossed(x: Any) -> Any:
    """Each new half reads the other's old value: the body copies a temporary into the state (a ``Copy``,
    which the engine does not split, so such loops run iteration by iteration)."""
    a, b = tf.split(x, 2, axis=1)
    return tf.concat([tf.tanh(b), tf.sigmoid(a)], axis=1)


@pytest.mark.parametrize("step", [centred, shifted, transposed, crossed],
                         ids=["reduction", "shifted read", "transposed", "crossed"])
def test__loops_reading_other_elements_of_their_state__are_not_interchanged(step: Callable[..., Any]) -> None:
    x = np.ones((64, 64), np.float32)
    nodes = engine_nodes(step, x)
    assert InterchangedLoop not in nodes and Loop in nodes


@pytest.mark.parametrize(("numerics", "dtype"), [(Numerics(inv=True, oflo=True), np.float32),
                                                  (Numerics(sr=True), np.float16)], ids=["traps", "sr"])
def test__trapping_or_stochastically_rounding_loops__are_not_interchanged(numerics: Numerics, dtype: type) -> None:
    args = [np.asarray(a).astype(dtype) for a in _inputs(chain_step, 64, 32, 0)]
    assert InterchangedLoop in engine_nodes(chain_step, *args), "interchanged with the default numerics"
    assert InterchangedLoop not in engine_nodes(chain_step, *args, numerics=numerics)


def test__a_loop_updating_a_variable__is_right() -> None:
    v = tf.Variable(np.linspace(-2, 2, 4096).astype(np.float32))

    @tf.function(jit_compile=True)
    def update() -> Any:
        for _ in tf.range(4):
            v.assign(tf.tanh(v) * 1.5)
        return v.read_value()

    update()
    want = np.linspace(-2, 2, 4096).astype(np.float64)
    for _ in range(4):
        want = np.tanh(want) * 1.5
    np.testing.assert_allclose(v.numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["var", "arg"])
def test__a_loop_writing_a_variable_or_argument_in_place__is_not_interchanged(kind: str) -> None:
    """Ctrl-C stops an interchanged loop between chunks, with its elements at different iterations: only
    results and temporaries, which an interrupted run drops, may be written in it."""
    repeat = _repeat_of(chain_step, *_inputs(chain_step, 4096, 1, 0))
    assert interchange.interchangeable(repeat)
    (written,) = {b for k in repeat.body for b in k.writes()}
    written.kind = kind
    assert not interchange.interchangeable(repeat)


@settings(max_examples=12, deadline=None)
@given(step=st.sampled_from([chain_step, two_states, with_row]), rows=st.integers(1, 300),
       cols=st.integers(1, 40), n=st.integers(0, 5), seed=st.integers(0, 2**16))
def test__interchanged_loop__equals_the_loop_one_iteration_at_a_time(step: Callable[..., Any], rows: int,
                                                                     cols: int, n: int, seed: int) -> None:
    args = _inputs(step, rows, cols, seed)
    got = _numpy(looped(step, n)(*args))
    want = one_at_a_time(step, n, args)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test__one_thread__runs_the_chunks_on_the_calling_thread() -> None:
    args = _inputs(chain_step, 500, 33, 1)
    with single_threaded():
        got = _numpy(looped(chain_step, 4)(*args))
    np.testing.assert_array_equal(got[0], one_at_a_time(chain_step, 4, args)[0])


def test__interchanged_chain__matches_numpy_float64() -> None:
    x, a, b = _inputs(chain_step, 1000, 37, 2)
    (got,) = _numpy(looped(chain_step, 6)(x, a, b))
    want = x.astype(np.float64)
    for _ in range(6):
        want = np.tanh(0.7 * want + 0.1) / (1.0 + np.exp(-want)) - 0.5 * want
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test__chunk_rows__hold_chunk_bytes_of_the_loop_data() -> None:
    assert interchange.chunk_rows(_repeat_of(chain_step, *_inputs(chain_step, 4096, 1, 0))) == 256 // 4
    rows = interchange.chunk_rows(_repeat_of(with_row, *_inputs(with_row, 64, 4, 0)))
    assert rows == 256 // (4 * (4 + 4)), "a row of the state and the broadcast row, 4 float32 each"
    assert interchange.chunk_rows(_repeat_of(with_row, *_inputs(with_row, 8, 1000, 0))) == 1, "at least a row"
