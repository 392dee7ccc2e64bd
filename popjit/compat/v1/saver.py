"""``tf.compat.v1.train.Saver``: name-based checkpoints of a TF1 graph's variables.

``save`` writes TensorFlow's checkpoint format (``<prefix>.index`` and ``<prefix>.data-00000-of-00001``,
each variable under its name, e.g. ``dense/kernel``) and the ``checkpoint`` state file, keeping the
newest ``max_to_keep``; stock TensorFlow's ``Saver`` and ``tf.train.load_checkpoint`` read them, and
``restore`` reads theirs. The MetaGraph (``<prefix>.meta``) is not written: popjit's graphs are not
TensorFlow GraphDefs (``write_meta_graph`` is accepted so programs run; ``import_meta_graph`` raises).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from popjit.compat.v1 import graph_ops
from popjit.errors import FailedPreconditionError, InvalidArgumentError, UnimplementedError
from popjit.frontend.variables import Variable
from popjit.train import tensor_bundle as tb
from popjit.train.checkpoint import read_state, write_state


def _named(var_list: Any) -> dict[str, Variable]:
    if var_list is None:
        var_list = graph_ops.global_variables()
    if isinstance(var_list, dict):
        return dict(var_list)
    named: dict[str, Variable] = {}
    for var in var_list:
        if var._name in named:
            raise ValueError(f"At least two variables have the same name: {var._name}")
        named[var._name] = var
    return named


class Saver:
    """Saves and restores variables by name (the graph's global variables unless ``var_list`` says)."""

    def __init__(self, var_list: Any = None, reshape: bool = False, sharded: bool = False, max_to_keep: int = 5,
                 keep_checkpoint_every_n_hours: float = 10000.0, name: str | None = None,
                 restore_sequentially: bool = False, saver_def: Any = None, builder: Any = None,
                 defer_build: bool = False, allow_empty: bool = False, write_version: int = 2,
                 pad_step_number: bool = False, save_relative_paths: bool = False, filename: str | None = None) -> None:
        for option, value in (("reshape", reshape), ("sharded", sharded), ("saver_def", saver_def),
                              ("builder", builder), ("pad_step_number", pad_step_number)):
            if value:
                raise UnimplementedError(f"tf.compat.v1.train.Saver({option}=...) is not supported by popjit.")
        if keep_checkpoint_every_n_hours != 10000.0 or filename is not None:
            raise UnimplementedError("tf.compat.v1.train.Saver(keep_checkpoint_every_n_hours=..., filename=...) is not "
                                     "supported by popjit; remove them.")
        if write_version != 2:
            raise UnimplementedError("tf.compat.v1.train.Saver(write_version=1): popjit writes V2 checkpoints only.")
        self._variables = _named(var_list)
        if not self._variables and not allow_empty:
            raise ValueError("No variables to save")
        self._max_to_keep = max_to_keep
        self._kept: list[tuple[str, float]] = []

    @property
    def last_checkpoints(self) -> list[str]:
        """The prefixes of the checkpoints this saver keeps, oldest first."""
        return [path for path, _ in self._kept]

    def save(self, sess: Any, save_path: str, global_step: Any = None, latest_filename: str | None = None,
             meta_graph_suffix: str = "meta", write_meta_graph: bool = True, write_state: bool = True,
             strip_default_attrs: bool = False, save_debug_info: bool = False) -> str:
        """Write the variables' values now; the checkpoint's prefix (``save_path-<step>`` with a global step)."""
        if latest_filename is not None:
            raise UnimplementedError("Saver.save(latest_filename=...) is not supported by popjit.")
        prefix = os.fspath(save_path)
        if global_step is not None:
            step = sess.run(global_step) if isinstance(global_step, Variable) else global_step
            prefix = f"{prefix}-{int(step)}"
        values = {}
        for name, var in self._variables.items():
            if not var._initialized:
                raise FailedPreconditionError(f"Attempting to use uninitialized value {name}: run the variables' "
                                              "initializer before saving them.")
            values[name] = var._buffer.copy()
        tb.write_bundle(prefix, values)
        self._remember(prefix)
        if write_state:
            directory = os.path.dirname(os.path.abspath(prefix))
            write_state_file(directory, prefix, self._kept)
        return prefix

    def _remember(self, prefix: str) -> None:
        self._kept = [(p, t) for p, t in self._kept if p != prefix] + [(prefix, time.time())]
        while self._max_to_keep and len(self._kept) > self._max_to_keep:
            old, _ = self._kept.pop(0)
            for suffix in (tb.INDEX_SUFFIX, tb.DATA_SUFFIX):
                if os.path.exists(old + suffix):
                    os.remove(old + suffix)

    def restore(self, sess: Any, save_path: str) -> None:
        """Give each variable its value in the checkpoint ``save_path``."""
        if save_path is None:
            raise ValueError("Can't load save_path when it is None.")
        reader = tb.BundleReader(os.fspath(save_path))
        loaded = {}
        for name, var in self._variables.items():
            value = np.asarray(reader.get(name))
            if value.shape != var._buffer.shape:
                raise InvalidArgumentError(f"Restoring from checkpoint failed: the checkpoint's {name} has shape "
                                           f"{list(value.shape)}, the variable {list(var._buffer.shape)}.")
            loaded[name] = value
        for name, var in self._variables.items():  # all found: only now change the variables
            var._write(loaded[name])
            var._initialized = True

    def recover_last_checkpoints(self, checkpoint_paths: list[str]) -> None:
        """Keep track of earlier checkpoints (deleted once more than ``max_to_keep`` are kept)."""
        self._kept = [(p, time.time()) for p in checkpoint_paths]


def write_state_file(directory: str, latest: str, kept: list[tuple[str, float]]) -> None:
    write_state(directory, latest, [p for p, _ in kept], [t for _, t in kept])


def get_checkpoint_state(checkpoint_dir: str, latest_filename: str | None = None) -> Any:
    """The directory's ``checkpoint`` state (``model_checkpoint_path``, ``all_model_checkpoint_paths``) or None."""
    state = read_state(os.fspath(checkpoint_dir), latest_filename)
    return None if state is None else _State(state)


class _State:
    def __init__(self, fields: dict[str, Any]) -> None:
        self.model_checkpoint_path = fields.get("model_checkpoint_path", "")
        self.all_model_checkpoint_paths = list(fields.get("all_model_checkpoint_paths", []))
        self.all_model_checkpoint_timestamps = list(fields.get("all_model_checkpoint_timestamps", []))


def import_meta_graph(meta_graph_or_file: Any, *args: Any, **kwargs: Any) -> Any:
    """Not supported: popjit does not write or read TensorFlow MetaGraphs."""
    raise UnimplementedError("tf.compat.v1.train.import_meta_graph: popjit does not read TensorFlow MetaGraphs; build "
                             "the graph in Python and restore its variables with Saver.restore.")
