"""The one writer of committed data: every file the laboratory makes goes through here.

`write_files_as_unit` writes several files and their folder's SHA256SUMS as one unit, all or
nothing under kill -9 (a journal names the renames); `write_json_atomic` is its one-file case;
`folder_lock` is the folder's writer lock; `recover_units` finishes what a killed writer left;
`seal_folder` lists a folder's files in a new manifest (what a test, or a person who has checked
data by hand, does to make the book read it); `committed_reason` says why writing a path would
change committed data (every writer asks it before writing). The book only reads (andrea_edu.data), and refuses
a folder a killed writer left half done; this module finishes it:

    python -m andrea_lab.store recover DIR
"""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from andrea_edu.data import (MANIFEST, _JOURNAL, _TAG, DataFileError, name_problem,
                             pending_units, read_manifest)

def write_json_atomic(path, obj, manifest: bool | None = None, **dumps_kw) -> Path:
    """Write obj as JSON to path through a temporary file in the same folder and os.replace:
    a reader (or a crash, kill -9 included) sees the old file or the new one, never half of one.
    In a folder with a SHA256SUMS (book/data), or with manifest=True, the file and its new
    sha256 there are written as one unit (`write_files_as_unit`)."""
    import json

    path = Path(path)
    text = json.dumps(obj, **dumps_kw) + "\n"
    write_files_as_unit([(path, lambda tmp: tmp.write_text(text))], manifest=manifest)
    return path


def manifest_text(sums: dict[str, str]) -> str:
    """The manifest for {name: sha256}, sorted by name (what read_manifest reads back)."""
    return "".join(f"{h}  {n}\n" for n, h in sorted(sums.items()))


@contextlib.contextmanager
def folder_lock(folder, shared: bool = False):
    """An fcntl.flock on the folder itself (its directory file descriptor: no lock file is left
    behind, and a read-only folder can be locked too): every writer of a folder's files and its
    manifest holds it exclusively, so two writers never lose each other's manifest entries. A
    no-op where fcntl is missing (Windows)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not Linux/macOS
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _journal_pairs(folder: Path, journal: Path, j) -> tuple[list, str]:
    """The renames a journal names, as paths inside `folder`, and its mode; DataFileError (one
    line, nothing done) when it names anything but plain file names of its own folder (a
    separator, '..', an absolute path, a control character), a temporary or backup name this
    module would not have made, or a mode or count it does not write."""
    def bad(why: str):
        raise DataFileError(f"{journal}: {why}; a journal names only plain file names of its own "
                            f"folder, so this one was not written here and is not acted on "
                            f"(read it, then delete it by hand)")
    if not isinstance(j, dict) or not isinstance(j.get("pairs"), list):
        bad("not an object with a list 'pairs'")
    mode = j.get("mode", "forward")
    if mode not in ("forward", "back"):
        bad(f"mode {str(mode)[:20]!r} is not 'forward' or 'back'")
    done = j.get("done", len(j["pairs"]))
    if isinstance(done, bool) or not isinstance(done, int) or not 0 <= done <= len(j["pairs"]):
        bad(f"done={str(done)[:20]!r} is not a count of its pairs")
    pairs = []
    for pair in j["pairs"]:
        if not (isinstance(pair, list) and len(pair) == 3):
            bad(f"a pair {str(pair)[:60]!r} is not [temporary, target, backup or null]")
        t, n, b = pair
        for name, role in ((t, "temporary"), (n, "target"), (b, "backup")):
            if name is None and role == "backup":
                continue
            why = name_problem(name)
            if why:
                bad(f"its {role} name {str(name)[:60]!r} {why}")
        if not (t.startswith(".") and t.endswith(".tmp") and _TAG in t):
            bad(f"its temporary name {t[:60]!r} is not one a writer makes")
        if b is not None and not (b.startswith(".") and b.endswith(".bak") and _TAG in b):
            bad(f"its backup name {b[:60]!r} is not one a writer makes")
        pairs.append((folder / t, folder / n, folder / b if b else None))
    return pairs, mode


def recover_units(folder) -> list[str]:
    """Finish what a killed writer left (call with `folder_lock` held): a unit whose journal was
    written is rolled forward (its remaining temporary files renamed over their targets: every
    file of it was complete and synced before the journal), or rolled back when its writer had
    started undoing it; temporary and backup files of dead writers are removed. Returns one
    line per unit finished. A journal that names anything outside its folder (or anything this
    module would not have written) is refused, DataFileError in one line, before anything is
    renamed or removed: the folder stays as it is, and writers into it are refused too."""
    import json
    folder = Path(folder)
    done = []
    pending = pending_units(folder, writers_gone=True)  # under the lock: every writer is gone
    journals = []
    for p in pending:
        if not p.name.startswith(_JOURNAL):
            continue
        try:
            j = json.loads(p.read_text())
        except (OSError, ValueError, RecursionError):
            j = None  # unreadable: a journal cut short by the kill (its writer never renamed)
        journals.append((p, j, *(_journal_pairs(folder, p, j) if j is not None else ([], "broken"))))
    for p, j, pairs, mode in journals:  # every journal checked before any is acted on
        if mode == "forward":
            for tmp, target, _ in pairs:
                if tmp.exists():
                    os.replace(tmp, target)
        elif mode == "back":
            for tmp, target, bak in pairs[:j.get("done", len(pairs))]:
                if bak is not None and bak.exists():
                    os.replace(bak, target)
                elif bak is None and not tmp.exists():
                    with contextlib.suppress(FileNotFoundError):
                        target.unlink()
        done.append(f"{folder}: finished a unit write a killed writer left "
                    f"({mode}: {', '.join(t.name for _, t, _ in pairs) or 'unreadable journal'})")
        _fsync_dir(folder)
        p.unlink()
    for p in pending_units(folder, writers_gone=True):  # the journals are gone: orphans
        with contextlib.suppress(OSError):
            p.unlink()
    return done


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


def write_files_as_unit(items, manifest: bool | None = None) -> list[Path]:
    """Write several files as one unit, all or nothing, even under kill -9 at any point.
    items: [(path, write)], write(tmp) fills a temporary file beside `path`; all in one folder
    when the manifest is kept. manifest: keep the folder's SHA256SUMS current (None: when the
    folder has one; True: create it if missing).

    Under the folder's lock (`folder_lock`: concurrent writers never lose manifest entries):
    what a killed writer left is finished (`recover_units`); every file is written to its
    temporary name and synced, the new manifest too; a journal naming the renames is written
    (atomically); then each file is renamed over its target, the manifest last, and the journal
    removed. A kill before the journal leaves the old set (its temporary files are removed by the
    next reader or writer); after it, the next reader or writer rolls the unit forward: the
    folder holds the old set or the new one, and no .tmp/.bak file stays. An exception in this
    process (a full disk) puts the old set back from hard-linked backups."""
    import hashlib
    import json
    import secrets
    items = [(Path(p), w) for p, w in items]
    if not items:
        return []
    folders = sorted({p.parent for p, _ in items})
    if len(folders) != 1:  # its journal names plain file names of that folder, nothing else
        raise ValueError(f"a unit lies in one folder, not {len(folders)}")
    for p, _ in items:
        why = (name_problem(p.name) or ("is the folder's manifest" if p.name == MANIFEST else None)
               or ("is a journal's name" if p.name.startswith(_JOURNAL) else None))
        if why:
            raise ValueError(f"path={str(p)[:80]!r}: its file name {why}; a data file has a "
                             f"plain name of its own")
    if manifest is None:  # the manifest of a folder that has one is kept up to date
        manifest = (folders[0] / MANIFEST).is_file()
    for f in folders:
        f.mkdir(parents=True, exist_ok=True)
    folder = folders[0]
    tag = f"{_TAG}{os.getpid()}-{secrets.token_hex(4)}"
    with contextlib.ExitStack() as locks:
        for f in folders:
            locks.enter_context(folder_lock(f))
            recover_units(f)
        return _write_locked(items, folder, manifest, tag, hashlib, json)


def _write_locked(items, folder: Path, manifest: bool, tag: str, hashlib, json) -> list[Path]:
    tmps = [p.with_name(f".{p.name}.{tag}.tmp") for p, _ in items]
    journal = folder / f"{_JOURNAL}{tag}.json"
    done: list[tuple[Path, Path | None]] = []
    asked = len(items)
    umask = os.umask(0)
    os.umask(umask)
    try:
        for (path, write), tmp in zip(items, tmps):
            write(tmp)
            os.chmod(tmp, 0o666 & ~umask)  # a data file is as readable as any
            _fsync_file(tmp)
        if manifest:
            sums = read_manifest(folder)  # strict: a damaged manifest is not silently rewritten
            sums.update({p.name: hashlib.sha256(t.read_bytes()).hexdigest()
                         for (p, _), t in zip(items, tmps)})
            mpath = folder / MANIFEST
            asked = len(items)
            items = items + [(mpath, None)]
            tmps.append(mpath.with_name(f".{MANIFEST}.{tag}.tmp"))
            tmps[-1].write_text(manifest_text(sums))
            os.chmod(tmps[-1], 0o666 & ~umask)
            _fsync_file(tmps[-1])
        baks = [p.with_name(f".{p.name}.{tag}.bak") if p.exists() else None for p, _ in items]
        for (path, _), bak in zip(items, baks):
            if bak is not None:
                try:
                    os.link(path, bak)
                except OSError:  # a file system without hard links: a copy
                    import shutil
                    shutil.copy2(path, bak)
        pairs = [[os.path.relpath(t, folder), os.path.relpath(p, folder),
                  os.path.relpath(b, folder) if b else None]
                 for (p, _), t, b in zip(items, tmps, baks)]
        jtmp = journal.with_suffix(".tmp")
        jtmp.write_text(json.dumps({"mode": "forward", "pairs": pairs}))
        _fsync_file(jtmp)
        os.replace(jtmp, journal)  # the unit is decided: from here on it completes
        _fsync_dir(folder)
        for (path, _), tmp, bak in zip(items, tmps, baks):
            done.append((path, bak))  # before the rename: a failed rename still cleans up
            os.replace(tmp, path)
        _fsync_dir(folder)
    except BaseException:
        if journal.exists():  # undo what was renamed; a kill while undoing finishes the undo
            with contextlib.suppress(OSError):
                j = json.loads(journal.read_text())
                j.update(mode="back", done=len(done))
                jtmp = journal.with_suffix(".tmp")
                jtmp.write_text(json.dumps(j))
                os.replace(jtmp, journal)
        for path, bak in reversed(done):
            with contextlib.suppress(OSError):
                if bak is not None:
                    os.replace(bak, path)
                else:
                    path.unlink()
        raise
    finally:
        for tmp in tmps + [journal.with_suffix(".tmp")]:
            with contextlib.suppress(OSError):
                tmp.unlink()
        for p, _ in items:
            with contextlib.suppress(OSError):
                p.with_name(f".{p.name}.{tag}.bak").unlink()
        with contextlib.suppress(OSError):
            journal.unlink()
    return [p for p, _ in items[:asked]]  # the files asked for (the manifest is not one)


def seal_folder(folder, names=None) -> Path:
    """Write folder/SHA256SUMS listing `names` (default: every file in it that is not hidden)
    with their sha256 now, under the folder's lock: what a test, or a person who has checked a
    folder of data by hand, does to make the book read it (the book reads only listed files)."""
    import hashlib
    folder = Path(folder)
    with folder_lock(folder):
        recover_units(folder)
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
        tmp = mpath.with_name(f".{MANIFEST}.{_TAG}{os.getpid()}-0.tmp")
        tmp.write_text(manifest_text(sums))
        os.replace(tmp, mpath)
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


def main(argv=None) -> int:
    """python -m andrea_lab.store recover DIR: finish the unit writes a killed writer left."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) != 2 or argv[0] != "recover":
        print("usage: python -m andrea_lab.store recover DIR", file=sys.stderr)
        return 2
    folder = Path(argv[1])
    if not folder.is_dir():
        print(f"python -m andrea_lab.store recover: error: DIR={argv[1][:200]!r} is not a "
              f"folder; give the folder of data to finish", file=sys.stderr)
        return 2
    try:
        with folder_lock(folder):
            done = recover_units(folder)
    except DataFileError as e:
        print(f"python -m andrea_lab.store recover: {e}", file=sys.stderr)
        return 1
    print("\n".join(done) or f"{folder}: nothing left unfinished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
