"""TF_POPLAR_FLAGS: strict parsing of every flag kind, the errors, --help, caching per value, and the
process-level behaviour (a script with a bad flag fails naming it; --help prints the usage)."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import textwrap

import pytest

from popjit import flags
from popjit.errors import InvalidArgumentError
from popjit.flags import FLAGS, TFPoplarFlagsError, parse, poplar_flags
from popjit.ipu import utils


@pytest.fixture(autouse=True)
def _fresh_parse_cache(monkeypatch):
    monkeypatch.delenv("TF_POPLAR_FLAGS", raising=False)
    parse.cache_clear()
    yield
    parse.cache_clear()


def test__empty__gives_every_default():
    f = parse("")
    assert f.given == {}
    for name, spec in FLAGS.items():
        assert getattr(f, name) == spec.default, name
    assert (f.use_ipu_model, f.ipu_model_tiles, f.executable_cache_path, f.show_progress_bar) == (False, -1, "", "auto")
    assert (f.while_loop_brute_force_max_trip_count, f.on_demand_device_poll_time, f.log_cycle_count) == (128, 1000, -1)


@pytest.mark.parametrize("raw, value", [
    ("--use_ipu_model", True), ("--use_ipu_model=true", True), ("--use_ipu_model=True", True),
    ("--use_ipu_model=1", True), ("--use_ipu_model=false", False), ("--use_ipu_model=0", False),
    ("--use_ipu_model --use_ipu_model=false", False),
])
def test__bool_flags__accept_bare_and_true_false(raw, value):
    assert parse(raw).use_ipu_model is value


def test__valued_flags__are_typed():
    f = parse("--ipu_model_tiles=8  --executable_cache_path=/tmp/cache --show_progress_bar=false "
              "--max_compilation_threads=-1 --log_cycle_count=3 --save_vertex_graph='/tmp/my dir'")
    assert (f.ipu_model_tiles, f.executable_cache_path, f.show_progress_bar) == (8, "/tmp/cache", "false")
    assert (f.max_compilation_threads, f.log_cycle_count, f.save_vertex_graph) == (-1, 3, "/tmp/my dir")
    assert f.given["ipu_model_tiles"] == 8 and "use_ipu_model" not in f.given


@pytest.mark.parametrize("value, shown", [("true", True), ("false", False)])
def test__show_progress_bar__true_false_and_auto(value, shown):
    assert parse(f"--show_progress_bar={value}").progress_bar is shown
    assert parse("--show_progress_bar=auto").progress_bar is sys.stderr.isatty()


def test__unknown_flag__names_it_and_lists_the_valid_ones():
    with pytest.raises(TFPoplarFlagsError) as e:
        parse("--use_ipu_model --use_ipu_modle")
    message = str(e.value)
    assert message.startswith("TF_POPLAR_FLAGS: unknown flag --use_ipu_modle. Valid flags: --help, ")
    for name, spec in FLAGS.items():
        assert (f"--{name}," in message or f"--{name}." in message) is not spec.removed, name
    assert isinstance(e.value, InvalidArgumentError) and isinstance(e.value, ValueError)


@pytest.mark.parametrize("raw, message", [
    ("--ipu_model_tiles=abc", "invalid value 'abc' for flag --ipu_model_tiles: it takes an integer."),
    ("--ipu_model_tiles=0", "invalid value '0' for flag --ipu_model_tiles: it must be at least 1."),
    ("--ipu_model_tiles", "flag --ipu_model_tiles needs a value: write --ipu_model_tiles=VALUE."),
    ("--executable_cache_path", "flag --executable_cache_path needs a value"),
    ("--use_ipu_model=yes", "invalid value 'yes' for flag --use_ipu_model in '--use_ipu_model=yes'"),
    ("--show_progress_bar=maybe", "invalid value 'maybe' for flag --show_progress_bar: it must be one of true, "
                                  "false, auto."),
    ("--synthetic_data_categories=infeed,weights", "unknown synthetic data category weights; valid ones are infeed, "
                                                  "outfeed, seed, hostembedding, parameters"),
    ("--use_synthetic_data --synthetic_data_initializer=gaussian", "invalid value 'gaussian' for flag "
                                                                   "--synthetic_data_initializer"),
    ("use_ipu_model", "cannot parse 'use_ipu_model': flags are written --flag or --flag=value."),
    ("-use_ipu_model", "cannot parse '-use_ipu_model'"),
    ("--", "cannot parse '--'"),
    ("--save_vertex_graph='/tmp", "cannot split"),
])
def test__bad_values__name_the_flag_and_the_value(raw, message):
    with pytest.raises(TFPoplarFlagsError) as e:
        parse(raw)
    assert message in str(e.value)


@pytest.mark.parametrize("raw", ["--synthetic_data_initializer=random",
                                 "--synthetic_data_initializer=4 --synthetic_data_categories="])
def test__synthetic_data_initializer__needs_synthetic_data(raw):
    with pytest.raises(TFPoplarFlagsError, match=re.escape('The flag "synthetic_data_initializer" can only be used '
                                                           'in combination with "use_synthetic_data" or '
                                                           '"synthetic_data_categories".')):
        parse(raw)


def test__synthetic_data__categories():
    f = parse("--synthetic_data_categories=infeed,seed --synthetic_data_initializer=7")
    assert f.synthetic_categories == {"infeed", "seed"} and f.synthetic_data_initializer == "7"
    assert f.use_synthetic_data_for("infeed") and not f.use_synthetic_data_for("outfeed")
    assert parse("--use_synthetic_data --synthetic_data_initializer=normal").synthetic_categories == \
        set(flags.SYNTHETIC_DATA_CATEGORIES)


def test__use_synthetic_data_for__reads_the_environment(monkeypatch):
    monkeypatch.setenv("TF_POPLAR_FLAGS", "--synthetic_data_categories=outfeed")
    assert utils.use_synthetic_data_for(utils.SyntheticDataCategory.Outfeed)
    assert not utils.use_synthetic_data_for(utils.SyntheticDataCategory.Infeed)
    with pytest.raises(TypeError, match="SyntheticDataCategory"):
        utils.use_synthetic_data_for("outfeed")


@pytest.mark.parametrize("raw, fragment", [
    ("--add_all_reduce_copies", '"add_all_reduce_copies" is deprecated, has no effect and will be removed'),
    ("--force_replicated_mode", '"force_replicated_mode" is deprecated, has no effect'),
    ("--save_oom_profiler=/tmp/x", '"save_oom_profiler" is deprecated, has no effect'),
    ("--dump_text_reports_to_stdio", '"dump_text_reports_to_stdio" is deprecated'),
    ("--save_interval_report=/tmp/r", '"save_interval_report" is deprecated and has no effect'),
    ("--fallback_scheduler", '"fallback_scheduler" is accepted for compatibility but has no effect'),
    ("--enable_hlo_verifier", '"enable_hlo_verifier" is accepted for compatibility but has no effect on popjit\'s '
                              "virtual IPU; set POPJIT_CHECKS=1"),
])
def test__removed_and_ignored_flags__are_accepted_and_logged(raw, fragment, caplog):
    with caplog.at_level(logging.INFO, logger="popjit"):
        parse(raw)
    assert f"The TensorFlow Poplar flag {fragment}" in caplog.text


def test__flags_popjit_acts_on__are_not_logged(caplog):
    with caplog.at_level(logging.INFO, logger="popjit"):
        parse("--use_ipu_model --ipu_model_tiles=4 --executable_cache_path=/tmp/c --show_progress_bar=auto")
    assert caplog.text == ""


def test__help__prints_one_usage_line_per_flag(capsys):
    parse("--help --use_ipu_model")
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "Usage for TF_POPLAR_FLAGS is:"
    listed = [line.split(":", 1)[0] for line in lines[1:]]
    assert listed == [f"\t--{n}" for n, s in FLAGS.items() if not s.removed]
    assert all(line.split(": ", 1)[1] for line in lines[1:])
    assert "\t--use_ipu_model: Run on the IPU Model" in out
    parse("--help --use_ipu_model")  # cached: printed once per value
    assert capsys.readouterr().out == ""


def test__poplar_flags__parses_the_environment_once_per_value(monkeypatch, caplog):
    monkeypatch.setenv("TF_POPLAR_FLAGS", " --use_ipu_model --fallback_scheduler ")
    with caplog.at_level(logging.INFO, logger="popjit"):
        first = poplar_flags()
        assert poplar_flags() is first
    assert caplog.text.count("fallback_scheduler") == 1
    assert first.use_ipu_model and utils.running_on_ipu_model()
    monkeypatch.setenv("TF_POPLAR_FLAGS", "--use_ipu_model=false")
    assert not poplar_flags().use_ipu_model and not utils.running_on_ipu_model()
    monkeypatch.delenv("TF_POPLAR_FLAGS")
    assert poplar_flags().given == {}


def test__codegen_key__changes_with_flags_that_change_programs():
    base = parse("").codegen_key()
    assert parse("--executable_cache_path=/tmp/x --show_progress_bar=false").codegen_key() == base
    assert parse("--use_ipu_model").codegen_key() != base
    assert parse("--ipu_model_tiles=4").codegen_key() != base


def test__unknown_attribute__of_parsed_flags_is_an_attribute_error():
    with pytest.raises(AttributeError, match="TF_POPLAR_FLAGS has no flag 'nope'"):
        parse("").nope  # noqa: B018


def test__bad_flag__fails_configure_and_ipu_use_but_leaves_the_system(fresh_ipu_system, monkeypatch):
    from popjit.ipu import config as ipu_config

    before = list(fresh_ipu_system.system().devices)
    monkeypatch.setenv("TF_POPLAR_FLAGS", "--use_ipu_model --no_such_flag")
    cfg = ipu_config.IPUConfig()
    cfg.auto_select_ipus = 2
    with pytest.raises(TFPoplarFlagsError, match="unknown flag --no_such_flag"):
        cfg.configure_ipu_system()
    with pytest.raises(TFPoplarFlagsError, match="unknown flag --no_such_flag"):
        fresh_ipu_system.get_device(0)
    assert fresh_ipu_system.system().devices == before
    monkeypatch.setenv("TF_POPLAR_FLAGS", "--use_ipu_model")
    assert fresh_ipu_system.get_device(0) is before[0]


def _run(code: str, flags_value: str) -> subprocess.CompletedProcess:
    env = {**__import__("os").environ, "TF_POPLAR_FLAGS": flags_value}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=300)


SCRIPT = """
    from popjit.tensorflow.python import ipu
    cfg = ipu.config.IPUConfig()
    cfg.auto_select_ipus = 1
    cfg.configure_ipu_system()
    print("configured", ipu.utils.running_on_ipu_model())
"""


def test__process__with_an_unknown_flag_fails_naming_it():
    r = _run(SCRIPT, "--use_ipu_model --not_a_flag=3")
    assert r.returncode != 0 and "configured" not in r.stdout
    assert "TFPoplarFlagsError: TF_POPLAR_FLAGS: unknown flag --not_a_flag. Valid flags: --help," in r.stderr


def test__process__with_help_prints_the_usage_and_runs_on():
    r = _run(SCRIPT, "--help --use_ipu_model")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Usage for TF_POPLAR_FLAGS is:\n\t--help: ")
    assert r.stdout.count("Usage for TF_POPLAR_FLAGS is:") == 1
    assert r.stdout.rstrip().endswith("configured True")
