"""Provenance, worded for a reader: what a committed measurement's record says about where,
when and with what it was made, without the traces of the machine that made it.

The records in book/data/ are kept as written (they are data); this module formats them at
display time:
- `command(cmd)`: the command as a reader types it from the repository root: an output path
  outside the repository becomes book/data/<file>, and a command that has since moved (the
  laboratory's, to andrea_lab) gets its current name (RENAMED);
- `commit(sha)`: the short commit, and, where the record says the working tree had edits, that
  the code was that commit plus edits (no tool's marker);
- `where(path)`: a folder or file as a reader of the book would name it (relative to the
  repository, or to the home folder), never the building machine's absolute path
  (andrea_edu.data.reader_path, which andrea_edu.data.where_looked uses too);
- `rows(prov)`: [label, value] rows for a provenance table, from whichever of the usual keys a
  record has.
"""
from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

from andrea_edu.data import provenance, reader_path

# Commands that wrote committed data under an earlier name: {old: newer} (followed until a
# module that runs as a command; the laboratory's commands moved to andrea_lab).
RENAMED = {"andrea_edu.specialization_sweep": "andrea_edu.heads.sweep",
           "andrea_edu.heads.sweep": "andrea_lab.sweep",
           "andrea_edu.bench": "andrea_lab.bench",
           "andrea_edu.pipeline.timing": "andrea_lab.pipeline_timing",
           "andrea_edu.heads.text_training": "andrea_lab.text_training",
           "andrea_edu.heads.path_runs": "andrea_lab.path_runs",
           "andrea_edu.heads.text_longer": "andrea_lab.text_longer",
           # the laboratory's commands named for what they make (no module name in both packages)
           "andrea_lab.sweep": "andrea_lab.make_sweep",
           "andrea_lab.text_training": "andrea_lab.make_realtext_run",
           "andrea_lab.path_runs": "andrea_lab.make_realtext_paths",
           "andrea_lab.text_longer": "andrea_lab.make_realtext_variant"}
_OUT = re.compile(r"(--[\w-]*out)(?:=|\s+)(\S+)")


where = reader_path   # one rule for naming paths on a page (andrea_edu.data)


def _module_exists(name: str) -> bool:
    """True when `python -m name` runs a command: a module whose source runs itself as
    __main__, or a package with a __main__ module."""
    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(name + ".__main__")
            return spec is not None
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        return False
    return "__main__" in Path(spec.origin).read_text(encoding="utf-8", errors="replace")


def command(cmd: str, data_file: str = "") -> str:
    """The command a record was produced by, as a reader would type it in the repository.
    `data_file`: the name the record is committed under in book/data/ (an output written
    elsewhere, under another name, and committed there is shown as written there)."""
    cmd = str(cmd).strip()

    def out(m: re.Match) -> str:
        target = m.group(2)
        if os.path.isabs(target) and not where(target).startswith("book/"):
            target = f"book/data/{data_file or Path(target).name}"
        elif os.path.isabs(target):
            target = where(target)
        return f"{m.group(1)} {target}"

    cmd = _OUT.sub(out, cmd)
    m = re.match(r"(python3? -m )([\w.]+)(.*)", cmd)
    if m:
        name, seen = m.group(2), set()
        while name in RENAMED and name not in seen:  # the map is what moved: followed always
            seen.add(name)
            name = RENAMED[name]
        cmd = m.group(1) + name + m.group(3)
    return cmd


def commit(sha: str, length: int = 10) -> str:
    """'<short sha>', or '<short sha> plus uncommitted edits' when the record says the
    working tree differed from that commit."""
    s = str(sha).strip()
    m = re.match(r"([0-9a-f]{7,40})(-dirty\b.*)?$", s)
    if not m:
        return s
    return m.group(1)[:length] + (" plus uncommitted edits" if m.group(2) else "")


# key in a record (today's name: andrea_edu.data.provenance reads older files' keys under it)
# -> label in a table, in the order shown
_LABELS = (("produced_by", "made by"), ("date_utc", "date (UTC)"), ("device", "device"),
           ("torch", "torch"), ("andrea_edu", "andrea_edu"), ("git_commit", "code (commit)"))


def rows(prov: dict, data_file: str = "") -> list[list[str]]:
    """[label, value] rows for a provenance table: the command (as a reader types it), date,
    device, versions and commit, for the keys `prov` has."""
    prov = provenance(prov)  # an older file's "command", "date" under today's names
    out = []
    for key, label in _LABELS:
        if key not in prov:
            continue
        v = prov[key]
        v = (f"`{command(v, data_file)}`" if key == "produced_by" else
             f"`{commit(v)}`" if key == "git_commit" else str(v))
        out.append([label, v])
    return out
