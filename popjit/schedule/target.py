"""The virtual IPU: hardware figures of ipu1 (GC2) and ipu2 (GC200), ``spec/ipu_arch.md`` §0."""

from __future__ import annotations

from dataclasses import dataclass, replace

from popjit import dtypes
from popjit.dtypes import DType


@dataclass(frozen=True)
class Target:
    """One virtual IPU's figures. ``tiles`` may be shrunk (``ipu_model.tiles_per_ipu``)."""

    version: str = "ipu2"
    tiles: int = 1472
    bytes_per_tile: int = 638_976
    workers: int = 6
    clock_hz: float = 1.33e9
    exchange_bytes_per_cycle: int = 4
    sync_cycles: int = 150
    host_sync_cycles: int = 600
    amp_flops_fp32: int = 32
    amp_flops_fp16: int = 128
    host_bytes_per_second: float = 32e9
    num_ipus: int = 1
    ipu_model: bool = False

    def vector_width(self, dtype: DType) -> int:
        """Elements per 64-bit vector op: float 2, half 4, 32-bit ints 1."""
        if dtype == dtypes.float16:
            return 4
        if dtype in (dtypes.float32,):
            return 2
        return 1

    def min_elements_per_tile(self, dtype: DType) -> int:
        """Poplar's linear mapping puts at least 128 bytes on a tile."""
        return max(1, -(-128 // dtype.size))

    def with_tiles(self, tiles: int) -> Target:
        return replace(self, tiles=tiles) if tiles else self

    @property
    def total_bytes(self) -> int:
        return self.tiles * self.bytes_per_tile


IPU2 = Target()
IPU1 = Target(version="ipu1", tiles=1216, bytes_per_tile=262_144, clock_hz=1.6e9, amp_flops_fp32=16, amp_flops_fp16=64)
VERSIONS = {"ipu2": IPU2, "ipu1": IPU1, "ipu21": Target(version="ipu21", clock_hz=1.85e9)}


def make_target(version: str = "ipu2", tiles_per_ipu: int = 0, num_ipus: int = 1, ipu_model: bool = False) -> Target:
    """The target for an IPU version with an optional tile count (0: the version's full count)."""
    try:
        base = VERSIONS[version]
    except KeyError:
        raise ValueError(f"Unknown IPU version {version!r}; expected one of {sorted(VERSIONS)}") from None
    return replace(base.with_tiles(tiles_per_ipu), num_ipus=num_ipus, ipu_model=ipu_model)
