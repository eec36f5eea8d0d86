"""cost/read_cache.py: a bundled file is read once per installation, the cached copy is what the
reader gives, and a changed file or reader is read again (the cache is never stale)."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from paraplan.cost import calibration, crossval, read_cache


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "paraplan"


def _counting_reader(calls: list):
    def read(path: Path):
        calls.append(path)
        return json.loads(path.read_text())
    return read


def test_read_once_then_from_the_copy(tmp_path, cache_home):
    src = tmp_path / "rows.json"
    src.write_text('[{"id": "a", "x": 1.5, "n": null}]')
    reader = types.ModuleType("reader")
    reader.__file__ = str(tmp_path / "reader.py")
    Path(reader.__file__).write_text("# v1\n")
    calls: list = []
    first = read_cache.cached(src, _counting_reader(calls), (reader,))
    again = read_cache.cached(src, _counting_reader(calls), (reader,))
    assert first == again == [{"id": "a", "x": 1.5, "n": None}] and len(calls) == 1
    assert len(list(cache_home.glob("rows-*.json"))) == 1
    # a changed file, or a changed reader, is read again: the digest names both
    src.write_text('[{"id": "a", "x": 2.5, "n": null}]')
    assert read_cache.cached(src, _counting_reader(calls), (reader,))[0]["x"] == 2.5 and len(calls) == 2
    Path(reader.__file__).write_text("# v2\n")
    read_cache.cached(src, _counting_reader(calls), (reader,))
    assert len(calls) == 3


def test_a_truncated_copy_or_an_unwritable_directory_reads_the_file(tmp_path, cache_home, monkeypatch):
    src = tmp_path / "rows.json"
    src.write_text('[1, 2, 3]')
    calls: list = []
    read_cache.cached(src, _counting_reader(calls), ())
    (copy,) = cache_home.glob("rows-*.json")
    copy.write_text('[1, 2')  # truncated
    assert read_cache.cached(src, _counting_reader(calls), ()) == [1, 2, 3] and len(calls) == 2
    monkeypatch.setenv("XDG_CACHE_HOME", str(src))  # a file, not a directory: nothing can be written
    assert read_cache.cached(src, _counting_reader(calls), ()) == [1, 2, 3] and len(calls) == 3


def test_data_json_does_not_give_back_is_not_cached(tmp_path, cache_home):
    src = tmp_path / "odd.yaml"
    src.write_text("x")
    assert read_cache.cached(src, lambda p: {1: (2, 3)}, ()) == {1: (2, 3)}  # int key, tuple
    assert not cache_home.exists() or not list(cache_home.glob("odd-*.json"))


def test_the_bundled_rows_and_stored_predictions_are_what_the_strict_loader_reads(cache_home):
    # read through a fresh cache (written), then from it: both equal the strict YAML reading
    for _ in range(2):
        for path in calibration.BUNDLED_FILES:
            assert calibration._checked_rows(path) == calibration.load_rows(str(path))
        assert crossval.load_stored() == tuple(
            crossval.StoredRow(**r) for r in calibration.read_yaml(crossval.CROSSVAL_FILE, calibration=True)["rows"])
    assert len(list(cache_home.glob("*.json"))) == 3


def test_no_home_reads_the_file_and_writes_nothing(tmp_path, monkeypatch):
    # without $XDG_CACHE_HOME and with a `~` that does not expand, a relative ~/.cache would be a
    # folder in the working directory: nothing is cached
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr("os.path.expanduser", lambda p: p)
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "rows.json"
    src.write_text("[1]")
    assert read_cache.cache_dir() is None
    assert read_cache.cached(src, lambda p: json.loads(p.read_text()), ()) == [1]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["rows.json"]
