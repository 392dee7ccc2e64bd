"""popjit: run Graphcore IPU TensorFlow programs on a CPU, natively, with virtual-IPU cost reports.

    import popjit.tensorflow as tf              # TensorFlow-compatible namespace
    from popjit.tensorflow.python import ipu    # Graphcore's IPU API, same module names
    from popjit import ipu, tf_function         # short forms; tf_function is tf.function

Pipeline: frontend (trace) → graph IR → passes → loop IR → tile schedule → Numba codegen → engine.
"""

import os as _os

# why: in a source checkout `kernels/` sits beside `popjit/` (installs map it to `popjit.kernels`);
# adding the checkout root to this package's search path makes `popjit.kernels` resolve there too.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_root, "kernels", "__init__.py")) and _root not in __path__:
    __path__.append(_root)

from popjit import ipu  # noqa: E402, F401
from popjit.frontend.function import function as tf_function  # noqa: E402, F401

__version__ = "0.1.0"
