"""``tensorflow.python`` for popjit: ``from popjit.tensorflow.python import ipu``.

``popjit.tensorflow.python.ipu`` and every module below it are *aliases* of ``popjit.ipu`` and
its modules (the same module objects, so ``ipu.config.IPUConfig is popjit.ipu.config.IPUConfig``),
resolved by an import finder; a module added to ``popjit/ipu/`` is importable under both names
without any file here.
"""

from popjit.aliases import alias_package

alias_package("popjit.tensorflow.python.ipu", "popjit.ipu")

from popjit.tensorflow.python import ipu  # noqa: E402, F401
