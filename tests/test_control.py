"""The control address space: every message of the table, replies, and clear refusals."""

import numpy as np
import pytest
from streaming import Identity

import bendserver as tb
from bendserver.control import ADDRESSES, Controller
from bendserver.presets.library import PresetLibrary

ONES = np.ones((1, 256), dtype=np.float32)


@pytest.fixture
def control(tmp_path):
    engine = tb.StreamEngine(Identity(), block=256, fuse=False)
    engine.bended.create_version("double", {"gain.weight": 2 * engine.model.module.gain.weight})
    return Controller(engine, presets=PresetLibrary(tmp_path / "user", tmp_path / "shipped"))


def _level(control):
    return float(control.engine.process(ONES)[0, 0])


def test_bend_add_set_enable_remove(control):
    control.dispatch("/bend/add", ["g", "Scale", "gain", "value", 0.5])
    assert _level(control) == 0.5
    control.dispatch("/bend/g/value", [0.25])
    assert _level(control) == 0.25
    control.dispatch("/bend/g/enable", [0.0])  # Pd sends floats
    assert _level(control) == 1.0
    control.dispatch("/bend/g/enable", [1.0])
    assert _level(control) == 0.25
    assert control.dispatch("/get/bend/g/value") == [("/get/bend/g/value", [0.25])]
    assert control.dispatch("/list", ["bends"]) == [("/list/bends", ["/bend/g/value"])]
    control.dispatch("/bend/remove", ["g"])
    assert _level(control) == 1.0


def test_bend_add_with_integer_options_as_floats(control):
    control.dispatch("/bend/add", ["m", "Mask", "gain", "prob", 0.0, "dim", 1.0, "seed", 3.0])
    assert _level(control) == 0.0
    assert control.engine.ops["m"].dim == 1


def test_versions_interpolation_and_engine(control):
    control.dispatch("/version", ["double"])
    assert _level(control) == 2.0
    control.dispatch("/interp", ["_default", 1, "double", 1])
    assert _level(control) == 1.5
    assert control.dispatch("/get/interp")[0][1] == ["_default", 0.5, "double", 0.5]
    control.dispatch("/engine/gain", [2.0])
    control.engine.process(ONES)  # the gain moves across one block
    assert _level(control) == 3.0
    control.dispatch("/engine/mix", [0.0])
    control.engine.process(ONES)
    assert _level(control) == 2.0
    control.dispatch("/engine/bypass", [1])
    assert _level(control) == 2.0
    control.dispatch("/engine/reset")


def test_presets_save_and_load(control, tmp_path):
    control.dispatch("/bend/add", ["g", "Scale", "gain", "value", 0.5])
    control.dispatch("/version", ["double"])
    assert control.dispatch("/preset/save", ["half"]) == [("/preset/saved", ["half"])]
    assert (tmp_path / "user" / "half.json").is_file()
    control.dispatch("/bend/clear")
    control.dispatch("/version", ["_default"])
    assert _level(control) == 1.0
    control.dispatch("/preset/load", ["half"])
    assert _level(control) == 1.0  # 2 (version) * 0.5 (op)
    assert sorted(control.engine.ops) == ["g"], "op ids survive a save/load"


def test_queries(control):
    assert control.dispatch("/ping") == [("/pong", [])]
    control.engine.process(ONES)
    address, pairs = control.dispatch("/stats")[0]
    stats = dict(zip(pairs[::2], pairs[1::2], strict=True))
    assert address == "/stats" and stats["blocks"] == 1 and "p99_ms" in stats
    listed = control.dispatch("/list", ["addresses"])[0][1]
    assert listed == [a.pattern for a in ADDRESSES]
    assert control.dispatch("/list", ["versions"])[0][1] == ["_default", "double"]
    assert "gain.weight" in control.dispatch("/list", ["weights"])[0][1]


@pytest.mark.parametrize(
    "address, args, message",
    [
        ("/nope", [], "unknown address"),
        ("/bend/g/value", [1.0], "no op 'g'"),
        ("/bend/add", ["g", "Wobble", "gain"], "unknown op"),
        ("/bend/add", ["g", "Scale", "nothing"], "matches no weight"),
        ("/bend/add", ["g", "Scale", "gain", "value"], "usage: /bend/add id Op key"),
        ("/bend/add", ["g", "Scale", "gain", "factor", 2.0], "bad arguments"),
        ("/engine/gain", ["loud"], "value is a number"),
        ("/engine/gain", [20.0], r"in \[0, 16\]"),
        ("/engine/gain", [float("nan")], "finite"),
        ("/interp", ["double"], "usage: /interp version weight"),
        ("/bend/g/value", [0.5, 1000, 7], "takes at most 2 arguments"),
        ("/engine/bypass", [2], "0 or 1"),
        ("/ping", [1], "takes at most 0 arguments"),
        ("/version", ["nope"], "no version"),
        ("/preset/load", ["../../etc/passwd"], "preset names"),
        ("/preset/load", ["missing"], "no preset"),
        ("/list", ["everything"], "/list takes"),
    ],
)
def test_bad_messages_raise_clear_errors(control, address, args, message):
    with pytest.raises(tb.BendingError, match=message):
        control.dispatch(address, args)
    assert _level(control) == 1.0, "nothing changed, the engine keeps running"


def test_a_nodes_replies_carry_its_address_whichever_form_asked():
    """Two nodes' values told apart by address: /<node>/get/... and /get/<node>/... are both
    answered /<node>/get/...; a query without a node names the form to use, in the order
    /list nodes gives."""
    from bendserver.engine.node import Node
    from bendserver.engine.rack import Rack

    nodes = {}
    for name, value in (("b", 0.5), ("a", 2.0)):
        nodes[name] = Node(Identity(), block=64)
        nodes[name].add_op("g", tb.Scale(value=value), "gain")
    ctl = Controller(Rack(nodes, fuse=False))
    ctl.engine.process(np.zeros((1, 64), np.float32))  # /get reads what played
    assert ctl.dispatch("/list", ["nodes"]) == [("/list/nodes", ["b", "a"])]
    for asked in ("/a/get/bend/g/value", "/get/a/bend/g/value"):
        assert ctl.dispatch(asked) == [("/a/get/bend/g/value", [2.0])]
    assert ctl.dispatch("/get/b/bend/g/value") == [("/b/get/bend/g/value", [0.5])]
    assert ctl.dispatch("/b/list", ["ops"]) == [("/b/list/ops", ["g"])]
    assert ctl.dispatch("/a/ping") == [("/a/pong", [])]
    ctl.dispatch("/a/bend/g/value", [1.0], at=ctl.engine.time + 48000, client="host")
    for asked in ("/a/scheduled/bend/g/value", "/scheduled/a/bend/g/value"):
        [(address, [seconds, value])] = ctl.dispatch(asked)
        assert address == "/a/scheduled/bend/g/value" and value == 1.0 and seconds > 0.5
    assert ctl.dispatch("/scheduled/b/bend/g/value") == [("/b/scheduled/bend/g/value", [])]
    with pytest.raises(tb.BendingError) as refused:
        ctl.dispatch("/get/bend/g/value")
    assert str(refused.value) == (
        "this rack plays several nodes (b, a): ask one of them, /get/<node>/bend/g/value "
        "(/get/b/bend/g/value for instance)"
    )
    with pytest.raises(tb.BendingError, match=r"no rack node 'c' \(nodes: b, a\)"):
        ctl.dispatch("/get/c/bend/g/value")
    with pytest.raises(tb.BendingError) as refused:
        ctl.dispatch("/version", ["default"])
    assert "applied_state" not in str(refused.value) and "(b, a)" in str(refused.value)
    single = Controller(nodes["a"])  # one model: its replies as they were
    assert single.dispatch("/get/bend/g/value") == [("/get/bend/g/value", [2.0])]


def test_the_root_words_are_the_first_words_of_the_tables_addresses():
    """``roots.ROOT_WORDS`` (below the controller, for rack names) is the table's own list."""
    from bendserver.roots import ROOT_WORDS

    assert ROOT_WORDS == {a.parts[0] for a in ADDRESSES if not a.parts[0].startswith("<")}
