"""``tf.keras.layers.Layer``: weights, lazy building, calling, and tracking of nested layers.

A layer creates its weights in :meth:`Layer.build` (called once, from the shape of the first
input) through :meth:`Layer.add_weight`, which computes the initial value on the host and makes a
``tf.Variable`` on the device of the IPU strategy the layer was created under. :meth:`Layer.call`
is ordinary TensorFlow code (``popjit.frontend.api``), so a layer runs eagerly and inside a traced step alike.
Called on the symbolic inputs of the functional API (``tf.keras.Input``), a layer records a node
of the model's graph instead of computing.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from popjit.frontend import api as tf
from popjit.keras import backend, constraints, initializers, mixed_precision, pipelining, regularizers

_LAYER_KWARGS = frozenset({"input_dim", "input_shape", "batch_input_shape", "batch_size", "weights",
                           "activity_regularizer", "autocast", "implementation"})


def as_shape_tuple(shape: Any) -> tuple[int | None, ...]:
    """A shape (TensorShape, list, tuple) as a tuple of ints and Nones."""
    if isinstance(shape, tf.TensorShape):
        return tuple(shape.as_list())
    return tuple(None if d is None else int(d) for d in shape)


def _is_shape(x: Any) -> bool:
    return isinstance(x, tf.TensorShape) or (
        isinstance(x, (list, tuple)) and all(d is None or isinstance(d, (int, np.integer)) for d in x))


def map_shapes(fn: Any, shapes: Any) -> Any:
    """Apply ``fn`` to each shape in a nest of shapes (a shape is a tuple of ints/None)."""
    if _is_shape(shapes):
        return fn(as_shape_tuple(shapes))
    if isinstance(shapes, dict):
        return {k: map_shapes(fn, v) for k, v in shapes.items()}
    return type(shapes)(map_shapes(fn, s) for s in shapes)


def _to_tensor(x: Any) -> Any:
    if isinstance(x, (np.ndarray, np.generic, float, int)) and not isinstance(x, bool):
        return tf.convert_to_tensor(x)
    return x


class Layer:
    """A callable holding weights: subclass it with ``build(input_shape)`` and ``call(inputs)``."""

    _scopes_sublayers = True  # weights of nested layers are named "<this layer>/<layer>/<weight>"

    def __init__(self, trainable: bool = True, name: str | None = None, dtype: Any = None, dynamic: bool = False,
                 **kwargs: Any) -> None:
        for key in kwargs:
            if key not in _LAYER_KWARGS:
                raise TypeError(f"('Keyword argument not understood:', '{key}')")
        object.__setattr__(self, "_tracking", True)
        self._trainable_weights: list[tf.Variable] = []
        self._non_trainable_weights: list[tf.Variable] = []
        self._sublayers: list[Layer] = []
        self._trainable = bool(trainable)
        self._name = name or backend.unique_object_name(backend.to_snake_case(type(self).__name__))
        # the dtype policy (None: follow backend.floatx()); ``_dtype``: its variable dtype
        self._dtype_policy = mixed_precision.policy_of(dtype)
        self._dtype = self._dtype_policy.variable_dtype if self._dtype_policy is not None else None
        self._autocast = bool(kwargs.get("autocast", True))
        self.built = False
        self.dynamic = dynamic
        self.supports_masking = False
        self._strategy = backend.current_strategy()
        self._inbound_nodes: list[Any] = []
        self._pipeline_stage = pipelining.current_stage()  # a layer made inside a PipelineStage keeps its stage
        self._build_input_shape: Any = None
        self._output_shape: Any = None
        self._initial_weights = kwargs.get("weights")
        self._batch_input_shape = self._batch_shape_from(kwargs)
        self._call_spec = _CallSpec(type(self).call)
        self._callable_losses: list[Callable[[], Any]] = []  # weight penalties, evaluated when read
        self._call_losses: list[Any] = []  # added during the last outermost call
        self.activity_regularizer = regularizers.get(kwargs.get("activity_regularizer"))

    @staticmethod
    def _batch_shape_from(kwargs: dict[str, Any]) -> tuple[int | None, ...] | None:
        if "batch_input_shape" in kwargs:
            return as_shape_tuple(kwargs["batch_input_shape"])
        if "input_shape" in kwargs:
            return (kwargs.get("batch_size"),) + as_shape_tuple(kwargs["input_shape"])
        if kwargs.get("input_dim") is not None:
            return (kwargs.get("batch_size"), int(kwargs["input_dim"]))
        return None

    # -- attribute tracking -------------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_tracking", False) and not name.startswith("_"):
            self._track(value)
        object.__setattr__(self, name, value)

    def _track(self, value: Any) -> None:
        if isinstance(value, Layer) and value is not self:
            if not any(value is s for s in self._sublayers):
                self._sublayers.append(value)
        elif isinstance(value, tf.Variable):
            own = self._trainable_weights if value.trainable else self._non_trainable_weights
            if not any(value is w for w in own):
                own.append(value)
        elif isinstance(value, (list, tuple)):
            for v in value:
                self._track(v)
        elif isinstance(value, dict):
            for v in value.values():
                self._track(v)

    def _flatten_layers(self, recursive: bool = True) -> Iterator[Layer]:
        """Nested layers in the order they were assigned (depth first when ``recursive``)."""
        seen: set[int] = set()
        for layer in self._sublayers:
            if id(layer) in seen:
                continue
            seen.add(id(layer))
            yield layer
            if recursive:
                for sub in layer._flatten_layers(True):
                    if id(sub) not in seen:
                        seen.add(id(sub))
                        yield sub

    # -- properties --------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def dtype(self) -> str:
        """The dtype of the layer's weights (its policy's ``variable_dtype``; ``backend.floatx()`` by default)."""
        return self._dtype or backend.floatx()

    @property
    def compute_dtype(self) -> str:
        """The dtype the layer computes in and casts its floating-point inputs to (its policy's)."""
        policy = self._dtype_policy
        return policy.compute_dtype if policy is not None and policy.compute_dtype else self.dtype

    @property
    def variable_dtype(self) -> str:
        """Same as :attr:`dtype`."""
        return self.dtype

    @property
    def dtype_policy(self) -> mixed_precision.Policy:
        """The layer's :class:`~popjit.keras.mixed_precision.Policy`."""
        return self._dtype_policy if self._dtype_policy is not None else mixed_precision.Policy(self.dtype)

    @property
    def trainable(self) -> bool:
        return self._trainable

    @trainable.setter
    def trainable(self, value: bool) -> None:
        self._trainable = bool(value)
        for layer in self._flatten_layers():
            layer._trainable = bool(value)

    @property
    def trainable_weights(self) -> list[tf.Variable]:
        """Weights updated by training: this layer's, then nested layers' (none if not trainable)."""
        if not self.trainable:
            return []
        out = list(self._trainable_weights)
        for layer in self._sublayers:
            out += layer.trainable_weights
        return _dedup(out)

    @property
    def non_trainable_weights(self) -> list[tf.Variable]:
        """Weights not updated by training (all of them when the layer is frozen)."""
        if self.trainable:
            out = list(self._non_trainable_weights)
            for layer in self._sublayers:
                out += layer.non_trainable_weights
        else:
            out = self._trainable_weights + self._non_trainable_weights
            for layer in self._sublayers:
                out += layer.weights
        return _dedup(out)

    @property
    def weights(self) -> list[tf.Variable]:
        """Trainable weights followed by non-trainable ones."""
        return _dedup(self.trainable_weights + self.non_trainable_weights)

    @property
    def variables(self) -> list[tf.Variable]:
        return self.weights

    @property
    def trainable_variables(self) -> list[tf.Variable]:
        return self.trainable_weights

    @property
    def non_trainable_variables(self) -> list[tf.Variable]:
        return self.non_trainable_weights

    @property
    def losses(self) -> list[Any]:
        """The losses of this layer and its nested layers: weight penalties (computed now, so inside a
        traced step they are part of it) and the losses added by the last call (``add_loss``, activity
        penalties)."""
        out: list[Any] = []
        for layer in [self, *self._flatten_layers()]:
            out += [fn() for fn in layer._callable_losses] + list(layer._call_losses)
        return out

    def add_loss(self, losses: Any, inputs: Any = None) -> None:
        """Add a loss to :attr:`losses`: a tensor computed in ``call`` (kept until the next outermost
        call), or a zero-argument callable evaluated whenever the losses are read."""
        for loss in tf.nest.flatten(losses):
            if loss is None:
                continue
            if callable(loss):
                self._callable_losses.append(loss)
            else:
                self._call_losses.append(tf.convert_to_tensor(loss))

    def _clear_call_losses(self) -> None:
        for layer in [self, *self._flatten_layers()]:
            layer._call_losses = []

    @property
    def input_shape(self) -> Any:
        if self._build_input_shape is None:
            raise AttributeError(f'The layer "{self.name}" has never been called and thus has no defined input shape.')
        return self._build_input_shape

    @property
    def output_shape(self) -> Any:
        if self._output_shape is None:
            raise AttributeError(f"The layer {self.name} has never been called and thus has no defined output shape.")
        return self._output_shape

    # -- weights -----------------------------------------------------------------------------------
    def add_weight(self, name: str | None = None, shape: Any = None, dtype: Any = None, initializer: Any = None,
                   regularizer: Any = None, trainable: bool | None = None, constraint: Any = None,
                   use_resource: Any = None, synchronization: Any = None, aggregation: Any = None,
                   **kwargs: Any) -> tf.Variable:
        """A new weight: its initial value computed on the host, the variable on the layer's device."""
        shape = tuple(int(d) for d in (shape or ()))
        dt = tf.as_dtype(dtype or self.dtype)
        if initializer is None:
            initializer = "glorot_uniform" if dt.is_floating else "zeros"
        init = initializers.get(initializer)
        value = backend.host_value(init, shape, dtype=dt)
        trainable = True if trainable is None else bool(trainable)
        full_name = f"{backend.name_scope_prefix()}{self.name}/{name or 'Variable'}"
        autocast = kwargs.get("experimental_autocast", True) and dt.is_floating and self.compute_dtype != self.dtype
        var = backend.make_variable(value.astype(dt.np, copy=False), full_name, trainable, self._strategy,
                                    constraints.get(constraint),
                                    mixed_precision.AutoCastVariable if autocast else tf.Variable)
        (self._trainable_weights if trainable else self._non_trainable_weights).append(var)
        penalty = regularizers.get(regularizer)
        if penalty is not None:
            self._callable_losses.append(lambda: penalty(var))
        return var

    def get_weights(self) -> list[np.ndarray]:
        """The weights' values as NumPy arrays, in the order of :attr:`weights`."""
        return [w.numpy() for w in self.weights]

    def set_weights(self, weights: list[Any]) -> None:
        """Assign NumPy arrays to the weights, in the order of :attr:`weights` (shapes must match)."""
        params = self.weights
        if len(params) != len(weights):
            raise ValueError(
                f'You called `set_weights(weights)` on layer "{self.name}" with a weight list of length '
                f"{len(weights)}, but the layer was expecting {len(params)} weights. Provided weights: "
                f"{str(weights)[:50]}...")
        for var, value in zip(params, weights):
            arr = np.asarray(value)
            if tuple(var.shape) != arr.shape:
                raise ValueError(f"Layer {self.name} weight shape {tuple(var.shape)} is not compatible with provided "
                                 f"weight shape {arr.shape}.")
        for var, value in zip(params, weights):
            var.assign(np.asarray(value, dtype=var.dtype.as_numpy_dtype))

    def count_params(self) -> int:
        """The number of scalars in the layer's weights."""
        if not self.built:
            raise ValueError(f"You tried to call `count_params` on layer {self.name}, but the layer isn't built. "
                             f"You can build it manually via: `{self.name}.build(batch_input_shape)`.")
        return int(sum(int(np.prod(w.shape.as_list())) for w in self.weights))

    # -- building ----------------------------------------------------------------------------------
    def build(self, input_shape: Any) -> None:
        """Create the weights for inputs of ``input_shape`` (the base class creates none)."""
        self._build_input_shape = input_shape
        self.built = True

    def _maybe_build(self, input_shapes: Any) -> None:
        if self.built:
            return
        shapes = input_shapes
        if _is_shape(shapes):
            shapes = tf.TensorShape(as_shape_tuple(shapes))
        self.build(shapes)
        self.built = True
        if self._build_input_shape is None:
            self._build_input_shape = input_shapes
        if self._initial_weights is not None:
            self.set_weights(self._initial_weights)
            self._initial_weights = None

    def compute_output_shape(self, input_shape: Any) -> Any:
        """The output shape for ``input_shape``: by default found by tracing :meth:`call`."""
        # why: keras_tensor is built on this module (importing it at the top would be circular)
        from popjit.keras.keras_tensor import infer_output_signature

        return infer_output_signature(self, input_shape)[0]

    def compute_output_signature(self, input_shape: Any, input_dtype: Any) -> tuple[Any, Any]:
        """(output shapes, output dtypes) for inputs of ``input_shape`` and ``input_dtype``."""
        shape = self.compute_output_shape(input_shape)
        dt = tf.as_dtype(input_dtype)
        out_dtype = self.compute_dtype if (self._autocast and dt.is_floating) else dt.name
        return shape, map_shapes(lambda _s: out_dtype, shape)

    # -- calling -----------------------------------------------------------------------------------
    def call(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        """The layer's computation (the base class returns its inputs)."""
        return inputs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if args:
            inputs, args = args[0], args[1:]
        elif "inputs" in kwargs:
            inputs = kwargs.pop("inputs")
        else:
            raise TypeError(f"{self.name}: the layer needs an input tensor")
        if any(backend.is_keras_tensor(x) for x in tf.nest.flatten(inputs)):
            # why: keras_tensor is built on this module (importing it at the top would be circular)
            from popjit.keras.keras_tensor import functional_call

            return functional_call(self, inputs, args, kwargs)
        inputs = tf.nest.map_structure(_to_tensor, inputs)
        if args:
            args, kwargs = self._call_spec.name_positionals(args, kwargs)
        training = self._resolve_training(kwargs)
        if backend.call_depth() == 0:
            self._clear_call_losses()
        with backend.call_context(training), backend.autocast_scope(self.compute_dtype):
            self._maybe_build(tf.nest.map_structure(lambda t: tuple(t.shape), inputs))
            inputs = self._autocast_inputs(inputs)
            if self._call_spec.accepts_training:
                kwargs["training"] = training
            call = self.call if tf.executing_eagerly() else tf.autograph.to_graph(self.call)
            with backend.name_scope(self.name if self._scopes_sublayers else None), pipelining.on_stage_ipu(self):
                outputs = call(inputs, *args, **kwargs)
        if self.activity_regularizer is not None:
            self._add_activity_penalty(outputs)
        return outputs

    def _add_activity_penalty(self, outputs: Any) -> None:
        """Keras's activity regularization: the penalty of each output over its batch size."""
        for out in tf.nest.flatten(outputs):
            batch = tf.cast(tf.shape(out)[0], out.dtype)
            self._call_losses.append(self.activity_regularizer(out) / batch)

    def _resolve_training(self, kwargs: dict[str, Any]) -> Any:
        """The ``training`` flag of this call: given, else the enclosing call's, else the default."""
        if "training" in kwargs:
            training = kwargs.pop("training")
            if training is not None:
                return training
        outer = backend.current_training()
        if outer is not None:
            return outer
        return self._call_spec.training_default

    def _autocast_inputs(self, inputs: Any) -> Any:
        if not self._autocast:
            return inputs
        target = tf.as_dtype(self.compute_dtype)

        def cast(x: Any) -> Any:
            if isinstance(x, tf.Tensor) and x.dtype.is_floating and x.dtype != target:
                return tf.cast(x, target)
            return x

        return tf.nest.map_structure(cast, inputs)

    # -- checkpoints -------------------------------------------------------------------------------
    def _trackable_children(self) -> list[tuple[str, Any]]:
        """What a ``tf.train.Checkpoint`` saves of this layer: its weights by the names they were created with
        (``kernel``, ``bias``...), then its nested layers by the attributes holding them, as Keras does."""
        own = [(w.name.split(":")[0].rsplit("/", 1)[-1], w)
               for w in self._trainable_weights + self._non_trainable_weights]
        nested = [(name, value) for name, value in vars(self).items()
                  if isinstance(value, Layer) or (not name.startswith("_") and isinstance(value, list | tuple)
                                                  and value and all(isinstance(v, Layer) for v in value))]
        return own + nested

    # -- configuration -----------------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        """Constructor arguments that recreate the layer (without its weights)."""
        dtype = mixed_precision.serialize(self._dtype_policy) if self._dtype_policy is not None else self.dtype
        config: dict[str, Any] = {"name": self.name, "trainable": self.trainable, "dtype": dtype}
        if self._batch_input_shape is not None:
            config["batch_input_shape"] = self._batch_input_shape
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Layer:
        """A new layer from :meth:`get_config`'s dict."""
        return cls(**config)

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__name__} object '{self.name}'>"


class _CallSpec:
    """What a ``call`` method accepts: whether it takes ``training`` and that argument's default."""

    def __init__(self, call: Any) -> None:
        try:
            params = inspect.signature(call).parameters
        except (TypeError, ValueError):
            params = {}
        p = params.get("training")
        self.accepts_training = p is not None
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        names = [name for name, q in params.items() if q.kind in positional]
        self.extra_positionals = names[2:]  # after self and inputs
        default = p.default if p is not None and p.default is not inspect.Parameter.empty else None
        self.training_default = default if default is not None else False


    def name_positionals(self, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        """Extra positional arguments as keywords (so a positional ``training`` is seen as one)."""
        if len(args) > len(self.extra_positionals):
            return args, kwargs
        named = dict(zip(self.extra_positionals, args))
        for key in named:
            if key in kwargs:
                raise TypeError(f"call() got multiple values for argument '{key}'")
        return (), {**kwargs, **named}


def _dedup(variables: list[tf.Variable]) -> list[tf.Variable]:
    seen: set[int] = set()
    out = []
    for v in variables:
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return out
