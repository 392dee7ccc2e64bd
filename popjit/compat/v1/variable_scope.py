"""TF1 variable scopes: ``variable_scope``, ``get_variable``, ``get_variable_scope`` and TF1's initializers.

``get_variable(name)`` makes (or, with ``reuse``, finds) the variable ``<scope>/<name>`` of the
current graph. Variables are resource variables on popjit; a variable a TF1 program makes as a
*ref* variable (``use_resource=False``, TF1's default outside ``ipu.scopes.ipu_scope``) on an IPU
device fails as it does on Graphcore's system (spec: the colocation error for ``VariableV2``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from popjit import context, dtypes
from popjit.errors import InvalidArgumentError, UnimplementedError
from popjit.frontend import graph_mode
from popjit.frontend.name_scope import name_scope, scoped
from popjit.frontend.tensor import Tensor
from popjit.frontend.variables import Variable as _ResourceVariable
from popjit.keras import initializers as keras_init
from popjit.runtime import device as devices
from popjit.source import where

AUTO_REUSE = "AUTO_REUSE"


class VariableScope:
    """A scope's settings: its name prefix, reuse, and the defaults of the variables made in it."""

    def __init__(self, name: str = "", reuse: Any = False, initializer: Any = None,
                 dtype: Any = dtypes.float32, use_resource: bool | None = None, constraint: Any = None) -> None:
        self._name = name
        self._reuse = reuse
        self._initializer = initializer
        self._dtype = dtypes.as_dtype(dtype)
        self._use_resource = use_resource
        self._constraint = constraint

    @property
    def name(self) -> str:
        return self._name

    @property
    def original_name_scope(self) -> str:
        return f"{self._name}/" if self._name else ""

    @property
    def reuse(self) -> Any:
        return self._reuse

    @property
    def initializer(self) -> Any:
        return self._initializer

    @property
    def dtype(self) -> dtypes.DType:
        return self._dtype

    @property
    def use_resource(self) -> bool | None:
        return self._use_resource

    def reuse_variables(self) -> None:
        """Variables asked for from now on in this scope must exist already."""
        self._reuse = True

    def set_use_resource(self, use_resource: bool) -> None:
        self._use_resource = use_resource

    def set_initializer(self, initializer: Any) -> None:
        self._initializer = initializer

    def set_dtype(self, dtype: Any) -> None:
        self._dtype = dtypes.as_dtype(dtype)

    def get_variable(self, name: str, *args: Any, **kwargs: Any) -> Any:
        with variable_scope(self):
            return get_variable(name, *args, **kwargs)


class _Scopes(threading.local):
    def __init__(self) -> None:
        self.stack: list[VariableScope] = [VariableScope()]


_scopes = _Scopes()


def get_variable_scope() -> VariableScope:
    """The innermost variable scope."""
    return _scopes.stack[-1]


def _unique(trace: Any, base: str) -> str:
    counts = trace.extra.setdefault("scope_names", {})
    n = counts.get(base, 0)
    counts[base] = n + 1
    return base if n == 0 else f"{base}_{n}"


@contextlib.contextmanager
def variable_scope(name_or_scope: Any = None, default_name: str | None = None, values: Any = None,
                   initializer: Any = None, regularizer: Any = None, caching_device: Any = None,
                   partitioner: Any = None, custom_getter: Any = None, reuse: Any = None, dtype: Any = None,
                   use_resource: bool | None = None, constraint: Any = None,
                   auxiliary_name_scope: bool = True) -> Iterator[VariableScope]:
    """Prefix the names of the variables made inside with ``name_or_scope`` and set their defaults; with
    ``auxiliary_name_scope``, also open the name scope of the same name (placeholders and
    ``tf.compat.v1.Variable`` s built inside are named under it, as in TF1)."""
    for option, value in (("partitioner", partitioner), ("custom_getter", custom_getter),
                          ("regularizer", regularizer)):
        if value is not None:
            raise UnimplementedError(f"tf.compat.v1.variable_scope({option}=...) is not supported by popjit{where()}.")
    parent = get_variable_scope()
    if isinstance(name_or_scope, VariableScope):
        name = name_or_scope.name
        base = name_or_scope
        names = f"{name}/" if name else ""  # a scope entered again opens its name scope again, absolute
    else:
        if name_or_scope is None:
            if default_name is None:
                raise TypeError("If default_name is None then name_or_scope is required")
            trace = graph_mode.current_graph_trace()
            leaf = _unique(trace, default_name) if trace is not None else default_name
        else:
            leaf = str(name_or_scope)
        name = f"{parent.name}/{leaf}" if parent.name else leaf
        base = parent
        names = leaf  # a new scope opens a name scope inside the current one
    if reuse is None:  # inherited from the enclosing scope (or the scope object re-entered)
        reuse = parent.reuse if parent.reuse in (True, AUTO_REUSE) else base.reuse if base is not parent else False
    scope = VariableScope(
        name,
        reuse=reuse,
        initializer=initializer if initializer is not None else base.initializer,
        dtype=dtype if dtype is not None else base.dtype,
        use_resource=use_resource if use_resource is not None else base.use_resource,
        constraint=constraint if constraint is not None else base._constraint,
    )
    _scopes.stack.append(scope)
    try:
        with name_scope(names if auxiliary_name_scope else ""):
            yield scope
    finally:
        _scopes.stack.remove(scope)


def _store(trace: Any) -> dict[str, Any]:
    return trace.extra.setdefault("variable_store", {})


def _check_resource(name: str, use_resource: bool | None) -> None:
    """A TF1 ref variable cannot live on the IPU (Graphcore's colocation error)."""
    device = context.variable_device()
    if use_resource or not devices.is_ipu_device(device):
        return
    ordinal = devices.ipu_ordinal(device)
    raise InvalidArgumentError(
        f"Cannot assign a device for operation {name}: Could not satisfy explicit device specification "
        f"'/device:IPU:{ordinal}' because no supported kernel for IPU devices is available.\nColocation Debug Info:\n"
        f"Colocation group had the following types and supported devices:\nRoot Member(assigned_device_name_index_=-1 "
        f"requested_device_name_='/device:IPU:{ordinal}' assigned_device_name_='' resource_device_name_='' "
        "supported_device_types_=[CPU] possible_devices_=[]\nVariableV2: CPU\n\n"
        f"Make it a resource variable: build it inside ipu.scopes.ipu_scope, or with "
        f"tf.compat.v1.variable_scope(..., use_resource=True){where()}.")


def _default_initializer(dtype: dtypes.DType) -> Any:
    if dtype.is_floating:
        return keras_init.GlorotUniform()
    return keras_init.Zeros()


def get_variable(name: str, shape: Any = None, dtype: Any = None, initializer: Any = None, regularizer: Any = None,
                 trainable: bool | None = None, collections: Any = None, caching_device: Any = None,
                 partitioner: Any = None, validate_shape: bool = True, use_resource: bool | None = None,
                 custom_getter: Any = None, constraint: Any = None, synchronization: Any = None,
                 aggregation: Any = None) -> Any:
    """The variable ``<scope>/<name>``: made now, or (with ``reuse``) the existing one."""
    for option, value in (("partitioner", partitioner), ("custom_getter", custom_getter),
                          ("regularizer", regularizer)):
        if value is not None:
            raise UnimplementedError(f"tf.compat.v1.get_variable({option}=...) is not supported by popjit{where()}.")
    graph_mode.tf1_entry("tf.compat.v1.get_variable")
    trace = graph_mode.current_graph_trace()
    if trace is None:
        raise UnimplementedError("tf.compat.v1.get_variable inside a tf.function is not supported by popjit: make "
                                 "the variables outside it, or use tf.Variable.")
    scope = get_variable_scope()
    full = f"{scope.name}/{name}" if scope.name else name
    store = _store(trace)
    if full in store:
        if scope.reuse is False:
            raise ValueError(f"Variable {full} already exists, disallowed. Did you mean to set reuse=True or "
                             f"reuse=tf.AUTO_REUSE in VarScope?{where()}")
        var = store[full]
        if shape is not None and tuple(var.shape.as_list()) != tuple(shape):
            raise ValueError(f"Trying to share variable {full}, but specified shape {list(shape)} and found shape "
                             f"{var.shape.as_list()}.")
        return var
    if scope.reuse is True:
        raise ValueError(f"Variable {full} does not exist, or was not created with tf.get_variable(). Did you mean "
                         "to set reuse=tf.AUTO_REUSE in VarScope?")
    explicit = dtype
    dtype = dtypes.as_dtype(dtype) if dtype is not None else scope.dtype
    init = initializer if initializer is not None else scope.initializer
    if init is None:
        init = _default_initializer(dtype)
    if isinstance(init, (Tensor, np.ndarray, np.generic, list, float, int)):
        initial: Any = init
        if explicit is None:  # as TensorFlow's: a variable made from a value has the value's dtype
            dtype = None
    else:
        if shape is None:
            raise ValueError(f"Shape of a new variable ({full}) must be fully defined, but instead was None.")
        dims = tuple(int(d) for d in shape)
        initial = lambda: init(dims, dtype=dtype)  # noqa: E731
    _check_resource(full, use_resource if use_resource is not None else scope.use_resource)
    var = _ResourceVariable(initial, trainable=True if trainable is None else trainable, name=full, dtype=dtype,
                            constraint=constraint)
    store[full] = var
    for key in collections or ():
        if key not in ("variables", "trainable_variables"):
            trace.collection(key).append(var)
    return var


class Variable(_ResourceVariable):
    """``tf.compat.v1.Variable``: a variable of the current graph (a ref variable unless its scope or
    ``use_resource`` says otherwise, so it cannot be built on an IPU outside ``ipu_scope``)."""

    def __init__(self, initial_value: Any = None, trainable: bool = True, collections: Any = None,
                 validate_shape: bool = True, caching_device: Any = None, name: str | None = None,
                 variable_def: Any = None, dtype: Any = None, expected_shape: Any = None, import_scope: Any = None,
                 constraint: Any = None, use_resource: bool | None = None, synchronization: Any = None,
                 aggregation: Any = None, shape: Any = None) -> None:
        scope = get_variable_scope()
        if graph_mode.current_graph_trace() is not None:
            _check_resource(name or "Variable", use_resource if use_resource is not None else scope.use_resource)
        full = scoped((name or "Variable").split(":")[0])  # tf.Variable follows the name scope, not the variable one
        super().__init__(initial_value, trainable=trainable, name=full, dtype=dtype, constraint=constraint)


# -- TF1's initializers (constructors take the dtype; calls take the shape) ------------------------------
class _WithDtype:
    """A Keras initializer called the TF1 way: ``init(shape, dtype=None, partition_info=None)``."""

    def __init__(self, initializer: Any, dtype: Any = None) -> None:
        self._initializer = initializer
        self._dtype = dtype

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None, **kwargs: Any) -> Any:
        return self._initializer(shape, dtype=dtype if dtype is not None else self._dtype or dtypes.float32)


def zeros_initializer(dtype: Any = dtypes.float32) -> Any:
    """All zeros."""
    return _WithDtype(keras_init.Zeros(), dtype)


def ones_initializer(dtype: Any = dtypes.float32) -> Any:
    """All ones."""
    return _WithDtype(keras_init.Ones(), dtype)


def constant_initializer(value: Any = 0, dtype: Any = dtypes.float32, verify_shape: bool = False) -> Any:
    """Every element ``value`` (or the array ``value``)."""
    return _WithDtype(keras_init.Constant(value), dtype)


def random_normal_initializer(mean: float = 0.0, stddev: float = 1.0, seed: int | None = None,
                              dtype: Any = dtypes.float32) -> Any:
    """Normally distributed values."""
    return _WithDtype(keras_init.RandomNormal(mean, stddev, seed), dtype)


def random_uniform_initializer(minval: float = 0.0, maxval: float = 1.0, seed: int | None = None,
                               dtype: Any = dtypes.float32) -> Any:
    """Uniformly distributed values in [minval, maxval)."""
    return _WithDtype(keras_init.RandomUniform(minval, maxval, seed), dtype)


def truncated_normal_initializer(mean: float = 0.0, stddev: float = 1.0, seed: int | None = None,
                                 dtype: Any = dtypes.float32) -> Any:
    """Normal values redrawn beyond two standard deviations."""
    return _WithDtype(keras_init.TruncatedNormal(mean, stddev, seed), dtype)


def glorot_uniform_initializer(seed: int | None = None, dtype: Any = dtypes.float32) -> Any:
    """Xavier/Glorot uniform."""
    return _WithDtype(keras_init.GlorotUniform(seed), dtype)


def glorot_normal_initializer(seed: int | None = None, dtype: Any = dtypes.float32) -> Any:
    """Xavier/Glorot (truncated) normal."""
    return _WithDtype(keras_init.GlorotNormal(seed), dtype)


def variance_scaling_initializer(scale: float = 1.0, mode: str = "fan_in", distribution: str = "truncated_normal",
                                 seed: int | None = None, dtype: Any = dtypes.float32) -> Any:
    """Values with variance ``scale / n`` (``n`` by ``mode``)."""
    return _WithDtype(keras_init.VarianceScaling(scale, mode, distribution, seed), dtype)
