"""The virtual IPU: hardware figures of ipu1 (GC2) and ipu2 (GC200), ``docs/ipu_hardware.md`` §1.

Figures tagged [V] in the spec are facts; the ones marked ``[U]`` below are tunable estimates
(Graphcore never published them): exchange rate, sync delays, atomic store granularity, memcpy
rate and host bandwidth.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from popjit import dtypes
from popjit.dtypes import DType

#: Poplar's default ``availableMemoryProportion`` of matmuls and convolutions [V] (``poplin/MatMul.cpp``).
DEFAULT_MEMORY_PROPORTION = 0.6


@dataclass(frozen=True)
class PlanOptions:
    """What the matmul and convolution planner is told (PopLibs' options of the same names):

    - ``available_memory_proportion``: the part of a tile's memory a plan's temporaries may take
      (``availableMemoryProportion``, default 0.6; 0 asks for the least memory);
    - ``half_partials``: accumulate half-precision products in half (``partialsType='half'``); float
      products always accumulate in float.
    """

    available_memory_proportion: float = DEFAULT_MEMORY_PROPORTION
    half_partials: bool = False

    def describe(self) -> str:
        partials = "half" if self.half_partials else "float"
        return f"availableMemoryProportion {self.available_memory_proportion:g}, partialsType {partials}"


DEFAULT_PLAN_OPTIONS = PlanOptions()


@dataclass(frozen=True)
class Target:
    """One virtual IPU's figures. ``tiles`` may be shrunk (``ipu_model.tiles_per_ipu``).

    - ``exchange_bytes_per_cycle`` 4 [U, strong D]: matches the published ≈8 TB/s exchange.
    - ``sync_cycles`` 150 [U]: internal (one IPU) sync; ``host_sync_cycles`` 600 [U].
    - ``atomic_store_bytes`` 4 [U]: the element-wise grain is at least this many bytes.
    - ``memcpy_bytes_per_cycle`` 8 [U]: on-tile copies (64-bit load + store per cycle).
    - ``host_bytes_per_second`` 32 GB/s [S]: one direction of PCIe Gen4 x16.
    - ``matmul_options`` / ``convolution_options``: the planner's options for matmuls and for convolutions
      (``IPUConfig.matmuls.poplar_options``, ``convolutions.poplar_options``); the temporary-memory bound
      defaults to 0.6 of a tile [V].
    - ``replicas``: how many copies of the program run, one per IPU of the device (1: not replicated).
    - ``link_bytes_per_second`` 32 GB/s [S]: one direction of one IPU-Link (64 GB/s bidirectional),
      what a ring collective moves between neighbouring IPUs; ``link_latency_cycles`` 700 [U]: one
      step of such a ring (a message over a link and the sync around it).
    """

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
    atomic_store_bytes: int = 4
    memcpy_bytes_per_cycle: int = 8
    instruction_bytes: int = 4
    matmul_options: PlanOptions = DEFAULT_PLAN_OPTIONS
    convolution_options: PlanOptions = DEFAULT_PLAN_OPTIONS
    replicas: int = 1
    link_bytes_per_second: float = 32e9
    link_latency_cycles: int = 700

    def __hash__(self) -> int:
        """A hash of the fields that tell targets apart in practice (equal targets hash alike). why not
        the dataclass's: each program run looks its executable up by target, and hashing every field,
        the plan options' too, took microseconds of it."""
        return hash((self.version, self.tiles, self.num_ipus, self.replicas, self.ipu_model))

    def vector_width(self, dtype: DType) -> int:
        """Elements per 64-bit data-path operation (Poplar ``getVectorWidth``): float 2, half 4,
        int32 2, 8-bit types 8, 64-bit types 1."""
        return max(1, 8 // dtype.size)

    def grain(self, dtype: DType) -> int:
        """The element-wise grain: ``max(vector width, atomic store granularity)`` in elements."""
        return max(self.vector_width(dtype), max(1, self.atomic_store_bytes // dtype.size))

    def min_elements_per_tile(self, dtype: DType) -> int:
        """Poplar's linear mapping puts at least 128 bytes on a tile."""
        return max(1, -(-128 // dtype.size))

    def conv_units(self, dtype: DType) -> int:
        """AMP conv units for this input type [D]: half 16 on ipu2 (8 on ipu1), float the same
        counts from the fp32 peak (``amp_flops_fp32 / 2``)."""
        return self.amp_flops_fp16 // 8 if dtype == dtypes.float16 else self.amp_flops_fp32 // 2

    def amp_in_channels(self, dtype: DType) -> int:
        """Input channels per AMP group: 16 for half, 8 for float [V]."""
        return 16 if dtype == dtypes.float16 else 8

    def plan_options(self, convolution: bool) -> PlanOptions:
        """The planner's options for a convolution's matmul or a plain one."""
        return self.convolution_options if convolution else self.matmul_options

    def with_tiles(self, tiles: int) -> Target:
        return replace(self, tiles=tiles) if tiles else self

    @property
    def link_bytes_per_cycle(self) -> float:
        """IPU-Link bytes one direction of a link carries per tile clock cycle."""
        return self.link_bytes_per_second / self.clock_hz

    @property
    def total_bytes(self) -> int:
        return self.tiles * self.bytes_per_tile

    def describe(self) -> str:
        """One line: version, tiles, memory per tile and clock."""
        model = ", IPU Model" if self.ipu_model else ""
        return (f"{self.version} ({self.tiles} tiles x {self.bytes_per_tile:,} B, "
                f"{self.clock_hz / 1e9:.2f} GHz{model})")


IPU2 = Target()
IPU1 = Target(version="ipu1", tiles=1216, bytes_per_tile=262_144, clock_hz=1.6e9, amp_flops_fp32=16, amp_flops_fp16=64)
VERSIONS = {"ipu2": IPU2, "ipu1": IPU1, "ipu21": Target(version="ipu21", clock_hz=1.85e9)}


@functools.lru_cache(maxsize=64)
def make_target(version: str = "ipu2", tiles_per_ipu: int = 0, num_ipus: int = 1, ipu_model: bool = False,
                matmul_options: PlanOptions = DEFAULT_PLAN_OPTIONS,
                convolution_options: PlanOptions = DEFAULT_PLAN_OPTIONS) -> Target:
    """The target for an IPU version with an optional tile count (0: the version's full count) and the
    planner's options. Made once per combination: a program's target is looked up on every call
    (``dataclasses.replace`` cost 30 us of it)."""
    try:
        base = VERSIONS[version]
    except KeyError:
        raise ValueError(f"Unknown IPU version {version!r}; expected one of {sorted(VERSIONS)}") from None
    return replace(base.with_tiles(tiles_per_ipu), num_ipus=num_ipus, ipu_model=ipu_model,
                   matmul_options=matmul_options, convolution_options=convolution_options)
