"""Committed data, read: the one module through which the book reads `book/data/`.

A chapter reads a committed measurement with `load(kind)` (which calls the kind's own loader,
named in `LOADERS`); what made the file lives in the laboratory package `andrea_lab`, which the
book never imports. Here:

    where          data_search_dirs, data_folder / find_data (the one finder), where_looked
    the manifest   read_manifest (strict), manifest_problem (a file the book may read matches
                   its pin in the committed folder, andrea_edu/data_pins.py's table, and its
                   sha256 in SHA256SUMS), listed_but_missing, restore_hint; unsafe_to_parse
                   (size, tables, nesting: before a loader parses a file)
    one error      DataFileError: every loader raises it, one line naming the file and field
    one schema     PROVENANCE_KEYS and `provenance(record)`: a record's provenance block under
                   today's key names (older files' keys mapped at read time, never rewritten);
                   `new_provenance(what, produced_by, **own)`, the one builder of a run's block,
                   makes one under those names (a dict: the laboratory stamps its commit and
                   code hash on and writes it)
    one table      LOADERS: kind -> Kind(file, loader module, loader function); `load(kind)`,
                   the one entry a chapter reads committed data through

Committed data is guarded by git plus one manifest per folder (SHA256SUMS) and, for book/data,
its pins in code:
  * a writer (andrea_lab.store only) writes each file of a unit to a temporary file in the same
    folder, fsyncs it and os.replace()s it into place, then rewrites SHA256SUMS LAST (temporary
    file + os.replace too): the manifest's rename is the unit's commit point;
  * a reader (`load`, `find_data`, `manifest_problem`) refuses, in one line naming the file, its
    folder and the remedy (`git checkout -- <folder>`, or re-running the writer), a file whose
    sha256 is not the manifest's, a listed file that is gone, and an unlisted file it is asked for;
    in the committed folder the same against the pins (a manifest regenerated over damage does
    not vouch for it). What exactly went wrong beyond that one line (a CRLF conversion, the
    whole folder at once) is the laboratory's: `python scripts/pin_data.py`.
So a unit cut short between its renames (kill -9, a full disk) is refused, never read half new:
fail closed, with no journal to replay; git holds the old versions, so there are no backups.
A writer's stray temporary file (hidden, named `.<name>.andrea-<pid>-<hex>.tmp`) is never read
and the next write into that folder removes it. Nothing here writes.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import re
from pathlib import Path
from typing import NamedTuple

# ---------------------------------------------------------------- committed data: where it is
DATA_ENV = "ANDREA_DATA_DIR"


def data_search_dirs() -> list[Path]:
    """Where committed measurements are looked for, in order:
    1. $ANDREA_DATA_DIR, when set, and then nowhere else (a reader or a test points the book at
       other data, or at an empty folder, and gets exactly that);
    2. book/data beside the installed package's repository (the clone an install cell made:
       an editable install, or the clone put on sys.path), found from this file's location;
    3. relative to the working directory, i.e. to the notebook: data/ (a chapter runs in book/),
       book/data (the repository root), ../book/data.
    """
    return [d for d, _ in _search_dirs()]


def _search_dirs() -> list[tuple[Path, str]]:
    """data_search_dirs with, for each, how a reader names it (never an absolute folder of the
    machine that ran it, except the one the reader set in ANDREA_DATA_DIR)."""
    if os.environ.get(DATA_ENV, "").strip():
        given = os.environ[DATA_ENV].strip()
        return [(Path(given).expanduser(), str(Path(given) / "{name}") + f" (from {DATA_ENV})")]
    cwd = Path.cwd()
    dirs = [(Path(__file__).resolve().parents[1] / "book" / "data",
             "book/data/{name} in the repository andrea_edu was installed from"),
            (cwd / "data", "data/{name} in the working directory"),
            (cwd / "book" / "data", "book/data/{name} in the working directory"),
            (cwd.parent / "book" / "data", "../book/data/{name} from the working directory")]
    out, seen = [], set()
    for d, label in dirs:  # the same folder reached twice is looked in once
        key = os.path.normcase(os.path.realpath(d))
        if key not in seen:
            seen.add(key)
            out.append((d, label))
    return out


def data_folder(pattern: str) -> Path | None:
    """The one search of committed data: the first folder of `data_search_dirs()` holding a
    file that matches `pattern` (a file name, or a glob such as "bench_layout_*.json"), or
    whose SHA256SUMS or pins list such a file that is gone (committed data that was deleted is
    damage, not "no data": the caller raises `listed_but_missing`); None when no folder does."""
    for d in data_search_dirs():
        with contextlib.suppress(OSError):
            if any(p.is_file() for p in d.glob(pattern)):
                return d
        if listed_but_missing(d, pattern):
            return d
    return None


def find_data(name: str, verify: bool = True) -> Path | None:
    """The committed file `name` in `data_folder(name)`, or None when no folder has it (see
    `where_looked`). DataFileError (one line) when its folder lists it but it is gone and, with
    `verify`, when its folder's SHA256SUMS refuses it (a loader that checks the file itself,
    with `unsafe_to_parse` or `manifest_problem`, passes verify=False)."""
    folder = data_folder(name)
    if folder is None:
        return None
    path = folder / name
    if not path.is_file():
        raise DataFileError(listed_but_missing(folder, name) or where_looked(name))
    if verify:
        problem = manifest_problem(path)
        if problem:
            raise DataFileError(f"{reader_path(path)}: {problem}")
    return path


def listed_but_missing(folder, pattern: str) -> str | None:
    """One line when a table of `folder` (`_tables`: the pins of the committed folder, then its
    SHA256SUMS where there is one) lists a file matching `pattern` (fnmatch) that is not there,
    or the manifest cannot be read; None otherwise."""
    import fnmatch
    folder = Path(folder)
    try:
        for listed, _, _, sums, remedy in _tables(folder, manifest_required=False):
            gone = sorted(n for n in sums if fnmatch.fnmatchcase(n, pattern)
                          and not (folder / n).is_file())
            if gone:
                return (f"{folder / gone[0]}: {listed} but missing (committed data deleted): "
                        f"{remedy(folder / gone[0])}")
    except DataFileError as e:
        return str(e)
    return None


def reader_path(path) -> str:
    """A path as a reader of the book names it: relative to the repository root when inside it,
    else to the home folder (~/...), else as given (a folder the reader chose). Pages never show
    the absolute folders of the machine that built them."""
    p = Path(os.path.abspath(os.path.expanduser(str(path))))
    for base, prefix in ((Path(__file__).resolve().parents[1], ""), (Path.home(), "~/")):
        try:
            return prefix + p.relative_to(base).as_posix()
        except ValueError:
            continue
    return str(path)


def where_looked(name: str) -> str:
    """One line for a reader: every place `find_data(name)` tried, in order, named by its
    rule rather than by the absolute folders of the machine that ran it."""
    return (f"no committed {name} found; looked in: "
            + "; ".join(label.replace("{name}", name) for _, label in _search_dirs())
            + f" (set {DATA_ENV} to the folder that holds it)")


class DataFileError(ValueError):
    """A data file that cannot be trusted. str() is one line: the file, the field, what was
    expected and what was found. The one error of every loader of committed data (bench
    results, the sweep, the real-text runs and path ablations, the pipeline timing, the
    chapter run's check, a gpucheck report), so a chapter catches this one."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))  # one line, whatever it quotes


def first_nonfinite(obj, where: str = "", skip=None) -> str | None:
    """The path (e.g. "runs[3].scores[0][1]") of the first NaN or infinity in a parsed JSON
    tree, or None; skip(path) -> True leaves a subtree out (a field where NaN means "none")."""
    import math
    if skip is not None and skip(where):
        return None
    if isinstance(obj, float):
        return None if math.isfinite(obj) else (where or "$")
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        got = first_nonfinite(v, f"{where}.{k}" if isinstance(k, str) else f"{where}[{k}]", skip)
        if got:
            return got.lstrip(".")
    return None


def holds_text(obj) -> bool:
    """True when a parsed JSON value holds a string anywhere (numpy would read "0.34" as a
    number: a number stored as text is damage, not data)."""
    if isinstance(obj, str):
        return True
    if isinstance(obj, dict):
        return any(holds_text(v) for v in obj.values())
    if isinstance(obj, list):
        return any(holds_text(v) for v in obj)
    return False


# ---------------------------------------------------------------- the manifest and the pins, read
CRLF_CAUSE = ("git converted the data's line endings (core.autocrlf=true) and every sha256 "
              "changed with them")
CRLF_REMEDY = ("restore the bytes with `git -c core.autocrlf=false checkout -- book/data` "
               "(the repository's .gitattributes keeps book/data byte-exact in new clones)")
MANIFEST = "SHA256SUMS"  # beside committed data: "<sha256>  <name>" per line (sha256sum -c reads it)
_LINE = re.compile(r"([0-9a-f]{64}) [ *](.*)", re.DOTALL)  # sha256sum's text or binary form
NAME_MAX_BYTES = 255  # a file name's longest on the common file systems (ext4, APFS, NTFS)


def name_problem(name) -> str | None:
    """None when `name` is a plain file name of its own folder, else why not, in a phrase. The
    one rule for every name a manifest lists and every file a command writes: nothing a name
    says reaches outside its folder or into another line."""
    import unicodedata
    if not isinstance(name, str):
        return f"is not a string ({type(name).__name__})"
    bad = next((c for c in name if unicodedata.category(c) in ("Cc", "Zl", "Zp")), None)
    if not name:
        return "is empty"
    if bad is not None:
        return f"holds the control character {bad!r}"
    if "/" in name or "\\" in name or (len(name) > 1 and name[1] == ":"):
        return "names a folder (a separator or a drive), not a plain file name"
    if name in (".", ".."):
        return f"is {name!r}, a folder"
    if name != name.strip():
        return "begins or ends with a space"
    if len(name.encode("utf-8", "surrogatepass")) > NAME_MAX_BYTES:
        return f"is longer than {NAME_MAX_BYTES} bytes"
    return None


# The largest data file a loader reads, by suffix (the committed files are < 3 MB): anything
# larger is refused from its size alone, before a byte of it is read.
MAX_DATA_BYTES = {".json": 64 * 2**20, ".pt": 1024 * 2**20}
JSON_MAX_DEPTH = 64  # the committed files nest at most 6 deep; json/numpy recurse per level


def size_problem(path) -> str | None:
    """One line when `path` is larger than a data file of its suffix may be, from its size on
    disk alone; else None (also when it is not there: the caller says that)."""
    try:
        size = Path(path).stat().st_size
    except OSError:
        return None
    cap = MAX_DATA_BYTES.get(Path(path).suffix, 64 * 2**20)
    if size > cap:
        return (f"{size / 2**20:.0f} MiB, above the {cap // 2**20} MiB a data file may hold; "
                f"refused before reading it (damaged, or not this book's data)")
    return None


def json_depth_problem(raw: bytes, limit: int = JSON_MAX_DEPTH) -> str | None:
    """One line when the JSON text `raw` nests deeper than `limit` (a recursive parser would
    overflow on a planted '[[[[...'), else None. Counts brackets outside strings, unparsed."""
    import numpy as np
    bare = re.sub(rb'"(?:[^"\\]|\\.)*"', b"", raw)  # strings hold no structure
    steps = np.frombuffer(bare.translate(None, bytes(c for c in range(256) if c not in b"[]{}")),
                          dtype=np.uint8)
    depth = np.cumsum(np.where((steps == ord("[")) | (steps == ord("{")), 1, -1))
    deepest = int(depth.max()) if steps.size else 0
    if deepest > limit:
        return (f"nests {deepest} levels deep, more than the {limit} a data file may; refused "
                f"before parsing it (damaged, or not this book's data)")
    return None


def read_manifest(folder, required: bool = False) -> dict[str, str]:
    """{file name: sha256} of folder/SHA256SUMS, parsed strictly: every line '<64 lowercase hex
    digits>  <plain file name>' ended by a newline (a manifest cut short is damage, not a
    shorter list), no name twice. DataFileError naming the manifest and the line otherwise. No
    manifest: {} (DataFileError when `required`)."""
    path = Path(folder) / MANIFEST
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        if required:
            raise DataFileError(f"{path}: missing; committed data is checked against it: "
                                f"{restore_hint(folder)}") from None
        return {}
    except (OSError, UnicodeDecodeError) as e:
        raise DataFileError(f"{path}: cannot be read as UTF-8 text ({e}); damaged") from None
    if "\r\n" in text:
        raise DataFileError(f"{path}: has Windows line endings (CRLF): {CRLF_CAUSE}; {CRLF_REMEDY}")
    *lines, last = text.split("\n")
    if last:
        raise DataFileError(f"{path}: line {len(lines) + 1} is cut short (no newline at its "
                            f"end): the manifest is truncated or damaged")
    out: dict[str, str] = {}
    for i, line in enumerate(lines, 1):
        m = _LINE.fullmatch(line)
        if m is None:
            raise DataFileError(f"{path}: line {i} is not '<64 lowercase hex digits>  <file "
                                f"name>': {line[:80]!r}")
        sha, name = m.groups()
        why = name_problem(name)
        if why:
            raise DataFileError(f"{path}: line {i} names {name[:80]!r}, which {why}: a manifest "
                                f"lists only plain file names of its own folder")
        if name in out:
            raise DataFileError(f"{path}: line {i} lists {name} a second time")
        out[name] = sha
    return out


def is_data_folder(folder) -> bool:
    """True when `folder` holds committed data: it has a SHA256SUMS, or the book reads data from
    it (`data_search_dirs`). There the manifest is required and every file must be listed."""
    if (Path(folder) / MANIFEST).exists():
        return True
    key = os.path.normcase(os.path.realpath(folder))
    return any(os.path.normcase(os.path.realpath(d)) == key for d in data_search_dirs())


def restore_hint(folder) -> str:
    """The remedy for a refused file of `folder`: git's version back, or the writer re-run."""
    return (f"restore it with `git checkout -- {reader_path(folder)}`, or re-run the command "
            f"that writes it (it rewrites {MANIFEST} last)")


def _tables(folder: Path, manifest_required: bool = True):
    """For each table a file of `folder` must match, in order: (how a file it lists is named,
    how one it lacks is named, its entry, {name: sha256}, the remedy for a path). First the pins
    of the committed folder (andrea_edu/data_pins.py: a manifest regenerated over damage cannot
    change them), then the folder's SHA256SUMS where it holds committed data (with
    manifest_required false: where it exists). DataFileError when the manifest is damaged."""
    from andrea_edu import data_pins  # the table; standard library only
    if data_pins.pinned(folder):
        pins = data_pins.PIN_NAME
        yield (f"pinned in {pins}", f"has no pin in {pins}", f"its pin in {pins}", data_pins.PINS,
               lambda p: f"restore it with `git checkout -- {reader_path(p)}`, or accept new data "
                         f"deliberately with `python scripts/pin_data.py --accept "
                         f"{reader_path(p)}` and commit that code change with the data")
    if (folder / MANIFEST).exists() if not manifest_required else is_data_folder(folder):
        m = folder / MANIFEST
        yield (f"listed in {m}", f"not listed in {m}",
               f"the sha256 recorded for it in {reader_path(m)}", read_manifest(folder, True),
               lambda p: restore_hint(p.parent))


def sha256_file(path) -> str:
    """The sha256 of a file, read in 1 MiB blocks (never whole in memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(2**20), b""):
            h.update(block)
    return h.hexdigest()


def manifest_problem(path) -> str | None:
    """None when `path` may be read: it matches every table of its folder (`_tables`: its pin in
    the committed folder, its line in a data folder's SHA256SUMS; a scratch folder has neither).
    Otherwise one line with the remedy: too large to read, a table that lacks it or lists it
    though it is gone, content that differs (damage, an edit by hand, or a unit write cut short
    before its manifest: fail closed), or a manifest that cannot be trusted."""
    path = Path(path)
    too_big = size_problem(path)  # before a byte of it is read (hashed or parsed)
    if too_big:
        return too_big
    got = None
    try:
        for listed, unlisted, entry, sums, remedy in _tables(path.parent):
            want = sums.get(path.name)
            if want is None:
                return (f"{unlisted}; a data file it lacks is refused (a write cut short, or a "
                        f"file put there by hand): {remedy(path)}, or remove the file")
            if not path.is_file():
                return f"{listed} but missing (committed data deleted): {remedy(path)}"
            got = got or sha256_file(path)
            if got != want:
                return (f"content differs from {entry} (damaged, edited by hand, or a write cut "
                        f"short before its {MANIFEST}): {remedy(path)}")
    except DataFileError as e:
        return f"its folder's manifest cannot be trusted ({e})"
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    return None


# ---------------------------------------------------------------- one provenance schema, read
# Today's key -> the older keys committed files carry for it (mapped when read; files stay as
# they were committed: their sha256 is in SHA256SUMS).
PROVENANCE_KEYS = {"date_utc": ("date",), "cpu_numerics": ("cpu_provenance",),
                   "produced_by": ("command",)}


def provenance(record: dict) -> dict:
    """A record's provenance block under today's key names: an older key (`PROVENANCE_KEYS`)
    is read as its new name when the new one is absent; every other key as it is."""
    p = record.get("provenance", record) if isinstance(record, dict) else None
    if not isinstance(p, dict):
        raise DataFileError(f"provenance must be an object, got {type(p).__name__}")
    out = dict(p)
    for new, olds in PROVENANCE_KEYS.items():
        for old in olds:
            if new not in out and old in out:
                out[new] = out.pop(old)
    return out


WRITER_KEYS = ("git_commit", "code_hash")  # added by the writer alone: andrea_lab.store.stamped


def new_provenance(what: str, produced_by: str, **own) -> dict:
    """The provenance block of a run made now, under today's keys (`PROVENANCE_KEYS`): what it
    is, the command that made it, the UTC date, the CPU's numerics (`env.cpu_provenance`), the
    versions (python, torch, numpy, andrea_edu) and the platform; then the run's own keys
    (`own`: its device, settings, corpus, wall time...), which may not rename a shared one nor
    set a writer's (`WRITER_KEYS`: the laboratory stamps them on when it writes the record).
    The one builder of every run's block, a chapter's live run's too; `provenance(record)`
    reads it."""
    import datetime
    import platform

    import numpy as np
    import torch

    from andrea_edu.env import __version__, cpu_provenance
    shared = {"what": what, "produced_by": produced_by,
              "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "cpu_numerics": cpu_provenance(), "python": platform.python_version(),
              "torch": torch.__version__, "numpy": np.__version__, "andrea_edu": __version__,
              "platform": platform.platform()}
    clash = sorted(k for k in own if k in shared or k in WRITER_KEYS
                   or any(k in olds for olds in PROVENANCE_KEYS.values()))
    if clash:
        raise ValueError(f"own={clash}: shared provenance keys, their older names or a "
                         f"writer's; the builder sets {', '.join(shared)} itself")
    return {**shared, **own}


# ---------------------------------------------------------------- one table: kind -> loader
class Kind(NamedTuple):
    """One kind of committed data: its file (a glob where the loader picks among files by
    device), the loader that validates it (module and function, named, not imported: see
    below), and the leading arguments the loader takes for this kind."""
    file: str
    module: str
    function: str
    args: tuple = ()

    @property
    def finds_its_file(self) -> bool:
        """True for a glob: the loader looks for the file itself (a GPU file before the CPU
        one, or a variant's file), and answers None when there is none."""
        return any(c in self.file for c in "*?[")


# Each loader validates what it reads (schema, types, ranges) and raises DataFileError in one
# line; `load(kind)` finds the file and calls it. The loaders return record types defined above
# this module (heads' Run, the pipeline's StepTiming), so the table NAMES them and
# `load` imports one when it is called: the one reach of this module above the core, and
# `tests/test_architecture.py` reads this table (every name a read-only loader in heads, bench
# or pipeline; no other import above the core here). A registration by the layers above would
# make load(kind) depend on what a chapter happened to import first.
LOADERS: dict[str, Kind] = {
    "sweep": Kind("specialization_sweep.json", "andrea_edu.heads.sweep", "load_sweep"),
    "realtext_run": Kind("realtext_run.json", "andrea_edu.heads.text_runs", "load_run"),
    "realtext_variant": Kind("realtext_*_run.json", "andrea_edu.heads.text_longer",
                             "load_variant"),
    "toy_lab_model": Kind("toy_lab_model.json", "andrea_edu.heads.text_runs", "load_toy"),
    "realtext_paths": Kind("realtext_paths.json", "andrea_edu.heads.path_runs", "load_paths"),
    "realtext_gpt2": Kind("realtext_gpt2.json", "andrea_edu.heads.text_runs", "load_gpt2_scores"),
    "bench_headdim": Kind("bench_headdim_*.json", "andrea_edu.bench.results", "load_results",
                          ("headdim",)),
    "bench_projections": Kind("bench_projections_*.json", "andrea_edu.bench.results",
                              "load_results", ("projections",)),
    "bench_layout": Kind("bench_layout_*.json", "andrea_edu.bench.results", "load_results",
                         ("layout",)),
    # every GPU's file of a suite (an H100's and an H200's both), [] when none: never shadowed
    "bench_headdim_gpus": Kind("bench_headdim_*.json", "andrea_edu.bench.results",
                               "load_all_results", ("headdim",)),
    "bench_projections_gpus": Kind("bench_projections_*.json", "andrea_edu.bench.results",
                                   "load_all_results", ("projections",)),
    "bench_layout_gpus": Kind("bench_layout_*.json", "andrea_edu.bench.results",
                              "load_all_results", ("layout",)),
    "pipeline_timing": Kind("pipeline_*.json", "andrea_edu.pipeline.timing",
                            "load_pipeline_timing"),
    "pipeline_timing_gpus": Kind("pipeline_*.json", "andrea_edu.pipeline.timing",
                                 "load_all_pipeline_timings"),
}


def load(kind: str, path=None, *, missing: str = "raise", **options):
    """The committed record of `kind` (a key of LOADERS), validated by its loader: the one
    entry through which a chapter reads `book/data/`. path overrides where a one-file kind is
    read from; options go to the loader (device="gpu" for a benchmark, name= for a variant,
    weights_sha256= for the path ablations). missing="raise": DataFileError saying where it
    looked when there is no file; missing="none": None (a chapter that computes it instead).
    DataFileError whenever a file is there but cannot be trusted."""
    if kind not in LOADERS:
        raise ValueError(f"kind={kind!r} is not a kind of committed data; one of "
                         f"{', '.join(sorted(LOADERS))}")
    if missing not in ("raise", "none"):
        raise ValueError(f"missing={missing!r} is not one of 'raise', 'none'")
    k = LOADERS[kind]
    fn = getattr(importlib.import_module(k.module), k.function)
    if k.finds_its_file:
        if path is not None:
            raise ValueError(f"path=: a {kind} is looked for by its loader ({k.file}); "
                             f"point ANDREA_DATA_DIR at the folder instead")
        folder = data_folder(k.file)  # the folder the loader reads: its files checked first
        for f in sorted(p for p in folder.glob(k.file) if p.is_file()) if folder else []:
            problem = unsafe_to_parse(f, manifest=options.get("errors", "raise") == "raise")
            if problem:
                raise DataFileError(f"{reader_path(f)}: {problem}")
        got = fn(*k.args, **options)
        if (got is None or got == []) and missing == "raise":
            raise DataFileError(where_looked(k.file))
        return got
    if path is None:
        path = find_data(k.file)
        if path is None:
            if missing == "none":
                return None
            raise DataFileError(where_looked(k.file))
    problem = unsafe_to_parse(Path(path), manifest=True)
    if problem:
        raise DataFileError(f"{reader_path(path)}: {problem}")
    return fn(*k.args, Path(path), **options)


def unsafe_to_parse(path: Path, manifest: bool = True) -> str | None:
    """One line when a data file must not be parsed at all, else None: too large
    (`size_problem`, from its size alone), refused by its tables (`manifest_problem`; skipped
    with manifest=False, for a loader that skips a refused file itself), or for JSON nested
    too deep (`json_depth_problem`): a 1 GB file is never read, a planted '[[[[...' never
    reaches a recursive parser."""
    problem = size_problem(path) or (manifest_problem(path) if manifest else None)
    if problem or path.suffix != ".json":
        return problem
    try:
        return json_depth_problem(path.read_bytes())
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
