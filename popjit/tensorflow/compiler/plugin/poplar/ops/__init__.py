"""``tensorflow.compiler.plugin.poplar.ops``: the generated op modules SDK 1.x scripts import directly
(``gen_ipu_ops``)."""

from popjit.errors import missing_attributes as _missing_attributes

__getattr__ = _missing_attributes("tf.compiler.plugin.poplar.ops")
