"""``ipu.config``: :class:`IPUConfig`, the typed tree of IPU system options, and the functions that
apply it (``configure_ipu_system``, ``reset_ipu_configuration``, ``get_ipu_config``).

    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = 1                 # one device, /device:IPU:0, of one IPU
    cfg.ipu_model.tiles_per_ipu = 8          # shrink each IPU (memory per tile unchanged)
    cfg.configure_ipu_system()

The tree behaves as Graphcore's: options are reached by attribute (``cfg.ipu_model.version``), every
leaf is strictly typed (``True`` is not an ``int``), an unknown name raises ``ValueError`` with a
"Did you mean ...?" hint, categories cannot be assigned to, deprecated options log a warning, and
every message uses the option's full dotted name. The whole configuration is checked when it is
applied, so a bad configuration never replaces a working one.

Options that change what popjit builds: ``auto_select_ipus`` / ``select_ipus`` (the devices),
``ipu_model.version`` and ``ipu_model.tiles_per_ipu`` (the virtual IPU's figures),
``device_connection.version`` (the IPU version for PRE_COMPILE/NEVER). The other options are
validated, kept, and visible to the compiler through ``get_ipu_config()``.

The generic option-tree machinery (typed leaves, attribute checks, metadata, serialisation) lives
in :mod:`popjit.ipu._options`; its public names are importable from here as well.
"""

from __future__ import annotations

import copy
import enum
import logging
import typing
from dataclasses import dataclass
from typing import Any

from popjit import config as settings
from popjit.codegen.numerics import DEFAULT, Numerics
from popjit.errors import FailedPreconditionError, InvalidArgumentError, UnimplementedError, missing_attributes
from popjit.flags import poplar_flags
from popjit.ipu._options import (  # noqa: F401  (re-exported: they were defined here, as in Graphcore's module)
    NO_DESCRIPTION,
    AttributeMetadata,
    InvalidConfigAttributeError,
    IPUConfigError,
    _Category,
    _ConfigBase,
    _Option,
    matches_type,
    type_name,
)
from popjit.pipeline import cache
from popjit.runtime import device as devices
from popjit.runtime import instances
from popjit.schedule.target import DEFAULT_PLAN_OPTIONS, VERSIONS, PlanOptions

log = logging.getLogger("popjit")


# -- enums -----------------------------------------------------------------------------------------


class SelectionOrder(enum.Enum):
    """How the IPUs of a multi-IPU device are ordered when shards or pipeline stages are mapped onto them.

    ``AUTO`` picks for the model; ``ZIGZAG`` follows the IPU numbering; ``SNAKE`` makes every
    consecutive pair of shards neighbours over IPU-Links; ``HOOF`` does the same and also brings
    the last shard back next to the first. On popjit's virtual IPUs the choice is recorded but does
    not change exchange costs.
    """

    AUTO = 0
    ZIGZAG = 1
    SNAKE = 2
    HOOF = 3


class ExecutionProfileType(enum.Enum):
    """Granularity of an execution profile (legacy; profiling now goes through ``POPLAR_ENGINE_OPTIONS``)."""

    NO_PROFILE = 0
    DEVICE_PROFILE = 1
    IPU_PROFILE = 2
    TILE_PROFILE = 3


class DeviceConnectionType(enum.Enum):
    """When to attach to the devices.

    ``ALWAYS`` attaches at configure time, ``ON_DEMAND`` at the first execution, ``PRE_COMPILE``
    compiles (and fills the executable cache) without ever attaching, returning zeros, and
    ``NEVER`` compiles, then raises "configured for compilation only" where a program would run. The
    last two need ``device_connection.version`` (see :func:`popjit.runtime.device.execute`).
    """

    ALWAYS = 0
    ON_DEMAND = 1
    NEVER = 2
    PRE_COMPILE = 3


class MergeRemoteBuffersBehaviour(enum.Enum):
    """Whether compatible remote buffers are merged: never, always, or when it allows code re-use."""

    NO_MERGING = 0
    MERGE = 1
    IF_BENEFICIAL = 2


class SchedulingAlgorithm(enum.Enum):
    """The instruction scheduler: ``CHOOSE_BEST`` tries several and keeps the lowest peak liveness."""

    CHOOSE_BEST = 0
    CLUSTERING = 1
    POST_ORDER = 2
    LOOK_AHEAD = 3
    SHORTEST_PATH = 4


class StochasticRoundingBehaviour(enum.Enum):
    """Stochastic rounding: off, on, or on only where every replica computes the same values."""

    OFF = 0
    ON = 1
    REPLICA_IDENTICAL_ONLY = 2

    @staticmethod
    def from_bool(value: bool) -> StochasticRoundingBehaviour:
        """``ON`` for a true value, ``OFF`` otherwise (the old boolean spelling)."""
        return StochasticRoundingBehaviour.ON if value else StochasticRoundingBehaviour.OFF


# -- the options -----------------------------------------------------------------------------------

_Devices = typing.Union[int, typing.List[int], typing.Tuple[int, ...]]  # noqa: UP006, UP007

_POPLAR_OPTIONS_DOC = (
    "Poplar/PopLibs options applied to every {what} in the program: a dict of option name to string "
    "value, e.g. {{'availableMemoryProportion': '0.3'}}."
)


class _ConvolutionConfig(_ConfigBase):
    poplar_options = _Option({}, _POPLAR_OPTIONS_DOC.format(what="convolution"))


class _DeviceConnectionConfig(_ConfigBase):
    type = _Option(DeviceConnectionType.ALWAYS,
                   "When to attach to the IPUs (a DeviceConnectionType): at configure time (ALWAYS), at the "
                   "first execution (ON_DEMAND), or never (PRE_COMPILE fills the executable cache and returns "
                   "zeros; NEVER only compiles).")
    version = _Option("", "The IPU version to compile for when no device is attached: 'ipu1', 'ipu2' or 'ipu21'. "
                          "Required with PRE_COMPILE and NEVER.")
    enable_remote_buffers = _Option(False, "Whether the system the program will run on supports remote buffers, "
                                           "for when the device is not attached at compile time.")


class _SliceConfig(_ConfigBase):
    poplar_options = _Option({}, _POPLAR_OPTIONS_DOC.format(what="multi-slice and multi-update (embedding)"))


class _MultiReplicaDistributionConfig(_ConfigBase):
    process_index = _Option(0, "The index of this process among process_count processes.")
    process_count = _Option(0, "How many processes share the replicas of one program (as started by poprun); "
                               "0 disables multi-replica distribution.")


class _ExperimentalConfig(_ConfigBase):
    always_rearrange_copies_on_the_host = _Option(
        False, "Rearrange streamed data into the device layout on the host rather than on the IPU "
               "(less device work, more latency).")
    enable_remote_buffer_embedding = _Option(False, "Keep host embeddings in Poplar remote buffers.")
    enable_prng_stability = _Option(False, "Manage PRNG seeds so that replicas stay identical under stochastic "
                                           "rounding.")
    multi_replica_distribution = _Category(_MultiReplicaDistributionConfig,
                                           "Spreading the replicas of one program over several processes.")


def _esr_bool_use(value: Any) -> str | None:
    if isinstance(value, bool):
        return ("setting it with a bool; use StochasticRoundingBehaviour.ON or StochasticRoundingBehaviour.OFF "
                "(StochasticRoundingBehaviour.from_bool converts).")
    return None


class _FloatingPointBehaviourConfig(_ConfigBase):
    inv = _Option(False, "Trap on an invalid floating-point operation (IEEE 754): a NaN result or operand, e.g. "
                         "0/0, inf - inf, sqrt(-1), a NaN cast to an integer. The program stops with an "
                         "InternalError and its variables are left as before the call.")
    div0 = _Option(False, "Trap on a floating-point division by zero of a finite non-zero value (also log(0)).")
    oflo = _Option(False, "Trap on a floating-point overflow: a finite result too large for its type (float16 "
                          "included).")
    esr = _Option(StochasticRoundingBehaviour.OFF,
                  "Stochastic rounding of float32 values to float16, a StochasticRoundingBehaviour (OFF by "
                  "default); its random bits are reproducible with ipu.utils.reset_ipu_seed. A bool is still "
                  "accepted but deprecated.",
                  type=typing.Union[StochasticRoundingBehaviour, bool],  # noqa: UP007
                  deprecated_use=_esr_bool_use)
    nanoo = _Option(False, "A float16 result that overflows becomes NaN (an invalid operation) instead of ±inf "
                           "(the IPU saturates to ±65504 without it; popjit keeps TensorFlow's ±inf).")
    set_all = _Option(False, "Turn on all of inv, div0, oflo, esr and nanoo when the config is applied.")


class _IOTilesConfig(_ConfigBase):
    num_io_tiles = _Option(0, "Tiles of each IPU reserved for streaming I/O (taken from the compute tiles).")
    place_ops_on_io_tiles = _Option(False, "Place infeed and outfeed operations on the I/O tiles; needs "
                                           "num_io_tiles > 0.")
    available_memory_proportion = _Option(0.9, "The part of the I/O tiles' memory that may hold data; the rest "
                                                "is left for code.")


class _IPUModelConfig(_ConfigBase):
    compile_ipu_code = _Option(True, "Also compile real IPU code for the model (realistic code size in memory "
                                     "figures).")
    tiles_per_ipu = _Option(0, "Tiles per simulated IPU; 0 means the full count of the version (1216 for ipu1, "
                               "1472 for ipu2). Memory per tile is unchanged, so a small count makes "
                               "out-of-memory easy to reach.")
    version = _Option("ipu2", "The simulated IPU architecture: 'ipu1' (GC2) or 'ipu2' (GC200, the default).")


class _MatmulConfig(_ConfigBase):
    clear_pass_type = _Option(False, "Do not tell PopLibs whether a matmul is a forward, backward or "
                                     "weight-update pass (can save memory).")
    poplar_options = _Option({}, _POPLAR_OPTIONS_DOC.format(what="matrix multiplication"))


class _NormsExperimentalConfig(_ConfigBase):
    distributed_batch_norm_replica_group_size = _Option(
        1, "How many replicas pool their batch statistics in training batch norms (1: none). Not supported "
           "with I/O tiles.")


class _NormConfig(_ConfigBase):
    use_stable_statistics = _Option(False, "Compute variances from mean-shifted values (slower, more accurate).")
    experimental = _Category(_NormsExperimentalConfig, "Experimental normalisation options.")


class _MathConfig(_ConfigBase):
    fast = _Option(False, "Allow algebraic rewrites that ignore IEEE rounding and special values (fast math).")
    dot_strength = _Option(True, "Rewrite dot products that have only batch or contracting dimensions as "
                                 "elementwise multiplies.")


class _OptimizationConfig(_ConfigBase):
    math = _Category(_MathConfig, "Algebraic simplification.")
    prefetch_data_streams = _Option(True, "Overlap fetching the next infeed data with execution.")
    combine_embedding_lookups = _Option(False, "Fuse embedding lookups on the same tensor.")
    combine_matmuls = _Option(False, "Fuse matmuls that share an operand.")
    enable_graph_outlining = _Option(True, "Re-use the code of identical sub-graphs (less code, more copies).")
    merge_infeed_io_copies = _Option(False, "Merge the host-to-device copies of an infeed into one larger copy.")
    maximum_cross_replica_sum_buffer_size = _Option(0, "Bytes of cross-replica sums that may wait to be merged "
                                                       "(0: schedule each at once).")
    maximum_reduce_scatter_buffer_size = _Option(0, "Bytes of reduce-scatters that may wait to be merged.")
    maximum_inter_ipu_copies_buffer_size = _Option(0, "Bytes of inter-IPU copies that may wait to be merged.")
    maximum_send_recv_cluster_size = _Option(0, "Bytes of host send/receive operations that may wait to be "
                                                "merged.")
    maximum_reduce_many_buffer_size = _Option(0, "Bytes of reductions that may be clustered into one.")
    maximum_all_gather_buffer_size = _Option(0, "Bytes of all-gathers that may be clustered into one.")
    minimum_remote_tensor_size = _Option(128, "Tensors smaller than this many bytes stay in device memory.")
    merge_remote_buffers = _Option(MergeRemoteBuffersBehaviour.IF_BENEFICIAL,
                                   "Whether compatible remote buffers are merged (a MergeRemoteBuffersBehaviour).")
    enable_gather_simplifier = _Option(True, "Simplify gathers (embedding lookups) more aggressively.")
    triangular_solve_expander_block_size = _Option(0, "Block size of the triangular solver (0: automatic).")
    cholesky_block_size = _Option(0, "Block size of the Cholesky factorisation (0: automatic).")
    enable_fast_math = _Option(False, "Old spelling of optimizations.math.fast.",
                               deprecated="'enable_fast_math' has been moved to 'optimizations.math.fast'. "
                                          "It will be removed from this location in a future release.")


class _PoolingConfig(_ConfigBase):
    poplar_options = _Option({}, _POPLAR_OPTIONS_DOC.format(what="pooling operation"))


class _SchedulingConfig(_ConfigBase):
    algorithm = _Option(SchedulingAlgorithm.CHOOSE_BEST, "The instruction scheduler (a SchedulingAlgorithm).")
    maximum_scheduler_lookahead_depth = _Option(5, "How far LOOK_AHEAD looks past each decision.")
    maximum_scheduler_search_space_size = _Option(64, "Upper bound on LOOK_AHEAD's search space.")


class IPUConfig(_ConfigBase):
    """All options of an IPU system, in categories: ``cfg.auto_select_ipus = 1``, ``cfg.ipu_model.version``.

    Apply with ``cfg.configure_ipu_system()``. ``get_attribute_metadata("a.b")`` describes an option;
    ``to_dict``/``from_dict`` and ``to_json``/``from_json`` save and restore a configuration.
    """

    allow_recompute = _Option(False, "Recompute cheap forward values (non-linearities, norms, pipeline stages) "
                                     "in the backward pass instead of keeping them live.")
    selection_order = _Option(SelectionOrder.AUTO, "Order of the IPUs of a multi-IPU device (a SelectionOrder).")
    serialization_output_folder = _Option("", "Directory to write serialised executables to ('' disables it).")
    compilation_poplar_options = _Option({}, "Poplar engine compilation options: a dict of name to string value.")
    gcl_poplar_options = _Option({}, "Options of the collective communication library: a dict of name to string.")
    auto_select_ipus = _Option(
        [], "The IPU devices to create. An int N gives one device, /device:IPU:0, of N IPUs; a list or tuple "
            "gives one device per entry (/device:IPU:0, /device:IPU:1, ...), each with that many IPUs. Counts "
            "must be powers of two.", type=_Devices)
    select_ipus = _Option(
        [], "Devices chosen by id, as listed by gc-info: ids 0..N-1 are single IPUs, then pairs, fours and so "
            "on. An int or a list/tuple of unique ids; cannot be combined with auto_select_ipus.", type=_Devices)
    convolutions = _Category(_ConvolutionConfig, "Options for convolutions.")
    device_connection = _Category(_DeviceConnectionConfig, "When and how to attach to the IPUs.")
    slices = _Category(_SliceConfig, "Options for slicing (embedding) operations.")
    experimental = _Category(_ExperimentalConfig, "Experimental options; they may change without notice.")
    floating_point_behaviour = _Category(_FloatingPointBehaviourConfig,
                                         "Floating-point exceptions, stochastic rounding and NaN on overflow.")
    io_tiles = _Category(_IOTilesConfig, "Tiles reserved for I/O.")
    ipu_model = _Category(_IPUModelConfig, "The simulated IPU: its version and tile count.")
    matmuls = _Category(_MatmulConfig, "Options for matrix multiplications.")
    norms = _Category(_NormConfig, "Options for normalisations (batch, group, layer, instance norm).")
    optimizations = _Category(_OptimizationConfig, "Graph optimisations made while compiling.")
    pooling = _Category(_PoolingConfig, "Options for pooling operations.")
    scheduling = _Category(_SchedulingConfig, "Options of the instruction scheduler.")

    def __init__(self) -> None:
        super().__init__()

    def configure_ipu_system(self, device: str = "cpu") -> None:
        """Apply this configuration (see :func:`configure_ipu_system`)."""
        configure_ipu_system(self, device)


# -- applying a configuration ----------------------------------------------------------------------


@dataclass(frozen=True)
class SystemPlan:
    """What a configuration asks of the virtual system: IPUs per device, version, tiles, IPU Model."""

    counts: tuple[int, ...]
    version: str
    tiles_per_ipu: int
    ipu_model: bool
    numerics: Numerics = DEFAULT
    matmul_options: PlanOptions = DEFAULT_PLAN_OPTIONS
    convolution_options: PlanOptions = DEFAULT_PLAN_OPTIONS


def _as_list(value: int | list[int] | tuple[int, ...]) -> list[int]:
    return [value] if isinstance(value, int) else list(value)


def _check_device_selection(cfg: IPUConfig, model: bool) -> None:
    auto, select = _as_list(cfg.auto_select_ipus), _as_list(cfg.select_ipus)
    if auto and select:
        raise IPUConfigError("Only one of `auto_select_ipus` and `select_ipus` can be set.")
    if len(set(select)) != len(select):
        raise ValueError("All MultiIPU indices in `select_ipus` must be unique.")
    if select and model:
        raise IPUConfigError(
            "When using the IPUModel, the devices to attach to can only be specified with `auto_select_ipus`.")


def _check_io_and_norms(cfg: IPUConfig) -> None:
    group = cfg.norms.experimental.distributed_batch_norm_replica_group_size
    if cfg.io_tiles.num_io_tiles > 0 and group > 1:
        raise ValueError("norms.experimental.distributed_batch_norm_replica_group_size is not supported with "
                         "I/O tiles.")
    if cfg.io_tiles.place_ops_on_io_tiles and cfg.io_tiles.num_io_tiles == 0:
        raise ValueError("Cannot place ops on I/O tiles when io_tiles.num_io_tiles == 0")
    if cfg.io_tiles.num_io_tiles < 0:
        raise ValueError(f"io_tiles.num_io_tiles must be at least 0, not {cfg.io_tiles.num_io_tiles}.")
    if group < 1:
        raise ValueError("norms.experimental.distributed_batch_norm_replica_group_size must be at least 1.")
    if group > 1:
        raise UnimplementedError(
            f"norms.experimental.distributed_batch_norm_replica_group_size = {group} is not supported by popjit: its "
            "batch normalisation computes the statistics of each replica's own batch. Leave it at 1.")


def _check_device_connection(cfg: IPUConfig) -> None:
    dc = cfg.device_connection
    if dc.type in (DeviceConnectionType.PRE_COMPILE, DeviceConnectionType.NEVER) and dc.version == "":
        raise ValueError("device_connection.version must be set when device_connection.type is "
                         "DeviceConnectionType.NEVER or DeviceConnectionType.PRE_COMPILE")
    if dc.version:
        _check_version("device_connection.version", dc.version)


def _check_version(name: str, version: str) -> None:
    if version not in VERSIONS:
        valid = ", ".join(f"'{v}'" for v in VERSIONS)
        raise ValueError(f"{name} must be one of {valid}, not '{version}'.")


def _check_multi_replica(cfg: IPUConfig, model: bool) -> None:
    mrd = cfg.experimental.multi_replica_distribution
    if model and mrd.process_count > 0:
        raise IPUConfigError("Multi-replica distribution is not supported on the IPU model.")
    if mrd.process_count and not 0 <= mrd.process_index < mrd.process_count:
        raise ValueError("experimental.multi_replica_distribution.process_index must be in the range "
                         "[0, experimental.multi_replica_distribution.process_count).")
    if mrd.process_count:
        _check_instances(mrd.process_count, mrd.process_index)


def _check_instances(count: int, index: int) -> None:
    """``multi_replica_distribution`` must describe the instances this program really runs as (poprun's)."""
    world = instances.world()
    advice = ("Start the program with `popjit poprun --num-instances N ...`, and set the options from popdist: "
              "popdist.tensorflow.set_ipu_config(config, ...) or PopDistStrategy().update_ipu_config(config).")
    if count != world.count:
        raise ValueError(f"experimental.multi_replica_distribution.process_count is {count}, but this program runs "
                         f"as {world.count} instance{'s' if world.count > 1 else ''}. {advice}")
    if index != world.index:
        raise ValueError(f"experimental.multi_replica_distribution.process_index is {index}, but this process is "
                         f"instance {world.index} of {world.count}. {advice}")


def _check_ipu_model(cfg: IPUConfig, model: bool) -> None:
    if model and cfg.ipu_model.version == "":
        raise ValueError("ipu_model.version must be set when using the IPUModel.")
    if cfg.ipu_model.version:
        _check_version("ipu_model.version", cfg.ipu_model.version)
    if cfg.ipu_model.tiles_per_ipu < 0:
        raise ValueError(f"ipu_model.tiles_per_ipu must be 0 (the full IPU) or a tile count, not "
                         f"{cfg.ipu_model.tiles_per_ipu}.")


def _check_poplar_options(cfg: IPUConfig) -> None:
    for node, name, md in cfg._leaves():
        value = getattr(node, name)
        if isinstance(value, dict):
            for k, v in value.items():
                if not isinstance(k, str) or not isinstance(v, str):
                    raise TypeError(f"{md.name}: Poplar options map names to string values, but it holds "
                                    f"{k!r}: {v!r}. Write e.g. {{'availableMemoryProportion': '0.3'}}.")


#: The PopLibs matmul/convolution options popjit's planner takes (``schedule.matmul_plan``).
PLANNER_OPTIONS = ("availableMemoryProportion", "partialsType")


def planner_options(options: dict[str, str], where: str) -> PlanOptions:
    """The planner's options from a ``poplar_options`` dict (PopLibs' names and string values):
    ``availableMemoryProportion`` (a number from 0 to 1) and ``partialsType`` (``half`` or ``float``).
    Any other option raises ``UnimplementedError`` naming it; a bad value ``InvalidArgumentError``."""
    for name in options:
        if name not in PLANNER_OPTIONS:
            raise UnimplementedError(
                f"{where}: the PopLibs option {name!r} is not implemented by popjit: its matmul and convolution "
                f"planner takes {' and '.join(PLANNER_OPTIONS)} only. Remove {name!r}.")
    proportion = DEFAULT_PLAN_OPTIONS.available_memory_proportion
    if "availableMemoryProportion" in options:
        raw = options["availableMemoryProportion"]
        try:
            proportion = float(raw)
        except ValueError:
            proportion = float("nan")
        if not 0.0 <= proportion <= 1.0:
            raise InvalidArgumentError(f"{where}: availableMemoryProportion must be a number from 0 to 1, not {raw!r}.")
    partials = options.get("partialsType", "float")
    if partials.lower() not in ("half", "float"):
        raise InvalidArgumentError(f"{where}: partialsType must be 'half' or 'float', not {partials!r}.")
    return PlanOptions(proportion, partials.lower() == "half")


def _device_counts(cfg: IPUConfig) -> tuple[int, ...]:
    if _as_list(cfg.select_ipus):
        return _selected_counts(_as_list(cfg.select_ipus))
    counts = _as_list(cfg.auto_select_ipus)
    for n in counts:
        if n < 1:
            raise InvalidArgumentError(f"Could not find a device with {n} IPUs: auto_select_ipus entries must be "
                                       "at least 1.")
    devices.device_targets(counts)  # the checks configure makes, done early so a failure changes nothing
    return tuple(counts)


def virtual_device_ids(num_ipus: int) -> list[tuple[int, ...]]:
    """The device ids of a virtual system, as ``gc-info -l`` lists them: each id's IPUs.

    Ids ``0..N-1`` are single IPUs; then come pairs ``(0,1), (2,3)...``, fours, and so on up to
    one device holding every IPU (for a power-of-two N).
    """
    ids: list[tuple[int, ...]] = []
    size = 1
    while size <= num_ipus:
        ids += [tuple(range(first, first + size)) for first in range(0, num_ipus - size + 1, size)]
        size *= 2
    return ids


def _selected_counts(selected: list[int]) -> tuple[int, ...]:
    ids = virtual_device_ids(settings.get("NUM_IPUS"))
    used: set[int] = set()
    counts = []
    for i in selected:
        if not 0 <= i < len(ids):
            raise InvalidArgumentError(f"Could not find an IPU device with id {i}: the virtual system has ids "
                                       f"0..{len(ids) - 1} (0..{ids[-1][-1]} are single IPUs).")
        if used & set(ids[i]):
            raise InvalidArgumentError(f"select_ipus: device {i} (IPUs {list(ids[i])}) overlaps another "
                                       "selected device.")
        used |= set(ids[i])
        counts.append(len(ids[i]))
    return tuple(counts)


def _target_version(cfg: IPUConfig, model: bool) -> str:
    if cfg.device_connection.version and not model:
        return cfg.device_connection.version
    return cfg.ipu_model.version or "ipu2"


def _tiles_per_ipu(cfg: IPUConfig, model_tiles: int) -> int:
    if cfg.ipu_model.tiles_per_ipu:
        return cfg.ipu_model.tiles_per_ipu
    return max(model_tiles, 0)


def plan(cfg: IPUConfig, flags: Any = None) -> SystemPlan:
    """Check ``cfg`` as ``configure_ipu_system`` does and return what it would build (nothing changes)."""
    flags = flags if flags is not None else poplar_flags()
    model = bool(flags.use_ipu_model)
    _check_device_selection(cfg, model)
    _check_io_and_norms(cfg)
    _check_device_connection(cfg)
    _check_multi_replica(cfg, model)
    _check_ipu_model(cfg, model)
    _check_poplar_options(cfg)
    counts = _device_counts(cfg)
    _check_replica_identity(cfg, counts)
    return SystemPlan(counts, _target_version(cfg, model), _tiles_per_ipu(cfg, flags.ipu_model_tiles), model,
                      _numerics(cfg), planner_options(cfg.matmuls.poplar_options, "matmuls.poplar_options"),
                      planner_options(cfg.convolutions.poplar_options, "convolutions.poplar_options"))


def _check_replica_identity(cfg: IPUConfig, counts: tuple[int, ...]) -> None:
    """Refuse the options that keep replicas identical under stochastic rounding, on a device whose programs
    run as several replicas: popjit does not find which values are replica identical, so it cannot do
    what they ask (on one replica every value is, and they change nothing)."""
    if max(counts, default=1) == 1:
        return
    if cfg.floating_point_behaviour.esr == StochasticRoundingBehaviour.REPLICA_IDENTICAL_ONLY:
        raise UnimplementedError(
            "floating_point_behaviour.esr = StochasticRoundingBehaviour.REPLICA_IDENTICAL_ONLY on a device of several "
            "IPUs (replicas) is not supported by popjit: it does not tell replica-identical values from the others. "
            "Use StochasticRoundingBehaviour.ON (each replica rounds with its own seed) or OFF.")
    if cfg.experimental.enable_prng_stability:
        raise UnimplementedError(
            "experimental.enable_prng_stability on a device of several IPUs (replicas) is not supported by popjit. "
            "Remove it; ipu.utils.reset_ipu_seed(seed, experimental_identical_replicas=True) makes every replica "
            "draw the same random numbers.")


def _numerics(cfg: IPUConfig) -> Numerics:
    """``floating_point_behaviour`` as programs compile it (``set_all`` turns every option on; stochastic
    rounding ``ON`` and ``REPLICA_IDENTICAL_ONLY`` agree on one replica, where every value is replica
    identical)."""
    fp = cfg.floating_point_behaviour
    esr = fp.esr if isinstance(fp.esr, StochasticRoundingBehaviour) else StochasticRoundingBehaviour.from_bool(fp.esr)
    every = bool(fp.set_all)
    return Numerics(inv=every or fp.inv, div0=every or fp.div0, oflo=every or fp.oflo, nanoo=every or fp.nanoo,
                    sr=every or esr != StochasticRoundingBehaviour.OFF)


def _is_active(p: SystemPlan, cfg: IPUConfig) -> bool:
    """Whether the system already runs ``cfg`` on the devices ``p`` describes."""
    system = devices.system()
    if not devices.is_configured() or system.options is None or system.options.to_dict() != cfg.to_dict():
        return False
    wanted = devices.device_targets(list(p.counts), p.version, p.tiles_per_ipu, p.ipu_model, p.matmul_options,
                                    p.convolution_options)
    return [d.target for d in system.devices] == wanted and all(d.numerics == p.numerics for d in system.devices)


def configure_ipu_system(config: IPUConfig, device: str = "cpu", reset_configuration: bool = True) -> None:
    """Attach the virtual IPU devices that ``config`` describes.

    The configuration and ``TF_POPLAR_FLAGS`` are checked first; on any error the current system is
    left as it was. If a different configuration is active it is reset first (with
    ``reset_configuration=False`` that is an error instead). Applying the active configuration
    again changes nothing. ``device`` names the host CPU device; there is only one here.
    """
    if not isinstance(config, IPUConfig):
        raise TypeError("`config` must be an IpuOptions instance.")
    p = plan(config)
    snapshot = copy.deepcopy(config)
    if _is_active(p, snapshot):
        return
    if devices.is_configured():
        if not reset_configuration:
            raise FailedPreconditionError(
                "The IPU system is already configured with a different configuration. Call "
                "ipu.config.reset_ipu_configuration() first, or pass reset_configuration=True.")
        log.warning("Resetting existing IPU configuration before applying new configuration")
        reset_ipu_configuration()
    if not p.counts:
        log.warning("The IPUConfig sets neither auto_select_ipus nor select_ipus, so no IPU device was attached.")
    devices.configure(list(p.counts), p.version, p.tiles_per_ipu, p.ipu_model, snapshot, p.numerics,
                      snapshot.device_connection.type.name, p.matmul_options, p.convolution_options)


def reset_ipu_configuration() -> None:
    """Release every IPU device and clear the in-memory executable cache (variables keep their values)."""
    devices.reset()
    cache.clear()


def get_ipu_config(session: Any = None) -> list[IPUConfig]:
    """The active configuration, once per IPU device (copies: changing them changes nothing).

    Raises ``RuntimeError("No IPU devices configured.")`` before ``configure_ipu_system``.
    """
    if not devices.is_configured():
        raise RuntimeError("No IPU devices configured.")
    system = devices.system()
    cfg = system.options if system.options is not None else _config_of(system.devices)
    return [copy.deepcopy(cfg) for _ in system.devices]


def _config_of(devs: list[Any]) -> IPUConfig:
    """An IPUConfig describing devices that were attached without one (``popjit.runtime.device.configure``)."""
    cfg = IPUConfig()
    cfg.auto_select_ipus = [d.num_ipus for d in devs]
    target = devs[0].target
    cfg.ipu_model.version = target.version
    if target.tiles != VERSIONS[target.version].tiles:
        cfg.ipu_model.tiles_per_ipu = target.tiles
    return cfg


__all__ = [
    "AttributeMetadata",
    "DeviceConnectionType",
    "ExecutionProfileType",
    "IPUConfig",
    "IPUConfigError",
    "MergeRemoteBuffersBehaviour",
    "SchedulingAlgorithm",
    "SelectionOrder",
    "StochasticRoundingBehaviour",
    "configure_ipu_system",
    "get_ipu_config",
    "reset_ipu_configuration",
]

__getattr__ = missing_attributes("ipu.config")
