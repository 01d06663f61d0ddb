"""Benchmark results on disk: the JSON schema, validation, writing and loading.

Introduced in the chapter "The configuration mirrors the hardware"; every chapter that shows a
committed measurement reads it with `load_results` (re-exported by andrea_edu.bench).

    validate_result(obj)                    ValueError unless obj follows SCHEMA (+ timing sanity)
    write_results(obj, out_dir=None)        -> <out_dir>/bench_<suite>_<device_slug>.json
    load_results(suite, device="any")       committed results (GPU first) or None
    data_dir()                              $ANDREA_DATA_DIR, else the repository's book/data
jsonschema is used when installed; the GPU machines' image lacks it, so a small validator for
the subset of JSON Schema that SCHEMA uses stands in there.
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

SCHEMA_VERSION = 1
SUITES = ("headdim", "projections", "layout")
_REPO = Path(__file__).resolve().parents[2]


_NUM = {"type": ["number", "null"]}
RECORD_SCHEMA = {
    "type": "object",
    "required": ["case", "backend", "status", "params"],
    "properties": {
        "case": {"type": "string"}, "backend": {"type": "string"},
        "status": {"enum": ["ok", "unavailable", "invalid", "failed", "skipped"]},
        "reason": {"type": ["string", "null"]}, "params": {"type": "object"},
        "min_ms": _NUM, "median_ms": _NUM, "max_ms": _NUM, "tflops": _NUM,
        "time_ratio_to_sdpa": _NUM, "max_abs_err": _NUM, "flops": _NUM,
        "repeats": {"type": ["integer", "null"], "minimum": 1},
    },
}
SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "andrea_edu benchmark results",
    "type": "object",
    "required": ["schema_version", "suite", "provenance", "settings", "flop_formula", "records"],
    "properties": {
        "schema_version": {"enum": [SCHEMA_VERSION]},
        "suite": {"enum": list(SUITES)},
        "provenance": {
            "type": "object",
            "required": ["device_kind", "device", "device_slug", "driver", "cuda", "torch",
                         "andrea_edu", "git_commit", "date"],
            "properties": {"device_kind": {"enum": ["cpu", "gpu"]},
                           "device": {"type": "string"}, "device_slug": {"type": "string"},
                           "driver": {"type": ["string", "null"]},
                           "cuda": {"type": ["string", "null"]}, "torch": {"type": "string"},
                           "andrea_edu": {"type": "string"}, "git_commit": {"type": "string"},
                           "date": {"type": "string"}}},
        "settings": {"type": "object", "required": ["dtype", "repeats", "warmup", "timer"],
                     "properties": {"repeats": {"type": "integer", "minimum": 1},
                                    "warmup": {"type": "integer", "minimum": 0},
                                    "timer": {"enum": ["cuda-events", "perf_counter"]}}},
        "flop_formula": {"type": "string"},
        "records": {"type": "array", "items": RECORD_SCHEMA},
    },
}


def _mini_validate(obj, schema: dict, path: str = "$") -> None:
    """The subset of JSON Schema used above, for machines without jsonschema (the GPU image)."""
    types = {"object": dict, "array": list, "string": str, "integer": int, "number": (int, float),
             "null": type(None)}
    if "type" in schema:
        allowed = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        ok = any(isinstance(obj, types[t]) and not (t in ("integer", "number") and
                                                   isinstance(obj, bool)) for t in allowed)
        if not ok:
            raise ValueError(f"{path}: {obj!r} is not of type {allowed}")
    if "enum" in schema and obj not in schema["enum"]:
        raise ValueError(f"{path}: {obj!r} is not one of {schema['enum']}")
    if "minimum" in schema and isinstance(obj, (int, float)) and obj < schema["minimum"]:
        raise ValueError(f"{path}: {obj!r} is less than the minimum {schema['minimum']}")
    if isinstance(obj, dict):
        for key in schema.get("required", []):
            if key not in obj:
                raise ValueError(f"{path}: {key!r} is a required property")
        for key, sub in schema.get("properties", {}).items():
            if key in obj:
                _mini_validate(obj[key], sub, f"{path}.{key}")
    if isinstance(obj, list) and "items" in schema:
        for i, item in enumerate(obj):
            _mini_validate(item, schema["items"], f"{path}[{i}]")


def validate_result(obj) -> None:
    """Raise ValueError unless obj is a valid results object (SCHEMA, plus: an "ok" record has
    min <= median <= max timings and a CPU file is labelled "CPU: ...")."""
    try:
        import jsonschema
    except ImportError:
        _mini_validate(obj, SCHEMA)
    else:
        try:
            jsonschema.validate(obj, SCHEMA)
        except jsonschema.ValidationError as e:
            raise ValueError(f"results do not match the schema at "
                             f"{'/'.join(map(str, e.absolute_path)) or '$'}: {e.message}") from None
    prov = obj["provenance"]
    if prov["device_kind"] == "cpu" and not prov["device"].startswith("CPU"):
        raise ValueError(f"provenance.device={prov['device']!r}: CPU results must be labelled "
                         f"'CPU: <model>'")
    for i, r in enumerate(obj["records"]):
        if r["status"] == "ok":
            t = [r.get(k) for k in ("min_ms", "median_ms", "max_ms")]
            if any(x is None for x in t) or not (0 <= t[0] <= t[1] <= t[2]):
                raise ValueError(f"records[{i}] ({r['case']}, {r['backend']}) is 'ok' but its "
                                 f"timings {t} are not 0 <= min <= median <= max")


def data_dir() -> Path:
    """Where committed results live: $ANDREA_DATA_DIR, else the repository's book/data."""
    if os.environ.get("ANDREA_DATA_DIR"):
        return Path(os.environ["ANDREA_DATA_DIR"])
    for cand in (_REPO / "book" / "data", Path.cwd() / "data", Path.cwd() / "book" / "data"):
        if cand.is_dir():
            return cand
    return _REPO / "book" / "data"


def write_results(obj: dict, out_dir=None) -> Path:
    """Validate obj and write it to <out_dir>/bench_<suite>_<device_slug>.json."""
    validate_result(obj)
    out = Path(out_dir) if out_dir is not None else data_dir()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"bench_{obj['suite']}_{obj['provenance']['device_slug']}.json"
    path.write_text(json.dumps(obj, indent=1, sort_keys=False) + "\n")
    return path


def load_results(suite: str, device: str = "any", data_dir_=None) -> dict | None:
    """The committed results of one suite ("headdim", "projections", "layout"), or None.

    device: "gpu" (any GPU file), "cpu", or "any" (a GPU file when one exists, else the CPU one).
    Files that fail validation are skipped (with a warning), never shown.
    """
    if suite not in SUITES:
        raise ValueError(f"suite={suite!r} is not one of {SUITES}")
    if device not in ("any", "gpu", "cpu"):
        raise ValueError(f"device={device!r} is not one of 'any', 'gpu', 'cpu'")
    folder = Path(data_dir_) if data_dir_ is not None else data_dir()
    files = sorted(folder.glob(f"bench_{suite}_*.json"))
    gpu = [f for f in files if not f.name.endswith("_cpu.json")]
    cpu = [f for f in files if f.name.endswith("_cpu.json")]
    order = {"gpu": gpu, "cpu": cpu, "any": gpu + cpu}[device]
    for f in order:
        try:
            obj = json.loads(f.read_text())
            validate_result(obj)
        except (OSError, ValueError) as e:
            warnings.warn(f"{f}: skipped, not a valid results file ({e})", RuntimeWarning)
            continue
        obj["_path"] = str(f)
        return obj
    return None
