"""The cache folder's files: the first entry stored wins, so processes measuring at once agree;
a file that cannot be read starts afresh, a folder that cannot be written keeps the entries for
the process; a file made for another machine is not read."""

import json
import logging

import pytest

from bendserver.cache import CacheFile
from bendserver.paths import cache_dir


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("BENDSERVER_HOME", str(tmp_path))
    return tmp_path


def test_the_cache_folder_follows_the_user_folder_and_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("BENDSERVER_HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / "cache"
    monkeypatch.delenv("BENDSERVER_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "bendserver"


def test_the_first_entry_stored_is_the_one_every_process_keeps(home):
    one, other = CacheFile("t", {"machine": "m"}), CacheFile("t", {"machine": "m"})
    assert one.get("k") is None and other.get("k") is None  # both measure
    assert one.settle("k", 1) == 1
    assert other.settle("k", 2) == 1, "stored meanwhile by the other: kept"
    assert other.settle("k", 3, keep=lambda stored: stored > 1) == 3, "refused by keep"
    assert CacheFile("t", {"machine": "m"}).get("k") == 3
    assert one.path.parent == home / "cache" and one.path.name.startswith("t-")
    data = json.loads(one.path.read_text())
    assert data["header"] == {"machine": "m"} and data["entries"] == {"k": 3}


def test_another_header_keeps_a_file_of_its_own(home):
    """Two torch versions sharing a home folder do not erase each other's entries."""
    CacheFile("t", {"torch": "1"}).settle("k", 1)
    assert CacheFile("t", {"torch": "2"}).get("k") is None
    CacheFile("t", {"torch": "2"}).settle("k", 2)
    assert CacheFile("t", {"torch": "1"}).get("k") == 1


def test_a_file_that_cannot_be_read_starts_afresh_with_a_warning(home, caplog):
    cache = CacheFile("t", {})
    (home / "cache").mkdir()
    cache.path.write_text('{"format": "bendserver.cache", "entries": [')
    with caplog.at_level(logging.WARNING, "bendserver.cache"):
        assert cache.get("k") is None
        assert cache.settle("k", 1) == 1
    assert "cannot read" in caplog.text and "measuring again" in caplog.text
    assert CacheFile("t", {}).get("k") == 1, "rewritten whole"


def test_a_folder_that_cannot_be_written_keeps_the_entries_for_the_process(home, caplog):
    (home / "cache").write_text("a file where the folder would be")
    cache = CacheFile("t", {})
    with caplog.at_level(logging.WARNING, "bendserver.cache"):
        assert cache.settle("k", 1) == 1
        assert cache.settle("j", 2) == 2
    assert cache.get("k") == 1 and cache.get("j") == 2
    assert caplog.text.count("cannot write") == 1, "one warning"
