"""``python -m benchmarks``: popjit against NumPy, TensorFlow-XLA and JAX in one run, as a table.

    python -m benchmarks                      # everything (several minutes)
    python -m benchmarks --only chain matmul  # skip the training loops and the fresh-process compile timings
    python -m benchmarks --only train         # the training loops (W1, W2) and W1's first-call compile time
    python -m benchmarks --only conv          # 3x3 convolutions, forward and training steps: C1 (ResNet), C2 (K1's)
    python -m benchmarks --only keras         # Keras fit: K1 (CNN) and K2 (LSTM), and their first epochs
    python -m benchmarks --only busy          # W1 and K2 again, beside a busy process started after them
    python -m benchmarks --only tf1           # TF1 Sessions: feed_dict per step against infeed + loops.repeat
    python -m benchmarks --only replicas      # W1 and the Keras CNN as 1, 2 and 4 replicas (popjit only)
    python -m benchmarks --only pipeline      # W1 as a 4-stage pipeline: estimated utilisation vs the ideal
    python -m benchmarks --no-peers --json out.json

Throughput is best-of-N after warm-up, in this process, the frameworks of one workload timed
round-robin (so a busy machine does not favour one of them), each framework's result checked
against NumPy first (a wrong result is reported as WRONG, never as a speed; it, or a framework
that fails, makes the exit status 1). Compile times are first call minus a steady call, in fresh
processes with an empty (fresh), a program-less (cold: popjit's kernel library only) and a filled
(warm) persistent cache (:mod:`benchmarks.firstcall`);
imports are excluded. The issue's targets are printed as ratios at the end; they are
measurements, not assertions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass

from benchmarks import conv_workloads, keras_workloads, pipeline_workloads, replica_workloads, tf1_workloads, workloads
from benchmarks.firstcall import COMPILERS, first_calls
from benchmarks.timing import busy_process, interleaved_best, machine_summary

SECTIONS = ("chain", "matmul", "conv", "train", "keras", "busy", "tf1", "compile", "replicas", "pipeline")
BUSY = ", beside a busy process"  # the label suffix of the busy section's rows
# issue 9's targets
CHAIN_TARGET = 1.2  # popjit GB/s ≥ 1.2 x TF-XLA's
MATMUL_TARGET = 0.95  # popjit GFLOP/s ≥ 95% of NumPy's BLAS
COMPILE_TARGET_S = 2.0  # cold first-call compile of (a) under 2 s
TRAIN_TARGETS = {"W1": 1.3, "W2": 1.05}  # popjit steps/s over TF-XLA's
TRAIN_COMPILE_TARGET_S = 2.0  # cold first-call compile of W1 at most 2 s
KERAS_TARGET = 1.0  # popjit samples/s ≥ stock Keras's (jit_compile=True), K1 and K2
KERAS_FIRST_EPOCH_TARGET_S = {"K1": 3.0}  # the CNN's cold first epoch (compile included)
CACHED_COMPILE_TARGET_S = {"W1": 0.3, "K1": 0.3}  # compile with every cache warm (a script run again): W1, W5 (K1)


@dataclass
class Row:
    """One line of the table."""

    workload: str
    framework: str
    value: float | None
    unit: str
    best_ms: float | None = None
    median_ms: float | None = None
    status: str = "ok"
    note: str = ""
    first_call_s: float | None = None


# -- measuring ----------------------------------------------------------------------------------------


def prepare(problem: workloads.Problem, framework: str) -> workloads.Case | Row:
    """Build one framework's case and check it against NumPy; a :class:`Row` says why it cannot be timed."""
    label = workloads.LABELS[framework]
    try:
        case = workloads.instantiate(problem, framework)
        case.check()
        return case
    except workloads.Unavailable as e:
        return Row(problem.label, label, None, problem.unit, status="skipped", note=str(e))
    except workloads.WrongResult as e:
        return Row(problem.label, label, None, problem.unit, status="WRONG", note=str(e))
    except Exception as e:  # one framework failing must not hide the others' numbers
        return Row(problem.label, label, None, problem.unit, status="FAILED", note=f"{type(e).__name__}: {e}")


def throughput_rows(problem: workloads.Problem, frameworks: Sequence[str], repeat: int, min_time: float,
                    beside: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
                    suffix: str = "") -> list[Row]:
    """Every framework (that implements the problem) on one problem, timed round-robin so that all see
    the same machine; the timing (not the building and checking) inside ``beside()``, the rows' label
    ending in ``suffix``."""
    prepared = {}
    for fw in workloads.frameworks_for(problem.kind, frameworks):
        _progress(f"{problem.label}{suffix} on {workloads.LABELS[fw]}")
        prepared[fw] = prepare(problem, fw)
    cases = {fw: c for fw, c in prepared.items() if isinstance(c, workloads.Case)}
    with beside():
        timings = interleaved_best({fw: c.call for fw, c in cases.items()}, repeat, warmup=1, min_seconds=min_time)
    rows = []
    for fw, c in prepared.items():
        if isinstance(c, Row):
            c.workload += suffix
            rows.append(c)
        else:
            t = timings[fw]
            rows.append(Row(problem.label + suffix, workloads.LABELS[fw], c.rate(t.best), problem.unit, t.best * 1e3,
                            t.median * 1e3, note=c.note))
    return rows


def busy_rows(frameworks: Sequence[str], repeat: int, min_time: float) -> list[Row]:
    """W1 and the Keras LSTM K2 timed with one busy process beside them, started after each framework's
    case was built, checked and run: the load a shared host adds while a program runs."""
    problems = [workloads.train_problem(**workloads.TRAIN_SIZES["W1"]),
                workloads.problem("keras", **keras_workloads.KERAS_SIZES["K2"])]
    return [row for p in problems for row in throughput_rows(p, frameworks, repeat, min_time, busy_process, BUSY)]


def compile_rows(workload: str, sizes: dict[str, int], frameworks: Iterable[str]) -> list[Row]:
    """Fresh, cold and warm first-call compile times of ``workload`` in fresh processes."""
    rows = []
    label = workloads.problem_label(workload, **sizes)
    for fw in workloads.frameworks_for(workload, frameworks):
        if fw not in COMPILERS:
            continue
        name = workloads.LABELS[fw]
        if not workloads.available(fw):
            rows.append(Row(f"compile: {label}", name, None, "s", status="skipped", note=f"{fw} is not installed"))
            continue
        for state, result in first_calls(fw, workload, sizes).items():
            if state == "fresh" and fw != "popjit":
                continue  # the same run as cold: only popjit has a kernel library to keep
            rows.append(_compile_row(f"compile: {label}", name, state, result))
    return rows


def memory_rows(workload: str, sizes: dict[str, int], frameworks: Iterable[str]) -> list[Row]:
    """Peak resident memory of a fresh process that imports the framework, compiles ``workload`` (cold:
    nothing of the program cached; warm: everything cached) and runs it a few times."""
    rows = []
    label = workloads.problem_label(workload, **sizes)
    for fw in workloads.frameworks_for(workload, frameworks):
        if fw not in COMPILERS or not workloads.available(fw):
            continue
        results = first_calls(fw, workload, sizes, resize=False)
        for state in ("cold", "warm"):
            result, name = results[state], workloads.LABELS[fw]
            if "error" in result:
                rows.append(Row(f"peak RSS: {label}", name, None, f"MB {state}", status="FAILED", note=result["error"]))
            else:
                rows.append(Row(f"peak RSS: {label}", name, result["peak_rss_mb"], f"MB {state}",
                                note="import + first call + steady calls"))
    return rows


def _compile_row(workload: str, framework: str, state: str, result: dict) -> Row:
    if "error" in result:
        return Row(workload, framework, None, f"s {state}", status="FAILED", note=result["error"])
    note = f"first call {result['first_call_s']:.2f} s = compile + one run of {result['steady_s'] * 1e3:.0f} ms; " \
           f"import {result['import_s']:.2f} s"
    if state == "resized":
        note = f"at twice the batch, its codelets compiled by the runs before; {note}"
    return Row(workload, framework, result["compile_s"], f"s {state}", note=note, first_call_s=result["first_call_s"])


def measure(sections: Sequence[str], frameworks: Sequence[str], repeat: int, min_time: float) -> list[Row]:
    """Every row of the table, section by section, printing progress to stderr."""
    rows: list[Row] = []
    problems: list[workloads.Problem] = []
    if "chain" in sections:
        problems.append(workloads.chain_problem())
    if "matmul" in sections:
        problems += [workloads.matmul_problem(*shape) for shape in workloads.MATMUL_SHAPES.values()]
    if "conv" in sections:
        problems += [workloads.problem(kind, **sizes) for kind in ("conv", "convstep")
                     for sizes in conv_workloads.CONV_SIZES.values()]
    if "train" in sections:
        problems += [workloads.train_problem(**sizes) for sizes in workloads.TRAIN_SIZES.values()]
    if "keras" in sections:
        problems += [workloads.problem("keras", **sizes) for sizes in keras_workloads.KERAS_SIZES.values()]
    if "tf1" in sections:
        problems += [workloads.problem("tf1", **sizes) for sizes in tf1_workloads.TF1_SIZES.values()]
    for p in problems:
        rows += throughput_rows(p, frameworks, repeat, min_time)
    if "busy" in sections:
        rows += busy_rows(frameworks, repeat, min_time)
    if "train" in sections:
        _progress("first-call time of W1 in fresh processes")
        rows += compile_rows("train", workloads.TRAIN_SIZES["W1"], frameworks)
        _progress("peak memory of W2 in fresh processes")
        rows += memory_rows("train", workloads.TRAIN_SIZES["W2"], frameworks)
    if "keras" in sections:
        _progress("first epochs of K1 and K2 in fresh processes")
        for sizes in keras_workloads.KERAS_SIZES.values():
            rows += compile_rows("keras", sizes, frameworks)
    if "tf1" in sections:
        _progress("first session runs of the TF1 graph in fresh processes")
        for sizes in tf1_workloads.TF1_SIZES.values():
            rows += compile_rows("tf1", sizes, frameworks)
    if "compile" in sections:
        _progress("first-call times in fresh processes")
        rows += compile_rows("chain", {}, frameworks)
        rows += compile_rows("matmul", {}, frameworks)
    return rows


def _progress(msg: str) -> None:
    print(f"  measuring {msg} ...", file=sys.stderr, flush=True)


# -- reporting ----------------------------------------------------------------------------------------


def _fmt(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def format_table(rows: Sequence[Row]) -> str:
    """The rows as an aligned text table (a blank line between workloads)."""
    head = ("workload", "framework", "result", "unit", "best ms", "median ms", "status / note")
    cells = [(r.workload, r.framework, _fmt(r.value), r.unit, _fmt(r.best_ms, 1), _fmt(r.median_ms, 1),
              r.status if r.status != "ok" or not r.note else r.note) for r in rows]
    widths = [max(len(str(c[i])) for c in [head, *cells]) for i in range(len(head) - 1)]
    right = {2, 4, 5}

    def line(c: Sequence[str]) -> str:
        parts = [str(x).rjust(w) if i in right else str(x).ljust(w) for i, (x, w) in enumerate(zip(c, widths))]
        return "  ".join([*parts, str(c[-1])]).rstrip()

    out, last = [line(head), "-" * (sum(widths) + 2 * len(widths) + 14)], None
    for r, c in zip(rows, cells):
        if last is not None and r.workload != last:
            out.append("")
        out.append(line(c))
        if r.status not in ("ok", "skipped") and r.note:
            out.append(f"    {r.note}")
        last = r.workload
    return "\n".join(out)


def _row(rows: Sequence[Row], workload: str, framework: str, unit: str | None = None) -> Row | None:
    for r in rows:
        if r.workload == workload and r.framework == framework and r.status == "ok" and unit in (None, r.unit):
            return r
    return None


def _value(rows: Sequence[Row], workload: str, framework: str, unit: str | None = None) -> float | None:
    row = _row(rows, workload, framework, unit)
    return None if row is None else row.value


def _rate_line(rows: Sequence[Row], title: str, workload: str, theirs: str, rate: str, target: float) -> str:
    """``title: popjit / <rate> = ratio (median calls m)  (target >= t)  met|NOT met|n/a``: popjit's rate
    over ``theirs``'s on ``workload``, by best calls (what the verdict uses) and, when both rows have
    them, by median calls. why both: a peer's calls can spread 2x on a shared host (TF-XLA's W1: best
    47-51 ms, median 96-100 ms), so a ratio of best calls alone flips from run to run."""
    mine, other = _row(rows, workload, "popjit"), _row(rows, workload, theirs)
    ratio = mine.value / other.value if mine and other and mine.value and other.value else None
    medians = ""
    if ratio is not None and mine.median_ms and other.median_ms:
        medians = f" (median calls {_fmt(other.median_ms / mine.median_ms)})"
    return (f"{title}: popjit / {rate} = {_fmt(ratio)}{medians}  (target >= {target:.2f})  "
            f"{_verdict(None if ratio is None else ratio >= target)}")


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "NOT met")


def target_lines(rows: Sequence[Row]) -> list[str]:
    """The issue's targets as measured ratios (never asserted)."""
    lines = []
    chain = workloads.problem_label("chain")
    lines.append(_rate_line(rows, "(a) chain", chain, "TF-XLA", "TF-XLA GB/s", CHAIN_TARGET))
    for shape in workloads.MATMUL_SHAPES.values():
        label = workloads.problem_label("matmul", m=shape[0], k=shape[1], n=shape[2])
        lines.append(_rate_line(rows, f"(b) {label}", label, "NumPy", "NumPy GFLOP/s", MATMUL_TARGET))
    cold = _value(rows, f"compile: {chain}", "popjit", "s cold")
    lines.append(f"(c) chain cold compile: popjit {_fmt(cold)} s  (target < {COMPILE_TARGET_S:.1f} s)  "
                 f"{_verdict(None if cold is None else cold < COMPILE_TARGET_S)}")
    return lines + train_target_lines(rows) + keras_target_lines(rows) + busy_target_lines(rows) + \
        conv_target_lines(rows)


def conv_target_lines(rows: Sequence[Row]) -> list[str]:
    """(j) the forward convolutions and (k) their training steps: popjit / TF-XLA GFLOP/s, at least 1 (the
    issue's CNN training step, W5, is at least TF-XLA's speed; its Keras CNN is K1, (e))."""
    lines = []
    for kind, section in (("conv", "j"), ("convstep", "k")):
        for name, sizes in conv_workloads.CONV_SIZES.items():
            label = workloads.problem_label(kind, **sizes)
            if any(r.workload == label for r in rows):
                lines.append(_rate_line(rows, f"({section}) {name} {label}", label, "TF-XLA", "TF-XLA GFLOP/s", 1.0))
    return lines


def _versus_tf(rows: Sequence[Row], title: str, rate: str, target: float) -> str:
    """:func:`_rate_line` against TensorFlow's row, for the workload ``title`` names after its first two words."""
    return _rate_line(rows, title, title.split(" ", 2)[2], "TF-XLA", rate, target)


def train_target_lines(rows: Sequence[Row]) -> list[str]:
    """(d) the training loops: popjit / TF-XLA steps/s for W1 and W2, and W1's cold compile time."""
    lines = []
    for name, sizes in workloads.TRAIN_SIZES.items():
        label = workloads.problem_label("train", **sizes)
        lines.append(_versus_tf(rows, f"(d) {name} {label}", "TF-XLA steps/s", TRAIN_TARGETS.get(name, 1.0)))
    w1 = workloads.problem_label("train", **workloads.TRAIN_SIZES["W1"])
    cold = _value(rows, f"compile: {w1}", "popjit", "s cold")
    lines.append(f"(d) W1 cold compile: popjit {_fmt(cold)} s  (target <= {TRAIN_COMPILE_TARGET_S:.1f} s)  "
                 f"{_verdict(None if cold is None else cold <= TRAIN_COMPILE_TARGET_S)}")
    lines += _cached_line(rows, "W1", "(d)", f"compile: {w1}")
    lines += _resized_line(rows, "(d) W1", f"compile: {w1}")
    w2 = workloads.problem_label("train", **workloads.TRAIN_SIZES["W2"])
    for state in ("cold", "warm"):
        mine, theirs = (_value(rows, f"peak RSS: {w2}", fw, f"MB {state}") for fw in ("popjit", "TF-XLA"))
        ratio = None if mine is None or theirs is None else mine / theirs
        lines.append(f"(d) W2 peak RSS, {state}: popjit / TF-XLA = {_fmt(ratio)}  (target <= 1.00)  "
                     f"{_verdict(None if ratio is None else ratio <= 1.0)}")
    return lines


def keras_target_lines(rows: Sequence[Row]) -> list[str]:
    """(e) Keras fit: popjit / stock Keras samples/s for K1 and K2, and their first epochs (cold)."""
    lines = []
    for name, sizes in keras_workloads.KERAS_SIZES.items():
        label = workloads.problem_label("keras", **sizes)
        lines.append(_versus_tf(rows, f"(e) {name} {label}", "Keras samples/s", KERAS_TARGET))
        firsts = {fw: _first_call(rows, f"compile: {label}", fw) for fw in ("popjit", "TF-XLA")}
        if any(v is not None for v in firsts.values()):
            target, mine = KERAS_FIRST_EPOCH_TARGET_S.get(name), firsts["popjit"]
            met = None if mine is None else mine <= (target or 0)
            verdict = "" if target is None else f"  (target <= {target:.1f} s)  {_verdict(met)}"
            lines.append(f"(e) {name} first epoch incl. compile, cold: popjit {_fmt(firsts['popjit'])} s, "
                         f"Keras {_fmt(firsts['TF-XLA'])} s{verdict}")
        lines += _cached_line(rows, name, "(e)", f"compile: {label}")
        lines += _resized_line(rows, f"(e) {name}", f"compile: {label}")
    return lines


def busy_target_lines(rows: Sequence[Row]) -> list[str]:
    """(i) beside a busy process: popjit / TF-XLA for W1 and K2 (no target of its own: the issue asks for
    steady speed), and each framework's slowdown against its quiet best call in the same run."""
    lines = []
    for name, label in (("W1", workloads.problem_label("train", **workloads.TRAIN_SIZES["W1"])),
                        ("K2", workloads.problem_label("keras", **keras_workloads.KERAS_SIZES["K2"]))):
        if not any(r.workload == label + BUSY for r in rows):
            continue
        slowdowns = []
        for fw in ("popjit", "TF-XLA"):
            quiet, busy = _row(rows, label, fw), _row(rows, label + BUSY, fw)
            if quiet and busy and quiet.best_ms and busy.median_ms:
                slowdowns.append(f"{fw} median call {_fmt(busy.median_ms / quiet.best_ms)}x its quiet best")
        lines.append(_rate_line(rows, f"(i) {name}{BUSY}", label + BUSY, "TF-XLA", "TF-XLA", 1.0)
                     + (f"; {', '.join(slowdowns)}" if slowdowns else ""))
    return lines


def _cached_line(rows: Sequence[Row], name: str, section: str, workload: str) -> list[str]:
    """popjit's compile time of ``workload`` (``name``'s) in a fresh process with every cache warm, as when a
    script runs again, against its target if it has one (:data:`CACHED_COMPILE_TARGET_S`), as a line; none if it
    was not measured."""
    warm = _value(rows, workload, "popjit", "s warm")
    if warm is None:
        return []
    target = CACHED_COMPILE_TARGET_S.get(name)
    verdict = "" if target is None else f"  (target <= {target:.1f} s)  {_verdict(warm <= target)}"
    return [f"{section} {name} compile, every cache warm: popjit {_fmt(warm)} s{verdict}"]


def _resized_line(rows: Sequence[Row], title: str, workload: str) -> list[str]:
    """popjit's compile time of ``workload`` at twice its batch after its other first calls (a new program
    whose codelets are cached) beside its cold one, as a line; none if it was not measured."""
    resized = _value(rows, workload, "popjit", "s resized")
    if resized is None:
        return []
    cold = _value(rows, workload, "popjit", "s cold")
    return [f"{title} compile at twice the batch, a new program whose codelets are cached: popjit {_fmt(resized)} s "
            f"(cold {_fmt(cold)} s)"]


def _first_call(rows: Sequence[Row], workload: str, framework: str) -> float | None:
    for r in rows:
        if r.workload == workload and r.framework == framework and r.status == "ok" and r.unit == "s cold":
            return r.first_call_s
    return None


def load_note() -> str | None:
    """A warning when other processes are using the CPU (the numbers will be low and noisy)."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    return f"note: 1-minute load average is {load:.2f} before starting: other processes share the CPU, " \
           "so numbers may be low and noisy" if load > 0.5 else None


# -- command line -------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="sections to run")
    p.add_argument("--frameworks", nargs="+", choices=workloads.FRAMEWORKS, default=list(workloads.FRAMEWORKS))
    p.add_argument("--no-peers", action="store_true", help="leave out TensorFlow and JAX")
    p.add_argument("--repeat", type=int, default=5, help="timed calls per case, at least (default 5)")
    p.add_argument("--min-time", type=float, default=1.0, help="seconds of timed calls per case, at least")
    p.add_argument("--json", metavar="PATH", help="also write the rows and the machine summary as JSON")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, print the table and the targets; exit status 1 if any framework computed a wrong result."""
    args = parse_args(argv)
    frameworks = [f for f in args.frameworks if not (args.no_peers and f in workloads.PEERS)]
    header = ["popjit benchmarks", *machine_summary()]
    note = load_note()
    print("\n".join(header + ([note] if note else [])), flush=True)
    rows = measure(args.only, frameworks, args.repeat, args.min_time)
    targets = "\n".join(f"  {line}" for line in target_lines(rows))
    print(f"\n{format_table(rows)}\n\ntargets (measured, not asserted):\n{targets}", flush=True)
    if "replicas" in args.only:  # last: it configures devices of several IPUs
        _progress("W1 and K1 as 1, 2 and 4 replicas")
        print(f"\nreplicas (samples/s on this host and as the IPU estimate gives them):\n"
              f"{replica_workloads.table(replica_workloads.replica_rows(args.repeat))}", flush=True)
    if "pipeline" in args.only:
        _progress("W1 as a 4-stage pipeline")
        print(f"\npipeline (4 stages on 4 IPUs, the IPU estimate's utilisation against the fill/drain formula):\n"
              f"{pipeline_workloads.table(pipeline_workloads.pipeline_rows(args.repeat))}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": header[1:], "rows": [asdict(r) for r in rows]}, f, indent=1)
    return 1 if any(r.status in ("WRONG", "FAILED") for r in rows) else 0
