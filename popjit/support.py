"""The one table of TensorFlow and Graphcore names popjit knows it lacks, or that do not apply on a CPU.

Three things read it, so they never drift apart:

- the ``UnimplementedError`` messages: :func:`unimplemented_message` (used by
  :func:`popjit.errors.missing_attributes`, Graphcore's package ``__getattr__`` and the stubs) gives
  an entry's reason and advice, and popjit's generic text for a name the table does not list;
- ``popjit check`` (:mod:`popjit.check`), which reports each name a program uses as supported, not
  yet supported (with the reason below) or not applicable on a CPU;
- the generated section of ``docs/limitations.md`` (``python docs/make_limitations.py``).

Names are spelled as users write them after ``import tensorflow as tf``, ``from tensorflow.python
import ipu`` and ``import keras``: ``tf.compat.v1.summary``, ``ipu.scopes.ipu_shard``,
``keras.ipu.PipelineStage`` (``tf.keras.X`` and ``keras.X`` are the same name). An entry covers the
names below it too (``ipu.pipelining_ops`` covers ``ipu.pipelining_ops.pipeline``).

A stub (a function or class that exists only to raise ``UnimplementedError`` when used) carries
:data:`STUB_MARKER`, set by :func:`mark_stub`, so ``popjit check`` recognises it without calling it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar


class Status(enum.Enum):
    """How popjit stands with a name; the value is how ``popjit check`` and the docs print it."""

    SUPPORTED = "supported"
    MISSING = "not yet supported"
    NOT_APPLICABLE = "not applicable on a CPU"


@dataclass(frozen=True)
class Entry:
    """One name (and its other ``spellings``): its status, why, and what to do instead."""

    name: str
    status: Status
    reason: str
    advice: str = ""
    spellings: tuple[str, ...] = ()

    def covers(self, name: str) -> bool:
        """True if ``name`` is this entry's name, one of its spellings, or a name below one of them."""
        return any(name == key or name.startswith(key + ".") for key in (self.name, *self.spellings))

    def message(self, name: str | None = None) -> str:
        """The error text for using ``name`` (this entry's own name by default)."""
        return _render(name or self.name, self.reason, self.advice)


def _render(name: str, reason: str, advice: str) -> str:
    return f"{name} is not implemented by popjit yet: {reason}." + (f" {advice}" if advice else "")


def missing_api_message(module: str, name: str) -> str:
    """The text of the error for ``module.name`` not existing in popjit (a name the table does not list)."""
    return (f"{module}.{name} is not implemented by popjit. See docs/reference.md for the supported API; "
            "if your program needs it, please open an issue naming the op and a small example.")


# -- the entries -------------------------------------------------------------------------------------

MULTI_IPU_REASON = ("popjit replicates, shards and pipelines programs over several IPUs, but not this part of "
                    "Graphcore's multi-IPU API yet")
MULTI_IPU_ADVICE = ("Run the model without it, on one IPU or replicated (cfg.auto_select_ipus = N); to train on larger "
                    "batches, accumulate gradients "
                    "(model.set_gradient_accumulation_options(...) or ipu.optimizers.GradientAccumulationOptimizerV2).")


def multi_ipu_message(name: str) -> str:
    """The text of the error for a Graphcore name that needs several IPUs (pipelining, sharding,
    replication), which popjit does not run yet."""
    return _render(name, MULTI_IPU_REASON, MULTI_IPU_ADVICE)


def _multi_ipu(*names: str) -> list[Entry]:
    return [Entry(name, Status.MISSING, MULTI_IPU_REASON, MULTI_IPU_ADVICE) for name in names]


def _ipu_modules(*modules: str) -> list[Entry]:
    """Graphcore modules for several IPUs; an op module (``*_op``, ``*_ops``) is also ``ipu.ops.<module>``."""
    return [Entry(f"ipu.{m}", Status.MISSING, MULTI_IPU_REASON, MULTI_IPU_ADVICE,
                  (f"ipu.ops.{m}",) if m.endswith(("_op", "_ops")) else ()) for m in modules]


def _scope(name: str, what: str, advice: str = "Remove it, or run the program without it.") -> Entry:
    return Entry(f"ipu.scopes.{name}", Status.MISSING, f"popjit does not model {what}", advice)


_TF1_REASON = ("popjit's TensorFlow 1 graph mode covers graphs, Sessions, placeholders, variable scopes and the "
               "TF1 optimizers (docs/api.md), not this")
_TF1_ADVICE = "Remove it, or port this part of the program to TensorFlow 2 (a tf.function run by IPUStrategy)."


def _tf1(*names: str) -> list[Entry]:
    return [Entry(f"tf.compat.v1.{name}", Status.MISSING, _TF1_REASON, _TF1_ADVICE) for name in names]


_POPDIST_ADVICE = ("Use ipu.distributed.popdist_strategy.PopDistStrategy, and start the program with `popjit poprun "
                   "--num-instances N --num-replicas R script.py` (docs/api.md, \"Many hosts: poprun and PopDist\").")


ENTRIES: tuple[Entry, ...] = (
    # -- several IPUs --
    *_ipu_modules("sharding", "within_replica_ops"),
    *_multi_ipu("ipu.optimizers.CrossReplicaGradientAccumulationOptimizer",
                "ipu.keras.optimizers.CrossReplicaOptimizer"),
    # -- several hosts (PopDist) --
    Entry("ipu.ipu_multi_worker_strategy", Status.MISSING,
          "IPUMultiWorkerStrategyV1 (gRPC collectives between hosts, one IPU device per worker) was deprecated in "
          "SDK 2.4, and popjit's instances talk through MPI", _POPDIST_ADVICE),
    Entry("ipu.distributed.ipu_horovod_strategy", Status.MISSING,
          "IPUHorovodStrategy was renamed PopDistStrategy in SDK 2.4", _POPDIST_ADVICE,
          ("ipu.horovod.ipu_horovod_strategy",)),
    Entry("ipu.distributed.ipu_multi_replica_strategy", Status.MISSING,
          "IPUMultiReplicaStrategy was renamed PopDistStrategy in SDK 2.4", _POPDIST_ADVICE,
          ("ipu.horovod.ipu_multi_replica_strategy",)),
    Entry("popdist.poptorch", Status.MISSING, "PopDist's PopTorch helpers are for PyTorch programs, and popjit runs "
          "TensorFlow ones", "Use popdist's own functions and popdist.tensorflow."),
    # -- IPU scopes --
    _scope("outside_compilation_scope", "running part of a compiled program on the host"),
    _scope("frontend_attribute", "per-operation backend attributes"),
    _scope("stochastic_rounding", "per-operation stochastic rounding",
           "Remove it; IPUConfig.floating_point_behaviour.esr turns stochastic rounding on or off for whole programs."),
    _scope("partials_type", "a per-operation type of partial sums"),
    # -- TensorFlow 1 --
    *_tf1("placeholder_with_default", "sparse_placeholder", "tables_initializer", "get_local_variable",
          "make_template", "GraphOptions", "OptimizerOptions", "saved_model"),
    # -- Graphcore's add-ons --
    Entry("ipu_tensorflow_addons.saved_model_tool", Status.MISSING,
          "it converts TensorFlow SavedModels into IPU programs, and popjit reads no SavedModels",
          "Run the model's Python code under `popjit run` instead."),
    # -- not applicable on a CPU: popjit accepts these, and they change nothing there --
    Entry("ipu.scopes.ipu_jit_scope", Status.NOT_APPLICABLE,
          "it marks a region for XLA compilation on the IPU; popjit compiles every traced function whole, so "
          "there is nothing to mark"),
    Entry("ipu.utils.set_gcl_options", Status.NOT_APPLICABLE,
          "it tunes GCL, the library that moves data between IPUs over IPU-Links; popjit's programs run on the "
          "host's memory, so the options are kept in the IPUConfig and change nothing"),
    Entry("ipu.config.SelectionOrder", Status.NOT_APPLICABLE,
          "it orders the physical IPUs of a multi-IPU device along their IPU-Links "
          "(IPUConfig.selection_order); popjit's virtual IPUs have no physical place, so the order changes nothing",
          spellings=("ipu.utils.SelectionOrder",)),
)


# -- lookups -----------------------------------------------------------------------------------------

_SHORT = (("tensorflow.python.ipu", "ipu"), ("tensorflow", "tf"))


def graphcore_name(dotted: str) -> str:
    """A module path as Graphcore's documents (and this table) write it: ``tensorflow.python.ipu.loops``
    is ``ipu.loops``, ``tensorflow.nn.relu`` is ``tf.nn.relu``; ``keras.X`` and ``ipu_tensorflow_addons.X`` stay."""
    for long, short in _SHORT:
        if dotted == long or dotted.startswith(long + "."):
            return short + dotted[len(long):]
    return dotted



def spellings(name: str) -> tuple[str, ...]:
    """``name`` and its other spelling: ``tf.keras.X`` is ``keras.X``, ``tf.python.keras.X`` too."""
    for prefix in ("tf.keras.", "tf.python.keras."):
        if name.startswith(prefix):
            return name, "keras." + name[len(prefix):]
    return (name,)


def lookup(name: str) -> Entry | None:
    """The entry for ``name``: the one naming it exactly, else the one with the longest name above it."""
    best: Entry | None = None
    for spelled in spellings(name):
        for entry in ENTRIES:
            if entry.covers(spelled) and (best is None or len(entry.name) > len(best.name)):
                best = entry
    return best


def unimplemented_message(name: str) -> str:
    """The error text for using ``name`` (``"tf.nn.top_k"``), which popjit does not provide: its entry's
    reason and advice, or popjit's generic text for a name the table does not list."""
    entry = lookup(name)
    if entry is not None and entry.status is Status.MISSING:
        return entry.message(name)
    module, _, attr = name.rpartition(".")
    return missing_api_message(module, attr)


def entries(status: Status | None = None) -> Iterator[Entry]:
    """The table's entries (of one ``status``), in table order."""
    return (e for e in ENTRIES if status is None or e.status is status)


def names_below(prefix: str, status: Status = Status.MISSING) -> frozenset[str]:
    """The last parts of the entries right below ``prefix``: ``names_below("keras.Model")`` is the
    Model methods the table lists."""
    return frozenset(e.name[len(prefix) + 1:] for e in entries(status)
                     if e.name.startswith(prefix + ".") and "." not in e.name[len(prefix) + 1:])


# -- stubs -------------------------------------------------------------------------------------------

STUB_MARKER = "__popjit_unimplemented__"
T = TypeVar("T")


def mark_stub(name: str) -> Any:
    """A decorator marking a function or class (or a module, or a namespace object) as a stub for the API
    ``name``: it raises ``UnimplementedError`` when used, and ``popjit check`` reports it as not yet
    supported. ``name`` needs an entry in :data:`ENTRIES` (tests/test_check.py checks every stub)."""

    def mark(obj: T) -> T:
        setattr(obj, STUB_MARKER, name)
        return obj

    return mark


def stub_name(obj: object) -> str | None:
    """The API name a stub stands for, or None for anything else (never calls ``obj``)."""
    try:
        marked = getattr(obj, STUB_MARKER, None)
    except Exception:  # an object whose __getattr__ raises something else than AttributeError
        return None
    return marked if isinstance(marked, str) else None

