"""The ``popjit`` command (also ``python -m popjit``).

    popjit devices              the virtual IPU system: IPUs, tiles, memory per tile, clock, workers
    popjit demo                 the user guide's first example, then a compiled on-device loop, every stage shown
    popjit cache [list|clear]   the on-disk code cache under POPJIT_CACHE_DIR
    popjit run script.py [args]  an unmodified IPU TensorFlow script, `tensorflow` resolving to popjit
    popjit --version

``popjit report DIR`` is planned; it says so and exits with status 2.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import popjit
from popjit import config, errors, runner
from popjit.flags import poplar_flags
from popjit.kernels.jit import cache_root, fingerprint
from popjit.runtime import device as devices

NOT_IMPLEMENTED_STATUS = 2
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

# The embedded example, in two parts run in one namespace. Each part is written to a file and run
# from there (as `popjit run` will run a script), so autograph sees user code it can convert.
DEMO_USER_GUIDE = """\
import numpy as np
import popjit.tensorflow as tf
from popjit.tensorflow.python import ipu

# Configure the IPU device.
config = ipu.config.IPUConfig()
config.auto_select_ipus = 1
config.configure_ipu_system()

a = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
b = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])


@tf.function(jit_compile=True)
def matmul_fn(x, y):
  z = tf.matmul(x, y)
  return z


strategy = ipu.ipu_strategy.IPUStrategy()
with strategy.scope():
  c = strategy.run(matmul_fn, args=(a, b))
print(c)

with tf.device('/device:IPU:0'):
  c_eager = tf.matmul(a, b)
print(c_eager)
"""

DEMO_LOOP = """\
STEPS = 100


@tf.function(jit_compile=True)
def loop(x, w):
  for _ in tf.range(STEPS):
    x = tf.tanh(tf.matmul(x, w) + 0.1) * tf.sigmoid(x) - 0.5 * x
  return x


rng = np.random.default_rng(0)
x = rng.uniform(-1, 1, (16, 64)).astype(np.float32)
w = (rng.uniform(-1, 1, (64, 64)) / 8).astype(np.float32)
with strategy.scope():
  y = strategy.run(loop, args=(x, w))
"""

DEMO_EXPECTED = np.array([[22.0, 28.0], [49.0, 64.0]], dtype=np.float32)


def _heading(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 76 - len(title)), flush=True)


def run_part(source: str, path: Path, namespace: dict[str, Any]) -> float:
    """Write ``source`` to ``path`` and run it in ``namespace``; returns the seconds it took."""
    path.write_text(source)
    code = compile(source, str(path), "exec")
    t0 = time.perf_counter()
    exec(code, namespace)
    return time.perf_counter() - t0


def demo_loop_reference(x: np.ndarray, w: np.ndarray, steps: int) -> np.ndarray:
    """The demo loop in NumPy (float64)."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    for _ in range(steps):
        x = np.tanh(x @ w + 0.1) / (1 + np.exp(-x)) - 0.5 * x
    return x


def best_call_seconds(ns: dict[str, Any], repeat: int = 20) -> float:
    """The best of ``repeat`` further calls of the demo loop (compiled, cached)."""
    best = float("inf")
    with ns["strategy"].scope():
        for _ in range(repeat):
            t0 = time.perf_counter()
            ns["strategy"].run(ns["loop"], args=(ns["x"], ns["w"])).numpy()
            best = min(best, time.perf_counter() - t0)
    return best


def print_stages(exe: Any) -> None:
    """The compiled loop's graph IR, loop IR and tile schedule."""
    _heading("graph IR (after the graph passes)")
    print(exe.as_text("graph"))
    _heading("loop IR")
    print(exe.as_text("loop"))
    _heading("tile schedule on the virtual IPU")
    print(exe.as_text("schedule"))


def print_timing(ns: dict[str, Any], first_s: float, call_s: float, exe: Any) -> float:
    """Result, error against NumPy and timings of the loop; returns the max abs error."""
    steps = ns["STEPS"]
    y = ns["y"].numpy()
    err = float(np.max(np.abs(y - demo_loop_reference(ns["x"], ns["w"], steps))))
    _heading("result and timing")
    print(f"y[0, :4] = {np.array2string(y[0, :4], precision=5)}   max |error| vs NumPy: {err:.2g}")
    print(f"first call   {first_s:.3f} s  (trace + compile + run; machine code is cached in {cache_root()})")
    print(f"each call    {call_s * 1e3:.3f} ms on this CPU (best of 20), {call_s / steps * 1e6:.2f} us per loop step")
    sched = exe.schedule
    if hasattr(sched, "seconds"):
        print(f"on an IPU    {sched.total_cycles:,} cycles = {sched.seconds * 1e6:,.1f} us estimated "
              f"at {sched.target.clock_hz / 1e9:.2f} GHz")
    return err


def cmd_demo(args: argparse.Namespace) -> int:
    """``popjit demo``: the user guide's matmul two ways, then a compiled on-device loop, every stage shown."""
    t0 = time.perf_counter()
    ns: dict[str, Any] = {"__name__": "__popjit_demo__"}
    with tempfile.TemporaryDirectory(prefix="popjit-demo-") as tmp:
        _heading("Graphcore user guide 3.2.1-3.2.2: matmul through IPUStrategy.run, then eagerly")
        print(DEMO_USER_GUIDE)
        print("--- output ---", flush=True)
        run_part(DEMO_USER_GUIDE, Path(tmp) / "user_guide.py", ns)
        _heading("an on-device loop: one compiled program, a native loop inside")
        print(DEMO_LOOP, flush=True)
        first = run_part(DEMO_LOOP, Path(tmp) / "on_device_loop.py", ns)
        call = best_call_seconds(ns)
        exe = ns["loop"].get_concrete_function(ns["x"], ns["w"]).executable("/device:IPU:0")
    print_stages(exe)
    err = print_timing(ns, first, call, exe)
    ok = np.array_equal(ns["c"].numpy(), DEMO_EXPECTED) and np.array_equal(ns["c_eager"].numpy(), DEMO_EXPECTED)
    ok = ok and err < 1e-4
    print(f"\ndemo {'finished' if ok else 'FAILED: a result differs from NumPy'} in {time.perf_counter() - t0:.1f} s")
    return 0 if ok else 1


# -- cache ---------------------------------------------------------------------------------------------


@dataclass
class CacheEntry:
    """One generation of generated code (``gen-<hash of the kernels and Numba version>``)."""

    path: Path
    current: bool
    modules: int
    compiled: int
    size: int


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
        compiled = sum(f.suffix == ".nbi" for f in files)
        entries.append(CacheEntry(d, d.name == current, modules, compiled, sum(f.stat().st_size for f in files)))
    return sorted(entries, key=lambda e: not e.current)


def cmd_cache_list(args: argparse.Namespace) -> int:
    """``popjit cache list``."""
    root = cache_root()
    entries = cache_entries(root)
    print(f"popjit code cache: {root}")
    if not entries:
        print("  empty")
        return 0
    for e in entries:
        state = "current" if e.current else "stale (another popjit or Numba version)"
        print(f"  {e.path.name}  {e.modules} generated modules, {e.compiled} with machine code, "
              f"{format_bytes(e.size)}  {state}")
        if args.verbose:
            for f in sorted(e.path.rglob("*.py")):
                if f.name != "__init__.py":
                    print(f"      {f.relative_to(e.path)}")
    print(f"  total {format_bytes(sum(e.size for e in entries))}")
    return 0


def cmd_cache_clear(args: argparse.Namespace) -> int:
    """``popjit cache clear``: remove generated code (only popjit's ``gen-*`` directories)."""
    root = cache_root()
    entries = [e for e in cache_entries(root) if not (args.stale and e.current)]
    for e in entries:
        shutil.rmtree(e.path)
    size = format_bytes(sum(e.size for e in entries))
    print(f"removed {len(entries)} cache generation{'s' if len(entries) != 1 else ''} ({size}) from {root}")
    return 0


# -- run -----------------------------------------------------------------------------------------------


def cmd_run(argv: Sequence[str]) -> int:
    """``popjit run``: see :mod:`popjit.runner`. The program's own exceptions and exits propagate."""
    return runner.main(argv)


# -- not yet -------------------------------------------------------------------------------------------


def cmd_not_implemented(args: argparse.Namespace) -> int:
    """``report`` belongs to later work: say so, exit non-zero."""
    print(f"popjit {args.command}: not implemented yet in popjit {popjit.__version__}.", file=sys.stderr)
    return NOT_IMPLEMENTED_STATUS


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

    sub.add_parser("demo", help="run the embedded example and show every compiler stage").set_defaults(func=cmd_demo)

    c = sub.add_parser("cache", help="list or clear the on-disk code cache (POPJIT_CACHE_DIR)")
    c.set_defaults(func=cmd_cache_list, verbose=False)
    csub = c.add_subparsers(dest="action", metavar="ACTION")
    cl = csub.add_parser("list", help="list cached code (default)")
    cl.add_argument("-v", "--verbose", action="store_true", help="list every generated module")
    cl.set_defaults(func=cmd_cache_list)
    cc = csub.add_parser("clear", help="remove cached code")
    cc.add_argument("--stale", action="store_true", help="only generations of other popjit or Numba versions")
    cc.set_defaults(func=cmd_cache_clear)

    # `run` is parsed by popjit.runner as python parses its command line (see main); this entry is for --help.
    r = sub.add_parser("run", help="run an unmodified IPU TensorFlow script: run script.py [args], "
                                   "run -m module [args], run -c code [args]", add_help=False)
    r.add_argument("argv", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS]")
    r.set_defaults(func=lambda args: cmd_run(args.argv))
    rp = sub.add_parser("report", help="summarise a profile directory (not implemented yet)")
    rp.add_argument("directory")
    rp.set_defaults(func=cmd_not_implemented)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``popjit`` and ``python -m popjit``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"]:  # before argparse and outside the OpError handler: the program's errors are its own
        return cmd_run(argv[1:])
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
