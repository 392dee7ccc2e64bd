"""The functional API's symbolic tensors: ``tf.keras.Input``, ``InputLayer``, and the graph nodes a
layer records when it is called on them.

A :class:`KerasTensor` carries a shape (the batch dimension may be None), a dtype and the layer
call that produced it. Calling a layer on KerasTensors builds the layer, works out its output
signature (from ``compute_output_shape``, or by tracing ``call`` on placeholder-sized inputs), and
records a :class:`Node`; ``tf.keras.Model(inputs, outputs)`` later replays the nodes on real
tensors.
"""

from __future__ import annotations

from typing import Any

from popjit.frontend import api as tf
from popjit.keras import backend, pipelining
from popjit.keras.base_layer import Layer, as_shape_tuple, map_shapes

# The size a None (batch) dimension takes while tracing a layer to find its output signature.
_PLACEHOLDER_DIM = 1


class KerasTensor:
    """A symbolic input or intermediate of a functional model: a shape, a dtype and its origin."""

    def __init__(self, shape: Any, dtype: Any = None, name: str | None = None,
                 history: tuple[Layer, int, int] | None = None) -> None:
        self._shape = tf.TensorShape(as_shape_tuple(shape))
        self._dtype = tf.as_dtype(dtype or backend.floatx())
        self._name = name
        self._keras_history = history

    @property
    def shape(self) -> tf.TensorShape:
        return self._shape

    def get_shape(self) -> tf.TensorShape:
        return self._shape

    @property
    def dtype(self) -> Any:
        return self._dtype

    @property
    def name(self) -> str | None:
        return self._name

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def node(self) -> Node:
        layer, index, _ = self._keras_history  # type: ignore[misc]
        return layer._inbound_nodes[index]

    def __repr__(self) -> str:
        layer = self._keras_history[0].name if self._keras_history else "?"
        return f"<KerasTensor: shape={self._shape} dtype={self._dtype.name} (created by layer '{layer}')>"

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        raise TypeError(f"{self!r} is a symbolic input of a functional Keras model and has no value; call the "
                        "model on real tensors to compute with it.")

    def __hash__(self) -> int:
        return id(self)

    # Python operators become small lambda layers, as Keras's TFOpLambda layers.
    def _op(self, fn: Any, *others: Any) -> Any:
        # why: layers is built on this module (importing it at the top would be circular)
        from popjit.keras.layers import Lambda

        return Lambda(fn)([self, *others] if others else self)

    def __add__(self, other: Any) -> Any:
        return _binary(self, other, lambda a, b: a + b)

    def __radd__(self, other: Any) -> Any:
        return _binary(self, other, lambda a, b: b + a)

    def __sub__(self, other: Any) -> Any:
        return _binary(self, other, lambda a, b: a - b)

    def __rsub__(self, other: Any) -> Any:
        return _binary(self, other, lambda a, b: b - a)

    def __mul__(self, other: Any) -> Any:
        return _binary(self, other, lambda a, b: a * b)

    def __rmul__(self, other: Any) -> Any:
        return _binary(self, other, lambda a, b: b * a)

    def __truediv__(self, other: Any) -> Any:
        return _binary(self, other, lambda a, b: a / b)

    def __matmul__(self, other: Any) -> Any:
        return _binary(self, other, lambda a, b: a @ b)

    def __neg__(self) -> Any:
        return self._op(lambda a: -a)

    def __getitem__(self, key: Any) -> Any:
        return self._op(lambda a: a[key])


def _binary(x: KerasTensor, other: Any, fn: Any) -> Any:
    # why: layers is built on this module (importing it at the top would be circular)
    from popjit.keras.layers import Lambda

    if isinstance(other, KerasTensor):
        return Lambda(lambda ab: fn(ab[0], ab[1]))([x, other])
    return Lambda(lambda a: fn(a, other))(x)


class Node:
    """One call of a layer on KerasTensors: its arguments and the KerasTensors it produced."""

    def __init__(self, layer: Layer, inputs: Any, args: tuple, kwargs: dict[str, Any], outputs: Any) -> None:
        self.layer = layer
        self.inputs = inputs
        self.args = args
        self.kwargs = kwargs
        self.outputs = outputs
        self.keras_inputs = [x for x in tf.nest.flatten((inputs, args, kwargs)) if isinstance(x, KerasTensor)]
        self.stage = pipelining.node_stage(layer)  # its pipeline stage (None: not assigned)

    def run(self, values: dict[int, Any]) -> list[Any]:
        """Call the layer on the real tensors standing for its KerasTensor arguments."""
        inputs, args, kwargs = _substitute((self.inputs, self.args, self.kwargs), values)
        out = self.layer(inputs, *args, **kwargs)
        return tf.nest.flatten(out)

    def input_names(self) -> list[str]:
        """``'<layer>[<node>][<tensor>]'`` for each input (the "Connected to" column of a summary)."""
        out = []
        for kt in self.keras_inputs:
            layer, node_index, tensor_index = kt._keras_history  # type: ignore[misc]
            out.append(f"{layer.name}[{node_index}][{tensor_index}]")
        return out


def _substitute(structure: Any, values: dict[int, Any]) -> Any:
    flat, tree = tf.nest.flatten(structure), structure
    replaced = [values[id(x)] if isinstance(x, KerasTensor) else x for x in flat]
    return tf.nest.pack_sequence_as(tree, replaced)


def functional_call(layer: Layer, inputs: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
    """``layer(inputs)`` on KerasTensors: build the layer, record a node, return its KerasTensors."""
    flat = [x for x in tf.nest.flatten(inputs) if isinstance(x, KerasTensor)]
    shapes = tf.nest.map_structure(lambda x: as_shape_tuple(x.shape) if isinstance(x, KerasTensor) else x, inputs)
    layer._maybe_build(shapes)
    if hasattr(layer, "build_from_call_args"):  # a layer built from all its inputs (MultiHeadAttention)
        layer.build_from_call_args(shapes, args, kwargs)
    out_shapes, out_dtypes = layer.compute_output_signature(shapes, flat[0].dtype)
    layer._output_shape = out_shapes
    if layer._build_input_shape is None:
        layer._build_input_shape = shapes
    index = len(layer._inbound_nodes)
    flat_shapes = _flat_shapes(out_shapes)
    flat_dtypes = tf.nest.flatten(out_dtypes)
    tensors = [KerasTensor(s, d, name=f"{layer.name}/output_{i}", history=(layer, index, i))
               for i, (s, d) in enumerate(zip(flat_shapes, flat_dtypes))]
    outputs = tensors[0] if _is_single_shape(out_shapes) else _pack_like_shapes(out_shapes, tensors)
    layer._inbound_nodes.append(Node(layer, inputs, args, dict(kwargs), outputs))
    return outputs


def _is_single_shape(shapes: Any) -> bool:
    return isinstance(shapes, tf.TensorShape) or (
        isinstance(shapes, tuple) and all(d is None or isinstance(d, int) for d in shapes))


def _flat_shapes(shapes: Any) -> list[tuple]:
    if _is_single_shape(shapes):
        return [as_shape_tuple(shapes)]
    if isinstance(shapes, dict):
        return [s for k in sorted(shapes) for s in _flat_shapes(shapes[k])]
    return [s for item in shapes for s in _flat_shapes(item)]


def _pack_like_shapes(shapes: Any, tensors: list[Any]) -> Any:
    it = iter(tensors)

    def build(s: Any) -> Any:
        if _is_single_shape(s):
            return next(it)
        if isinstance(s, dict):
            return {k: build(s[k]) for k in sorted(s)}
        return type(s)(build(x) for x in s)

    return build(shapes)


def infer_output_signature(layer: Layer, input_shape: Any, input_dtype: Any = None) -> tuple[Any, Any]:
    """(shapes, dtypes) of ``layer.call`` on inputs of ``input_shape``, found by tracing it (nothing is
    compiled or run). None dimensions are traced at size 1; a None batch stays None."""
    dtype = tf.as_dtype(input_dtype or backend.floatx())
    specs = map_shapes(lambda s: tf.TensorSpec([_PLACEHOLDER_DIM if d is None else d for d in s], dtype), input_shape)
    batch_unknown = any(s[0] is None for s in _flat_shapes(input_shape) if s)
    captured: list[Any] = []

    def probe(inputs: Any) -> None:
        call = tf.autograph.to_graph(layer.call)
        out = call(inputs, **({"training": False} if layer._call_spec.accepts_training else {}))
        captured.append(tf.nest.map_structure(lambda t: (tuple(t.shape), t.dtype.name), out))

    tf.function(probe, autograph=True).get_concrete_function(specs)
    sig = captured[0]

    def shape_of(entry: tuple) -> tuple:
        shape = entry[0]
        if batch_unknown and shape and shape[0] == _PLACEHOLDER_DIM:
            return (None,) + tuple(shape[1:])
        return tuple(shape)

    if isinstance(sig, tuple) and len(sig) == 2 and isinstance(sig[1], str):
        return shape_of(sig), sig[1]
    leaves = _signature_leaves(sig)
    return (_rebuild(sig, [shape_of(e) for e in leaves]), _rebuild(sig, [e[1] for e in leaves]))


def _signature_leaves(sig: Any) -> list[tuple]:
    if isinstance(sig, tuple) and len(sig) == 2 and isinstance(sig[1], str):
        return [sig]
    if isinstance(sig, dict):
        return [e for k in sorted(sig) for e in _signature_leaves(sig[k])]
    return [e for item in sig for e in _signature_leaves(item)]


def _rebuild(sig: Any, leaves: list[Any]) -> Any:
    it = iter(leaves)

    def build(s: Any) -> Any:
        if isinstance(s, tuple) and len(s) == 2 and isinstance(s[1], str):
            return next(it)
        if isinstance(s, dict):
            return {k: build(s[k]) for k in sorted(s)}
        return type(s)(build(x) for x in s)

    return build(sig)


class InputLayer(Layer):
    """The entry point of a model: holds the input's shape and dtype, passes tensors through."""

    def __init__(self, input_shape: Any = None, batch_size: int | None = None, dtype: Any = None,
                 input_tensor: Any = None, sparse: Any = None, name: str | None = None, ragged: Any = None,
                 type_spec: Any = None, **kwargs: Any) -> None:
        batch_input_shape = kwargs.pop("batch_input_shape", None)
        if input_shape is not None and batch_input_shape is not None:
            raise ValueError("Only provide the input_shape OR batch_input_shape argument to InputLayer, not both "
                             "at the same time.")
        if input_tensor is not None and batch_input_shape is None and input_shape is None:
            batch_input_shape = tuple(input_tensor.shape)
        if batch_input_shape is None:
            if input_shape is None:
                raise ValueError("InputLayer needs an `input_shape` (without the batch dimension) or a "
                                 "`batch_input_shape`.")
            if isinstance(input_shape, int):
                input_shape = (input_shape,)
            batch_input_shape = (batch_size,) + as_shape_tuple(input_shape)
        name = name or backend.unique_object_name("input", zero_based=False)
        super().__init__(name=name, dtype=dtype, **kwargs)
        self._batch_input_shape = as_shape_tuple(batch_input_shape)
        self.built = True
        self._build_input_shape = self._batch_input_shape
        self._output_shape = [self._batch_input_shape]
        tensor = KerasTensor(self._batch_input_shape, self.dtype, name=name, history=(self, 0, 0))
        self._inbound_nodes.append(Node(self, [], (), {}, tensor))

    @property
    def output(self) -> KerasTensor:
        return self._inbound_nodes[0].outputs

    def call(self, inputs: Any) -> Any:
        return inputs

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        return {"batch_input_shape": self._batch_input_shape, "dtype": self.dtype, "sparse": False,
                "ragged": False, "name": self.name}


def Input(shape: Any = None, batch_size: int | None = None, name: str | None = None, dtype: Any = None,
          sparse: Any = None, tensor: Any = None, ragged: Any = None, type_spec: Any = None,
          **kwargs: Any) -> KerasTensor:
    """``tf.keras.Input``: a symbolic input of ``shape`` (without the batch dimension) for a functional model."""
    batch_shape = kwargs.pop("batch_shape", None) or kwargs.pop("batch_input_shape", None)
    if kwargs:
        raise ValueError(f"Unrecognized keyword arguments: {list(kwargs)}")
    if shape is not None and batch_shape is not None:
        raise ValueError("Only provide the `shape` OR `batch_shape` argument to Input, not both at the same time.")
    if shape is None and batch_shape is None and tensor is None:
        raise ValueError("Please provide to Input a `shape` or a `tensor` or a `type_spec` argument. Note that "
                         "`shape` does not include the batch dimension.")
    layer = InputLayer(input_shape=shape, batch_size=batch_size, dtype=dtype, input_tensor=tensor, name=name,
                       batch_input_shape=batch_shape)
    return layer.output
