"""The Keras examples in ``examples/`` run unmodified under ``popjit run`` (real subprocesses, each
with its own cache) and reach their accuracy on held-out data."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_run import ROOT, popjit_run

pytestmark = pytest.mark.slow

#: Each example and the test accuracy it must reach (stock Keras reaches about the same).
EXAMPLES = {"keras_cnn_digits.py": 0.93, "keras_lstm_text.py": 0.85, "keras_transformer_encoder.py": 0.8}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test__example__trains_to_its_accuracy(tmp_path: Path, name: str) -> None:
    result = popjit_run([str(ROOT / "examples" / name)], tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    epochs = re.findall(r"^\d+/\d+ - .*loss: ([\d.]+)", result.stdout, re.M)
    assert len(epochs) >= 8 and float(epochs[-1]) < float(epochs[0]), result.stdout[-2000:]
    (accuracy,) = re.findall(r"^test accuracy: ([\d.]+)$", result.stdout, re.M)
    assert float(accuracy) >= EXAMPLES[name], result.stdout[-2000:]


def test__tf1_estimator_example__trains_evaluates_and_predicts(tmp_path: Path) -> None:
    result = popjit_run([str(ROOT / "examples" / "tf1_digits_estimator.py")], tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"^global step: 900$", result.stdout, re.M), result.stdout[-2000:]
    (right,) = re.findall(r"^predicted 288 digits, ([\d.]+) of them right$", result.stdout, re.M)
    (accuracy,) = re.findall(r"^test accuracy: ([\d.]+)$", result.stdout, re.M)
    assert float(accuracy) >= 0.93 and float(right) == float(accuracy)
