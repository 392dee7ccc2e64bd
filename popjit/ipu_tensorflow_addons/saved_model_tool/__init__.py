"""``ipu_tensorflow_addons.saved_model_tool``: Graphcore's converter of TensorFlow SavedModels into IPU
programs. popjit reads no SavedModels: every name in it (``converter``, ``saved_model_tool``...)
raises ``UnimplementedError`` (an ``ImportError`` for ``from ... import``) saying so."""

from typing import NoReturn

from popjit.errors import unimplemented_name

MESSAGE = ("ipu_tensorflow_addons.saved_model_tool is not implemented by popjit: it converts TensorFlow SavedModels "
           "into IPU programs, and popjit reads no SavedModels. Run the model's Python code under `popjit run` "
           "instead.")


def __getattr__(name: str) -> NoReturn:
    if name.startswith("__"):
        raise AttributeError(name)
    raise unimplemented_name(name, MESSAGE)
