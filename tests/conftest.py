import os
import sys
import tempfile
from pathlib import Path

# test helper modules (tests/streaming.py) import as top-level modules
sys.path.insert(0, str(Path(__file__).parent))

# The user's data folder (user presets, user models) of every test and of the servers the tests
# start: a fresh temporary folder, never the home directory of whoever runs the tests.
os.environ["BENDSERVER_HOME"] = tempfile.mkdtemp(prefix="bendserver-home-")
