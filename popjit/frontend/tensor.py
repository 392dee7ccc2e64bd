"""``tf.Tensor`` and ``tf.TensorShape``.

A :class:`Tensor` is either *eager* (it holds a NumPy array) or *symbolic* (it names an SSA
value of the graph being traced). Python operators on tensors call the TensorFlow-named
functions in :mod:`popjit.frontend.math_ops`, which build graph nodes while tracing and run the
op immediately otherwise.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from popjit import dtypes
from popjit.dtypes import DType
from popjit.errors import InvalidArgumentError
from popjit.ir.graph import Aval, Value

if TYPE_CHECKING:
    from popjit.frontend.tracing import Trace


class Dimension(int):
    """A known dimension (TF1's ``Dimension``); ``.value`` gives the int."""

    @property
    def value(self) -> int:
        return int(self)


class TensorShape:
    """A static shape. popjit shapes are always fully defined inside compiled code."""

    __slots__ = ("_dims",)

    def __init__(self, dims: Sequence[int | None] | TensorShape | None) -> None:
        if isinstance(dims, TensorShape):
            self._dims = dims._dims
        elif dims is None:
            self._dims = None
        else:
            self._dims = tuple(None if d is None else int(d) for d in dims)

    @property
    def rank(self) -> int | None:
        return None if self._dims is None else len(self._dims)

    @property
    def ndims(self) -> int | None:
        return self.rank

    @property
    def dims(self) -> list[int | None] | None:
        return None if self._dims is None else list(self._dims)

    def as_list(self) -> list[int | None]:
        if self._dims is None:
            raise ValueError("as_list() is not defined on an unknown TensorShape.")
        return list(self._dims)

    def is_fully_defined(self) -> bool:
        return self._dims is not None and all(d is not None for d in self._dims)

    def num_elements(self) -> int | None:
        if not self.is_fully_defined():
            return None
        return int(np.prod(self._dims, dtype=np.int64))

    def is_compatible_with(self, other: Any) -> bool:
        other = TensorShape(other) if not isinstance(other, TensorShape) else other
        if self._dims is None or other._dims is None:
            return True
        return len(self._dims) == len(other._dims) and all(
            a is None or b is None or a == b for a, b in zip(self._dims, other._dims)
        )

    def __len__(self) -> int:
        if self._dims is None:
            raise ValueError("Cannot take the length of shape with unknown rank.")
        return len(self._dims)

    def __iter__(self) -> Iterator[int | None]:
        return iter(self._dims or ())

    def __getitem__(self, i: int | slice) -> Any:
        if self._dims is None:
            return None
        if isinstance(i, slice):
            return TensorShape(self._dims[i])
        return self._dims[i]

    def __eq__(self, other: object) -> bool:
        try:
            other = TensorShape(other)  # type: ignore[arg-type]
        except TypeError:
            return NotImplemented
        return self._dims == other._dims

    def __hash__(self) -> int:
        return hash(self._dims)

    def __repr__(self) -> str:
        return f"TensorShape({list(self._dims) if self._dims is not None else None})"

    def __str__(self) -> str:
        if self._dims is None:
            return "<unknown>"
        inner = ", ".join("None" if d is None else str(d) for d in self._dims)
        return f"({inner}{',' if len(self._dims) == 1 else ''})"


class Tensor:
    """A TensorFlow tensor: eager (``.numpy()`` works) or symbolic (inside a trace)."""

    __array_priority__ = 100
    __slots__ = ("__weakref__", "_device", "_sym", "_trace", "_value")

    def __init__(self, value: np.ndarray | None = None, sym: Value | None = None,
                 trace: Trace | None = None, device: str = "/job:localhost/replica:0/task:0/device:CPU:0") -> None:
        self._value = value
        self._sym = sym
        self._trace = trace
        self._device = device

    # -- construction ----------------------------------------------------------------------
    @staticmethod
    def eager(value: np.ndarray, device: str | None = None) -> Tensor:
        assert isinstance(value, np.ndarray), f"eager tensors hold arrays, not {type(value).__name__}"
        dtypes.as_dtype(value.dtype)  # refuse unsupported dtypes early
        t = Tensor(value=value)
        if device:
            t._device = device
        return t

    @staticmethod
    def symbolic(sym: Value, trace: Trace) -> Tensor:
        return Tensor(sym=sym, trace=trace)

    # -- properties ------------------------------------------------------------------------
    @property
    def is_symbolic(self) -> bool:
        return self._sym is not None

    @property
    def aval(self) -> Aval:
        if self._sym is not None:
            return self._sym.aval
        v = self._value
        assert v is not None
        return Aval(tuple(v.shape), dtypes.as_dtype(v.dtype))

    @property
    def shape(self) -> TensorShape:
        return TensorShape(self.aval.shape)

    def get_shape(self) -> TensorShape:
        return self.shape

    @property
    def dtype(self) -> DType:
        return self.aval.dtype

    @property
    def ndim(self) -> int:
        return self.aval.ndim

    @property
    def device(self) -> str:
        return self._device

    @property
    def name(self) -> str:
        if self._sym is not None:
            named = getattr(self._trace, "names", {}).get(self._sym.uid)  # a TF1 graph's placeholder names
            return f"{named or f'Tensor#{self._sym.uid}'}:0"
        raise AttributeError("Tensor.name is undefined when eager execution is enabled.")

    def numpy(self) -> np.ndarray:
        """The value as a NumPy array (eager tensors only)."""
        if self._value is None:
            raise NotImplementedError(
                "numpy() is only available when eager execution is enabled; this tensor is symbolic "
                "(it is being traced inside a tf.function). Return it from the function instead."
            )
        return self._value

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        v = self.numpy()
        return v.astype(dtype) if dtype is not None else v

    def __repr__(self) -> str:
        if self._value is not None:
            body = np.array2string(self._value, separator=", ")
            return f"<tf.Tensor: shape={self.shape}, dtype={self.dtype.name}, numpy={body}>"
        return f"<tf.Tensor '{self.name}' shape={self.shape} dtype={self.dtype.name}>"

    def __str__(self) -> str:
        if self._value is not None:
            return f"tf.Tensor({self._value}, shape={self.shape}, dtype={self.dtype.name})"
        return repr(self)

    # -- Python protocol -------------------------------------------------------------------
    def __bool__(self) -> bool:
        if self._value is None:
            raise TypeError(
                "Using a symbolic tf.Tensor as a Python bool is not allowed inside a tf.function: the "
                "value is not known while tracing. Write the condition directly in an `if` or `while` "
                "statement of the traced function (autograph turns it into a graph conditional), or use "
                "tf.cond / tf.where."
            )
        if self._value.size != 1:
            raise ValueError(
                "The truth value of an array with more than one element is ambiguous. Use a.any() or a.all()"
            )
        return bool(self._value)

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.aval.shape[0]

    def __index__(self) -> int:
        if self._value is None or not self.dtype.is_integer or self.ndim != 0:
            raise TypeError(
                "Only integer scalar eager tensors can be used as a Python index. Inside a tf.function "
                "use `for i in tf.range(n)` or `range(n)` with a tensor `n` (autograph converts it)."
            )
        return int(self._value)

    def __int__(self) -> int:
        return int(self.numpy())

    def __float__(self) -> float:
        return float(self.numpy())

    def __iter__(self) -> Iterator[Tensor]:
        if self.ndim == 0:
            raise TypeError("Cannot iterate over a scalar tensor.")
        # why: array_ops is built on this module (importing it at the top would be circular)
        from popjit.frontend import array_ops

        if self._value is None:
            return iter(array_ops.unstack(self))
        return (self[i] for i in range(self.aval.shape[0]))

    def __hash__(self) -> int:
        return id(self)

    def __copy__(self) -> Tensor:
        return self

    def __deepcopy__(self, memo: dict) -> Tensor:
        return self

    def __reduce__(self) -> tuple:
        return (Tensor.eager, (self.numpy(),))

    def __getitem__(self, key: Any) -> Tensor:
        # why: array_ops is built on this module (importing it at the top would be circular)
        from popjit.frontend import array_ops

        return array_ops.getitem(self, key)

    # eq/ne compare values, as TensorFlow 2 does.
    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        # why: math_ops is built on this module (importing it at the top would be circular)
        from popjit.frontend import math_ops

        return math_ops.equal(self, other)

    def __ne__(self, other: Any) -> Any:  # type: ignore[override]
        # why: math_ops is built on this module (importing it at the top would be circular)
        from popjit.frontend import math_ops

        return math_ops.not_equal(self, other)

    @property
    def T(self) -> Tensor:
        # why: array_ops is built on this module (importing it at the top would be circular)
        from popjit.frontend import array_ops

        return array_ops.transpose(self)

    def set_shape(self, shape: Any) -> None:
        if not self.shape.is_compatible_with(TensorShape(shape)):
            raise ValueError(f"Tensor's shape {self.shape} is not compatible with supplied shape {TensorShape(shape)}.")

    def eval(self, feed_dict: Any = None, session: Any = None) -> np.ndarray:
        """The value: an eager tensor's own; a TF1 graph tensor's, run in ``session`` (the default one if None)."""
        if self._sym is not None and getattr(self._trace, "is_graph", False):
            return self._trace.session_for(session).run(self, feed_dict=feed_dict)  # type: ignore[union-attr]
        return self.numpy()

    @property
    def graph(self) -> Any:
        """The TF1 graph of a graph-mode tensor (None otherwise)."""
        return getattr(self._trace, "facade", None)


def _binary(name: str, reflected: bool = False) -> Any:
    def method(self: Tensor, other: Any) -> Tensor:
        # why: math_ops is built on this module (importing it at the top would be circular)
        from popjit.frontend import math_ops

        fn = getattr(math_ops, name)
        return fn(other, self) if reflected else fn(self, other)

    method.__name__ = name
    return method


def _unary(name: str) -> Any:
    def method(self: Tensor) -> Tensor:
        # why: math_ops is built on this module (importing it at the top would be circular)
        from popjit.frontend import math_ops

        return getattr(math_ops, name)(self)

    return method


for _dunder, _fn in {
    "add": "add", "sub": "subtract", "mul": "multiply", "truediv": "truediv", "floordiv": "floordiv",
    "mod": "floormod", "pow": "pow", "matmul": "matmul", "and": "logical_and_or_bitwise",
    "or": "logical_or_or_bitwise", "lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal",
    "xor": "logical_xor_or_bitwise",
}.items():
    setattr(Tensor, f"__{_dunder}__", _binary(_fn))
    if _dunder not in ("lt", "le", "gt", "ge"):
        setattr(Tensor, f"__r{_dunder}__", _binary(_fn, reflected=True))
Tensor.__neg__ = _unary("negative")  # type: ignore[attr-defined]
Tensor.__abs__ = _unary("abs")  # type: ignore[attr-defined]
Tensor.__invert__ = _unary("invert_or_logical_not")  # type: ignore[attr-defined]
Tensor.__pos__ = lambda self: self  # type: ignore[attr-defined]


def is_tensor(x: Any) -> bool:
    """True for tf.Tensor (eager or symbolic) and tf.Variable."""
    # why: variables is built on this module (importing it at the top would be circular)
    from popjit.frontend.variables import Variable

    return isinstance(x, (Tensor, Variable))


def shape_error(msg: str) -> InvalidArgumentError:
    return InvalidArgumentError(msg)


def placed_beside(t: Any, backward: bool | None = None) -> contextlib.AbstractContextManager[None]:
    """While the block builds nodes: on the IPU of the node that made the traced tensor ``t`` (and marked as a
    gradient computation when ``backward``); nothing changes for an eager tensor or an unplaced node."""
    sym, trace = getattr(t, "_sym", None), getattr(t, "_trace", None)
    if trace is None or sym is None or sym.producer is None:
        return contextlib.nullcontext()
    return trace.placed(sym.producer.shard, backward=backward)
