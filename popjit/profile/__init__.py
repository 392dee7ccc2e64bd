"""Profiles of compiled IPU programs: the data PopVision would show, as versioned JSON, and its views.

    build_profile(schedule) -> dict          # data.py: the popjit profile of one schedule
    report_options()                         # options.py: POPLAR_ENGINE_OPTIONS (autoReport.*), strict
    write_report(schedule, options)          # writer.py: tf_report__<date>__<pid>/ with profile.json
    popjit report DIR [--html F] [--png D]   # report.py: terminal tables (rich), plotly page, matplotlib plots

Modules: ``options``, ``trace`` (the execution trace of a program tree), ``data``, ``writer``,
``terminal``, ``html`` and ``png`` (the last two import plotly and matplotlib: load them only to draw).
Layer: above the schedule, below the pipeline, which writes a profile for each compiled program.
``docs/profiles.md`` describes the format.
"""

from popjit.profile.data import FORMAT, VERSION, build_profile, load_profile
from popjit.profile.options import EngineOptionsError, ReportOptions, report_options
from popjit.profile.writer import find_profiles, write_report

__all__ = ["FORMAT", "VERSION", "EngineOptionsError", "ReportOptions", "build_profile", "find_profiles",
           "load_profile", "report_options", "write_report"]
