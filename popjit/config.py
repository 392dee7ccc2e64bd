"""Every popjit setting, declared once, read from ``POPJIT_*`` environment variables.

    from popjit import config
    config.DEBUG                      # current value
    with config.context(DEBUG=3):     # override for a block
        ...

See ``docs/env_vars.md`` for the table.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _bool(s: str) -> bool:
    return s.strip().lower() not in ("", "0", "false", "no", "off")


LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def _log_level(s: str) -> int:
    level = LOG_LEVELS.get(s.strip().lower())
    if level is None:
        raise ValueError(f"POPJIT_LOG={s!r}: use one of {', '.join(LOG_LEVELS)}")
    return level


def _implicit(s: str) -> str | bool:
    choice = s.strip().lower() or "rules"
    return "rules" if choice == "rules" else _bool(choice)


def _matmul(s: str) -> str:
    choice = s.strip().lower() or "rules"
    if choice not in ("rules", "auto", "popjit", "blas"):
        raise ValueError(f"POPJIT_MATMUL={s!r}: use rules, auto, popjit or blas")
    return choice


def _coretype(s: str) -> str | None:
    name = s.strip()
    if name and not name.replace("_", "").isalnum():
        raise ValueError(f"POPJIT_OPENBLAS_CORETYPE={s!r}: use numpy or an OpenBLAS kernel name such as Haswell")
    return (name.lower() if name.lower() == "numpy" else name) or None


@dataclass(frozen=True)
class Setting:
    """One setting: its environment variable, parser, default and meaning."""

    name: str
    parse: Callable[[str], Any]
    default: Any
    doc: str

    @property
    def env(self) -> str:
        return f"POPJIT_{self.name}"


SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in [
        Setting("DEBUG", int, 0, "1 compile summary, 2 graph IR, 3 loop IR, 4 tile schedule, 5 codelet source, "
                "6 engine source, 7 assembly of each program library built (not of one loaded from the cache)"),
        Setting("DISABLE_NUMBA", _bool, False, "run codelets and the engine as plain Python (debuggable with pdb)"),
        Setting("NUM_IPUS", int, 16, "virtual IPUs in the system"),
        Setting("CACHE_DIR", str, str(Path.home() / ".cache" / "popjit"),
                "where generated Numba modules and their machine code are cached"),
        Setting("CHECKS", _bool, False, "verify every IR after every pass"),
        Setting("DIRECT_CODELETS", _bool, True,
                "build generated codelets' LLVM IR directly (0: compile every codelet with Numba's pipeline)"),
        # why 2^16, not 2^18: the Keras CNN's epoch took 10-15% less time with its max-pools' and col2im's
        # codelets (170-250 thousand elements) split too (2-core Emerald Rapids, the two programs' calls
        # alternated in one process); the LSTM's was the same or faster, W1's and C1's splits did not change
        Setting("PARALLEL_MIN_ELEMENTS", int, 1 << 16,
                "codelets of at least this many elements of work run on all threads"),
        Setting("INTERCHANGE_LOOPS", _bool, True,
                "run a loop of element-wise codelets chunk by chunk, every iteration on a cache-sized chunk "
                "(0: iteration by iteration, for comparing the two)"),
        Setting("MATMUL", _matmul, "rules",
                "float matmuls: rules (popjit's own gemm on AVX-512 hosts for products at least 64 rows, columns "
                "and deep, and no deeper than four times their longer side; the system BLAS for the rest and on "
                "other hosts), blas (the system BLAS), popjit (popjit's own gemm), auto (the own gemm where it "
                "measured faster than the BLAS on this machine; not the default: a choice measured again after "
                "the cache is emptied may differ, and with it a result's last bits)"),
        Setting("OPENBLAS_CORETYPE", _coretype, None,
                "the OpenBLAS kernels popjit's float matmuls run (unset: the CPU's own, whatever the user's "
                "OPENBLAS_CORETYPE forces on NumPy; popjit then loads a private copy of NumPy's OpenBLAS, made in "
                "memory); a kernel name such as Haswell or SkylakeX; numpy: NumPy's, as "
                "OPENBLAS_CORETYPE configured them. Read once, when popjit's kernels are imported"),
        Setting("IMPLICIT_GEMM", _implicit, "rules",
                "a float matmul operand written by one element-wise kernel and read only by matmuls (a "
                "convolution's patches) is computed block by block as popjit's own gemm multiplies it, never "
                "stored: rules (where POPJIT_MATMUL gives every one of those matmuls to the own gemm: the same "
                "results as storing it), 1 (always, on the own gemm), 0 (never: stored, then multiplied by "
                "the kernel POPJIT_MATMUL picks)"),
        Setting("SEED", int, None, "popjit run: tf.random.set_seed(N) before the program starts"),
        Setting("NUM_THREADS", int, None,
                "threads of parallel codelets and matmuls (default: the cores this process may use, from its CPU "
                "affinity and cgroup quota). Set, it also pins them: unset, engines run on one thread while other "
                "processes' runnable threads need the cores"),
        Setting("LOG", _log_level, None,
                "log popjit's messages at this level and above to stderr: debug, info (compile phases, why a "
                "program compiles again, devices attaching, executables loaded from the cache), warning, error. "
                "Unset, TF_CPP_MIN_LOG_LEVEL=0 asks for info"),
        Setting("EXECUTABLE_CACHE_SIZE", int, 128,
                "compiled programs kept in memory, most recently used first (more are compiled again when needed)"),
    ]
}

_overrides: list[dict[str, Any]] = []


def get(name: str) -> Any:
    """Current value of a setting: innermost ``context`` override, else environment, else default."""
    for layer in reversed(_overrides):
        if name in layer:
            return layer[name]
    s = SETTINGS[name]
    raw = os.environ.get(s.env)
    return s.default if raw is None or raw == "" else s.parse(raw)


@contextlib.contextmanager
def context(**overrides: Any) -> Iterator[None]:
    """Override settings inside a ``with`` block."""
    unknown = set(overrides) - set(SETTINGS)
    if unknown:
        raise ValueError(f"Unknown popjit setting(s): {sorted(unknown)}; known: {sorted(SETTINGS)}")
    _overrides.append(overrides)
    try:
        yield
    finally:
        _overrides.pop()


def log_level() -> int | None:
    """The level popjit logs at to stderr: ``POPJIT_LOG``, else INFO when ``TF_CPP_MIN_LOG_LEVEL`` is 0 (as
    TensorFlow's backend logs its INFO messages then), else None (Python's logging configuration decides).
    why only 0: scripts set 1 to 3 to quieten TensorFlow's C++ logs, which are not popjit's warnings."""
    level = get("LOG")
    if level is None and os.environ.get("TF_CPP_MIN_LOG_LEVEL", "").strip() == "0":
        return logging.INFO
    return level


def configure_logging(level: int | None = None) -> None:
    """Send the ``popjit`` logger's messages of ``level`` (default :func:`log_level`) and above to stderr,
    each stamped with the time (one handler, however often this is called)."""
    level = level if level is not None else log_level()
    if level is None:
        return
    logger = logging.getLogger("popjit")
    if not any(getattr(h, "popjit_stderr", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d popjit %(levelname)s: %(message)s",
                                               "%H:%M:%S"))
        handler.popjit_stderr = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(level)


def __getattr__(name: str) -> Any:
    if name in SETTINGS:
        return get(name)
    raise AttributeError(name)
