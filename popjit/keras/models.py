"""``tf.keras.Model`` (functional and subclassed) and ``tf.keras.Sequential``.

A model is a layer made of layers. Its weights are its layers' weights, in layer order, so
``get_weights`` / ``set_weights`` exchange NumPy arrays in Keras's order. Calling a model on
tensors runs its layers with TensorFlow ops (``popjit.frontend.api``): eagerly, or inside a traced step, where a
model built lazily creates its variables (on the device of the enclosing IPU strategy).
"""

from __future__ import annotations

import json
from typing import Any

from popjit.errors import UnimplementedError, missing_api
from popjit.frontend import api as tf
from popjit.keras import backend, optimizers, saving
from popjit.keras.base_layer import Layer, _dedup, as_shape_tuple
from popjit.keras.keras_tensor import InputLayer, KerasTensor, Node, infer_output_signature
from popjit.keras.layers import deserialize, serialize
from popjit.keras.summary import print_summary
from popjit.keras.training import TrainingAPI

_MODEL_KWARGS = frozenset({"trainable", "dtype", "dynamic", "name", "autocast"})

#: Keras's and Graphcore's Model methods popjit does not provide yet: UnimplementedError, not AttributeError.
_MISSING_METHODS = frozenset({
    "to_json", "to_yaml", "make_train_function", "make_test_function",
    "make_predict_function", "set_pipelining_options",
    "get_pipeline_stage_assignment", "set_pipeline_stage_assignment", "reset_pipeline_stage_assignment",
    "print_pipeline_stage_assignment_summary", "set_replication_options", "export_for_ipu_serving",
})


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
        raise NotImplementedError("get_config is implemented for Sequential models and layers only.")

    def save_weights(self, filepath: Any, overwrite: bool = True, save_format: str | None = None,
                     options: Any = None) -> None:
        """Write the weights to an HDF5 file: Keras 2's layout for ``*.h5``, Keras 3's for ``*.weights.h5``."""
        saving.save_weights(self, filepath, overwrite, save_format, options)

    def save(self, filepath: Any, overwrite: bool = True, include_optimizer: bool = True,
             save_format: str | None = None, signatures: Any = None, options: Any = None,
             save_traces: bool = True) -> None:
        """Write the whole model (config, training config, weights) to a Keras 2 ``.h5`` file."""
        saving.save_model(self, filepath, overwrite, include_optimizer, save_format, signatures, options, save_traces)

    def load_weights(self, filepath: Any, by_name: bool = False, skip_mismatch: bool = False,
                     options: Any = None) -> None:
        """Read weights written by ``save_weights`` (popjit's or Keras's) or a whole-model ``.h5`` file."""
        saving.load_weights(self, filepath, by_name, skip_mismatch, options)

    def __getattr__(self, name: str) -> Any:
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


class Sequential(Model):
    """A plain stack of layers, each called on the previous one's output.

    Built from an input shape (``build``, an ``input_shape=`` on the first layer, an ``Input``) or
    lazily on the first call, where the batch dimension is left unspecified.
    """

    def __init__(self, layers: list[Layer] | None = None, name: str | None = None) -> None:
        super().__init__(name=name)
        self._scopes_sublayers = False
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
        if self._input_layer is not None:
            layers.insert(0, serialize(self._input_layer))
        return {"name": self.name, "layers": layers}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict[str, Any] | None = None) -> Sequential:
        model = cls(name=config.get("name"))
        for layer_config in config["layers"]:
            layer_config = dict(layer_config)
            if layer_config["class_name"] == "InputLayer":
                model.add(InputLayer(**layer_config["config"]))
            else:
                model.add(deserialize(layer_config, custom_objects))
        return model


def load_model(filepath: Any, custom_objects: dict[str, Any] | None = None, compile: bool = True,
               options: Any = None) -> Model:
    """``tf.keras.models.load_model`` of a whole-model ``.h5`` file (popjit's or stock Keras's ``model.save``
    of a Sequential model): rebuilt from its config, its weights loaded, compiled as it was saved."""
    config, training, load_weights_into = saving.read_model_file(filepath)
    if config.get("class_name") != "Sequential":
        raise UnimplementedError(f"load_model of a {config.get('class_name')} model is not implemented by popjit: "
                                 "only Sequential models have a config. Build the model in code and call "
                                 "model.load_weights on the file.")
    if '"module":' in json.dumps(config):  # Keras 3 writes each object's module: another config schema
        raise UnimplementedError(
            f"load_model('{filepath}'): this file was written by Keras 3, whose model configs popjit does not read "
            "(it reads Keras 2's, as Graphcore's SDK writes them). Build the model in code and call "
            "model.load_weights on the file: its weights load.")
    model = Sequential.from_config(config["config"], custom_objects)
    load_weights_into(model)
    if compile and training is not None:
        model.compile(optimizer=optimizers.deserialize(training["optimizer_config"], custom_objects),
                      loss=training.get("loss"), metrics=training.get("metrics"),
                      loss_weights=training.get("loss_weights"), weighted_metrics=training.get("weighted_metrics"))
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
