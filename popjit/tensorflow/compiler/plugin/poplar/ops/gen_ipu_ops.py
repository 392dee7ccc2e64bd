"""``gen_ipu_ops`` (SDK 1.x): ``ipu_event_trace()``, the IPU's trace events since the last call.

SDK 1.x recorded compile and execution events (with their reports) only when the system was configured
with ``create_ipu_config(profiling=True)`` or ``enable_ipu_events=True``; otherwise the trace is empty.
popjit refuses those two options (its profiles come from ``POPLAR_ENGINE_OPTIONS``, docs/profiles.md),
so here the trace is always empty: an empty array of serialized events, as SDK 1.x gave without them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popjit.errors import missing_attributes as _missing_attributes
from popjit.frontend import graph_mode


def _no_events() -> np.ndarray:
    return np.empty(0, dtype=object)


def ipu_event_trace(name: str | None = None) -> Any:
    """The serialized trace events recorded since the last call: none, as event recording is off (see the
    module docstring). In a TF1 graph, an operation whose fetched value they are."""
    trace = graph_mode.current_graph_trace()
    if trace is not None:
        return graph_mode.Operation(trace, "ipu_event_trace", fetch=_no_events)
    return _no_events()


__getattr__ = _missing_attributes("tf.compiler.plugin.poplar.ops.gen_ipu_ops")
