"""Static types: mypy (pinned in requirements.txt, configured in mypy.ini) over andrea_edu/, andrea_lab/,
tests/ and scripts/ finds no error, and it does find the class of bug that broke every GPU call
of `attention()` (issue 22): a name a module does not have, a wrong call arity, a misspelt
attribute of a class.

The whole-tree check uses the repository's .mypy_cache (git-ignored; mypy creates it on a fresh
clone). Measured on this project's 2-core machine: cold, about 50 s of CPU (100 to 380 s of wall
time as the machine's load varied) and 1.8 GB of memory; warm, about 1 s of CPU. The planted-error checks copy the
package to a temporary folder, plant one bug in the copy and check only the planted module
(the rest of andrea_edu is followed silently; torch, numpy and matplotlib are skipped as Any),
each first checked clean, so that the error mypy reports is the planted one.
"""
from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="mypy is in requirements.txt; this environment lacks it")

REPO = Path(__file__).resolve().parents[1]
CHECKED = ("andrea_edu", "andrea_lab", "tests", "scripts")
# Third-party packages the planted checks treat as Any (their types are not what is tested,
# and analysing torch alone takes a minute cold).
SKIPPED = ("torch", "numpy", "matplotlib")


def _mypy(*args: str, cwd: Path, timeout: int = 900) -> tuple[int, str]:
    """Run mypy in a subprocess (its memory, ~2 GB over torch, goes when it exits). Without
    PYTHONPATH: mypy treats modules under a PYTHONPATH folder as installed packages and does not
    report their errors (book/_ext's, with PYTHONPATH=the repository), so the answer would
    depend on the caller's environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    run = subprocess.run([sys.executable, "-m", "mypy", "--no-color-output", *args], cwd=cwd,
                         capture_output=True, text=True, timeout=timeout, env=env)
    return run.returncode, run.stdout + run.stderr


def _errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if ": error: " in line]


def test_the_whole_tree_type_checks_with_zero_errors():
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "mypy.ini")
    assert [f.strip() for f in cfg["mypy"]["files"].split(",")] == list(CHECKED)
    assert cfg["mypy"].getboolean("check_untyped_defs")  # unannotated bodies are checked too
    assert cfg["mypy"].getboolean("warn_unused_ignores")
    for section in cfg.sections():  # no project module is silenced
        if section.startswith("mypy-"):
            assert not section.removeprefix("mypy-").startswith(CHECKED), section
            assert not cfg[section].getboolean("ignore_errors", fallback=False), section
    rc, out = _mypy("--config-file", "mypy.ini", cwd=REPO)
    errors = _errors(out)
    assert rc == 0 and not errors, (f"mypy found {len(errors)} error(s) (mypy.ini; `mypy` in the "
                                    f"repository root shows them with notes):\n"
                                    + "\n".join(errors[:300]) + f"\n{out[-2000:]}")
    assert re.search(r"Success: no issues found in \d+ source files", out), out[-2000:]


# ---------------------------------------------------------------- planted errors
@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One mypy cache for the planted checks (the standard library's types are read once)."""
    return tmp_path_factory.mktemp("mypy_cache")


def _slice(tmp_path: Path, cache: Path, check_untyped_defs: bool = True) -> Path:
    """A copy of the package and a mypy.ini for checking one module of it quickly."""
    shutil.copytree(REPO / "andrea_edu", tmp_path / "andrea_edu",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "mypy.ini")  # the project's settings, with only what a slice needs changed
    cfg.remove_option("mypy", "files")  # the module to check is named on the command line
    cfg.remove_option("mypy", "mypy_path")
    cfg["mypy"]["follow_imports"] = "silent"  # andrea_edu's other modules: typed, not reported
    cfg["mypy"]["check_untyped_defs"] = str(check_untyped_defs)
    cfg["mypy"]["cache_dir"] = str(cache)
    for pkg in SKIPPED:
        cfg[f"mypy-{pkg}.*"] = {"follow_imports": "skip", "follow_imports_for_stubs": "True"}
    with open(tmp_path / "mypy.ini", "w") as fh:
        cfg.write(fh)
    return tmp_path


def _plant(root: Path, rel: str, old: str | None, new: str) -> int:
    """Replace `old` (exactly once) by `new` in root/rel, or append `new` when old is None;
    returns the 1-based line number where `new` starts."""
    path = root / rel
    text = path.read_text()
    if old is None:
        text = text.rstrip("\n") + "\n\n\n"
        at = len(text)
        text += new
    else:
        assert text.count(old) == 1, (f"{rel} no longer contains {old!r} exactly once: update "
                                      f"this planted-error test to the new code")
        at = text.index(old)
        text = text.replace(old, new)
    path.write_text(text)
    return text[:at].count("\n") + 1


def _check(root: Path, rel: str) -> list[str]:
    rc, out = _mypy("--config-file", str(root / "mypy.ini"), rel, cwd=root, timeout=600)
    assert rc in (0, 1), out  # 2: mypy itself failed (a crash, a bad option), not an error found
    return _errors(out)


# The bug of issue 22, as it was: attention()'s cuda-* branch called launch_attention on the
# module that compiles kernels (kernels.nvrtc), not on the one that launches them.
LAUNCH_OLD = ("from andrea_edu.kernels import launch\n", "launch.launch_attention(")
LAUNCH_NEW = ("from andrea_edu.kernels import nvrtc as cuda\n", "cuda.launch_attention(")
# Unannotated, as much of the library is: only check_untyped_defs makes mypy look inside.
ARITY = '''def _planted_wrong_arity(q, k, v):
    return reference_attention(q, k, v, False, "fp32")  # one argument too many
'''
ATTRIBUTE = '''def _planted_misspelt_attribute(q):
    decision = choose_backend(q.shape[-1], q.dtype, "cpu")
    return decision.reasons  # Decision has `reason`
'''


def test_the_slice_is_clean_before_planting(tmp_path, cache):
    """The control: the copied dispatch.py has no error, so what follows is the plant's."""
    root = _slice(tmp_path, cache)
    assert _check(root, "andrea_edu/dispatch.py") == []


def test_mypy_finds_the_launch_attention_bug_of_issue_22(tmp_path, cache):
    root = _slice(tmp_path, cache)
    _plant(root, "andrea_edu/dispatch.py", LAUNCH_OLD[0], LAUNCH_NEW[0])
    line = _plant(root, "andrea_edu/dispatch.py", LAUNCH_OLD[1], LAUNCH_NEW[1])
    errors = _check(root, "andrea_edu/dispatch.py")
    assert len(errors) == 1, errors
    assert re.search(rf"dispatch\.py:{line}: error: Module has no attribute \"launch_attention\""
                     r".*\[attr-defined\]", errors[0]), errors


def test_mypy_finds_a_wrong_call_arity_in_an_unannotated_function(tmp_path, cache):
    root = _slice(tmp_path, cache)
    line = _plant(root, "andrea_edu/dispatch.py", None, ARITY)
    errors = _check(root, "andrea_edu/dispatch.py")
    assert len(errors) == 1, errors
    assert re.search(rf"dispatch\.py:{line + 1}: error: Too many arguments for "
                     r"\"reference_attention\".*\[call-arg\]", errors[0]), errors


def test_mypy_finds_a_misspelt_class_attribute(tmp_path, cache):
    root = _slice(tmp_path, cache)
    line = _plant(root, "andrea_edu/dispatch.py", None, ATTRIBUTE)
    errors = _check(root, "andrea_edu/dispatch.py")
    assert len(errors) == 1, errors
    assert re.search(rf"dispatch\.py:{line + 2}: error: \"Decision\" has no attribute "
                     r"\"reasons\".*\[attr-defined\]", errors[0]), errors


def test_without_check_untyped_defs_the_unannotated_bug_would_pass(tmp_path, cache):
    """Why mypy.ini sets check_untyped_defs: without it the body above is never looked at."""
    root = _slice(tmp_path, cache, check_untyped_defs=False)
    _plant(root, "andrea_edu/dispatch.py", None, ARITY)
    assert _check(root, "andrea_edu/dispatch.py") == []
