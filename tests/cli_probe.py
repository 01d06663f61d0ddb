"""Every command line of andrea_edu (python -m ...) and scripts/, given bad arguments: unknown
flags, bad values, unwritable or committed --out, flags that would be ignored. Each must refuse
in one line ("prog: error: ..." or the command's own one-line usage) with exit status 2, within
LIMIT_S seconds and before any long work: never a traceback, never a run that starts anyway.

Invocations run in this process (each command's main(argv)), in a scratch working directory,
with an interval timer that stops any that runs past LIMIT_S ("long": work started instead of a
refusal). tests/test_cli_probe.py runs the table; `python tests/cli_probe.py` counts."""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "book" / "data"
NB = str(REPO / "book" / "three_matrices.ipynb")
LIMIT_S = 15.0  # a backstop: reaching a command's long work (WORK) is caught at once
NOWHERE = "/proc/andrea-no-such-dir/x"  # a folder no process can create
EVIL = "evil\n" + "0" * 64 + "  x_run.json"  # a name that would forge a manifest line (issue 42)


def damaged_notebooks() -> list[str]:
    """Notebooks the notebook commands must refuse in one line: cut short, valid JSON that is
    no notebook, a cell that is no cell (written once, into the system's temporary folder)."""
    import tempfile
    out = []
    for name, text in (("cut", '{"cells": [{"cell_type": "code", "sou'),
                       ("notnb", '{"cells": 3}'), ("list", "[1, 2]"),
                       ("badcell", '{"cells": [{"cell_type": 7}], "metadata": {}, '
                                   '"nbformat": 4, "nbformat_minor": 5}')):
        p = Path(tempfile.gettempdir()) / f"andrea-cli-probe-{name}.ipynb"
        if not p.is_file() or p.read_text() != text:
            p.write_text(text)
        out.append(str(p))
    return out


def table() -> list[tuple[str, list[str]]]:
    """[(entry point, argv)]: "m:<module>" for python -m, "s:<script>" for scripts/<script>.py."""
    B = "m:andrea_lab.bench.cli"
    SW, TT = "m:andrea_lab.make_sweep", "m:andrea_lab.make_realtext_run"
    TL, PR = "m:andrea_lab.make_realtext_variant", "m:andrea_lab.make_realtext_paths"
    TM, PT = "m:andrea_lab.make_sass_model", "m:andrea_lab.pipeline_timing"
    G2 = "m:andrea_lab.gpt2_small"
    EX, XS = "m:andrea_lab.execute_chapters", "m:andrea_lab.chapter_exercises"
    rows = [(B, []), (B, ["--bogus"]), (B, ["nosuch"]), (B, ["layout", "--bogus"])]
    rows += [(B, ["layout", *a]) for a in (
        ["--repeats", "0"], ["--repeats", "x"], ["--repeats", "100000000"], ["--warmup", "-1"],
        ["--warmup", "1000000000"], ["--budget-s", "nan"], ["--budget-s", "0"], ["--threads", "0"], ["--threads", "100000"],
        ["--out", NOWHERE], ["--out", "/dev/null/x"], ["--out", ""], ["--device", "gpu"],
        ["--device", "cuda"], ["--out", str(DATA)])]
    rows += [(B, ["gpu-check", "--bogus"]), (B, ["gpu-suite"])]
    rows += [(SW, a) for a in (["--bogus"], ["--workers", "0"], ["--workers", "999"],
                               ["--n-heads", "0"], ["--seeds", "x"], ["--out", NOWHERE + ".json"],
                               ["--out", ""], ["--out", str(DATA / "specialization_sweep.json")],
                               ["--n-heads", "3"], ["--seeds", str(2**64)], ["--seeds", "-1"],
                               ["--out", "x.txt"], ["--out", EVIL], ["--out", "a\x1b[2J.json"])]
    rows += [(TT, a) for a in (
        ["--bogus"], ["--steps", "0"], ["--out", NOWHERE + ".json"], ["--toy-out", NOWHERE + ".json"],
        ["--toy-out", "toy.json", "--steps", "5"], ["--toy-out", "toy.json", "--settings", "{}"],
        ["--out", "a.json", "--out", "b.json"], ["--recheck", "0"],
        ["--compare", "nope1.json", "nope2.json"], ["--settings", "{bad"],
        ["--out", "a.json", "--toy-out", "a.json"], ["--toy-out", ""],
        ["--settings", '{"seq_len": 1e9}'], ["--settings", '{"seq_len": 1000000000}'],
        ["--settings", '{"batch_size": 1000000000}'], ["--settings", '{"steps": 1e300}'],
        ["--steps", "1e12"], ["--steps", str(10**12)], ["--settings", "[" * 5000], ["--settings", '{"seq_len": ' + "[" * 3000],
        ["--out", EVIL], ["--toy-out", "x\u2028.json"], ["--out", "a\x00b.json"])]
    rows += [(TL, a) for a in (
        ["--bogus"], [], ["--variant", "x", "--out", "a.json"], ["--out", "a.txt"],
        ["--out", NOWHERE + ".json"], ["--steps", "0", "--out", "a.json"],
        ["--steps", "x", "--out", "a.json"], ["--out", str(DATA / "realtext_long_run.json")],
        ["--out", EVIL], ["--steps", str(10**12), "--out", "a.json"])]
    rows += [(PR, a) for a in (["--bogus"], [], ["--out", NOWHERE + ".json"],
                               ["--out", str(DATA / "realtext_paths.json")], ["--out", "a.txt"],
                               ["--out", EVIL + ".json"])]
    rows += [(TM, a) for a in (["--bogus"], [], ["--out", NOWHERE], ["--out", "/dev/null/x"])]
    rows += [(G2, a) for a in (["--bogus"], [], ["--out", "a.txt"], ["--out", ""],
                               ["--out", NOWHERE + ".json"], ["--out", str(DATA / "realtext_paths.json")],
                               ["--out", "g.json", "--weights", NOWHERE + ".safetensors"])]
    rows += [(PT, a) for a in (
        ["--bogus"], ["-B", "0"], ["-T", "0"], ["-T", "99999"], ["--repeats", "0"],
        ["--dtype", "int8"], ["--config", "X"], ["--device", "cuda"], ["--backend", "cuda-naive"],
        ["--out", NOWHERE], ["-B", "1000000", "-T", "1024"], ["--repeats", "x"],
        ["--config", "ANDREA-12M", "-T", "8", "--repeats", "1", "--out", str(DATA)])]
    rows += [(EX, a) for a in (
        ["--bogus", NB], [], ["nope.ipynb"], ["--timeout", "0", NB], ["--timeout", "nan", NB],
        ["--out", str(REPO / "book"), NB], ["--out", NOWHERE, NB], ["--kernel", "", NB],
        ["--kernel", "no-such-kernel", NB], *([d] for d in damaged_notebooks()))]
    rows += [(XS, a) for a in ([], [NB, "x"], ["nope.ipynb", "1"], [NB, "999"], [NB, "0"],
                               *([d, "1"] for d in damaged_notebooks()))]
    rows += [("s:format_share", ["--bogus"]), ("s:repo_url", ["--bogus"]),
             ("s:image_env", ["--bogus"]), ("s:image_env", ["site"]),
             ("s:image_env", ["check-wheels"]), ("s:install_book", ["--bogus"]),
             ("s:install_book", []), ("s:live_bench", ["--bogus"]),
             ("s:live_bench", ["--pause", "nan"]), ("s:live_bench", ["nosuch_chapter"]),
             ("s:readme_figure", ["--bogus"]), ("s:readme_figure", ["--dpi", "0"]),
             ("s:readme_figure", ["--out", NOWHERE + ".png"]), ("s:pin_data", ["--bogus"]),
             ("s:pin_data", ["--accept"]), ("s:pin_data", ["--accept", NOWHERE + ".json"])]
    return rows


class _TooLong(BaseException):
    pass


# the long work of each command: reaching one of these is work started instead of a refusal
WORK = [("andrea_edu.heads.sweep", "run_sweep"), ("andrea_lab.make_sweep", "make_runs"),
        ("andrea_edu.heads.text_training", "train"),
        ("andrea_lab.make_realtext_run", "measure_spread"), ("andrea_edu.heads.training", "train"),
        ("andrea_lab.path_ablation", "measure"), ("andrea_lab.make_sass_model", "report"),
        ("andrea_lab.gpt2_small", "load_gpt2_small"), ("andrea_lab.gpt2_small", "measure"),
        ("andrea_edu.pipeline.timing", "time_steps"), ("andrea_edu.bench.suites", "run_suite"),
        ("andrea_lab.execute_chapters", "execute_notebook"),
        ("andrea_lab.chapter_exercises", "run_exercise")]


def _started(*a, **k):
    raise _TooLong("reached its long work")


@contextlib.contextmanager
def _no_long_work():
    # every function looked up before any is replaced: a name that is gone fails here, leaving
    # nothing patched behind for the tests that run next in this process
    saved = [(m, attr, getattr(m, attr)) for m, attr in
             ((importlib.import_module(mod), attr) for mod, attr in WORK)]
    try:
        for m, attr, _ in saved:
            setattr(m, attr, _started)
        yield
    finally:
        for m, attr, fn in saved:
            setattr(m, attr, fn)


def _main_of(entry: str):
    kind, name = entry.split(":", 1)
    if kind == "m":
        return importlib.import_module(name).main
    spec = importlib.util.spec_from_file_location(f"_probe_{name}", REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # a dataclass in the script looks its module up there
    spec.loader.exec_module(mod)
    return mod.main


def invoke(entry: str, argv: list[str]) -> tuple[str, int | None, str, float]:
    """(outcome, exit status, stderr, seconds); outcome one of clean, traceback, long, silent,
    status (refused, but not with exit status 2 in one line)."""
    main = _main_of(entry)
    for mod, _ in WORK:  # imported before the timer: their imports are not the command's work
        importlib.import_module(mod)
    import nbformat  # noqa: F401
    err, out = io.StringIO(), io.StringIO()

    def stop(signum, frame):
        raise _TooLong("ran past LIMIT_S")
    old = signal.signal(signal.SIGALRM, stop)
    argv_before = sys.argv
    sys.argv = [entry, *argv]
    t0 = time.perf_counter()
    rc: int | None = None
    outcome = ""
    try:
        signal.setitimer(signal.ITIMER_REAL, LIMIT_S)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out), _no_long_work():
            try:
                r = main(argv)
                rc = 0 if r is None else int(r)
            except SystemExit as e:
                if isinstance(e.code, str):
                    print(e.code, file=sys.stderr)
                    rc = 1
                else:
                    rc = 0 if e.code is None else int(e.code)
    except _TooLong as e:
        outcome = "long"
        err.write(f"long: {e}")
    except Exception as e:  # noqa: BLE001  (what the probe is for)
        outcome = "traceback"
        err.write(f"Traceback: {type(e).__name__}: {e}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        sys.argv = argv_before
        with contextlib.suppress(Exception):
            import matplotlib.pyplot as plt
            plt.close("all")
    secs = time.perf_counter() - t0
    text = err.getvalue()
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if not outcome:
        if "Traceback" in text:
            outcome = "traceback"
        elif rc == 0:
            outcome = "silent"
        elif rc == 2 and lines and ("error" in lines[-1] or "usage" in lines[-1]) and (
                len(lines) == 1 or lines[0].startswith("usage:")):
            outcome = "clean"  # argparse's usage line(s) + "prog: error: ...", or one line
        else:
            outcome = "status"
    return outcome, rc, text, secs


def main() -> int:
    import tempfile
    os.environ["_ANDREA_PINNED"] = "1"  # the commands that re-exec themselves pinned do not
    os.environ["_ANDREA_NATIVE"] = "1"
    os.environ.setdefault("ANDREA_FAST", "1")
    import matplotlib
    matplotlib.use("Agg")
    import nbformat  # noqa: F401  (imported before the timer: a loaded machine takes seconds)
    tally: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["ANDREA_OUT_DIR"] = tmp
        here = os.getcwd()
        os.chdir(tmp)
        try:
            for entry, argv in table():
                outcome, rc, text, secs = invoke(entry, argv)
                tally[outcome] += 1
                if outcome != "clean":
                    last = (text.strip().splitlines() or [""])[-1][:140]
                    print(f"{outcome:9s} {entry} {' '.join(argv)[:100]!r} (rc {rc}, {secs:.1f} s): "
                          f"{last}")
        finally:
            os.chdir(here)
    print(f"CLI invocations: {sum(tally.values())}: {dict(tally)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
