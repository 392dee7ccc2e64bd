"""``tf.compat.v1.summary``: summaries fetched from a session run and written by a FileWriter into an
event file that stock TensorFlow's ``summary_iterator`` reads back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from popjit.tensorflow.compat import v1 as tf1


def test__summaries__written_and_read_by_stock_tensorflow(graph: Any, real_tf1: Any, tmp_path: Path) -> None:
    x = tf1.placeholder(np.float32, [5])
    loss = tf1.reduce_mean(x * x)
    tf1.summary.scalar("loss", loss)
    tf1.summary.histogram("values", x)
    merged = tf1.summary.merge_all()
    writer = tf1.summary.FileWriter(str(tmp_path / "logs"))
    values = [np.arange(5, dtype=np.float32) * k for k in range(3)]
    with tf1.Session() as sess:
        for step, v in enumerate(values):
            summary, loss_value = sess.run([merged, loss], {x: v})
            assert isinstance(summary, bytes) and loss_value == np.mean(v * v)
            writer.add_summary(summary, step)
    writer.close()
    (events,) = (tmp_path / "logs").glob("events.out.tfevents.*")
    scalars, histograms = {}, {}
    for event in real_tf1.train.summary_iterator(str(events)):
        for value in event.summary.value:
            if value.tag == "loss":
                scalars[event.step] = value.simple_value
            elif value.tag == "values":
                histograms[event.step] = (value.histo.num, value.histo.sum, value.histo.max)
    assert scalars == {k: float(np.mean(v * v)) for k, v in enumerate(values)}
    assert histograms == {k: (5.0, float(v.sum()), float(v.max())) for k, v in enumerate(values)}
