"""Property-based fuzzing (hypothesis) of what reads user files: the preset reader, the score
reader and the render path. Inputs are random but shaped like the real thing (keys a preset
has, addresses of the table, decimal and non-decimal words), so that the search reaches past
the first check. Each must work or raise a BendingError, never another exception, and never
change an input file. The budget is small here (a few seconds in ``make test``)."""

import copy
import json
import string

import numpy as np
import soundfile as sf
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from streaming import Identity

import bendserver as tb
from bendserver.control import ADDRESSES
from bendserver.presets.library import read_preset
from bendserver.render.offline import ScorePlayer, parse_score, read_score, render_file

FUZZ = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# -- values shaped like the real ones ---------------------------------------------------------

# no subnormals: a served engine flushes them to zero for the whole process (serve sets
# torch.set_flush_denormal), and hypothesis cannot draw them then
numbers = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=False),
    st.sampled_from([0, 1, -1, 0.5, 16, 1e3, 1e-9]),
)
words = st.one_of(
    st.sampled_from(["g", "gain", "mask", "Scale", "Mask", "Chain", "x", "", ".*", "(", "drive"]),
    st.text(max_size=8),
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, words),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(words, inner, max_size=4)),
    max_leaves=12,
)

unit = st.one_of(st.floats(0, 1, allow_subnormal=False), numbers)
#: Each op with one of its parameters, and the options it may take.
OPS = {
    "Scale": ("value", {}),
    "Mask": ("prob", {"dim": st.sampled_from([None, 1, -1, [1], 5, "x"]), "seed": numbers}),
    "Noise": ("std", {"op": st.sampled_from(["add", "mul", "x"]), "fresh": st.booleans()}),
    "Clamp": ("low", {}),
    "Permute": ("x", {"dim": st.sampled_from([1, 0, 9]), "seed": numbers}),
    "Threshold": ("value", {"binary": json_values}),
}
keys = st.sampled_from(["gain", r"gain\.weight", ".*", "nothing", "(", "gain|x"])


@st.composite
def op_specs(draw):
    name = draw(st.sampled_from(sorted(OPS)))
    param, options = OPS[name]
    spec = {"op": name, "params": {param: draw(unit)}}
    chosen = draw(st.lists(st.sampled_from(sorted(options)), unique=True)) if options else []
    spec["options"] = {option: draw(options[option]) for option in chosen}
    return spec


@st.composite
def presets(draw):
    """A preset for the test model, with up to three values replaced by anything JSON holds
    (or a key added or removed)."""
    names = draw(st.lists(st.sampled_from(["g", "mask", "n"]), unique=True, max_size=3))
    preset = {
        "format": "bendserver.config",
        "version": 1,
        "ops": {name: draw(op_specs()) for name in names},
        "bends": [
            {"op": name, "keys": draw(st.lists(keys, min_size=1, max_size=2))} for name in names
        ],
        "disabled": draw(st.lists(st.sampled_from(names or ["g"]), max_size=1)),
        "model": None,
        "weights": {"version": None, "interpolation": None},
        "engine": {"gain": draw(unit), "mix": draw(unit)},
    }
    preset = copy.deepcopy(preset)  # changed below: never what hypothesis holds
    for _ in range(draw(st.integers(0, 3))):
        places = list(_places(preset))
        parent, key = places[draw(st.integers(0, len(places) - 1))]
        change = draw(st.sampled_from(["replace", "replace", "remove", "add"]))
        if change == "replace":
            parent[key] = copy.deepcopy(draw(json_values))
        elif change == "remove" and isinstance(parent, dict):
            del parent[key]
        elif isinstance(parent, dict):
            parent[draw(words)] = copy.deepcopy(draw(json_values))
    return preset


def _places(node):
    """Every (container, key or index) in a JSON tree."""
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, value in list(items):
        yield node, key
        if isinstance(value, (dict, list)):
            yield from _places(value)


def damaged(text: str, draw) -> bytes:
    """``text`` as bytes, at times (two in five) cut short or with a byte changed."""
    data = text.encode()
    damage = draw(st.sampled_from(["none", "none", "none", "cut", "byte"]))
    if damage == "cut" and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
    if damage == "byte" and data:
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1 :]
    return data


@st.composite
def preset_files(draw):
    """The bytes of a preset file: JSON of a preset-shaped object (NaN and Infinity as Python
    writes them), at times cut short or with a byte changed."""
    return damaged(json.dumps(draw(presets())), draw)


_ENGINES: dict[int, tb.StreamEngine] = {}


def engine(streams: int = 1) -> tb.StreamEngine:
    """One engine per stream count for the whole module (building one per input would cost
    more than the rest of the test)."""
    if streams not in _ENGINES:
        _ENGINES[streams] = tb.StreamEngine(Identity(), block=256, streams=streams)
    return _ENGINES[streams]


@FUZZ
@given(data=preset_files())
def test_the_preset_reader_works_or_says_why(tmp_path, data):
    path = tmp_path / "fuzz.json"
    path.write_bytes(data)
    try:
        preset = read_preset(path)
        event("read")
        engine().load_preset(preset)
        event("loaded")
    except tb.BendingError:
        event("refused")
    assert path.read_bytes() == data


# -- scores -------------------------------------------------------------------------------------

times = st.one_of(
    st.floats(0, 0.2, allow_nan=False, allow_subnormal=False).map(lambda t: f"{t:.4f}"),
    st.sampled_from(["0", "-1", "nan", "inf", "0_5", "1e999", "1e-3", ".5", "5.", "0x1", "1,5"]),
)
addresses = st.one_of(
    st.sampled_from([a.pattern for a in ADDRESSES]).map(
        lambda p: p.replace("<id>", "g").replace("<param>", "value").replace("<name>", "x")
    ),
    st.sampled_from(["/bend/g/value", "/engine/gain", "/bend/add", "/get/bend/g/value", "/"]),
    st.text(string.printable, max_size=12).map(lambda t: "/" + t),
)
arguments = st.one_of(
    times, words, st.sampled_from(["Scale", "gain", "g", "value", "'a b'", '"', "#", "1 2"])
)


def _argument(arg):
    """Words for one argument of the address table (as its kind wants them, mostly)."""
    if arg.kind == "number":
        low, high = max(arg.low, -1e3), min(arg.high, 1e3)
        fitting = st.floats(low, high, allow_subnormal=False).map(lambda v: f"{v:g}")
    else:
        fitting = {
            "flag": st.sampled_from(["0", "1"]),
            "text": st.sampled_from(["g", "gain", "Scale", "default", "x"]),
            "value": st.sampled_from(["0.5", "1", "x"]),
        }[arg.kind]
    return st.one_of(fitting, fitting, fitting, arguments)


@st.composite
def table_lines(draw):
    """A score line for an address of the table, its arguments as its schema takes them."""
    entry = draw(st.sampled_from(ADDRESSES))
    address = (
        draw(addresses)
        if draw(st.integers(0, 9)) == 0
        else entry.pattern.replace("<id>", "g")
        .replace("<param>", "value")
        .replace("<name>", "x")
        .replace("<address>", "bend/g/value")
    )
    schema = entry.schema
    args = [*schema.required, *schema.optional[: draw(st.integers(0, len(schema.optional)))]]
    args += list(schema.repeated) * draw(st.integers(schema.min_repeats, 2))
    return " ".join([draw(times), address, *(draw(_argument(arg)) for arg in args)])


score_lines = st.one_of(
    table_lines(),
    table_lines(),
    st.builds(
        lambda t, a, args: " ".join([t, a, *args]),
        times,
        addresses,
        st.lists(arguments, max_size=6),
    ),
)

scores = st.lists(st.one_of(score_lines, score_lines, st.text(max_size=20)), max_size=5).map(
    "\n".join
)


@FUZZ
@given(text=scores)
def test_the_score_reader_works_or_says_why(tmp_path, text):
    path = tmp_path / "moves.txt"
    data = text.encode("utf-8", "surrogatepass")
    path.write_bytes(data)
    try:
        player = ScorePlayer(engine(), read_score(path))
        event("parsed and checked")
        player.until(max(player.times, default=0))
        event("played")
    except tb.BendingError:
        event("refused")
    assert path.read_bytes() == data


@FUZZ
@given(data=st.binary(max_size=200))
def test_the_score_reader_takes_any_bytes(tmp_path, data):
    path = tmp_path / "moves.txt"
    path.write_bytes(data)
    try:
        read_score(path)
    except tb.BendingError:
        pass
    assert path.read_bytes() == data


# -- the render path ----------------------------------------------------------------------------

renders = st.fixed_dictionaries(
    {
        "frames": st.integers(0, 3000),
        "rate": st.sampled_from([22050, 44100, 48000]),
        "channels": st.integers(1, 3),
        "streams": st.integers(1, 2),
        "output": st.sampled_from(["out.wav", "out.flac", "out.ogg", "out.mp4", "in.wav", "d/"]),
        "score": st.lists(score_lines, max_size=5).map("\n".join),
        "mono": st.booleans(),
        "sample_rate": st.sampled_from([None, 8000, 48000]),
        "keep_latency": st.booleans(),
        "force": st.booleans(),
        "exists": st.booleans(),
    }
)


@FUZZ
@given(case=renders)
def test_the_render_path_works_or_says_why(tmp_path, case):
    folder = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    rng = np.random.default_rng(case["frames"])
    audio = rng.uniform(-1, 1, (case["frames"], case["channels"])).astype(np.float32)
    sf.write(str(folder / "in.wav"), audio, case["rate"], subtype="FLOAT")
    source = (folder / "in.wav").read_bytes()
    output = folder / case["output"]
    if case["exists"] and not case["output"].endswith("/") and output != folder / "in.wav":
        output.write_bytes(b"old")
    before = {p.name for p in folder.iterdir()}
    try:
        rendered = render_file(
            engine(case["streams"]),
            folder / "in.wav",
            output,
            parse_score(case["score"]),
            force=case["force"],
            mono=case["mono"],
            sample_rate=case["sample_rate"],
            keep_latency=case["keep_latency"],
        )
        event("rendered")
    except tb.BendingError:
        event("refused")
        rendered = None
    if output != folder / "in.wav" or rendered is None:
        assert (folder / "in.wav").read_bytes() == source, "an input changed"
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")], "a partial file"
    if rendered is not None:
        info = sf.info(str(output))
        assert info.frames == round(rendered.seconds * info.samplerate)
    else:
        assert {p.name for p in folder.iterdir()} == before
        if output.name != "in.wav" and output.is_file():
            assert output.read_bytes() == b"old", "a refused render changed its output"
