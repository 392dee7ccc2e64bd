"""``ipu.scopes``: device and compilation scopes.

``ipu_scope(device)``: ``with ipu.scopes.ipu_scope('/device:IPU:0'):`` places what is built inside on
that IPU, as ``tf.device`` does (every traced function is compiled for the IPU anyway, so no separate
JIT scope is needed). ``ipu_shard(i)`` places ops on shard i of a multi-IPU program. The
outside-compilation and numerics scopes are not implemented yet and raise ``UnimplementedError``
naming themselves when called.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NoReturn

from popjit.compat.v1.variable_scope import get_variable_scope, variable_scope
from popjit.errors import missing_attributes, unimplemented_stub
from popjit.frontend.device import device as tf_device
from popjit.frontend.tracing import current_trace
from popjit.runtime.device import canonical


@contextlib.contextmanager
def ipu_scope(device: str) -> Iterator[None]:
    """Build and run everything inside on ``device`` (e.g. ``'/device:IPU:0'``); TF1 variables made inside
    are resource variables (a ``use_resource=True`` variable scope), as Graphcore's scope makes them."""
    with tf_device(canonical(device)), variable_scope(get_variable_scope(), use_resource=True):
        yield


@contextlib.contextmanager
def ipu_jit_scope(ipu_scope: Any) -> Iterator[None]:
    """Mark a region for XLA compilation. A no-op here: every traced function is compiled whole."""
    yield


@contextlib.contextmanager
def ipu_shard(index: int) -> Iterator[None]:
    """Place the operations built inside on shard (IPU) ``index`` of the program's device: a program whose
    ops use shards ``0..S-1`` spans S IPUs, and a device of N IPUs runs it as N / S replicas (more
    shards than IPUs fails when it compiles). The values are those of the unsharded program; the IPU
    estimate maps each shard's tensors and compute sets on its own IPU, with inter-IPU copies where a
    tensor crosses from one shard to another (gradients follow their forward ops)."""
    if type(index) is not int or index < 0:
        raise ValueError(f"ipu_shard: the shard index must be a non-negative int, not {index!r}.")
    trace = current_trace()
    if trace is None:
        yield
        return
    with trace.placed(index):
        yield


@unimplemented_stub("ipu.scopes.outside_compilation_scope")
def outside_compilation_scope(name: str = "outside") -> NoReturn:
    """Host-side operations in the middle of an IPU program (not implemented yet)."""


@unimplemented_stub("ipu.scopes.frontend_attribute")
def frontend_attribute(attribute_name: str, attribute_value: Any, restore_to: Any = None) -> NoReturn:
    """Attach a backend attribute to the operations inside (not implemented yet)."""


@unimplemented_stub("ipu.scopes.stochastic_rounding")
def stochastic_rounding(override: bool) -> NoReturn:
    """Turn stochastic rounding on or off for the operations inside (not implemented yet; the whole
    program's is ``IPUConfig.floating_point_behaviour.esr``)."""


@unimplemented_stub("ipu.scopes.partials_type")
def partials_type(override_type: Any) -> NoReturn:
    """The type of the partial sums of matmuls and convolutions inside (not implemented yet)."""


__getattr__ = missing_attributes("ipu.scopes")
