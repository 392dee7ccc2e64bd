"""``ipu.scopes``: device and compilation scopes.

``ipu_scope(device)`` is the working part: ``with ipu.scopes.ipu_scope('/device:IPU:0'):`` places
what is built inside on that IPU, as ``tf.device`` does (every traced function is compiled for the
IPU anyway, so no separate JIT scope is needed). The sharding, outside-compilation and numerics
scopes are not implemented yet and raise ``UnimplementedError`` naming themselves when called.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NoReturn

from popjit.errors import UnimplementedError, missing_attributes
from popjit.frontend.device import device as tf_device
from popjit.runtime.device import canonical


@contextlib.contextmanager
def ipu_scope(device: str) -> Iterator[None]:
    """Build and run everything inside on ``device`` (e.g. ``'/device:IPU:0'``)."""
    with tf_device(canonical(device)):
        yield


@contextlib.contextmanager
def ipu_jit_scope(ipu_scope: Any) -> Iterator[None]:
    """Mark a region for XLA compilation. A no-op here: every traced function is compiled whole."""
    yield


def _unimplemented(name: str, what: str) -> NoReturn:
    raise UnimplementedError(
        f"ipu.scopes.{name} is not implemented in popjit yet ({what}). Remove it, or run the program without it."
    )


def ipu_shard(index: Any) -> NoReturn:
    """Manual sharding over the IPUs of a multi-IPU device (not implemented yet)."""
    _unimplemented("ipu_shard", "manual sharding of a program over several IPUs")


def outside_compilation_scope(name: str = "outside") -> NoReturn:
    """Host-side operations in the middle of an IPU program (not implemented yet)."""
    _unimplemented("outside_compilation_scope", "running part of a compiled program on the host")


def frontend_attribute(attribute_name: str, attribute_value: Any, restore_to: Any = None) -> NoReturn:
    """Attach a backend attribute to the operations inside (not implemented yet)."""
    _unimplemented("frontend_attribute", "per-operation backend attributes")


def stochastic_rounding(override: bool) -> NoReturn:
    """Turn stochastic rounding on or off for the operations inside (not implemented yet; the whole
    program's is ``IPUConfig.floating_point_behaviour.esr``)."""
    _unimplemented("stochastic_rounding", "per-operation stochastic rounding; IPUConfig.floating_point_behaviour.esr "
                   "turns it on or off for whole programs")


def partials_type(override_type: Any) -> NoReturn:
    """The type of the partial sums of matmuls and convolutions inside (not implemented yet)."""
    _unimplemented("partials_type", "per-operation partials type")

__getattr__ = missing_attributes("ipu.scopes")
