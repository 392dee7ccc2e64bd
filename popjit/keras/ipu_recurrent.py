"""Graphcore's Popnn recurrent layers (``ipu_tensorflow_addons.keras.layers.LSTM``/``GRU``, also
``PopnnLSTM``/``PopnnGRU``), with Graphcore's arguments, checks and error texts.

The computation is Keras's LSTM and GRU (same gates, same weight layout: a Keras layer's weights
load into them and give the same outputs), run as popjit's device loop over time. The weights are
the layer's own, ``kernel``, ``recurrent_kernel`` and ``biases``. ``dropout`` drops input features
in training, one mask per example for the whole sequence (Poprand's dropout, seeded by
``dropout_seed``), as Graphcore's layers do. ``seed`` seeds the default initializers when
``kernel_initializer``/``recurrent_initializer`` are None.
"""

from __future__ import annotations

from typing import Any

from popjit.frontend import api as tf
from popjit.frontend import ipu_ops
from popjit.keras import activations, initializers
from popjit.keras.base_layer import as_shape_tuple
from popjit.keras.ipu_layers import check_unsupported, refuse, static_training
from popjit.keras.layers_recurrent import RNN, GRUCell, LSTMCell

__all__ = ["GRU", "LSTM", "PopnnGRU", "PopnnLSTM"]

ACCEPTED_ACTIVATIONS = ("tanh", "relu", "softmax", "sigmoid", "hard_sigmoid")
ACCEPTED_RECURRENT_ACTIVATIONS = ("tanh", "softmax", "sigmoid", "hard_sigmoid")


def _quoted(names: tuple[str, ...]) -> str:
    return ",".join(f'"{n}"' for n in names)


def _activation_name(activation: Any) -> str:
    return activation if isinstance(activation, str) else str(activations.serialize(activations.get(activation)))


def _refuse_keras_options(kind: str, options: dict[str, Any]) -> None:
    """Graphcore's ValueErrors for the Keras arguments its Popnn layers do not take."""
    for name in ("kernel_regularizer", "recurrent_regularizer", "bias_regularizer", "activity_regularizer",
                 "kernel_constraint", "recurrent_constraint", "bias_constraint"):
        if options[name]:
            raise ValueError(f"IPU custom {kind} layer does not support {name}.")
    if not options["use_bias"]:
        raise ValueError(f"IPU custom {kind} layer does not support use_bias = False.")
    if options["recurrent_dropout"] != 0.0:
        suffix = " != 0" if kind == "GRU" else ""
        raise ValueError(f"IPU custom {kind} layer does not support recurrent_dropout{suffix}.")
    if options["implementation"] not in (1, 2):
        raise ValueError(f"IPU custom {kind} layer does not support implementation != 1.")
    if options["go_backwards"]:
        raise ValueError(f"IPU custom {kind} layer does not support go_backwards" +
                         (" = True." if kind == "LSTM" else "."))
    if options["unroll"]:
        raise ValueError(f"IPU custom {kind} layer does not support unroll" + (" = True." if kind == "LSTM" else "."))


class _PopnnRNN(RNN):
    """The shared part of PopnnLSTM and PopnnGRU: checks, initializers, the layer-owned weights, dropout."""

    cell_class: type = LSTMCell

    def __init__(self, units: int, activation: Any, recurrent_activation: Any, kernel_initializer: Any,
                 recurrent_initializer: Any, bias_initializer: Any, dropout: float, dropout_seed: Any,
                 return_sequences: bool, return_state: bool, stateful: bool, partials_dtype: Any, seed: Any,
                 time_major: bool, available_memory_proportion_fwd: Any, available_memory_proportion_bwd: Any,
                 cell_kwargs: dict[str, Any], **kwargs: Any) -> None:
        name = type(self).__name__
        activation, recurrent_activation = _activation_name(activation), _activation_name(recurrent_activation)
        if activation not in ACCEPTED_ACTIVATIONS:
            raise ValueError(f"IPU custom RNN layer does not support '{activation}' as an activation. Acceptable "
                             f"value are {_quoted(ACCEPTED_ACTIVATIONS)}")
        if recurrent_activation not in ACCEPTED_RECURRENT_ACTIVATIONS:
            raise ValueError(f"IPU custom RNN layer does not support '{recurrent_activation}' as a recurrent "
                             f"activation. Acceptable value are {_quoted(ACCEPTED_RECURRENT_ACTIVATIONS)}")
        if tf.as_dtype(partials_dtype) != tf.float32:
            refuse(name, "partials_dtype", tf.as_dtype(partials_dtype).name,
                   "popjit accumulates the recurrent products in float32")
        for option, value in (("available_memory_proportion_fwd", available_memory_proportion_fwd),
                              ("available_memory_proportion_bwd", available_memory_proportion_bwd)):
            if value is not None and value != -1.0:
                refuse(name, option, value, "popjit's planner does not take a per-layer memory proportion")
        dtype = kwargs.get("dtype")
        self._kernel_init = initializers.GlorotUniform(seed) if kernel_initializer is None else \
            initializers.get(kernel_initializer)
        self._recurrent_init = initializers.Orthogonal(seed=seed) if recurrent_initializer is None else \
            initializers.get(recurrent_initializer)
        self._bias_init = initializers.Zeros() if bias_initializer is None else initializers.get(bias_initializer)
        cell = self.cell_class(units, activation=activation, recurrent_activation=recurrent_activation,
                               kernel_initializer=self._kernel_init, recurrent_initializer=self._recurrent_init,
                               bias_initializer=self._bias_init, dtype=dtype, **cell_kwargs)
        super().__init__(cell, return_sequences=return_sequences, return_state=return_state, stateful=stateful,
                         time_major=time_major, **kwargs)
        if tf.as_dtype(self.dtype) not in (tf.float16, tf.float32):
            raise ValueError(f"Only support float16, float32, provided <dtype: '{self.dtype}'>")
        self._dropout, self._dropout_seed, self._seed = float(dropout), dropout_seed, seed
        self._partials_dtype = partials_dtype
        self._available_memory_proportion_fwd = available_memory_proportion_fwd
        self._available_memory_proportion_bwd = available_memory_proportion_bwd

    @property
    def units(self) -> int:
        return self.cell.units

    num_units = units

    def build(self, input_shape: Any) -> None:
        shape = as_shape_tuple(input_shape if not isinstance(input_shape, list) else input_shape[0])
        if len(shape) != 3:
            raise ValueError(f"Expecting input_shape with 3 dims, got {len(shape)}")
        if shape[-1] is None:
            raise ValueError("The last dimension of the inputs to `_PopnnRNN` should be defined. Found `None`.")
        cell, width = self.cell, self.cell.gates * self.cell.units
        self.kernel = self.add_weight("kernel", shape=(shape[-1], width), initializer=self._kernel_init)
        self.recurrent_kernel = self.add_weight("recurrent_kernel", shape=(cell.units, width),
                                                initializer=self._recurrent_init)
        self.biases = self.add_weight("biases", shape=cell._bias_shape(), initializer=cell._bias_initializer())
        cell.kernel, cell.recurrent_kernel, cell.bias = self.kernel, self.recurrent_kernel, self.biases
        cell.built = True
        self._build_input_shape = input_shape
        self.built = True

    def call(self, inputs: Any, mask: Any = None, training: Any = None, initial_state: Any = None) -> Any:
        check_unsupported(self, mask, "mask", "call")
        x = tf.convert_to_tensor(inputs, dtype=self.dtype)
        if len(x.shape) != 3:
            raise ValueError("inputs tensor must be 3D")
        if self._dropout > 0.0 and static_training(training):
            noise = x.shape.as_list()
            noise[0 if self.time_major else 1] = 1  # one mask for every step of the sequence
            x = ipu_ops.dropout(x, seed=self._dropout_seed, rate=self._dropout, noise_shape=noise)
        return super().call(x, initial_state=initial_state)

    def get_config(self) -> dict[str, Any]:
        base = {k: v for k, v in super().get_config().items() if k in ("name", "trainable", "dtype")}
        return {**base, "units": self.cell.units, "activation": activations.serialize(self.cell.activation),
                "recurrent_activation": activations.serialize(self.cell.recurrent_activation),
                "kernel_initializer": initializers.serialize(self._kernel_init),
                "recurrent_initializer": initializers.serialize(self._recurrent_init),
                "bias_initializer": initializers.serialize(self._bias_init), "dropout": self._dropout,
                "dropout_seed": self._dropout_seed, "return_sequences": self.return_sequences,
                "return_state": self.return_state, "stateful": False,
                "partials_dtype": tf.as_dtype(self._partials_dtype).name,
                "seed": self._seed, "time_major": self.time_major}


class PopnnLSTM(_PopnnRNN):
    """Popnn's LSTM (Hochreiter 1997): gates ``i, f, c, o``, the forget gate's bias starting at 1
    (``unit_forget_bias``); ``return_state`` gives ``[output, h, c]``, ``initial_state`` is ``(h, c)``.
    Refused: regularizers, constraints, ``use_bias=False``, ``recurrent_dropout``, ``go_backwards``,
    ``unroll`` (Graphcore's ValueErrors); ``stateful``, ``partials_dtype=float16`` and the
    ``available_memory_proportion`` options (popjit does not model them)."""

    cell_class = LSTMCell

    def __init__(self, units: int, activation: Any = "tanh", recurrent_activation: Any = "sigmoid",
                 use_bias: bool = True, kernel_initializer: Any = "glorot_uniform",
                 recurrent_initializer: Any = "orthogonal", bias_initializer: Any = "zeros",
                 unit_forget_bias: bool = True, kernel_regularizer: Any = None, recurrent_regularizer: Any = None,
                 bias_regularizer: Any = None, activity_regularizer: Any = None, kernel_constraint: Any = None,
                 recurrent_constraint: Any = None, bias_constraint: Any = None, dropout: float = 0.0,
                 dropout_seed: Any = None, recurrent_dropout: float = 0.0, implementation: int = 2,
                 return_sequences: bool = False, return_state: bool = False, go_backwards: bool = False,
                 stateful: bool = False, unroll: bool = False, partials_dtype: Any = tf.float32, seed: Any = None,
                 time_major: bool = False, available_memory_proportion_fwd: Any = None,
                 available_memory_proportion_bwd: Any = None, **kwargs: Any) -> None:
        _refuse_keras_options("LSTM", locals())
        super().__init__(units, activation, recurrent_activation, kernel_initializer, recurrent_initializer,
                         bias_initializer, dropout, dropout_seed, return_sequences, return_state, stateful,
                         partials_dtype, seed, time_major, available_memory_proportion_fwd,
                         available_memory_proportion_bwd, {"unit_forget_bias": unit_forget_bias}, **kwargs)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "unit_forget_bias": self.cell.unit_forget_bias}


class PopnnGRU(_PopnnRNN):
    """Popnn's GRU (Cho 2014): gates ``z, r, h``; ``reset_after=True`` (the default) applies the reset
    gate after the recurrent product, with separate input and recurrent biases (``biases`` is
    ``[2, 3 * units]``), as Keras's GRU does. Refused as for :class:`PopnnLSTM`."""

    cell_class = GRUCell

    def __init__(self, units: int, activation: Any = "tanh", recurrent_activation: Any = "sigmoid",
                 use_bias: bool = True, kernel_initializer: Any = "glorot_uniform",
                 recurrent_initializer: Any = "orthogonal", bias_initializer: Any = "zeros",
                 kernel_regularizer: Any = None, recurrent_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, kernel_constraint: Any = None, recurrent_constraint: Any = None,
                 bias_constraint: Any = None, dropout: float = 0.0, dropout_seed: Any = None,
                 recurrent_dropout: float = 0.0, implementation: int = 2, return_sequences: bool = False,
                 return_state: bool = False, go_backwards: bool = False, stateful: bool = False, unroll: bool = False,
                 reset_after: bool = True, seed: Any = None, partials_dtype: Any = tf.float32,
                 time_major: bool = False, available_memory_proportion_fwd: Any = None,
                 available_memory_proportion_bwd: Any = None, **kwargs: Any) -> None:
        _refuse_keras_options("GRU", locals())
        super().__init__(units, activation, recurrent_activation, kernel_initializer, recurrent_initializer,
                         bias_initializer, dropout, dropout_seed, return_sequences, return_state, stateful,
                         partials_dtype, seed, time_major, available_memory_proportion_fwd,
                         available_memory_proportion_bwd, {"reset_after": reset_after}, **kwargs)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "reset_after": self.cell.reset_after}


LSTM = PopnnLSTM
GRU = PopnnGRU
