"""The ``popjit`` command (also ``python -m popjit``).

    popjit devices              the virtual IPU system: IPUs, tiles, memory per tile, clock, workers
    popjit demo                 Keras fit of a small CNN on handwritten digits inside IPUStrategy, with IPU estimates
    popjit cache [list|clear|info]  the on-disk caches (POPJIT_CACHE_DIR, --executable_cache_path)
    popjit run script.py [args]  an unmodified IPU TensorFlow script, `tensorflow` resolving to popjit
    popjit poprun --num-instances N --num-replicas R script.py [args]  N instances through MPI (also `poprun`)
    popjit check PATH... [--json]  which TensorFlow names a program uses and which popjit supports (not running it)
    popjit report DIR [--html OUT.html] [--png OUTDIR]   the profiles POPLAR_ENGINE_OPTIONS wrote (docs/profiles.md)
    popjit --version
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import popjit
from popjit import check, config, demo, errors, poprun, runner
from popjit.flags import poplar_flags
from popjit.kernels.jit import cache_root, executable_cache_dir, fingerprint, untrusted_reason
from popjit.pipeline import store
from popjit.profile.report import report
from popjit.runtime import device as devices

VERSION_NAMES = {"ipu1": "GC2, Mk1", "ipu2": "GC200, Mk2"}


# -- devices -------------------------------------------------------------------------------------------


def format_bytes(n: float) -> str:
    """``638976`` → ``'624.0 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def describe_target(target: Any) -> list[str]:
    """The figures of one virtual IPU, one per line."""
    name = VERSION_NAMES.get(target.version)
    per_ipu = target.tiles * target.bytes_per_tile
    return [
        f"IPU version          {target.version}" + (f" ({name})" if name else ""),
        f"tiles per IPU        {target.tiles}",
        f"memory per tile      {target.bytes_per_tile} bytes ({format_bytes(target.bytes_per_tile)})",
        f"memory per IPU       {per_ipu} bytes ({format_bytes(per_ipu)})",
        f"clock                {target.clock_hz / 1e9:.2f} GHz",
        f"workers per tile     {target.workers} (+1 supervisor)",
        f"peak float32         {target.tiles * target.amp_flops_fp32 * target.clock_hz / 1e12:.1f} TFLOP/s per IPU "
        f"({target.amp_flops_fp32} FLOP per tile per cycle)",
        f"peak float16         {target.tiles * target.amp_flops_fp16 * target.clock_hz / 1e12:.1f} TFLOP/s per IPU "
        f"({target.amp_flops_fp16} FLOP per tile per cycle)",
        f"exchange             {target.exchange_bytes_per_cycle} bytes per tile per cycle",
        f"IPU Model            {_ipu_model_text()}",
    ]


def _ipu_model_text() -> str:
    if poplar_flags().use_ipu_model:
        return "on (TF_POPLAR_FLAGS has --use_ipu_model: out-of-memory is a warning, not an error)"
    return "off (out-of-memory is a compile error; TF_POPLAR_FLAGS=--use_ipu_model makes it a warning)"


def describe_system(version: str = "ipu2", tiles_per_ipu: int = 0) -> str:
    """The virtual system: the configured devices if this process configured any, else the default model."""
    num_ipus = config.get("NUM_IPUS")
    env = config.SETTINGS["NUM_IPUS"].env
    source = f"{env}={os.environ[env]}" if os.environ.get(env) else f"the default; set {env} to change it"
    lines = [f"popjit virtual IPU system: {num_ipus} IPUs ({source})"]
    if devices.is_configured():
        devs = devices.system().devices
        lines += describe_target(devs[0].target)
        lines.append("devices:")
        for d in devs:
            ipus = ", ".join(str(d.first_ipu + i) for i in range(d.num_ipus))
            lines.append(f"  {d.name}  {d.num_ipus} IPU{'s' if d.num_ipus > 1 else ''} ({ipus})  {d.target.describe()}")
    else:
        lines += describe_target(devices.default_target(version, tiles_per_ipu))
        lines.append("devices:             none attached yet; a program attaches them with")
        lines.append("                     cfg = ipu.config.IPUConfig(); cfg.auto_select_ipus = N")
        lines.append("                     cfg.configure_ipu_system()")
    return "\n".join(lines)


def cmd_devices(args: argparse.Namespace) -> int:
    """``popjit devices``."""
    print(describe_system(args.ipu_version, args.tiles_per_ipu))
    return 0


# -- demo ----------------------------------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    """``popjit demo``: see :mod:`popjit.demo`."""
    return demo.main()


# -- cache ---------------------------------------------------------------------------------------------


@dataclass
class CacheEntry:
    """One generation of generated code (``gen-<hash of the kernels and Numba version>``)."""

    path: Path
    current: bool
    modules: int
    compiled: int
    size: int
    executables: int = 0
    units: int = 0  # codelets and library kernels compiled, shared by the programs that call them


def _current_generation() -> str:
    return f"gen-{fingerprint()}"


def cache_entries(root: Path) -> list[CacheEntry]:
    """The generations under ``root``, current one first."""
    if not root.is_dir():
        return []
    current = _current_generation()
    entries = []
    for d in sorted(root.glob("gen-*")):
        files = [f for f in d.rglob("*") if f.is_file()]
        modules = sum(f.suffix == ".py" and f.name != "__init__.py" for f in files)
        compiled = sum(f.suffix == ".lib" for f in files)
        executables = sum(f.suffix == ".exe" for f in files)
        units = sum(f.suffix == ".unit" for f in files)
        entries.append(CacheEntry(d, d.name == current, modules, compiled, sum(f.stat().st_size for f in files),
                                  executables, units))
    return sorted(entries, key=lambda e: not e.current)


def poplar_execs() -> tuple[Path | None, list[Path]]:
    """The ``--executable_cache_path`` directory (None without the flag) and its programs' files."""
    directory = executable_cache_dir()
    if directory is None or not directory.is_dir():
        return directory, []
    return directory, sorted(directory.glob(f"*{store.POPLAR_EXEC_SUFFIX}"))


def _sized(files: list[Path]) -> str:
    return format_bytes(sum(f.stat().st_size for f in files))


def cmd_cache_list(args: argparse.Namespace) -> int:
    """``popjit cache list``: the code cache's generations, and the ``--executable_cache_path`` programs."""
    root = cache_root()
    entries = cache_entries(root)
    print(f"popjit code cache: {root}")
    if not entries:
        print("  empty")
    for e in entries:
        state = "current" if e.current else "stale (another popjit or Numba version)"
        print(f"  {e.path.name}  {e.modules} generated modules, {e.compiled} compiled programs, "
              f"{e.units} compiled codelets, {e.executables} kept executables, {format_bytes(e.size)}  {state}")
        if args.verbose:
            for f in sorted(e.path.rglob("*.py")):
                if f.name != "__init__.py":
                    print(f"      {f.relative_to(e.path)}")
    if entries:
        print(f"  total {format_bytes(sum(e.size for e in entries))}")
    directory, files = poplar_execs()
    if directory is not None:
        print(f"executable cache (TF_POPLAR_FLAGS --executable_cache_path): {directory}")
        print(f"  {len(files)} programs ({store.POPLAR_EXEC_SUFFIX}), {_sized(files)}")
        for f in files if args.verbose else []:
            print(f"      {f.name}  {format_bytes(f.stat().st_size)}")
    return 0


def cmd_cache_clear(args: argparse.Namespace) -> int:
    """``popjit cache clear``: remove generated code (only popjit's ``gen-*`` directories) and, with
    ``--executable_cache_path``, the programs kept there (only their ``.poplar_exec`` files)."""
    root = cache_root()
    entries = [e for e in cache_entries(root) if not (args.stale and e.current)]
    for e in entries:
        shutil.rmtree(e.path)
    size = format_bytes(sum(e.size for e in entries))
    print(f"removed {len(entries)} cache generation{'s' if len(entries) != 1 else ''} ({size}) from {root}")
    directory, files = poplar_execs()
    if directory is not None and not args.stale:
        size = _sized(files)
        for f in files:
            f.unlink(missing_ok=True)
        print(f"removed {len(files)} program{'s' if len(files) != 1 else ''} ({size}) from {directory}")
    return 0


def cmd_cache_info(args: argparse.Namespace) -> int:
    """``popjit cache info``: where the caches are, whether they are used, what they hold and what a
    program's key covers."""
    root = cache_root()
    current = next((e for e in cache_entries(root) if e.current), None)
    directory = store.executables_dir()
    flagged, files = poplar_execs()
    if flagged is None:
        files = sorted(directory.glob("*.exe")) if directory.is_dir() else []
    rows = [
        ("code cache", f"{root} ({'TF_POPLAR_FLAGS --executable_cache_path' if flagged else 'POPJIT_CACHE_DIR'})"
                       f"{_trust(root)}"),
        ("generation", f"{_current_generation()} (hash of popjit's kernels and code generator, Numba's version and "
                       "threading layer)"),
        ("generated modules", str(current.modules if current else 0)),
        ("program libraries", f"{current.compiled if current else 0} (machine code, one per program and kind of "
                              "buffers)" if flagged is None else "kept in each program's file"),
        ("compiled codelets", f"{current.units if current else 0} (machine code of codelets and library kernels, "
                              "shared by every program that calls them)"),
        ("executables", f"{directory}"),
        ("programs", f"{len(files)}, {_sized(files)}"),
        ("a program file holds", "its optimised graph, loop program and engine source"
                                 + (", and its machine code" if flagged else "")),
    ]
    parts = list(store.KEY_PARTS.items())
    rows += [("key covers" if i == 0 else "", f"{name}: {what}") for i, (name, what) in enumerate(parts)]
    for name, value in rows:
        print(f"{name:22}{value}")
    return 0


def _trust(directory: Path) -> str:
    """`` (not used: <why>)`` for a directory other users can write to, else nothing."""
    reason = untrusted_reason(directory) if directory.is_dir() else None
    return f" (not used: {reason})" if reason else ""


# -- run -----------------------------------------------------------------------------------------------


def cmd_run(argv: Sequence[str]) -> int:
    """``popjit run``: see :mod:`popjit.runner`. The program's own exceptions and exits propagate."""
    return runner.main(argv)


# -- check ---------------------------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    """``popjit check``: see :mod:`popjit.check`."""
    return check.main(args.paths, as_json=args.json)


# -- report --------------------------------------------------------------------------------------------


def cmd_report(args: argparse.Namespace) -> int:
    """``popjit report``: see :mod:`popjit.profile.report`."""
    return report(args.directory, html=args.html, png=args.png)


# -- parser --------------------------------------------------------------------------------------------


def _version_text() -> str:
    from importlib.metadata import version

    return f"popjit {popjit.__version__} (numba {version('numba')}, llvmlite {version('llvmlite')}, " \
           f"numpy {np.__version__}, python {sys.version.split()[0]})"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``popjit`` command."""
    p = argparse.ArgumentParser(prog="popjit", description="Run Graphcore IPU TensorFlow programs on a CPU.",
                                epilog="Environment: POPJIT_NUM_IPUS, POPJIT_CACHE_DIR, POPJIT_DEBUG, TF_POPLAR_FLAGS "
                                       "(see docs/env_vars.md).")
    p.add_argument("--version", action="version", version=_version_text())
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    d = sub.add_parser("devices", help="print the virtual IPU system")
    d.add_argument("--ipu-version", default="ipu2", choices=["ipu1", "ipu2", "ipu21"], help="IPU model (default ipu2)")
    d.add_argument("--tiles-per-ipu", type=int, default=0, help="shrink each IPU to this many tiles")
    d.set_defaults(func=cmd_devices)

    demo_help = "train a small Keras CNN on a virtual IPU and report its estimates"
    sub.add_parser("demo", help=demo_help).set_defaults(func=cmd_demo)

    c = sub.add_parser("cache", help="list, describe or clear the on-disk caches (POPJIT_CACHE_DIR, and "
                                     "TF_POPLAR_FLAGS --executable_cache_path)")
    c.set_defaults(func=cmd_cache_list, verbose=False)
    csub = c.add_subparsers(dest="action", metavar="ACTION")
    cl = csub.add_parser("list", help="list cached code (default)")
    cl.add_argument("-v", "--verbose", action="store_true", help="list every generated module")
    cl.set_defaults(func=cmd_cache_list)
    cc = csub.add_parser("clear", help="remove cached code")
    cc.add_argument("--stale", action="store_true", help="only generations of other popjit or Numba versions")
    cc.set_defaults(func=cmd_cache_clear)
    csub.add_parser("info", help="where the caches are, what they hold, what a program's key covers"
                    ).set_defaults(func=cmd_cache_info)

    # `run` is parsed by popjit.runner as python parses its command line (see main); this entry is for --help.
    r = sub.add_parser("run", help="run an unmodified IPU TensorFlow script: run script.py [args], "
                                   "run -m module [args], run -c code [args]; -v first logs the compile phases",
                          add_help=False)
    r.add_argument("argv", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS]")
    r.set_defaults(func=lambda args: cmd_run(args.argv))
    pr = sub.add_parser("poprun", help="run a program as several instances through MPI, as Graphcore's poprun: "
                                       "poprun --num-instances N --num-replicas R script.py [args] (see poprun -h)",
                        add_help=False)
    pr.add_argument("argv", nargs=argparse.REMAINDER, metavar="OPTIONS PROGRAM [ARGS]")
    pr.set_defaults(func=lambda args: poprun.main(args.argv, prog="popjit poprun"))
    ck = sub.add_parser("check", help="list the TensorFlow, Keras and Graphcore names a program uses and whether "
                                      "popjit supports each, without running it (exit status 1 if one is missing)")
    ck.add_argument("paths", nargs="+", metavar="PATH", help="a Python file, or a directory of them")
    ck.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    ck.set_defaults(func=cmd_check)
    rp = sub.add_parser("report", help="summarise the profiles in a report directory (POPLAR_ENGINE_OPTIONS "
                                       "autoReport) or one profile file")
    rp.add_argument("directory", metavar="DIR", help="a report directory, or one profile.json")
    rp.add_argument("--html", metavar="OUT.html", help="also write one self-contained page of charts")
    rp.add_argument("--png", metavar="OUTDIR", help="also write static plots into this directory")
    rp.set_defaults(func=cmd_report)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``popjit`` and ``python -m popjit``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"]:  # before argparse and outside the OpError handler: the program's errors are its own
        return cmd_run(argv[1:])
    if argv[:1] == ["poprun"]:  # as for run: poprun parses its own command line
        return poprun.main(argv[1:], prog="popjit poprun")
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return int(args.func(args))
    except errors.OpError as e:
        print(f"popjit {args.command}: error: {e}", file=sys.stderr)
        return 1
