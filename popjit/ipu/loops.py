"""``ipu.loops``: on-device loops that may dequeue an infeed every iteration.

``repeat(n, body, inputs, infeed_queue)`` runs ``body(*inputs, *element)`` ``n`` times inside the
compiled program, carrying ``inputs``; an infeed element that is a tuple is passed positionally, a
dict as keyword arguments. ``while_loop`` is the same with a condition (which does not see the
infeed). A single output comes back unwrapped, several as a list.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from popjit.errors import missing_attributes
from popjit.frontend import graph_mode
from popjit.frontend.control_flow import for_range
from popjit.frontend.control_flow import while_loop as _while_loop
from popjit.frontend.convert import convert_to_tensor
from popjit.frontend.graph_mode import Operation
from popjit.frontend.tensor import Tensor


def _element_args(infeed_queue: Any) -> tuple[list[Any], dict[str, Any]]:
    if infeed_queue is None:
        return [], {}
    element = infeed_queue._dequeue()
    if isinstance(element, dict):
        return [], element
    if isinstance(element, tuple) and len(element) == 1 and isinstance(element[0], dict):
        return [], element[0]
    return (list(element) if isinstance(element, tuple) else [element]), {}


def _check_arity(body: Callable, n_inputs: int, inputs: list[Any], infeed: tuple[list, dict], where: str) -> None:
    args, kwargs = infeed
    try:
        inspect.signature(body).bind(*inputs, *args, **kwargs)
    except TypeError:
        need = str(inspect.signature(body))
        if args or kwargs:
            raise TypeError(f"Supplied {where} function cannot be called with the specified inputs. You specified "
                            f"{n_inputs} inputs: {inputs} and {len(args) + len(kwargs)} additional inputs from infeed,"
                            f" but the computation needs {need}.") from None
        raise TypeError(f"Supplied {where} function cannot be called with the specified inputs. You specified "
                        f"{n_inputs} inputs: {inputs}, but the loop body needs {need}.") from None


def _outputs(out: Any, inputs: list[Any]) -> list[Tensor]:
    if out is None:
        return []
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    while outs and isinstance(outs[-1], Operation):  # TF1 bodies return their ops (train_op) after the tensors
        outs.pop()
    tensors = [convert_to_tensor(o) for o in outs if o is not None]
    if len(tensors) != len(inputs):
        raise ValueError("IPU loop body must return zero or more Tensor values followed by zero or more "
                         "Operations.")
    got = [t.dtype for t in tensors]
    want = [convert_to_tensor(i).dtype for i in inputs]
    if got != want:
        raise TypeError(f"Mismatch between input types and output types for loop body: {want} vs {got}.")
    return tensors


def _result(values: list[Any]) -> Any:
    if not values:
        return graph_mode.last_node_operation("loop")
    return values[0] if len(values) == 1 else list(values)


def repeat(n: int, body: Callable[..., Any], inputs: Any = None, infeed_queue: Any = None,
           use_while_v1: bool = True) -> Any:
    """Run ``body`` ``n`` times on the device, carrying ``inputs``."""
    inputs = list(inputs or [])

    def step(i: Tensor, *carried: Any) -> list[Any]:
        element = _element_args(infeed_queue)
        _check_arity(body, len(inputs), list(carried), element, "loop body")
        return _outputs(body(*carried, *element[0], **element[1]), inputs)

    return _result(for_range(0, int(n), 1, step, inputs))


def while_loop(condition: Callable[..., Any], body: Callable[..., Any], inputs: Any = None,
               infeed_queue: Any = None, maximum_iterations: int | None = None, use_while_v1: bool = True) -> Any:
    """Run ``body`` while ``condition(*carried)`` holds (the condition does not see the infeed)."""
    inputs = list(inputs or [])
    _check_arity(condition, len(inputs), inputs, ([], {}), "loop condition")

    # why: with no inputs a dummy counter is carried (the loop needs one value), as Graphcore's does
    dummy = [] if inputs else [convert_to_tensor(0)]

    def step(*carried: Any) -> list[Any]:
        real = list(carried[len(dummy):])
        element = _element_args(infeed_queue)
        _check_arity(body, len(inputs), real, element, "loop body")
        return [c + 1 for c in carried[:len(dummy)]] + _outputs(body(*real, *element[0], **element[1]), inputs)

    out = _while_loop(lambda *c: condition(*c[len(dummy):]), step, dummy + inputs,
                      maximum_iterations=maximum_iterations)
    return _result(list(out)[len(dummy):])

__getattr__ = missing_attributes("ipu.loops")
