"""Writing profiles where ``POPLAR_ENGINE_OPTIONS`` asks, laid out as Graphcore's TensorFlow does.

Each compiled IPU program gets its own subdirectory of ``autoReport.directory``,
``tf_report__<date>__<time>__<pid>/`` (as in SDK 2.2+), holding ``frameworks.json`` (which names the
program, Graphcore's "cluster") and ``profile.json`` (popjit's profile, in place of Poplar's
``profile.pop``). The files are written whole and renamed into place, so a reader never sees half a file.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
from pathlib import Path
from typing import Any

import popjit
from popjit.profile.data import build_profile
from popjit.profile.options import ReportOptions
from popjit.schedule import Schedule

log = logging.getLogger("popjit")

PROFILE_FILE = "profile.json"
FRAMEWORKS_FILE = "frameworks.json"
PREFIX = "tf_report__"


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically (a temporary file renamed into place)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, separators=(",", ":")))
    os.replace(tmp, path)


def report_directory(root: Path) -> Path:
    """A new ``tf_report__<date>__<time>__<pid>`` directory under ``root`` (created with its parents)."""
    now = datetime.datetime.now()
    stamp = f"{now:%Y-%m-%d}__{now:%H-%M-%S}.{now.microsecond // 1000:03d}"
    base = f"{PREFIX}{stamp}__{os.getpid()}"
    root.mkdir(parents=True, exist_ok=True)
    for k in range(1000):
        path = root / (base if k == 0 else f"{base}__{k}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"cannot make a new report directory under {root}")


def write_report(schedule: Schedule, options: ReportOptions) -> Path:
    """Write the profile of ``schedule`` as ``options`` asks; return its directory."""
    directory = report_directory(options.root())
    write_json(directory / FRAMEWORKS_FILE, {
        "framework": "TensorFlow", "implementation": f"popjit {popjit.__version__}", "cluster": schedule.name,
        "profile": PROFILE_FILE,
    })
    write_json(directory / PROFILE_FILE, build_profile(schedule, graph=options.graph, execution=options.execution))
    log.info("popjit: wrote the profile of '%s' to %s", schedule.name, directory)
    return directory


def find_profiles(path: str | Path) -> list[Path]:
    """The profile files of ``path``: the file itself, or every ``profile.json`` under a directory (oldest first)."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"no such file or directory: {path}")
    return sorted(path.rglob(PROFILE_FILE), key=lambda p: (p.stat().st_mtime, str(p)))
