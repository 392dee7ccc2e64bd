"""Building programs for schedule tests: traced through the front end, or written in loop IR."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from popjit import dtypes
from popjit.ir.loop import Apply, Buffer, Expr, Kernel, Load, Program, Store, as_index, ivar
from popjit.pipeline import lower_graph, optimize_graph

F32 = dtypes.float32


def traced(fn: Callable[..., Any], *args: Any) -> Program:
    """``fn`` traced with ``args`` and lowered to loop IR, as ``compile_graph`` does."""
    import popjit.tensorflow as tf

    return lower_graph(optimize_graph(tf.function(fn).get_concrete_function(*args).graph))


def buf(name: str, shape: tuple[int, ...], kind: str, dtype: dtypes.DType = F32) -> Buffer:
    return Buffer(name, shape, dtype, kind)


def load(b: Buffer, index: Any = None) -> Load:
    return Load(b, ivar("i0") if index is None else as_index(index))


def apply(op: str, *args: Expr, dtype: dtypes.DType = F32) -> Apply:
    return Apply(op, tuple(args), dtype)


def kernel(name: str, out: Buffer, value: Expr, domain: tuple[int, ...] | None = None, index: Any = None) -> Kernel:
    """``out[i0] = value`` over ``domain`` (default: the output's size)."""
    return Kernel(name, domain or (out.size,), [Store(out, ivar("i0") if index is None else as_index(index), value)])


def program(body: list, args: list[Buffer] = (), outs: list[Buffer] = (), temps: list[Buffer] = (),
            variables: list[Buffer] = ()) -> Program:
    return Program("p", list(body), list(args), list(outs), list(variables), [], list(temps))


def pipelined(stages: int, gac: int, schedule: Any = None, train: bool = True,
              recompute: bool = False, **pipeline_options: Any) -> tuple[Any, Any]:
    """A ``stages``-stage pipeline (tanh layers, then a squared-error loss) run once with ``gac`` micro-batches
    of 2 on a device of enough IPUs (``allow_recompute`` as ``recompute``; more ``pipeline`` arguments in
    ``pipeline_options``): its schedule and its pipeline."""
    # why: as traced(), the front end and the IPU API load only for the tests that build programs
    import numpy as np

    import popjit.tensorflow as tf
    from popjit import ipu
    from popjit.ipu.ops import pipelining_ops

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((64, 8)).astype(np.float32), rng.standard_normal((64, 1)).astype(np.float32)
    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = 1 << (stages - 1).bit_length()
    cfg.allow_recompute = recompute
    cfg.configure_ipu_system()
    strategy = ipu.ipu_strategy.IPUStrategy()
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(2, drop_remainder=True)
    infeed = ipu.ipu_infeed_queue.IPUInfeedQueue(dataset)
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()
    with strategy.scope():
        weights = [tf.Variable(np.full((8, 8), 0.1, np.float32)) for _ in range(stages - 1)]
        last = tf.Variable(np.full((8, 1), 0.2, np.float32))
        opt = tf.keras.optimizers.SGD(0.1)

        def hidden(w: Any) -> Callable[..., Any]:
            return lambda h, t: (tf.tanh(h @ w), t)

        def final(h: Any, t: Any) -> Any:
            return tf.reduce_mean((h @ last - t) ** 2)

        def optimizer_function(loss: Any) -> Any:
            return pipelining_ops.OptimizerFunctionOutput(opt, loss, variables=[*weights, last])

        options = {**pipeline_options, **({} if schedule is None else {"pipeline_schedule": schedule})}

        @tf.function(jit_compile=True)
        def run() -> None:
            pipelining_ops.pipeline([hidden(w) for w in weights] + [final], gradient_accumulation_count=gac,
                                    infeed_queue=infeed, outfeed_queue=outfeed,
                                    optimizer_function=optimizer_function if train else None, **options)

        strategy.run(run)
    sched = run.get_concrete_function().executable("/device:IPU:0").schedule
    (pipe,) = sched.pipelines
    return sched, pipe
