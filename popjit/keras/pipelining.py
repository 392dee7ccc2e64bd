"""Graphcore's Keras pipelining: which pipeline stage each layer call runs in.

``with keras.ipu.PipelineStage(n):`` around layer calls of a functional model (or inside ``call`` of a
subclassed one) assigns those calls to stage ``n``; a layer constructed inside keeps the stage for all its
calls. ``model.get_pipeline_stage_assignment()`` lists the calls (a Sequential's layers, a functional
model's nodes in post-order) with their stages, ``set_pipeline_stage_assignment`` changes them.
``model.set_pipelining_options(gradient_accumulation_steps_per_replica=..., device_mapping=...)``
(:class:`popjit.keras.training.TrainingAPI`) trains the model as a pipeline: the values are those of
gradient accumulation over that many steps, and the program spans one IPU per stage (``device_mapping``),
replicated over the rest of the device.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator
from typing import Any

from popjit.frontend.tracing import current_trace

_LOCAL = threading.local()


@contextlib.contextmanager
def placing(ipus: dict[int, int], last: int | None = None) -> Iterator[None]:
    """While a pipelined model's device program is traced: the IPU of each layer call, by the id of its
    functional node or of its layer (:meth:`popjit.keras.training.TrainingAPI._stage_ipus`), and of the last
    stage, which computes the loss and metrics."""
    saved = getattr(_LOCAL, "ipus", None), getattr(_LOCAL, "last", None)
    _LOCAL.ipus, _LOCAL.last = ipus, last
    try:
        yield
    finally:
        _LOCAL.ipus, _LOCAL.last = saved


def on_last_stage_ipu() -> contextlib.AbstractContextManager[None]:
    """The loss and metrics of a pipelined model go on its last stage's IPU (nothing changes otherwise)."""
    last = getattr(_LOCAL, "last", None)
    trace = current_trace()
    return contextlib.nullcontext() if last is None or trace is None else trace.placed(last)


def on_stage_ipu(call: Any) -> contextlib.AbstractContextManager[None]:
    """The ops of a layer call (a functional node, or a layer) go on its stage's IPU while :func:`placing`
    says where; otherwise nothing changes."""
    ipus = getattr(_LOCAL, "ipus", None)
    trace = current_trace()
    if not ipus or trace is None or id(call) not in ipus:
        return contextlib.nullcontext()
    return trace.placed(ipus[id(call)])


def current_stage() -> int | None:
    """The pipeline stage of the innermost ``PipelineStage`` block (None outside any)."""
    stack = getattr(_LOCAL, "stages", None)
    return stack[-1] if stack else None


class PipelineStage:
    """``with PipelineStage(stage):``: the layer calls inside (and the layers constructed inside) belong to
    pipeline stage ``stage``."""

    def __init__(self, stage: int) -> None:
        if type(stage) is not int or stage < 0:
            raise ValueError(f"PipelineStage: the stage must be a non-negative int, not {stage!r}.")
        self._stage = stage

    def __enter__(self) -> PipelineStage:
        if not hasattr(_LOCAL, "stages"):
            _LOCAL.stages = []
        _LOCAL.stages.append(self._stage)
        return self

    def __exit__(self, *exc: Any) -> None:
        _LOCAL.stages.pop()


class _Assignment:
    """One layer call and its pipeline stage (settable)."""

    def __init__(self, layer: Any, node_index: int = 0, inbound_layers: list[Any] | None = None,
                 pipeline_stage: int | None = None) -> None:
        self._layer, self._node_index = layer, node_index
        self._inbound_layers = list(inbound_layers or [])
        self.pipeline_stage = pipeline_stage

    @property
    def layer(self) -> Any:
        return self._layer

    @property
    def node_index(self) -> int:
        return self._node_index

    @property
    def inbound_layers(self) -> list[Any]:
        return self._inbound_layers

    def __str__(self) -> str:
        return (f"Layer: {self._layer.name} (node index {self._node_index}) is assigned to pipeline stage: "
                f"{self.pipeline_stage}")

    __repr__ = __str__


class SequentialLayerPipelineStageAssignment(_Assignment):
    """A layer of a ``Sequential`` model and its pipeline stage."""


class FunctionalLayerPipelineStageAssignment(_Assignment):
    """A layer call (node) of a functional model and its pipeline stage."""


class ModelLayerPipelineStageAssignment(_Assignment):
    """A layer call of a subclassed model and its pipeline stage."""


def node_stage(layer: Any) -> int | None:
    """The stage a call of ``layer`` made now belongs to: the enclosing ``PipelineStage``, else the one the
    layer was constructed in."""
    stage = current_stage()
    return stage if stage is not None else getattr(layer, "_pipeline_stage", None)


def check_stages(stages: list[int], names: list[str], inbound: list[list[int]]) -> None:
    """Graphcore's rules on an assignment: it starts at 0, never skips a stage, and a call only uses the
    outputs of calls in its own or earlier stages (``inbound``: the positions of each call's inputs)."""
    if (stages and stages[0] != 0) or any(b > a + 1 for a, b in itertools.pairwise(stages)):
        raise ValueError("Pipeline stage assignments must start at 0 and be strictly increasing. The assignments "
                         f"are {stages}.")
    for k, inputs in enumerate(inbound):
        for j in inputs:
            if stages[j] > stages[k]:
                raise ValueError(f"Layer {names[k]} in pipeline stage {stages[k]} has a dependency from a pipeline "
                                 "stage which has not yet been executed. Layers can only use outputs from current or "
                                 "previous pipeline stages.")


def summary(rows: list[tuple[str, str, str]], line_length: int | None, print_fn: Callable[[str], Any] | None) -> None:
    """Graphcore's table of an assignment: "Layer (type) (node index)", "Input Layers", "Pipeline Stage"."""
    width = line_length or 98
    columns = [int(width * 0.4), int(width * 0.4), width - 2 * int(width * 0.4)]
    show = print_fn or print

    def line(cells: tuple[str, str, str]) -> str:
        return "".join(str(c)[:w - 1].ljust(w) for c, w in zip(cells, columns))

    show("_" * width)
    show(line(("Layer (type) (node index)", "Input Layers", "Pipeline Stage")))
    show("=" * width)
    for row in rows:
        show(line(row))
        show("_" * width)
