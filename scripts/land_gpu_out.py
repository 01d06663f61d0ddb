"""Land what the GPU suite brought back: check every file of a returned $OUT folder, then copy
the measurements into book/data/ as one unit, with SHA256SUMS updated, so that the chapters
that read them re-rate their verdicts the next time they run.

    python scripts/land_gpu_out.py OUT [--data DIR] [--replace] [--dry-run]

OUT: the folder the device tool returned for `bash scripts/gpu_suite.sh`. Every file in it is
checked before anything is copied:
  bench_<suite>_<gpu>.json  andrea_edu.bench.results.read_results_file, as GPU data (the file
                            name must match its device; a CPU file is refused)      -> landed
  pipeline_<gpu>.json       andrea_edu.pipeline.timing.load_pipeline_timing, as GPU -> landed
  gpucheck.json             andrea_lab.bench.gpucheck.read_report                  -> landed
  gpu_summary.md            must be a GPU run's, not a rehearsal's (nothing is landed from a
                            rehearsal: it measured nothing)                         -> kept out
  notebooks.tar.gz, logs.tar.gz  archives for the reader of the run                 -> kept out
Any other file, or any file that fails its check, stops the landing with one line naming it;
nothing is copied then. A file whose device is a CPU stand-in's (tests/test_gpu_suite.py runs
the suite's GPU path with scripts/gpu_fault_standin.py's `suite` stand-ins) is refused. DIR (default: the repository's book/data) gets the landed files and
their sha256 lines in DIR/SHA256SUMS (andrea_lab.store.write_files_as_unit: the files, then the
manifest last; cut short, the book refuses the files it does not vouch for); into the committed
folder (book/data) their pins too, written into
andrea_edu/data_pins.py (the book refuses a committed file without its pin). A file already
committed there with other bytes is replaced only with --replace (one with the same bytes,
left by a landing killed before its pins, is landed again unasked: the retry pins it). A
symbolic link in OUT is refused (OUT comes back as plain files). A run cut short lands as
partial: a bench file labelled "incomplete" inside, a gpucheck.json with complete=false, an
empty gpu_summary.md; each is said so in its line. After
landing: tests/test_data_mutations.py reads the landed files by their name patterns, and the
chapters (headline table, worklog, head_dim chapter, "How CUDA stores the heads", "Three
matrices", "The final picture") pick them up. Commit book/data/ and andrea_edu/data_pins.py.
Exit status 0 landed (or would land, --dry-run); 1 a file failed its check; 2 bad arguments.
"""
from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KEPT_OUT = ("gpu_summary.md", "notebooks.tar.gz", "logs.tar.gz")
BENCH = re.compile(r"bench_(headdim|projections|layout)_([a-z0-9-]+)\.json")
PIPELINE = re.compile(r"pipeline_([a-z0-9-]+)\.json")
# what the CPU stand-ins of the suite's GPU path (scripts/gpu_fault_standin.py suite ...) call
# their device: their files have the layout of a GPU run's, and measured nothing on one
STANDIN_WORDS = ("stand-in",)


def _not_standin(path: Path, device: str) -> str:
    if any(w in device.lower() for w in STANDIN_WORDS):
        raise ValueError(f"{path}: device {device!r} is a CPU stand-in's (a test of the suite's "
                         f"wiring), not a GPU's: nothing of it is landed")
    return device


@contextlib.contextmanager
def _apart(path: Path):
    """path copied alone into a temporary folder: read there, the checks of andrea_edu.data
    see no manifest (OUT's own SHA256SUMS lists only what its writers listed: land() checks
    those lines itself; in the landed folder, `in_place` checks the file's own line and pin)."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(path, Path(tmp) / path.name)
        yield Path(tmp) / path.name


def check_file(path: Path, in_place: bool = False) -> str:
    """One line saying what the file is, if it passes its check; ValueError (one line) if not.
    Each kind is read by its own reader on a copy apart from its folder (`_apart`); in_place
    (a file just landed): first the checks every reader of committed data makes where it lies
    (andrea_edu.data.manifest_problem: its SHA256SUMS line, its pin in book/data, a unit a
    killed writer left half done)."""
    name = path.name
    if in_place:
        from andrea_edu.data import manifest_problem
        problem = manifest_problem(path)
        if problem:
            raise ValueError(f"{path}: {problem}")
    if BENCH.fullmatch(name):
        from andrea_edu.bench.results import read_results_file
        if name.endswith("_cpu.json"):
            raise ValueError(f"{path}: CPU results do not come from the GPU suite")
        with _apart(path) as copy:
            obj = read_results_file(copy, expect_device="gpu")
        n = sum(r["status"] == "ok" for r in obj["records"])
        part = (f"; PARTIAL, labelled incomplete inside: {str(obj['incomplete'])[:120]}"
                if obj.get("incomplete") else "")
        return (f"{name}: {_not_standin(path, obj['provenance']['device'])}, {n} measured "
                f"records{part}")
    if PIPELINE.fullmatch(name):
        from andrea_edu.pipeline.timing import load_pipeline_timing
        if name == "pipeline_cpu.json":
            raise ValueError(f"{path}: CPU pipeline timings do not come from the GPU suite")
        with _apart(path) as copy:
            t = load_pipeline_timing("gpu", data_dir_=copy.parent)
        if t is None:
            raise ValueError(f"{path}: no pipeline timing in it")
        want = t.file_name()   # the name must say the device it holds (as for bench files)
        if name != want:
            raise ValueError(f"{path}: holds a timing of {t.device!r} (device_slug "
                             f"{t.provenance.get('device_slug')!r}), which belongs in {want}")
        return (f"{name}: {_not_standin(path, t.device)}, {len(t.steps)} steps, forward "
                f"{t.forward_ms:.3f} ms")
    if name == "gpucheck.json":
        from andrea_lab.bench.gpucheck import read_report
        with _apart(path) as copy:
            rep = read_report(copy)
        return (f"{name}: {_not_standin(path, rep['device']['name'])}, "
                f"{rep['n_cases'] - rep['n_failed']}/"
                f"{rep['n_cases']} cases passed, complete={rep['complete']}"
                + ("" if rep["complete"] else " (PARTIAL: the run was cut; landed as partial)"))
    if name == "gpu_summary.md":
        head = path.read_text(errors="replace").splitlines()[:1]
        if not head:   # a cut can leave no summary written yet: it lands nothing anyway
            return f"{name}: empty (the run was cut before its first summary); kept out"
        if not head[0].startswith("# GPU suite: "):
            raise ValueError(f"{path}: not a gpu_summary.md (no '# GPU suite:' title)")
        if "REHEARSAL" in head[0]:
            raise ValueError(f"{path}: this OUT is a CPU rehearsal's; it measured nothing "
                             f"and nothing of it is landed")
        return f"{name}: read it; kept out of book/data"
    if name in KEPT_OUT:
        return f"{name}: archive, kept out of book/data"
    raise ValueError(f"{path}: not a file the GPU suite writes (expected bench_<suite>_<gpu>"
                     f".json, pipeline_<gpu>.json, gpucheck.json, {', '.join(KEPT_OUT)})")


def land(out: Path, data: Path, replace: bool = False, dry_run: bool = False) -> list[str]:
    """Check every file of out, then copy the landed kinds into data with SHA256SUMS updated
    (the manifest last: a landing cut short is refused by the book until landed again). Returns
    the lines to print; ValueError (one line) on the first problem."""
    import hashlib

    from andrea_edu import data_pins
    from andrea_edu.data import MANIFEST, read_manifest
    from andrea_lab import pin_writer
    from andrea_lab.store import write_files_as_unit
    links = sorted(p.name for p in out.iterdir() if p.is_symlink())
    if links:   # the device tool returns plain files only: a link here points somewhere else
        raise ValueError(f"{out}: {', '.join(links)} is a symbolic link (a returned OUT holds "
                         f"plain files only; a link would land what lies outside it)")
    files = sorted(p for p in out.iterdir() if p.is_file() and not p.name.startswith(".")
                   and p.name != MANIFEST)
    if not files:
        raise ValueError(f"{out}: empty: nothing to land")
    lines, landed = [], []
    own = read_manifest(out)   # the suite's writers list what they wrote: checked, never landed
    for name, digest in own.items():
        f = out / name
        if not f.is_file() or hashlib.sha256(f.read_bytes()).hexdigest() != digest:
            raise ValueError(f"{out / MANIFEST}: {name} is missing or differs from its line "
                             f"(damaged on the way back?); nothing landed")
    if own:
        lines.append(f"{MANIFEST}: the suite's own list of {len(own)} file(s), each matches")
    for p in files:
        lines.append(check_file(p))
        if p.name not in KEPT_OUT:
            landed.append(p)
    if not landed:   # a run cut before its first measurement: nothing to land, no error
        return lines + [f"nothing landed: {out} holds no measurement (no bench, pipeline or "
                        f"gpucheck file: the run was cut before its first, or ran no GPU step)"]
    committed = read_manifest(data)
    # a file already listed with the same bytes is no clash: a landing killed between its data
    # write and its pins left it so, and the retry finishes it (pins and read-back) unasked
    clash = [p.name for p in landed if p.name in committed
             and committed[p.name] != hashlib.sha256(p.read_bytes()).hexdigest()]
    if clash and not replace:
        raise ValueError(f"{data}: {', '.join(clash)} already committed there (listed in "
                         f"SHA256SUMS); add --replace to land the new run over them")
    if dry_run:
        return lines + [f"would land {len(landed)} file(s) into {data} (--dry-run)"]

    def writer(src: Path):
        return lambda tmp: shutil.copyfile(src, tmp)
    write_files_as_unit([(data / p.name, writer(p)) for p in landed], manifest=True)
    pinned = data_pins.pinned(data)
    if pinned:   # the committed folder: its pins in code too (the review sees the diff)
        pin_writer.accept([data / p.name for p in landed])
    for p in landed:   # what landed is what was checked: read it back from its new place,
        check_file(data / p.name, in_place=True)   # its manifest line and pin checked there
    return lines + [f"landed {len(landed)} file(s) into {data}, SHA256SUMS updated"
                    + (f" and {data_pins.PIN_NAME} pins them (commit both)" if pinned else "")
                    + f": {', '.join(p.name for p in landed)}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python scripts/land_gpu_out.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="the folder the device tool returned (the suite's $OUT)")
    ap.add_argument("--data", default=None, help="where to land (default: the repository's "
                                                 "book/data)")
    ap.add_argument("--replace", action="store_true", help="replace files already committed")
    ap.add_argument("--dry-run", action="store_true", help="check everything, copy nothing")
    a = ap.parse_args(argv)
    out = Path(a.out)
    if not out.is_dir():
        print(f"land_gpu_out: OUT={a.out!r} is not a folder (give the folder the device tool "
              f"returned)", file=sys.stderr)
        return 2
    data = Path(a.data) if a.data else Path(__file__).resolve().parents[1] / "book" / "data"
    if not data.is_dir():
        print(f"land_gpu_out: --data {str(data)!r} is not a folder", file=sys.stderr)
        return 2
    try:
        lines = land(out, data, a.replace, a.dry_run)
    except (ValueError, OSError) as e:
        print(f"land_gpu_out: {str(e).splitlines()[0]} (nothing landed)", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
