"""The compiler pipeline: the one place that decides the order of passes.

    graph ──verify──const_fold──cse──merge_replayed_loops──accumulate_blocks──convolve_input_gradients──dce
          ──plan_fusion──► lower ──loop passes──► schedule ──► codegen ──► engine

``compile_graph`` runs every stage and returns an :class:`~popjit.pipeline.executable.Executable`.
``POPJIT_DEBUG`` levels print each stage (see ``docs/env_vars.md``).
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from collections.abc import Callable

from popjit import config
from popjit.codegen.compile import load_engine
from popjit.codegen.engine import render_engine
from popjit.codegen.numerics import DEFAULT, Numerics
from popjit.codegen.phases import Phases
from popjit.errors import InvalidArgumentError
from popjit.graph.passes import (
    accumulate_blocks,
    const_fold,
    convolve_input_gradients,
    cse,
    dce,
    merge_replayed_loops,
    plan_fusion,
)
from popjit.graph.passes.loops import prune_loop_state
from popjit.graph.verify import verify
from popjit.ir.graph import Graph
from popjit.ir.loop import Program
from popjit.loop import passes as loop_passes
from popjit.loop.lower import lower
from popjit.ops import registry
from popjit.pipeline import store
from popjit.pipeline.executable import Executable
from popjit.profile import ReportOptions, report_options, write_report
from popjit.schedule import Target, schedule_program
from popjit.schedule.schedule import OutOfMemoryWarning

GRAPH_PASSES: list[tuple[str, Callable[[Graph], Graph]]] = [
    ("verify", verify),
    ("const_fold", const_fold),
    ("cse", cse),
    ("merge_replayed_loops", merge_replayed_loops),
    ("accumulate_blocks", accumulate_blocks),
    ("convolve_input_gradients", convolve_input_gradients),
    ("dce", dce),
    ("prune_loop_state", prune_loop_state),
]

LOOP_PASSES: list[tuple[str, Callable[[Program], Program]]] = [
    ("elide_copies", loop_passes.elide_copies),
    ("collapse_dims", loop_passes.collapse_dims),
    ("fold_gemm_updates", loop_passes.fold_gemm_updates),
    ("carry_variables_in_place", loop_passes.carry_variables_in_place),  # last: on the loops the engine runs
]

log = logging.getLogger("popjit")


def _dump(level: int, title: str, text: Callable[[], str]) -> None:
    if config.get("DEBUG") >= level:
        print(f"=== popjit: {title} ===\n{text()}", file=sys.stderr)


def optimize_graph(graph: Graph) -> Graph:
    for _name, p in GRAPH_PASSES:
        graph = p(graph)
        if config.get("CHECKS"):
            verify(graph)
    return graph


def lower_graph(graph: Graph) -> Program:
    program = lower(graph, plan_fusion(graph))
    for _name, p in LOOP_PASSES:
        program = p(program)
    return program


def compile_graph(graph: Graph, target: Target | None, numerics: Numerics = DEFAULT,
                  fingerprint: str | None = None) -> Executable:
    """Compile a traced graph into a runnable executable: an IPU program for ``target`` (scheduled onto
    its tiles, with memory, cycles and out-of-memory checks), or with ``target=None`` a host program
    (the same native engine, no IPU schedule). ``numerics``: the floating-point behaviour of the IPU
    device it runs on (``IPUConfig.floating_point_behaviour``). Each phase is timed and logged
    (:mod:`popjit.codegen.phases`); the codelets' machine code comes on the program's first run.

    A program compiled before, in this process or an earlier one, comes from the executable cache
    (:mod:`popjit.pipeline.store`) instead: a program that compiles without an out-of-memory warning
    is kept there (with ``POPJIT_DEBUG`` 2 or more it is compiled, to show its stages, and kept
    again). ``fingerprint``: the graph's, if the caller has it.

    An IPU program writes its profile where ``POPLAR_ENGINE_OPTIONS`` asks (:mod:`popjit.profile`),
    whether it was compiled or loaded; a bad value of that variable fails before anything compiles (a host
    program, which has no Poplar engine, neither reads it nor writes a profile)."""
    reports = report_options() if target is not None else ReportOptions()
    parts = store.key_parts(fingerprint or graph.fingerprint(), target, numerics)
    key = store.executable_key(parts["graph"], target, numerics)
    # why: POPJIT_DEBUG >= 2 asks to see the stages, so the program compiles instead of loading
    kept = _load_kept(key, graph.name, target) if config.get("DEBUG") < 2 else None
    if kept is not None:
        return _reported(kept, reports)
    log.info("Compile cause for '%s': %s", graph.name, recompilation_cause(graph.name, parts))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", OutOfMemoryWarning)
        exe = _compile(graph, target, numerics)
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    if not any(issubclass(w.category, OutOfMemoryWarning) for w in caught):  # why: seen on every compile
        exe.library_store = store.save(key, exe.graph, exe.program, exe.engine_source)
    return _reported(exe, reports)


def _reported(exe: Executable, reports: ReportOptions) -> Executable:
    """``exe``, after writing its profile if ``reports`` asks for one."""
    if reports.enabled:
        write_report(exe.schedule, reports)
    return exe


#: The key parts each program name was last compiled with in this process (for the recompilation log).
_COMPILED: dict[str, dict[str, str]] = {}


def recompilation_cause(name: str, parts: dict[str, str]) -> str:
    """Why the program ``name`` compiles: its first compile, or what changed since its last one (a new
    graph: new input shapes or Python values, see the retracing log; a new IPU configuration,
    floating-point behaviour, setting or Poplar flag), or nothing (the in-memory executable cache had
    dropped it). The executable cache on disk never held it (it would have been loaded)."""
    before = _COMPILED.get(name)
    _COMPILED[name] = parts
    if before is None:
        return f"its first compile in this process, and it is not in the executable cache {store.executables_dir()}"
    changed = store.changed_parts(before, parts)
    if not changed:
        return ("compiled before with the same key, but no longer in the in-memory executable cache "
                "(POPJIT_EXECUTABLE_CACHE_SIZE, or reset_ipu_configuration cleared it)")
    graph = ("its graph changed (new input shapes or dtypes, new Python values traced in as constants, or a new "
             "trace)")
    return "recompiling: " + "; ".join(graph if part == "graph" else f"the {part} changed" for part in changed)


def _load_kept(key: str, name: str, target: Target | None) -> Executable | None:
    """The program of ``key`` from the executable cache, logged as the phase "Loading executable" (a
    program not there is compiled, and no phase is logged for looking)."""
    started = time.perf_counter()
    kept = store.load(key)
    if kept is None:
        return None
    phases = Phases(name)
    with phases.phase("Loading executable") as phase:
        exe = Executable(kept.graph, kept.program, target, kept.source, load_engine(kept.source),
                         library_store=kept.libraries, loaded=True)
        phase.note = f"loaded in {time.perf_counter() - started:.3f} s from {store.executable_path(key)}"
    exe.compile_seconds = time.perf_counter() - started
    _dump(1, f"loaded {name}", lambda: f"from the executable cache in {exe.compile_seconds:.3f} s")
    return exe


def check_replication(graph: Graph, target: Target | None) -> None:
    """Raise for a cross-replica op the program cannot run: in a host program (no replicas: Graphcore's
    ops have no CPU kernel), or over groups of replicas that do not divide the program's replicas."""
    replicas = target.replicas if target is not None else 0
    for node in graph.walk():
        if not registry.get(node.op).extra.get("replicated"):
            continue
        at = f"\n  at {node.loc.describe()}" if node.loc else ""
        if target is None:
            raise InvalidArgumentError(
                f"Detected unsupported operations when trying to compile graph {graph.name} on the host: the "
                f"cross-replica operation {node.op} runs only in a program on an IPU device (IPUStrategy.run, "
                f"tf.device('/device:IPU:0') or jit_compile=True).{at}")
        group = node.attrs.get("group", 0)
        if group and replicas % group:
            raise InvalidArgumentError(
                f"The cross-replica operation {node.op} works in groups of {group} replicas, but '{graph.name}' runs "
                f"as {replicas} replica{'s' if replicas > 1 else ''}: the number of replicas must be a multiple of "
                f"the group size. Attach a device of a multiple of {group} IPUs (cfg.auto_select_ipus).{at}")


def single_replica(graph: Graph, target: Target | None) -> None:
    """In a program run by one replica, a sum over all replicas (an optimizer's gradient aggregation) is
    the value itself: those nodes become identities, so an unreplicated program pays nothing for them."""
    if target is not None and target.replicas > 1:
        return
    for node in graph.walk():
        if node.op == "all_reduce" and node.attrs.get("group", 0) <= 1:
            node.op, node.attrs = "identity", {}


def _compile(graph: Graph, target: Target | None, numerics: Numerics) -> Executable:
    check_replication(graph, target)
    phases = Phases(graph.name)
    log.info("Starting phase: graphConstruction of '%s'", graph.name)
    _dump(2, f"graph IR of {graph.name}", graph.as_text)
    with phases.phase("graph passes"):
        graph = graph.copy()  # the passes rewrite graphs in place; the caller's stays as traced
        single_replica(graph, target)
        graph = optimize_graph(graph)
    _dump(2, f"optimized graph IR of {graph.name}", graph.as_text)
    with phases.phase("lowering"):
        program = lower_graph(graph)
    _dump(3, f"loop IR of {graph.name}", program.as_text)
    schedule = None
    if target is not None:
        with phases.phase("tile schedule"):
            schedule = schedule_program(program, target)
        _dump(4, f"tile schedule of {graph.name}", schedule.as_text)
    with phases.phase("code generation"):
        source = render_engine(program, numerics)
    _dump(5, f"codelets of {graph.name}", lambda: "\n".join(r.source for r in source.codelets.values()))
    _dump(6, f"engine of {graph.name}", lambda: source.source)
    engine = load_engine(source)
    exe = Executable(graph, program, target, source, engine, phases.elapsed(), _schedule=schedule)
    log.info("Finished phase: graphConstruction of '%s' in %.3f s", graph.name, phases.elapsed())
    _dump(1, f"compiled {graph.name}", lambda: f"{len(source.codelets)} codelets, "
          f"{len(program.temps)} temporaries, {phases.elapsed():.3f} s ({phases.summary()}; "
          "machine code compiles on first run)")
    return exe
