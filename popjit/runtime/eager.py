"""Eager ops on a virtual IPU: each op runs as a one-node program through the full compiler.

Programs are cached per (op, attributes, input shapes and dtypes, device); the codelets they
use depend only on structure, so a new shape reuses machine code and only re-schedules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from popjit import dtypes
from popjit.ir.graph import Aval, Binding, Graph, Node, Region, Value
from popjit.pipeline import compile_cached
from popjit.runtime import device as devices


def single_op_graph(op: str, in_avals: Sequence[Aval], attrs: dict[str, Any], out_avals: Sequence[Aval]) -> Graph:
    params = [Value(a) for a in in_avals]
    node = Node(op, params, attrs, out_avals)
    region = Region(params, [node], list(node.outputs))
    return Graph(f"eager_{op}", region, [Binding("arg", i) for i in range(len(params))],
                 [Binding("out", i) for i in range(len(node.outputs))])


def run_on_ipu(op: str, arrays: Sequence[np.ndarray], attrs: dict[str, Any], out_avals: Sequence[Aval],
               device: str) -> list[np.ndarray]:
    dev = devices.get_device(devices.ipu_ordinal(device) or 0)
    in_avals = [Aval(a.shape, dtypes.as_dtype(a.dtype)) for a in arrays]
    graph = single_op_graph(op, in_avals, attrs, out_avals)
    exe = compile_cached(graph, dev.target, on_ipu=True, numerics=dev.numerics)
    dev.executions += 1
    return devices.execute(exe, dev.name, list(arrays), {})
