"""Ctrl-C during a long on-device loop stops it at an iteration boundary with KeyboardInterrupt;
the variables hold the values of an iteration boundary and the next call works. A real
subprocess and a real SIGINT. (How fast it stops is measured and printed, not asserted.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.helpers import sigint_as_at_a_terminal

pytestmark = pytest.mark.slow

STEPS = 50_000_000  # minutes of looping if nothing stopped it

PROGRAM = textwrap.dedent(f"""
    import json
    import numpy as np
    import popjit.tensorflow as tf
    from popjit import ipu

    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = 1
    cfg.configure_ipu_system()
    strategy = ipu.ipu_strategy.IPUStrategy()
    with strategy.scope():
        counter = tf.Variable(np.zeros(4, np.float32))

    @tf.function(jit_compile=True)
    def loop(x, n):
        for _ in tf.range(n):
            x = tf.tanh(x) * 1.5 + 0.25
            counter.assign_add(tf.ones(4))
        return x

    x = np.ones(4096, np.float32)
    with strategy.scope():
        strategy.run(loop, args=(x, 3))  # compiled (the long run reuses its machine code)
        counter.assign(np.zeros(4, np.float32))
        print("ready", flush=True)
        try:
            strategy.run(loop, args=(x, {STEPS}))
            print("finished", flush=True)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        print("counter", json.dumps(counter.numpy().tolist()), flush=True)
        before = counter.numpy()[0]
        strategy.run(loop, args=(x, 2))
        print("next call", counter.numpy()[0] - before, flush=True)
""")


def test__sigint_during_a_device_loop__stops_it_and_the_next_call_works(tmp_path):
    # why faulthandler: a child that died silently once (a loaded CI host) leaves its stack on stderr next time
    env = {**os.environ, "POPJIT_CACHE_DIR": str(tmp_path / "cache"), "PYTHONFAULTHANDLER": "1"}
    child = subprocess.Popen([sys.executable, "-c", PROGRAM], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env, preexec_fn=sigint_as_at_a_terminal)
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        time.sleep(1.0)
        sent = time.perf_counter()
        child.send_signal(signal.SIGINT)
        first = child.stdout.readline().strip()
        latency = time.perf_counter() - sent
        rest, err = child.communicate(timeout=120)
    finally:
        child.kill()
    print(f"\nKeyboardInterrupt {latency * 1000:.0f} ms after SIGINT")
    assert first == "interrupted", err[-2000:]
    lines = dict(line.split(" ", 1) for line in rest.strip().splitlines())
    values = json.loads(lines["counter"])
    assert len(set(values)) == 1 and values[0] == int(values[0]), "a whole number of completed iterations"
    assert 0 <= values[0] < STEPS, "the loop was stopped early"
    assert float(lines["next"].removeprefix("call ")) == 2.0, "the next call runs its two iterations"
    assert child.returncode == 0
