// The control page: controls built from the server's OSCQuery namespace (GET /), values and
// path changes followed over its WebSocket (LISTEN, PATH_ADDED, PATH_REMOVED), changes sent
// back as binary OSC on the same WebSocket, meters pushed by the server ({"COMMAND": "METERS"}).
"use strict";

// -- OSC: the few types the namespace uses (f, i, s), big-endian, 4-byte aligned ---------------

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function oscString(text) {
  const bytes = encoder.encode(text);
  const out = new Uint8Array((bytes.length + 4) & ~3);
  out.set(bytes);
  return out;
}

function encodeOsc(address, args) {
  const parts = [oscString(address), oscString("," + args.map((a) => a.type).join(""))];
  for (const arg of args) {
    if (arg.type === "s") {
      parts.push(oscString(arg.value));
    } else {
      const word = new DataView(new ArrayBuffer(4));
      if (arg.type === "i") word.setInt32(0, arg.value);
      else word.setFloat32(0, arg.value);
      parts.push(new Uint8Array(word.buffer));
    }
  }
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) { out.set(part, at); at += part.length; }
  return out.buffer;
}

function decodeOsc(buffer) {
  const view = new DataView(buffer);
  let at = 0;
  const text = () => {
    let end = at;
    while (end < buffer.byteLength && view.getUint8(end) !== 0) end++;
    const value = decoder.decode(new Uint8Array(buffer, at, end - at));
    at = (end + 4) & ~3;
    return value;
  };
  const address = text();
  const tags = text().slice(1);
  const args = [];
  for (const tag of tags) {
    if (tag === "f") { args.push(view.getFloat32(at)); at += 4; }
    else if (tag === "i") { args.push(view.getInt32(at)); at += 4; }
    else if (tag === "s") args.push(text());
  }
  return { address, args };
}

// -- the connection ------------------------------------------------------------------------------

const state = {
  socket: null,
  controls: new Map(),   // FULL_PATH -> { show(args) }
  pending: new Map(),    // FULL_PATH -> args, sent once per animation frame (newest wins)
  tree: null,
  versions: [],
  log: [],               // arrivals of pushed values, for measurements: [path, value, epoch ms]
  sent: [],              // values sent, for measurements: [path, value, epoch ms]
};
window.bendserver = state;

let flushing = false;
function send(path, args) {
  state.pending.set(path, args);
  if (!flushing) {
    flushing = true;
    requestAnimationFrame(flush);
  }
}

function flush() {
  flushing = false;
  const socket = state.socket;
  if (!socket || socket.readyState !== WebSocket.OPEN) return;
  const now = performance.timeOrigin + performance.now();
  for (const [path, args] of state.pending) {
    socket.send(encodeOsc(path, args));
    state.sent.push([path, args.length ? args[0].value : null, now]);
  }
  if (state.sent.length > 5000) state.sent.splice(0, 1000);
  state.pending.clear();
}

function connect() {
  const socket = new WebSocket(`ws://${location.host}/`);
  socket.binaryType = "arraybuffer";
  state.socket = socket;
  socket.onopen = async () => {
    setStatus(true);
    await rebuild();
    socket.send(JSON.stringify({ COMMAND: "METERS", DATA: "on" }));
  };
  socket.onmessage = (event) => {
    if (typeof event.data === "string") {
      const message = JSON.parse(event.data);
      if (message.COMMAND === "METERS") showMeters(message.DATA);
      else if (message.COMMAND === "PATH_ADDED" || message.COMMAND === "PATH_REMOVED") later();
      return;
    }
    const { address, args } = decodeOsc(event.data);
    state.log.push([address, args[0], performance.timeOrigin + performance.now()]);
    if (state.log.length > 5000) state.log.splice(0, 1000);
    const control = state.controls.get(address);
    if (control) control.show(args);
  };
  socket.onclose = () => {
    state.pending.clear();  // what was not sent is stale by the time the page reconnects
    setStatus(false);
    setTimeout(connect, 1000);
  };
}

function setStatus(on) {
  const status = document.getElementById("status");
  status.textContent = on ? "live" : "disconnected";
  status.className = "status " + (on ? "on" : "off");
}

let rebuildTimer = null;
function later() {  // ops come and go in bursts (a preset): one rebuild after them
  clearTimeout(rebuildTimer);
  rebuildTimer = setTimeout(rebuild, 100);
}

// -- building the page from the namespace --------------------------------------------------------

async function rebuild() {
  const response = await fetch("/", { cache: "no-store" });
  const tree = await response.json();
  state.tree = tree;
  state.controls.clear();
  document.getElementById("model").textContent = (tree.DESCRIPTION || "").replace(/^bendserver: /, "");
  const contents = tree.CONTENTS || {};
  const nodes = Object.entries(contents).filter(([, node]) => child(node, "engine"));
  document.getElementById("engine").hidden = !contents.engine && !contents.rack;
  buildOutput(nodes.length ? undefined : contents.engine, contents.rack);
  if (nodes.length) buildRack(nodes);
  else buildOps(contents.bend);
  buildAddOp(nodes.length ? nodes : [["", tree]]);
  buildMorph(contents.version, contents.interp);
  buildPresets(contents.preset);
  buildModulators(contents.mod, tree);
  buildOther(contents);
  const socket = state.socket;
  for (const path of state.controls.keys()) {
    socket.send(JSON.stringify({ COMMAND: "LISTEN", DATA: path }));
  }
  document.body.dataset.ready = String(performance.now());
}

function child(node, name) {
  return node && node.CONTENTS ? node.CONTENTS[name] : undefined;
}

function writable(node) {
  return node && (node.ACCESS & 2) === 2;
}

function element(tag, props = {}, ...children) {
  const made = Object.assign(document.createElement(tag), props);
  for (const c of children) made.append(c);
  return made;
}

function label(node) {
  return node.FULL_PATH.split("/").pop();
}

// One control for one method node: a slider for a bounded number, a switch for 0/1, a menu for
// named values. Returns null for anything else.
function control(node, name = label(node)) {
  if (!writable(node)) return null;
  const type = node.TYPE || "";
  const range = (node.RANGE || [])[0] || {};
  const path = node.FULL_PATH;
  const row = element("div", { className: "control", title: `${path}: ${node.DESCRIPTION || ""}` });
  row.append(element("label", { textContent: name }));
  if (type === "i" && range.MIN === 0 && range.MAX === 1) {
    const box = element("input", { type: "checkbox", className: "switch" });
    box.dataset.path = path;
    box.onchange = () => send(path, [{ type: "i", value: box.checked ? 1 : 0 }]);
    row.append(box, element("output"));
    register(path, (args) => { box.checked = Number(args[0]) >= 0.5; });
    return row;
  }
  if (type === "s" && range.VALS) {
    const menu = element("select");
    menu.dataset.path = path;
    for (const value of range.VALS) menu.append(element("option", { value, textContent: value }));
    menu.onchange = () => send(path, [{ type: "s", value: menu.value }]);
    row.append(menu, element("output"));
    register(path, (args) => { menu.value = args[0]; });
    return row;
  }
  if ((type === "f" || type === "i") && isFinite(range.MIN) && isFinite(range.MAX)) {
    return slider(node, row, range, type);
  }
  return null;
}

function slider(node, row, range, type) {
  const path = node.FULL_PATH;
  const input = element("input", { type: "range", min: range.MIN, max: range.MAX });
  input.step = type === "i" ? 1 : "any";
  input.dataset.path = path;
  const shown = element("output");
  shown.dataset.for = path;
  let held = false;  // while a finger or the mouse holds it, the server's echo does not move it
  // The last value sent, until the server echoes it back: an echo of an earlier value of the
  // same drag arriving after the release is stale and must not move the slider back.
  let awaited = null;
  let awaitedUntil = 0;
  input.addEventListener("pointerdown", () => { held = true; });
  for (const end of ["pointerup", "pointercancel", "change"]) {
    input.addEventListener(end, () => { held = false; });
  }
  input.addEventListener("input", () => {
    const value = Number(input.value);
    shown.textContent = format(value);
    awaited = value;
    awaitedUntil = performance.now() + 1000;  // a value the server refused: follow it anyway
    send(path, [{ type, value }]);
  });
  register(path, (args) => {
    const value = Number(args[0]);
    if (awaited !== null) {
      const stale = Math.abs(value - awaited) > 1e-6 * Math.max(1, Math.abs(awaited));
      if (stale && performance.now() < awaitedUntil) return;
      awaited = null;
    }
    shown.textContent = format(value);
    if (!held) input.value = value;
  });
  row.append(input, shown);
  return row;
}

function register(path, show) {
  state.controls.set(path, { show });
  const node = findNode(path);
  if (node && node.VALUE) show(node.VALUE);
}

function findNode(path) {
  let node = state.tree;
  for (const part of path.split("/").filter(Boolean)) node = child(node, part);
  return node;
}

function format(value) {
  if (typeof value !== "number") return String(value);
  const size = Math.abs(value);
  if (size > 0 && size < 0.01) return value.toPrecision(3);  // an LFO's 6.25e-05, not 0.000
  return size >= 100 ? value.toFixed(0) : size >= 10 ? value.toFixed(1) : value.toFixed(3);
}

function fill(container, rows) {
  container.replaceChildren(...rows.filter(Boolean));
}

// The Output card: one model's gain, mix, bypass and reset, then the rack's own output (its
// gain, mute and bypass: a rack of several has only these; one model's are named "rack ...").
function buildOutput(engine, rack) {
  const rows = ["gain", "mix", "bypass"].map((name) => child(engine, name)).filter(Boolean)
    .map((node) => control(node));
  const reset = child(engine, "reset");  // a method without arguments
  if (reset) {
    const button = element("button", { textContent: "reset", title: reset.DESCRIPTION || "" });
    button.onclick = () => send(reset.FULL_PATH, []);
    rows.push(element("div", { className: "control" }, element("label"), button));
  }
  for (const name of ["gain", "mute", "bypass"]) {
    const found = child(rack, name);
    if (found) rows.push(control(found, engine && name !== "mute" ? `rack ${name}` : name));
  }
  fill(document.querySelector("#engine .controls"), rows);
}

function buildOps(bend) {
  document.getElementById("ops").replaceChildren(...opCards(bend));
}

// A card for each node of a rack: its model, output, versions and ops, labelled by op and
// parameter (the address in each control's tooltip).
function buildRack(nodes) {
  const cards = nodes.map(([name, node]) => {
    const card = element("section", { className: "panel node" });
    card.dataset.node = name;
    const about = (node.DESCRIPTION || "").replace(/^bendserver: /, "");
    card.append(element("h2", {}, element("span", { textContent: name }), element("small", { textContent: about })));
    const engine = child(node, "engine");
    for (const setting of ["gain", "mix", "bypass"]) {
      const found = child(engine, setting);
      if (found) card.append(control(found) || "");
    }
    const version = child(node, "version");
    const interp = child(node, "interp");
    const names = versionNames(version, interp);
    if (names.length > 1 && writable(version)) {
      const morph = element("div", { className: "morph" }, element("div", { className: "buttons" }),
        element("div", { className: "pad", ariaLabel: `morph ${name} between versions` }, element("b", { className: "puck" })),
        element("p", { className: "note" }));
      card.append(morph);
      morphPad(morph, version, interp, names);
    }
    card.append(presetRow(child(node, "preset")) || "");
    card.append(...opCards(child(node, "bend")));
    return card;
  });
  document.getElementById("ops").replaceChildren(...cards);
}

function opCards(bend) {
  const cards = [];
  for (const [id, op] of Object.entries((bend && bend.CONTENTS) || {})) {
    if (!op.CONTENTS) continue;  // /bend/add, /bend/remove, /bend/clear
    const card = element("div", { className: "panel op" });
    card.dataset.op = id;
    const enable = child(op, "enable");
    const title = element("h2", {}, element("span", { className: "op-title", textContent: id }));
    const about = (op.DESCRIPTION || "").replace(/^op /, "").replace(/\\(.)/g, "$1");  // no regex escapes
    title.firstChild.append(element("small", { textContent: about }));
    const remove = child(bend, "remove");
    if (writable(remove)) {
      title.append(element("button", {
        textContent: "remove", title: `remove op ${id}`,
        onclick: () => send(remove.FULL_PATH, [{ type: "s", value: id }]),
      }));
    }
    card.append(title);
    if (enable) {
      card.append(control(enable, "on"));
      const show = state.controls.get(enable.FULL_PATH).show;
      register(enable.FULL_PATH, (args) => { show(args); card.classList.toggle("off", !Number(args[0])); });
    }
    for (const [name, param] of Object.entries(op.CONTENTS)) {
      if (name !== "enable") card.append(control(param, `${id} · ${name}`) || "");
    }
    cards.push(card);
  }
  return cards;
}

// Adding an op: which node, its id, the op, the activation or weight it bends (the model's
// own names), and one parameter's value.
function buildAddOp(nodes) {
  const section = document.getElementById("add-op");
  const adders = nodes.map(([name, node]) => [name, child(child(node, "bend"), "add")]).filter(([, add]) => writable(add));
  section.hidden = !adders.length;
  if (!adders.length) return;
  const nodeMenu = document.getElementById("add-node");
  nodeMenu.replaceChildren(...adders.map(([name]) => element("option", { value: name, textContent: name || "model" })));
  nodeMenu.hidden = adders.length < 2 && !adders[0][0];
  const fillMenus = () => {
    const add = new Map(adders).get(nodeMenu.value) || adders[0][1];
    const [, types, targets] = (add.RANGE || []).map((r) => (r || {}).VALS || []);
    document.getElementById("add-type").replaceChildren(...types.map((value) => element("option", { value, textContent: value })));
    document.getElementById("add-target").replaceChildren(...targets.map((value) => element("option", { value, textContent: value })));
    return add;
  };
  let add = fillMenus();
  nodeMenu.onchange = () => { add = fillMenus(); };
  document.getElementById("add-go").onclick = () => {
    const id = document.getElementById("add-id").value.trim();
    if (!id) return;
    const args = [document.getElementById("add-type").value, document.getElementById("add-target").value];
    const message = [{ type: "s", value: id }, ...args.map((value) => ({ type: "s", value }))];
    const param = document.getElementById("add-param").value.trim();
    const value = document.getElementById("add-value").value.trim();
    if (param && value !== "") message.push({ type: "s", value: param }, { type: "f", value: Number(value) });
    send(add.FULL_PATH, message);
  };
}

// -- modulators: added, set, routed and triggered here; their values come with the meters -----

function buildModulators(mod, tree) {
  const section = document.getElementById("mods");
  const add = child(mod, "add");
  section.hidden = !writable(add);
  if (!writable(add)) return;
  const kinds = (((add.RANGE || [])[1] || {}).VALS) || [];
  document.getElementById("mod-kind").replaceChildren(...kinds.map((value) => element("option", { value, textContent: value })));
  document.getElementById("mod-add").onclick = () => {
    const id = document.getElementById("mod-id").value.trim();
    if (id) send(add.FULL_PATH, [{ type: "s", value: id }, { type: "s", value: document.getElementById("mod-kind").value }]);
  };
  const routable = routableAddresses(tree);
  const cards = [];
  for (const [id, node] of Object.entries(mod.CONTENTS || {})) {
    if (!node.CONTENTS) continue;  // /mod/add, /mod/remove, /mod/clear, /mod/list
    const card = element("div", { className: "mod" });
    card.dataset.mod = id;
    const remove = child(mod, "remove");
    const title = element("h2", {}, element("span", { textContent: id }), element("button", {
      textContent: "remove", onclick: () => send(remove.FULL_PATH, [{ type: "s", value: id }]),
    }));
    card.append(title, element("div", { className: "bar" }, element("i", { className: "rms" })));
    card.append(element("p", { className: "drives" }));
    const own = Object.entries(node.CONTENTS).filter(([name]) => !MOD_WORDS.has(name));
    for (const [name, param] of own) card.append(control(param, name) || "");
    if (own.some(([name]) => name === "hold_ms")) {
      const trigger = child(node, "trigger");
      card.append(element("button", { textContent: "trigger", onclick: () => send(trigger.FULL_PATH, [{ type: "i", value: 1 }]) }));
    }
    const target = element("select", { className: "route-to" });
    target.append(...routable.map((value) => element("option", { value, textContent: value })));
    const depth = element("input", { className: "route-depth", type: "number", value: "0.2", step: "any" });
    const route = child(node, "route");
    card.append(element("div", { className: "row" }, target, depth, element("button", {
      textContent: "route",
      onclick: () => send(route.FULL_PATH, [{ type: "s", value: target.value }, { type: "f", value: Number(depth.value) }]),
    })));
    cards.push(card);
  }
  section.querySelector(".list").replaceChildren(...cards);
}

const MOD_WORDS = new Set(["route", "unroute", "source", "steps", "trigger"]);

// The parameters a modulator can drive: every op's parameter, each output gain and mix, the
// rack's gain.
function routableAddresses(tree) {
  const found = [];
  const walk = (node) => {
    const path = node.FULL_PATH || "";
    if (/^\/(mod|record|midi)\b/.test(path)) return;
    if (node.CONTENTS) Object.values(node.CONTENTS).forEach(walk);
    else if (/\/bend\/[^/]+\/[^/]+$/.test(path) && !/\/(enable|add|remove|clear)$/.test(path)) found.push(path);
    else if (/\/engine\/(gain|mix)$|^\/rack\/gain$/.test(path)) found.push(path);
  };
  walk(tree);
  return found;
}

function showModulators(shown) {
  const levels = (shown && shown.levels) || {};
  for (const [id, { value, drives }] of Object.entries(levels)) {
    const card = document.querySelector(`#mods .mod[data-mod="${id}"]`);
    if (!card) continue;
    card.querySelector(".bar .rms").style.width = `${100 * Math.min(1, Math.abs(value))}%`;
    card.querySelector(".drives").textContent = drives.length ? `${format(value)} → ${drives.join(", ")}` : format(value);
  }
  document.querySelectorAll("input[data-played]").forEach((input) => { delete input.dataset.played; });
  for (const [address, value] of Object.entries((shown && shown.driven) || {})) {
    const input = document.querySelector(`input[type=range][data-path="${address}"]`);
    if (!input) continue;
    input.dataset.played = String(value);
    const row = input.parentElement;
    let mark = row.querySelector(".played");
    if (!mark) row.append(mark = element("i", { className: "played", title: "played, modulated" }));
    const box = input.getBoundingClientRect();
    const from = row.getBoundingClientRect();
    const at = (value - Number(input.min)) / (Number(input.max) - Number(input.min));
    mark.style.left = `${box.left - from.left + box.width * Math.min(1, Math.max(0, at))}px`;
  }
  document.querySelectorAll(".control .played").forEach((mark) => {
    mark.hidden = !mark.parentElement.querySelector("input[data-played]");
  });
}

// /error replies (from any source: the page, OSC, MIDI) shown for a few seconds.
let lastError = 0;
function showErrors(errors) {
  const list = document.getElementById("errors");
  for (const [number, address, message] of errors || []) {
    if (number <= lastError) continue;
    lastError = number;
    const item = element("li", { textContent: `${address}: ${message}` });
    list.append(item);
    setTimeout(() => item.remove(), 8000);
    while (list.children.length > 4) list.firstChild.remove();
  }
}

// A node's preset menu: the presets that fit it (the namespace lists only those) and a button.
function presetRow(preset) {
  const load = child(preset, "load");
  const names = (((load && load.RANGE) || [])[0] || {}).VALS || [];
  if (!writable(load) || !names.length) return null;
  const menu = element("select", { className: "preset-list", ariaLabel: "preset" });
  menu.append(...names.map((value) => element("option", { value, textContent: value })));
  const button = element("button", {
    textContent: "load", onclick: () => send(load.FULL_PATH, [{ type: "s", value: menu.value }]),
  });
  return element("div", { className: "row presets" }, menu, button);
}

function buildPresets(preset) {
  const load = child(preset, "load");
  const save = child(preset, "save");
  const section = document.getElementById("presets");
  section.hidden = !writable(load) && !writable(save);
  const list = document.getElementById("preset-list");
  const names = (((load && load.RANGE) || [])[0] || {}).VALS || [];
  list.replaceChildren(...names.map((value) => element("option", { value, textContent: value })));
  list.parentElement.hidden = !names.length;  // none fits (a rack's own presets): save only
  document.getElementById("preset-load").onclick = () => {
    if (list.value) send(load.FULL_PATH, [{ type: "s", value: list.value }]);
  };
  const name = document.getElementById("preset-name");
  document.getElementById("preset-save").onclick = () => {
    if (!name.value.trim()) return;
    send(save.FULL_PATH, [{ type: "s", value: name.value.trim() }]);
    setTimeout(rebuild, 500);  // the new name in the list
  };
}

// -- versions: buttons, and an XY pad morphing between up to four of them (/interp) ------------

const CORNERS = [[0, 0], [1, 0], [1, 1], [0, 1]];  // top left, top right, bottom right, left

function buildMorph(version, interp) {
  const names = versionNames(version, interp);
  state.versions = names;
  const section = document.getElementById("morph");
  section.hidden = names.length < 2;
  morphPad(section, version, interp, names);
}

function versionNames(version, interp) {
  return ((((version || interp || {}).RANGE) || [])[0] || {}).VALS || [];
}

// A morph control in ``box`` (its .buttons, .pad with its .puck, and .note caption): a button
// per version (/version), and an XY pad between up to four of them (/interp) whose puck follows
// a mix sent from anywhere. The single model's is the Versions panel; each rack node has its own.
function morphPad(box, version, interp, names) {
  const buttons = box.querySelector(".buttons");
  buttons.replaceChildren(...names.map((name) => {
    const button = element("button", { textContent: name });
    button.dataset.version = name;
    button.onclick = () => send(version.FULL_PATH, [{ type: "s", value: name }]);
    return button;
  }));
  if (version) register(version.FULL_PATH, (args) => markVersion(box, { [args[0]]: 1 }));
  const pad = box.querySelector(".pad");
  const puck = pad.querySelector(".puck");
  const corners = cornerNames(names.slice(0, 4));
  pad.querySelectorAll(".corner").forEach((c) => c.remove());
  const seen = new Set();
  corners.forEach((name, index) => {
    if (seen.has(name)) return;
    seen.add(name);
    const [x, y] = CORNERS[index];
    const tag = element("span", { className: "corner", textContent: name });
    tag.dataset.version = name;
    tag.style[x ? "right" : "left"] = "0";
    tag.style[y ? "bottom" : "top"] = "0";
    pad.append(tag);
  });
  pad.hidden = !writable(interp);
  if (!writable(interp)) return;
  const move = (event) => {
    const frame = pad.getBoundingClientRect();
    const x = Math.min(1, Math.max(0, (event.clientX - frame.left) / frame.width));
    const y = Math.min(1, Math.max(0, (event.clientY - frame.top) / frame.height));
    puck.style.left = `${100 * x}%`;
    puck.style.top = `${100 * y}%`;
    const weights = morphWeights(corners, x, y);
    const args = [];
    for (const [name, weight] of Object.entries(weights)) {
      args.push({ type: "s", value: name }, { type: "f", value: weight });
    }
    send(interp.FULL_PATH, args);
  };
  pad.onpointerdown = (event) => { pad.setPointerCapture(event.pointerId); move(event); };
  pad.onpointermove = (event) => { if (pad.hasPointerCapture(event.pointerId)) move(event); };
  register(interp.FULL_PATH, (args) => {
    const mix = {};
    for (let i = 0; i + 1 < args.length; i += 2) mix[args[i]] = args[i + 1];
    markVersion(box, mix);
    placePuck(puck, corners, mix);
  });
}

// The puck where a mix sent from anywhere puts it: the weight of the right corners across, of
// the bottom ones down (the inverse of morphWeights for a mix it made).
function placePuck(puck, corners, mix) {
  const total = Object.values(mix).reduce((a, b) => a + b, 0) || 1;
  const w = (index) => (mix[corners[index]] || 0) / total;
  const unique = new Set(corners).size;
  let x = 0.5;
  let y = 0.5;
  if (unique === 2) x = w(1);                                   // a left, b right
  else if (unique === 3) { y = w(2); x = y < 1 ? w(1) / (1 - y) : 0.5; }  // c along the bottom
  else if (unique === 4) { x = w(1) + w(2); y = w(2) + w(3); }
  puck.style.left = `${100 * Math.min(1, Math.max(0, x))}%`;
  puck.style.top = `${100 * Math.min(1, Math.max(0, y))}%`;
}

// Which version sits at each corner: two versions left and right, three with the third along
// the bottom, four one per corner.
function cornerNames(names) {
  if (names.length === 2) return [names[0], names[1], names[1], names[0]];
  if (names.length === 3) return [names[0], names[1], names[2], names[2]];
  return names;
}

// Bilinear weights of the corners at (x, y), summed per version.
function morphWeights(corners, x, y) {
  const weights = {};
  corners.forEach((name, index) => {
    const [cx, cy] = CORNERS[index];
    const w = (cx ? x : 1 - x) * (cy ? y : 1 - y);
    weights[name] = Math.round(1e4 * ((weights[name] || 0) + w)) / 1e4;
  });
  return weights;
}

function markVersion(box, mix) {
  const text = Object.entries(mix).filter(([, w]) => w > 0)
    .map(([name, w]) => `${name} ${(100 * w).toFixed(0)}%`).join(" · ");
  box.querySelector(".note").textContent = text;
  box.querySelectorAll("[data-version]").forEach((el) => {
    el.classList.toggle("on", (mix[el.dataset.version] || 0) >= 0.5);
  });
}

// -- everything else writable the namespace has (an nn~ file's attributes, sources added later) --

const SHOWN = /^(\/[^/]+)?\/(engine|bend|version|interp|preset)$|^\/(mod|record|rack)$/;
// Addresses that change what plays as a whole (load a preset by number, remove...): never a
// plain slider or menu.
const STRUCTURAL = /\/(remove|clear|program|load|save|add|reset|learn|map|unmap|subscribe|unsubscribe)$/;
const ATTRIBUTE = /\/attr\/[^/]+$/;

function buildOther(contents) {
  const rows = [];
  const attributes = [];
  const walk = (node) => {
    if (SHOWN.test(node.FULL_PATH) || STRUCTURAL.test(node.FULL_PATH)) return;
    if (node.CONTENTS) Object.values(node.CONTENTS).forEach(walk);
    else if (ATTRIBUTE.test(node.FULL_PATH)) attributes.push(attributeRow(node));
    else if (node.TYPE) rows.push(control(node, node.FULL_PATH));
  };
  Object.values(contents).forEach(walk);
  for (const [id, found] of [["other", rows], ["attributes", attributes]]) {
    const section = document.getElementById(id);
    fill(section.querySelector(".controls"), found);
    section.hidden = !found.some(Boolean);
  }
}

// One row for an nn~ attribute: a field per value its setter takes (a switch for a bool, a
// menu where the file names the strings it takes, a number, a text: a sound file's path for a
// tensor or a buffer), sent together when one changes; without a setter, what it lacks.
function attributeRow(node) {
  const path = node.FULL_PATH;
  const name = path.replace(/^\//, "").replace(/\/?attr\//, " ").trim();
  const row = element("div", { className: "control attribute", title: node.DESCRIPTION || "" });
  row.dataset.path = path;
  row.append(element("label", { textContent: name }));
  if (!writable(node)) {
    const shown = element("output");
    shown.textContent = (node.DESCRIPTION || "").replace(/^nn~ attribute [^(]*/, "");
    row.append(shown);
    if (node.VALUE) register(path, (args) => { shown.textContent = args.map(format).join(" "); });
    return row;
  }
  const types = node.TYPE.split("");
  const fields = types.map((type, index) => attributeField(type, (node.RANGE || [])[index] || {}));
  const edited = new Set();  // fields typed into since the row was last sent
  const sendAll = () => {
    edited.clear();
    send(path, fields.map((field, index) => ({ type: types[index], value: field.read() })));
  };
  const box = element("span", { className: "fields" }, ...fields.map((field) => field.input));
  fields.forEach((field) => {
    field.input.addEventListener("input", () => edited.add(field));
    field.input.addEventListener("change", sendAll);
  });
  row.append(box);
  register(path, (args) => {  // a field being edited, or typed into and not sent, keeps it
    args.forEach((value, index) => {
      const field = fields[index];
      if (field && !edited.has(field) && document.activeElement !== field.input) field.show(value);
    });
  });
  return row;
}

function attributeField(type, range) {
  if (type === "i" && range.MIN === 0 && range.MAX === 1) {
    const input = element("input", { type: "checkbox", className: "switch" });
    return { input, read: () => (input.checked ? 1 : 0), show: (v) => { input.checked = Number(v) >= 0.5; } };
  }
  if (range.VALS) {
    const input = element("select");
    for (const value of range.VALS) input.append(element("option", { value, textContent: value }));
    return { input, read: () => input.value, show: (v) => { input.value = v; } };
  }
  if (type === "i" || type === "f") {
    const input = element("input", { type: "number", step: type === "i" ? "1" : "any" });
    return { input, read: () => Number(input.value), show: (v) => { input.value = v; } };
  }
  const input = element("input", { type: "text", placeholder: "value or sound file" });
  return { input, read: () => input.value, show: (v) => { input.value = v; } };
}

// -- frames of methods at a control rate (features, latents): a plot each ----------------------

const COLOURS = ["#4fb3a9", "#e0a040", "#e05a4f", "#8fa7ff", "#c59bff", "#9ccc65", "#ffd54f", "#f48fb1"];

function drawFrames(streams) {
  const section = document.getElementById("frames");
  const entries = Object.entries(streams || {});
  section.hidden = entries.length === 0;
  const plots = section.querySelector(".plots");
  for (const [address, stream] of entries) {
    let canvas = plots.querySelector(`canvas[data-address="${address}"]`);
    if (!canvas) {
      canvas = element("canvas", { width: 480, height: 120 });
      canvas.dataset.address = address;
      plots.append(element("p", { className: "note", textContent: `${address} (${stream.channels} ch, 1/${stream.ratio})` }), canvas);
    }
    plot(canvas, stream.frames);
  }
}

function plot(canvas, frames) {
  const g = canvas.getContext("2d");
  const { width, height } = canvas;
  g.clearRect(0, 0, width, height);
  if (!frames.length) return;
  const values = frames.flat();
  const low = Math.min(...values);
  const span = Math.max(1e-9, Math.max(...values) - low);
  for (let channel = 0; channel < frames[0].length; channel++) {
    g.strokeStyle = COLOURS[channel % COLOURS.length];
    g.beginPath();
    frames.forEach((frame, i) => {
      const x = (i / Math.max(1, frames.length - 1)) * width;
      const y = height - 4 - ((frame[channel] - low) / span) * (height - 8);
      if (i) g.lineTo(x, y); else g.moveTo(x, y);
    });
    g.stroke();
  }
}

// -- meters --------------------------------------------------------------------------------------

const FLOOR = -60;

function fraction(db) {
  return Math.min(1, Math.max(0, (db - FLOOR) / -FLOOR));
}

function setBar(meter, rms, peak, over = false) {
  const bar = document.querySelectorAll("#meters .bar")[meter];
  bar.querySelector(".rms") && (bar.querySelector(".rms").style.width = `${100 * rms}%`);
  const mark = bar.querySelector(".peak");
  if (bar.classList.contains("warn")) mark.style.width = `${100 * peak}%`;
  else mark.style.left = `calc(${100 * Math.min(peak, 1)}% - 2px)`;
  bar.classList.toggle("over", over);
}

function showMeters(m) {
  setBar(0, fraction(m.input.rms), fraction(m.input.peak));
  setBar(1, fraction(m.output.rms), fraction(m.output.peak));
  document.getElementById("in-db").textContent = `${m.input.peak.toFixed(0)} dB`;
  document.getElementById("out-db").textContent = `${m.output.peak.toFixed(0)} dB`;
  setBar(2, 0, Math.min(1, m.limiting * 10));
  document.getElementById("limit").textContent = `${(100 * m.limiting).toFixed(1)} %`;
  const c = m.compute_ms;
  setBar(3, c.p50 / c.budget, c.max / c.budget, c.max > c.budget);
  document.getElementById("compute").textContent = `${c.p50.toFixed(2)}/${c.budget.toFixed(1)} ms`;
  document.getElementById("compute").title = `p50 ${c.p50} ms, max ${c.max} ms, block ${c.budget} ms`;
  const xruns = document.getElementById("xruns");
  xruns.textContent = `xruns ${m.xruns}`;
  xruns.classList.toggle("bad", m.xruns > 0);
  document.getElementById("late").textContent = `late ${m.late}`;
  document.getElementById("blocks").textContent = `blocks ${m.blocks}`;
  drawSpectrum(m.spectrum, m.scope);
  drawFrames(m.frames);
  showModulators(m.modulators);
  showErrors(m.errors);
  state.meters = (state.meters || 0) + 1;
}

function drawSpectrum(bands, scope) {
  const canvas = document.getElementById("spectrum");
  const g = canvas.getContext("2d");
  const { width, height } = canvas;
  g.clearRect(0, 0, width, height);
  const step = width / bands.length;
  g.fillStyle = "#4fb3a9";
  bands.forEach((db, i) => {
    const h = height * Math.min(1, Math.max(0, (db + 96) / 96));
    g.fillRect(i * step + 1, height - h, step - 2, h);
  });
  g.strokeStyle = "rgba(255,255,255,.7)";
  g.beginPath();
  scope.forEach((v, i) => {
    const x = (i / Math.max(1, scope.length - 1)) * width;
    const y = height / 2 - (v * height) / 2;
    if (i) g.lineTo(x, y); else g.moveTo(x, y);
  });
  g.stroke();
}

connect();
