"""The floating-point behaviour a program is compiled with: ``IPUConfig.floating_point_behaviour``.

On the IPU these are bits of each tile's floating-point control register, set before the program
runs (Poplar's ``FloatingPointBehaviour``):

- ``inv``, ``div0``, ``oflo``: trap (stop the program with an exception) on an invalid operation
  (a NaN result or operand, e.g. 0/0, inf - inf, sqrt(-1), a NaN compared or cast to an integer),
  a division by zero of a finite non-zero value, or an overflow (a finite result too large for its
  type, float16 included);
- ``sr`` (``esr``): round float32 results to float16 stochastically;
- ``nanoo``: a float16 result that overflows becomes NaN (and, as on the IPU, an invalid operation).

They change the generated code, so they are part of every IPU program's compile key; a program
compiled with :data:`DEFAULT` renders exactly as it would without them.
"""

from __future__ import annotations

from dataclasses import dataclass

from popjit.kernels.traps import DIV0, INV, OFLO

#: How the engine reports a trap: ``TRAPPED | mask | (compute set << 8)`` (1 is an interrupt, 0 success).
TRAPPED = 16

_TRAP_NAMES = ((INV, "invalid operation"), (DIV0, "division by zero"), (OFLO, "overflow"))


@dataclass(frozen=True)
class Numerics:
    """Traps, stochastic rounding and NaN-on-overflow of one program (all off by default)."""

    inv: bool = False
    div0: bool = False
    oflo: bool = False
    sr: bool = False
    nanoo: bool = False

    @property
    def traps(self) -> int:
        """The mask of the traps switched on."""
        return (INV if self.inv else 0) | (DIV0 if self.div0 else 0) | (OFLO if self.oflo else 0)

    def describe(self) -> str:
        """``inv, oflo, esr`` (the options on), or ``default``."""
        on = [name for name, flag in (("inv", self.inv), ("div0", self.div0), ("oflo", self.oflo),
                                      ("esr", self.sr), ("nanoo", self.nanoo)) if flag]
        return ", ".join(on) or "default"


DEFAULT = Numerics()


def trap_names(mask: int) -> list[str]:
    """The exceptions in a trap mask, e.g. ``['division by zero']``."""
    return [name for bit, name in _TRAP_NAMES if mask & bit]
