"""``tensorflow.compiler``: only Graphcore's ``tensorflow.compiler.plugin.poplar.ops`` (SDK 1.x scripts import it)."""

from popjit.errors import missing_attributes as _missing_attributes

__getattr__ = _missing_attributes("tf.compiler")
