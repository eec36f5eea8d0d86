"""The folders install under the paraplan namespace (pyproject.toml's package-dir): a user's own
cost.py / solver.py in the working directory must not shadow them, and nothing is installed as a
top-level `cost`, `solver`, `formulations` or `instances` module."""

import subprocess
import sys

SHADOWS = ("cost", "solver", "formulations", "instances")


def _run(tmp_path, code: str) -> subprocess.CompletedProcess:
    for name in SHADOWS:  # a user's scripts that happen to share the folders' names
        (tmp_path / f"{name}.py").write_text("raise ImportError('the user module was imported')\n")
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)


def test_user_modules_named_like_the_folders_do_not_shadow_paraplan(tmp_path):
    code = ("from paraplan.solver import api\n"
            "from paraplan import instances\n"
            "import pathlib\n"
            "inst = api.load_instance(str(pathlib.Path(instances.__file__).parent / 'tiny-gpt-8xA100.yaml'))\n"
            "print(inst.cluster.num_gpus)\n")
    done = _run(tmp_path, code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "8"


def test_the_folders_are_not_installed_as_top_level_modules(tmp_path):
    code = ("import importlib.util, sys\n"
            "sys.path = [p for p in sys.path if p not in ('', '.')]\n"
            f"print([n for n in {SHADOWS!r} if importlib.util.find_spec(n) is not None])\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_every_package_folder_is_installed():
    """Each folder with an __init__.py under the installed trees is in pyproject.toml's package
    list: a wheel lacks one left out (solver/bounds/ was missing, so `pip install .` without -e
    could not import the planner), while an editable install still finds it."""
    import tomllib
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(("paraplan",) + f.parent.relative_to(root).parts)
             for top in ("cost", "formulations", "solver", "instances") for f in (root / top).rglob("__init__.py")}
    assert found - listed == set()
