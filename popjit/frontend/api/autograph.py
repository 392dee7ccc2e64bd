"""``tf.autograph``: inspect or switch off autograph's conversion of a function."""

from collections.abc import Callable as _Callable
from types import SimpleNamespace as _Namespace
from typing import Any as _Any

from popjit.frontend.autograph import convert as _convert
from popjit.frontend.autograph import do_not_convert, to_code  # noqa: F401

experimental = _Namespace(do_not_convert=do_not_convert)


def to_graph(entity: _Callable, recursive: bool = True, experimental_optional_features: _Any = None) -> _Callable:
    """The converted Python function (``tf.autograph.to_graph``)."""
    return _convert(entity)
