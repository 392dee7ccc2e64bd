"""``tensorflow.compiler.plugin.poplar``: Graphcore's op wrappers (``ops``)."""

from popjit.errors import missing_attributes as _missing_attributes

__getattr__ = _missing_attributes("tf.compiler.plugin.poplar")
