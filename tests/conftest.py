import os
import sys
import tempfile
from pathlib import Path

import pytest

# test helper modules (tests/streaming.py) import as top-level modules
sys.path.insert(0, str(Path(__file__).parent))

# The user's data folder (user presets, user models) of every test and of the servers the tests
# start: a fresh temporary folder, never the home directory of whoever runs the tests.
os.environ["BENDSERVER_HOME"] = tempfile.mkdtemp(prefix="bendserver-home-")


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
