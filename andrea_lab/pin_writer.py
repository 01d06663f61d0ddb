"""The committed data's pins, written: new data accepted into andrea_edu/data_pins.py's table.

The table is the book's (andrea_edu.data_pins: PINS, `pinned`), checked wherever committed data
is read (andrea_edu.data.manifest_problem); this module changes what it checks against, and
says more than a reader's one line needs, so only scripts/pin_data.py, scripts/land_gpu_out.py
and the tests import it:
    accept(paths)       pin the files as they are now: rewrite the table in data_pins.py's source
                        (atomically) and in memory; a file that is gone loses its pin
    own_folder(folder)  whether `folder` is THIS checkout's book/data (or a folder pin_folder
                        marked): the only folders whose files this checkout's pins may change
    check_own_folder(path)  ValueError unless path lies in such a folder (accept's and
                        scripts/pin_data.py's first check)
    pin_folder(folder)  mark a folder as holding copies of the committed data (a test's copy,
                        then checked against the pins as book/data is)
    diagnose(path)      the book's refusal of a file, with its cause named where git converted
                        its line endings (core.autocrlf): what scripts/pin_data.py prints
Standard library only.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from andrea_edu import data_pins as DP
from andrea_edu.data import CRLF_CAUSE, CRLF_REMEDY, manifest_problem, read_manifest, reader_path

_BEGIN, _END = "    # pins: begin", "    # pins: end"  # whole lines of data_pins.py's table


def own_folder(folder) -> bool:
    """True when `folder` is the committed data folder of THIS checkout (book/data beside the
    package andrea_edu, through any symbolic link), or a folder `pin_folder` marked: the only
    folders whose files this checkout's pins may be rewritten from. Another checkout's
    book/data is pinned by that checkout's own table."""
    folder = Path(folder)
    if (folder / DP.MARKER).is_file():
        return True
    try:
        return os.path.samefile(folder, DP.committed_folder())
    except OSError:
        return False


def check_own_folder(path) -> None:
    """ValueError (one line) unless `path` lies in a pinned folder (andrea_edu.data_pins.pinned)
    that is this checkout's own (`own_folder`): the folder checks `accept` and
    scripts/pin_data.py make before anything else."""
    p = Path(path)
    if not DP.pinned(p.parent):
        raise ValueError(f"{p}: not in the committed data folder (book/data); only its files "
                         f"are pinned")
    if not own_folder(p.parent):
        raise ValueError(f"{p}: in another checkout's book/data, not this one's "
                         f"({reader_path(DP.committed_folder())}); pin it with that checkout's "
                         f"scripts/pin_data.py")


def pin_folder(folder) -> Path:
    """Mark `folder` as holding copies of the committed data: from then on it is checked against
    the pins as book/data is (a test's copy, damaged and re-manifested, is then refused)."""
    mark = Path(folder) / DP.MARKER
    mark.write_text("this folder holds copies of the committed data: andrea_edu/data_pins.py "
                    "checks every file\n")
    return mark


def crlf_converted(path, want: str) -> bool:
    """True when `path` is the file of sha256 `want` with its line endings turned into CRLF (what
    git does to a clone with core.autocrlf=true and no .gitattributes): the remedy is a checkout
    that keeps bytes, not new data. Reads only files of at most 64 MiB."""
    try:
        if os.path.getsize(path) > 64 * 2**20:
            return False
        raw = Path(path).read_bytes()
    except OSError:
        return False
    return b"\r\n" in raw and hashlib.sha256(raw.replace(b"\r\n", b"\n")).hexdigest() == want


def diagnose(path) -> str | None:
    """The book's refusal of `path` (andrea_edu.data.manifest_problem: its pin, its SHA256SUMS
    line), or None; where its content differs only because git converted its line endings to
    CRLF, that cause and its remedy instead (a checkout that keeps bytes, not new data)."""
    path = Path(path)
    problem = manifest_problem(path)
    if problem is None or "content differs" not in problem:
        return problem
    wants = [DP.PINS.get(path.name)] if DP.pinned(path.parent) else []
    try:
        wants.append(read_manifest(path.parent).get(path.name))
    except ValueError:
        pass
    if any(w and crlf_converted(path, w) for w in wants):
        return f"its line endings were converted to CRLF: {CRLF_CAUSE}; {CRLF_REMEDY}"
    return problem


def pins_text(pins: dict[str, str]) -> str:
    """The lines between the markers for {name: sha256}, sorted by name."""
    return "".join(f'    "{n}": "{h}",\n' for n, h in sorted(pins.items()))


def accept(paths, pin_file=None) -> list[str]:
    """Pin the files `paths` as they are now (a file that is gone loses its pin): rewrite the
    table in andrea_edu/data_pins.py's source (atomically: temporary file + rename) and in
    memory. Each path must lie in a pinned folder (ValueError, one line, before anything is
    written). Whether each file is what its folder's SHA256SUMS lists is the caller's to check
    first (scripts/pin_data.py does; scripts/land_gpu_out.py has just written the manifest
    itself). pin_file: the module to rewrite (default data_pins.PIN_FILE, which a test points
    at a copy). Returns one line per file."""
    pin_file = Path(pin_file) if pin_file is not None else DP.PIN_FILE
    new = dict(DP.PINS)
    lines = []
    for p in map(Path, paths):
        check_own_folder(p)
        if not p.exists():
            if new.pop(p.name, None) is None:
                raise ValueError(f"{p}: no such file, and no pin to remove")
            lines.append(f"{p.name}: pin removed (the file is gone)")
            continue
        if not p.is_file():
            raise ValueError(f"{p}: not a file")
        got = hashlib.sha256(p.read_bytes()).hexdigest()
        old = new.get(p.name)
        new[p.name] = got
        lines.append(f"{p.name}: {'unchanged' if old == got else 'pinned' if old is None else 're-pinned'}"
                     f" {got[:12]}")
    lines_of = pin_file.read_text().split("\n")
    begin = [i for i, ln in enumerate(lines_of) if ln.startswith(_BEGIN)]
    end = [i for i, ln in enumerate(lines_of) if ln == _END]
    if len(begin) != 1 or len(end) != 1 or end[0] < begin[0]:
        raise ValueError(f"{pin_file}: the '# pins: begin' / '# pins: end' lines are not there "
                         f"once each; restore the file (git checkout)")
    text = "\n".join(lines_of[:begin[0] + 1]) + "\n" + pins_text(new) + "\n".join(lines_of[end[0]:])
    tmp = pin_file.with_name(f".{pin_file.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, pin_file)
    DP.PINS.clear()
    DP.PINS.update(new)
    return lines
