"""``ipu.ipu_run_config``: the IPU part of an estimator's configuration (``IPURunConfig``) and the
``RunConfig`` that carries it."""

from __future__ import annotations

from typing import Any

from popjit.compat.v1.estimator import RunConfig as _EstimatorRunConfig
from popjit.errors import UnimplementedError, missing_attributes, multi_ipu_message
from popjit.ipu.config import IPUConfig


class IPURunConfig:
    """How an ``IPUEstimator`` runs on the IPU: ``iterations_per_loop`` steps per session run (one compiled
    on-device loop), the ``ipu_options`` (an ``IPUConfig``) it configures the system with, and the device."""

    def __init__(self, iterations_per_loop: int = 1, ipu_options: Any = None, compile_summary: Any = None,
                 num_replicas: int = 1, num_shards: int = 1, autosharding: bool = False, ordinal: int = 0,
                 prefetch_depth: int | None = None) -> None:
        if compile_summary is not None:
            raise NotImplementedError("IPURunConfig(compile_summary=...) was removed in SDK 2.4: use the "
                                      "POPLAR_ENGINE_OPTIONS autoReport profiles instead.")
        if iterations_per_loop < 1:
            raise ValueError("`iterations_per_loop` must be a positive integer")
        devices = num_replicas * num_shards
        if devices > 1 and ipu_options is None:
            raise ValueError("IPU configuration requires more than one device, but `ipu_options` is None")
        if ipu_options is not None and not isinstance(ipu_options, IPUConfig):
            raise ValueError("`config.ipu_options` must be an IPUConfig or IpuOptions instance")
        if autosharding:
            raise UnimplementedError(multi_ipu_message("IPURunConfig(autosharding=True)"))
        if ipu_options is not None and devices > 1:
            configured = sum(ipu_options.auto_select_ipus) if isinstance(ipu_options.auto_select_ipus, (list, tuple)) \
                else ipu_options.auto_select_ipus
            if configured != devices:
                raise ValueError(f"`IPURunConfig` configured with {devices} devices ({num_replicas} replicas times "
                                 f"{num_shards} shards), but `IpuOptions` configured with {configured} devices")
        self.iterations_per_loop = int(iterations_per_loop)
        self.ipu_options = ipu_options
        self.num_replicas, self.num_shards, self.autosharding = num_replicas, num_shards, autosharding
        self.ordinal = ordinal
        self.prefetch_depth = prefetch_depth


class RunConfig(_EstimatorRunConfig):
    """``tf.estimator.RunConfig`` with an ``ipu_run_config`` (``IPURunConfig()`` unless given)."""

    def __init__(self, ipu_run_config: IPURunConfig | None = None, master: Any = None, **kwargs: Any) -> None:
        if master is not None:
            raise UnimplementedError("ipu_run_config.RunConfig(master=...) is not supported by popjit.")
        super().__init__(**kwargs)
        self._ipu_run_config = ipu_run_config or IPURunConfig()

    @property
    def ipu_run_config(self) -> IPURunConfig:
        return self._ipu_run_config

    def replace(self, **changes: Any) -> RunConfig:
        copy = super().replace(**{k: v for k, v in changes.items() if k != "ipu_run_config"})
        copy._ipu_run_config = changes.get("ipu_run_config", self._ipu_run_config)
        return copy


__getattr__ = missing_attributes("ipu.ipu_run_config")
