"""``tf.function``: trace per input signature, compile, cache, run natively.

A :class:`Function` wraps a Python function. Each call computes a *signature* from its
arguments (tensor shapes and dtypes, variable identities, Python values, other objects by
identity); a new signature traces the function into a graph (:class:`ConcreteFunction`) and logs
why it retraced; the graph is compiled once per target device and run by its native engine.
Calls from inside another trace inline the Python function instead.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from popjit import context, dtypes
from popjit.errors import InvalidArgumentError, UnimplementedError
from popjit.frontend import nest, random_ops
from popjit.frontend.autograph import convert
from popjit.frontend.convert import array_dtype
from popjit.frontend.replication import REPLICATION_INDEX
from popjit.frontend.tensor import Tensor, TensorShape
from popjit.frontend.tracing import Trace, current_trace, tracing
from popjit.frontend.variables import VARIABLES, Variable
from popjit.ir.graph import Aval, Binding, Graph
from popjit.pipeline import compile_cached
from popjit.runtime import device as devices
from popjit.runtime import streams
from popjit.source import where

log = logging.getLogger("popjit")


@dataclass(frozen=True)
class TensorSpec:
    """``tf.TensorSpec``: a shape and dtype (every dimension must be known to compile)."""

    shape: tuple[int | None, ...]
    dtype: dtypes.DType = dtypes.float32
    name: str | None = None

    def __init__(self, shape: Any, dtype: Any = dtypes.float32, name: str | None = None) -> None:
        object.__setattr__(self, "shape", tuple(TensorShape(shape)) if shape is not None else None)
        object.__setattr__(self, "dtype", dtypes.as_dtype(dtype))
        object.__setattr__(self, "name", name)

    @classmethod
    def from_tensor(cls, t: Any, name: str | None = None) -> TensorSpec:
        return cls(t.shape, t.dtype, name)


def _leaf_key(leaf: Any) -> tuple:
    if isinstance(leaf, Tensor):
        return ("tensor", leaf.aval.shape, leaf.aval.dtype.name)
    if isinstance(leaf, (np.ndarray, np.generic)):
        return ("tensor", np.shape(leaf), array_dtype(leaf).name)
    if isinstance(leaf, Variable):
        return ("variable", leaf._id)
    if leaf is None or isinstance(leaf, (bool, int, float, str, bytes, complex)):
        return ("python", type(leaf).__name__, leaf)
    if isinstance(leaf, TensorSpec):
        return ("tensor", leaf.shape, leaf.dtype.name)
    return ("object", type(leaf).__name__, id(leaf))


def _argument_of(args: tuple, kwargs: dict, error: Exception) -> str:
    """Which argument holds the value ``error`` is about (its first leaf that cannot be a tensor)."""
    for name, value in [*((f"argument {k}", a) for k, a in enumerate(args)),
                        *((f"argument {k!r}", v) for k, v in kwargs.items())]:
        try:
            for leaf in nest.flatten(value):
                _leaf_key(leaf)
        except TypeError:
            return name
    return "an argument"


def _describe(key: tuple) -> str:
    if key[0] == "tensor":
        return f"a {dtypes.as_dtype(key[2]).short}[{','.join(map(str, key[1]))}] tensor"
    if key[0] == "python":
        return f"Python {key[1]} {key[2]!r}"
    if key[0] == "variable":
        return f"variable #{key[1]}"
    return f"a {key[1]} object"


def _is_tensor_leaf(leaf: Any) -> bool:
    return isinstance(leaf, (Tensor, np.ndarray, np.generic, TensorSpec))


def _leaf_aval(leaf: Any) -> Aval:
    if isinstance(leaf, TensorSpec):
        if leaf.shape is None or any(d is None for d in leaf.shape):
            raise InvalidArgumentError(
                f"Input shape {list(leaf.shape) if leaf.shape is not None else None} is not fully defined. XLA "
                "compilation requires that operator arguments that represent shapes or dimensions be evaluated "
                "to concrete values at compile time: give every dimension in the input signature a size."
            )
        return Aval(tuple(leaf.shape), leaf.dtype)  # type: ignore[arg-type]
    if isinstance(leaf, Tensor):
        return leaf.aval
    arr = np.asarray(leaf)
    return Aval(arr.shape, dtypes.as_dtype(arr.dtype))


def _leaf_array(leaf: Any) -> np.ndarray:
    return leaf.numpy() if isinstance(leaf, Tensor) else np.asarray(leaf)


@dataclass
class ConcreteFunction:
    """One trace of a :class:`Function`: its graph and how to rebuild its outputs.

    Where it runs decides what it compiles to (:func:`popjit.runtime.device.program_target`): on an
    IPU device (``IPUStrategy.run``, ``tf.device('/device:IPU:0')``) or with ``jit_compile=True``, an
    IPU program with a tile schedule, memory and cycle estimates and out-of-memory checks; otherwise,
    on the host, a host program (the same native engine, without the IPU's report or limits).
    """

    graph: Graph
    out_tree: Any
    out_spec: list[tuple[str, Any]]
    name: str
    jit_compile: bool | None = None
    _devices_compiled_for: set[Any] = field(default_factory=set)
    _fingerprint: str | None = None
    _written: list[int] | None = None  # the ids of the variables the graph writes
    # Variables its trace created that nothing else holds (a pipeline's accumulators): kept alive with it.
    owned_variables: list[Any] = field(default_factory=list)

    def executable(self, device: str) -> Any:
        """The compiled program for ``device``: compiled on first use, then taken from the executable
        cache (which keeps the most recently used ones)."""
        ordinal = devices.ipu_ordinal(device)
        target = devices.program_target(device, self.jit_compile, self.graph.shards)
        if self._fingerprint is None:
            self._fingerprint = self.graph.fingerprint()
        exe = compile_cached(self.graph, target, on_ipu=ordinal is not None, fingerprint=self._fingerprint,
                             numerics=devices.program_numerics(device))
        if ordinal is not None and (ordinal, target) not in self._devices_compiled_for:
            self._devices_compiled_for.add((ordinal, target))
            devices.get_device(ordinal).compilations += 1
        return exe

    def run(self, leaves: list[Any], device: str) -> Any:
        exe = self.executable(device)
        args = {k: _leaf_array(leaves[k]) for k, _ in self.graph.arg_params()}
        generator = devices.generator(device)
        variables = {vid: _variable_buffer(vid, generator) for vid in self.graph.variables}
        ordinal = devices.ipu_ordinal(device)
        if devices.program_replicas(exe) > 1:
            outs = devices.execute(exe, device, args, variables, streams.FEEDS, _versions(variables),
                                   replica_views(generator))
        else:
            outs = devices.execute(exe, device, args, variables, streams.FEEDS)
            self._wrote_variables()
        if ordinal is not None:
            devices.get_device(ordinal).record_run(exe)
        results = [Tensor.eager(o, device) for o in outs]
        leaves_out = [results[v] if kind == "result" else v for kind, v in self.out_spec]
        return nest.unflatten(self.out_tree, leaves_out)

    def _wrote_variables(self) -> None:
        """A run without replicas wrote the variables it updates as the host does: replicated devices'
        replicas take their new values before their next run."""
        if self._written is None:
            self._written = [b.key for b in self.graph.result_bindings if b.kind == "var"]
        for vid in self._written:
            var = VARIABLES.get(vid)
            if var is not None:
                var._version += 1

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves, _ = nest.flatten_with_tree((args, kwargs))
        return self.run(leaves, context.current_device())

    @property
    def structured_outputs(self) -> Any:
        return self.out_tree


def _versions(variables: dict[int, np.ndarray]) -> dict[int, int]:
    """How many times the host wrote each variable (see :meth:`Variable._write`)."""
    return {vid: var._version for vid in variables if (var := VARIABLES.get(vid)) is not None}


def replica_views(generator: devices.GeneratorState) -> dict[int, devices.ReplicaView]:
    """The variables whose value is each replica's own: its generator's words and its replication index."""
    return {random_ops.GENERATOR_WORDS.ref.id: generator.replica_words,
            REPLICATION_INDEX.ref.id: lambda r: np.array(r, np.int32)}


def _variable_buffer(vid: int, generator: devices.GeneratorState) -> np.ndarray:
    """The buffer of variable ``vid``; random ops' view of the device's generator is that device's own."""
    if vid == random_ops.GENERATOR_WORDS.ref.id:
        return generator.words
    var = VARIABLES.get(vid)
    if var is None:
        raise InvalidArgumentError(f"A variable used by this function (#{vid}) no longer exists.")
    return var._buffer


class Function:
    """A ``tf.function``-decorated Python function."""

    def __init__(self, python_function: Callable, input_signature: Any = None, autograph: bool = True,
                 jit_compile: bool | None = None, name: str | None = None) -> None:
        self.python_function = python_function
        self.input_signature = input_signature
        self.autograph = autograph
        self.jit_compile = jit_compile
        self.name = name or getattr(python_function, "__name__", "function")
        self._cache: dict[Any, ConcreteFunction] = {}
        self._last_keys: tuple | None = None
        self.retrace_reasons: list[str] = []
        self._converted: Callable | None = None
        self._py_signature: inspect.Signature | None = None
        self._positional_arity = -2  # known once the signature is read (-1: not a plain positional one)
        functools.update_wrapper(self, python_function)

    # -- binding as a method -----------------------------------------------------------------
    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        bound = self.__dict__.setdefault("_bound", {})
        key = id(instance)
        if key not in bound:
            bound[key] = Function(functools.partial(self.python_function, instance), self.input_signature,
                                  self.autograph, self.jit_compile, self.name)
        return bound[key]

    # -- tracing -------------------------------------------------------------------------------
    @property
    def converted(self) -> Callable:
        if self._converted is None:
            if self.autograph:
                self._converted = convert(self.python_function)
            else:
                self._converted = self.python_function
        return self._converted

    def _canonical(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """Bind a call to the Python signature, so ``f(x)``, ``f(x=x)`` and explicit defaults match."""
        if self._py_signature is None:
            try:
                self._python_signature()
            except (TypeError, ValueError):
                return args, kwargs
        if not kwargs and len(args) == self._positional_arity:
            return args, kwargs  # every parameter given positionally: already canonical
        try:
            bound = self._python_signature().bind(*args, **kwargs)
        except (TypeError, ValueError) as e:
            if isinstance(e, TypeError) and "argument" in str(e):
                raise TypeError(f"{self.name}(): {e}") from None
            return args, kwargs
        bound.apply_defaults()
        return tuple(bound.args), dict(bound.kwargs)

    def _python_signature(self) -> inspect.Signature:
        if self._py_signature is None:
            self._py_signature = inspect.signature(self.python_function)
            kinds = {p.kind for p in self._py_signature.parameters.values()}
            plain = kinds <= {inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD}
            self._positional_arity = len(self._py_signature.parameters) if plain else -1
        return self._py_signature

    def _signature(self, args: tuple, kwargs: dict) -> tuple[Any, list[Any], tuple]:
        args, kwargs = self._canonical(args, kwargs)
        if self.input_signature is not None and not kwargs:
            args = tuple(self._apply_signature(args))
        leaves, tree = nest.flatten_with_tree((args, kwargs))
        try:
            keys = tuple(_leaf_key(x) for x in leaves)
        except TypeError as e:
            raise TypeError(f"{self.name}(): {_argument_of(args, kwargs, e)}: {e}{where()}") from None
        return tree, leaves, keys

    def _apply_signature(self, args: tuple) -> list[Any]:
        specs = nest.flatten(list(self.input_signature))
        flat = nest.flatten(list(args))
        if len(specs) != len(flat):
            raise TypeError(f"{self.name}: expected {len(specs)} arguments from input_signature, got {len(flat)}")
        for spec, x in zip(specs, flat):
            _leaf_aval(spec)
            if isinstance(x, (Tensor, np.ndarray)) and tuple(np.shape(x)) != tuple(spec.shape):
                raise ValueError(f"Python inputs incompatible with input_signature: {spec} vs shape {np.shape(x)}")
        return list(args)

    def _trace(self, tree: Any, leaves: list[Any]) -> ConcreteFunction:
        trace = Trace(self.name)
        traced_leaves = []
        for k, leaf in enumerate(leaves):
            if _is_tensor_leaf(leaf):
                aval = _leaf_aval(leaf)
                traced_leaves.append(Tensor.symbolic(trace.add_param(aval, Binding("arg", k)), trace))
            else:
                traced_leaves.append(leaf)
        args, kwargs = nest.unflatten(tree, traced_leaves)
        with tracing(trace):
            out = self.converted(*args, **kwargs)
            out_leaves, out_tree = nest.flatten_with_tree(out)
            results, spec = [], []
            for leaf in out_leaves:
                if isinstance(leaf, Variable):
                    leaf = leaf.read_value()
                if isinstance(leaf, Tensor):
                    spec.append(("result", len(results)))
                    results.append(trace.value_of(leaf))
                else:
                    spec.append(("python", leaf))
        return ConcreteFunction(trace.finish(results), out_tree, spec, self.name, self.jit_compile,
                                owned_variables=trace.extra.get("created_variables", []))

    def get_concrete_function(self, *args: Any, **kwargs: Any) -> ConcreteFunction:
        if not args and not kwargs and self.input_signature is not None:
            args = tuple(self.input_signature)
        tree, leaves, keys = self._signature(args, kwargs)
        return self._lookup(tree, leaves, keys)

    def _lookup(self, tree: Any, leaves: list[Any], keys: tuple) -> ConcreteFunction:
        ck = (tree, keys)
        if ck not in self._cache:
            if self._cache:
                reason = self._retrace_reason(keys)
                self.retrace_reasons.append(reason)
                log.info("Retracing %s: %s", self.name, reason)
            self._cache[ck] = self._trace(tree, leaves)
        self._last_keys = keys
        return self._cache[ck]

    def _retrace_reason(self, keys: tuple) -> str:
        last = self._last_keys or ()
        if len(last) != len(keys):
            return f"the number of arguments changed from {len(last)} to {len(keys)}"
        for i, (a, b) in enumerate(zip(last, keys)):
            if a != b:
                return f"argument {i} changed from {_describe(a)} to {_describe(b)}"
        return "the argument structure changed"

    def experimental_get_tracing_count(self) -> int:
        return len(self._cache)

    # -- calling ---------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if current_trace() is not None:
            return self.converted(*args, **kwargs)
        tree, leaves, keys = self._signature(args, kwargs)
        cf = self._lookup(tree, leaves, keys)
        return cf.run(leaves, context.current_device())


def function(func: Callable | None = None, input_signature: Any = None, autograph: bool = True,
             jit_compile: bool | None = None, reduce_retracing: bool = False, experimental_compile: bool | None = None,
             experimental_relax_shapes: bool = False, experimental_implements: str | None = None,
             experimental_autograph_options: Any = None, experimental_follow_type_hints: bool | None = None) -> Any:
    """``tf.function``: compile ``func`` (traced per input signature) into a native program.

    ``jit_compile=True`` (or the older ``experimental_compile=True``) compiles it for the IPU even when
    it is called on the host: an IPU program with a tile schedule, cycle and memory estimates and
    out-of-memory checks. Without it, a call on the host compiles a host program; a call on an IPU
    device (``IPUStrategy.run``, ``tf.device('/device:IPU:0')``) always compiles an IPU program.
    ``reduce_retracing``/``experimental_relax_shapes`` change nothing here: every program is
    compiled for static shapes, as XLA does on the IPU, so the results are the same either way.
    ``experimental_implements``, ``experimental_autograph_options`` and
    ``experimental_follow_type_hints`` are not supported and raise ``UnimplementedError`` when set.
    """
    for option, value in (("experimental_implements", experimental_implements),
                          ("experimental_autograph_options", experimental_autograph_options),
                          ("experimental_follow_type_hints", experimental_follow_type_hints)):
        if value is not None:
            raise UnimplementedError(f"tf.function({option}=...) is not supported by popjit; remove it.{where()}")
    if jit_compile is None:
        jit_compile = experimental_compile

    def wrap(f: Callable) -> Function:
        return Function(f, input_signature, autograph, jit_compile)

    return wrap(func) if func is not None else wrap
