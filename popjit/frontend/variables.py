"""``tf.Variable`` with resource semantics.

A variable owns a buffer in the memory of the device it was created on (a virtual IPU inside
``IPUStrategy.scope()`` or ``tf.device('/device:IPU:0')``, else the host). Compiled programs read
and write that buffer in place; ``.numpy()`` copies it to the host. While tracing, reads and
writes go through the trace (see :mod:`popjit.frontend.tracing`), so a loop that assigns a
variable carries it.
"""

from __future__ import annotations

import contextlib
import itertools
import weakref
from typing import Any

import numpy as np

from popjit import context, dtypes
from popjit.buffers import aligned_copy
from popjit.frontend import gradient_tape
from popjit.frontend.tensor import Tensor, TensorShape
from popjit.frontend.tracing import current_trace, tracing
from popjit.ir.graph import Aval, VarRef

_ids = itertools.count(1)
VARIABLES: weakref.WeakValueDictionary[int, Variable] = weakref.WeakValueDictionary()


def _recording_graph() -> Any:
    """The TF1 graph being built right now (graph mode), or None."""
    trace = current_trace()
    return trace if getattr(trace, "is_graph", False) else None


class Variable:
    """A mutable tensor that keeps its value between function calls.

    In TF1 graph mode (:mod:`popjit.frontend.graph_mode`) a variable belongs to its graph and has no
    value until its initializer runs; ``assign`` returns the assigned value, assigning when a session
    run evaluates it.
    """

    __array_priority__ = 100
    _graph: Any = None  # the TF1 graph that made it (graph mode)
    _initialized = True  # False until a TF1 initializer runs
    _version = 0  # how many times the host wrote its value (replicas take it again when it changes)

    def __init__(self, initial_value: Any = None, trainable: bool = True, validate_shape: bool = True,
                 caching_device: Any = None, name: str | None = None, variable_def: Any = None,
                 dtype: Any = None, import_scope: Any = None, constraint: Any = None,
                 synchronization: Any = None, aggregation: Any = None, shape: Any = None) -> None:
        # why: convert is built on this module (importing it at the top would be circular)
        from popjit.frontend.convert import convert_to_tensor

        if initial_value is None:
            raise ValueError("initial_value must be specified.")
        graph = _recording_graph()
        if callable(initial_value):
            with tracing(None) if graph is not None else contextlib.nullcontext():
                initial_value = initial_value()
        with tracing(None):  # initialisers run eagerly on the host, as on the IPU
            init = convert_to_tensor(initial_value, dtype=dtype)
        if init.is_symbolic and (graph is None or init._trace is not graph):
            raise ValueError("A tf.Variable cannot be initialised from a symbolic tensor inside a tf.function; "
                             "create variables outside the traced function.")
        initial = graph.evaluate(init) if init.is_symbolic else init.numpy()  # type: ignore[union-attr]
        value = aligned_copy(initial)  # engines read and write C-ordered buffers in place
        strategy = context.current_strategy()
        if strategy is not None and graph is None:
            value = aligned_copy(strategy.initial_value(value))
        self._id = next(_ids)
        self._name = (name or "Variable").split(":")[0]
        self._trainable = bool(trainable)
        self._device = context.variable_device()
        self._buffer = value
        self._constraint = constraint
        self._ref = VarRef(self._id, self._name, Aval(tuple(value.shape), dtypes.as_dtype(value.dtype)))
        VARIABLES[self._id] = self
        if current_trace() is not None:
            current_trace().extra.setdefault("created_variables", []).append(self)
        if graph is not None:
            graph.variable_created(self, value)

    # -- properties ------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return f"{self._name}:0"

    @property
    def dtype(self) -> dtypes.DType:
        return self._ref.aval.dtype

    @property
    def constraint(self) -> Any:
        """The projection optimizers apply after updating this variable (None: none)."""
        return self._constraint

    @property
    def shape(self) -> TensorShape:
        return TensorShape(self._ref.aval.shape)

    def get_shape(self) -> TensorShape:
        return self.shape

    @property
    def device(self) -> str:
        return self._device

    @property
    def trainable(self) -> bool:
        return self._trainable

    @property
    def ref(self) -> VarRef:
        return self._ref

    @property
    def ndim(self) -> int:
        return self._ref.aval.ndim

    # -- reading -------------------------------------------------------------------------------
    def read_value(self) -> Tensor:
        """The current value: a snapshot when eager, the traced value inside a tf.function."""
        trace = current_trace()
        if trace is not None:
            value = Tensor.symbolic(trace.read_var(self._ref), trace)
        else:
            value = Tensor.eager(self._buffer.copy(), self._device)
        gradient_tape.record_variable_read(self, value)
        return value

    def value(self) -> Tensor:
        return self.read_value()

    @property
    def initializer(self) -> Any:
        """TF1: the operation that gives the variable its initial value (None outside graph mode)."""
        return self._graph.initializer([self], name=f"{self._name}/Assign") if self._graph is not None else None

    @property
    def initial_value(self) -> Any:
        """The value the variable's initializer gives it (TF1 graph mode)."""
        return self._initial_value if self._graph is not None else None

    @property
    def graph(self) -> Any:
        """The TF1 graph the variable belongs to (graph mode), else None."""
        return self._graph.facade if self._graph is not None else None

    def eval(self, session: Any = None) -> np.ndarray:
        """TF1: the variable's value, read in ``session`` (the default session if None)."""
        if self._graph is None:
            return self.numpy()
        return self._graph.session_for(session).run(self)

    def numpy(self) -> np.ndarray:
        if current_trace() is not None:
            raise NotImplementedError("numpy() is only available when eager execution is enabled.")
        return self._buffer.copy()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        v = self.numpy()
        return v.astype(dtype) if dtype is not None else v

    # -- writing -------------------------------------------------------------------------------
    def _converted(self, value: Any) -> Tensor:
        # why: convert is built on this module (importing it at the top would be circular)
        from popjit.frontend.convert import convert_to_tensor

        t = convert_to_tensor(value, dtype_hint=self.dtype)
        if t.dtype != self.dtype:
            raise TypeError(
                f"Cannot assign a value of dtype {t.dtype.name} to variable '{self.name}' of dtype {self.dtype.name}."
            )
        if tuple(t.shape.as_list()) != self._ref.aval.shape:
            raise ValueError(
                f"Cannot assign value to variable ' {self.name}': Shape mismatch.The variable shape "
                f"{self.shape}, and the assigned value shape {t.shape} are incompatible."
            )
        return t

    def assign(self, value: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        """Set the variable's value (in place in device memory)."""
        t = self._converted(value)
        trace = current_trace()
        if trace is not None:
            stored = trace.value_of(gradient_tape.stored_value(t))
            trace.write_var(self._ref, stored)
            if getattr(trace, "is_graph", False):
                return trace.assign_result(stored)  # type: ignore[attr-defined]
        else:
            self._write(t.numpy())
        return self if read_value else None

    def _write(self, value: Any) -> None:
        """Set the value from the host (every replica of a replicated device takes it before its next run)."""
        self._buffer[...] = value
        self._version += 1

    def assign_add(self, delta: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        # why: math_ops is built on this module (importing it at the top would be circular)
        from popjit.frontend import math_ops

        return self.assign(math_ops.add(self.read_value(), self._converted(delta)), read_value=read_value)

    def assign_sub(self, delta: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        # why: math_ops is built on this module (importing it at the top would be circular)
        from popjit.frontend import math_ops

        return self.assign(math_ops.subtract(self.read_value(), self._converted(delta)), read_value=read_value)

    # -- Python protocol -------------------------------------------------------------------
    def __repr__(self) -> str:
        if current_trace() is None:
            body = np.array2string(self._buffer, separator=", ")
            return f"<tf.Variable '{self.name}' shape={self.shape} dtype={self.dtype.name}, numpy={body}>"
        return f"<tf.Variable '{self.name}' shape={self.shape} dtype={self.dtype.name}>"

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        return self.read_value() == other

    def __ne__(self, other: Any) -> Any:  # type: ignore[override]
        return self.read_value() != other

    def __bool__(self) -> bool:
        return bool(self.read_value())

    def __len__(self) -> int:
        return len(self.read_value())

    def __iter__(self) -> Any:
        return iter(self.read_value())

    def __getitem__(self, key: Any) -> Tensor:
        return self.read_value()[key]

    def __float__(self) -> float:
        return float(self.read_value())

    def __int__(self) -> int:
        return int(self.read_value())

    def __index__(self) -> int:
        return self.read_value().__index__()

    def __deepcopy__(self, memo: dict) -> Variable:
        return Variable(self._buffer.copy(), trainable=self._trainable, name=self._name)

    @property
    def T(self) -> Tensor:
        return self.read_value().T


def _forward(name: str) -> Any:
    def method(self: Variable, *args: Any) -> Any:
        return getattr(self.read_value(), name)(*args)

    method.__name__ = name
    return method


for _m in ("add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "floordiv", "rfloordiv", "mod",
           "rmod", "pow", "rpow", "matmul", "rmatmul", "neg", "abs", "lt", "le", "gt", "ge", "and", "or", "invert",
           "rand", "ror", "xor", "rxor", "pos"):
    setattr(Variable, f"__{_m}__", _forward(f"__{_m}__"))
