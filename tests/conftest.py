import os
import sys
import tempfile
import time
from pathlib import Path

import pytest

# test helper modules (tests/streaming.py) import as top-level modules
sys.path.insert(0, str(Path(__file__).parent))

# The user's data folder (user presets, user models) of every test and of the servers the tests
# start: a fresh temporary folder, never the home directory of whoever runs the tests.
os.environ["BENDSERVER_HOME"] = tempfile.mkdtemp(prefix="bendserver-home-")

# One torch thread in the tests' process and the commands it starts, as the commands default to:
# two threads on a 2-core machine shared with the servers the tests start oversubscribe it, and
# every call waits on the other thread (a first wavae build measured 13-24 s with two threads
# against 1.9 s with one, under the same load). Tests about threads set their own count.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def replies():
    """A UDP listener for the server's OSC replies (tests/jack.py), closed after the test."""
    from jack import Replies

    listener = Replies()
    yield listener
    listener.close()


@pytest.fixture(scope="session")
def kinds(tmp_path_factory):
    """An nn~ file made by the nn-tilde package, with attributes of every type (tests/nn_files.py),
    built once for the session."""
    from nn_files import kinds_file

    return kinds_file(tmp_path_factory.mktemp("kinds"))


class Counted:
    """Counts the inputs a fuzz test tried and prints the rate (from its first input to its
    last) when the test's module ends."""

    def __init__(self, name):
        self.name, self.count, self.started = name, 0, time.perf_counter()
        self.last = self.started

    def __call__(self):
        self.count += 1
        self.last = time.perf_counter()

    def report(self):
        seconds = self.last - self.started
        print(f"{self.name}: {self.count} inputs in {seconds:.2f} s, {self.count / seconds:.0f}/s")


@pytest.fixture(scope="module")
def counters():
    """``counters(name)()`` counts one input of the fuzz test ``name``; the rates are printed
    when the module ends (``pytest -s`` shows them)."""
    found = {}
    yield lambda name: found.setdefault(name, Counted(name))
    for counted in found.values():
        counted.report()
