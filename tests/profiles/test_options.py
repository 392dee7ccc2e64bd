"""``POPLAR_ENGINE_OPTIONS``: which reports it asks for, and its errors."""

from __future__ import annotations

import pytest

from popjit.errors import InvalidArgumentError, UnimplementedError
from popjit.profile.options import EngineOptionsError, ReportOptions, parse


@pytest.mark.parametrize(("raw", "want"), [
    ("", ReportOptions(False, False, ".")),
    ('{"autoReport.all":"true"}', ReportOptions(True, True, ".")),
    ('{"autoReport.all":true, "autoReport.directory":"./report"}', ReportOptions(True, True, "./report")),
    ('{"autoReport.outputGraphProfile":"true"}', ReportOptions(True, False, ".")),
    ('{"autoReport.outputExecutionProfile":"true"}', ReportOptions(False, True, ".")),
    ('{"autoReport.all":"true", "autoReport.outputExecutionProfile":"false"}', ReportOptions(True, False, ".")),
    ('{"autoReport.all":"false", "autoReport.outputArchive":"false", "debug.instrument":"true"}',
     ReportOptions(False, False, ".")),
])
def test__options__ask_for_the_reports(raw, want):
    assert parse(raw) == want
    assert parse(raw).enabled == (want.graph or want.execution)


@pytest.mark.parametrize(("raw", "message"), [
    ('{"autoReport.al":"true"}', "invalid_option: Unrecognised option 'autoReport.al'"),
    ('{"autoReport.all":"yes"}', "the value 'yes' of option 'autoReport.all' is not a boolean"),
    ('{"autoReport.directory":""}', "must be a non-empty string"),
    ('{"autoReport.all":"true"', "parse_error: .* is not valid JSON"),
    ('["autoReport.all"]', "parse_error: expected a JSON object of options, got list"),
])
def test__bad_options__raise_invalid_argument(raw, message):
    with pytest.raises(EngineOptionsError, match=message) as info:
        parse(raw)
    assert isinstance(info.value, InvalidArgumentError) and isinstance(info.value, ValueError)
    assert str(info.value).startswith("POPLAR_ENGINE_OPTIONS: ")


@pytest.mark.parametrize("raw", ['{"autoReport.outputArchive":"true"}', '{"debug.retainDebugInformation":"true"}',
                                 '{"autoReport.all":"true", "profiler.format":"v3"}'])
def test__poplar_options_popjit_lacks__raise_unimplemented_naming_them(raw):
    name = raw.split('"')[-4] if "profiler" in raw else raw.split('"')[1]
    with pytest.raises(UnimplementedError, match=f"the Poplar engine option '{name}' is not implemented by popjit"):
        parse(raw)
