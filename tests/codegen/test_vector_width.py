"""Element-wise codelets use the host's widest vectors (512-bit on AVX-512), reductions LLVM's preferred width."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import llvmlite.binding as ll
import numpy as np
import pytest

import popjit.tensorflow as tf
from popjit.codegen.render import WIDEST_VECTORS

AVX512 = "+avx512f" in ll.get_host_cpu_features().flatten().split(",")

SCRIPT = textwrap.dedent("""
    import llvmlite.binding as llvm
    import numpy as np
    import popjit.tensorflow as tf
    from popjit.codegen.compile import load_engine
    from popjit.codegen.render import WIDEST_VECTORS

    @tf.function(jit_compile=True)
    def f(x):
        return tf.tanh(x) * tf.sigmoid(x), tf.reduce_sum(x * x, axis=1)

    x = np.ones((512, 512), np.float32)
    f(x)
    src = f.get_concrete_function(x).executable("cpu").engine_source
    # each codelet's symbol: a unit's (popjit.unit.<key>), found by the address the engine calls it at
    (_, addresses, library), = load_engine(src)._linked.values()
    symbols = {}
    for serialized, loaded in library.unit_parts:
        for fn in llvm.parse_bitcode(serialized[2][1]).functions:
            if not fn.is_declaration and loaded.get_pointer_to_function(fn.name):
                symbols[loaded.get_pointer_to_function(fn.name)] = fn.name
    for callee, address in zip(src.callees, addresses):
        if callee.name in src.codelets:
            print(symbols[int(address)], WIDEST_VECTORS in src.codelets[callee.name].source)
""")


def _functions(assembly: str) -> dict[str, str]:
    """Each function's assembly, by symbol (``popjit.unit.<key>`` for a codelet)."""
    found: dict[str, str] = {}
    current = None
    for line in assembly.splitlines():
        declared = re.match(r"\s*\.type\s+([\w.]+),@function", line)
        if declared:
            current = declared.group(1)
            found[current] = ""
        elif line.startswith(".Lfunc_end"):
            current = None
        elif current is not None:
            found[current] += line + "\n"
    return found


@pytest.mark.skipif(not AVX512, reason="the host has no AVX-512")
def test__element_wise_codelets__use_512_bit_vectors_and_reductions_do_not(tmp_path):
    env = {**os.environ, "POPJIT_DEBUG": "7", "POPJIT_CACHE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    wide = dict(line.split() for line in r.stdout.splitlines())
    functions = _functions(r.stderr.split("=== popjit: machine code of program library ", 1)[1])
    seen = set()
    for name, body in functions.items():
        if name in wide:
            seen.add(name)
            assert ("zmm" in body) == (wide[name] == "True"), f"{name} (element-wise: {wide[name]})"
    assert seen == set(wide) and set(wide.values()) == {"True", "False"}, (wide, sorted(functions))


def test__only_element_wise_codelets__are_marked_for_the_widest_vectors():
    @tf.function(jit_compile=True)
    def f(x):
        return tf.exp(x) - 1.0, tf.reduce_max(x, axis=0), tf.cumsum(x, axis=1)

    x = np.ones((8, 8), np.float32)
    f(x)
    codelets = f.get_concrete_function(x).executable("cpu").engine_source.codelets.values()
    marked = sorted(WIDEST_VECTORS in r.source for r in codelets)
    assert marked == [False, False, True], [r.source for r in codelets]
