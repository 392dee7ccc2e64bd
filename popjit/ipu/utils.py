"""``ipu.utils``: helpers, plus the SDK 1.x–2.0 configuration functions mapped onto :class:`IPUConfig`.

The old API built an options object with ``create_ipu_config()`` and chained setters that take and
return it::

    opts = ipu.utils.create_ipu_config()
    opts = ipu.utils.auto_select_ipus(opts, 1)
    opts = ipu.utils.set_ipu_model_options(opts, tiles_per_ipu=8)
    ipu.utils.configure_ipu_system(opts)

Here the options object *is* an :class:`~popjit.ipu.config.IPUConfig`, so both spellings mix freely.
``create_ipu_config(profiling=True)`` or ``enable_ipu_events=True`` (SDK 1.x reports read through
``ipu_event_trace()``) raise ``UnimplementedError``: profiles come from ``POPLAR_ENGINE_OPTIONS``, as in
SDK 2.1+ (``docs/profiles.md``). So the event trace is always empty, and the ``extract_*`` functions that
read it find nothing in it.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from popjit.errors import UnimplementedError, missing_attributes
from popjit.flags import poplar_flags
from popjit.frontend import random_ops
from popjit.ipu.config import (  # noqa: F401  (re-exported, as Graphcore's ipu.utils does)
    DeviceConnectionType,
    ExecutionProfileType,
    IPUConfig,
    IPUConfigError,
    MergeRemoteBuffersBehaviour,
    SchedulingAlgorithm,
    SelectionOrder,
    StochasticRoundingBehaviour,
    configure_ipu_system,
    get_ipu_config,
    reset_ipu_configuration,
)
from popjit.runtime import device as devices
from popjit.runtime.device import canonical, ipu_ordinal

# -- environment -----------------------------------------------------------------------------------


def running_on_ipu_model() -> bool:
    """True when ``--use_ipu_model`` is in ``TF_POPLAR_FLAGS``."""
    return bool(poplar_flags().use_ipu_model)


class SyntheticDataCategory(enum.Enum):
    """Kinds of data that ``--use_synthetic_data`` / ``--synthetic_data_categories`` can replace."""

    Seed = "seed"
    Infeed = "infeed"
    Outfeed = "outfeed"
    HostEmbedding = "hostembedding"
    Parameters = "parameters"


def use_synthetic_data_for(synthetic_data_category: SyntheticDataCategory) -> bool:
    """Whether ``TF_POPLAR_FLAGS`` makes this kind of data synthetic (no host transfers)."""
    if not isinstance(synthetic_data_category, SyntheticDataCategory):
        raise TypeError(f"Expected a SyntheticDataCategory, got {synthetic_data_category!r}.")
    return poplar_flags().use_synthetic_data_for(synthetic_data_category.value)


# -- seeds -----------------------------------------------------------------------------------------

_SEEDS: dict[int, tuple[int, bool]] = {}


def reset_ipu_seed(seed: int, device: str = "/device:IPU:0", cpu_device: str = "cpu",
                   experimental_identical_replicas: bool = False) -> None:
    """Reseed the random generator of an IPU device: the one its stateful random ops and its
    stochastic rounding draw from (``IPUConfig.floating_point_behaviour.esr``).

    As on the IPU, the generator starts from a random seed; after ``reset_ipu_seed(n)`` the programs
    run on ``device`` draw the same numbers and round the same way as after any other
    ``reset_ipu_seed(n)``, in this process or another: random ops without a seed and dropout
    (``tf.random.uniform``, ``tf.keras.layers.Dropout``...), random ops seeded through
    ``tf.random.set_seed`` or a ``seed`` argument (which, until the first reset, keep the streams
    those seeds give), and stochastic rounding. Every compiled random op restarts its stream, on
    every device. Stateless random ops (``tf.random.stateless_*``) are unaffected, as on the IPU.
    On a device of several IPUs each replica's generator has its own seed derived from ``seed``, so
    replicas draw different numbers (different dropout masks), unless ``experimental_identical_replicas``
    makes every replica draw what replica 0 draws.
    """
    if type(seed) is not int:
        raise TypeError(f"reset_ipu_seed: seed must be an int, not {seed!r}.")
    ordinal = ipu_ordinal(canonical(device))
    if ordinal is None:
        raise ValueError(f"reset_ipu_seed: {device!r} is not an IPU device; use e.g. '/device:IPU:0'.")
    devices.get_device(ordinal).generator.reseed(seed, bool(experimental_identical_replicas))
    random_ops.reset_generators()
    _SEEDS[ordinal] = (seed, bool(experimental_identical_replicas))


def ipu_seed(device: str = "/device:IPU:0") -> int | None:
    """The seed last given to :func:`reset_ipu_seed` for ``device``, or None."""

    entry = _SEEDS.get(ipu_ordinal(canonical(device)) or 0)
    return entry[0] if entry else None


def get_num_of_ipus_in_device(ipu_device: str, device: str = "cpu") -> int:
    """How many IPUs the device ``ipu_device`` (e.g. ``'/device:IPU:0'``) holds."""
    ordinal = ipu_ordinal(canonical(ipu_device))
    if ordinal is None:
        raise ValueError(f"{ipu_device!r} is not an IPU device.")
    return devices.get_device(ordinal).num_ipus


# -- SDK 1.x-2.0 configuration API -----------------------------------------------------------------


def create_ipu_config(profiling: bool = False, enable_ipu_events: bool = False, use_poplar_text_report: bool = False,
                      use_poplar_cbor_report: bool = False, profile_execution: Any = None,
                      enable_poplar_serialized_graph: bool = False, report_every_nth_execution: int = 0,
                      max_report_size: int = 0x10000000, report_directory: str = "", scheduler_selection: str = "",
                      always_rearrange_copies_on_the_host: bool = False, merge_infeed_io_copies: bool = False,
                      disable_graph_outlining: bool = False, retain_control_dependencies: bool = False,
                      max_cross_replica_sum_buffer_size: int = 0, max_inter_ipu_copies_buffer_size: int = 0,
                      max_scheduler_lookahead_depth: int = 5, max_scheduler_search_space_size: int = 64,
                      prefetch_data_streams: bool = True, selection_order: SelectionOrder | None = None,
                      enable_experimental_remote_buffer_embedding: bool = False) -> IPUConfig:
    """A new options object (an :class:`IPUConfig`) from the SDK 1.x arguments."""
    if profiling and enable_ipu_events:
        raise IPUConfigError("`profiling` and `enable_ipu_events` are mutually exclusive")
    if profile_execution and not profiling:
        raise IPUConfigError("`profiling` is required when `profile_execution` is set")
    if profiling or enable_ipu_events:
        given = "profiling=True" if profiling else "enable_ipu_events=True"
        raise UnimplementedError(
            f"create_ipu_config({given}) is not implemented by popjit: it recorded compile and execution reports "
            "for gen_ipu_ops.ipu_event_trace(), whose trace popjit leaves empty. Set POPLAR_ENGINE_OPTIONS="
            "'{\"autoReport.all\":\"true\"}' instead (SDK 2.1+), and read the reports with `popjit report DIR` "
            "(docs/profiles.md).")
    cfg = IPUConfig()
    cfg.experimental.always_rearrange_copies_on_the_host = always_rearrange_copies_on_the_host
    cfg.experimental.enable_remote_buffer_embedding = enable_experimental_remote_buffer_embedding
    opt = cfg.optimizations
    opt.merge_infeed_io_copies = merge_infeed_io_copies
    opt.enable_graph_outlining = not disable_graph_outlining
    opt.maximum_cross_replica_sum_buffer_size = max_cross_replica_sum_buffer_size
    opt.maximum_inter_ipu_copies_buffer_size = max_inter_ipu_copies_buffer_size
    opt.prefetch_data_streams = prefetch_data_streams
    cfg.scheduling.maximum_scheduler_lookahead_depth = max_scheduler_lookahead_depth
    cfg.scheduling.maximum_scheduler_search_space_size = max_scheduler_search_space_size
    if scheduler_selection:
        cfg.scheduling.algorithm = _scheduler(scheduler_selection)
    if selection_order is not None:
        cfg.selection_order = selection_order
    return cfg


def _scheduler(name: Any) -> SchedulingAlgorithm:
    if isinstance(name, SchedulingAlgorithm):
        return name
    try:
        return SchedulingAlgorithm[str(name).upper()]
    except KeyError:
        valid = ", ".join(a.name for a in SchedulingAlgorithm)
        raise ValueError(f"Unknown scheduler_selection {name!r}; valid: {valid}.") from None


def _check_opts(opts: Any) -> IPUConfig:
    if not isinstance(opts, IPUConfig):
        raise TypeError(f"Expected the options object from create_ipu_config(), got {type(opts).__name__}.")
    return opts


def _select(opts: Any, option: str, value: int | list[int] | tuple[int, ...]) -> IPUConfig:
    """Set ``auto_select_ipus`` or ``select_ipus`` once: devices are chosen one way only."""
    _check_opts(opts)
    if opts.auto_select_ipus or opts.select_ipus:
        raise IPUConfigError("IPU devices have already been configured.")
    setattr(opts, option, list(value) if isinstance(value, tuple) else value)
    return opts


def auto_select_ipus(opts: IPUConfig, num_ipus: int | list[int] | tuple[int, ...]) -> IPUConfig:
    """Ask for devices by IPU count: an int (one device) or a list/tuple (one device per entry)."""
    return _select(opts, "auto_select_ipus", num_ipus)


def select_ipus(opts: IPUConfig, indices: int | list[int] | tuple[int, ...]) -> IPUConfig:
    """Ask for devices by id (see :func:`popjit.ipu.config.virtual_device_ids`)."""
    return _select(opts, "select_ipus", indices)


def set_ipu_model_options(opts: IPUConfig, compile_ipu_code: bool = True, tiles_per_ipu: int | None = None,
                          ipu_model_version: str | None = None) -> IPUConfig:
    """The IPU Model's options: whether to compile IPU code, tiles per IPU, version (``'ipu1'``/``'ipu2'``)."""
    _check_opts(opts).ipu_model.compile_ipu_code = compile_ipu_code
    if tiles_per_ipu is not None:
        opts.ipu_model.tiles_per_ipu = tiles_per_ipu
    if ipu_model_version is not None:
        opts.ipu_model.version = _version(ipu_model_version)
    return opts


def _version(v: Any) -> str:
    """``1``, ``'1'`` or ``'ipu1'`` → ``'ipu1'`` (the old API used integers)."""
    return v if isinstance(v, str) and v.startswith("ipu") else f"ipu{v}"


def set_ipu_connection_type(opts: IPUConfig, connection_type: DeviceConnectionType | None = None,
                            ipu_version: Any = None, enable_remote_buffers: bool = False) -> IPUConfig:
    """When to attach (a DeviceConnectionType) and the IPU version to compile for without a device."""
    _check_opts(opts).device_connection.type = connection_type or DeviceConnectionType.ALWAYS
    if ipu_version is not None:
        opts.device_connection.version = _version(ipu_version)
    opts.device_connection.enable_remote_buffers = enable_remote_buffers
    return opts


def set_recomputation_options(opts: IPUConfig, allow_recompute: bool = True, **unused: Any) -> IPUConfig:
    """Whether to recompute forward values in the backward pass."""
    _check_opts(opts).allow_recompute = allow_recompute
    return opts


def set_floating_point_behaviour_options(opts: IPUConfig, inv: bool = True, div0: bool = True, oflo: bool = True,
                                         esr: bool = True, nanoo: bool = True) -> IPUConfig:
    """Floating-point traps, stochastic rounding and NaN-on-overflow (note: the old defaults are all True)."""
    fp = _check_opts(opts).floating_point_behaviour
    fp.inv, fp.div0, fp.oflo, fp.nanoo = inv, div0, oflo, nanoo
    fp.esr = esr if isinstance(esr, StochasticRoundingBehaviour) else StochasticRoundingBehaviour.from_bool(esr)
    return opts


_OPTIMIZATION_ARGS = {
    "combine_embedding_lookups": "combine_embedding_lookups",
    "combine_matmuls": "combine_matmuls",
    "max_cross_replica_sum_buffer_size": "maximum_cross_replica_sum_buffer_size",
    "max_reduce_scatter_buffer_size": "maximum_reduce_scatter_buffer_size",
    "max_inter_ipu_copies_buffer_size": "maximum_inter_ipu_copies_buffer_size",
    "max_send_recv_cluster_size": "maximum_send_recv_cluster_size",
    "minimum_remote_tensor_size": "minimum_remote_tensor_size",
    "triangular_solve_expander_block_size": "triangular_solve_expander_block_size",
    "cholesky_block_size": "cholesky_block_size",
}


def set_optimization_options(opts: IPUConfig, merge_remote_buffers: bool | None = None,
                             gather_simplifier: bool = True, enable_fast_math: bool = False,
                             **kwargs: Any) -> IPUConfig:
    """Graph optimisation options under their SDK 1.x names (``max_*`` → ``optimizations.maximum_*``)."""
    opt = _check_opts(opts).optimizations
    for arg, value in kwargs.items():
        if arg not in _OPTIMIZATION_ARGS:
            raise TypeError(f"set_optimization_options() got an unexpected keyword argument '{arg}'")
        setattr(opt, _OPTIMIZATION_ARGS[arg], value)
    merge = MergeRemoteBuffersBehaviour
    opt.merge_remote_buffers = {None: merge.IF_BENEFICIAL, True: merge.MERGE, False: merge.NO_MERGING}[
        merge_remote_buffers]
    opt.enable_gather_simplifier = gather_simplifier
    opt.math.fast = enable_fast_math
    return opts


def set_norm_options(opts: IPUConfig, use_stable_statistics: bool = False,
                     experimental_distributed_batch_norm_replica_group_size: int = 1) -> IPUConfig:
    """Normalisation options."""
    _check_opts(opts).norms.use_stable_statistics = use_stable_statistics
    opts.norms.experimental.distributed_batch_norm_replica_group_size = (
        experimental_distributed_batch_norm_replica_group_size)
    return opts


def set_convolution_options(opts: IPUConfig, convolution_options: dict[str, str] | None = None) -> IPUConfig:
    """PopLibs convolution options."""
    _check_opts(opts).convolutions.poplar_options = dict(convolution_options or {})
    return opts


def set_matmul_options(opts: IPUConfig, matmul_options: dict[str, str] | None = None,
                       clear_pass_type: bool = False) -> IPUConfig:
    """PopLibs matmul options."""
    _check_opts(opts).matmuls.poplar_options = dict(matmul_options or {})
    opts.matmuls.clear_pass_type = clear_pass_type
    return opts


def set_pooling_options(opts: IPUConfig, pooling_options: dict[str, str] | None = None) -> IPUConfig:
    """PopLibs pooling options."""
    _check_opts(opts).pooling.poplar_options = dict(pooling_options or {})
    return opts


def set_compilation_options(opts: IPUConfig, compilation_options: dict[str, str] | None = None) -> IPUConfig:
    """Poplar engine compilation options."""
    _check_opts(opts).compilation_poplar_options = dict(compilation_options or {})
    return opts


def set_gcl_options(opts: IPUConfig, gcl_options: dict[str, str] | None = None) -> IPUConfig:
    """Collective communication options."""
    _check_opts(opts).gcl_poplar_options = dict(gcl_options or {})
    return opts


def set_serialization_options(opts: IPUConfig, output_folder: str = "") -> IPUConfig:
    """Where to write serialised executables."""
    _check_opts(opts).serialization_output_folder = output_folder
    return opts


def set_io_tile_options(opts: IPUConfig, num_io_tiles: int, place_ops_on_io_tiles: bool | None = None,
                        io_tile_available_memory_proportion: float | None = None) -> IPUConfig:
    """Tiles reserved for I/O, and whether feeds are placed on them."""
    _check_opts(opts).io_tiles.num_io_tiles = num_io_tiles
    if place_ops_on_io_tiles is not None:
        opts.io_tiles.place_ops_on_io_tiles = place_ops_on_io_tiles
    if io_tile_available_memory_proportion is not None:
        opts.io_tiles.available_memory_proportion = io_tile_available_memory_proportion
    return opts


def set_experimental_multi_replica_distribution_options(opts: IPUConfig, process_count: int,
                                                        process_index: int) -> IPUConfig:
    """Multi-process replica distribution (poprun)."""
    _check_opts(opts).experimental.multi_replica_distribution.process_count = process_count
    opts.experimental.multi_replica_distribution.process_index = process_index
    return opts

def move_variable_initialization_to_cpu(graph: Any = None) -> None:
    """Run the variables' initializers on the host instead of compiling them for the IPU. popjit always
    computes initial values on the host (an initializer copies them in), so there is nothing left to move."""


def _events(events: Any) -> list[Any]:
    """The events of an ``ipu_event_trace()`` result: popjit's is always empty (event recording is refused)."""
    found = list(np.asarray(events, dtype=object).reshape(-1))
    if found:
        raise UnimplementedError("popjit cannot read IPU trace events: its gen_ipu_ops.ipu_event_trace() records "
                                 "none (create_ipu_config(profiling=True) is not supported); read profiles with "
                                 "`popjit report DIR` (docs/profiles.md).")
    return found


def extract_all_events(events: Any) -> list[Any]:
    """The trace events of an ``ipu_event_trace()`` result, parsed (none: see the module docstring)."""
    return _events(events)


def extract_all_strings_from_event_trace(events: Any) -> str:
    """The text of every event of an ``ipu_event_trace()`` result, joined (empty: see the module docstring)."""
    return "".join(str(e) for e in _events(events))


def extract_all_types_from_event_trace(events: Any) -> list[Any]:
    """The type of every event of an ``ipu_event_trace()`` result (none: see the module docstring)."""
    return _events(events)


def extract_compile_reports(events: Any) -> list[Any]:
    """The ``(module, report)`` pairs of the compile events of an ``ipu_event_trace()`` result (none)."""
    return _events(events)


def extract_execute_reports(events: Any) -> list[Any]:
    """The ``(module, report)`` pairs of the execution events of an ``ipu_event_trace()`` result (none)."""
    return _events(events)


__getattr__ = missing_attributes("ipu.utils")
