"""``tf.nest``: flatten and rebuild nested lists, tuples, namedtuples and dicts.

Dicts flatten in sorted-key order, as in TensorFlow. Everything else is a leaf.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

Tree = Any  # a hashable description of a structure


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def _sorted_keys(d: Mapping) -> list:
    try:
        return sorted(d)
    except TypeError:
        return sorted(d, key=repr)


def is_nested(x: Any) -> bool:
    return isinstance(x, (list, tuple, dict, Mapping))


def flatten_with_tree(structure: Any) -> tuple[list[Any], Tree]:
    """Leaves in order, and a hashable tree that :func:`unflatten` rebuilds from."""
    if type(structure) is tuple and len(structure) == 2 and type(structure[1]) is dict and not structure[1] \
            and type(structure[0]) is tuple and not any(isinstance(x, (list, tuple, Mapping)) for x in structure[0]):
        # why: the fast path for a call's (args, kwargs) with flat positional arguments, every call
        n = len(structure[0])
        return list(structure[0]), ("tuple", (("tuple", (None,) * n), ("dict", dict, (), ())))
    leaves: list[Any] = []
    tree = _walk(structure, leaves)
    return leaves, tree


def _walk(x: Any, leaves: list[Any]) -> Tree:
    """``x``'s tree, its leaves appended to ``leaves``. why not a closure: see :func:`_build`."""
    if _is_namedtuple(x):
        return ("namedtuple", type(x), tuple(_walk(v, leaves) for v in x))
    if isinstance(x, (list, tuple)):
        return (type(x).__name__ if type(x) in (list, tuple) else ("seq", type(x)), tuple(_walk(v, leaves) for v in x))
    if isinstance(x, Mapping):
        keys = _sorted_keys(x)
        return ("dict", type(x), tuple(keys), tuple(_walk(x[k], leaves) for k in keys))
    leaves.append(x)
    return None


def unflatten(tree: Tree, leaves: list[Any]) -> Any:
    """``tree``'s structure (from :func:`flatten_with_tree`) rebuilt around ``leaves``, in order."""
    return _build(tree, iter(leaves))


def _build(t: Tree, it: Iterator[Any]) -> Any:
    """why not a closure: a recursive inner function is a reference cycle (function, its cell), which
    kept the leaves (a run's results, 16 MB each in the chain benchmark) alive until the next garbage
    collection, so every run's results came from fresh memory: page faults costing as much as the run."""
    if t is None:
        return next(it)
    tag = t[0]
    if tag == "namedtuple":
        return t[1](*[_build(c, it) for c in t[2]])
    if tag == "dict":
        return t[1]({k: _build(c, it) for k, c in zip(t[2], t[3])})
    if tag == "list":
        return [_build(c, it) for c in t[1]]
    if tag == "tuple":
        return tuple(_build(c, it) for c in t[1])
    return tag[1](_build(c, it) for c in t[1])


def flatten(structure: Any, expand_composites: bool = False) -> list[Any]:
    """All leaves of ``structure`` in order (dicts by sorted key)."""
    return flatten_with_tree(structure)[0]


def pack_sequence_as(structure: Any, flat_sequence: list[Any], expand_composites: bool = False) -> Any:
    """Rebuild ``structure``'s shape from ``flat_sequence``."""
    leaves, tree = flatten_with_tree(structure)
    flat_sequence = list(flat_sequence)
    if len(leaves) != len(flat_sequence):
        raise ValueError(
            f"Could not pack sequence. Structure had {len(leaves)} atoms, but flat_sequence had "
            f"{len(flat_sequence)} items."
        )
    return unflatten(tree, flat_sequence)


def map_structure(func: Callable[..., Any], *structures: Any, **kwargs: Any) -> Any:
    """Apply ``func`` to corresponding leaves of structures of the same shape."""
    flats = [flatten_with_tree(s) for s in structures]
    trees = {repr(t) for _, t in flats}
    if len(trees) > 1:
        raise ValueError("The two structures don't have the same nested structure.")
    return unflatten(flats[0][1], [func(*xs) for xs in zip(*(f for f, _ in flats))])


def assert_same_structure(a: Any, b: Any, check_types: bool = True, expand_composites: bool = False) -> None:
    if repr(flatten_with_tree(a)[1]) != repr(flatten_with_tree(b)[1]):
        raise ValueError(f"The two structures don't have the same nested structure: {a!r} vs {b!r}")
