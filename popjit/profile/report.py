"""``popjit report PATH``: load the profiles under PATH, print their summary, draw the page and plots asked for."""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console

from popjit.errors import NotFoundError
from popjit.profile.data import load_profile
from popjit.profile.terminal import print_summary
from popjit.profile.writer import find_profiles

#: Columns of the tables when the output is not a terminal (a file, a pipe) and COLUMNS does not say.
PIPE_WIDTH = 160


def output_console() -> Console:
    """rich's console; not on a terminal, wide enough that compute-set names are not cut."""
    console = Console()
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(width=PIPE_WIDTH)
    return console


def report(path: str | Path, html: str | Path | None = None, png: str | Path | None = None,
           console: Console | None = None) -> int:
    """Summarise the profiles of ``path`` (a report directory or one profile file) on ``console``; with
    ``html`` write the plotly page there, with ``png`` the plots into that directory. Returns 0."""
    try:
        files = find_profiles(path)
    except FileNotFoundError as e:
        raise NotFoundError(str(e)) from None
    if not files:
        raise NotFoundError(f"no profile.json under {path}: run the program with "
                            "POPLAR_ENGINE_OPTIONS='{\"autoReport.all\":\"true\"}' to write one (docs/profiles.md).")
    profiles = [load_profile(f) for f in files]
    console = console or output_console()
    print_summary(profiles, console)
    if html is not None:
        from popjit.profile.html import write_html  # why: plotly loads only to draw the page

        console.print(f"wrote {write_html(profiles, html)}")
    if png is not None:
        from popjit.profile.png import write_pngs  # why: matplotlib loads only to draw the plots

        for written in write_pngs(profiles, png):
            console.print(f"wrote {written}")
    return 0
