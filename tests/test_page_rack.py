"""The control page playing a rack (the shipped racks/wavae_drive.toml on the null backend), in
Chromium driven by playwright: a card per node labelled by op and parameter, nothing that changes
what plays as a whole on a plain slider, a modulator added and routed moving a slider's played
mark (the rack's gain among what it routes to), an op added and removed, an /error shown, the
output card following and setting the rack's gain and mute (metered by the levels card), an XY
pad per node with versions driving that node's /interp, each node's preset menu offering what
fits it; and on one model, the XY puck following an /interp sent with oscsend and a preset menu
without the presets that do not fit.
``BENDSERVER_SCREENSHOT=1`` writes the screenshots in docs/images."""

import os
import time

import pytest
import test_page
from jack import ROOT, oscsend, send_python

from bendserver.rackspec import RackSpec
from bendserver.serve import ServeOptions, Server

RACK = ROOT / "racks" / "wavae_drive.toml"
SCREENSHOT = ROOT / "docs" / "images" / "rack-page.png"
#: The page's fixtures: a browser, its page (of this module's server), the reply listener.
browser, page, replies = test_page.browser, test_page.page, test_page.replies


@pytest.fixture(scope="module")
def server(replies):
    options = ServeOptions(
        rack=RackSpec.read(RACK), audio="null", input=str(ROOT / "models" / "drive" / "demo.flac"),
        osc_port=0, reply_port=replies.port, zeroconf=False, optimize="none",
    )  # fmt: skip
    with Server(options) as running:
        yield running


def test_each_node_has_a_card_labelled_by_op_and_parameter(page, server):
    for name in ("enc", "dec", "drive", "clean"):
        assert page.locator(f'section.node[data-node="{name}"]').count() == 1
    card = page.locator('section.node[data-node="drive"]')
    labels = card.locator(".control label").all_inner_texts()
    assert "lfo · depth" in labels and "mask · prob" in labels and "gain" in labels
    depth = card.locator('.control:has(input[data-path="/drive/bend/lfo/depth"])')
    assert depth.get_attribute("title").startswith("/drive/bend/lfo/depth: ")
    assert "pre.conv.weight" in card.locator(".op small").all_inner_texts()[2]
    # what changes what plays as a whole is never a plain slider or menu
    for word in ("program", "remove", "clear", "load"):
        assert page.locator(f'#other [data-path$="/{word}"]').count() == 0


def test_a_modulator_added_and_routed_moves_a_slider(page, server):
    page.fill("#mod-id", "wobble")
    page.select_option("#mod-kind", "lfo")
    page.click("#mod-add")
    card = page.locator('#mods .mod[data-mod="wobble"]')
    card.wait_for(timeout=5_000)
    card.locator('.control:has(input[data-path="/mod/wobble/rate"]) input').fill("4")
    offered = card.locator("select.route-to option").all_inner_texts()
    assert {"/rack/gain", "/drive/engine/gain", "/drive/engine/mix"} <= set(offered)
    card.locator("select.route-to").select_option("/drive/bend/lfo/depth")
    card.locator("input.route-depth").fill("0.1")
    card.locator("button", has_text="route").click()
    slider = page.locator('input[data-path="/drive/bend/lfo/depth"]')
    page.wait_for_function(
        "() => document.querySelector('input[data-path=\"/drive/bend/lfo/depth\"]')"
        ".dataset.played !== undefined",
        timeout=5_000,
    )
    seen = set()
    for _ in range(20):
        seen.add(slider.get_attribute("data-played"))
        time.sleep(0.1)
    assert len(seen) > 3, f"the played value moves: {seen}"
    assert "/drive/bend/lfo/depth" in card.locator(".drives").inner_text()
    if os.environ.get("BENDSERVER_SCREENSHOT"):  # the docs' screenshot, written anew
        page.set_viewport_size({"width": 1100, "height": 1300})  # the whole rack
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(SCREENSHOT))
    card.locator("button", has_text="remove").click()
    card.wait_for(state="detached", timeout=5_000)


def test_an_op_added_and_removed_on_the_page(page, server):
    page.select_option("#add-node", "drive")
    page.fill("#add-id", "boost")
    page.select_option("#add-type", "Scale")
    page.select_option("#add-target", "drive_out")
    page.fill("#add-param", "value")
    page.fill("#add-value", "1.5")
    page.click("#add-go")
    op = page.locator('section.node[data-node="drive"] .op[data-op="boost"]')
    op.wait_for(timeout=5_000)
    assert server.engine.nodes["drive"].state.op("boost").param("value") == 1.5
    op.locator("button", has_text="remove").click()
    op.wait_for(state="detached", timeout=5_000)
    assert "boost" not in server.engine.nodes["drive"].state.op_ids


def test_an_error_is_shown(page, server):
    oscsend(server.osc.port, "/drive/bend/nope/prob", "f", 0.5)
    page.wait_for_function(
        "() => document.getElementById('errors').textContent.includes(\"no op 'nope'\")",
        timeout=5_000,
    )


def rack_value(server, replies, name):
    """The rack's output setting ``name``, as ``/get/rack/<name>`` replies it over OSC."""
    replies.receive(timeout=0.05)  # what an earlier test left
    send_python(server.osc.port, f"/get/rack/{name}")
    return replies.wait_for(f"/get/rack/{name}")[0]


def test_the_output_card_follows_and_sets_the_racks_output(page, server, replies):
    card = page.locator("#engine")
    assert card.is_visible(), "a rack's output card"
    assert card.locator(".control label").all_inner_texts() == ["gain", "mute", "bypass"]
    oscsend(server.osc.port, "/rack/gain", "f", 0.25)
    page.wait_for_function(
        "() => document.querySelector('output[data-for=\"/rack/gain\"]').textContent === '0.250'",
        timeout=5_000,
    )
    slider = '#engine input[type=range][data-path="/rack/gain"]'
    assert float(page.locator(slider).input_value()) == pytest.approx(0.25)
    page.locator(slider).scroll_into_view_if_needed()
    test_page.drag(page, slider, 0.05, 0.25)  # 0..16: about 4
    shown = float(page.locator(slider).input_value())
    assert 2.0 < shown < 6.0, (shown, page.locator(slider).bounding_box())
    deadline = time.monotonic() + 5
    while abs((value := rack_value(server, replies, "gain")) - shown) > 1e-3:
        assert time.monotonic() < deadline, f"the server has {value}, the page shows {shown}"
        time.sleep(0.05)
    page.wait_for_function("() => parseFloat(document.getElementById('out-db').textContent) > -60")
    card.locator('input.switch[data-path="/rack/mute"]').click()
    deadline = time.monotonic() + 5
    while rack_value(server, replies, "mute") != 1.0:
        assert time.monotonic() < deadline, "the mute switch did not mute the rack"
        time.sleep(0.05)
    page.wait_for_function(  # the levels card meters the rack's output: silent
        "() => parseFloat(document.getElementById('out-db').textContent) <= -96", timeout=5_000
    )
    assert float(page.locator("#in-db").text_content().split()[0]) > -60, "the input plays on"
    oscsend(server.osc.port, "/rack/mute", "i", 0)
    page.wait_for_function(
        "() => !document.querySelector('#engine input[data-path=\"/rack/mute\"]').checked",
        timeout=5_000,
    )
    oscsend(server.osc.port, "/rack/gain", "f", 1.0)


def node_interp(server, replies, name):
    """Node ``name``'s version mix, as ``/get/<node>/interp`` replies it over OSC."""
    replies.receive(timeout=0.05)  # what an earlier test left
    send_python(server.osc.port, f"/get/{name}/interp")
    mix = replies.wait_for(f"/{name}/get/interp")
    return dict(zip(mix[::2], mix[1::2], strict=True))


def test_each_node_s_pad_drives_its_own_interp(page, server, replies):
    enc, dec = (page.locator(f'section.node[data-node="{n}"] .pad') for n in ("enc", "dec"))
    assert page.locator('section.node[data-node="drive"] .pad').count() == 0, "one version"
    assert enc.locator('.corner[data-version="percussion"]').count() == 1
    before = node_interp(server, replies, "dec")
    enc.scroll_into_view_if_needed()
    box = enc.bounding_box()
    page.mouse.click(box["x"] + box["width"] - 2, box["y"] + box["height"] / 2)
    deadline = time.monotonic() + 5
    while (mix := node_interp(server, replies, "enc")).get("percussion", 0) < 0.95:
        assert time.monotonic() < deadline, f"enc's pad did not morph enc: {mix}"
        time.sleep(0.05)
    assert node_interp(server, replies, "dec") == before, "dec's mix is its own"
    oscsend(server.osc.port, "/dec/interp", "sfsf", "strings", 0.25, "percussion", 0.75)
    page.wait_for_function(
        "() => document.querySelector('section.node[data-node=\"dec\"] .puck').style.left"
        " === '75%'",
        timeout=5_000,
    )
    enc_left = page.locator('section.node[data-node="enc"] .puck').evaluate("p => p.style.left")
    assert float(enc_left.rstrip("%")) > 95, f"enc's puck stays where it was put: {enc_left}"
    assert "75%" in page.locator('section.node[data-node="dec"] .morph .note').inner_text()


def test_each_node_offers_the_presets_that_fit_it(page, server):
    drive = page.locator('section.node[data-node="drive"] select.preset-list option')
    offered = drive.evaluate_all("options => options.map(o => o.value)")
    assert "drive" in offered and "wavae" not in offered, offered  # the user's may be there too
    clean = page.locator('section.node[data-node="clean"]')
    clean.locator("select.preset-list").select_option("drive")
    clean.locator(".presets button", has_text="load").click()
    deadline = time.monotonic() + 5
    while "lfo" not in server.engine.nodes["clean"].state.op_ids:
        assert time.monotonic() < deadline, "the preset chosen on clean's card did not load"
        time.sleep(0.05)
    clean.locator('.op[data-op="lfo"]').wait_for(timeout=5_000)


@pytest.fixture(scope="module")
def wavae(replies):
    options = ServeOptions(
        model="wavae", audio="null", osc_port=0, reply_port=replies.port, zeroconf=False
    )
    with Server(options) as running:
        yield running


def open_page(browser, server, **options):
    page = browser.new_page(**options)
    page.goto(f"{server.oscquery.url}/ui")
    page.wait_for_selector("body[data-ready]", timeout=10_000)
    return page


def test_the_preset_menu_offers_only_presets_that_fit(browser, wavae):
    page = open_page(browser, wavae, viewport=test_page.VIEWPORT)
    offered = page.locator("#preset-list option").evaluate_all("o => o.map(x => x.value)")
    assert "drive" not in offered and {"wavae", "wavae_latent"} <= set(offered), offered
    page.select_option("#preset-list", "wavae_latent")
    page.click("#preset-load")
    page.locator('.op[data-op="latent_scale"]').wait_for(timeout=5_000)
    assert wavae.engine.applied_state.op("latent_scale").param("value") == pytest.approx(1.8)
    page.close()


def test_the_puck_follows_an_interp_sent_with_oscsend(browser, wavae):
    page = open_page(browser, wavae, viewport={"width": 390, "height": 844}, has_touch=True)
    versions = wavae.engine.versions
    oscsend(wavae.osc.port, "/interp", "sfsf", versions[0], 0.25, versions[1], 0.75)
    page.wait_for_function(
        "() => document.getElementById('puck').style.left === '75%'", timeout=5_000
    )
    assert "75%" in page.locator("#mix").inner_text()
    if os.environ.get("BENDSERVER_SCREENSHOT"):
        page.screenshot(path=str(ROOT / "docs" / "images" / "page-phone-interp.png"))
    page.close()
