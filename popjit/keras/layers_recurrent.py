"""Recurrent layers: SimpleRNN, LSTM and GRU (and their cells, the generic ``RNN`` wrapper and
``Bidirectional``), with Keras 2.6's weights, gate order and defaults.

The time loop is a counted device loop (``for i in tf.range(steps)``), so a compiled step runs
the whole sequence natively and the gradient walks it backwards; the input projection of every
step is one matrix product before the loop.
"""

from __future__ import annotations

import copy
from typing import Any

from popjit.frontend import api as tf
from popjit.frontend import control_flow, gather_ops
from popjit.keras import activations, backend, constraints, initializers, regularizers
from popjit.keras.base_layer import Layer, as_shape_tuple
from popjit.keras.layers import deserialize

__all__ = [
    "Bidirectional",
    "GRU",
    "GRUCell",
    "LSTM",
    "LSTMCell",
    "RNN",
    "SimpleRNN",
    "SimpleRNNCell",
]



def _no_dropout(layer: str, dropout: float, recurrent_dropout: float) -> None:
    if dropout or recurrent_dropout:
        raise tf.errors.UnimplementedError(
            f"{layer}(dropout=..., recurrent_dropout=...) is not supported by popjit: put a Dropout layer before "
            "the recurrent layer instead.")


class _Cell(Layer):
    """A recurrent cell: ``kernel`` for the inputs, ``recurrent_kernel`` for the state, a bias;
    ``gates`` blocks of ``units`` columns each."""

    gates = 1

    def __init__(self, units: int, activation: Any = "tanh", recurrent_activation: Any = "sigmoid",
                 use_bias: bool = True, kernel_initializer: Any = "glorot_uniform",
                 recurrent_initializer: Any = "orthogonal", bias_initializer: Any = "zeros",
                 kernel_regularizer: Any = None, recurrent_regularizer: Any = None, bias_regularizer: Any = None,
                 kernel_constraint: Any = None, recurrent_constraint: Any = None, bias_constraint: Any = None,
                 dropout: float = 0.0, recurrent_dropout: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _no_dropout(type(self).__name__, dropout, recurrent_dropout)
        self.units = int(units)
        if self.units <= 0:
            raise ValueError(f"Received an invalid value for argument `units`, expected a positive integer, got "
                             f"{units}.")
        self.activation = activations.get(activation)
        self.recurrent_activation = activations.get(recurrent_activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.recurrent_initializer = initializers.get(recurrent_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.recurrent_regularizer = regularizers.get(recurrent_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.kernel_constraint = constraints.get(kernel_constraint)
        self.recurrent_constraint = constraints.get(recurrent_constraint)
        self.bias_constraint = constraints.get(bias_constraint)
        self.dropout = self.recurrent_dropout = 0.0

    @property
    def state_size(self) -> Any:
        return self.units

    @property
    def output_size(self) -> int:
        return self.units

    def _bias_shape(self) -> tuple[int, ...]:
        return (self.gates * self.units,)

    def _bias_initializer(self) -> Any:
        return self.bias_initializer

    def build(self, input_shape: Any) -> None:
        features = as_shape_tuple(input_shape)[-1]
        width = self.gates * self.units
        self.kernel = self.add_weight("kernel", shape=(features, width), initializer=self.kernel_initializer,
                                      regularizer=self.kernel_regularizer, constraint=self.kernel_constraint)
        self.recurrent_kernel = self.add_weight(
            "recurrent_kernel", shape=(self.units, width), initializer=self.recurrent_initializer,
            regularizer=self.recurrent_regularizer, constraint=self.recurrent_constraint)
        self.bias = self.add_weight("bias", shape=self._bias_shape(), initializer=self._bias_initializer(),
                                    regularizer=self.bias_regularizer, constraint=self.bias_constraint) \
            if self.use_bias else None
        self._build_input_shape = input_shape
        self.built = True

    # -- the computation, split so a whole sequence's input projection is one product ---------------
    def project_inputs(self, x: Any) -> Any:
        """The input part of every gate for inputs ``x [..., features]``."""
        shape = x.shape.as_list()
        flat = tf.matmul(tf.reshape(x, [-1, shape[-1]]), self.kernel)
        if self.use_bias:
            flat = flat + self._input_bias()
        return tf.reshape(flat, shape[:-1] + [flat.shape.as_list()[-1]])

    def _input_bias(self) -> Any:
        return self.bias

    def step(self, projected: Any, states: list[Any]) -> tuple[Any, list[Any]]:
        """One step from the projected inputs: ``(output, new states)``."""
        raise NotImplementedError

    def call(self, inputs: Any, states: Any, training: Any = None) -> tuple[Any, list[Any]]:
        states = list(states) if isinstance(states, (list, tuple)) else [states]
        return self.step(self.project_inputs(tf.convert_to_tensor(inputs)), states)

    def get_initial_state(self, inputs: Any = None, batch_size: Any = None, dtype: Any = None) -> list[Any]:
        sizes = self.state_size if isinstance(self.state_size, (list, tuple)) else [self.state_size]
        return [tf.zeros([batch_size, size], dtype or self.compute_dtype) for size in sizes]

    def get_config(self) -> dict[str, Any]:
        config = {**super().get_config(), "units": self.units, "activation": activations.serialize(self.activation),
                  "use_bias": self.use_bias, "dropout": 0.0, "recurrent_dropout": 0.0}
        for name in ("kernel", "recurrent", "bias"):
            config[f"{name}_initializer"] = initializers.serialize(getattr(self, f"{name}_initializer"))
            config[f"{name}_regularizer"] = regularizers.serialize(getattr(self, f"{name}_regularizer"))
            config[f"{name}_constraint"] = constraints.serialize(getattr(self, f"{name}_constraint"))
        return config


class SimpleRNNCell(_Cell):
    """``h = activation(x @ kernel + h @ recurrent_kernel + bias)``."""

    def __init__(self, units: int, activation: Any = "tanh", **kwargs: Any) -> None:
        super().__init__(units, activation=activation, **kwargs)

    def step(self, projected: Any, states: list[Any]) -> tuple[Any, list[Any]]:
        h = self.activation(projected + tf.matmul(states[0], self.recurrent_kernel))
        return h, [h]

    def get_config(self) -> dict[str, Any]:
        return super().get_config()


class LSTMCell(_Cell):
    """Gates ``i, f, c, o`` (Keras's order); states ``[h, c]``; the forget gate's bias starts at 1
    (``unit_forget_bias``)."""

    gates = 4

    def __init__(self, units: int, unit_forget_bias: bool = True, implementation: int = 2, **kwargs: Any) -> None:
        super().__init__(units, **kwargs)
        self.unit_forget_bias = bool(unit_forget_bias)
        self.implementation = implementation

    @property
    def state_size(self) -> Any:
        return [self.units, self.units]

    def _bias_initializer(self) -> Any:
        if not self.unit_forget_bias:
            return self.bias_initializer
        base, units = self.bias_initializer, self.units

        def init(shape: Any, dtype: Any = None) -> Any:
            return tf.concat([base((units,), dtype=dtype), tf.ones((units,), dtype=dtype),
                              base((units * 2,), dtype=dtype)], axis=0)

        return init

    def step(self, projected: Any, states: list[Any]) -> tuple[Any, list[Any]]:
        h, c = states
        z = projected + tf.matmul(h, self.recurrent_kernel)
        i, f, g, o = tf.split(z, 4, axis=-1)
        c = self.recurrent_activation(f) * c + self.recurrent_activation(i) * self.activation(g)
        h = self.recurrent_activation(o) * self.activation(c)
        return h, [h, c]

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "recurrent_activation": activations.serialize(self.recurrent_activation),
                "unit_forget_bias": self.unit_forget_bias, "implementation": self.implementation}


class GRUCell(_Cell):
    """Gates ``z, r, h`` (Keras's order); ``reset_after=True`` (TensorFlow 2's default) applies the
    reset gate after the recurrent product and keeps a separate recurrent bias."""

    gates = 3

    def __init__(self, units: int, reset_after: bool = True, implementation: int = 2, **kwargs: Any) -> None:
        super().__init__(units, **kwargs)
        self.reset_after = bool(reset_after)
        self.implementation = implementation

    def _bias_shape(self) -> tuple[int, ...]:
        return (2, 3 * self.units) if self.reset_after else (3 * self.units,)

    def _input_bias(self) -> Any:
        return self.bias[0] if self.reset_after else self.bias

    def step(self, projected: Any, states: list[Any]) -> tuple[Any, list[Any]]:
        (h,) = states
        x_z, x_r, x_h = tf.split(projected, 3, axis=-1)
        u = self.units
        if self.reset_after:
            rec = tf.matmul(h, self.recurrent_kernel)
            if self.use_bias:
                rec = rec + self.bias[1]
            r_z, r_r, r_h = tf.split(rec, 3, axis=-1)
            z = self.recurrent_activation(x_z + r_z)
            r = self.recurrent_activation(x_r + r_r)
            candidate = self.activation(x_h + r * r_h)
        else:
            rec = tf.matmul(h, self.recurrent_kernel[:, :2 * u])
            r_z, r_r = tf.split(rec, 2, axis=-1)
            z = self.recurrent_activation(x_z + r_z)
            r = self.recurrent_activation(x_r + r_r)
            candidate = self.activation(x_h + tf.matmul(r * h, self.recurrent_kernel[:, 2 * u:]))
        h = z * h + (1.0 - z) * candidate
        return h, [h]

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "recurrent_activation": activations.serialize(self.recurrent_activation),
                "reset_after": self.reset_after, "implementation": self.implementation}


# -- the layer that runs a cell over time -------------------------------------------------------------------
class RNN(Layer):
    """Run ``cell`` over the time axis of ``[batch, time, features]`` (``time_major``: ``[time, batch,
    features]``); the last output, or every step's (``return_sequences``), and the final states
    (``return_state``)."""

    def __init__(self, cell: Any, return_sequences: bool = False, return_state: bool = False,
                 go_backwards: bool = False, stateful: bool = False, unroll: bool = False, time_major: bool = False,
                 **kwargs: Any) -> None:
        if stateful:
            raise tf.errors.UnimplementedError(
                f"{type(self).__name__}(stateful=True) is not supported by popjit: pass the states explicitly with "
                "`initial_state` and `return_state=True`.")
        super().__init__(**kwargs)
        if isinstance(cell, (list, tuple)):
            raise tf.errors.UnimplementedError("RNN over a list of cells (StackedRNNCells) is not supported by popjit; "
                                               "stack recurrent layers with return_sequences=True instead.")
        self.cell = cell
        self.return_sequences, self.return_state = bool(return_sequences), bool(return_state)
        self.go_backwards, self.time_major = bool(go_backwards), bool(time_major)
        self.stateful = False
        self.unroll = bool(unroll)  # same numbers either way: popjit always runs a device loop over time

    def build(self, input_shape: Any) -> None:
        shape = as_shape_tuple(input_shape if not isinstance(input_shape, list) else input_shape[0])
        step_shape = (shape[1] if self.time_major else shape[0], shape[-1])
        if not self.cell.built:
            with backend.name_scope(self.name):  # the cell's weights are "<layer>/<cell>/kernel", as in Keras
                self.cell._maybe_build(step_shape)
        self._build_input_shape = input_shape
        self.built = True

    def _state_sizes(self) -> list[int]:
        size = self.cell.state_size
        return list(size) if isinstance(size, (list, tuple)) else [size]

    def call(self, inputs: Any, initial_state: Any = None, training: Any = None, mask: Any = None) -> Any:
        if mask is not None:
            raise tf.errors.UnimplementedError("Masked recurrent layers are not supported by popjit.")
        x = tf.convert_to_tensor(inputs)
        if self.time_major:
            x = tf.transpose(x, [1, 0, 2])
        if self.go_backwards:
            x = tf.reverse(x, [1])
        batch, steps = x.shape.as_list()[:2]
        states = self._initial_states(initial_state, batch, x.dtype)
        outputs, states = self._loop(x, states, steps)
        output = outputs  # [time, batch, units] with return_sequences, else [batch, units]
        if self.return_sequences and not self.time_major:
            output = tf.transpose(outputs, [1, 0, 2])
        return [output, *states] if self.return_state else output

    def _initial_states(self, initial_state: Any, batch: int, dtype: Any) -> list[Any]:
        if initial_state is None:
            return [tf.zeros([batch, size], dtype) for size in self._state_sizes()]
        states = list(initial_state) if isinstance(initial_state, (list, tuple)) else [initial_state]
        if len(states) != len(self._state_sizes()):
            raise ValueError(f"An `initial_state` was passed that is not compatible with `cell.state_size`. Received "
                             f"`state_spec`={len(states)} states; however `cell.state_size` is {self.cell.state_size}")
        return [tf.convert_to_tensor(s, dtype=dtype) for s in states]

    def _loop(self, x: Any, states: list[Any], steps: int) -> tuple[Any, list[Any]]:
        """Every step of the cell in a counted loop: the stacked outputs ``[time, batch, units]`` (or the
        last output) and the final states."""
        builtin = isinstance(self.cell, _Cell)
        inputs = self.cell.project_inputs(x) if builtin else x
        batch = x.shape.as_list()[0]
        units = self.cell.output_size if hasattr(self.cell, "output_size") else self._state_sizes()[0]
        keep_all = self.return_sequences
        buffer = tf.zeros([steps if keep_all else 1, batch, units], x.dtype)
        zero = tf.constant(0, tf.int32)

        def body(i: Any, out: Any, *carried: Any) -> list[Any]:
            x_t = tf.gather(inputs, i, axis=1)
            if builtin:
                y, new = self.cell.step(x_t, list(carried))
            else:
                y, new = self.cell(x_t, list(carried))
                new = list(new) if isinstance(new, (list, tuple)) else [new]
            where = tf.stack([i if keep_all else zero, zero, zero])
            return [gather_ops.dynamic_update_slice(out, tf.expand_dims(y, 0), where), *new]

        final = control_flow.for_range(0, steps, 1, body, [buffer, *states])
        outputs = final[0] if keep_all else final[0][0]
        return outputs, list(final[1:])

    def compute_output_shape(self, input_shape: Any) -> Any:
        shape = as_shape_tuple(input_shape)
        batch, steps = (shape[1], shape[0]) if self.time_major else (shape[0], shape[1])
        units = self.cell.output_size if hasattr(self.cell, "output_size") else self._state_sizes()[0]
        if self.return_sequences:
            output = (steps, batch, units) if self.time_major else (batch, steps, units)
        else:
            output = (batch, units)
        if self.return_state:
            return [output, *[(batch, size) for size in self._state_sizes()]]
        return output

    @property
    def states(self) -> list[Any]:
        return [None] * len(self._state_sizes())

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "return_sequences": self.return_sequences,
                "return_state": self.return_state, "go_backwards": self.go_backwards, "stateful": False,
                "unroll": self.unroll, "time_major": self.time_major}


class _RecurrentLayer(RNN):
    """A recurrent layer owning its cell (the cell's arguments are the layer's)."""

    cell_class: type[_Cell] = SimpleRNNCell
    _layer_keys = ("return_sequences", "return_state", "go_backwards", "stateful", "unroll", "time_major")

    def __init__(self, units: int, **kwargs: Any) -> None:
        layer_kwargs = {k: kwargs.pop(k) for k in self._layer_keys if k in kwargs}
        for key in ("name", "trainable", "input_shape", "batch_input_shape", "batch_size", "input_dim", "weights",
                    "activity_regularizer"):
            if key in kwargs:
                layer_kwargs[key] = kwargs.pop(key)
        dtype = kwargs.pop("dtype", None)
        cell = self.cell_class(units, dtype=dtype, **kwargs)
        super().__init__(cell, dtype=dtype, **layer_kwargs)

    def __getattr__(self, name: str) -> Any:
        # why: Keras layers expose their cell's settings (`layer.units`, `layer.activation`, ...)
        cell = self.__dict__.get("cell")
        if cell is not None and not name.startswith("_") and hasattr(cell, name):
            return getattr(cell, name)
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def get_config(self) -> dict[str, Any]:
        cell_config = self.cell.get_config()
        for key in ("name", "trainable", "dtype"):
            cell_config.pop(key, None)
        return {**super().get_config(), **cell_config}


class SimpleRNN(_RecurrentLayer):
    """A fully-connected recurrent layer."""

    cell_class = SimpleRNNCell


class LSTM(_RecurrentLayer):
    """Long short-term memory (Hochreiter 1997), Keras 2's ``tf.keras.layers.LSTM``."""

    cell_class = LSTMCell


class GRU(_RecurrentLayer):
    """Gated recurrent unit (Cho 2014), Keras 2's ``tf.keras.layers.GRU`` (``reset_after=True``)."""

    cell_class = GRUCell


class Bidirectional(Layer):
    """Run a recurrent layer forwards and a copy of it backwards, and merge their outputs
    (``merge_mode``: concat, sum, mul, ave, or None for both)."""

    def __init__(self, layer: RNN, merge_mode: str | None = "concat", weights: Any = None,
                 backward_layer: RNN | None = None, **kwargs: Any) -> None:
        if merge_mode not in ("concat", "sum", "mul", "ave", None):
            raise ValueError(f"Invalid merge mode. Merge mode should be one of {{'sum', 'mul', 'ave', 'concat', "
                             f"None}}. Received: {merge_mode}")
        super().__init__(**kwargs)
        self.forward_layer = layer
        if backward_layer is None:
            config = copy.deepcopy(layer.get_config())
            config["go_backwards"] = not config.get("go_backwards", False)
            config["name"] = f"backward_{layer.name}"
            backward_layer = type(layer).from_config(config)
        self.backward_layer = backward_layer
        self.forward_layer._name = f"forward_{layer.name}"
        self.merge_mode = merge_mode
        self.return_sequences, self.return_state = layer.return_sequences, layer.return_state

    def build(self, input_shape: Any) -> None:
        with backend.name_scope(self.name):  # weights "<this layer>/forward_<rnn>/<cell>/kernel", as in Keras
            self.forward_layer._maybe_build(input_shape)
            self.backward_layer._maybe_build(input_shape)
        self._build_input_shape = input_shape
        self.built = True

    def compute_output_shape(self, input_shape: Any) -> Any:
        shape = self.forward_layer.compute_output_shape(input_shape)
        states = shape[1:] if self.return_state else []
        output = shape[0] if self.return_state else shape
        if self.merge_mode == "concat":
            output = (*output[:-1], output[-1] * 2)
        outputs = [output, output] if self.merge_mode is None else [output]
        return [*outputs, *states, *states] if self.return_state else (outputs if self.merge_mode is None else output)

    def call(self, inputs: Any, training: Any = None, initial_state: Any = None) -> Any:
        fw_state = bw_state = None
        if initial_state is not None:
            half = len(initial_state) // 2
            fw_state, bw_state = initial_state[:half], initial_state[half:]
        fw = self.forward_layer(inputs, initial_state=fw_state, training=training)
        bw = self.backward_layer(inputs, initial_state=bw_state, training=training)
        states: list[Any] = []
        if self.return_state:
            fw, fw_states = fw[0], fw[1:]
            bw, bw_states = bw[0], bw[1:]
            states = [*fw_states, *bw_states]
        if self.return_sequences:
            bw = tf.reverse(bw, [1])
        merged: Any
        if self.merge_mode == "concat":
            merged = tf.concat([fw, bw], axis=-1)
        elif self.merge_mode == "sum":
            merged = fw + bw
        elif self.merge_mode == "mul":
            merged = fw * bw
        elif self.merge_mode == "ave":
            merged = (fw + bw) / 2
        else:
            merged = [fw, bw]
        if self.return_state:
            return [*merged, *states] if self.merge_mode is None else [merged, *states]
        return merged

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "merge_mode": self.merge_mode,
                "layer": {"class_name": type(self.forward_layer).__name__,
                          "config": self.forward_layer.get_config()}}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict[str, Any] | None = None) -> Bidirectional:
        """The wrapped layers are rebuilt from their configs (the forward one under its own name again)."""
        config = dict(config)
        forward = dict(config["layer"])
        forward["config"] = {**forward["config"], "name": forward["config"]["name"].removeprefix("forward_")}
        config["layer"] = deserialize(forward, custom_objects)
        if isinstance(config.get("backward_layer"), dict):
            config["backward_layer"] = deserialize(config["backward_layer"], custom_objects)
        return cls(**config)
