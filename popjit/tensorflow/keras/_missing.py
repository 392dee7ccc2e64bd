"""The module-level ``__getattr__`` of the ``tf.keras`` sub-namespaces: a missing name is popjit's
``UnimplementedError`` (also an ``AttributeError``) naming it."""

from collections.abc import Callable
from typing import Any

from popjit.errors import missing_api


def missing(module: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` that reports ``module.<name>`` as not implemented."""

    def module_getattr(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        raise missing_api(module, name)

    return module_getattr
