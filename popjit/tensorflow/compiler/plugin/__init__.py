"""``tensorflow.compiler.plugin``: Graphcore's ``poplar`` plugin package."""

from popjit.errors import missing_attributes as _missing_attributes

__getattr__ = _missing_attributes("tf.compiler.plugin")
