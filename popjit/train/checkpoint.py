"""``tf.train.Checkpoint``, ``CheckpointManager`` and the functions that find and read checkpoints.

What a checkpoint saves is a graph of objects: from the root, each object names its children
(``_trackable_children()``: a Keras model its layers as ``layer-0``, ``layer_with_weights-0``... and its
``optimizer``, a layer its weights as ``kernel``, ``bias``..., an optimizer its step ``iter`` and
hyperparameters), lists and dicts name theirs by position and key, and variables are the leaves. Each
variable is saved once under the path of its first appearance in breadth-first order,
``model/layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE`` (``/`` in a name written ``.S``, ``.``
as ``..``); an optimizer's slots (``_checkpoint_slots()``) under
``<variable's path>/.OPTIMIZER_SLOT/<optimizer's path>/<slot>/...``. The graph itself is saved as the
``TrackableObjectGraph`` message under ``_CHECKPOINTABLE_OBJECT_GRAPH``, as TensorFlow 2 saves it, and
restoring walks it beside the live objects, matching children by name, so names of variables do not
matter, only the structure. Variables that do not exist yet are not restored later (TensorFlow's
deferred restoration is not implemented): build a model before restoring into it.
"""

from __future__ import annotations

import os
import re
import time
from collections import deque
from typing import Any

import numpy as np

from popjit.errors import NotFoundError
from popjit.frontend import api as tf
from popjit.train import tensor_bundle as tb

GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
_VALUE = ".ATTRIBUTES/VARIABLE_VALUE"


def _escape(name: str) -> str:
    return name.replace(".", "..").replace("/", ".S")


def _is_variable(obj: Any) -> bool:
    return isinstance(obj, tf.Variable)


def children(obj: Any) -> list[tuple[str, Any]]:
    """The named children an object contributes to a checkpoint."""
    if _is_variable(obj):
        return []
    if hasattr(obj, "_trackable_children"):
        return list(obj._trackable_children())
    if isinstance(obj, list | tuple):
        return [(str(i), v) for i, v in enumerate(obj) if is_trackable(v)]
    if isinstance(obj, dict):
        return [(str(k), v) for k, v in obj.items() if is_trackable(v)]
    return []


def is_trackable(obj: Any) -> bool:
    """Whether a checkpoint can hold ``obj`` (a variable, an object naming children, or a list/dict of them)."""
    if _is_variable(obj) or hasattr(obj, "_trackable_children"):
        return True
    if isinstance(obj, list | tuple):
        return any(is_trackable(v) for v in obj)
    if isinstance(obj, dict):
        return any(is_trackable(v) for v in obj.values())
    return False


# -- the object graph ---------------------------------------------------------------------------------------
class _Node:
    def __init__(self, obj: Any, path: list[str]) -> None:
        self.obj, self.path = obj, path
        self.children: list[tuple[int, str]] = []
        self.key: str | None = None
        self.slots: list[tuple[int, str, int]] = []


def _graph(root: Any) -> list[_Node]:
    """Every object reachable from ``root`` in breadth-first order, then the optimizers' slot variables."""
    nodes = [_Node(root, [])]
    ids = {id(root): 0}
    queue = deque([0])
    while queue:
        node = nodes[queue.popleft()]
        for name, child in children(node.obj):
            if id(child) not in ids:
                ids[id(child)] = len(nodes)
                nodes.append(_Node(child, [*node.path, _escape(name)]))
                queue.append(ids[id(child)])
            node.children.append((ids[id(child)], name))
    for node in list(nodes):
        if _is_variable(node.obj):
            node.key = "/".join([*node.path, _VALUE])
        for var, slot_name, slot in getattr(node.obj, "_checkpoint_slots", lambda: [])():
            if id(var) not in ids or id(slot) in ids:
                continue
            original = nodes[ids[id(var)]]
            ids[id(slot)] = len(nodes)
            slot_node = _Node(slot, [*original.path, ".OPTIMIZER_SLOT", *node.path, _escape(slot_name)])
            slot_node.key = "/".join([*slot_node.path, _VALUE])
            nodes.append(slot_node)
            node.slots.append((ids[id(var)], slot_name, ids[id(slot)]))
    return nodes


def _encode_graph(nodes: list[_Node]) -> bytes:
    out = b""
    for node in nodes:
        body = b"".join(tb.field_message(1, tb.field_varint(1, i) + tb.field_bytes(2, name))
                        for i, name in node.children)
        if node.key is not None:
            full = node.obj.name.split(":")[0]
            body += tb.field_message(2, tb.field_bytes(1, "VARIABLE_VALUE") + tb.field_bytes(2, full)
                                     + tb.field_bytes(3, node.key))
        body += b"".join(tb.field_message(3, tb.field_varint(1, a) + tb.field_bytes(2, name) + tb.field_varint(3, b))
                         for a, name, b in node.slots)
        out += tb.field_message(1, body)
    return out


class SavedNode:
    """One object of a checkpoint's graph: its children, its value's key, its slot variables."""

    def __init__(self, data: bytes) -> None:
        self.children: list[tuple[int, str]] = []
        self.key: str | None = None
        self.slots: list[tuple[int, str, int]] = []
        for number, value in tb.parse_message(data):
            fields = tb.parse_message(value)
            if number == 1:
                ref = dict(fields)
                self.children.append((ref.get(1, 0), ref.get(2, b"").decode()))
            elif number == 2:
                attribute = dict(fields)
                if attribute.get(1, b"") == b"VARIABLE_VALUE":
                    self.key = attribute.get(3, b"").decode()
            elif number == 3:
                slot = dict(fields)
                self.slots.append((slot.get(1, 0), slot.get(2, b"").decode(), slot.get(3, 0)))


def read_graph(reader: tb.BundleReader) -> list[SavedNode]:
    """The object graph a checkpoint was saved with."""
    if GRAPH_KEY not in reader.entries:
        raise NotFoundError(f"The checkpoint {reader.prefix} has no object graph ({GRAPH_KEY}): it was written by "
                            "TensorFlow 1's Saver, whose name-based checkpoints popjit does not restore.")
    return [SavedNode(data) for number, data in tb.parse_message(reader.get(GRAPH_KEY)) if number == 1]


def write_objects(root: Any, prefix: str) -> str:
    """Save every variable reachable from ``root`` and the object graph as the checkpoint ``prefix``."""
    nodes = _graph(root)
    tensors: dict[str, Any] = {node.key: np.asarray(node.obj.numpy()) for node in nodes if node.key is not None}
    tensors[GRAPH_KEY] = _encode_graph(nodes)
    tb.write_bundle(prefix, tensors)
    return prefix


# -- restoring ----------------------------------------------------------------------------------------------
class LoadStatus:
    """What a restore matched: ``assert_consumed`` (every saved value found a live object and every live
    variable a saved value), ``assert_existing_objects_matched``, ``expect_partial`` (silences the check)."""

    def __init__(self, prefix: str | None, saved: list[SavedNode], matched: dict[int, Any],
                 unmatched: list[Any]) -> None:
        self.prefix, self._saved, self._matched, self._unmatched = prefix, saved, matched, unmatched

    def assert_consumed(self) -> LoadStatus:
        for i, node in enumerate(self._saved):
            if (node.key is not None or node.slots) and i not in self._matched:
                raise AssertionError(f"Unresolved object in checkpoint {self.prefix}: saved object {i} with value "
                                     f"{node.key!r} matched no object of the program.")
        return self.assert_existing_objects_matched()

    def assert_existing_objects_matched(self) -> LoadStatus:
        if self._unmatched:
            names = [getattr(v, "name", repr(v)) for v in self._unmatched]
            raise AssertionError(f"Some objects had no value in the checkpoint {self.prefix}: {names}")
        return self

    def assert_nontrivial_match(self) -> LoadStatus:
        if len(self._matched) <= 1:
            raise AssertionError(f"Nothing except the root object matched a checkpointed value in {self.prefix}.")
        return self

    def expect_partial(self) -> LoadStatus:
        return self

    def run_restore_ops(self, session: Any = None) -> None:
        """Nothing to run: values are assigned when ``restore`` is called (eager execution)."""

    def initialize_or_restore(self, session: Any = None) -> None:
        """Same as :meth:`run_restore_ops`."""


def restore_objects(root: Any, prefix: str) -> LoadStatus:
    """Assign each live variable under ``root`` the value saved for it (matched through the object graph)."""
    reader = tb.BundleReader(prefix)
    saved = read_graph(reader)
    matched: dict[int, Any] = {0: root}
    queue = deque([0])
    assignments: list[tuple[Any, np.ndarray, str]] = []
    while queue:
        i = queue.popleft()
        obj, node = matched[i], saved[i]
        live = dict(children(obj))
        for child_id, name in node.children:
            if child_id in matched or name not in live:
                continue
            matched[child_id] = live[name]
            queue.append(child_id)
        if node.key is not None and _is_variable(obj):
            assignments.append((obj, reader.get(node.key), node.key))
    for i, obj in list(matched.items()):  # slots once every variable they belong to is matched
        for original, slot_name, slot_id in saved[i].slots:
            if original in matched and hasattr(obj, "_restore_slot") and slot_id not in matched:
                slot = obj._restore_slot(matched[original], slot_name)
                matched[slot_id] = slot
                assignments.append((slot, reader.get(saved[slot_id].key), saved[slot_id].key))
    for var, value, key in assignments:
        if tuple(var.shape) != np.shape(value):
            raise ValueError(f"Received incompatible tensor with shape {list(np.shape(value))} when attempting to "
                             f"restore variable with shape {list(var.shape)} and name {var.name} (checkpoint key "
                             f"{key} in {prefix}).")
    for var, value, _ in assignments:
        var.assign(np.asarray(value).astype(var.dtype.as_numpy_dtype, copy=False))
    seen = {id(v) for v in matched.values()}
    unmatched = [node.obj for node in _graph(root) if node.key is not None and id(node.obj) not in seen]
    return LoadStatus(prefix, saved, matched, unmatched)


# -- the "checkpoint" state file ----------------------------------------------------------------------------
def _state_path(directory: str, latest_filename: str | None = None) -> str:
    return os.path.join(directory, latest_filename or "checkpoint")


def write_state(directory: str, latest: str, paths: list[str], timestamps: list[float],
                preserved: float = 0.0) -> None:
    """The ``checkpoint`` file (a text ``CheckpointState``), written atomically; paths relative to ``directory``."""

    def rel(p: str) -> str:
        return os.path.relpath(p, directory) if os.path.dirname(os.path.abspath(p)) == os.path.abspath(directory) \
            else p

    lines = [f'model_checkpoint_path: "{rel(latest)}"']
    lines += [f'all_model_checkpoint_paths: "{rel(p)}"' for p in paths]
    lines += [f"all_model_checkpoint_timestamps: {t!r}" for t in timestamps]
    lines.append(f"last_preserved_timestamp: {preserved!r}")
    path = _state_path(directory)
    tmp = os.path.join(directory, f".checkpoint.tmp{os.getpid()}")
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def read_state(directory: str, latest_filename: str | None = None) -> dict[str, Any] | None:
    """The ``checkpoint`` file's fields (paths made absolute), or None if there is none."""
    path = _state_path(directory, latest_filename)
    if not os.path.exists(path):
        return None
    state: dict[str, Any] = {"all_model_checkpoint_paths": [], "all_model_checkpoint_timestamps": []}
    with open(path) as f:
        for line in f:
            match = re.match(r'\s*(\w+):\s*"?(.*?)"?\s*$', line)
            if not match:
                continue
            key, value = match.groups()
            if key.endswith("_paths") or key == "model_checkpoint_path":
                value = value if os.path.isabs(value) else os.path.join(directory, value)
            if key.startswith("all_"):
                state[key].append(float(value) if key.endswith("timestamps") else value)
            else:
                state[key] = float(value) if key == "last_preserved_timestamp" else value
    return state


def latest_checkpoint(checkpoint_dir: str, latest_filename: str | None = None) -> str | None:
    """``tf.train.latest_checkpoint``: the prefix the directory's ``checkpoint`` file names last, or None."""
    state = read_state(os.fspath(checkpoint_dir), latest_filename)
    if state is None or "model_checkpoint_path" not in state:
        return None
    prefix = state["model_checkpoint_path"]
    return prefix if os.path.exists(prefix + tb.INDEX_SUFFIX) else None


# -- the public classes -------------------------------------------------------------------------------------
class Checkpoint:
    """``tf.train.Checkpoint(**objects)``: saves and restores the variables of the objects given (models,
    optimizers, variables, lists and dicts of them), with a ``save_counter``."""

    def __init__(self, root: Any = None, **kwargs: Any) -> None:
        for value in kwargs.values():
            if not is_trackable(value):
                raise ValueError(f"`Checkpoint` was expecting a trackable object (an object derived from "
                                 f"`Trackable`), got {value}. If you believe this object should be trackable (i.e. "
                                 f"it is part of the TensorFlow Python API and manages state), please open an "
                                 f"issue.")
        self._root = root
        self._objects = dict(kwargs)
        self._save_counter: Any = None

    @property
    def save_counter(self) -> Any:
        """How many times :meth:`save` has run (an int64 variable, saved with the checkpoint)."""
        if self._save_counter is None:
            self._save_counter = tf.Variable(np.int64(0), trainable=False, name="save_counter")
        return self._save_counter

    def _trackable_children(self) -> list[tuple[str, Any]]:
        out = list(children(self._root)) if self._root is not None else []
        out += list(self._objects.items())
        _ = self.save_counter
        return [*out, ("save_counter", self._save_counter)]

    def __getattr__(self, name: str) -> Any:
        objects = self.__dict__.get("_objects", {})
        if name in objects:
            return objects[name]
        raise AttributeError(f"'Checkpoint' object has no attribute '{name}'")

    def write(self, file_prefix: Any, options: Any = None) -> str:
        """Write the checkpoint at ``file_prefix`` exactly (no counter, no ``checkpoint`` file)."""
        return write_objects(self, os.fspath(file_prefix))

    def save(self, file_prefix: Any, options: Any = None) -> str:
        """Count the save and write ``<file_prefix>-<count>``; the directory's ``checkpoint`` file names it."""
        self.save_counter.assign_add(np.int64(1))
        prefix = self.write(f"{os.fspath(file_prefix)}-{int(self.save_counter.numpy())}")
        directory = os.path.dirname(os.path.abspath(prefix))
        write_state(directory, prefix, [prefix], [time.time()])
        return prefix

    def read(self, save_path: Any, options: Any = None) -> LoadStatus:
        """Restore from ``save_path`` (a prefix) without the save counter's bookkeeping."""
        return restore_objects(self, os.fspath(save_path))

    def restore(self, save_path: Any, options: Any = None) -> LoadStatus:
        """Restore from ``save_path`` (a prefix, or a directory: its latest checkpoint); None restores nothing."""
        if save_path is None:
            return LoadStatus(None, [], {0: self}, [])
        path = os.fspath(save_path)
        if os.path.isdir(path):
            latest = latest_checkpoint(path)
            if latest is None:
                raise NotFoundError(f"Failed to find any matching files for {path}")
            path = latest
        return self.read(path, options)


class CheckpointManager:
    """``tf.train.CheckpointManager``: numbered checkpoints in a directory, the oldest deleted beyond
    ``max_to_keep``, listed in the directory's ``checkpoint`` file (read back when a manager starts)."""

    def __init__(self, checkpoint: Checkpoint, directory: Any, max_to_keep: int | None,
                 keep_checkpoint_every_n_hours: float | None = None, checkpoint_name: str = "ckpt",
                 step_counter: Any = None, checkpoint_interval: int | None = None, init_fn: Any = None) -> None:
        if max_to_keep is not None and max_to_keep <= 0:
            raise ValueError(f"Expected a positive integer or `None` for `max_to_max_keep`, got {max_to_keep}.")
        if checkpoint_interval is not None and step_counter is None:
            raise ValueError("`step_counter` should be passed if `checkpoint_interval` is not None.")
        self._checkpoint = checkpoint
        self.directory = os.fspath(directory)
        self._max_to_keep = max_to_keep
        self._keep_hours = keep_checkpoint_every_n_hours
        self._prefix = os.path.join(self.directory, checkpoint_name)
        self._step_counter, self._interval, self._init_fn = step_counter, checkpoint_interval, init_fn
        self._last_step: int | None = None
        state = read_state(self.directory)
        self._kept: list[tuple[str, float]] = []
        self._preserved = time.time()
        if state is not None:
            self._kept = [(p, t) for p, t in zip(state["all_model_checkpoint_paths"],
                                                  state["all_model_checkpoint_timestamps"] or
                                                  [time.time()] * len(state["all_model_checkpoint_paths"]))
                          if os.path.exists(p + tb.INDEX_SUFFIX)]
            self._preserved = state.get("last_preserved_timestamp", self._preserved)

    @property
    def checkpoints(self) -> list[str]:
        """The kept checkpoints' prefixes, oldest first."""
        return [p for p, _ in self._kept]

    @property
    def latest_checkpoint(self) -> str | None:
        return self._kept[-1][0] if self._kept else None

    @property
    def checkpoint(self) -> Checkpoint:
        return self._checkpoint

    @property
    def checkpoint_interval(self) -> int | None:
        return self._interval

    def restore_or_initialize(self) -> str | None:
        """Restore the latest checkpoint (its prefix), else run ``init_fn`` (None)."""
        if self.latest_checkpoint is not None:
            self._checkpoint.restore(self.latest_checkpoint)
            return self.latest_checkpoint
        if self._init_fn is not None:
            self._init_fn()
        return None

    def save(self, checkpoint_number: int | None = None, check_interval: bool = True, options: Any = None) -> \
            str | None:
        """Write the next checkpoint (numbered by ``checkpoint_number``, else the save counter) and drop the
        oldest beyond ``max_to_keep``; its prefix (None when ``checkpoint_interval`` steps have not passed)."""
        if self._interval is not None and check_interval:
            step = int(np.asarray(self._step_counter.numpy() if hasattr(self._step_counter, "numpy")
                                  else self._step_counter))
            if self._last_step is not None and step < self._last_step + self._interval:
                return None
            self._last_step = step
        counter = self._checkpoint.save_counter
        counter.assign_add(np.int64(1))
        number = int(counter.numpy()) if checkpoint_number is None else int(np.asarray(
            checkpoint_number.numpy() if hasattr(checkpoint_number, "numpy") else checkpoint_number))
        prefix = self._checkpoint.write(f"{self._prefix}-{number}")
        now = time.time()
        self._kept = [(p, t) for p, t in self._kept if p != prefix] + [(prefix, now)]
        self._sweep()
        write_state(self.directory, prefix, self.checkpoints, [t for _, t in self._kept], self._preserved)
        return prefix

    def _sweep(self) -> None:
        if self._max_to_keep is None:
            return
        while len(self._kept) > self._max_to_keep:
            prefix, stamp = self._kept.pop(0)
            if self._keep_hours is not None and stamp - self._preserved >= self._keep_hours * 3600:
                self._preserved = stamp
                continue
            for suffix in (tb.INDEX_SUFFIX, tb.DATA_SUFFIX):
                if os.path.exists(prefix + suffix):
                    os.remove(prefix + suffix)


class CheckpointReader:
    """``tf.train.load_checkpoint``'s reader: the saved tensors by key."""

    def __init__(self, prefix: str) -> None:
        self._bundle = tb.BundleReader(prefix)

    def get_tensor(self, name: str) -> Any:
        return self._bundle.get(name)

    def has_tensor(self, name: str) -> bool:
        return name in self._bundle.entries

    def get_variable_to_shape_map(self) -> dict[str, list[int]]:
        return {k: list(e.shape) for k, e in self._bundle.entries.items()}

    def get_variable_to_dtype_map(self) -> dict[str, Any]:
        return {k: tf.as_dtype(e.dtype) for k, e in self._bundle.entries.items()}


def _prefix_of(ckpt_dir_or_file: Any) -> str:
    path = os.fspath(ckpt_dir_or_file)
    if os.path.isdir(path):
        latest = latest_checkpoint(path)
        if latest is None:
            raise ValueError(f"Couldn't find 'checkpoint' file or checkpoints in given directory {path}")
        return latest
    return path


def load_checkpoint(ckpt_dir_or_file: Any) -> CheckpointReader:
    """``tf.train.load_checkpoint``: a reader of a checkpoint prefix (or of a directory's latest)."""
    return CheckpointReader(_prefix_of(ckpt_dir_or_file))


def list_variables(ckpt_dir_or_file: Any) -> list[tuple[str, list[int]]]:
    """``tf.train.list_variables``: ``(key, shape)`` of every saved tensor, sorted by key."""
    return sorted(load_checkpoint(ckpt_dir_or_file).get_variable_to_shape_map().items())
