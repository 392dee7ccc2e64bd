"""Custom training loops on the IPU (the seed's `targeting_tf2_example3.py` shape): Keras model + Adam +
a mapped, batched, repeated dataset read with ``next(iterator)`` + a dict outfeed, run by
``strategy.run`` several times; checked against the graph-IR NumPy interpreter and an independent
float64 NumPy model. Then the errors a training loop can hit (each leaving every variable as it was),
and Keras inside compiled loops (trainable variables, weights round trips, Dropout's flag,
``minimize``, learning-rate schedules across executions).

Already covered elsewhere (not repeated here): float64 arguments with a plain variable
(tests/ipu/test_strategy.py ``test__float64_input__is_a_type_error``,
``test__error_during_trace_or_compile__leaves_variables_and_programs_intact``); an exhausted
``IPUInfeedQueue`` with a plain variable (tests/ipu/test_feeds.py
``test__exhausted_dataset__out_of_range_before_running``); the double-enqueue and
``drop_remainder`` messages with ``IPUOutfeedQueue``/``IPUInfeedQueue`` built by hand (test_feeds.py
``test__outfeed_errors``, ``test__infeed_checks``); Keras weights order, Dropout and schedules eagerly
or in a bare ``tf.function`` (tests/keras_api/).
"""

from __future__ import annotations

import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit import errors
from popjit.frontend.autograph import LoopVariableError
from popjit.frontend.variables import VARIABLES
from popjit.graph.interpret import interpret
from popjit.runtime import device as devices
from popjit.runtime.streams import InterpreterStreams
from popjit.tensorflow.python import ipu

RNG = np.random.default_rng(11)
IMAGES = RNG.integers(0, 256, (40, 4, 4)).astype(np.uint8)  # 5 batches of 8 per epoch
LABELS = RNG.integers(0, 10, 40)  # int64: the map casts it (an int64 infeed would be refused)
BATCH = 8


@pytest.fixture
def strategy():
    s = ipu.ipu_strategy.IPUStrategy()
    with s.scope():
        yield s


# -- the model, data and loop of the seed example, scaled down ------------------------------------
def make_model(hidden: int = 16, dropout: float | None = None) -> tf.keras.Sequential:
    glorot = tf.keras.initializers.GlorotUniform
    layers = [tf.keras.layers.Flatten(),
              tf.keras.layers.Dense(hidden, activation="relu", kernel_initializer=glorot(seed=1))]
    if dropout is not None:
        layers.append(tf.keras.layers.Dropout(dropout, seed=5))
    layers.append(tf.keras.layers.Dense(10, kernel_initializer=glorot(seed=2)))
    model = tf.keras.Sequential(layers)
    model.build((None, 4, 4))
    return model


def make_dataset(images=IMAGES, labels=LABELS, repeat: bool = True, drop_remainder: bool = True):
    ds = tf.data.Dataset.from_tensor_slices((images, labels))
    ds = ds.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, tf.cast(y, tf.int32)))
    ds = ds.batch(BATCH, drop_remainder=drop_remainder)
    return ds.repeat() if repeat else ds


def xent(labels, logits):
    return tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))


@tf.function(jit_compile=True)
def training_loop(iterator, steps, outfeed, model, optimizer):
    for _ in tf.range(steps):
        features, labels = next(iterator)
        with tf.GradientTape() as tape:  # inline in the loop body, as users write it
            logits = model(features, training=True)
            loss = xent(labels, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        hits = tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels)
        outfeed.enqueue({"loss": loss, "acc": tf.reduce_mean(tf.cast(hits, tf.float32))})


def test__gradient_tape_bound_in_a_tensor_loop_body__is_local_to_each_iteration():
    """``with tf.GradientTape() as tape`` inside ``for _ in tf.range(n)`` binds ``tape`` afresh every
    iteration: it is not a loop variable (autograph's liveness once treated ``with ... as`` as not
    binding, and refused the seed's loop written inline). A tape used after the loop still is one."""
    w = tf.Variable(np.float32(2.0))

    @tf.function(jit_compile=True)
    def inline(n):
        for _ in tf.range(n):
            with tf.GradientTape() as tape:
                loss = w * w
            w.assign_sub(0.25 * tape.gradient(loss, w))
        return w.read_value()

    assert float(inline(3)) == pytest.approx(2.0 * 0.5 ** 3)

    @tf.function(jit_compile=True)
    def tape_after_the_loop(n):
        loss = tf.constant(0.0)
        for _ in tf.range(n):
            with tf.GradientTape() as tape:
                loss = w * w
        return tape.gradient(loss, w)

    with pytest.raises(LoopVariableError, match="'tape' is assigned inside the for loop but not before it"):
        tape_after_the_loop(2)


def state_of(model, optimizer) -> list[np.ndarray]:
    return [v.numpy().copy() for v in model.variables + optimizer.weights]


def assert_state(model, optimizer, expected: list[np.ndarray]) -> None:
    now = state_of(model, optimizer)
    assert len(now) == len(expected)
    for a, b in zip(now, expected):
        np.testing.assert_array_equal(a, b)


# -- the float64 NumPy reference: Flatten, Dense(relu), Dense, softmax cross-entropy, Keras 2.x Adam ----
def numpy_training(weights: list[np.ndarray], steps: int, lr: float = 0.01, b1: float = 0.9, b2: float = 0.999,
                   eps: float = 1e-7) -> tuple[list[float], list[float], list[np.ndarray]]:
    w = [a.astype(np.float64) for a in weights]
    m = [np.zeros_like(a) for a in w]
    v = [np.zeros_like(a) for a in w]
    x_all = IMAGES.reshape(len(IMAGES), -1).astype(np.float64) / 255.0
    losses, accs = [], []
    for t in range(1, steps + 1):
        k = (t - 1) % (len(IMAGES) // BATCH)
        x, y = x_all[k * BATCH:(k + 1) * BATCH], LABELS[k * BATCH:(k + 1) * BATCH]
        w1, b1_, w2, b2_ = w
        pre = x @ w1 + b1_
        h = np.maximum(pre, 0.0)
        z = h @ w2 + b2_
        logp = z - z.max(1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(1, keepdims=True))
        losses.append(float(-logp[np.arange(BATCH), y].mean()))
        accs.append(float((z.argmax(1) == y).mean()))
        dz = np.exp(logp)
        dz[np.arange(BATCH), y] -= 1.0
        dz /= BATCH
        dh = (dz @ w2.T) * (pre > 0)
        grads = [x.T @ dh, dh.sum(0), h.T @ dz, dz.sum(0)]
        lr_t = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        for i, g in enumerate(grads):
            m[i] = m[i] + (g - m[i]) * (1 - b1)
            v[i] = v[i] + (g * g - v[i]) * (1 - b2)
            w[i] = w[i] - lr_t * m[i] / (np.sqrt(v[i]) + eps)
    return losses, accs, w


# ==================================================================================================
# 1. acceptance
# ==================================================================================================
def test__custom_loop__adam_mapped_dataset_dict_outfeed__matches_the_interpreter_and_numpy(strategy):
    """A custom loop with Adam, a mapped dataset and a dict outfeed gives the same losses as the same
    model, weights and data run through the NumPy reference interpreter (rtol 1e-4)."""
    steps = 6
    model, opt = make_model(), tf.keras.optimizers.Adam(0.01)
    iterator = iter(make_dataset())
    assert isinstance(iterator, ipu.ipu_infeed_queue.IPUOwnedIterator)
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()
    initial = model.get_weights()

    device = devices.get_device(0)
    counts = (device.compilations, device.executions)
    traces = training_loop.experimental_get_tracing_count()
    strategy.run(training_loop, args=(iterator, steps, outfeed, model, opt))
    first = outfeed.dequeue()
    strategy.run(training_loop, args=(iterator, steps, outfeed, model, opt))
    second = outfeed.dequeue()
    assert (device.compilations - counts[0], device.executions - counts[1]) == (1, 2)
    assert training_loop.experimental_get_tracing_count() == traces + 1  # one trace, one engine, run twice
    assert set(first) == {"loss", "acc"} and first["loss"].shape == (steps,) and first["acc"].dtype == np.float32
    compiled = {k: np.concatenate([first[k], second[k]]) for k in first}
    assert int(opt.iterations.numpy()) == 2 * steps
    assert not np.array_equal(first["loss"], second["loss"]), "the second execution continues, it does not restart"

    # the same model, weights and data through the graph-IR interpreter (streams included)
    twin, twin_opt = make_model(), tf.keras.optimizers.Adam(0.01)
    for a, b in zip(twin.get_weights(), initial):
        np.testing.assert_array_equal(a, b)  # the seeded initializers give the same weights
    twin_iterator, twin_outfeed = iter(make_dataset()), ipu.ipu_outfeed_queue.IPUOutfeedQueue()
    graph = training_loop.get_concrete_function(twin_iterator, steps, twin_outfeed, twin, twin_opt).graph
    used = {id(VARIABLES[vid]) for vid in graph.variables}  # also the hyperparameters (lr, beta_1...)
    assert {id(v) for v in twin.variables + twin_opt.weights} <= used
    for _ in range(2):  # two executions; the interpreter returns the variables' new values
        _, updates = interpret(graph, [], {vid: VARIABLES[vid].numpy() for vid in graph.variables},
                               effects=InterpreterStreams())
        for vid, value in updates.items():
            VARIABLES[vid].assign(value)
    interpreted = twin_outfeed.dequeue()
    np.testing.assert_allclose(compiled["loss"], interpreted["loss"], rtol=1e-4)
    np.testing.assert_array_equal(compiled["acc"], interpreted["acc"])
    for a, b in zip(model.get_weights() + opt.get_weights(), twin.get_weights() + twin_opt.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)

    # and an independent float64 NumPy model with Keras's Adam
    losses, accs, weights = numpy_training(initial, 2 * steps)
    np.testing.assert_allclose(compiled["loss"], losses, rtol=1e-4)
    np.testing.assert_array_equal(compiled["acc"], np.float32(accs))
    for got, want in zip(model.get_weights(), weights):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert compiled["loss"][-1] < compiled["loss"][0]


# ==================================================================================================
# 2. errors: each leaves every variable (model weights, optimizer step and slots) as it was
# ==================================================================================================
@tf.function(jit_compile=True)
def train_on_batch(features, labels, model, optimizer):
    with tf.GradientTape() as tape:
        loss = xent(labels, model(features, training=True))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss


def test__float64_batch__type_error_and_the_training_state_is_untouched(strategy):
    model, opt = make_model(8), tf.keras.optimizers.Adam(0.01)
    x = IMAGES[:BATCH].astype(np.float32) / 255.0
    y = LABELS[:BATCH].astype(np.int32)
    strategy.run(train_on_batch, args=(x, y, model, opt))
    before = state_of(model, opt)
    device = devices.get_device(0)
    counts = (device.compilations, device.executions)
    with pytest.raises(TypeError) as e:
        strategy.run(train_on_batch, args=(IMAGES[:BATCH] / 255.0, y, model, opt))  # forgot the cast
    assert str(e.value) == "Unsupported data type for input: float64"
    assert_state(model, opt, before)
    assert (device.compilations, device.executions) == counts
    strategy.run(train_on_batch, args=(x, y, model, opt))
    assert int(opt.iterations.numpy()) == 2 and device.executions == counts[1] + 1
    assert not np.array_equal(model.get_weights()[0], before[0])


def test__float64_dataset__refused_at_the_next_line_with_advice_and_nothing_runs(strategy):
    model, opt = make_model(8), tf.keras.optimizers.Adam(0.01)
    opt.apply_gradients(zip([tf.zeros_like(v) for v in model.trainable_variables], model.trainable_variables))
    before = state_of(model, opt)
    ds = tf.data.Dataset.from_tensor_slices((IMAGES / 255.0, LABELS.astype(np.int32)))  # float64 images
    iterator = iter(ds.batch(BATCH, drop_remainder=True).repeat())
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()
    executions = devices.get_device(0).executions
    with pytest.raises(errors.UnimplementedError) as e:
        strategy.run(training_loop, args=(iterator, 2, outfeed, model, opt))
    msg = str(e.value)
    assert "float64 is not supported on the IPU" in msg and "f64[8,4,4]" in msg  # what
    assert "features, labels = next(iterator)" in msg and __file__ in msg  # where
    assert "Cast its elements to float32" in msg and "dataset.map" in msg  # what to do
    assert_state(model, opt, before)
    assert devices.get_device(0).executions == executions
    assert outfeed.dequeue()["loss"].shape == (0,)


def test__exhausted_dataset__out_of_range_and_the_training_state_is_as_before_that_run(strategy):
    model, opt = make_model(8), tf.keras.optimizers.Adam(0.01)
    iterator = iter(make_dataset(repeat=False))  # 5 batches
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()
    strategy.run(training_loop, args=(iterator, 3, outfeed, model, opt))
    before = state_of(model, opt)
    with pytest.raises(errors.OutOfRangeError) as e:
        strategy.run(training_loop, args=(iterator, 3, outfeed, model, opt))  # only 2 batches left
    msg = str(e.value)
    assert "End of sequence" in msg and "fewer than the 3 elements" in msg  # what
    assert "dataset.repeat()" in msg and "fewer steps per execution" in msg  # what to do
    assert_state(model, opt, before)
    assert int(opt.iterations.numpy()) == 3
    strategy.run(training_loop, args=(iterator, 2, outfeed, model, opt))  # the 2 left are still there
    assert int(opt.iterations.numpy()) == 5
    assert outfeed.dequeue()["loss"].shape == (5,), "the failed run put nothing in the outfeed"
    with pytest.raises(errors.OutOfRangeError, match="fewer than the 1 elements"):
        strategy.run(training_loop, args=(iterator, 1, outfeed, model, opt))


def test__double_enqueue_in_a_training_loop__value_error_and_the_state_is_untouched(strategy):
    model, opt = make_model(8), tf.keras.optimizers.Adam(0.01)
    iterator = iter(make_dataset())
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()
    strategy.run(training_loop, args=(iterator, 2, outfeed, model, opt))
    before = state_of(model, opt)

    @tf.function(jit_compile=True)
    def loop_and_report(steps):
        loss = tf.constant(0.0)
        for _ in tf.range(steps):
            features, labels = next(iterator)
            with tf.GradientTape() as tape:
                loss = xent(labels, model(features, training=True))
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            outfeed.enqueue({"loss": loss, "acc": loss})
        outfeed.enqueue({"loss": loss, "acc": loss})  # the bad line: a second enqueue in the same program

    executions = devices.get_device(0).executions
    with pytest.raises(ValueError) as e:
        strategy.run(loop_and_report, args=(2,))
    msg = str(e.value)
    assert msg.startswith("An outfeed can only be enqueued once.")  # Graphcore's text
    assert "the bad line" in msg and __file__ in msg  # where
    assert "one call (a tuple or dict of them)" in msg  # what to do
    assert_state(model, opt, before)
    assert devices.get_device(0).executions == executions
    strategy.run(training_loop, args=(iterator, 1, outfeed, model, opt))  # the good program still runs
    assert outfeed.dequeue()["loss"].shape == (3,)
    assert int(opt.iterations.numpy()) == 3


def test__batch_without_drop_remainder__value_error_before_any_program(strategy):
    model, opt = make_model(8), tf.keras.optimizers.Adam(0.01)
    opt.apply_gradients(zip([tf.zeros_like(v) for v in model.trainable_variables], model.trainable_variables))
    before = state_of(model, opt)
    with pytest.raises(ValueError) as e:
        iter(make_dataset(drop_remainder=False))  # the iterator made in the scope is an infeed
    assert str(e.value) == ("Output shape (None, 4, 4) is not fully defined. If using tf.Dataset.batch, set "
                            "`drop_remainder=True`.")
    assert_state(model, opt, before)
    with pytest.raises(ValueError, match=r"Output shape \(None, 4, 4\) is not fully defined"):
        ipu.ipu_infeed_queue.IPUInfeedQueue(make_dataset(drop_remainder=False).repeat())


# ==================================================================================================
# 3. Keras inside compiled loops
# ==================================================================================================
def test__trainable_variables__order_count_and_frozen_layers_in_the_compiled_loop(strategy):
    model = make_model(8)
    model.layers[1].trainable = False  # freeze the hidden Dense
    opt = tf.keras.optimizers.Adam(0.05)
    names = [v.name for v in model.trainable_variables]
    assert len(names) == 2 and names[0].endswith("/kernel:0") and names[1].endswith("/bias:0")
    assert [v.name for v in model.non_trainable_variables] == [v.name for v in model.layers[1].weights]
    assert [v.name for v in model.variables] == [v.name for v in model.layers[1].weights + model.layers[2].weights]
    frozen = [w.copy() for w in model.layers[1].get_weights()]
    head = [w.copy() for w in model.layers[2].get_weights()]
    iterator, outfeed = iter(make_dataset()), ipu.ipu_outfeed_queue.IPUOutfeedQueue()
    strategy.run(training_loop, args=(iterator, 3, outfeed, model, opt))
    for got, want in zip(model.layers[1].get_weights(), frozen):
        np.testing.assert_array_equal(got, want)
    assert all(not np.array_equal(got, want) for got, want in zip(model.layers[2].get_weights(), head))
    # slots only for what is trained, in Keras order: iter, m of each, v of each
    assert [w.name for w in opt.weights] == ["Adam/iter:0"] + [f"Adam/{n[:-2]}/m:0" for n in names] + [
        f"Adam/{n[:-2]}/v:0" for n in names]


def test__get_weights_set_weights__rewind_a_compiled_training_loop_without_retracing(strategy):
    model, opt = make_model(8), tf.keras.optimizers.Adam(0.02)
    x = IMAGES[:BATCH].astype(np.float32) / 255.0
    y = LABELS[:BATCH].astype(np.int32)

    @tf.function(jit_compile=True)
    def steps(features, labels):
        losses = tf.zeros([4])
        for i in tf.range(4):
            loss = train_on_batch(features, labels, model, opt)
            losses += tf.one_hot(i, 4) * loss
        return losses

    strategy.run(steps, args=(x, y))
    saved, saved_opt = model.get_weights(), opt.get_weights()
    assert [w.shape for w in saved] == [(16, 8), (8,), (8, 10), (10,)] and saved_opt[0] == 4
    ahead = strategy.run(steps, args=(x, y)).numpy()
    moved = model.get_weights()
    model.set_weights(saved)
    opt.set_weights(saved_opt)
    for got, want in zip(model.get_weights(), saved):
        np.testing.assert_array_equal(got, want)
    again = strategy.run(steps, args=(x, y)).numpy()
    np.testing.assert_array_equal(again, ahead)  # the device sees the host's weights
    for got, want in zip(model.get_weights(), moved):
        np.testing.assert_array_equal(got, want)
    assert steps.experimental_get_tracing_count() == 1
    assert int(opt.iterations.numpy()) == 8
    with pytest.raises(ValueError):
        model.set_weights(saved[:2])
    for got, want in zip(model.get_weights(), moved):
        np.testing.assert_array_equal(got, want)


@tf.function(jit_compile=True)
def sgd_loop(features, labels, model, optimizer, training):
    losses = tf.zeros([3])
    for i in tf.range(3):
        with tf.GradientTape() as tape:
            loss = xent(labels, model(features, training=training))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        losses += tf.one_hot(i, 3) * loss
    return losses


def test__dropout__training_false_is_the_identity_and_true_draws_a_mask_per_step(strategy):
    x = IMAGES[:BATCH].astype(np.float32) / 255.0
    y = LABELS[:BATCH].astype(np.int32)
    plain, with_dropout = make_model(32), make_model(32, dropout=0.5)
    for a, b in zip(plain.get_weights(), with_dropout.get_weights()):
        np.testing.assert_array_equal(a, b)
    plain_losses = strategy.run(sgd_loop, args=(x, y, plain, tf.keras.optimizers.SGD(0.5), False)).numpy()
    identity = strategy.run(sgd_loop, args=(x, y, with_dropout, tf.keras.optimizers.SGD(0.5), False)).numpy()
    np.testing.assert_allclose(identity, plain_losses, rtol=1e-6)
    for a, b in zip(plain.get_weights(), with_dropout.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert plain_losses[2] < plain_losses[0]

    # training=True with a zero learning rate: the weights stay, the losses differ step to step
    # (a new mask each iteration and each execution) and from the no-dropout loss
    frozen = tf.keras.optimizers.SGD(0.0)
    weights = with_dropout.get_weights()
    dropped = [strategy.run(sgd_loop, args=(x, y, with_dropout, frozen, True)).numpy() for _ in range(2)]
    for a, b in zip(with_dropout.get_weights(), weights):
        np.testing.assert_array_equal(a, b)
    eval_loss = float(xent(y, with_dropout(x, training=False)))
    losses = np.concatenate(dropped)
    assert np.all(np.isfinite(losses)) and len(set(losses.tolist())) == 6, losses
    assert not np.any(np.isclose(losses, eval_loss, rtol=1e-6)), (losses, eval_loss)


def test__minimize__inside_a_compiled_step_matches_apply_gradients(strategy):
    x = IMAGES[:BATCH].astype(np.float32) / 255.0
    y = LABELS[:BATCH].astype(np.int32)
    reference, by_callable, by_tape = make_model(8), make_model(8), make_model(8)
    opts = [tf.keras.optimizers.Adam(0.05) for _ in range(3)]
    strategy.run(sgd_loop, args=(x, y, reference, opts[0], False))  # tape.gradient + apply_gradients

    @tf.function(jit_compile=True)
    def minimize_loop(features, labels, model, optimizer):
        for _ in tf.range(3):
            optimizer.minimize(lambda: xent(labels, model(features, training=False)),
                               var_list=lambda: model.trainable_variables)

    @tf.function(jit_compile=True)
    def minimize_with_tape(features, labels, model, optimizer):
        for _ in tf.range(3):
            with tf.GradientTape() as tape:
                loss = xent(labels, model(features, training=False))
            optimizer.minimize(loss, model.trainable_variables, tape=tape)

    strategy.run(minimize_loop, args=(x, y, by_callable, opts[1]))
    strategy.run(minimize_with_tape, args=(x, y, by_tape, opts[2]))
    for model, opt in ((by_callable, opts[1]), (by_tape, opts[2])):
        assert int(opt.iterations.numpy()) == 3
        for got, want in zip(model.get_weights() + opt.get_weights(), reference.get_weights() + opts[0].get_weights()):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert not np.array_equal(reference.get_weights()[0], make_model(8).get_weights()[0])

    @tf.function(jit_compile=True)
    def tensor_loss_without_tape(features, labels):
        opts[2].minimize(xent(labels, by_tape(features)), by_tape.trainable_variables)

    before = state_of(by_tape, opts[2])
    with pytest.raises(ValueError, match="`tape` is required when a `Tensor` loss is passed"):
        strategy.run(tensor_loss_without_tape, args=(x, y))
    assert_state(by_tape, opts[2], before)


@pytest.mark.parametrize("schedule, rate", [
    (lambda: tf.keras.optimizers.schedules.ExponentialDecay(1.0, 3, 0.5), lambda k: 0.5 ** (k / 3)),
    (lambda: tf.keras.optimizers.schedules.ExponentialDecay(1.0, 3, 0.5, staircase=True), lambda k: 0.5 ** (k // 3)),
    (lambda: tf.keras.optimizers.schedules.PiecewiseConstantDecay([2, 5], [1.0, 0.5, 0.25]),
     lambda k: 1.0 if k <= 2 else 0.5 if k <= 5 else 0.25),
], ids=["exponential", "exponential-staircase", "piecewise"])
def test__lr_schedule__advances_with_iterations_across_strategy_run_executions(strategy, schedule, rate):
    opt = tf.keras.optimizers.SGD(schedule())
    var = tf.Variable([0.0])
    outfeed = ipu.ipu_outfeed_queue.IPUOutfeedQueue()

    @tf.function(jit_compile=True)
    def steps():
        for _ in tf.range(3):
            outfeed.enqueue(tf.cast(opt.iterations, tf.int32))
            opt.apply_gradients([(tf.ones(1), var)])

    rates = [rate(k) for k in range(9)]
    for execution in range(3):  # boundaries fall inside and between executions
        strategy.run(steps)
        k = 3 * (execution + 1)
        np.testing.assert_allclose(-var.numpy(), [sum(rates[:k])], rtol=1e-5)
        assert int(opt.iterations.numpy()) == k
    np.testing.assert_array_equal(outfeed.dequeue(), np.arange(9, dtype=np.int32))
    assert steps.experimental_get_tracing_count() == 1
    assert var.device.endswith("/device:IPU:0") and opt.iterations.device.endswith("/device:IPU:0")
