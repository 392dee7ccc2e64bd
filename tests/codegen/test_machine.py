"""A program library is compiled in parts on several threads (``popjit/codegen/machine.py``)."""

from __future__ import annotations

import platform
import re
import threading

import llvmlite.binding as ll
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import popjit.tensorflow as tf
from popjit import config
from popjit.codegen import compile as compile_module
from popjit.codegen import library, machine
from popjit.codegen.compile import load_engine
from popjit.codegen.library import PARTS_PER_THREAD, balanced_parts
from popjit.pipeline import cache as executable_cache


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=60), st.integers(1, 8))
@example(weights=[0, 0], parts=2)  # items of weight 0 went to one part, leaving the other empty
def test__balanced_parts__every_item_in_a_part_none_empty_none_far_over_the_mean(weights: list[int],
                                                                                 parts: int) -> None:
    part_of = balanced_parts(weights, parts)
    count = min(parts, len(weights))
    assert len(part_of) == len(weights)
    assert sorted(set(part_of)) == list(range(count)), "every part gets at least one item"
    totals = [sum(w for w, p in zip(weights, part_of) if p == i) for i in range(count)]
    # heaviest first to the lightest part: no part exceeds the mean by more than one item
    assert max(totals) <= sum(weights) / count + max(weights)


def _program(x, y):
    h = x
    for k in range(6):  # distinct codelets: tanh, relu (a scalar kernel call), exp, reductions
        h = tf.nn.relu(tf.tanh(h * float(k + 1)) - y) + tf.exp(-h * h) * float(k)
        h = h - tf.reduce_mean(h, axis=0, keepdims=True)
    return h, tf.reduce_sum(h * h)


def _run_and_parts(threads: int) -> tuple[list[np.ndarray], int, set[str], list[machine.Part], str]:
    names: set[str] = set()
    started: list[machine.Part] = []
    lock = threading.Lock()
    compile_part = machine._compile

    def recorded(part: machine.Part, assembly: bool) -> machine.ObjectCode:
        with lock:
            names.add(threading.current_thread().name)
            started.append(part)
        return compile_part(part, assembly)

    x = np.random.default_rng(3).standard_normal((33, 17)).astype(np.float32)
    y = np.linspace(-1, 1, 17, dtype=np.float32)
    machine._compile = recorded
    executable_cache.clear()  # why: compile and link again, not reuse the other run's program
    compile_module._ENGINES.clear()
    units, library._UNITS = library._UNITS, library._Units()  # why: as a process that has loaded no units
    try:
        with config.context(NUM_THREADS=threads):
            fn = tf.function(_program, jit_compile=True)
            outputs = [o.numpy() for o in fn(x, y)]
            engine = load_engine(fn.get_concrete_function(x, y).executable("cpu").engine_source)
    finally:
        machine._compile = compile_part
        library._UNITS = units
    return outputs, len(started), names, started, engine.src.name


def test__program_library__compiled_in_parts_on_threads_gives_the_single_part_result(tmp_path) -> None:
    with config.context(CACHE_DIR=str(tmp_path / "one")):
        single, single_parts, single_threads, single_started, _ = _run_and_parts(1)
    with config.context(CACHE_DIR=str(tmp_path / "two")):
        split, split_parts, split_threads, started, engine_name = _run_and_parts(2)
    assert single_parts == 2 and single_threads == {"MainThread"}, "one part for the codelets' units, the engine's own"
    units = len(single_started[1].texts)  # the codelets, all in one part
    assert units > 2
    assert split_parts == min(2 * PARTS_PER_THREAD, units) + 1, "the units' parts and the engine's own"
    assert len(split_threads) == 2 and all(n.startswith("popjit-llvm") for n in split_threads)
    first = started[0]  # the pool starts parts in the order they are given
    assert len(first.texts) == 1 and _defines(first.texts[0], engine_name), \
        "the engine's part is given first, before any codelet is written"
    assert not first.optimize and all(part.optimize for part in started[1:]), "only the engine is not optimised"
    assert not any(_defines(text, engine_name) for part in started[1:] for text in part.texts)
    assert all(part.simplify == [False] * len(part.texts) for part in started), \
        "codelets without trap checks skip Numba's function passes"
    assert all(part.level == machine.CODELET_LEVEL for part in started[1:]), "parts of codelets written as IR alone"
    for a, b in zip(single, split):
        np.testing.assert_array_equal(a, b)


def _defines(text: str, name: str) -> bool:
    return re.search(rf'^define [^@]*@"?{re.escape(name)}"?\(', text, re.MULTILINE) is not None


def _module_text(name: str, body: str) -> str:
    return f"define i64 @{name}(i64 %x) {{\n{body}\n}}\n"


@pytest.mark.parametrize("threads", [1, 2])
def test__part_compiler__a_broken_part_raises_from_its_result_and_the_others_compile(threads: int) -> None:
    empty = ll.parse_assembly("").as_bitcode()
    good = machine.Part(empty, [_module_text("seven_times", "  %y = mul i64 %x, 7\n  ret i64 %y")])
    broken = machine.Part(empty, [_module_text("broken", "  ret i64 %undefined_value")])
    with machine.PartCompiler(threads) as compiler:
        failing, working = compiler.submit(broken), compiler.submit(good)
        with pytest.raises(RuntimeError, match="LLVM IR parsing error"):
            failing.result()
        compiled = working.result()
    defined = [f.name for f in ll.parse_bitcode(compiled.bitcode).functions if not f.is_declaration]
    assert defined == ["seven_times"] and len(compiled.code) > 0


def test__part_compiler__an_unoptimised_part_keeps_its_arithmetic_an_optimised_one_folds_it() -> None:
    empty = ll.parse_assembly("").as_bitcode()
    body = "  %a = mul i64 %x, 3\n  %b = mul i64 %x, 5\n  %c = add i64 %a, %b\n  ret i64 %c"
    text = _module_text("times_eight", body)
    with machine.PartCompiler(1, assembly=True) as compiler:
        plain, optimised = (compiler.submit(machine.Part(empty, [text], optimize=flag)).result()
                            for flag in (False, True))
    def multiplies(code: machine.ObjectCode) -> int:
        return str(ll.parse_bitcode(code.bitcode)).count(" = mul ")

    assert multiplies(plain) == 2 and multiplies(optimised) <= 1, "x*3 + x*5 as written; folded into x*8"
    if platform.machine() in ("x86_64", "AMD64"):  # the machine code too: two multiplies, or a shift or an lea
        assert plain.assembly.count("imul") == 2, plain.assembly
        assert "imul" not in optimised.assembly, optimised.assembly


STRIDED_LOOP = """
define void @strided(float* noalias %a, float* noalias %b, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %i3 = mul i64 %i, 3
  %i5 = mul i64 %i, 5
  %pa = getelementptr float, float* %a, i64 %i3
  %pb = getelementptr float, float* %b, i64 %i5
  %x = load float, float* %pb
  %y = load float, float* %pa
  %z = fadd float %x, %y
  store float %z, float* %pa
  %next = add i64 %i, 1
  %go = icmp slt i64 %next, %n
  br i1 %go, label %loop, label %done
done:
  ret void
}
"""


def strided_loop_assembly() -> str:
    """The machine code of a loop over two strided arrays (a[3i] += b[5i]), emitted as parts are."""
    context = ll.create_context()
    module = machine._parse(STRIDED_LOOP, context)
    try:
        return machine._emit(machine._target_machine(3), module, as_object=False).decode()
    finally:
        module.close()
        context.close()


def test__parts_are_emitted_without_loop_strength_reduction_and_other_code_keeps_it() -> None:
    """Loop strength reduction turns the loop's index multiplies into pointer increments; it is off while
    a part is emitted (nested too: two parts at once), and on again for the process's other code after."""
    before = strided_loop_assembly()
    with machine._without_loop_strength_reduction():
        with machine._without_loop_strength_reduction():
            inner = strided_loop_assembly()
        still_off = strided_loop_assembly()
    after = strided_loop_assembly()
    assert inner != before and still_off == inner, "the loop's code was the same with and without the option"
    assert after == before, "loop strength reduction was left off for the process's other code"


def test__cache_fingerprint__covers_how_program_libraries_are_built() -> None:
    from popjit.kernels.jit import fingerprint_sources

    names = {(p.parent.name, p.name) for p in fingerprint_sources()}
    for name in ("machine.py", "library.py", "native.py", "direct.py", "render.py", "engine.py"):
        assert ("codegen", name) in names, f"a change to codegen/{name} must not load libraries built before it"
    assert ("kernels", "gemm.py") in names


@pytest.mark.parametrize("threads", [1, 2])
def test__program_library__of_a_program_without_callees_holds_its_engine(tmp_path, threads: int) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    executable_cache.clear()
    compile_module._ENGINES.clear()
    with config.context(CACHE_DIR=str(tmp_path), NUM_THREADS=threads):
        fn = tf.function(lambda v: None, jit_compile=True)  # nothing to compute: an engine without callees
        assert fn(x) is None
        engine = load_engine(fn.get_concrete_function(x).executable("cpu").engine_source)
    (*_, library), = engine._linked.values()
    assert library.addresses == [] and library.engine != 0
    assert len(library._libraries) == 1, "the engine alone, in one part"


_INVARIANT_BRANCH = """
declare void @left(i64)
declare void @right(i64)
define void @sweep(i64 %n, i1 %c) {
entry:
  br label %head
head:
  %i = phi i64 [0, %entry], [%next, %latch]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %body, label %done
body:
  br i1 %c, label %a, label %b
a:
  call void @left(i64 %i)
  br label %latch
b:
  call void @right(i64 %i)
  br label %latch
latch:
  %next = add i64 %i, 1
  br label %head
done:
  ret void
}
"""


def test__part_compiler__a_codelet_part_is_optimised_at_the_codelet_level() -> None:
    empty = ll.parse_assembly("").as_bitcode()
    loops = {}
    for level in (None, machine.CODELET_LEVEL):
        with machine.PartCompiler(1) as compiler:
            code = compiler.submit(machine.Part(empty, [_INVARIANT_BRANCH], simplify=[False], level=level)).result()
        loops[level] = str(ll.parse_bitcode(code.bitcode)).count("phi i64")
    # why: at Numba's level 3, LLVM copies the loop for each value of the condition that does not vary in it
    # (non-trivial unswitching); level 2 keeps one loop, and compiles the Keras CNN's codelets a quarter faster
    assert loops == {None: 2, machine.CODELET_LEVEL: 1}


def _trapping_chain(x):
    return tf.tanh(0.7 * x + 0.1) * tf.sigmoid(x) - 0.5 * x


def test__a_codelet_with_floating_point_traps__is_vectorised(tmp_path, fresh_ipu_system) -> None:
    from popjit import ipu

    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = 1
    fp = cfg.floating_point_behaviour
    fp.inv = fp.div0 = fp.oflo = True
    cfg.configure_ipu_system()
    compiled: list[tuple[machine.Part, machine.ObjectCode]] = []
    compile_part = machine._compile

    def recorded(part: machine.Part, assembly: bool) -> machine.ObjectCode:
        code = compile_part(part, assembly)
        compiled.append((part, code))
        return code

    machine._compile = recorded
    executable_cache.clear()
    compile_module._ENGINES.clear()
    units, library._UNITS = library._UNITS, library._Units()  # why: compiled here, not found
    x = np.linspace(-3, 3, 4096, dtype=np.float32)
    try:
        with config.context(CACHE_DIR=str(tmp_path)), ipu.ipu_strategy.IPUStrategy().scope():
            out = ipu.ipu_strategy.IPUStrategy().run(tf.function(_trapping_chain, jit_compile=True), args=(x,))
    finally:
        machine._compile = compile_part
        library._UNITS = units
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(out.numpy(), np.tanh(0.7 * x64 + 0.1) / (1 + np.exp(-x64)) - 0.5 * x64,
                               rtol=1e-5, atol=1e-6)
    optimised = "\n".join(str(ll.parse_bitcode(code.bitcode)) for part, code in compiled if part.optimize)
    # why: without Numba's function passes before the module pipeline, the flags or-ed in the loop kept
    # LLVM from vectorising it, and the benchmark chain ran 6-7x slower (11x in float16)
    assert re.search(r"<\d+ x float>", optimised), "the trap-checking codelet's loop is vectorised"
    assert any(any(part.simplify) for part, _ in compiled), "after Numba's function passes"
