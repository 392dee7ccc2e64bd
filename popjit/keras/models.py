"""``tf.keras.Model`` (functional and subclassed) and ``tf.keras.Sequential``.

A model is a layer made of layers. Its weights are its layers' weights, in layer order, so
``get_weights`` / ``set_weights`` exchange NumPy arrays in Keras's order. Calling a model on
tensors runs its layers with TensorFlow ops (``popjit.frontend.api``): eagerly, or inside a traced step, where a
model built lazily creates its variables (on the device of the enclosing IPU strategy).
"""

from __future__ import annotations

import json
from typing import Any

from popjit.errors import missing_api, unimplemented_name
from popjit.frontend import api as tf
from popjit.keras import backend, functional_config, generic_utils, keras3_schema, optimizers, pipelining, saving
from popjit.keras.base_layer import Layer, _dedup, as_shape_tuple
from popjit.keras.keras_tensor import InputLayer, KerasTensor, Node, infer_output_signature
from popjit.keras.layers import deserialize, serialize
from popjit.keras.summary import print_summary
from popjit.keras.training import TrainingAPI, split_ipu_config
from popjit.support import names_below, unimplemented_message

_MODEL_KWARGS = frozenset({"trainable", "dtype", "dynamic", "name", "autocast"})

#: Keras's and Graphcore's Model methods popjit does not provide yet: UnimplementedError, not AttributeError.
_MISSING_METHODS = frozenset({
    "to_yaml", "make_train_function", "make_test_function",
    "make_predict_function", "export_for_ipu_serving",
})
#: Graphcore's Model methods for several IPUs (pipelining, replication): UnimplementedError with advice.
_MULTI_IPU_METHODS = names_below("keras.Model")


class Model(TrainingAPI, Layer):
    """A trainable network: ``Model(inputs, outputs)`` from ``tf.keras.Input`` tensors (functional), or a
    subclass that creates layers in ``__init__`` and uses them in ``call``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        inputs = kwargs.pop("inputs", args[0] if len(args) > 0 else None)
        outputs = kwargs.pop("outputs", args[1] if len(args) > 1 else None)
        for key in kwargs:
            if key not in _MODEL_KWARGS:
                raise TypeError(f"('Keyword argument not understood:', '{key}')")
        if (inputs is None) != (outputs is None):
            raise ValueError("A functional Model needs both `inputs` and `outputs`.")
        name = kwargs.pop("name", None)
        if name is None:
            name = backend.unique_object_name(backend.to_snake_case(type(self).__name__))
        super().__init__(name=name, **kwargs)
        self._is_graph_network = False
        self._nodes: list[Node] = []
        self._layer_list: list[Layer] = []
        self.optimizer: Any = None
        self.stop_training = False
        self._is_compiled = False
        self._functions: dict[Any, Any] = {}
        self._steps_per_execution = 1
        if inputs is not None:
            self._init_graph_network(inputs, outputs)

    # -- the functional graph ------------------------------------------------------------------------
    def _init_graph_network(self, inputs: Any, outputs: Any) -> None:
        flat_in, flat_out = tf.nest.flatten(inputs), tf.nest.flatten(outputs)
        for x in flat_in + flat_out:
            if not isinstance(x, KerasTensor):
                raise ValueError(f"Input tensors to a Functional model must come from `tf.keras.Input`. Received: "
                                 f"{x} (missing previous layer metadata).")
        for x in flat_in:
            if not isinstance(x._keras_history[0], InputLayer):  # type: ignore[index]
                raise ValueError(f"Input tensors to a Functional model must come from `tf.keras.Input`. Received: {x}")
        self._is_graph_network = True
        self._scopes_sublayers = False
        self._autocast = False  # as in Keras, a graph network's layers cast their own inputs
        self._nested_inputs, self._nested_outputs = inputs, outputs
        self.inputs, self.outputs = flat_in, flat_out
        self._nodes = _topological_nodes(flat_out)
        input_layers = [x._keras_history[0] for x in flat_in]  # type: ignore[index]
        self._check_connected(flat_in)
        others = [n.layer for n in self._nodes if not isinstance(n.layer, InputLayer)]
        self._layer_list = _dedup_layers(input_layers + others)
        for layer in self._layer_list:
            self._track(layer)
        self._build_input_shape = [tuple(x.shape) for x in flat_in] if len(flat_in) > 1 else tuple(flat_in[0].shape)
        self._output_shape = [tuple(x.shape) for x in flat_out] if len(flat_out) > 1 else tuple(flat_out[0].shape)
        self.built = True

    def _check_connected(self, flat_in: list[KerasTensor]) -> None:
        known = {id(x) for x in flat_in}
        done: list[str] = []
        for node in self._nodes:
            if isinstance(node.layer, InputLayer) and id(node.outputs) not in known:
                raise ValueError(f'Graph disconnected: cannot obtain value for tensor {node.outputs} at layer '
                                 f'"{node.layer.name}". The following previous layers were accessed without issue: '
                                 f"{done}")
            done.append(node.layer.name)

    def _run_graph(self, inputs: Any) -> Any:
        flat = self._flatten_call_inputs(inputs)
        values: dict[int, Any] = {}
        for kt, x in zip(self.inputs, flat):
            values[id(kt)] = _conform(x, kt)
        for node in self._nodes:
            if isinstance(node.layer, InputLayer):
                continue
            with pipelining.on_stage_ipu(node):
                outs = node.run(values)
            for kt, value in zip(tf.nest.flatten(node.outputs), outs):
                values[id(kt)] = value
        return tf.nest.map_structure(lambda kt: values[id(kt)], self._nested_outputs)

    def _flatten_call_inputs(self, inputs: Any) -> list[Any]:
        if isinstance(self._nested_inputs, dict) and isinstance(inputs, dict):
            return [inputs[k] for k in sorted(self._nested_inputs)]
        if isinstance(inputs, dict):
            return [inputs[x._keras_history[0].name] for x in self.inputs]  # type: ignore[index]
        flat = tf.nest.flatten(inputs)
        if len(flat) != len(self.inputs):
            raise ValueError(f'Layer "{self.name}" expects {len(self.inputs)} input(s), but it received '
                             f"{len(flat)} input tensors.")
        return flat

    def _is_sequential_like(self) -> bool:
        if not self._is_graph_network:
            return True
        for layer in self._layer_list:
            nodes = [n for n in layer._inbound_nodes if n in self._nodes]
            if len(nodes) > 1 or (nodes and len(nodes[0].keras_inputs) > 1):
                return False
        return len(self.inputs) == 1

    # -- layers and weights ------------------------------------------------------------------------
    @property
    def layers(self) -> list[Layer]:
        """The model's layers (input layers included for functional models)."""
        if self._is_graph_network:
            return list(self._layer_list)
        return list(self._flatten_layers(recursive=False))

    def get_layer(self, name: str | None = None, index: int | None = None) -> Layer:
        """A layer by name or by position in :attr:`layers`."""
        if index is not None and name is not None:
            raise ValueError(f"Provide only a layer name or a layer index. Received: index={index}, name={name}.")
        if index is not None:
            if len(self.layers) <= index:
                raise ValueError(f"Was asked to retrieve layer at index {index} but model only has "
                                 f"{len(self.layers)} layers.")
            return self.layers[index]
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise ValueError(f"No such layer: {name}. Existing layers are: {[layer.name for layer in self.layers]}.")

    def _assert_weights_created(self) -> None:
        if "build" in type(self).__dict__ and type(self) is not Model and not self.built:
            raise ValueError(f"Weights for model {self.name} have not yet been created. Weights are created when the "
                             "Model is first called on inputs or `build()` is called with an `input_shape`.")

    @property
    def trainable_weights(self) -> list[tf.Variable]:
        self._assert_weights_created()
        if not self.trainable:
            return []
        out: list[tf.Variable] = []
        for layer in self._sublayers:
            out += layer.trainable_weights
        return _dedup(out + self._trainable_weights)

    @property
    def non_trainable_weights(self) -> list[tf.Variable]:
        self._assert_weights_created()
        out: list[tf.Variable] = []
        if self.trainable:
            for layer in self._sublayers:
                out += layer.non_trainable_weights
            return _dedup(out + self._non_trainable_weights)
        for layer in self._sublayers:
            out += layer.weights
        return _dedup(out + self._trainable_weights + self._non_trainable_weights)

    @property
    def weights(self) -> list[tf.Variable]:
        """Every layer's weights in layer order, then the model's own."""
        self._assert_weights_created()
        out: list[tf.Variable] = []
        for layer in self._sublayers:
            out += layer.weights
        return _dedup(out + self._trainable_weights + self._non_trainable_weights)

    # -- building and calling -----------------------------------------------------------------------
    def build(self, input_shape: Any = None) -> None:
        """Create the weights for inputs of ``input_shape`` (the batch dimension may be None)."""
        if self._is_graph_network:
            self.built = True
            return
        if input_shape is None:
            raise ValueError("Input shape must be defined when calling `build()` on a `Model` subclass.")
        with backend.name_scope(self.name):
            infer_output_signature(self, input_shape)
        self._build_input_shape = input_shape
        self.built = True

    def _maybe_build(self, input_shapes: Any) -> None:
        if self.built:
            return
        if type(self).build is Model.build:  # subclassed model: layers build when `call` uses them
            self._build_input_shape = input_shapes
            self.built = True
            return
        super()._maybe_build(input_shapes)

    def call(self, inputs: Any, training: Any = None, mask: Any = None) -> Any:
        """Run the functional graph (subclasses override this)."""
        if not self._is_graph_network:
            raise NotImplementedError(f"Model {self.name} has no `call` method: subclass Model and define `call`, "
                                      "or build a functional model with Model(inputs, outputs).")
        return self._run_graph(inputs)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return infer_output_signature(self, input_shape)[0]

    def compute_output_signature(self, input_shape: Any, input_dtype: Any) -> tuple[Any, Any]:
        return infer_output_signature(self, input_shape, input_dtype)

    # -- inspection --------------------------------------------------------------------------------
    def summary(self, line_length: int | None = None, positions: list[float] | None = None,
                print_fn: Any = None) -> None:
        """Print a table of the layers, their output shapes and parameter counts."""
        if not self.built:
            raise ValueError("This model has not yet been built. Build the model first by calling `build()` or by "
                             "calling the model on a batch of data.")
        print_summary(self, line_length, positions, print_fn)

    @property
    def input_shape(self) -> Any:
        if self._build_input_shape is None:
            raise AttributeError(f"The model {self.name} has not been built yet and has no input shape.")
        return self._build_input_shape

    @property
    def output_shape(self) -> Any:
        if self._output_shape is None:
            raise AttributeError(f"The model {self.name} has not been called yet and has no output shape.")
        return self._output_shape

    def get_config(self) -> dict[str, Any]:
        """A functional model's layers and their connections (Keras 2's schema, see
        :mod:`popjit.keras.functional_config`). A subclassed model defines its own, as in Keras."""
        if not self._is_graph_network:
            raise NotImplementedError(
                f"Model {self.name} is a subclassed model ({type(self).__name__}), whose layers are connected by the "
                "Python code of its `call` method: Keras cannot write its config. Implement `get_config()` and "
                "`from_config()` in the subclass to make it serializable, or save its weights with save_weights.")
        return {**functional_config.graph_config(self), **self._ipu_config()}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict[str, Any] | None = None) -> Model:
        """A model from :meth:`get_config`'s dict: a functional graph rebuilt layer by layer, else the subclass's
        constructor called with the config; IPU options in it are set again inside an IPU strategy's scope."""
        config, ipu_options = split_ipu_config(config)
        with generic_utils.custom_object_scope(custom_objects):
            if "layers" in config and "input_layers" in config and "output_layers" in config:
                inputs, outputs = functional_config.rebuild_graph(config, custom_objects)
                model = cls(inputs=inputs, outputs=outputs, name=config.get("name"))
                if config.get("trainable") is False:
                    model.trainable = False
            else:
                model = cls(**config)
        model._apply_ipu_config(ipu_options)
        return model

    def to_json(self, **kwargs: Any) -> str:
        """The model's config as JSON (``tf.keras.models.model_from_json`` reads it back); ``kwargs`` go to
        ``json.dumps``."""
        return json.dumps(saving.model_json(self), default=saving.json_default, **kwargs)

    def save_weights(self, filepath: Any, overwrite: bool = True, save_format: str | None = None,
                     options: Any = None) -> None:
        """Write the weights: Keras 2's HDF5 layout for ``*.h5``, Keras 3's for ``*.weights.h5``, else a TensorFlow
        checkpoint."""
        saving.save_weights(self, filepath, overwrite, save_format, options)

    def save(self, filepath: Any, overwrite: bool = True, include_optimizer: bool = True,
             save_format: str | None = None, signatures: Any = None, options: Any = None,
             save_traces: bool = True) -> None:
        """Write the whole model (config, training config, weights, optimizer state): Keras 2's ``.h5`` or Keras 3's
        ``.keras``."""
        saving.save_model(self, filepath, overwrite, include_optimizer, save_format, signatures, options, save_traces)

    def load_weights(self, filepath: Any, by_name: bool = False, skip_mismatch: bool = False,
                     options: Any = None) -> Any:
        """Read weights written by ``save_weights`` (popjit's or Keras's), a whole-model ``.h5`` file, or a
        TensorFlow checkpoint (then the load status is returned)."""
        return saving.load_weights(self, filepath, by_name, skip_mismatch, options)

    def _trackable_children(self) -> list[tuple[str, Any]]:
        """A functional or Sequential model's layers as ``layer-<i>`` (those with weights also as
        ``layer_with_weights-<k>``), a subclassed model's by attribute, then its ``optimizer``, as Keras 2 names
        them in checkpoints."""
        if self._is_graph_network or isinstance(self, Sequential):
            out: list[tuple[str, Any]] = []
            with_weights = 0
            for i, layer in enumerate(self.layers):
                if layer.weights:
                    out.append((f"layer_with_weights-{with_weights}", layer))
                    with_weights += 1
                out.append((f"layer-{i}", layer))
        else:
            out = [(name, value) for name, value in super()._trackable_children() if name != "optimizer"]
        return out + ([("optimizer", self.optimizer)] if self.optimizer is not None else [])

    def __getattr__(self, name: str) -> Any:
        if name in _MULTI_IPU_METHODS:
            raise unimplemented_name(name, unimplemented_message(f"tf.keras.Model.{name}"))
        if name in _MISSING_METHODS:
            raise missing_api("tf.keras.Model", name)
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = super().__call__(*args, **kwargs)
        if self._output_shape is None:
            self._output_shape = tf.nest.map_structure(lambda t: tuple(t.shape), out)
        return out


def _topological_nodes(outputs: list[KerasTensor]) -> list[Node]:
    order: list[Node] = []
    seen: set[int] = set()

    def visit(kt: KerasTensor) -> None:
        node = kt.node
        if id(node) in seen:
            return
        seen.add(id(node))
        for parent in node.keras_inputs:
            visit(parent)
        order.append(node)

    for kt in outputs:
        visit(kt)
    return order


def _dedup_layers(layers: list[Layer]) -> list[Layer]:
    seen: set[int] = set()
    out = []
    for layer in layers:
        if id(layer) not in seen:
            seen.add(id(layer))
            out.append(layer)
    return out


def _conform(x: Any, reference: KerasTensor) -> Any:
    """A model input converted to a tensor of the Input's dtype (floats are cast, as Keras does)."""
    t = tf.convert_to_tensor(x)
    if t.dtype != reference.dtype and t.dtype.is_floating == reference.dtype.is_floating:
        t = tf.cast(t, reference.dtype)
    ref_rank = len(reference.shape)
    if t.shape.rank == ref_rank + 1 and t.shape[-1] == 1:
        t = tf.squeeze(t, axis=-1)
    return t


Functional = Model  # the class name Keras writes in the config of ``Model(inputs, outputs)``


class Sequential(Model):
    """A plain stack of layers, each called on the previous one's output.

    Built from an input shape (``build``, an ``input_shape=`` on the first layer, an ``Input``) or
    lazily on the first call, where the batch dimension is left unspecified.
    """

    def __init__(self, layers: list[Layer] | None = None, name: str | None = None) -> None:
        super().__init__(name=name)
        self._scopes_sublayers = False
        self._autocast = False  # as in Keras, a graph network's layers cast their own inputs
        self._stack: list[Layer] = []
        self._input_layer: InputLayer | None = None
        for layer in layers or []:
            self.add(layer)

    @property
    def layers(self) -> list[Layer]:
        """The layers in order (without the input layer)."""
        return list(self._stack)

    def add(self, layer: Any) -> None:
        """Append a layer (or set the input with a ``tf.keras.Input`` / ``InputLayer``)."""
        if isinstance(layer, KerasTensor) and isinstance(layer._keras_history[0], InputLayer):  # type: ignore[index]
            layer = layer._keras_history[0]  # type: ignore[index]
        if not isinstance(layer, Layer):
            raise TypeError(f"The added layer must be an instance of class Layer. Received: layer={layer} of type "
                            f"{type(layer)}.")
        if isinstance(layer, InputLayer):
            if self._stack or self._input_layer is not None:
                raise ValueError("An InputLayer can only be the first layer of a Sequential model.")
            self._input_layer = layer
            self._build_from(layer._batch_input_shape)
            return
        for existing in self._stack:
            if existing.name == layer.name:
                raise ValueError(f'All layers added to a Sequential model should have unique names. Name '
                                 f'"{layer.name}" is already the name of a layer in this model. Update the `name` '
                                 "argument to pass a unique name.")
        if not self._stack and self._input_layer is None and layer._batch_input_shape is not None:
            self._input_layer = InputLayer(batch_input_shape=layer._batch_input_shape, dtype=layer._dtype,
                                           name=f"{layer.name}_input")
        self._stack.append(layer)
        self._track(layer)
        if self._input_layer is not None:
            self._build_from(self._input_layer._batch_input_shape)
        else:
            self.built = False

    def pop(self) -> None:
        """Remove the last layer."""
        if not self._stack:
            raise TypeError("There are no layers in the model.")
        layer = self._stack.pop()
        self._sublayers = [s for s in self._sublayers if s is not layer]

    def _build_from(self, batch_shape: Any) -> None:
        if batch_shape is None or not self._stack:
            return
        self.build(batch_shape)

    def build(self, input_shape: Any = None) -> None:
        """Build every layer for inputs of ``input_shape`` (the batch dimension may be None)."""
        if input_shape is None:
            if self._input_layer is None:
                raise ValueError("You must provide an `input_shape` argument.")
            input_shape = self._input_layer._batch_input_shape
        shape = as_shape_tuple(input_shape)
        self._build_input_shape = shape
        for layer in self._stack:
            layer._maybe_build(shape)
            if layer._build_input_shape is None:
                layer._build_input_shape = shape
            shape = layer.compute_output_shape(shape)
            layer._output_shape = shape
        self._output_shape = shape
        self.built = True

    def _maybe_build(self, input_shapes: Any) -> None:
        if self.built:
            return
        if isinstance(input_shapes, (tuple, list)) and input_shapes and not isinstance(input_shapes[0], (tuple, list)):
            input_shapes = (None,) + tuple(input_shapes[1:])
        self.build(input_shapes)

    def call(self, inputs: Any, training: Any = None, mask: Any = None) -> Any:
        outputs = inputs
        for layer in self._stack:
            if layer._call_spec.accepts_training:
                outputs = layer(outputs, training=training)
            else:
                outputs = layer(outputs)
        return outputs

    def compute_output_shape(self, input_shape: Any) -> Any:
        shape = as_shape_tuple(input_shape)
        for layer in self._stack:
            shape = layer.compute_output_shape(shape)
        return shape

    def compute_output_signature(self, input_shape: Any, input_dtype: Any) -> tuple[Any, Any]:
        dtype = tf.as_dtype(input_dtype)
        shape = as_shape_tuple(input_shape)
        for layer in self._stack:
            shape, name = layer.compute_output_signature(shape, dtype)
            dtype = tf.as_dtype(name)
        return shape, dtype.name

    @property
    def inputs(self) -> list[KerasTensor]:
        return [self._input_layer.output] if self._input_layer is not None else []

    @inputs.setter
    def inputs(self, value: Any) -> None:
        pass

    def _is_sequential_like(self) -> bool:
        return True

    def get_config(self) -> dict[str, Any]:
        layers = [serialize(layer) for layer in self._stack]
        config: dict[str, Any] = {"name": self.name, "layers": layers}
        if self._input_layer is not None:
            layers.insert(0, serialize(self._input_layer))
        elif self._build_input_shape is not None:  # built by its first call: Keras records that shape
            config["build_input_shape"] = list(self._build_input_shape)
        return {**config, **self._ipu_config()}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict[str, Any] | None = None) -> Sequential:
        """A Sequential model from :meth:`get_config`'s dict (IPU options set again inside an IPU scope)."""
        config, ipu_options = split_ipu_config(config)
        model = cls(name=config.get("name"))
        model._apply_ipu_config(ipu_options)
        for layer_config in config["layers"]:
            layer_config = dict(layer_config)
            if layer_config["class_name"] == "InputLayer":
                model.add(InputLayer(**layer_config["config"]))
            else:
                model.add(deserialize(layer_config, custom_objects))
        if config.get("build_input_shape") and not model.built:
            model.build(tuple(config["build_input_shape"]))
        return model


def model_from_config(config: dict[str, Any], custom_objects: dict[str, Any] | None = None) -> Model:
    """``tf.keras.models.model_from_config``: a model (or layer) from ``{"class_name", "config"}`` (Keras 2's or
    Keras 3's schema), its classes looked up in ``custom_objects`` and the registered objects too."""
    if isinstance(config, list):
        raise TypeError("`model_from_config` expects a dictionary, not a list. Received: config=" + str(config)[:80])
    return deserialize(keras3_schema.from_keras3(config), custom_objects)


def model_from_json(json_string: str, custom_objects: dict[str, Any] | None = None) -> Model:
    """``tf.keras.models.model_from_json``: the model ``Model.to_json`` describes (fresh weights)."""
    return model_from_config(json.loads(json_string), custom_objects)


def load_model(filepath: Any, custom_objects: dict[str, Any] | None = None, compile: bool = True,
               options: Any = None) -> Model:
    """``tf.keras.models.load_model`` of a whole-model file (popjit's or stock Keras's ``model.save``): Keras 2's
    ``.h5`` or Keras 3's ``.keras``. The model is rebuilt from its config (its own classes found in
    ``custom_objects`` or registered with ``register_keras_serializable``), its weights loaded, and compiled as it
    was saved, with its optimizer state."""
    file = saving.ModelFile(filepath)
    with generic_utils.custom_object_scope(custom_objects):
        model = model_from_config(file.config, custom_objects)
        if not model.built and file.build_shape is not None:
            model.build(tuple(file.build_shape))
        file.load_weights(model)
        if compile and file.training is not None:
            training = file.training
            model.compile(optimizer=optimizers.deserialize(training["optimizer_config"], custom_objects),
                          loss=training.get("loss"), metrics=training.get("metrics"),
                          loss_weights=training.get("loss_weights"), weighted_metrics=training.get("weighted_metrics"),
                          steps_per_execution=training.get("steps_per_execution"))
            file.load_optimizer(model)
    return model


def save_model(model: Model, filepath: Any, overwrite: bool = True, include_optimizer: bool = True,
               save_format: str | None = None, signatures: Any = None, options: Any = None,
               save_traces: bool = True) -> None:
    """``tf.keras.models.save_model``: ``model.save``."""
    model.save(filepath, overwrite, include_optimizer, save_format, signatures, options, save_traces)


def clone_model(model: Model, input_tensors: Any = None, clone_function: Any = None) -> Model:
    """A new Sequential model with the same layer configurations (fresh weights)."""
    if not isinstance(model, Sequential):
        raise NotImplementedError("clone_model supports Sequential models only.")
    return Sequential.from_config(model.get_config())
