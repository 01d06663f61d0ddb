"""The one writer of committed data: every file the laboratory makes goes through here.

The scheme (andrea_edu.data's docstring states the reader's half): `write_files_as_unit` writes
each file of a unit to a temporary file in its folder, fsyncs it and os.replace()s it into
place, then rewrites the folder's SHA256SUMS LAST (temporary file + os.replace): the manifest's
rename is the unit's commit point. A unit cut short between its renames (kill -9, a full disk)
leaves files whose sha256 the manifest does not list, and the book refuses each of them in one
line naming the remedy (`git checkout -- <folder>`, or run the writer again): fail closed, with
no journal, lock or backup (git keeps the old versions). One writer per folder at a time (the
laboratory's commands run one by one); two at once may drop each other's manifest line, and
the file that lost its line is then refused, never read unchecked. A writer's stray temporary
files (hidden, `.<name>.andrea-<pid>-<hex>.tmp`) are never read, and the next write into the
folder removes them.

`write_json_atomic` is the one-file case; `seal_folder` lists a folder's files in a new manifest
(what a test, or a person who has checked data by hand, does to make the book read it);
`committed_reason` says why writing a path would change committed data (every writer asks it
before writing, and refuses committed data unless asked to replace it). `stamped` adds what only a
writer records to a record's provenance: the commit (`git_commit`) and the code hash
(`code_hash`); the run's own block is built when the run is made (`andrea_edu.data.new_provenance`).
"""
from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

import andrea_edu
from andrea_edu.data import MANIFEST, name_problem, read_manifest

_TEMP = re.compile(r"\..+\.andrea-\d+-[0-9a-f]+\.tmp")  # a writer's temporary file, whole name


def is_temporary(name: str) -> bool:
    """True for the name of a writer's temporary file (`.<name>.andrea-<pid>-<hex>.tmp`): never
    data, removed by the next write into its folder."""
    return _TEMP.fullmatch(name) is not None


def _temporary(path: Path) -> Path:
    import secrets
    return path.with_name(f".{path.name}.andrea-{os.getpid()}-{secrets.token_hex(4)}.tmp")


def write_json_atomic(path, obj, manifest: bool | None = None, **dumps_kw) -> Path:
    """Write obj as JSON to path through a temporary file in the same folder and os.replace:
    a reader (or a crash, kill -9 included) sees the old file or the new one, never half of one.
    In a folder with a SHA256SUMS (book/data), or with manifest=True, its new sha256 is written
    there after it (`write_files_as_unit`)."""
    import json

    path = Path(path)
    text = json.dumps(obj, **dumps_kw) + "\n"
    write_files_as_unit([(path, lambda tmp: tmp.write_text(text))], manifest=manifest)
    return path


def manifest_text(sums: dict[str, str]) -> str:
    """The manifest for {name: sha256}, sorted by name (what read_manifest reads back)."""
    return "".join(f"{h}  {n}\n" for n, h in sorted(sums.items()))


def remove_stray_temporaries(folder) -> list[str]:
    """Remove the temporary files an earlier writer left in `folder` (killed before its rename):
    only entries of this folder whose whole name is a writer's temporary name (`is_temporary`)
    and that are files or symbolic links (a link is removed, never what it points at). Returns
    the names removed."""
    folder = Path(folder)
    gone = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if is_temporary(entry.name) and (entry.is_symlink() or entry.is_file()):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
                    gone.append(entry.name)
    return gone


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _fsync_file(p: Path) -> None:
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _synced(tmp: Path, umask: int) -> str:
    """Make a written temporary file readable as any data file, sync it; its sha256."""
    import hashlib
    os.chmod(tmp, 0o666 & ~umask)
    _fsync_file(tmp)
    return hashlib.sha256(tmp.read_bytes()).hexdigest()


def write_files_as_unit(items, manifest: bool | None = None) -> list[Path]:
    """Write several files of one folder as one unit. items: [(path, write)], write(tmp) fills a
    temporary file beside `path`. manifest: keep the folder's SHA256SUMS current (None: when the
    folder has one; True: create it if missing).

    In order: names checked (plain names of one folder, not the manifest nor a temporary name:
    ValueError, nothing written); the folder's manifest read strictly (a damaged one is not
    silently rewritten: DataFileError, nothing written); stray temporary files of an earlier
    writer removed; each file written to its temporary name, synced and renamed into place;
    the manifest, with the new sha256s, written the same way LAST (the commit point). An
    exception or a kill part way leaves no temporary file of this process behind (a kill:
    the next write removes it) and files the old manifest does not vouch for, which the book
    refuses until the unit is written again or `git checkout -- <folder>` restores it."""
    items = [(Path(p), w) for p, w in items]
    if not items:
        return []
    folders = sorted({p.parent for p, _ in items})
    if len(folders) != 1:  # one manifest commits the unit
        raise ValueError(f"a unit lies in one folder, not {len(folders)}")
    for p, _ in items:
        why = (name_problem(p.name) or ("is the folder's manifest" if p.name == MANIFEST else None)
               or ("is a writer's temporary name" if is_temporary(p.name) else None))
        if why:
            raise ValueError(f"path={str(p)[:80]!r}: its file name {why}; a data file has a "
                             f"plain name of its own")
    folder = folders[0]
    if manifest is None:  # the manifest of a folder that has one is kept up to date
        manifest = (folder / MANIFEST).is_file()
    folder.mkdir(parents=True, exist_ok=True)
    sums = read_manifest(folder) if manifest else {}  # strict, before anything is written
    remove_stray_temporaries(folder)
    umask = os.umask(0)
    os.umask(umask)
    tmps = [_temporary(p) for p, _ in items]
    try:
        for (path, write), tmp in zip(items, tmps):
            write(tmp)
            sums[path.name] = _synced(tmp, umask)
        for (path, _), tmp in zip(items, tmps):
            os.replace(tmp, path)
        _fsync_dir(folder)
        if manifest:  # the commit point: every file of the unit is in place and synced
            mpath = folder / MANIFEST
            tmps.append(_temporary(mpath))
            tmps[-1].write_text(manifest_text(sums))
            _synced(tmps[-1], umask)
            os.replace(tmps[-1], mpath)
            _fsync_dir(folder)
    finally:
        for tmp in tmps:  # those not renamed (an exception part way)
            with contextlib.suppress(OSError):
                tmp.unlink()
    return [p for p, _ in items]


def seal_folder(folder, names=None) -> Path:
    """Write folder/SHA256SUMS listing `names` (default: every file in it that is not hidden)
    with their sha256 now: what a test, or a person who has checked a folder of data by hand,
    does to make the book read it (the book reads only listed files)."""
    import hashlib
    folder = Path(folder)
    names = sorted(names if names is not None else
                   (p.name for p in folder.iterdir() if p.is_file() and p.name != MANIFEST
                    and not p.name.startswith(".")))
    for n in names:
        why = name_problem(n)
        if why:
            raise ValueError(f"names: {n[:80]!r} {why}; a manifest lists only plain file "
                             f"names of its own folder (rename the file first)")
    sums = {n: hashlib.sha256((folder / n).read_bytes()).hexdigest() for n in names}
    mpath = folder / MANIFEST
    tmp = _temporary(mpath)
    try:
        tmp.write_text(manifest_text(sums))
        os.replace(tmp, mpath)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    return mpath


REPO = Path(__file__).resolve().parents[1]  # the repository andrea_lab sits in (beside andrea_edu)
BOOK = REPO / "book"


def committed_reason(path) -> str | None:
    """Why writing `path` would change committed data, or None: the one answer to "is this file
    committed data?" that every writer asks (arg_checks.check_not_committed before a command's
    work, bench.writer.write_results, pipeline_timing.save_timing, the bench's checkpoints).
    In this order: its folder's SHA256SUMS lists it (a damaged manifest counts: refused, not
    guessed); it lies in the book's folder (a chapter, book/data); it lies in a folder holding
    the committed data (andrea_edu.data_pins.pinned: a checkout's book/data, or a folder
    pin_writer.pin_folder marked); git tracks it. The reason leaves the path out:
    f"{path} {reason}" reads as one sentence."""
    import subprocess

    from andrea_edu import data_pins
    given = Path(path).expanduser()
    p = Path(os.path.realpath(given))
    for f in dict.fromkeys((Path(os.path.abspath(given)), p)):  # as named and as resolved
        if f.parent.is_dir():
            try:
                if f.name in read_manifest(f.parent):
                    return "is committed data (listed in its folder's SHA256SUMS)"
            except ValueError:
                return "lies beside a damaged SHA256SUMS"
    book = Path(os.path.realpath(BOOK))
    if p == book or book in p.parents:
        return f"lies in the book's folder {BOOK}"
    if data_pins.pinned(given.parent):
        return f"lies in the committed data folder {given.parent}"
    if p.is_file():
        try:
            r = subprocess.run(["git", "ls-files", "--error-unmatch", str(p)], cwd=p.parent,
                               capture_output=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        if r.returncode == 0:
            return "is a file git tracks"
    return None


def default_out_dir() -> Path:
    """Where a command writes when no --out is given: $ANDREA_OUT_DIR, else andrea_runs/ in the
    working directory, never inside the book's folder (from book/ it is the repository's
    andrea_runs/). Committed data in book/data changes only when a command is pointed there by
    name (--out book/data, with --replace where a file would be replaced)."""
    if os.environ.get("ANDREA_OUT_DIR", "").strip():
        return Path(os.environ["ANDREA_OUT_DIR"].strip()).expanduser()
    here = Path.cwd().resolve()
    book = BOOK.resolve()
    if here == book or book in here.parents:
        return REPO / "andrea_runs"
    return here / "andrea_runs"


# ---------------------------------------------------------------- what only a writer records
EDU_DIR = Path(andrea_edu.__file__).resolve().parent  # the reader's package: whose commit is named


def stamped(prov: dict, code=None) -> dict:
    """A record's provenance as a writer stores it: the run's block (`andrea_edu.data.
    new_provenance`, built when the run was made) plus the commit its code came from
    (`git_commit`) and, given `code` (modules, functions, classes), the hash of the code that
    decided its numbers (`code_hash`). A key the block already has stays as it is: a record
    written again (a checkpoint's next write, a file landed from the GPU) keeps what it was
    stamped with."""
    out = dict(prov)
    if "git_commit" not in out:
        out["git_commit"] = git_commit()
    if code is not None and "code_hash" not in out:
        out["code_hash"] = code_hash(code)
    return out


def code_hash(parts) -> str:
    """The one hash of the code that decided a result's numbers, as provenance records it: the
    sha256 (first 16 hex digits) of the source text of each of `parts` (a module: its file
    whole; a function or class: its definition), in the order given."""
    import hashlib
    import inspect
    h = hashlib.sha256()
    for part in parts:
        h.update(inspect.getsource(part).encode())
    return h.hexdigest()[:16]


def git_commit() -> str:
    """The commit every written record's provenance names (`stamped`): ANDREA_GIT_COMMIT when
    set (a copy without its .git folder), else HEAD of the repository andrea_edu sits in
    (`EDU_DIR`), plus "-dirty (files)" naming the files under andrea_edu/ that differ from it;
    "unknown" without git or a repository."""
    if os.environ.get("ANDREA_GIT_COMMIT"):
        return os.environ["ANDREA_GIT_COMMIT"]
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=EDU_DIR, capture_output=True, text=True,
                              timeout=10).stdout

    try:
        sha = git("rev-parse", "HEAD").strip()
        if not sha:
            return "unknown"
        changed = git("status", "--porcelain", "--", ".")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    files = sorted(line[3:] for line in changed.splitlines() if line[3:])
    return sha + (f"-dirty ({', '.join(files)})" if files else "")
