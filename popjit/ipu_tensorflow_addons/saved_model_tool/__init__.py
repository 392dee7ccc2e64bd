"""``ipu_tensorflow_addons.saved_model_tool``: Graphcore's converter of TensorFlow SavedModels into IPU
programs. popjit reads no SavedModels: every name in it (``converter``, ``saved_model_tool``...)
raises ``UnimplementedError`` (an ``ImportError`` for ``from ... import``) saying so."""

import sys
from typing import NoReturn

from popjit.errors import unimplemented_name
from popjit.support import mark_stub, unimplemented_message

MESSAGE = unimplemented_message("ipu_tensorflow_addons.saved_model_tool")
mark_stub("ipu_tensorflow_addons.saved_model_tool")(sys.modules[__name__])  # `popjit check` reports it


def __getattr__(name: str) -> NoReturn:
    if name.startswith("__"):
        raise AttributeError(name)
    raise unimplemented_name(name, MESSAGE)
