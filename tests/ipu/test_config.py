"""ipu.config.IPUConfig: the option tree's mechanics (as upstream config_test checks them), every
leaf's default, serialisation, every validation error of configure_ipu_system, and how a
configuration becomes virtual devices."""

from __future__ import annotations

import copy
import json
import logging
import typing

import pytest

from popjit.errors import FailedPreconditionError, InvalidArgumentError, UnimplementedError
from popjit.ipu import config as ipu_config
from popjit.ipu import utils
from popjit.ipu.config import (
    DeviceConnectionType,
    IPUConfig,
    IPUConfigError,
    MergeRemoteBuffersBehaviour,
    SchedulingAlgorithm,
    SelectionOrder,
    StochasticRoundingBehaviour,
    _Category,
    _ConfigBase,
    _Option,
)
from popjit.runtime import device as devices

# Every leaf of IPUConfig with its SDK 3.x default (spec/ipu_api.md §1.2).
DEFAULTS = {
    "allow_recompute": False,
    "selection_order": SelectionOrder.AUTO,
    "serialization_output_folder": "",
    "compilation_poplar_options": {},
    "gcl_poplar_options": {},
    "auto_select_ipus": [],
    "select_ipus": [],
    "convolutions.poplar_options": {},
    "device_connection.type": DeviceConnectionType.ALWAYS,
    "device_connection.version": "",
    "device_connection.enable_remote_buffers": False,
    "slices.poplar_options": {},
    "experimental.always_rearrange_copies_on_the_host": False,
    "experimental.enable_remote_buffer_embedding": False,
    "experimental.enable_prng_stability": False,
    "experimental.multi_replica_distribution.process_index": 0,
    "experimental.multi_replica_distribution.process_count": 0,
    "floating_point_behaviour.inv": False,
    "floating_point_behaviour.div0": False,
    "floating_point_behaviour.oflo": False,
    "floating_point_behaviour.esr": StochasticRoundingBehaviour.OFF,
    "floating_point_behaviour.nanoo": False,
    "floating_point_behaviour.set_all": False,
    "io_tiles.num_io_tiles": 0,
    "io_tiles.place_ops_on_io_tiles": False,
    "io_tiles.available_memory_proportion": 0.9,
    "ipu_model.compile_ipu_code": True,
    "ipu_model.tiles_per_ipu": 0,
    "ipu_model.version": "ipu2",
    "matmuls.clear_pass_type": False,
    "matmuls.poplar_options": {},
    "norms.use_stable_statistics": False,
    "norms.experimental.distributed_batch_norm_replica_group_size": 1,
    "optimizations.math.fast": False,
    "optimizations.math.dot_strength": True,
    "optimizations.prefetch_data_streams": True,
    "optimizations.combine_embedding_lookups": False,
    "optimizations.combine_matmuls": False,
    "optimizations.enable_graph_outlining": True,
    "optimizations.merge_infeed_io_copies": False,
    "optimizations.maximum_cross_replica_sum_buffer_size": 0,
    "optimizations.maximum_reduce_scatter_buffer_size": 0,
    "optimizations.maximum_inter_ipu_copies_buffer_size": 0,
    "optimizations.maximum_send_recv_cluster_size": 0,
    "optimizations.maximum_reduce_many_buffer_size": 0,
    "optimizations.maximum_all_gather_buffer_size": 0,
    "optimizations.minimum_remote_tensor_size": 128,
    "optimizations.merge_remote_buffers": MergeRemoteBuffersBehaviour.IF_BENEFICIAL,
    "optimizations.enable_gather_simplifier": True,
    "optimizations.triangular_solve_expander_block_size": 0,
    "optimizations.cholesky_block_size": 0,
    "optimizations.enable_fast_math": False,
    "pooling.poplar_options": {},
    "scheduling.algorithm": SchedulingAlgorithm.CHOOSE_BEST,
    "scheduling.maximum_scheduler_lookahead_depth": 5,
    "scheduling.maximum_scheduler_search_space_size": 64,
}

DEVICES_TYPE = "typing.Union[int, typing.List[int], typing.Tuple[int, ...]]"


@pytest.fixture(autouse=True)
def _no_ambient_flags(monkeypatch):
    """Tests set TF_POPLAR_FLAGS themselves; a value in the caller's environment must not leak in."""
    monkeypatch.delenv("TF_POPLAR_FLAGS", raising=False)


def get(cfg: _ConfigBase, name: str) -> typing.Any:
    for part in name.split("."):
        cfg = getattr(cfg, part)
    return cfg


def configured(cfg: IPUConfig) -> list[devices.VirtualDevice]:
    ipu_config.configure_ipu_system(cfg)
    return devices.system().devices


# -- a small tree for the mechanics ---------------------------------------------------------------


class _Inner(_ConfigBase):
    attr3 = _Option("test", "This is the docstring for attr3")
    attr0 = _Option(1)


class _Old(_ConfigBase):
    attr2 = _Option(1)
    attr5 = _Option(1, deprecated="attr5 is no longer relevant.")


class _Middle(_ConfigBase):
    attr1 = _Option(1, "Docstring of attr1", type=typing.Union[int, list], deprecated="attr1 has no effect.")  # noqa: UP007
    old = _Category(_Old, "A deprecated category", deprecated="Category is no longer relevant.")
    inner = _Category(_Inner, "")


class _Tree(_ConfigBase):
    attr0 = _Option(1, "Docstring of attr0", type=typing.Union[int, str, list])  # noqa: UP007
    attr6 = _Option(([1.0],), type=typing.Tuple[typing.List[typing.Union[float, typing.Tuple[str]]], ...])  # noqa: UP006, UP007
    nested = _Category(_Middle, "The nested category")


# -- mechanics ------------------------------------------------------------------------------------


def test__full_names__are_relative_to_the_root():
    t = _Tree()
    assert t._get_full_name("attr0") == "attr0"
    assert t.nested._get_full_name("attr1") == "nested.attr1"
    assert t.nested.inner._get_full_name("attr0") == "nested.inner.attr0"
    assert IPUConfig().experimental.multi_replica_distribution._get_full_name("process_index") == \
        "experimental.multi_replica_distribution.process_index"


def test__assignment__sets_leaves_and_same_names_at_other_depths_are_separate():
    t = _Tree()
    t.attr0 = 5
    t.nested.inner.attr0 = 7
    assert (t.attr0, t.nested.inner.attr0) == (5, 7)


def test__assigning_a_category__raises_naming_it():
    cfg = IPUConfig()
    with pytest.raises(Exception, match=r"^ipu_model is a category and cannot be assigned to\.$"):
        cfg.ipu_model = 3
    with pytest.raises(IPUConfigError, match=r"experimental\.multi_replica_distribution is a category"):
        cfg.experimental.multi_replica_distribution = {}


@pytest.mark.parametrize("name, value, typ", [
    ("auto_select_ipus", True, DEVICES_TYPE),
    ("auto_select_ipus", [1, True], DEVICES_TYPE),
    ("auto_select_ipus", 2.0, DEVICES_TYPE),
    ("select_ipus", True, DEVICES_TYPE),
    ("ipu_model.tiles_per_ipu", True, "int"),
    ("ipu_model.tiles_per_ipu", 8.0, "int"),
    ("ipu_model.version", 2, "str"),
    ("io_tiles.available_memory_proportion", 1, "float"),
    ("allow_recompute", 1, "bool"),
    ("selection_order", 2, "SelectionOrder"),
    ("floating_point_behaviour.esr", 1, "typing.Union[StochasticRoundingBehaviour, bool]"),
    ("matmuls.poplar_options", [("a", "b")], "dict"),
])
def test__wrong_type__raises_typeerror_and_keeps_the_value(name, value, typ):
    cfg = IPUConfig()
    *path, leaf = name.split(".")
    node = get(cfg, ".".join(path)) if path else cfg
    before = copy.deepcopy(getattr(node, leaf))
    expected = f"Trying to set {name} to {value}, but it must be of type {typ}"
    with pytest.raises(TypeError) as e:
        setattr(node, leaf, value)
    assert str(e.value) == expected
    assert getattr(node, leaf) == before


@pytest.mark.parametrize("value", [2, [1, 1], (2, 2), [], ()])
def test__device_lists__accept_int_list_and_tuple(value):
    cfg = IPUConfig()
    cfg.auto_select_ipus = value
    cfg.select_ipus = value
    assert cfg.auto_select_ipus == value and cfg.select_ipus == value


def test__nested_type_hints__are_checked_elementwise():
    t = _Tree()
    t.attr0 = "s"
    t.attr0 = [5, "x", True]
    t.attr6 = ([1.0, 2.0, ("a",)],)
    t.attr6 = ([5.0], [("b",)])
    for bad in (True, ([True],), ([1.0], ["a"]), ([1.0], [("a",), 1]), [[1.0]]):
        with pytest.raises(TypeError, match=r"^Trying to set attr6 to .*, but it must be of type typing\.Tuple\["
                                            r"typing\.List\[typing\.Union\[float, typing\.Tuple\[str\]\]\], \.\.\.\]$"):
            t.attr6 = bad


def test__private_and_unknown_names__are_rejected_on_set_and_get():
    cfg = IPUConfig()
    for name in ("_private_attribute", "_meta", "_attr_metadata", "nonsense_option_xyz"):
        with pytest.raises(ValueError, match=rf"^'{name}' is not a valid attribute of this config\.$"):
            setattr(cfg, name, 1)
    with pytest.raises(ValueError, match=r"^'nonsense_option_xyz' is not a valid attribute of this config\.$"):
        cfg.nonsense_option_xyz  # noqa: B018
    assert not hasattr(cfg, "nonsense_option_xyz")  # the error is also an AttributeError


@pytest.mark.parametrize("expr, name, hint", [
    ("cfg.ipu_model.tile_per_ipu", "tile_per_ipu", "ipu_model.tiles_per_ipu"),
    ("cfg.tiles_per_ipu", "tiles_per_ipu", "ipu_model.tiles_per_ipu"),
    ("cfg.ipu_model.auto_select_ipus", "auto_select_ipus", "auto_select_ipus"),
    ("cfg.auto_select_ipu", "auto_select_ipu", "auto_select_ipus"),
    ("cfg.ipu_modle", "ipu_modle", "ipu_model"),
    ("cfg.optimizations.fast", "fast", "optimizations.math.fast"),
    ("cfg.multi_replica_distribution", "multi_replica_distribution", "experimental.multi_replica_distribution"),
])
def test__did_you_mean__names_the_full_path(expr, name, hint):
    cfg = IPUConfig()  # noqa: F841 (used by eval)
    expected = f"'{name}' is not a valid attribute of this config. Did you mean '{hint}'?"
    with pytest.raises(ValueError) as e:
        eval(expr)
    assert str(e.value) == expected
    with pytest.raises(ValueError) as e:
        exec(f"{expr} = 1")
    assert str(e.value) == expected


def test__did_you_mean__lists_every_place_a_name_lives():
    with pytest.raises(ValueError, match=r"Did you mean 'device_connection.version' or 'ipu_model.version'\?$"):
        IPUConfig().version = "ipu1"


def test__did_you_mean__on_a_deep_path_stops_at_the_first_unknown_name():
    cfg = IPUConfig()
    with pytest.raises(ValueError, match=r"^'ipu_modell' is not a valid .* Did you mean 'ipu_model'\?$"):
        cfg.ipu_modell.version.x = 1


def test__metadata__of_options_and_categories():
    cfg = IPUConfig()
    md = cfg.get_attribute_metadata("auto_select_ipus")
    assert (md.name, md.type, md.default, md.deprecated, md.deprecated_msg, md._depth) == \
        ("auto_select_ipus", DEVICES_TYPE, [], False, None, 1)
    assert "/device:IPU:0" in md.__doc__
    md = cfg.get_attribute_metadata("ipu_model.tiles_per_ipu")
    assert (md.name, md.type, md.default, md._depth) == ("ipu_model.tiles_per_ipu", "int", 0, 2)
    md = cfg.ipu_model.get_attribute_metadata("version")
    assert (md.name, md.type, md.default) == ("ipu_model.version", "str", "ipu2")
    md = cfg.get_attribute_metadata("ipu_model")
    assert (md.name, md.type, md.default) == ("ipu_model", None, None)
    md = cfg.get_attribute_metadata("experimental.multi_replica_distribution.process_count")
    assert md._depth == 3
    assert md.check_type(3) is True
    with pytest.raises(TypeError, match=r"Trying to set experimental\.multi_replica_distribution\.process_count to x"):
        md.check_type("x")


def test__metadata__doc_defaults_to_no_description():
    t = _Tree()
    assert t.get_attribute_metadata("nested.inner.attr0").__doc__ == "No description provided."
    assert t.get_attribute_metadata("nested.inner.attr3").__doc__ == "This is the docstring for attr3"
    assert t.get_attribute_metadata("nested.inner").__doc__ == "No description provided."
    assert t.get_attribute_metadata("attr6").type == \
        "typing.Tuple[typing.List[typing.Union[float, typing.Tuple[str]]], ...]"


def test__every_option__has_a_description_and_a_type():
    cfg = IPUConfig()
    for name in DEFAULTS:
        md = cfg.get_attribute_metadata(name)
        assert md.__doc__ != "No description provided.", name
        assert md.type is not None and md.check_type(md.default), name


@pytest.mark.parametrize("attr, message", [
    ("ipu_model.foo", "Could not get attribute metadata for 'ipu_model.foo': 'foo' is not a valid attribute"),
    ("_meta", "Could not get attribute metadata for '_meta': '_meta' is not"),
    ("auto_select_ipus.x", "Could not get attribute metadata for 'auto_select_ipus.x': 'auto_select_ipus' is an "
                           "option"),
])
def test__metadata_of_unknown_names__raises(attr, message):
    with pytest.raises(ValueError, match="^" + message.replace(".", r"\.")):
        IPUConfig().get_attribute_metadata(attr)


def test__metadata__names_are_relative_to_the_category_asked():
    with pytest.raises(ValueError, match=r"^Could not get attribute metadata for 'ipu_model\.version': 'ipu_model' "):
        IPUConfig().ipu_model.get_attribute_metadata("ipu_model.version")


def test__deprecated_option__logs_its_full_name_and_message(caplog):
    cfg = IPUConfig()
    with caplog.at_level(logging.WARNING, logger="popjit"):
        cfg.optimizations.enable_fast_math = True
    assert "optimizations.enable_fast_math has been deprecated: 'enable_fast_math' has been moved to " \
           "'optimizations.math.fast'." in caplog.text
    md = cfg.get_attribute_metadata("optimizations.enable_fast_math")
    assert md.deprecated and md.deprecated_msg.startswith("'enable_fast_math' has been moved")


def test__esr__bool_is_accepted_but_logged_as_deprecated_and_enum_is_not(caplog):
    cfg = IPUConfig()
    with caplog.at_level(logging.WARNING, logger="popjit"):
        cfg.floating_point_behaviour.esr = StochasticRoundingBehaviour.ON
        assert caplog.text == ""
        cfg.floating_point_behaviour.esr = True
    assert "floating_point_behaviour.esr has been deprecated: setting it with a bool" in caplog.text
    assert cfg.floating_point_behaviour.esr is True
    assert not cfg.get_attribute_metadata("floating_point_behaviour.esr").deprecated


def test__deprecation__propagates_to_a_category_s_children_without_overwriting(caplog):
    t = _Tree()
    assert t.get_attribute_metadata("nested.old").deprecated_msg == "Category is no longer relevant."
    assert t.get_attribute_metadata("nested.old.attr2").deprecated_msg == "Category is no longer relevant."
    assert t.get_attribute_metadata("nested.old.attr5").deprecated_msg == "attr5 is no longer relevant."
    assert not t.get_attribute_metadata("nested.inner.attr3").deprecated
    with caplog.at_level(logging.WARNING, logger="popjit"):
        t.nested.inner.attr3 = "quiet"
        assert caplog.text == ""
        t.nested.old.attr2 = 5
        t.nested.attr1 = [2]
    assert "nested.old.attr2 has been deprecated: Category is no longer relevant." in caplog.text
    assert "nested.attr1 has been deprecated: attr1 has no effect." in caplog.text


def test__stochastic_rounding__from_bool():
    assert StochasticRoundingBehaviour.from_bool(True) is StochasticRoundingBehaviour.ON
    assert StochasticRoundingBehaviour.from_bool(False) is StochasticRoundingBehaviour.OFF
    assert [m.name for m in StochasticRoundingBehaviour] == ["OFF", "ON", "REPLICA_IDENTICAL_ONLY"]


def test__enums__have_graphcore_s_members():
    assert [m.name for m in SelectionOrder] == ["AUTO", "ZIGZAG", "SNAKE", "HOOF"]
    assert [m.name for m in DeviceConnectionType] == ["ALWAYS", "ON_DEMAND", "NEVER", "PRE_COMPILE"]
    assert [m.name for m in ipu_config.ExecutionProfileType] == \
        ["NO_PROFILE", "DEVICE_PROFILE", "IPU_PROFILE", "TILE_PROFILE"]
    assert [m.name for m in MergeRemoteBuffersBehaviour] == ["NO_MERGING", "MERGE", "IF_BENEFICIAL"]
    assert [m.name for m in SchedulingAlgorithm] == \
        ["CHOOSE_BEST", "CLUSTERING", "POST_ORDER", "LOOK_AHEAD", "SHORTEST_PATH"]


def test__deepcopy__is_independent():
    cfg = IPUConfig()
    cfg.auto_select_ipus = [2]
    cfg.matmuls.poplar_options = {"availableMemoryProportion": "0.3"}
    other = copy.deepcopy(cfg)
    other.auto_select_ipus.append(4)
    other.matmuls.poplar_options["partialsType"] = "half"
    other.ipu_model.version = "ipu1"
    assert cfg.auto_select_ipus == [2] and cfg.matmuls.poplar_options == {"availableMemoryProportion": "0.3"}
    assert cfg.ipu_model.version == "ipu2"
    with pytest.raises(TypeError, match=r"Trying to set ipu_model\.tiles_per_ipu"):
        other.ipu_model.tiles_per_ipu = "x"  # the copy keeps its checks


def test__two_configs__do_not_share_mutable_defaults():
    a, b = IPUConfig(), IPUConfig()
    a.auto_select_ipus.append(1)
    a.convolutions.poplar_options["x"] = "y"
    assert b.auto_select_ipus == [] and b.convolutions.poplar_options == {}


# -- defaults and serialisation -------------------------------------------------------------------


def test__every_leaf__has_graphcore_s_default():
    cfg = IPUConfig()
    assert set(cfg.to_dict()) == set(DEFAULTS)
    for name, default in DEFAULTS.items():
        assert get(cfg, name) == default, name
        assert type(get(cfg, name)) is type(default), name
        assert cfg.get_attribute_metadata(name).default == default, name


def test__to_dict__uses_full_names_and_enum_values():
    cfg = IPUConfig()
    cfg.selection_order = SelectionOrder.SNAKE
    d = cfg.to_dict()
    assert d["selection_order"] == SelectionOrder.SNAKE.value
    assert d["ipu_model.version"] == "ipu2"
    assert d["experimental.multi_replica_distribution.process_count"] == 0


def _changed_config(esr: StochasticRoundingBehaviour = StochasticRoundingBehaviour.REPLICA_IDENTICAL_ONLY) -> IPUConfig:
    cfg = IPUConfig()
    cfg.auto_select_ipus = [2, 2]
    cfg.selection_order = SelectionOrder.HOOF
    cfg.ipu_model.tiles_per_ipu = 8
    cfg.ipu_model.version = "ipu1"
    cfg.floating_point_behaviour.esr = esr
    cfg.matmuls.poplar_options = {"availableMemoryProportion": "0.3"}
    cfg.optimizations.merge_remote_buffers = MergeRemoteBuffersBehaviour.MERGE
    cfg.io_tiles.available_memory_proportion = 0.5
    cfg.scheduling.algorithm = SchedulingAlgorithm.LOOK_AHEAD
    return cfg


def test__dict_and_json__round_trip():
    cfg = _changed_config()
    via_dict, via_json = IPUConfig(), IPUConfig()
    via_dict.from_dict(cfg.to_dict())
    via_json.from_json(cfg.to_json())
    for restored in (via_dict, via_json):
        assert restored.to_dict() == cfg.to_dict()
        assert restored.selection_order is SelectionOrder.HOOF
        assert restored.scheduling.algorithm is SchedulingAlgorithm.LOOK_AHEAD
        assert restored.floating_point_behaviour.esr is StochasticRoundingBehaviour.REPLICA_IDENTICAL_ONLY
    assert json.loads(cfg.to_json())["ipu_model.tiles_per_ipu"] == 8


def test__from_dict__accepts_enum_names_and_keeps_missing_options():
    cfg = IPUConfig()
    cfg.ipu_model.tiles_per_ipu = 4
    cfg.from_dict({"selection_order": "SNAKE", "scheduling.algorithm": "SchedulingAlgorithm.POST_ORDER"})
    assert cfg.selection_order is SelectionOrder.SNAKE
    assert cfg.scheduling.algorithm is SchedulingAlgorithm.POST_ORDER
    assert cfg.ipu_model.tiles_per_ipu == 4


def test__from_dict__with_a_bad_value__changes_nothing():
    cfg = IPUConfig()
    with pytest.raises(TypeError, match=r"Trying to set ipu_model\.tiles_per_ipu to x"):
        cfg.from_dict({"auto_select_ipus": 2, "ipu_model.tiles_per_ipu": "x"})
    with pytest.raises(ValueError, match="selection_order: 'DIAGONAL' is not a SelectionOrder"):
        cfg.from_dict({"auto_select_ipus": 2, "selection_order": "DIAGONAL"})
    assert cfg.auto_select_ipus == []


def test__from_dict__warns_about_unknown_keys(caplog):
    cfg = IPUConfig()
    with caplog.at_level(logging.WARNING, logger="popjit"):
        cfg.from_dict({"ipu_model.tile_per_ipu": 4})
    assert "'ipu_model.tile_per_ipu' is not an option of IPUConfig and was ignored. Did you mean " \
           "'ipu_model.tiles_per_ipu'?" in caplog.text


def test__str__lists_every_option():
    text = str(_changed_config())
    assert "ipu_model.tiles_per_ipu = 8" in text and "selection_order = SelectionOrder.HOOF" in text
    assert len(text.splitlines()) == len(DEFAULTS)
    assert repr(IPUConfig()).startswith("IPUConfig:\n  allow_recompute = False")


# -- validation at configure time -----------------------------------------------------------------


def _cfg(**options: typing.Any) -> IPUConfig:
    cfg = IPUConfig()
    cfg.auto_select_ipus = 1
    for name, value in options.items():
        *path, leaf = name.split("__")
        setattr(get(cfg, ".".join(path)) if path else cfg, leaf, value)
    return cfg


MODEL = "--use_ipu_model"

VALIDATION = [
    # (options, TF_POPLAR_FLAGS, exception, message)
    ({"select_ipus": [1]}, "", IPUConfigError, "Only one of `auto_select_ipus` and `select_ipus` can be set."),
    ({"auto_select_ipus": [], "select_ipus": [1, 1]}, "", ValueError,
     "All MultiIPU indices in `select_ipus` must be unique."),
    ({"auto_select_ipus": [], "select_ipus": [1, 2]}, MODEL, IPUConfigError,
     "When using the IPUModel, the devices to attach to can only be specified with `auto_select_ipus`."),
    ({"io_tiles__place_ops_on_io_tiles": True}, "", ValueError,
     "Cannot place ops on I/O tiles when io_tiles.num_io_tiles == 0"),
    ({"io_tiles__num_io_tiles": 32, "norms__experimental__distributed_batch_norm_replica_group_size": 2}, "",
     ValueError, "norms.experimental.distributed_batch_norm_replica_group_size is not supported with I/O tiles."),
    ({"io_tiles__num_io_tiles": -2}, "", ValueError, "io_tiles.num_io_tiles must be at least 0, not -2."),
    ({"norms__experimental__distributed_batch_norm_replica_group_size": 0}, "", ValueError,
     "norms.experimental.distributed_batch_norm_replica_group_size must be at least 1."),
    ({"norms__experimental__distributed_batch_norm_replica_group_size": 2}, "", UnimplementedError,
     "norms.experimental.distributed_batch_norm_replica_group_size = 2 is not supported by popjit"),
    ({"device_connection__type": DeviceConnectionType.NEVER}, "", ValueError,
     "device_connection.version must be set when device_connection.type is DeviceConnectionType.NEVER or "
     "DeviceConnectionType.PRE_COMPILE"),
    ({"device_connection__type": DeviceConnectionType.PRE_COMPILE}, "", ValueError,
     "device_connection.version must be set when device_connection.type"),
    ({"device_connection__version": "ipu9"}, "", ValueError,
     "device_connection.version must be one of 'ipu"),
    ({"ipu_model__version": ""}, MODEL, ValueError, "ipu_model.version must be set when using the IPUModel."),
    ({"ipu_model__version": "ipu7"}, "", ValueError, "ipu_model.version must be one of"),
    ({"ipu_model__tiles_per_ipu": -4}, "", ValueError, "ipu_model.tiles_per_ipu must be 0 (the full IPU) or a"),
    ({"experimental__multi_replica_distribution__process_count": 2}, MODEL, IPUConfigError,
     "Multi-replica distribution is not supported on the IPU model."),
    ({"experimental__multi_replica_distribution__process_count": 1,
      "experimental__multi_replica_distribution__process_index": 5}, "", ValueError,
     "experimental.multi_replica_distribution.process_index must be in the range "
     "[0, experimental.multi_replica_distribution.process_count)."),
    ({"experimental__multi_replica_distribution__process_count": 2,
      "experimental__multi_replica_distribution__process_index": -1}, "", ValueError,
     "experimental.multi_replica_distribution.process_index must be in the range"),
    ({"experimental__multi_replica_distribution__process_count": 2}, "", ValueError,
     "experimental.multi_replica_distribution.process_count is 2, but this program runs as 1 instance. Start the "
     "program with `popjit poprun --num-instances N ...`"),
    ({"matmuls__poplar_options": {"availableMemoryProportion": 0.3}}, "", TypeError,
     "matmuls.poplar_options: Poplar options map names to string values"),
    ({"auto_select_ipus": 3}, "", InvalidArgumentError, "Could not find a device with 3 IPUs"),
    ({"auto_select_ipus": [1, 0]}, "", InvalidArgumentError, "Could not find a device with 0 IPUs"),
    ({"auto_select_ipus": 32}, "", InvalidArgumentError, "Could not attach to 32 IPUs"),
    ({"auto_select_ipus": [], "select_ipus": [99]}, "", InvalidArgumentError,
     "Could not find an IPU device with id 99"),
    ({"auto_select_ipus": [], "select_ipus": [0, 16]}, "", InvalidArgumentError,
     "select_ipus: device 16 (IPUs [0, 1]) overlaps another selected device."),
]


@pytest.mark.parametrize("options, flags, error, message", VALIDATION)
def test__invalid_config__raises_and_leaves_the_system_as_it_was(options, flags, error, message, fresh_ipu_system,
                                                                   monkeypatch):
    monkeypatch.setenv("TF_POPLAR_FLAGS", flags)
    before = list(fresh_ipu_system.system().devices)
    cfg = _cfg(**options)
    with pytest.raises(error) as e:
        ipu_config.configure_ipu_system(cfg)
    assert message in str(e.value)
    assert fresh_ipu_system.system().devices == before and all(a is b for a, b in zip(before, devices.system().devices))


def test__non_config__is_a_type_error():
    for bad in (None, {"auto_select_ipus": 1}, "cfg"):
        with pytest.raises(TypeError, match=r"^`config` must be an IpuOptions instance\.$"):
            ipu_config.configure_ipu_system(bad)


def test__validation__does_not_modify_the_config(fresh_ipu_system):
    cfg = _cfg(auto_select_ipus=2)
    configured(cfg)
    assert cfg.auto_select_ipus == 2  # an int stays an int (Graphcore's SDK turned it into a list)


# -- configuration → virtual devices --------------------------------------------------------------


@pytest.mark.parametrize("auto, counts", [(1, [1]), (2, [2]), ([1, 1], [1, 1]), ((2, 4), [2, 4]),
                                          ([1, 2, 1], [1, 2, 1])])
def test__auto_select_ipus__makes_one_device_per_entry(auto, counts, fresh_ipu_system):
    devs = configured(_cfg(auto_select_ipus=auto))
    assert [d.num_ipus for d in devs] == counts
    assert [d.name for d in devs] == [f"/device:IPU:{i}" for i in range(len(counts))]
    assert [d.target.num_ipus for d in devs] == counts


@pytest.mark.parametrize("select, counts", [(0, [1]), ([0, 1], [1, 1]), ([16], [2]), ([24, 25], [4, 4]), (30, [16])])
def test__select_ipus__picks_gc_info_ids(select, counts, fresh_ipu_system):
    devs = configured(_cfg(auto_select_ipus=[], select_ipus=select))
    assert [d.num_ipus for d in devs] == counts


def test__virtual_device_ids__follow_gc_info():
    ids = ipu_config.virtual_device_ids(16)
    assert len(ids) == 31
    assert ids[0] == (0,) and ids[15] == (15,) and ids[16] == (0, 1) and ids[23] == (14, 15)
    assert ids[24] == (0, 1, 2, 3) and ids[28] == tuple(range(8)) and ids[30] == tuple(range(16))


@pytest.mark.parametrize("version, tiles, expected_tiles, bytes_per_tile", [
    ("ipu2", 0, 1472, 638_976), ("ipu1", 0, 1216, 262_144), ("ipu2", 8, 8, 638_976), ("ipu1", 4, 4, 262_144)])
def test__ipu_model_options__pick_the_target(version, tiles, expected_tiles, bytes_per_tile, fresh_ipu_system):
    dev = configured(_cfg(ipu_model__version=version, ipu_model__tiles_per_ipu=tiles))[0]
    assert (dev.target.version, dev.target.tiles, dev.target.bytes_per_tile) == (version, expected_tiles,
                                                                                   bytes_per_tile)
    assert dev.target.ipu_model is False


def test__device_connection_version__picks_the_hardware_without_the_model(fresh_ipu_system, monkeypatch):
    cfg = _cfg(device_connection__type=DeviceConnectionType.PRE_COMPILE, device_connection__version="ipu1")
    assert configured(cfg)[0].target.version == "ipu1"
    monkeypatch.setenv("TF_POPLAR_FLAGS", MODEL)
    assert configured(cfg)[0].target.version == "ipu2"  # the IPU Model simulates ipu_model.version


def test__use_ipu_model__marks_the_target_and_ipu_model_tiles_applies_when_tiles_is_0(fresh_ipu_system,
                                                                                       monkeypatch):
    monkeypatch.setenv("TF_POPLAR_FLAGS", "--use_ipu_model --ipu_model_tiles=16")
    dev = configured(_cfg())[0]
    assert dev.target.ipu_model is True and dev.target.tiles == 16
    dev = configured(_cfg(ipu_model__tiles_per_ipu=4))[0]
    assert dev.target.tiles == 4
    assert utils.running_on_ipu_model()


def test__no_devices_requested__attaches_none(fresh_ipu_system, caplog):
    with caplog.at_level(logging.WARNING, logger="popjit"):
        configured(IPUConfig())
    assert devices.system().devices == [] and "neither auto_select_ipus nor select_ipus" in caplog.text
    with pytest.raises(RuntimeError, match=r"^No IPU devices configured\.$"):
        ipu_config.get_ipu_config()
    with pytest.raises(InvalidArgumentError, match="configure_ipu_system"):
        devices.get_device(0)


def test__get_ipu_config__before_configuring__raises(fresh_ipu_system):
    ipu_config.reset_ipu_configuration()
    with pytest.raises(RuntimeError, match=r"^No IPU devices configured\.$"):
        ipu_config.get_ipu_config()


def test__get_ipu_config__returns_copies_of_the_applied_config_per_device(fresh_ipu_system):
    on = StochasticRoundingBehaviour.ON  # REPLICA_IDENTICAL_ONLY is refused on devices of several IPUs
    cfg = _changed_config(on)
    configured(cfg)
    cfg.ipu_model.tiles_per_ipu = 100  # later changes to the user's object do not leak in
    got = ipu_config.get_ipu_config()
    assert len(got) == 2 and got[0] is not got[1]
    assert got[0].ipu_model.tiles_per_ipu == 8 and got[0].to_dict() == _changed_config(on).to_dict()
    got[0].ipu_model.tiles_per_ipu = 1
    assert ipu_config.get_ipu_config()[0].ipu_model.tiles_per_ipu == 8


def test__get_ipu_config__describes_devices_attached_without_a_config(fresh_ipu_system):
    fresh_ipu_system.configure([2, 1], "ipu1", 32)
    cfg = ipu_config.get_ipu_config()[0]
    assert (cfg.auto_select_ipus, cfg.ipu_model.version, cfg.ipu_model.tiles_per_ipu) == ([2, 1], "ipu1", 32)


def test__reconfiguring__resets_only_for_a_different_config(fresh_ipu_system, caplog):
    first = configured(_cfg(auto_select_ipus=2))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="popjit"):
        again = configured(_cfg(auto_select_ipus=2))
        assert caplog.text == "" and again[0] is first[0]
        other = configured(_cfg(auto_select_ipus=4))
    assert "Resetting existing IPU configuration before applying new configuration" in caplog.text
    assert other[0] is not first[0] and other[0].num_ipus == 4


def test__reconfiguring_without_reset__is_refused(fresh_ipu_system):
    configured(_cfg())
    with pytest.raises(FailedPreconditionError, match="reset_ipu_configuration"):
        ipu_config.configure_ipu_system(_cfg(auto_select_ipus=2), reset_configuration=False)
    ipu_config.configure_ipu_system(_cfg(), reset_configuration=False)  # the same one is fine
    assert devices.system().devices[0].num_ipus == 1


def test__method_form__configures(fresh_ipu_system):
    cfg = _cfg(auto_select_ipus=[1, 1])
    cfg.configure_ipu_system()
    assert len(devices.system().devices) == 2


def test__reset_ipu_configuration__releases_the_devices(fresh_ipu_system):
    configured(_cfg())
    ipu_config.reset_ipu_configuration()
    assert not devices.is_configured()
    with pytest.raises(InvalidArgumentError, match="configure_ipu_system"):
        devices.get_device(0)


# -- SDK 1.x-2.0 spellings ------------------------------------------------------------------------


def test__legacy_api__builds_the_same_config(fresh_ipu_system):
    opts = utils.create_ipu_config(merge_infeed_io_copies=True, disable_graph_outlining=True,
                                   max_cross_replica_sum_buffer_size=1024, scheduler_selection="Clustering",
                                   selection_order=SelectionOrder.SNAKE)
    opts = utils.auto_select_ipus(opts, 2)
    opts = utils.set_ipu_model_options(opts, compile_ipu_code=False, tiles_per_ipu=8, ipu_model_version="ipu1")
    opts = utils.set_floating_point_behaviour_options(opts, esr=False)
    opts = utils.set_matmul_options(opts, {"availableMemoryProportion": "0.2"}, clear_pass_type=True)
    opts = utils.set_optimization_options(opts, merge_remote_buffers=True, max_send_recv_cluster_size=64)
    opts = utils.set_ipu_connection_type(opts, DeviceConnectionType.ON_DEMAND, ipu_version=2)
    assert isinstance(opts, IPUConfig)
    assert opts.optimizations.merge_infeed_io_copies and not opts.optimizations.enable_graph_outlining
    assert opts.optimizations.maximum_cross_replica_sum_buffer_size == 1024
    assert opts.scheduling.algorithm is SchedulingAlgorithm.CLUSTERING
    assert opts.selection_order is SelectionOrder.SNAKE
    assert (opts.ipu_model.compile_ipu_code, opts.ipu_model.tiles_per_ipu, opts.ipu_model.version) == \
        (False, 8, "ipu1")
    fp = opts.floating_point_behaviour
    assert (fp.inv, fp.div0, fp.oflo, fp.nanoo, fp.esr) == (True, True, True, True, StochasticRoundingBehaviour.OFF)
    assert opts.matmuls.poplar_options == {"availableMemoryProportion": "0.2"} and opts.matmuls.clear_pass_type
    assert opts.optimizations.merge_remote_buffers is MergeRemoteBuffersBehaviour.MERGE
    assert opts.optimizations.maximum_send_recv_cluster_size == 64
    assert (opts.device_connection.type, opts.device_connection.version) == (DeviceConnectionType.ON_DEMAND, "ipu2")
    utils.configure_ipu_system(opts)
    assert devices.get_device(0).num_ipus == 2 and devices.get_device(0).target.version == "ipu2"
    assert utils.get_num_of_ipus_in_device("/device:IPU:0") == 2


def test__legacy_api__errors():
    opts = utils.auto_select_ipus(utils.create_ipu_config(), 1)
    with pytest.raises(Exception, match=r"^IPU devices have already been configured\.$"):
        utils.auto_select_ipus(opts, 1)
    with pytest.raises(Exception, match="`profiling` and `enable_ipu_events` are mutually exclusive"):
        utils.create_ipu_config(profiling=True, enable_ipu_events=True)
    with pytest.raises(Exception, match="`profiling` is required when `profile_execution` is set"):
        utils.create_ipu_config(profile_execution=ipu_config.ExecutionProfileType.TILE_PROFILE)
    for given in ("profiling", "enable_ipu_events"):  # SDK 1.x event-trace reports: POPLAR_ENGINE_OPTIONS instead
        with pytest.raises(UnimplementedError,
                           match=rf"create_ipu_config\({given}=True\) is not implemented.*POPLAR_ENGINE_OPTIONS"):
            utils.create_ipu_config(**{given: True})
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_nonsense'"):
        utils.set_optimization_options(opts, max_nonsense=1)
    with pytest.raises(TypeError, match="create_ipu_config"):
        utils.auto_select_ipus({}, 1)


def test__utils__reexports_the_config_api():
    assert utils.IPUConfig is IPUConfig and utils.SelectionOrder is SelectionOrder
    assert utils.configure_ipu_system is ipu_config.configure_ipu_system
    assert utils.DeviceConnectionType is DeviceConnectionType
