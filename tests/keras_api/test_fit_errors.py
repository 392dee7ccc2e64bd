"""Misuse of Keras's training API raises Keras's and Graphcore's errors (spec §3.4) before any step
runs, so the model's weights are left as they were."""

from __future__ import annotations

import numpy as np
import pytest

import popjit.tensorflow as pj
from popjit.tensorflow.python import ipu

RNG = np.random.default_rng(9)
X = RNG.normal(size=(64, 4)).astype(np.float32)
Y = (X[:, 0] > 0).astype(np.int32)


def _model(spe: int = 1):
    model = pj.keras.Sequential([pj.keras.layers.Dense(2)])
    model(X[:1])
    model.compile("sgd", pj.keras.losses.SparseCategoricalCrossentropy(from_logits=True), steps_per_execution=spe)
    return model


def _unchanged_after(model, call, error, match):
    before = model.get_weights()
    with pytest.raises(error, match=match):
        call()
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test__run_eagerly_inside_the_scope__is_refused():  # K1
    with ipu.ipu_strategy.IPUStrategy().scope():
        model = pj.keras.Sequential([pj.keras.layers.Dense(2)])
        with pytest.raises(RuntimeError, match=r"Keras models cannot run eagerly when using `IPUStrategy`\. Set "
                                                r"`run_eagerly=False` when calling `compile`\."):
            model.compile("sgd", "mse", run_eagerly=True)


def test__steps_per_execution_not_dividing_the_epoch__is_refused():  # K4
    with ipu.ipu_strategy.IPUStrategy().scope():
        model = _model(spe=3)
        _unchanged_after(model, lambda: model.fit(X, Y, batch_size=16, verbose=0), ValueError,
                         r"`steps_per_execution` must be a divisor of the number of batches in the dataset provided\.")


def test__steps_per_execution_larger_than_the_data__warns_and_truncates():  # K5
    with ipu.ipu_strategy.IPUStrategy().scope():
        model = _model(spe=10)
        with pytest.warns(UserWarning, match=r"`steps_per_execution` has been set to 10 but the dataset provided "
                                             r"only contains 4 batches\. Using 4 as `steps_per_execution`\."):
            model.fit(X, Y, batch_size=16, verbose=0)
        assert [k[-1] for k in model._functions if k[0] == "device"] == [4]


def test__a_partial_batch_on_the_ipu__is_refused_but_runs_on_the_host():  # K7
    with ipu.ipu_strategy.IPUStrategy().scope():
        model = _model()
        _unchanged_after(model, lambda: model.fit(X, Y, batch_size=24, verbose=0), ValueError,
                         r"The provided set of data has a partial batch, which could result in data being dropped\. "
                         r"Either adjust the `batch_size` of your model \(currently set to 24\)")
    host = _model()
    assert len(host.predict(X, batch_size=24)) == 64


def test__a_dataset_without_static_shapes_on_the_ipu__is_refused():  # K8
    dataset = pj.data.Dataset.from_tensor_slices((X, Y)).batch(24)
    with ipu.ipu_strategy.IPUStrategy().scope():
        model = _model()
        _unchanged_after(model, lambda: model.fit(dataset, verbose=0), ValueError,
                         r"The provided set of data contains a shape \[None, 4\] which is not fully defined\. "
                         r"Executing on IPU requires all dataset elements to have fully defined shapes\. If using "
                         r"batch\(\) make sure to set `drop_remainder=True`\.")


def test__a_python_generator_on_the_ipu__is_refused():  # K9
    def batches():
        while True:
            yield X[:16], Y[:16]

    with ipu.ipu_strategy.IPUStrategy().scope():
        model = _model()
        _unchanged_after(model, lambda: model.fit(batches(), steps_per_epoch=2, verbose=0), ValueError,
                         r"The provided set of data is of type `<class 'generator'>` which is not compatible with "
                         r"the IPU's requirement to know the data shape ahead of time\. Please use "
                         r"`tf\.data\.Dataset\.from_generator\(\)` to specify the shape of your data\.")


def test__too_few_batches_for_steps_per_epoch_on_the_ipu__is_refused():  # K10
    dataset = pj.data.Dataset.from_tensor_slices((X, Y)).batch(16, drop_remainder=True)
    with ipu.ipu_strategy.IPUStrategy().scope():
        model = _model()
        _unchanged_after(model, lambda: model.fit(dataset, steps_per_epoch=6, verbose=0), ValueError,
                         r"Your input does not have enough data\. Make sure that your dataset or generator can "
                         r"generate at least 6 batches \(currently it can only generate 4 batches\)\.")


def test__an_infinite_dataset_without_steps__is_refused_with_keras_or_graphcore_text():  # K11
    dataset = pj.data.Dataset.from_tensor_slices((X, Y)).batch(16, drop_remainder=True).repeat()
    with ipu.ipu_strategy.IPUStrategy().scope():
        model = _model()
        _unchanged_after(model, lambda: model.fit(dataset, verbose=0), ValueError,
                         r"Could not infer the size of the data\. You must specify the number of steps to run\.")
    host = _model()
    _unchanged_after(host, lambda: host.fit(dataset, verbose=0), ValueError,
                     r"When passing an infinitely repeating dataset, you must specify the `steps_per_epoch` argument")
    assert len(host.fit(dataset, steps_per_epoch=3, epochs=2, verbose=0).history["loss"]) == 2


def test__a_dataset_of_unknown_size_on_the_host__runs_until_it_ends():
    dataset = pj.data.Dataset.from_tensor_slices((X, Y)).filter(lambda x, y: y > 0).batch(8)
    host = _model()
    seen = []
    host.fit(dataset, epochs=2, verbose=0,
             callbacks=[pj.keras.callbacks.LambdaCallback(on_batch_end=lambda batch, logs: seen.append(batch))])
    batches = -(-int(Y.sum()) // 8)
    assert seen == list(range(batches)) * 2


def test__overriding_make_train_function__is_refused_in_the_scope():  # K12
    class Custom(pj.keras.Sequential):
        def make_train_function(self):
            return None

    with ipu.ipu_strategy.IPUStrategy().scope():
        model = Custom([pj.keras.layers.Dense(2)])
        model(X[:1])
        model.compile("sgd", "mse")
        _unchanged_after(model, lambda: model.fit(X, Y, batch_size=16, verbose=0), RuntimeError,
                         r"The function `make_train_function` for the model custom has been overridden\. This is "
                         r"not supported when using Keras within an IPUStrategy\.")
    with ipu.ipu_strategy.IPUStrategy(enable_keras_extensions=False).scope():
        model = Custom([pj.keras.layers.Dense(2)])
        model(X[:1])
        model.compile("sgd", "mse")
        _unchanged_after(model, lambda: model.fit(X, Y, batch_size=16, verbose=0), pj.errors.UnimplementedError,
                         r"overrides `make_train_function`, which popjit's Keras never calls")


def test__fit_inside_a_tf_function__is_refused():  # K19
    model = _model()

    @pj.function
    def train():
        model.fit(X, Y, verbose=0)

    with pytest.raises(RuntimeError, match=r"inside a `tf\.function`"):
        train()


def test__fit_before_compile__is_refused():
    model = pj.keras.Sequential([pj.keras.layers.Dense(2)])
    with pytest.raises(RuntimeError, match=r"You must compile your model before training/testing\. Use "
                                           r"`model\.compile\(optimizer, loss\)`\."):
        model.fit(X, Y, verbose=0)


def test__a_model_built_outside_the_scope__cannot_be_compiled_in_it():
    model = pj.keras.Sequential([pj.keras.layers.Dense(2)])
    model(X[:1])
    with ipu.ipu_strategy.IPUStrategy().scope(), pytest.raises(
            ValueError, match=r"Variable \(dense/kernel:0\) was not created in the distribution strategy scope"):
        model.compile("sgd", "mse")


def test__bad_arguments__are_refused_with_kerass_text():
    model = _model()
    with pytest.raises(TypeError, match=r"Invalid keyword argument\(s\) in `compile\(\)`: \('optimiser',\)"):
        model.compile("sgd", "mse", optimiser="adam")
    with pytest.raises(ValueError, match=r"Data cardinality is ambiguous"):
        model.fit(X, Y[:10], verbose=0)
    with pytest.raises(ValueError, match=r"`validation_freq` can not be less than 1"):
        model.fit(X, Y, verbose=0, validation_data=(X, Y), validation_freq=0)
    dataset = pj.data.Dataset.from_tensor_slices((X, Y)).batch(16)
    with pytest.raises(ValueError, match=r"`validation_split` is only supported for Tensors or NumPy arrays"):
        model.fit(dataset, verbose=0, validation_split=0.5)
    with pytest.raises(ValueError, match=r"`y` argument is not supported when using dataset as input\."):
        model.fit(dataset, Y, verbose=0)


def test__a_model_built_and_compiled_outside_the_scope__cannot_be_trained_in_it():
    host = _model()
    with ipu.ipu_strategy.IPUStrategy().scope():
        for call in (lambda: host.fit(X, Y, batch_size=16, verbose=0), lambda: host.evaluate(X, Y, verbose=0),
                     lambda: host.predict(X)):
            _unchanged_after(host, call, ValueError,
                             r"Variable \(dense/kernel:0\) was not created in the distribution strategy scope")
    assert len(host.fit(X, Y, batch_size=16, verbose=0).history["loss"]) == 1  # outside it, stock Keras


def test__an_optimizer_overriding_minimize__is_refused_with_accumulation():  # K21
    class BadSGD(pj.keras.optimizers.SGD):
        def minimize(self, loss, var_list, grad_loss=None, name=None, tape=None):
            return super().minimize(loss, var_list, grad_loss, name, tape)

    with ipu.ipu_strategy.IPUStrategy().scope():
        model = pj.keras.Sequential([pj.keras.layers.Dense(2)])
        model(X[:1])
        loss = pj.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(BadSGD(0.1), loss, steps_per_execution=2)
        model.set_gradient_accumulation_options(gradient_accumulation_steps_per_replica=2)
        _unchanged_after(model, lambda: model.fit(X, Y, batch_size=16, verbose=0), ValueError,
                         r"When using Gradient Accumulation or Pipelining, the provided optimizer must not override "
                         r"OptimizerV2\.minimize\.")
        model.compile(pj.keras.optimizers.SGD(0.1), loss, steps_per_execution=2)
        assert len(model.fit(X, Y, batch_size=16, verbose=0).history["loss"]) == 1
