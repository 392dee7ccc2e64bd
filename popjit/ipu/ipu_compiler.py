"""``ipu.ipu_compiler``: compiling part of a TF1 graph for the IPU.

``compile(computation, inputs)`` builds ``computation(*inputs)`` into the graph under the current
IPU device scope and returns its tensors as a list. A session run that fetches any of them runs the
whole computation as one program: every assignment, infeed dequeue and outfeed enqueue built
inside it happens, as the XLA cluster Graphcore's version makes does (a computation with no tensor
results gives an operation that runs it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from popjit import context
from popjit.compat.v1 import graph_ops
from popjit.errors import UnimplementedError, missing_attributes
from popjit.frontend import graph_mode, nest
from popjit.frontend.array_ops import identity
from popjit.frontend.convert import convert_to_tensor
from popjit.frontend.graph_mode import Operation
from popjit.frontend.tensor import Tensor
from popjit.graph.passes.dce import has_effect
from popjit.runtime import device as devices
from popjit.source import where

_NOT_ON_IPU = (
    "A computation has been compiled, however it was not placed on an IPU device. This computation will not be "
    "executed on an IPU.\nTo execute it on an IPU use the `ipu_scope` from `tensorflow.python.ipu.scopes`, for "
    "example:\n\n  with ipu_scope('/device:IPU:0'):\n    result = ipu_compiler.compile(comp, inputs)")

_ESTIMATOR_SPEC = ("Your computation output contains an EstimatorSpec or IPUEstimatorSpec object. When you use an "
                   "IPUEstimator, it already handles all the xla compilation and no manual call to compile() is "
                   "needed.")


def compile(computation: Callable[..., Any], inputs: Any = None) -> Any:
    """Build ``computation(*inputs)`` for the IPU; its tensor results as a list (an operation if it has none)."""
    graph_mode.tf1_entry("ipu.ipu_compiler.compile")
    trace = graph_mode.current_graph_trace()
    if trace is None:
        raise UnimplementedError(f"ipu.ipu_compiler.compile inside a tf.function is not supported{where()}: it "
                                 "builds TensorFlow 1 graphs. In TensorFlow 2 use IPUStrategy.run.")
    if not devices.is_ipu_device(context.current_device()):
        raise Exception(_NOT_ON_IPU)
    args = [x if isinstance(x, Tensor) else convert_to_tensor(x) for x in (inputs or [])]
    first_node, first_write = len(trace.top.region.nodes), len(trace.writes)
    outputs = computation(*args)
    leaves = nest.flatten(outputs)
    if any(type(x).__name__ in ("EstimatorSpec", "IPUEstimatorSpec") for x in leaves):
        raise ValueError(_ESTIMATOR_SPEC)
    built = trace.top.region.nodes[first_node:]
    runs = [n for n in built if has_effect(n)] + [v.producer for _, v in trace.writes[first_write:]]
    ops = [x for x in leaves if isinstance(x, Operation)]
    cluster = Operation(trace, "cluster", nodes=runs, inputs=ops)
    tensors = [x for x in leaves if x is not None and not isinstance(x, Operation)]
    if not tensors:
        return cluster
    with graph_ops.control_dependencies([cluster]):
        return [identity(convert_to_tensor(t)) for t in tensors]


__getattr__ = missing_attributes("ipu.ipu_compiler")
