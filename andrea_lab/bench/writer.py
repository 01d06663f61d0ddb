"""Writing a benchmark's results: validated, then written atomically (andrea_lab.store) to
<out_dir>/bench_<suite>_<device_slug>.json; the book reads them with andrea_edu.bench.results.
On a machine without jsonschema (the GPU image's first stage) the values are checked
(results.check_values) but not the schema, and a line on stderr says so: the file is validated
whole where it is landed (scripts/land_gpu_out.py) and loaded."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from andrea_edu.bench.results import check_values, validate_result
from andrea_lab.store import committed_reason, default_out_dir, stamped, write_json_atomic


_SAID: set[str] = set()  # files whose missing schema check this process has said


def _validate(obj: dict) -> bool:
    """validate_result(obj) where jsonschema is installed (True); else check_values alone
    (False). ValueError, one line, for an object that fails either."""
    try:
        import jsonschema  # noqa: F401
    except ImportError:
        try:
            check_values(obj)
        except (KeyError, TypeError, AttributeError) as e:  # a shape the schema would refuse
            raise ValueError(f"results are not shaped as the schema says ({type(e).__name__}: "
                             f"{e})") from None
        return False
    validate_result(obj)
    return True


def _is_full(obj) -> bool:
    """Full-size data: not a fast run, and at least one record measured."""
    return not obj.get("settings", {}).get("fast", False) and any(
        r.get("status") == "ok" for r in obj.get("records", []))


def write_results(obj: dict, out_dir=None, replace: bool = False) -> Path:
    """Validate obj (without jsonschema: its values only, and a line on stderr says so) and
    write it, atomically, to <out_dir>/bench_<suite>_<device_slug>.json.

    Refuses (FileExistsError, nothing written) to replace committed data
    (andrea_lab.store.committed_reason), or a file of full-size measurements with a fast run or
    a run that measured nothing, unless replace=True (the CLI's --replace). The provenance
    written is the run's, stamped with the commit (andrea_lab.store.stamped)."""
    if isinstance(obj.get("provenance"), dict):  # else the validation says what is wrong
        obj = dict(obj, provenance=stamped(obj["provenance"]))
    schema_checked = _validate(obj)
    out = Path(out_dir) if out_dir is not None else default_out_dir()
    path = out / f"bench_{obj['suite']}_{obj['provenance']['device_slug']}.json"
    why = committed_reason(path) if path.exists() and not replace else None
    if why:
        raise FileExistsError(f"{path} {why}; a new run does not replace it unless asked "
                              f"(replace=True, on the command line --replace, or write elsewhere "
                              f"with --out)")
    if path.exists() and not replace and not _is_full(obj):
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            old = None  # a damaged file is not worth keeping
        if isinstance(old, dict) and _is_full(old):
            why = ("a fast run" if obj.get("settings", {}).get("fast") else
                   "a run with no 'ok' record")
            raise FileExistsError(f"{path} holds full-size measurements; {why} does not replace "
                                  f"them (pass replace=True, on the command line --replace, or "
                                  f"write elsewhere with --out)")
    # the folder's SHA256SUMS is kept current where there is one (book/data); none is made in
    # a fresh folder (the GPU suite's $OUT holds at most 8 files)
    written = write_json_atomic(path, obj, indent=1, sort_keys=False)
    if not schema_checked and path.name not in _SAID:  # once a file (checkpoints rewrite it)
        _SAID.add(path.name)
        print(f"[bench] {path.name}: written without schema validation (no jsonschema here; "
              f"values checked); scripts/land_gpu_out.py validates it where it lands",
              file=sys.stderr)
    return written
