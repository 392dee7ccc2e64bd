"""``POPLAR_ENGINE_OPTIONS``: the engine options that ask for profile reports, parsed strictly.

The variable holds a JSON object of Poplar engine options, as for Poplar::

    POPLAR_ENGINE_OPTIONS='{"autoReport.all":"true", "autoReport.directory":"./report"}'

popjit acts on ``autoReport.all`` (every report popjit has: the graph profile and the execution
profile), ``autoReport.outputGraphProfile``, ``autoReport.outputExecutionProfile`` and
``autoReport.directory`` (default: the current directory, as Poplar's). ``debug.instrument`` is
accepted: popjit's cycles are always the estimates of its virtual IPU, as the IPU Model's are.
Poplar's other engine options are known by name and raise ``UnimplementedError`` naming them (an
``autoReport.output*`` option set to false asks for nothing and is accepted); a name Poplar does not
have, a value of the wrong kind, or text that is not a JSON object raise :class:`EngineOptionsError`
(TensorFlow turns Poplar's ``invalid_option`` and ``parse_error`` into ``InvalidArgumentError``).

The value is read when a program is compiled (as Poplar reads it when an engine is made), parsed
once per distinct value.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from popjit.errors import InvalidArgumentError, UnimplementedError

ENV_VAR = "POPLAR_ENGINE_OPTIONS"

#: The options popjit acts on, by kind.
IMPLEMENTED = {
    "autoReport.all": "bool",
    "autoReport.outputGraphProfile": "bool",
    "autoReport.outputExecutionProfile": "bool",
    "autoReport.directory": "str",
    "debug.instrument": "bool",
}

#: Poplar's other engine options: known, not implemented by popjit.
UNIMPLEMENTED = (
    "autoReport.outputArchive", "autoReport.outputDebugInfo", "autoReport.outputLoweredVars",
    "autoReport.outputSerializedGraph", "autoReport.executionProfileProgramRunCount", "autoReport.streamAtEachRun",
    "debug.instrumentCompute", "debug.instrumentExternalExchange", "debug.instrumentControlFlow",
    "debug.computeInstrumentationLevel", "debug.retainDebugInformation", "debug.allowOutOfMemory",
    "debug.outputAllSymbols", "debug.branchRecordTile", "debug.checkForModelMemoryErrors", "debug.runtimeVerify",
    "debug.verify", "profiler.format", "profiler.includeFlopEstimates", "profiler.replicaToProfile",
    "profiler.programs", "profiler.blocks.implicitFlush", "opt.maxCompilationThreads", "opt.maxLinkerThreads",
    "opt.internalExchangeOptimisationTarget", "opt.enableSwSyncs", "opt.limitVertexStateToLower256K",
    "target.syncReplicasIndependently", "target.deterministicWorkers", "target.hostSyncTimeout",
    "exchange.streamBufferOverlap", "exchange.enablePrefetch", "exchange.maxStreamCopyBufferSize",
)


class EngineOptionsError(InvalidArgumentError, ValueError):  # type: ignore[misc, valid-type]
    """A bad ``POPLAR_ENGINE_OPTIONS``: not a JSON object, an unknown option, or a value of the wrong kind.
    Both a ``tf.errors.InvalidArgumentError`` and a ``ValueError``."""


@dataclass(frozen=True)
class ReportOptions:
    """What to write for each compiled program: the graph profile, the execution profile, and where."""

    graph: bool = False
    execution: bool = False
    directory: str = "."

    @property
    def enabled(self) -> bool:
        """Whether any report is asked for."""
        return self.graph or self.execution

    def root(self) -> Path:
        """The report directory (relative paths from the current directory, at the time of writing)."""
        return Path(self.directory).expanduser()


def _bad(message: str) -> EngineOptionsError:
    return EngineOptionsError(f"{ENV_VAR}: {message}")


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise _bad(f"invalid_option: the value {value!r} of option '{name}' is not a boolean; write \"true\" or \"false\".")


def _check(name: str, value: Any) -> Any:
    """The value of an implemented option, converted (raises for an unknown or unimplemented one)."""
    kind = IMPLEMENTED.get(name)
    if kind == "bool":
        return _bool(name, value)
    if kind == "str":
        if not isinstance(value, str) or not value:
            raise _bad(f"invalid_option: the value {value!r} of option '{name}' must be a non-empty string.")
        return value
    if name in UNIMPLEMENTED:
        if name.startswith("autoReport.output") and not _bool(name, value):
            return None  # asks for nothing
        raise UnimplementedError(
            f"{ENV_VAR}: the Poplar engine option '{name}' is not implemented by popjit. popjit acts on "
            f"{', '.join(IMPLEMENTED)}; remove '{name}' (see docs/profiles.md).")
    raise _bad(f"invalid_option: Unrecognised option '{name}'. popjit acts on {', '.join(IMPLEMENTED)} "
               "(see docs/profiles.md).")


@functools.lru_cache(maxsize=16)
def parse(raw: str) -> ReportOptions:
    """Parse a ``POPLAR_ENGINE_OPTIONS`` value ('' or only spaces: no options)."""
    if not raw.strip():
        return ReportOptions()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise _bad(f"parse_error: {raw!r} is not valid JSON ({e}). Write a JSON object such as "
                   '\'{"autoReport.all":"true"}\'.') from None
    if not isinstance(data, dict):
        raise _bad(f"parse_error: expected a JSON object of options, got {type(data).__name__} {raw!r}.")
    values = {name: _check(name, value) for name, value in data.items()}
    every = bool(values.get("autoReport.all"))

    def wanted(name: str) -> bool:
        return values[name] if values.get(name) is not None else every

    return ReportOptions(graph=wanted("autoReport.outputGraphProfile"),
                         execution=wanted("autoReport.outputExecutionProfile"),
                         directory=values.get("autoReport.directory") or ".")


def report_options() -> ReportOptions:
    """The report options in ``os.environ['POPLAR_ENGINE_OPTIONS']`` (parsed once per distinct value)."""
    return parse(os.environ.get(ENV_VAR, ""))
