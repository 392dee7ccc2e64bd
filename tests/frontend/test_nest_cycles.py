"""Rebuilding a structure (``nest.unflatten``) leaves no reference cycle behind: a run's results are freed as
soon as the caller drops them, not at the next garbage collection (their memory is then reused, instead of
every run writing its results into freshly mapped pages)."""

from __future__ import annotations

import gc
import weakref
from collections import namedtuple
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

import popjit.tensorflow as tf
from popjit.frontend import nest

Pair = namedtuple("Pair", "a b")


@contextmanager
def no_garbage_collection() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class Leaf:
    pass


def test__unflatten__keeps_no_leaf_alive_once_the_result_is_dropped():
    structure = {"x": [1, (2, 3)], "y": Pair(4, {"z": 5})}
    leaves, tree = nest.flatten_with_tree(structure)
    with no_garbage_collection():
        new = [Leaf() for _ in leaves]
        refs = [weakref.ref(leaf) for leaf in new]
        out = nest.unflatten(tree, new)
        rebuilt = nest.flatten(out) == new and isinstance(out["y"], Pair) and isinstance(out["x"][1], tuple)
        del new, out
        alive = sum(r() is not None for r in refs)  # why not in the assert: pytest keeps an assert's operands
        assert rebuilt
        assert alive == 0


def test__a_compiled_functions_results__are_freed_when_dropped():
    @tf.function(jit_compile=True)
    def f(x):
        return {"double": x * 2.0, "pair": (tf.tanh(x), x - 1.0)}

    x = np.linspace(-1, 1, 16).astype(np.float32)
    f(x)
    with no_garbage_collection():
        out = f(x)
        refs = [weakref.ref(t) for t in nest.flatten(out)]
        np.testing.assert_allclose(out["double"].numpy(), x * 2.0)
        del out
        alive = sum(r() is not None for r in refs)
        assert alive == 0
