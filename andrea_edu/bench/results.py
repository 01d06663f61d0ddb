"""Benchmark results on disk: the JSON schema, validation and loading (the writer is the
laboratory's andrea_lab.bench.writer.write_results).

Introduced in the chapter "The configuration mirrors the hardware"; every chapter that shows a
committed measurement reads it with `load_results` (re-exported by andrea_edu.bench).

    validate_result(obj)                    ValueError unless obj follows SCHEMA (+ timing sanity)
    load_results(suite, device="any")       committed results (GPU first) or None; a file that
                                            is there but invalid raises DataFileError (one
                                            line: the file and the reason)
    data_dir()                              where committed results live: $ANDREA_DATA_DIR,
                                            else the repository's book/data
Files are found by andrea_edu.data.data_folder ($ANDREA_DATA_DIR; beside the installed
package's repository; relative to the notebook). Validation: the schema, plus what a schema does
not say: timings finite and 0 <= min <= median <= max, TFLOP/s consistent with the FLOPs and the
median (a timing scaled by 1000 is caught), the sizes every chapter reads present in params, and
the device in the file agreeing with its name and with the device asked for. JSON's NaN and
Infinity are refused. jsonschema is used when installed; the GPU machines' image lacks it, so a
small validator for the subset of JSON Schema that SCHEMA uses stands in there.
"""
from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

from andrea_edu.data import (DataFileError, data_folder, data_search_dirs, first_nonfinite,
                             listed_but_missing, manifest_problem, provenance)

SCHEMA_VERSION = 1
SUITES = ("headdim", "projections", "layout")


_NUM = {"type": ["number", "null"]}
REQUIRED_PARAMS = ("B", "T", "d_model", "n_head", "head_dim", "dtype")  # every chapter reads them
_TIMES = ("min_ms", "median_ms", "max_ms")
RECORD_SCHEMA = {
    "type": "object",
    "required": ["case", "backend", "status", "params"],
    "properties": {
        "case": {"type": "string"}, "backend": {"type": "string"},
        "status": {"enum": ["ok", "unavailable", "invalid", "failed", "skipped"]},
        "reason": {"type": ["string", "null"]}, "params": {"type": "object", "required": list(REQUIRED_PARAMS)},
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
                         "andrea_edu", "git_commit", "date_utc"],
            "properties": {"device_kind": {"enum": ["cpu", "gpu"]},
                           "device": {"type": "string"}, "device_slug": {"type": "string"},
                           "driver": {"type": ["string", "null"]},
                           "cuda": {"type": ["string", "null"]}, "torch": {"type": "string"},
                           "andrea_edu": {"type": "string"}, "git_commit": {"type": "string"},
                           "date_utc": {"type": "string"},
                           # shown in the chapters' captions: a number, never text or negative
                           "load_avg_1min": {"type": ["number", "null"], "minimum": 0},
                           "cpu_threads": {"type": ["integer", "null"], "minimum": 1},
                           "cpu_count": {"type": ["integer", "null"], "minimum": 1}}},
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
    types: dict[str, type | tuple[type, ...]] = {
        "object": dict, "array": list, "string": str, "integer": int, "number": (int, float),
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


def validate_result(obj, expect_device: str | None = None, file_name: str | None = None) -> None:
    """Raise ValueError unless obj is a valid results object: SCHEMA, plus: a CPU file is
    labelled "CPU: ..."; every number finite; an "ok" record has 0 <= min <= median <= max,
    non-negative TFLOP/s equal to flops / median (so a timing scaled by 1000 is caught);
    expect_device "cpu"/"gpu": the file must be that kind; file_name: its device part must be
    the file's device_slug (CPU data in a GPU-named file is refused)."""
    if isinstance(obj, dict) and isinstance(obj.get("provenance"), dict):
        # the schema names today's keys; a file committed under older ones is read as them
        obj = {**obj, "provenance": provenance(obj)}
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
    if (prov["device_kind"] == "cpu") != (prov["device_slug"] == "cpu"):
        raise ValueError(f"provenance: device_kind {prov['device_kind']!r} but device_slug "
                         f"{prov['device_slug']!r}")
    if expect_device in ("cpu", "gpu") and prov["device_kind"] != expect_device:
        raise ValueError(f"holds {prov['device_kind'].upper()} results ({prov['device']}) where "
                         f"{expect_device.upper()} results were asked for")
    if file_name is not None:
        want = f"bench_{obj['suite']}_{prov['device_slug']}.json"
        if Path(file_name).name != want:
            raise ValueError(f"its content ({obj['suite']}, {prov['device_kind']} "
                             f"{prov['device']!r}) belongs in {want}, not {Path(file_name).name}")
    for i, r in enumerate(obj["records"]):
        at = f"records[{i}] ({r['case']}, {r['backend']})"
        for k, v in r.items():
            if isinstance(v, float) and not math.isfinite(v):
                raise ValueError(f"{at}: {k} = {v} is not a finite number")
        if r["status"] != "ok":
            continue
        t = [r.get(k) for k in _TIMES]
        if any(x is None for x in t) or not (0 < t[0] <= t[1] <= t[2]):
            raise ValueError(f"{at} is 'ok' but its timings {t} are not 0 < min <= median <= max")
        if t[2] > 3.6e6:
            raise ValueError(f"{at}: max_ms = {t[2]} is more than an hour per call")
        # the spread and the timing check (files written before them lack both: still valid,
        # and bench.timing.timing_ok refuses to rest a ratio or verdict on such a record)
        q = [r.get(k) for k in ("p25_ms", "p75_ms")]
        if any(x is not None for x in q) and (None in q or not (
                t[0] <= q[0] * (1 + 1e-9) and q[0] <= t[1] * (1 + 1e-9)
                and t[1] <= q[1] * (1 + 1e-9) and q[1] <= t[2] * (1 + 1e-9))):
            raise ValueError(f"{at}: p25_ms, p75_ms = {q} do not lie in order between min, "
                             f"median and max {t}")
        if "quality_ok" in r and not isinstance(r["quality_ok"], bool):
            raise ValueError(f"{at}: quality_ok = {r['quality_ok']!r} must be true or false")
        if r.get("quality_reason") is not None and not isinstance(r["quality_reason"], str):
            raise ValueError(f"{at}: quality_reason must be a string or null")
        for k in ("tflops", "time_ratio_to_sdpa", "max_abs_err", "flops"):
            if r.get(k) is not None and r[k] < 0:
                raise ValueError(f"{at}: {k} = {r[k]} is negative")
        if r.get("flops") and r.get("tflops") is not None:
            expect = r["flops"] / (t[1] * 1e-3) / 1e12
            if not math.isclose(r["tflops"], expect, rel_tol=1e-3, abs_tol=1e-12):
                raise ValueError(f"{at}: tflops = {r['tflops']:.4g} but flops / median_ms gives "
                                 f"{expect:.4g} (a timing or the FLOP count was changed)")
    _check_record_values(obj)


_ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
# The layout suite's five measurements (bench.matmuls.layout_suite): each case has all five.
SUITE_BACKENDS = {"layout": ("scores-contiguous", "scores-strided", "copy-contiguous",
                             "sdpa-contiguous", "sdpa-strided")}
MAX_ABS_ERR = 1.0  # outputs are averages of v rows of order 1: an error of 1 is a wrong kernel


def expected_work(suite: str, r: dict) -> tuple[str, float] | None:
    """("flops" or "bytes_moved", the value the file's flop_formula gives for r's params), or
    None where the record's params do not determine it."""
    p = r["params"]
    try:
        B, T, nh, hs = (int(p[k]) for k in ("B", "T", "n_head", "head_dim"))
    except (KeyError, TypeError, ValueError):
        return None
    if suite == "headdim":
        return "flops", 4 * B * nh * T * T * hs / (2 if p.get("causal") else 1)
    if suite == "projections":
        C = nh * hs
        return "flops", 2 * B * T * C * 3 * C
    if suite == "layout":
        if r.get("bytes_moved") is not None:
            return "bytes_moved", 2 * B * nh * T * hs * _ELEMENT_BYTES.get(p.get("dtype"), 0)
        return "flops", 2 * B * nh * T * T * hs
    return None


def _check_record_values(obj: dict) -> None:
    """What a schema cannot say about the records: no (case, backend) twice; params that agree
    with each other (n_head x head_dim = d_model); FLOPs and bytes as the file's formula gives
    them; GB/s and every time_ratio_to_<X> consistent with the medians; max_abs_err below
    MAX_ABS_ERR; an "ok" record timed at most the settings' repeats (the case budget
    lowers them for a slow case; the record says how many ran)."""
    recs = obj["records"]
    seen: dict[tuple[str, str], int] = {}
    for i, r in enumerate(recs):
        key = (r["case"], r["backend"])
        if key in seen:
            raise ValueError(f"records[{i}] ({key[0]}, {key[1]}) repeats records[{seen[key]}]: "
                             f"one record per (case, backend)")
        seen[key] = i
    by_key = {(r["case"], r["backend"]): r for r in recs}
    first: dict[str, tuple[int, dict]] = {}
    for i, r in enumerate(recs):  # the backends of one case measure the same problem
        first_i, first_params = first.setdefault(r["case"], (i, r["params"]))
        if r["params"] != first_params:
            diff = sorted(k for k in set(r["params"]) | set(first_params)
                          if r["params"].get(k) != first_params.get(k))
            raise ValueError(f"records[{i}] ({r['case']}, {r['backend']}): params differ from "
                             f"records[{first_i}] of the same case in {diff}")
    shapes = obj["settings"].get("shapes")
    if shapes is not None:
        if not isinstance(shapes, dict):
            raise ValueError(f"settings.shapes must be an object, got {type(shapes).__name__}")
        for name, sh in shapes.items():
            if not (isinstance(sh, dict) and all(isinstance(sh.get(k), int) and not isinstance(
                    sh.get(k), bool) and sh[k] >= 1 for k in ("B", "T", "d_model"))):
                raise ValueError(f"settings.shapes.{name} must hold integers B, T, d_model >= 1, "
                                 f"got {sh}")
        used = sorted({r["params"]["shape"] for r in recs if "shape" in r["params"]} - set(shapes))
        if used:
            raise ValueError(f"records use shape(s) {used} that settings.shapes does not define")
    cases: dict[str, set] = {}
    for r in recs:
        cases.setdefault(r["case"], set()).add(r["backend"])
    sets = {frozenset(b) for b in cases.values()}
    if len(sets) > 1:
        full = set().union(*cases.values())
        case, have = next((c, b) for c, b in cases.items() if b != full)
        raise ValueError(f"records: case {case!r} lacks backend(s) {sorted(full - have)} that "
                         f"the other cases have (one record per case and backend)")
    suite_backends = SUITE_BACKENDS.get(obj["suite"])
    if suite_backends is not None and recs and set(suite_backends) != set().union(*cases.values()):
        raise ValueError(f"records: the {obj['suite']} suite measures the backends "
                         f"{list(suite_backends)}, "
                         f"the file has {sorted(set().union(*cases.values()))}")
    for i, r in enumerate(recs):
        at = f"records[{i}] ({r['case']}, {r['backend']})"
        p = r["params"]
        for k in ("B", "T", "n_head", "head_dim", "d_model"):
            v = p.get(k)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ValueError(f"{at}: params.{k} = {v!r}; expected an integer >= 1")
        if p.get("d_model") is not None and p["n_head"] * p["head_dim"] != p["d_model"] and \
                obj["suite"] != "headdim":
            raise ValueError(f"{at}: params n_head x head_dim = {p['n_head'] * p['head_dim']} "
                             f"but d_model = {p['d_model']}")
        if obj["suite"] == "layout" and r["status"] == "ok":
            B, T, C, nh, hs = (p.get(k) for k in ("B", "T", "d_model", "n_head", "head_dim"))
            for k, want in (("q_strides", [T * C, hs, C, 1]),  # the (B, nh, T, hs) view of (B, T, C)
                            ("contiguous_strides", [nh * T * hs, T * hs, hs, 1])):
                if p.get(k) != want:
                    raise ValueError(f"{at}: params.{k} = {p.get(k)} but a (B, n_head, T, "
                                     f"head_dim) = ({B}, {nh}, {T}, {hs}) tensor has {want}")
        ops = r.get("aten_ops")
        if ops is not None and not (isinstance(ops, dict) and all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 1
                for k, v in ops.items())):
            raise ValueError(f"{at}: aten_ops must map op names to counts >= 1, got {ops}")
        if r["status"] != "ok":
            continue
        need = ["median_ms", "repeats", "max_abs_err", "bytes_moved" if "bytes_moved" in r else "flops"]
        missing = [k for k in need if r.get(k) is None]
        if missing:
            raise ValueError(f"{at} is 'ok' but lacks {missing}")
        work = expected_work(obj["suite"], r)
        if work is not None and r.get(work[0]) is not None and not math.isclose(
                r[work[0]], work[1], rel_tol=1e-9):
            raise ValueError(f"{at}: {work[0]} = {r[work[0]]:.6g} but the file's formula gives "
                             f"{work[1]:.6g} for its params")
        if r.get("bytes_moved") is not None and r.get("gb_per_s") is not None and not math.isclose(
                r["gb_per_s"], r["bytes_moved"] / (r["median_ms"] * 1e-3) / 1e9, rel_tol=1e-6):
            raise ValueError(f"{at}: gb_per_s = {r['gb_per_s']:.4g} but bytes_moved / median_ms "
                             f"gives {r['bytes_moved'] / (r['median_ms'] * 1e-3) / 1e9:.4g}")
        if r.get("max_abs_err") is not None and not r["max_abs_err"] < MAX_ABS_ERR:
            raise ValueError(f"{at}: max_abs_err = {r['max_abs_err']} is not below {MAX_ABS_ERR} "
                             f"(attention outputs are of order 1: the result would be wrong)")
        reps = obj["settings"].get("repeats")  # asked for; a case budget may run fewer
        if r.get("repeats") is not None and reps is not None and r["repeats"] > reps:
            raise ValueError(f"{at}: repeats = {r['repeats']} but settings.repeats = {reps} "
                             f"(a case runs at most the repeats asked for)")
        for k, v in r.items():
            if not k.startswith("time_ratio_to_") or v is None:
                continue
            x = k[len("time_ratio_to_"):]
            ref = by_key.get((r["case"], x)) or by_key.get(
                (r["case"], r["backend"].split("-")[0] + "-" + x))
            if ref is None or ref["status"] != "ok" or not ref.get("median_ms"):
                raise ValueError(f"{at}: {k} = {v} but the case has no measured {x!r} record")
            want = r["median_ms"] / ref["median_ms"]
            if not math.isclose(v, want, rel_tol=1e-6):
                raise ValueError(f"{at}: {k} = {v:.6g} but median_ms / {ref['backend']}'s "
                                 f"median_ms = {want:.6g}")


def data_dir() -> Path:
    """Where committed results live: $ANDREA_DATA_DIR, else the repository's book/data (the
    first of andrea_edu.data.data_search_dirs). Writers (andrea_lab.bench.writer) default to
    andrea_lab.store.default_out_dir()."""
    return data_search_dirs()[0]


def read_results_file(path, expect_device: str | None = None) -> dict:
    """One results file, parsed and validated; DataFileError (one line: the file and the
    reason) when it cannot be trusted."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text(), parse_constant=lambda c: float(c))
    except json.JSONDecodeError as e:
        raise DataFileError(f"{path}: not valid JSON (truncated or damaged?): {e}") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise DataFileError(f"{path}: {e}") from None
    problem = manifest_problem(path)
    if problem:
        raise DataFileError(f"{path}: {problem}")
    bad = first_nonfinite(obj)
    if bad:
        raise DataFileError(f"{path}: {bad} is NaN or Infinity; every number in a results "
                               f"file must be finite (null where nothing was measured)")
    try:
        if not isinstance(obj, dict):
            raise ValueError(f"top level is {type(obj).__name__}, not an object")
        validate_result(obj, expect_device=expect_device, file_name=path.name)
    except (ValueError, KeyError, TypeError) as e:
        raise DataFileError(f"{path}: {e}") from None
    obj["_path"] = str(path)
    return obj


def load_results(suite: str, device: str = "any", data_dir_=None,
                 errors: str = "raise") -> dict | None:
    """The committed results of one suite ("headdim", "projections", "layout"), or None when
    there is no file.

    device: "gpu" (any GPU file), "cpu", or "any" (a GPU file when one exists, else the CPU one).
    A file that is there but invalid (damaged, truncated, out of range, the wrong device) is
    never shown: errors="raise" raises DataFileError naming the file and the reason;
    errors="warn" warns the same line and goes on to the next file.
    """
    if suite not in SUITES:
        raise ValueError(f"suite={suite!r} is not one of {SUITES}")
    if device not in ("any", "gpu", "cpu"):
        raise ValueError(f"device={device!r} is not one of 'any', 'gpu', 'cpu'")
    if errors not in ("raise", "warn"):
        raise ValueError(f"errors={errors!r} is not one of 'raise', 'warn'")
    folder = Path(data_dir_) if data_dir_ is not None else data_folder(f"bench_{suite}_*.json")
    if folder is None:
        return None
    gone = listed_but_missing(folder, f"bench_{suite}_*.json")
    if gone:
        if errors == "raise":
            raise DataFileError(gone)
        warnings.warn(f"{gone} (skipped, not shown)", RuntimeWarning)
    files = sorted(folder.glob(f"bench_{suite}_*.json"))
    gpu = [f for f in files if not f.name.endswith("_cpu.json")]
    cpu = [f for f in files if f.name.endswith("_cpu.json")]
    order = {"gpu": gpu, "cpu": cpu, "any": gpu + cpu}[device]
    for f in order:
        try:
            return read_results_file(f, expect_device="cpu" if f in cpu else "gpu")
        except DataFileError as e:
            if errors == "raise":
                raise
            warnings.warn(f"{e} (skipped, not shown)", RuntimeWarning)
    return None


def load_all_results(suite: str, data_dir_=None, errors: str = "raise") -> list[dict]:
    """Every committed GPU results file of one suite, one per GPU (an H100's and an H200's
    both, in file-name order), each read and checked as load_results reads one: where both
    exist, neither shadows the other. [] when there is none."""
    if suite not in SUITES:
        raise ValueError(f"suite={suite!r} is not one of {SUITES}")
    if errors not in ("raise", "warn"):
        raise ValueError(f"errors={errors!r} is not one of 'raise', 'warn'")
    folder = Path(data_dir_) if data_dir_ is not None else data_folder(f"bench_{suite}_*.json")
    if folder is None:
        return []
    out = []
    for f in sorted(folder.glob(f"bench_{suite}_*.json")):
        if f.name.endswith("_cpu.json"):
            continue
        try:
            out.append(read_results_file(f, expect_device="gpu"))
        except DataFileError as e:
            if errors == "raise":
                raise
            warnings.warn(f"{e} (skipped, not shown)", RuntimeWarning)
    return out
