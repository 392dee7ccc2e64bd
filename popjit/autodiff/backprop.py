"""Reverse mode over recorded op applications.

A tape is a list of :class:`Entry` (op, input tensors, output tensors, attributes) in execution
order. :func:`backprop` walks it backwards from the seeded cotangents, applying each op's vjp rule
(``OpDef.vjp``) and summing the cotangents that reach the same tensor. Nothing here knows what a
tensor is: ``key`` identifies one, ``t`` is the namespace of TensorFlow-named functions the rules
use to build the backward computation (eagerly, or as graph nodes while tracing), so the same
rules serve eager tapes and traced ones.

A vjp rule is ``vjp(t, primals, outputs, cotangents, **attrs) -> list[cotangent | None]``: one
entry per input, ``None`` where the input gets no gradient (integer inputs, indices, a
``stop_gradient``). ``cotangents`` has one entry per output, ``None`` for outputs nothing
depends on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from popjit.errors import UnimplementedError
from popjit.ops import registry


@dataclass(eq=False)
class Entry:
    """One recorded op application. ``rule`` overrides the registry's vjp (``tf.custom_gradient``)."""

    op: str
    inputs: list[Any]
    outputs: list[Any]
    attrs: dict[str, Any] = field(default_factory=dict)
    rule: Callable[..., Sequence[Any]] | None = None


def vjp_rule(entry: Entry) -> Callable[..., Sequence[Any]]:
    """The entry's gradient rule; ``UnimplementedError`` naming the op if it has none."""
    if entry.rule is not None:
        return entry.rule
    op = registry.get(entry.op)
    if op.vjp is None:
        raise UnimplementedError(
            f"No gradient defined for operation '{entry.op}' (op kind {op.kind}). Wrap the code that uses "
            "it in tf.stop_gradient if no gradient is needed through it, or give it one with tf.custom_gradient."
        )
    return op.vjp


def backprop(entries: Sequence[Entry], seeds: dict[Hashable, Any], key: Callable[[Any], Hashable], t: Any,
             differentiable: Callable[[Any], bool],
             placed: Callable[[Entry], AbstractContextManager[Any]] | None = None) -> dict[Hashable, Any]:
    """Cotangents of every tensor reached from ``seeds`` (key -> cotangent) through ``entries``.
    ``placed(entry)``, if given, is entered while an entry's backward computation is built (a traced
    program puts it on the IPU of the entry's forward op)."""
    cts = dict(seeds)
    for entry in reversed(entries):
        out_cts = [cts.get(key(o)) for o in entry.outputs]
        if all(c is None for c in out_cts):
            continue
        with placed(entry) if placed is not None else contextlib.nullcontext():
            in_cts = vjp_rule(entry)(t, entry.inputs, entry.outputs, out_cts, **entry.attrs)
            assert len(in_cts) == len(entry.inputs), f"vjp of {entry.op} returned {len(in_cts)} cotangents"
            for x, c in zip(entry.inputs, in_cts):
                if c is None or not differentiable(x):
                    continue
                k = key(x)
                cts[k] = c if k not in cts else t.add(cts[k], c)
    return cts


def reachable(entries: Sequence[Entry], sources: set[Hashable], key: Callable[[Any], Hashable]) -> set[Hashable]:
    """Keys of the tensors that depend on ``sources`` through ``entries`` (forward reachability)."""
    live = set(sources)
    for entry in entries:
        if any(key(x) in live for x in entry.inputs):
            live.update(key(o) for o in entry.outputs)
    return live
