"""``ipu.config.IPUConfig`` (first version: the options the compiler needs)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from popjit.runtime import device as devices


class IPUConfig:
    def __init__(self) -> None:
        self.auto_select_ipus: Any = []
        self.ipu_model = SimpleNamespace(tiles_per_ipu=0, version="ipu2", compile_ipu_code=True)

    def configure_ipu_system(self, device: str = "cpu") -> None:
        configure_ipu_system(self, device)


def configure_ipu_system(config: IPUConfig, device: str = "cpu", reset_configuration: bool = True) -> None:
    counts = config.auto_select_ipus
    counts = list(counts) if isinstance(counts, (list, tuple)) else [int(counts)]
    devices.configure(counts or [1], config.ipu_model.version, config.ipu_model.tiles_per_ipu)
