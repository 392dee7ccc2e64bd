"""popjit: run Graphcore IPU TensorFlow programs on a CPU, natively, with virtual-IPU cost reports.

    import popjit.tensorflow as tf              # TensorFlow-compatible namespace
    from popjit.tensorflow.python import ipu    # Graphcore's IPU API, same module names
    from popjit import ipu, tf_function         # short forms; tf_function is tf.function

Pipeline: frontend (trace) → graph IR → passes → loop IR → tile schedule → Numba codegen → engine.
The layers, bottom to top, are listed in ``docs/pipeline.md``; ``tests/test_layers.py`` enforces them.
"""

import os as _os

# why: in a source checkout `kernels/` sits beside `popjit/` (installs map it to `popjit.kernels`);
# adding the checkout root to this package's search path makes `popjit.kernels` resolve there too.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_root, "kernels", "__init__.py")) and _root not in __path__:
    __path__.append(_root)

__version__ = "0.1.0"

from popjit import config as _config  # noqa: E402  (after __path__ is complete)

_config.configure_logging()  # POPJIT_LOG / TF_CPP_MIN_LOG_LEVEL


def __getattr__(name: str) -> object:
    if name == "ipu":
        # why: importing any popjit module first runs this package's __init__; importing the top layers
        # here would make `import popjit.errors` load all of popjit. The short forms load on first use.
        import popjit.ipu

        return popjit.ipu
    if name == "tf_function":
        # why: as for `ipu` above
        from popjit.frontend.function import function

        return function
    raise AttributeError(f"module 'popjit' has no attribute {name!r}")
