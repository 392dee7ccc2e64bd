"""popjit: run Graphcore IPU TensorFlow programs on a CPU, natively, with virtual-IPU cost reports.

    import popjit.tensorflow as tf              # TensorFlow-compatible namespace
    from popjit.tensorflow.python import ipu    # Graphcore's IPU API, same module names
    from popjit import ipu, tf_function         # short forms; tf_function is tf.function

Pipeline: frontend (trace) → graph IR → passes → loop IR → tile schedule → Numba codegen → engine.
"""

from popjit import ipu  # noqa: F401
from popjit.frontend.function import function as tf_function  # noqa: F401

__version__ = "0.1.0"
