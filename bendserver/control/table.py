"""The address table: every address of the control space, its arguments, effect and handler.

:data:`ADDRESSES` is the address space, in the order ``/list addresses`` and docs/osc.md give it
(scripts/osc_doc.py writes that file from it); :data:`TABLE` routes by it. The handlers are
grouped by what they drive: :mod:`.bends`, :mod:`.presets`, :mod:`.queries`, :mod:`.midi`,
:mod:`.live`, :mod:`.mods`, :mod:`.takes`, :mod:`.output`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import BendingError
from ..limits import MAX_RAMP_MS
from . import bends, live, midi, mods, output, presets, queries, takes
from .grammar import Address, Arg, Match, Schema, Table

if TYPE_CHECKING:
    from .controller import Controller


def _node_address(ctl: Controller, m: Match, args: list[Any], at: int | None) -> None:
    """``/<node>/...`` reaches here only for a name that is no node of the rack."""
    raise BendingError(f"no rack node {m.path['node']!r}; send /list addresses for the list")


_RECORD_ADDRESSES = (
    Address(
        "/record/score",
        Schema((Arg("name", "text"),), (Arg("overwrite", "flag"),)),
        "record every change applied from the next block on, at its block, as a score in the "
        "user's scores folder (render --score plays it again; 1: replace one of that name); "
        "reply /record/started name sample",
        takes.record,
        rack=True,
    ),
    Address(
        "/record/stop",
        Schema(),
        "write the score being recorded; reply /record/stopped name messages path",
        takes.stop,
        rack=True,
    ),
)

#: The addresses of the modulators (``rack``: sent without a node's name).
_MOD_ADDRESSES = (
    Address(
        "/mod/add",
        Schema(
            (Arg("id", "text"), Arg("kind", "text", choices="kinds")),
            repeated=(Arg("param", "text"), Arg("value")),
        ),
        "add a modulator: kind lfo, drift, steps, follower or envelope, with parameters "
        "(docs/modulation.md); it drives nothing until routed",
        mods.add,
        rack=True,
    ),
    Address(
        "/mod/remove",
        Schema((Arg("id", "text", choices="modulators"),)),
        "remove a modulator (what it drove goes back to its own value)",
        mods.remove,
        rack=True,
    ),
    Address("/mod/clear", Schema(), "remove every modulator", mods.clear, rack=True),
    Address(
        "/mod/<mod>/route",
        Schema(
            (Arg("address", "text"), Arg("depth", low=-100.0, high=100.0)),
            (Arg("low"), Arg("high")),
        ),  # fmt: skip
        "drive a parameter (/bend/<op>/<param> on activations, /engine/gain, /engine/mix, a "
        "rack's node's name first; /rack/gain): its own value + depth x the modulator x "
        "(high - low), within low..high (default: the parameter's range)",
        mods.route,
        rack=True,
    ),
    Address(
        "/mod/<mod>/unroute",
        Schema((Arg("address", "text"),)),
        "stop driving a parameter",
        mods.unroute,
        rack=True,
    ),
    Address(
        "/mod/<mod>/source",
        Schema((Arg("name", "text", choices="nodes"),)),
        "what a follower or an envelope's onsets listen to: in (the input) or a node's output",
        mods.source,
        rack=True,
    ),
    Address(
        "/mod/<mod>/steps",
        Schema((Arg("value", low=0.0, high=1.0),), repeated=(Arg("value", low=0.0, high=1.0),)),
        "a step sequence's values, 0..1, one per step",
        mods.steps,
        rack=True,
    ),
    Address(
        "/mod/<mod>/trigger",
        Schema((Arg("on", "flag"),)),
        "start an envelope again at the next block (1; 0: nothing, as a note's release)",
        mods.trigger,
        coalesce=True,
        rack=True,
    ),
    Address(
        "/mod/<mod>/<name>",
        Schema((Arg("value"),)),
        "set a modulator's parameter (lfo: rate phase; drift: rate seed; steps: bpm division; "
        "follower: attack_ms release_ms gain; envelope: attack_ms hold_ms release_ms onset)",
        mods.set_param,
        coalesce=True,
        rack=True,
    ),
    Address(
        "/mod/list",
        Schema(),
        "reply /mod/modulator id kind source param value ... for each modulator, "
        "/mod/route id address depth low high for each route, then /mod/list count",
        mods.listing,
        query=True,
        rack=True,
    ),
)


def _rack_output(name: str, arg: Arg, effect: str) -> Address:
    """The address of the rack's own output setting ``name`` (``rack``: sent without a node's
    name; a one-model server has it too)."""
    handler = output.setting(name)
    return Address(
        f"/rack/{name}", Schema((arg,)), effect, handler, coalesce=True, rack=True, needs="rack"
    )


#: The rack's own output, after what its nodes sum and around the fuse.
_RACK_ADDRESSES = (
    _rack_output(
        "gain",
        Arg("value", low=0.0, high=16.0),
        "the rack's output gain, 0..16, moved across one block (before the fuse)",
    ),
    _rack_output(
        "mute",
        Arg("on", "flag"),
        "silence the rack's output (1) or play it (0), faded across one block",
    ),
    _rack_output(
        "bypass",
        Arg("on", "flag"),
        "play the rack's input instead of its output (1; silence where they differ in shape), "
        "crossfaded across one block; the nodes play on",
    ),
)

#: The options of a MIDI mapping: its range (default: the parameter's), curve, inversion, ramp.
_MIDI_OPTIONS = (
    Arg("low"),
    Arg("high"),
    Arg("curve", "text"),
    Arg("invert", "flag"),
    Arg("ramp_ms", low=0.0, high=MAX_RAMP_MS),
)

ADDRESSES: tuple[Address, ...] = (
    Address(
        "/bend/<id>/<param>",
        Schema((Arg("value"),), (Arg("ramp_ms", low=0.0, high=MAX_RAMP_MS),)),
        "set an op parameter, ramped over ramp_ms",
        bends.set_param,
        coalesce=True,
    ),
    Address(
        "/bend/<id>/enable",
        Schema((Arg("on", "flag"),)),
        "switch an op off (0: pass-through) or on (1)",
        bends.enable,
        coalesce=True,
    ),
    Address(
        "/bend/add",
        Schema(
            (
                Arg("id", "text"),
                Arg("Op", "text", choices="types"),
                Arg("key", "text", choices="targets"),
            ),
            (),
            (
                Arg("param", "text"),
                Arg("value", "value"),
            ),
        ),
        "add an op on the weights/activations matching key (graph rebuilt off the audio thread)",
        bends.add,
    ),
    Address(
        "/bend/remove", Schema((Arg("id", "text", choices="ops"),)), "remove an op", bends.remove
    ),
    Address("/bend/clear", Schema(), "remove every op", bends.clear),
    Address(
        "/interp",
        Schema(repeated=(Arg("version", "text", choices="versions"), Arg("weight")), min_repeats=1),
        "weights of the version mix (normalised)",
        bends.interp,
        coalesce=True,
    ),
    Address(
        "/version",
        Schema((Arg("name", "text", choices="versions"),)),
        "switch weight version (ends interpolating)",
        bends.version,
    ),
    Address(
        "/preset/load",
        Schema((Arg("name", "text", choices="fitting"),)),
        "load a preset: the user's presets folder first, then the shipped presets",
        presets.load,
        rack=True,
    ),
    Address(
        "/preset/save",
        Schema((Arg("name", "text"),), (Arg("overwrite", "flag"),)),
        "save the bending into the user's presets folder (1: replace one of that name)",
        presets.save,
        rack=True,
    ),
    Address(
        "/engine/gain",
        Schema((Arg("value", low=0.0, high=16.0),)),
        "output gain, 0..16",
        bends.engine_setting("set_gain"),
        coalesce=True,
    ),
    Address(
        "/engine/mix",
        Schema((Arg("value", low=0.0, high=1.0),)),
        "dry/wet mix, 0 (dry) .. 1 (wet)",
        bends.engine_setting("set_mix"),
        coalesce=True,
    ),
    Address(
        "/engine/bypass",
        Schema((Arg("on", "flag"),)),
        "pass the input through",
        bends.engine_setting("set_bypass"),
        coalesce=True,
    ),
    Address("/engine/reset", Schema(), "clear the streaming state", bends.reset),
    *_RACK_ADDRESSES,
    Address(
        "/attr/<name>",
        Schema((Arg("value", "value"),), repeated=(Arg("value", "value"),)),
        "set an attribute of an nn~ TorchScript file (its set_<name>: one value for each it "
        "takes, a sound file's path for a tensor or buffer; /list attributes)",
        bends.attribute,
        coalesce=True,
    ),
    Address(
        "/out/subscribe",
        Schema((), (Arg("port", low=1, high=65535),)),
        "send the frames of every method at a control rate (/out/<node>/<method> f f ..., "
        "one float per channel) to the sender's host on port (default: the reply port); "
        "reply /out/subscribed with their addresses",
        live.subscribe,
        query=True,
        rack=True,
        needs="frames",
    ),
    Address(
        "/out/unsubscribe",
        Schema((), (Arg("port", low=1, high=65535),)),
        "stop sending frames to the sender's host (on port; none given: any); reply "
        "/out/unsubscribed with how many stopped",
        live.unsubscribe,
        query=True,
        rack=True,
        needs="frames",
    ),
    Address(
        "/in/<node>/<method>",
        Schema((Arg("value"),), repeated=(Arg("value"),)),
        "the frame a server whose first method takes frames (decode) plays from the next "
        "block on, held until the next: one value per channel",
        live.frame_in,
        coalesce=True,
        rack=True,
        needs="frames",
    ),
    Address(
        "/list",
        Schema((), (Arg("what", "text"),)),
        "reply with names: addresses, nodes (a rack's, in playing order), weights, "
        "activations, targets (both), versions, ops, types, bends, presets, fitting (the "
        "presets that fit), attributes, modulators, kinds",
        queries.listing,
        query=True,
        rack=True,
    ),
    Address(
        "/get/<address>",
        Schema(),
        "reply with the value playing now, e.g. /get/bend/mask/prob (a rack's node: "
        "/get/<node>/bend/mask/prob, answered /<node>/get/bend/mask/prob)",
        queries.get,
        query=True,
    ),
    Address(
        "/scheduled/<address>",
        Schema(),
        "reply with the message to an address scheduled last (seconds ahead, then its "
        "arguments; none: nothing scheduled)",
        queries.scheduled,
        query=True,
    ),
    Address(
        "/stats",
        Schema(),
        "reply: blocks N late N errors N p50_ms F p99_ms F max_ms F ... (a rack of several: "
        "<node>_p50_ms F <node>_max_ms F for each; /<node>/stats: that node's own)",
        queries.stats,
        query=True,
        rack=True,
    ),
    Address("/ping", Schema(), "reply /pong", queries.ping, query=True, rack=True),
    Address(
        "/model/load",
        Schema((Arg("model", "text"),), (Arg("preset", "text"),)),
        "swap in another model live (a name or a .ts file; a folder or file.py:Class from "
        "serve --allow-code-from only; its own preset, or the one named, none: no preset): "
        "probed in a child process, warmed up, crossfaded over --xfade-ms; "
        "reply /model/loaded name probe_s load_s warm_s (probe_s -1: not probed)",
        live.model_load,
    ),
    Address(
        "/node/<node>/load",
        Schema((Arg("model", "text"),), (Arg("preset", "text"),)),
        "swap another model (model[.method], file.ts:method) live into a rack's node, which "
        "keeps its name and place: it must take and give what the node does; probed, warmed "
        "up on the node's input and crossfaded as /model/load; reply /node/loaded name model "
        "probe_s load_s warm_s",
        live.node_load,
        rack=True,
    ),
    Address(
        "/midi/learn",
        Schema((Arg("address", "text"),), _MIDI_OPTIONS),
        "map the next MIDI control moved (CC, 14-bit CC, note, pitch bend) to a parameter",
        midi.learn,
        rack=True,
    ),
    Address(
        "/midi/map",
        Schema(
            (
                Arg("address", "text"),
                Arg("kind", "text"),
                Arg("channel", low=1, high=16),
                Arg("number", low=0, high=127),
            ),
            _MIDI_OPTIONS,
        ),
        "map a MIDI control (kind cc, cc14, note or pitchbend; channel 1-16) to a parameter",
        midi.map_control,
        rack=True,
    ),
    Address(
        "/midi/unmap",
        Schema((), (Arg("address", "text"),)),
        "remove the MIDI mappings to an address (none given: all); reply how many",
        midi.unmap,
        rack=True,
    ),
    Address(
        "/midi/list",
        Schema(),
        "reply /midi/mapping address kind channel number low high curve invert ramp_ms for "
        "each mapping, then /midi/list count port learning",
        midi.listing,
        query=True,
        rack=True,
    ),
    Address(
        "/midi/save",
        Schema((Arg("name", "text"),), (Arg("overwrite", "flag"),)),
        "save the MIDI mappings as a mappings file in the user's folder (1: replace one)",
        midi.save,
        rack=True,
    ),
    Address(
        "/midi/load",
        Schema((Arg("name", "text"),)),
        "load a mappings file saved with /midi/save",
        midi.load,
        rack=True,
    ),
    Address(
        "/midi/program",
        Schema((Arg("number", low=0, high=127),)),
        "load preset number N of /list presets (what a MIDI program change does)",
        midi.program,
        rack=True,
    ),
    *_MOD_ADDRESSES,
    *_RECORD_ADDRESSES,
    Address(
        "/<node>/<address>",
        Schema(),
        "any address above for one node of a rack (/drive/bend/mask/prob 0.5, /enc/interp ...; "
        "a one-node rack answers both, with and without its node's name); replies come under "
        "the node's address (/drive/get/...)",
        _node_address,
    ),
)


#: The address space, routing by :data:`ADDRESSES`; :func:`route` matches an address to its entry,
#: :func:`coalescing_pattern` gives the OSC intake the addresses whose values coalesce.
TABLE = Table(ADDRESSES)
route = TABLE.route
coalescing_pattern = TABLE.coalescing_pattern
