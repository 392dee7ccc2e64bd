"""``tf.autograph``: inspect or switch off autograph's conversion of a function."""

from collections.abc import Callable as _Callable
from typing import Any as _Any

from popjit.errors import missing_api as _missing_api
from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend.autograph import convert as _convert
from popjit.frontend.autograph import do_not_convert, to_code  # noqa: F401


class _Experimental:
    """``tf.autograph.experimental``: ``do_not_convert``; other names are not implemented."""

    do_not_convert = staticmethod(do_not_convert)

    def __getattr__(self, name: str) -> _Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise _missing_api("tf.autograph.experimental", name)


experimental = _Experimental()


def to_graph(entity: _Callable, recursive: bool = True, experimental_optional_features: _Any = None) -> _Callable:
    """The converted Python function (``tf.autograph.to_graph``)."""
    return _convert(entity)


__getattr__ = _missing_attributes("tf.autograph")
