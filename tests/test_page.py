"""The control page (``/ui`` on the OSCQuery port) against the live server: the shipped drive
model on the null backend playing its demo. A real browser (Debian's Chromium, driven by
playwright) loads the page, drags a slider and sees values sent with liblo's oscsend; a real
WebSocket client (websockets) sends OSC on the WebSocket and reads the meters; plain HTTP checks
what the server refuses (another site's page, another name for the host)."""

import json
import os
import shutil
import struct
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from jack import ROOT, Replies, demo_options, oscsend, send_python
from pythonosc.osc_message_builder import build_msg
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from bendserver.engine.tap import BlockTap
from bendserver.serve import ServeOptions, Server

SCREENSHOT = ROOT / "docs" / "images" / "control-page.png"
VIEWPORT = {"width": 1100, "height": 760}
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def replies():
    listener = Replies()
    yield listener
    listener.close()


@pytest.fixture(scope="module")
def server(replies):
    options = demo_options(replies.port)
    options.zeroconf = False
    with Server(options) as running:
        yield running


def get(server, address, replies):
    """The value ``/get`` replies for ``address``, over OSC."""
    replies.receive(timeout=0.05)  # what an earlier test left
    send_python(server.osc.port, f"/get{address}")
    return replies.wait_for(f"/get{address}")[0]


def fetch(url, headers=None):
    """(status, content type, body) of one GET."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.headers.get_content_type(), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get_content_type(), error.read().decode()


# -- the page in a browser ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed (Debian package chromium)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser, server):
    page = browser.new_page(viewport=VIEWPORT)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{server.oscquery.url}/ui")
    page.wait_for_selector("body[data-ready]", timeout=10_000)
    yield page
    page.close()
    assert not errors, f"the page's script failed: {errors}"


def drag(page, selector, start, end):
    """Drag the range input at ``selector`` with the mouse from one fraction of it to another."""
    box = page.locator(selector).bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * start, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * end, y, steps=12)
    page.mouse.up()


def test_a_slider_dragged_on_the_page_changes_the_server_state(page, server, replies):
    slider = 'input[type=range][data-path="/bend/mask/prob"]'
    assert get(server, "/bend/mask/prob", replies) == pytest.approx(0.6)
    drag(page, slider, 0.3, 0.9)
    shown = float(page.locator(slider).input_value())
    assert 0.8 < shown <= 1.0, shown
    deadline = time.monotonic() + 5
    while abs((value := get(server, "/bend/mask/prob", replies)) - shown) > 1e-3:
        assert time.monotonic() < deadline, f"the server has {value}, the page shows {shown}"
        time.sleep(0.05)


def test_a_value_sent_over_osc_shows_on_the_page(page, server):
    oscsend(server.osc.port, "/engine/gain", "f", 0.25)
    shown = page.locator('output[data-for="/engine/gain"]')
    page.wait_for_function(
        "() => document.querySelector('output[data-for=\"/engine/gain\"]').textContent === '0.250'",
        timeout=5_000,
    )
    assert shown.text_content() == "0.250"
    value = page.locator('input[data-path="/engine/gain"]').input_value()
    assert float(value) == pytest.approx(0.25)


def test_ops_added_and_removed_over_osc_come_and_go_on_the_page(page, server):
    send_python(server.osc.port, "/bend/add", "tilt", "Bias", "clip_in")
    page.wait_for_selector('[data-op="tilt"] input[data-path="/bend/tilt/value"]', timeout=5_000)
    page.locator('[data-op="tilt"] input[data-path="/bend/tilt/enable"]').click()
    send_python(server.osc.port, "/bend/remove", "tilt")
    page.wait_for_selector('[data-op="tilt"]', state="detached", timeout=5_000)


def test_the_page_renders_its_controls_and_meters(page, server, tmp_path):
    for selector in (
        'input[type=range][data-path="/bend/mask/prob"]',
        'input[type=range][data-path="/bend/lfo/depth"]',
        'input.switch[data-path="/bend/noise/enable"]',
        'input[type=range][data-path="/engine/mix"]',
        "#preset-list option[value=drive]",
        "#spectrum",
    ):
        assert page.locator(selector).count() == 1, selector
    page.wait_for_function("() => window.bendserver.meters >= 3", timeout=5_000)
    out = page.locator("#out-db").text_content()
    assert out.endswith(" dB") and float(out.split()[0]) > -60, "the demo plays: a level shows"
    assert page.locator("#xruns").text_content().startswith("xruns ")
    assert "/42.7 ms" in page.locator("#compute").text_content(), "compute against 2048 frames"

    shot = tmp_path / "control-page.png"
    page.screenshot(path=shot)
    if os.environ.get("BENDSERVER_SCREENSHOT") == "1":  # the docs' screenshot, made anew
        shutil.copyfile(shot, SCREENSHOT)
    width, height = png_size(shot)
    assert (width, height) == (VIEWPORT["width"], VIEWPORT["height"])
    # Loosely the page of the README: the same size, and about as much drawn (a blank or
    # unstyled page compresses to a fraction of it).
    assert png_size(SCREENSHOT) == (width, height)
    ratio = shot.stat().st_size / SCREENSHOT.stat().st_size
    assert 0.5 < ratio < 2.0, f"the screenshot differs from the README's: {ratio:.2f} x its size"


def test_on_a_phone_a_finger_on_the_pad_morphs_between_versions(browser, replies):
    options = ServeOptions(
        model="wavae", audio="null", osc_port=0, reply_port=replies.port, zeroconf=False
    )
    with Server(options) as server:
        phone = browser.new_page(viewport={"width": 390, "height": 844}, has_touch=True)
        phone.goto(f"{server.oscquery.url}/ui")
        phone.wait_for_selector("body[data-ready]", timeout=10_000)
        pad = phone.locator("#pad")
        pad.scroll_into_view_if_needed()
        box = pad.bounding_box()
        assert box["width"] > 300, "one column: the pad spans the phone's width"
        assert phone.locator('#pad .corner[data-version="percussion"]').count() == 1
        phone.touchscreen.tap(box["x"] + box["width"] - 2, box["y"] + box["height"] / 2)
        deadline = time.monotonic() + 5
        while True:
            replies.receive(timeout=0.05)
            send_python(server.osc.port, "/get/interp")
            mix = replies.wait_for("/get/interp")
            weights = dict(zip(mix[::2], mix[1::2], strict=True))
            if weights.get("percussion", 0) > 0.95:
                break
            assert time.monotonic() < deadline, f"the pad's touch did not morph: {weights}"
            time.sleep(0.05)
        phone.wait_for_function(
            "() => document.getElementById('mix').textContent.includes('percussion')",
            timeout=5_000,
        )
        phone.close()


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


# -- the WebSocket and HTTP without a browser --------------------------------------------------


def ws_url(server):
    return server.oscquery.url.replace("http", "ws") + "/"


def test_osc_sent_on_the_websocket_is_applied_as_osc(server, replies):
    replies.receive(timeout=0.05)
    with connect(ws_url(server)) as client:
        client.send(build_msg("/engine/mix", [7.0]).dgram)  # refused: out of range
        assert replies.wait_for("/error")[0] == "/engine/mix", "refused as OSC is, on /error"
        for value in (0.1, 0.2, 0.3):  # coalesced or not, the last one plays
            client.send(build_msg("/engine/mix", [value]).dgram)
        deadline = time.monotonic() + 5
        while get(server, "/engine/mix", replies) != pytest.approx(0.3):
            assert time.monotonic() < deadline, "the WebSocket's OSC was not applied"
            time.sleep(0.05)
    send_python(server.osc.port, "/engine/mix", 1.0)


def test_meters_come_over_the_websocket_at_their_rate(server):
    with connect(ws_url(server)) as client:
        client.send(json.dumps({"COMMAND": "METERS", "DATA": "on"}))
        meters = [json.loads(client.recv(timeout=3))]
        started = time.monotonic()  # from the first snapshot: the first may wait for a block
        meters += [json.loads(client.recv(timeout=3)) for _ in range(10)]
        rate = 10 / (time.monotonic() - started)
    assert all(m["COMMAND"] == "METERS" for m in meters)
    last = meters[-1]["DATA"]
    assert 2 < rate < 25, f"{rate:.1f} snapshots a second (15 asked; a loaded machine may lag)"
    assert -60 < last["output"]["peak"] <= 0 and last["output"]["rms"] <= last["output"]["peak"]
    assert -60 < last["input"]["peak"] <= 0, "the demo is the input"
    assert last["compute_ms"]["budget"] == pytest.approx(1000 * 2048 / 48000, abs=1e-3)
    assert 0 < last["compute_ms"]["p50"] <= last["compute_ms"]["max"]
    assert 0 <= last["xruns"] <= server.counters()["xruns"], "the server's count so far"
    assert 0 <= last["limiting"] <= 1
    assert len(last["spectrum"]) == 48 and max(last["spectrum"]) > -60
    assert len(last["scope"]) == 256


def test_the_page_files_are_served_and_nothing_else_under_ui(server):
    status, kind, body = fetch(f"{server.oscquery.url}/ui")
    assert (status, kind) == (200, "text/html") and "/ui/app.js" in body
    assert fetch(f"{server.oscquery.url}/ui/app.js")[:2] == (200, "text/javascript")
    assert fetch(f"{server.oscquery.url}/ui/style.css")[:2] == (200, "text/css")
    status, _, body = fetch(f"{server.oscquery.url}/ui/../../etc/passwd")
    assert status == 404 and "root:" not in body


def test_another_name_for_the_host_or_another_site_is_refused(server):
    url = server.oscquery.url
    port = server.oscquery.port
    status, _, body = fetch(f"{url}/ui", {"Host": f"attacker.example:{port}"})
    assert status == 403 and f"open {url}/ui" in body, "a rebinding name is refused"
    assert fetch(f"{url}/ui", {"Host": f"localhost:{port}"})[0] == 200
    status, _, body = fetch(f"{url}/", {"Origin": "http://attacker.example"})
    assert status == 403 and "attacker.example may not use this server" in body
    with pytest.raises(InvalidStatus) as refused:
        with connect(ws_url(server), origin="http://attacker.example"):
            pass
    assert refused.value.response.status_code == 403, "another site's page cannot open it"
    with connect(ws_url(server), origin=url) as client:  # the page's own origin
        client.send(json.dumps({"COMMAND": "LISTEN", "DATA": "/engine/gain"}))


# -- the tap the meters read -------------------------------------------------------------------


def test_the_tap_returns_what_was_recorded_across_its_wrap():
    tap = BlockTap(1, 2, frames=8192)
    signal = np.arange(20 * 1000, dtype=np.float32).reshape(1, -1)
    for start in range(0, signal.shape[1], 1000):
        block = signal[:, start : start + 1000]
        tap.record(block, np.concatenate([block, -block]))
        assert tap.written == start + 1000
    dry, out, end = tap.read(since=18_500)
    assert end == 20_000
    assert np.array_equal(dry[0], signal[0, 18_500:]) and np.array_equal(out[1], -dry[0])
    dry, _, _ = tap.read(since=0)  # further back than the ring holds: the newest it can give
    assert 0 < dry.shape[1] < 8192 and dry[0, -1] == signal[0, -1]
    tap.record(np.zeros((2, 10), np.float32), np.zeros((2, 10), np.float32))
    assert tap.written == 20_000, "a block of other channels is not recorded"


# -- an nn~ file's attributes and frames --------------------------------------------------------


def attribute(page, name):
    """The fields of attribute ``name``'s row on the page."""
    return page.locator(f'.attribute[data-path="/attr/{name}"] .fields > *')


def changed(field, value):
    """Type ``value`` into a page's field and leave it, as a user does (a change event)."""
    field.fill(value)
    field.dispatch_event("change")


def test_attributes_of_each_type_set_on_the_page_play_as_the_file_s_setters(
    browser, kinds, tmp_path
):
    import soundfile as sf
    import torch
    from nn_files import direct

    table = tmp_path / "table.wav"
    sf.write(table, np.linspace(-0.5, 0.5, 64, dtype=np.float32), 44100, subtype="FLOAT")
    source = tmp_path / "in.wav"
    noise = 0.4 * np.random.default_rng(0).standard_normal(44100)
    sf.write(source, noise.astype(np.float32), 44100, subtype="FLOAT")
    options = ServeOptions(
        model=str(kinds), audio="null", input=str(source), osc_port=0, reply_port=0,
        zeroconf=False, no_fuse=True, trust_model=True,
    )  # fmt: skip
    with Server(options) as server:
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(f"{server.oscquery.url}/ui")
        page.wait_for_selector('.attribute[data-path="/attr/mix"]', timeout=10_000)
        assert page.locator("#attributes").is_visible()
        changed(attribute(page, "gain").nth(0), "0.25")
        changed(attribute(page, "steps").nth(0), "3")
        attribute(page, "flip").nth(0).click()
        attribute(page, "mode").nth(0).select_option("clip")
        mix = attribute(page, "mix")
        assert mix.count() == 4 and mix.nth(3).get_attribute("type") == "checkbox"
        mix.nth(0).fill("4")  # a number field commits as it is filled
        # a field typed into and not yet sent (no change event yet), then another client sets
        # the attribute: the page shows the new values but keeps what was typed
        mix.nth(1).evaluate("(el) => { el.value = 'wet'; el.dispatchEvent(new Event('input')); }")
        send_python(server.osc.port, "/attr/mix", 2, "dry", 0.75, 0)
        deadline = time.monotonic() + 10
        while mix.nth(2).input_value() != "0.75":
            assert time.monotonic() < deadline, "the page follows the server's value"
            time.sleep(0.05)
        assert mix.nth(1).input_value() == "wet"
        mix.nth(0).fill("4")
        mix.nth(3).check()
        changed(mix.nth(2), "0.25")
        changed(attribute(page, "table").nth(0), str(table))
        changed(attribute(page, "buf").nth(0), str(table))  # a buffer: every channel, the rate
        wanted = {
            "gain": (0.25,), "steps": (3,), "flip": (True,), "mode": ("clip",),
            "mix": (4, "wet", 0.25, True), "table": (str(table),), "buf": (str(table),),
        }  # fmt: skip
        deadline = time.monotonic() + 5
        while True:
            applied = {n: tuple(map(str, v)) for n, v in server.engine.applied_state.attributes}
            if applied == {n: tuple(map(str, v)) for n, v in wanted.items()}:
                break
            assert time.monotonic() < deadline, f"the page set {applied}"
            time.sleep(0.05)
        since = server.meters.tap.written + 2048  # a block later: every change played
        while server.meters.tap.written < since + 8192:
            time.sleep(0.05)
        dry, out, _ = server.meters.tap.read(since, most=4096)
        held = server.engine.model.module.get_buf()[0]
        page.close()
    module = direct(kinds, 44100)
    samples = torch.from_numpy(sf.read(table, dtype="float32")[0])
    assert module.set_buffer_attribute("buf#0", samples[None], 44100) == 0
    for name, arguments in wanted.items():
        if name in ("table", "buf"):
            arguments = (samples,) if name == "table" else ("buf#0",)
        assert getattr(module, f"set_{name}")(*arguments) == 0
    assert held == module.get_buf()[0], "the buffer holds what nn~'s setters put there"
    with torch.no_grad():
        want = module(torch.from_numpy(dry)[None])[0].numpy()
    np.testing.assert_allclose(out, want, atol=1e-6)


RAVE_EXPORT = Path(os.environ.get("BENDSERVER_RAVE_DIR", "/nonexistent")) / "rave_v2_streaming.ts"
RAVE_SCREENSHOT = ROOT / "docs" / "images" / "rave-page.png"


@pytest.mark.skipif(not RAVE_EXPORT.is_file(), reason="BENDSERVER_RAVE_DIR holds no RAVE export")
def test_a_rave_export_s_page_shows_its_model_and_attributes(browser, tmp_path):
    options = ServeOptions(
        model=str(RAVE_EXPORT), audio="null", osc_port=0, reply_port=0, zeroconf=False,
        trust_model=True,
    )  # fmt: skip
    with Server(options) as server:
        page = browser.new_page(viewport=VIEWPORT)
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"{server.oscquery.url}/ui")
        page.wait_for_selector('.attribute[data-path="/attr/learn_target"]', timeout=20_000)
        assert "rave_v2_streaming (forward, 44100 Hz)" in page.locator("#model").text_content()
        for name in ("learn_target", "reset_target", "learn_source", "reset_source"):
            assert attribute(page, name).nth(0).get_attribute("type") == "checkbox", name
        none = page.locator('.attribute[data-path="/attr/none"] output').text_content()
        assert none == "(no setter; no getter)"
        page.wait_for_function("() => window.bendserver.meters >= 2", timeout=10_000)
        shot = tmp_path / "rave-page.png"
        page.screenshot(path=shot)
        page.close()
    assert not errors, errors
    if os.environ.get("BENDSERVER_SCREENSHOT") == "1":  # the docs' screenshot, made anew
        shutil.copyfile(shot, RAVE_SCREENSHOT)
    assert png_size(shot) == (VIEWPORT["width"], VIEWPORT["height"])


def test_a_method_giving_frames_is_plotted_on_the_page(browser, kinds, tmp_path):
    import soundfile as sf

    source = tmp_path / "in.wav"
    sf.write(source, 0.3 * np.random.default_rng(1).standard_normal(44100), 44100)
    options = ServeOptions(
        model=str(kinds), method="level", audio="null", input=str(source),
        osc_port=0, reply_port=0, zeroconf=False, trust_model=True,
    )  # fmt: skip
    with Server(options) as server:
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(f"{server.oscquery.url}/ui")
        canvas = 'canvas[data-address="/out/kinds/level"]'
        page.wait_for_selector(canvas, timeout=10_000)
        assert "(2 ch, 1/256)" in page.locator("#frames .note").text_content()
        drawn = page.evaluate(
            f"""() => {{
              const c = document.querySelector('{canvas}');
              const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
              let lit = 0;
              for (let i = 3; i < d.length; i += 4) lit += d[i] > 0;
              return lit;
            }}"""
        )
        page.close()
    assert drawn > 500, "the frames are drawn as lines"
