"""``TF_POPLAR_FLAGS``: the backend's environment flags, parsed strictly.

The variable holds space-separated ``--flag`` or ``--flag=value`` items (shell quoting is
honoured, so ``--save_vertex_graph="/tmp/my dir"`` works). Every flag of Graphcore's backend is
recognised with its type; popjit acts on the ones that mean something for a virtual IPU
(``--use_ipu_model``, ``--ipu_model_tiles``, ``--executable_cache_path``, ``--show_progress_bar``,
the synthetic-data flags) and accepts the rest so that existing launch scripts keep working.

    from popjit.flags import poplar_flags
    poplar_flags().use_ipu_model          # parsed from os.environ, cached per value

The flags are parsed when the IPU system is configured and whenever an IPU device is used (see
:func:`popjit.runtime.device.get_device`), cached per value of the variable, so changing it
between runs takes effect and an error shows up at the first use after the change.

Errors: the real backend aborts the whole process on an unknown flag or a bad value. popjit
raises :class:`TFPoplarFlagsError` instead, so that a notebook or test process survives and the
error can be caught. It derives from ``tf.errors.InvalidArgumentError`` (the class TensorFlow
uses for a bad argument coming from the user's environment) *and* from ``ValueError`` (so plain
Python code that catches ``ValueError`` works). Its message names the offending flag or value
and lists the valid flags.
"""

from __future__ import annotations

import functools
import logging
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from popjit.errors import InvalidArgumentError

log = logging.getLogger("popjit")

ENV_VAR = "TF_POPLAR_FLAGS"
SYNTHETIC_DATA_CATEGORIES = ("infeed", "outfeed", "seed", "hostembedding", "parameters")
PROGRESS_BAR_VALUES = ("true", "false", "auto")


class TFPoplarFlagsError(InvalidArgumentError, ValueError):  # type: ignore[misc, valid-type]
    """A bad ``TF_POPLAR_FLAGS``: an unknown flag, a missing or malformed value, or a bad combination.

    Graphcore's backend aborts the process here; popjit raises so the caller can recover. It is
    both a ``tf.errors.InvalidArgumentError`` and a ``ValueError``.
    """


@dataclass(frozen=True)
class FlagSpec:
    """One flag: its kind (``bool``, ``int``, ``str``), default, usage text and optional checks."""

    name: str
    kind: str
    default: Any
    usage: str
    check: Callable[[Any], str | None] | None = None
    removed: bool = False  # kept only so old scripts still start; not listed by --help


def _min(limit: int) -> Callable[[int], str | None]:
    def check(v: int) -> str | None:
        return None if v >= limit else f"it must be at least {limit}"

    return check


def _one_of(*choices: str) -> Callable[[str], str | None]:
    def check(v: str) -> str | None:
        return None if v in choices else f"it must be one of {', '.join(choices)}"

    return check


def _categories(v: str) -> str | None:
    bad = [c for c in _split_categories(v) if c not in SYNTHETIC_DATA_CATEGORIES]
    if bad:
        return f"unknown synthetic data categor{'y' if len(bad) == 1 else 'ies'} {', '.join(bad)}; " \
               f"valid ones are {', '.join(SYNTHETIC_DATA_CATEGORIES)}"
    return None


def _initializer(v: str) -> str | None:
    if v in ("random", "uniform", "normal"):
        return None
    try:
        int(v)
    except ValueError:
        return "it must be random, uniform, normal or an integer"
    return None


def _split_categories(v: str) -> list[str]:
    return [c.strip() for c in v.split(",") if c.strip()]


_REMOVED = "is deprecated, has no effect and will be removed"
_DEPRECATED = "is deprecated and has no effect on popjit's virtual IPU"
_IGNORED = "is accepted for compatibility but has no effect on popjit's virtual IPU"

FLAGS: dict[str, FlagSpec] = {
    f.name: f
    for f in [
        FlagSpec("help", "bool", False, "Print this list of flags. (bool)"),
        FlagSpec("use_synthetic_data", "bool", False,
                 "Do not move data between the host and the IPU: inputs, infeeds and outfeeds use dummy "
                 "data on the device. (bool)"),
        FlagSpec("synthetic_data_categories", "str", "",
                 "Comma-separated kinds of data to make synthetic, for finer control than "
                 "use_synthetic_data: infeed, outfeed, seed, hostembedding, parameters.", _categories),
        FlagSpec("synthetic_data_initializer", "str", "",
                 "With synthetic data, initialise the device-side inputs randomly (random, uniform, normal) "
                 "or to a constant integer X.", _initializer),
        FlagSpec("use_ipu_model", "bool", False,
                 "Run on the IPU Model: out-of-memory is a warning and the program still runs. (bool)"),
        FlagSpec("ipu_model_tiles", "int", -1,
                 "Tiles per IPU of the model when IPUConfig.ipu_model.tiles_per_ipu is 0. (int)", _min(1)),
        FlagSpec("executable_cache_path", "str", "", "Directory of the persistent executable cache. (path)"),
        FlagSpec("show_progress_bar", "str", "auto",
                 "Show the compilation progress bar: true, false or auto (only on a terminal).",
                 _one_of(*PROGRESS_BAR_VALUES)),
        FlagSpec("log_cycle_count", "int", -1,
                 "Log the cycle count of the main program on this tile; negative disables it. (int=-1)"),
        FlagSpec("while_loop_brute_force_max_trip_count", "int", 128,
                 "How many iterations to simulate when looking for a while loop's static trip count. (int=128)"),
        FlagSpec("max_compilation_threads", "int", -1,
                 "Maximum threads used by the compiler; negative lets it choose. (int=-1)"),
        FlagSpec("max_infeed_threads", "int", -1,
                 "Maximum threads per infeed queue reading from a dataset; negative lets it choose. (int=-1)"),
        FlagSpec("save_vertex_graph", "str", "", "Directory to save the vertex graphs to. (path)"),
        FlagSpec("save_interval_report", "str", "",
                 "Directory to save the interval reports to (deprecated). (path)"),
        FlagSpec("tensor_map_file_path", "str", "", "Directory for tensor-map dumps. (path)"),
        FlagSpec("dump_schedule_as_dot", "bool", False, "Dump the scheduler graph as a dot file. (bool)"),
        FlagSpec("null_data_feed", "bool", False,
                 "Do not feed real data to infeeds, to measure device throughput. (bool)"),
        FlagSpec("fallback_scheduler", "bool", False, "Use the simple list scheduler. (bool)"),
        FlagSpec("sync_replica_start", "bool", False,
                 "Synchronise the start of each replica's main program. (bool)"),
        FlagSpec("enable_hlo_verifier", "bool", False, "Verify the IR before and after every pass. (bool)"),
        FlagSpec("disable_poplar_version_check", "bool", False, "Skip the Poplar version check. (bool)"),
        FlagSpec("allow_nans", "bool", False, "Allow NaNs in the program. (bool)"),
        FlagSpec("on_demand_device_poll_time", "int", 1000,
                 "With the ON_DEMAND connection type, how often to poll for a free device, in ms "
                 "(minimum 100). (int=1000)"),
        FlagSpec("on_demand_device_timeout", "int", 3600000,
                 "With the ON_DEMAND connection type, how long to wait for a device, in ms. (int=3600000)"),
        FlagSpec("dump_text_reports_to_stdio", "bool", False, "Removed.", removed=True),
        FlagSpec("add_all_reduce_copies", "bool", False, "Removed.", removed=True),
        FlagSpec("force_replicated_mode", "bool", False, "Removed.", removed=True),
        FlagSpec("save_oom_profiler", "str", "", "Removed.", removed=True),
    ]
}

# Logged when a flag is given: removed flags, and flags popjit accepts but does not act on.
NOTES: dict[str, str] = {
    **dict.fromkeys(("log_cycle_count", "while_loop_brute_force_max_trip_count", "max_compilation_threads",
                     "max_infeed_threads", "save_vertex_graph", "tensor_map_file_path", "dump_schedule_as_dot",
                     "null_data_feed", "fallback_scheduler", "sync_replica_start", "disable_poplar_version_check",
                     "allow_nans", "on_demand_device_poll_time", "on_demand_device_timeout"), _IGNORED),
    "enable_hlo_verifier": _IGNORED + "; set POPJIT_CHECKS=1 to verify every IR after every pass",
    "save_interval_report": _DEPRECATED,
    "dump_text_reports_to_stdio": _REMOVED + "; inspect profiles with `popjit report` instead",
    "add_all_reduce_copies": _REMOVED,
    "force_replicated_mode": _REMOVED,
    "save_oom_profiler": _REMOVED + "; out-of-memory details are in the compile error and the profile report",
}

# Flags that change the generated program: part of an executable's cache key.
CODEGEN_FLAGS = ("use_synthetic_data", "synthetic_data_categories", "synthetic_data_initializer", "use_ipu_model",
                 "ipu_model_tiles", "allow_nans", "fallback_scheduler", "log_cycle_count", "sync_replica_start",
                 "while_loop_brute_force_max_trip_count", "disable_poplar_version_check")


@dataclass(frozen=True)
class PoplarFlags:
    """The parsed value of ``TF_POPLAR_FLAGS``; every flag is an attribute (its default if unset)."""

    raw: str
    values: tuple[tuple[str, Any], ...]

    def __getattr__(self, name: str) -> Any:
        if name in FLAGS:
            return dict(self.values).get(name, FLAGS[name].default)
        raise AttributeError(f"TF_POPLAR_FLAGS has no flag '{name}'")

    @property
    def given(self) -> dict[str, Any]:
        """The flags set explicitly, with their values."""
        return dict(self.values)

    @property
    def synthetic_categories(self) -> frozenset[str]:
        """The data kinds made synthetic: every kind with ``--use_synthetic_data``, else the listed ones."""
        if self.use_synthetic_data:
            return frozenset(SYNTHETIC_DATA_CATEGORIES)
        return frozenset(_split_categories(self.synthetic_data_categories))

    def use_synthetic_data_for(self, category: str) -> bool:
        """Whether ``category`` (``infeed``, ``outfeed``, ``seed``, ``hostembedding``, ``parameters``) is synthetic."""
        return category.lower() in self.synthetic_categories

    @property
    def progress_bar(self) -> bool:
        """Whether to show the compile progress bar (``auto``: only when stderr is a terminal)."""
        if self.show_progress_bar == "auto":
            return sys.stderr.isatty()
        return self.show_progress_bar == "true"

    def codegen_key(self) -> tuple[tuple[str, Any], ...]:
        """The flags that change generated code, for executable cache keys."""
        return tuple((n, getattr(self, n)) for n in CODEGEN_FLAGS)


def usage() -> str:
    """The ``--help`` text: ``Usage for TF_POPLAR_FLAGS is:`` then one ``\\t--flag: usage`` line per flag."""
    lines = ["Usage for TF_POPLAR_FLAGS is:"]
    lines += [f"\t--{f.name}: {f.usage}" for f in FLAGS.values() if not f.removed]
    return "\n".join(lines) + "\n"


def _valid_flags() -> str:
    return ", ".join(f"--{n}" for n, f in FLAGS.items() if not f.removed)


def _bad(message: str) -> TFPoplarFlagsError:
    return TFPoplarFlagsError(f"{ENV_VAR}: {message}")


def _convert(spec: FlagSpec, value: str | None, item: str) -> Any:
    if spec.kind == "bool":
        if value is None:
            return True
        low = value.lower()
        if low in ("true", "1"):
            return True
        if low in ("false", "0"):
            return False
        raise _bad(f"invalid value '{value}' for flag --{spec.name} in '{item}': it takes true or false "
                   f"(or no value, meaning true).")
    if value is None:
        raise _bad(f"flag --{spec.name} needs a value: write --{spec.name}=VALUE. Usage: {spec.usage}")
    if spec.kind == "int":
        try:
            return int(value)
        except ValueError:
            raise _bad(f"invalid value '{value}' for flag --{spec.name}: it takes an integer. "
                       f"Usage: {spec.usage}") from None
    return value


def _parse_item(item: str) -> tuple[str, Any]:
    if not item.startswith("--") or len(item) == 2:
        raise _bad(f"cannot parse '{item}': flags are written --flag or --flag=value. Valid flags: {_valid_flags()}.")
    name, eq, value = item[2:].partition("=")
    spec = FLAGS.get(name)
    if spec is None:
        raise _bad(f"unknown flag --{name}. Valid flags: {_valid_flags()}.")
    converted = _convert(spec, value if eq else None, item)
    problem = spec.check(converted) if spec.check else None
    if problem:
        raise _bad(f"invalid value '{value}' for flag --{name}: {problem}.")
    return name, converted


def _check_combinations(values: dict[str, Any]) -> None:
    synthetic = values.get("use_synthetic_data") or _split_categories(values.get("synthetic_data_categories", ""))
    if values.get("synthetic_data_initializer") and not synthetic:
        raise _bad('The flag "synthetic_data_initializer" can only be used in combination with '
                   '"use_synthetic_data" or "synthetic_data_categories".')


def _report(values: dict[str, Any]) -> None:
    for name in values:
        if name in NOTES:
            log.info('The TensorFlow Poplar flag "%s" %s.', name, NOTES[name])
    if values.get("help"):
        sys.stdout.write(usage())
        sys.stdout.flush()


@functools.lru_cache(maxsize=16)
def parse(raw: str) -> PoplarFlags:
    """Parse a ``TF_POPLAR_FLAGS`` value (cached: messages and ``--help`` appear once per value)."""
    try:
        items = shlex.split(raw)
    except ValueError as e:
        raise _bad(f"cannot split '{raw}' into flags: {e}.") from None
    values: dict[str, Any] = {}
    for item in items:
        name, value = _parse_item(item)
        values[name] = value
    _check_combinations(values)
    _report(values)
    return PoplarFlags(raw, tuple(values.items()))


def poplar_flags() -> PoplarFlags:
    """The flags in ``os.environ['TF_POPLAR_FLAGS']`` (parsed once per distinct value)."""
    return parse(os.environ.get(ENV_VAR, "").strip())
