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


def test_the_bundled_data_files_read_through_the_cache_are_what_the_strict_loader_reads(cache_home):
    # ran.yaml, moe.yaml and moe_crossval.yaml (read_cache.bundled_yaml): written to a fresh
    # cache, then read from it, both equal to parsing the file; each is cached (JSON gives it
    # back equal), so a later process reads the copy
    from paraplan.cost.readers.strict_yaml import read_yaml
    files = [calibration.RAN_FILE, calibration.PUBLISHED_DIR / "moe.yaml",
             calibration.PUBLISHED_DIR / "moe_crossval.yaml"]
    for _ in range(2):
        for path in files:
            assert read_cache.bundled_yaml(path) == read_yaml(path)
    assert sorted(p.name.rsplit("-", 1)[0] for p in cache_home.glob("*.json")) == ["moe", "moe_crossval", "ran"]


def test_the_catalogue_is_read_once_while_its_file_stays(tmp_path, monkeypatch):
    from paraplan.cost.errors import InstanceError
    from paraplan.cost.readers import gpus, strict_yaml
    src = tmp_path / "gpus.yaml"
    src.write_text(gpus.CATALOGUE_PATH.read_text(encoding="utf-8"), encoding="utf-8")
    reads: list = []
    real = strict_yaml.read_yaml
    monkeypatch.setattr(gpus, "read_yaml", lambda path, **kw: reads.append(path) or real(path, **kw))
    first = gpus.load_catalogue(src)
    first["mine"] = None  # a caller's own types (catalogue_with_gpu_types) stay its own
    second = gpus.load_catalogue(src)
    assert len(reads) == 1 and "mine" not in second
    assert second == gpus._gpu_types(real(src), str(src), "")
    # the file rewritten (another size, as its time may not move within a clock tick): read
    # again, its new value in force
    text = src.read_text(encoding="utf-8")
    line = "hbm_gib: 80               # NVIDIA H100"
    assert text.count(line) == 1
    src.write_text(text.replace(line, "hbm_gib: 79.5               # NVIDIA H100"), encoding="utf-8")
    changed = gpus.load_catalogue(src)
    assert len(reads) == 2
    assert (second["H100-SXM5-80GB"].hbm_bytes, changed["H100-SXM5-80GB"].hbm_bytes) == (80 * 2**30, 79.5 * 2**30)
    missing = tmp_path / "none.yaml"  # the reader's own error, naming the file
    with pytest.raises(InstanceError) as err:
        gpus.load_catalogue(missing)
    assert err.value.path == str(missing)


def test_a_plan_parses_each_yaml_file_at_most_once_and_none_of_the_cached_ones(tmp_path):
    # issue 33: in one `paraplan plan` process every YAML file is parsed at most once (the
    # catalogue, ran.yaml and the trust band's rows were parsed 2-4 times each), and only the
    # instance and the catalogue are parsed at all: the trust band's rows, ran.yaml and
    # crossval.yaml were parsed once and then read from the cache, and are now not read by a
    # dense plan at all (cost/published/trust_table.json holds what it reads of them)
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[2]
    code = ("import collections, contextlib, io, sys\n"
            "from paraplan.cost.readers import strict_yaml\n"
            "real, seen = strict_yaml.read_yaml, collections.Counter()\n"
            "strict_yaml.read_yaml = lambda path, **kw: seen.update([str(path).rsplit('/', 1)[-1]]) or real(path, **kw)\n"
            "from paraplan.solver.commands.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    main(['plan', {str(root / 'instances' / 'tiny-gpt-8xA100.yaml')!r}, '--quiet'])\n"
            "print(sorted(seen.items()))\n")
    env = {"XDG_CACHE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    runs = [subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                           timeout=120, env=env) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr[-2000:]
    first, second = (eval(r.stdout.strip().splitlines()[-1]) for r in runs)
    assert first == second == [("gpus.yaml", 1), ("tiny-gpt-8xA100.yaml", 1)], (first, second)
