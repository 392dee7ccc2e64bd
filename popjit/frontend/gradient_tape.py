"""``tf.GradientTape``, ``tf.stop_gradient`` and ``tf.custom_gradient``.

While a tape is active, every op application (eager, or traced inside a ``tf.function``) is
recorded on it, with the variables read. ``tape.gradient`` runs reverse mode over the record
(:mod:`popjit.autodiff.backprop`) with the ops' vjp rules; inside a trace the backward pass becomes
graph nodes of the same program, so a whole training step — forward, backward and optimizer
update — compiles into one engine.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from popjit.autodiff.backprop import Entry, backprop, reachable
from popjit.frontend import nest
from popjit.frontend.tensor import Tensor, placed_beside

_state = threading.local()


def _tapes() -> list[GradientTape]:
    if not hasattr(_state, "tapes"):
        _state.tapes = []
    return _state.tapes


def key(t: Any) -> Hashable:
    """A tensor's identity on a tape: its SSA value while tracing, the object when eager."""
    if isinstance(t, Tensor) and t._sym is not None:
        return ("sym", t._sym.uid)
    return ("eager", id(t))


def _differentiable(t: Any) -> bool:
    return isinstance(t, Tensor) and t.dtype.is_floating


def recording() -> bool:
    """Whether any tape is recording on this thread (cheap: checked for every op)."""
    return any(t._recording for t in getattr(_state, "tapes", ()))


def record(op: str, inputs: list[Any], outputs: list[Any], attrs: dict[str, Any],
           rule: Callable[..., Any] | None = None) -> None:
    """Record an op application on every active tape (called by ``apply_op`` and the control-flow builders)."""
    tapes = [tape for tape in _tapes() if tape._recording]
    if not tapes:
        return
    entry = Entry(op, list(inputs), list(outputs), dict(attrs), rule)
    for tape in tapes:
        tape._entries.append(entry)


def stored_value(value: Tensor) -> Tensor:
    """The tensor a traced assignment stores: while a tape records, a copy nothing on the tape
    produced, so later reads of the variable are tensors of their own (as TensorFlow's
    ReadVariableOp) and their gradients do not flow back into the assigned expression."""
    if not recording():
        return value
    # why: tracing is built on this module (importing it at the top would be circular)
    from popjit.frontend.tracing import apply_op

    with _paused_tapes():
        return apply_op("identity", [value])


def record_variable_read(var: Any, value: Tensor) -> None:
    """Remember that ``value`` is a read of ``var`` on every active tape watching it."""
    for reads in getattr(_state, "collectors", ()):
        reads.append((var, value))
    for tape in _tapes():
        if tape._recording and (tape._watch_accessed or var._id in tape._watched_vars):
            tape._reads.setdefault(var._id, []).append(value)
            tape._variables.setdefault(var._id, var)


class UnconnectedGradients:
    """What ``gradient`` returns for a source the target does not depend on."""

    NONE = "none"
    ZERO = "zero"


class GradientTape:
    """Records operations so that gradients can be computed by reverse-mode differentiation."""

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True) -> None:
        self._persistent = persistent
        self._watch_accessed = watch_accessed_variables
        self._entries: list[Entry] = []
        self._reads: dict[int, list[Tensor]] = {}
        self._variables: dict[int, Any] = {}
        self._watched: dict[Hashable, Any] = {}
        self._watched_vars: set[int] = set()
        self._recording = False
        self._used = False

    # -- recording ---------------------------------------------------------------------------
    def __enter__(self) -> GradientTape:
        _tapes().append(self)
        self._recording = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self._recording = False
        _tapes().remove(self)

    def watch(self, tensor: Any) -> None:
        """Record operations on ``tensor`` (tensors are not watched unless asked; variables are)."""
        # why: variables is built on this module (importing it at the top would be circular)
        from popjit.frontend.variables import Variable

        for t in nest.flatten(tensor):
            if isinstance(t, Variable):
                self._watched_vars.add(t._id)
                self._variables[t._id] = t
            elif isinstance(t, Tensor):
                self._watched[key(t)] = t
            else:
                raise ValueError(f"Passed in object of type {type(t).__name__}, not tf.Tensor or tf.Variable")

    @contextlib.contextmanager
    def stop_recording(self) -> Iterator[None]:
        """Ops inside the block are not recorded on this tape."""
        was, self._recording = self._recording, False
        try:
            yield
        finally:
            self._recording = was

    def reset(self) -> None:
        """Forget everything recorded so far."""
        self._entries.clear()
        self._reads.clear()
        self._watched.clear()

    def watched_variables(self) -> tuple:
        """The variables read (or watched) while recording, in first-read order."""
        return tuple(self._variables.values())

    # -- gradients -----------------------------------------------------------------------------
    def _source_keys(self, source: Any) -> list[Hashable]:
        # why: variables is built on this module (importing it at the top would be circular)
        from popjit.frontend.variables import Variable

        if isinstance(source, Variable):
            keys = [key(v) for v in self._reads.get(source._id, [])]
            return list(dict.fromkeys(keys))
        return [key(source)]

    def gradient(self, target: Any, sources: Any, output_gradients: Any = None,
                 unconnected_gradients: str = UnconnectedGradients.NONE) -> Any:
        """d(sum of ``target``)/d``sources``, structured like ``sources``; ``None`` for unconnected ones."""
        if self._used and not self._persistent:
            raise RuntimeError("A non-persistent GradientTape can only be used to compute one set of gradients "
                               "(or jacobians)")
        self._used = True
        with self.stop_recording():
            return self._gradient(target, sources, output_gradients, str(unconnected_gradients).lower())

    def _gradient(self, target: Any, sources: Any, output_gradients: Any, unconnected: str) -> Any:
        flat_sources = nest.flatten(sources)
        tracked = reachable(self._entries, self._tracked_roots(), key)
        # why: as in TensorFlow, a tensor nobody watched (nor computed from one) has no gradient
        source_keys = [[k for k in self._source_keys(s) if k in tracked] for s in flat_sources]
        live = reachable(self._entries, {k for ks in source_keys for k in ks}, key)
        entries = [e for e in self._entries if any(key(x) in live for x in e.inputs)]
        cts = backprop(entries, self._seeds(target, output_gradients), key, GRAD_OPS, _differentiable, _placed)
        grads = [self._collect(cts, ks, s, unconnected) for ks, s in zip(source_keys, flat_sources)]
        return nest.pack_sequence_as(sources, grads)

    def _tracked_roots(self) -> set[Hashable]:
        """Keys of the watched tensors and of the recorded reads of watched variables."""
        reads = {key(v) for values in self._reads.values() for v in values}
        return set(self._watched) | reads

    def _seeds(self, target: Any, output_gradients: Any) -> dict[Hashable, Any]:
        # why: convert is built on this module (importing it at the top would be circular)
        from popjit.frontend import array_ops, math_ops
        from popjit.frontend.convert import convert_to_tensor

        targets = [convert_to_tensor(t) for t in nest.flatten(target)]
        given = nest.flatten(output_gradients) if output_gradients is not None else [None] * len(targets)
        seeds: dict[Hashable, Any] = {}
        for t, g in zip(targets, given):
            ct = array_ops.ones_like(t) if g is None else convert_to_tensor(g, dtype=t.dtype)
            k = key(t)
            seeds[k] = ct if k not in seeds else math_ops.add(seeds[k], ct)
        return seeds

    def _collect(self, cts: dict[Hashable, Any], keys: list[Hashable], source: Any, unconnected: str) -> Any:
        # why: array_ops is built on this module (importing it at the top would be circular)
        from popjit.frontend import array_ops, math_ops

        found = [cts[k] for k in keys if k in cts]
        if not found:
            return array_ops.zeros_like(source) if unconnected == UnconnectedGradients.ZERO else None
        total = found[0]
        for g in found[1:]:
            total = math_ops.add(total, g)
        return total


# ----------------------------------------------------------------------------------------------
# stop_gradient and custom_gradient


def stop_gradient(input: Any, name: str | None = None) -> Tensor:
    """The same value, with no gradient flowing through it."""
    # why: tracing is built on this module (importing it at the top would be circular)
    from popjit.frontend.convert import convert_to_tensor
    from popjit.frontend.tracing import apply_op

    return apply_op("stop_gradient", [convert_to_tensor(input)])


def custom_gradient(f: Callable[..., Any]) -> Callable[..., Any]:
    """``@tf.custom_gradient``: ``f(*x)`` returns ``(y, grad_fn)``; ``grad_fn(*dy)`` gives the gradients
    for ``x`` (and, with a ``variables=`` keyword, ``(input_grads, variable_grads)`` for the variables
    ``f`` reads)."""
    import functools

    @functools.wraps(f)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        # why: convert is built on this module (importing it at the top would be circular)
        from popjit.frontend.convert import convert_to_tensor

        inputs = [a if isinstance(a, Tensor) else convert_to_tensor(a) for a in args]
        with _paused_tapes() as paused, _collecting_reads() as reads:
            y, grad_fn = f(*inputs, **kwargs)
        variables = list({id(v): v for v, _ in reads}.values())
        firsts = [next(r for v2, r in reads if v2 is v) for v in variables]
        for tape in paused:
            for v, r in zip(variables, firsts):
                tape._reads.setdefault(v._id, []).append(r)
                tape._variables.setdefault(v._id, v)
        record("custom_gradient", inputs + firsts, nest.flatten(y), {}, _custom_rule(grad_fn, len(inputs), variables))
        return y

    return wrapped


@contextlib.contextmanager
def _collecting_reads() -> Iterator[list[tuple[Any, Tensor]]]:
    """Collect the (variable, value) reads made inside the block."""
    if not hasattr(_state, "collectors"):
        _state.collectors = []
    reads: list[tuple[Any, Tensor]] = []
    _state.collectors.append(reads)
    try:
        yield reads
    finally:
        _state.collectors.pop()


@contextlib.contextmanager
def _paused_tapes() -> Iterator[list[GradientTape]]:
    """Stop recording on every active tape (a custom gradient's forward ops are not differentiated)."""
    active = [t for t in _tapes() if t._recording]
    for t in active:
        t._recording = False
    try:
        yield active
    finally:
        for t in active:
            t._recording = True


def _custom_rule(grad_fn: Callable[..., Any], n_inputs: int, variables: list[Any]) -> Callable[..., list[Any]]:
    def rule(t: Any, primals: list, outputs: list, cts: list, **attrs: Any) -> list[Any]:
        dys = [c if c is not None else t.zeros_like(o) for c, o in zip(cts, outputs)]
        if variables:
            in_grads, var_grads = grad_fn(*dys, variables=variables)
        else:
            in_grads, var_grads = grad_fn(*dys), []
        in_grads = list(in_grads) if isinstance(in_grads, (list, tuple)) else [in_grads]
        if len(in_grads) != n_inputs:
            raise ValueError(f"custom_gradient function returned {len(in_grads)} gradients for {n_inputs} inputs")
        return in_grads + [None] * (len(primals) - n_inputs - len(var_grads)) + list(var_grads)

    return rule


# ----------------------------------------------------------------------------------------------
# The namespace vjp rules build the backward pass with


class _GradOps:
    """TensorFlow-named functions plus the helpers gradient rules need (``t`` in the rules)."""

    def __getattr__(self, name: str) -> Any:
        # why: the op namespace is built on this module (tf.GradientTape), so it is looked up at call time
        from popjit.frontend import api

        return getattr(api, name)

    @staticmethod
    def unbroadcast(ct: Tensor, shape: tuple[int, ...]) -> Tensor:
        """Sum ``ct`` over the axes NumPy broadcasting added or stretched to reach ``ct``'s shape."""
        # why: array_ops is built on this module (importing it at the top would be circular)
        from popjit.frontend import array_ops, math_ops

        shape = tuple(shape)
        have = tuple(ct.shape.as_list())
        if have == shape:
            return ct
        lead = len(have) - len(shape)
        axes = list(range(lead)) + [lead + i for i, d in enumerate(shape) if d == 1 and have[lead + i] != 1]
        summed = math_ops.reduce_sum(ct, axis=axes) if axes else ct
        return array_ops.reshape(summed, shape)

    @staticmethod
    def extract_patches_nd(x: Tensor, *args: Any) -> Tensor:
        """Every window of ``x`` (:mod:`popjit.ops.conv`)."""
        # why: conv_ops is built on this module (it uses custom_gradient)
        from popjit.frontend import conv_ops

        return conv_ops.extract_patches_nd(x, *args)

    @staticmethod
    def patches_transpose(ct: Tensor, *args: Any) -> Tensor:
        """The transpose of :meth:`extract_patches_nd` (col2im)."""
        # why: conv_ops is built on this module (it uses custom_gradient)
        from popjit.frontend import conv_ops

        return conv_ops.patches_transpose(ct, *args)

    @staticmethod
    def shape_of(x: Tensor) -> tuple[int, ...]:
        return tuple(x.shape.as_list())

    @staticmethod
    def constant_like(x: Tensor, value: float) -> Tensor:
        # why: convert is built on this module (importing it at the top would be circular)
        from popjit.frontend.convert import convert_to_tensor

        return convert_to_tensor(np.asarray(value, dtype=x.dtype.np))

    @staticmethod
    def replay(region: Any, args: list[Tensor], stashed: dict[int, Tensor] | None = None) -> list[Tensor]:
        """Apply a region's nodes again to ``args`` (recorded on the active tapes); ``stashed``: values of
        its nodes kept from the first run, used instead of computing them again."""
        # why: replay is built on this module (importing it at the top would be circular)
        from popjit.frontend.replay import replay

        return replay(region, args, stashed=stashed)

    @staticmethod
    def replay_keeping(region: Any, args: list[Tensor], keep: list[Any]) -> tuple[list[Tensor], list[Tensor]]:
        """:meth:`replay`, and the tensors it computed for the region's values ``keep``."""
        # why: replay is built on this module (importing it at the top would be circular)
        from popjit.frontend.replay import replay_keeping

        return replay_keeping(region, args, keep)

    @staticmethod
    def dynamic_update_slice(operand: Tensor, update: Tensor, begin: Tensor) -> Tensor:
        """``operand`` with ``update`` written at the run-time position ``begin``."""
        # why: gather_ops is built on this module (importing it at the top would be circular)
        from popjit.frontend.gather_ops import dynamic_update_slice

        return dynamic_update_slice(operand, update, begin)

    @staticmethod
    def apply_op(name: str, inputs: list[Tensor], **attrs: Any) -> Any:
        """Apply the registry op ``name`` (one without a TensorFlow-named function, e.g. a collective)."""
        # why: tracing is built on this module (importing it at the top would be circular)
        from popjit.frontend.tracing import apply_op

        return apply_op(name, inputs, **attrs)

    @staticmethod
    def dynamic_slice(operand: Tensor, begin: Tensor, size: tuple[int, ...]) -> Tensor:
        """The ``size`` block of ``operand`` at the run-time position ``begin``, clamped to fit (as XLA)."""
        # why: tracing is built on this module (importing it at the top would be circular)
        from popjit.frontend.tracing import apply_op

        return apply_op("dynamic_slice", [operand, begin], size=tuple(size))


GRAD_OPS = _GradOps()


def _placed(entry: Entry) -> AbstractContextManager[Any]:
    """While a traced entry's gradient is built: its nodes go on the IPU of the entry's forward node and are
    marked as a gradient computation (what a pipeline's estimate needs); nothing for eager entries."""
    return placed_beside(entry.outputs[0] if entry.outputs else None, backward=True)
