"""What bendserver accepts at most: the bound of every reader and surface, in one place.

Each bound is what its consumer can hold or a host can play, chosen so that a small input cannot
cost much (time, memory, a log): whatever goes past one is refused with one line naming it.
docs/security.md lists them with their reasons (a test checks that it lists each of them).
"""

from __future__ import annotations

# -- files read (scores, presets, MIDI mappings, manifests, rack files) --------------------------

#: The largest score, preset, MIDI mappings file or manifest read, in bytes.
MAX_FILE_BYTES = 64 * 2**20
#: The largest rack file read, in bytes (a rack of the most nodes takes a few KiB).
MAX_RACK_BYTES = 2**20
#: The deepest nesting of lists and objects (tables) in a JSON or TOML file.
MAX_DEPTH = 32
#: The most nodes a rack plays (each loads its own copy of its model), named edges included.
MAX_RACK_NODES = 64
#: The most edges a rack file joins its nodes with.
MAX_RACK_EDGES = 256
#: The most timed messages in a score.
MAX_SCORE_EVENTS = 100_000
#: The most structural messages (a preset loaded or saved, an op added...: each rebuilds the
#: model's graph, tens of milliseconds at least) in a score.
MAX_SCORE_CHANGES = 1_000

# -- values -------------------------------------------------------------------------------------

#: The longest ramp, in milliseconds (an OSC ramp, a MIDI mapping's).
MAX_RAMP_MS = 600_000.0
#: The largest magnitude of a MIDI mapping's range (what OSC's 32-bit floats carry).
MAX_MAGNITUDE = 3.4028234663852886e38
#: The longest model source (a name, a path, ``file.py:Class``), in characters (a path's limit).
MAX_SOURCE_CHARS = 4096
#: The longest message a user reads (an error quoting what it was given is cut there).
MAX_MESSAGE_CHARS = 2000

# -- sound files --------------------------------------------------------------------------------

#: The sample rates of the sound files read, in Hz (what sound cards and files use).
MIN_SAMPLE_RATE = 1_000
MAX_SAMPLE_RATE = 768_000
#: The most channels of a sound file read or played (one stream of the model each).
MAX_CHANNELS = 64
#: The longest sound file read, in seconds.
MAX_SOUND_SECONDS = 4 * 3600

# -- a model's own code, probed in a child process ----------------------------------------------

#: Seconds the probe's child may take to load a model and call it once (a RAVE export of 150 MB
#: took 1.9 s); past that it is stopped and nothing is loaded.
PROBE_SECONDS = 30.0
#: Bytes the probe's child may add to its address space, beyond twice the model's files (a RAVE
#: export of 150 MB added 224 MiB); past that the model's allocations fail and nothing is loaded.
PROBE_MEMORY = 4 * 2**30

# -- live loads ---------------------------------------------------------------------------------

#: Seconds from the start of a live load before another may start (one runs at a time: a load
#: arriving while one runs is refused at once).
LOAD_INTERVAL = 1.0

# -- the OSCQuery port: HTTP, the page's WebSocket ----------------------------------------------

#: The longest request line (a URL) and header line an HTTP request may have, in bytes, and the
#: most header lines: past them it is answered 400 (one log line).
HTTP_MAX_LINE = 8190
HTTP_MAX_HEADERS = 128
#: The most WebSocket clients at once (the page, OSCQuery browsers); more are answered 503.
PAGE_CLIENTS = 64
#: Messages waiting for one WebSocket client to read: past them it is closed (meters are
#: dropped instead while it has anything left to read).
PAGE_QUEUE = 256
#: Seconds one message may wait to be read by a WebSocket client before it is closed.
PAGE_SEND_SECONDS = 5.0
#: The most paths one WebSocket client may LISTEN to (the namespace has far fewer).
PAGE_LISTENS = 4096

# -- modulators ---------------------------------------------------------------------------------

#: The most modulators a rack plays, routes one modulator drives, and values of a step
#: sequence (each is a little work per block on the audio side).
MAX_MODULATORS = 64
MAX_ROUTES = 64
MAX_STEPS = 256
