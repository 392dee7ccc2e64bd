"""``tf.autograph``: inspect or switch off autograph's conversion of a function."""

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from popjit.frontend.autograph import convert as _convert
from popjit.frontend.autograph import do_not_convert, to_code  # noqa: F401

experimental = SimpleNamespace(do_not_convert=do_not_convert)


def to_graph(entity: Callable, recursive: bool = True, experimental_optional_features: Any = None) -> Callable:
    """The converted Python function (``tf.autograph.to_graph``)."""
    return _convert(entity)
