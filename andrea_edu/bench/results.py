"""Benchmark results on disk: the JSON Schema, validation and loading (the writer is the
laboratory's andrea_lab.bench.writer.write_results).

Introduced in the chapter "The configuration mirrors the hardware"; every chapter that shows a
committed measurement reads it with `load_results` (re-exported by andrea_edu.bench).

    SCHEMA                                  a results file in JSON Schema (draft 7): types,
                                            ranges, enums, patterns, required keys, no unknown
                                            key in a record; checked with jsonschema
    validate_result(obj)                    ValueError unless obj follows SCHEMA and
                                            `check_values` (what a schema cannot say)
    load_results(suite, device="any")       committed results (GPU first) or None; a file that
                                            is there but invalid raises DataFileError (one
                                            line: the file and the reason)
    data_dir()                              where committed results live: $ANDREA_DATA_DIR,
                                            else the repository's book/data
Files are found by andrea_edu.data.data_folder ($ANDREA_DATA_DIR; beside the installed
package's repository; relative to the notebook). What only Python says (`check_values`): every
number finite; the device in the file agreeing with its name and with the device asked for; an
"ok" record's 0 < min <= median <= max (and p25, p75 between), TFLOP/s, GB/s and time ratios
consistent with the medians (a timing scaled by 1000 is caught), FLOPs and bytes as the file's
formula gives them, one record per (case, backend), the same backends in every case. The GPU
image's first stage has no jsonschema: there the writer checks values only, says so, and the
file is validated whole where it is landed (scripts/land_gpu_out.py) and loaded.
"""
from __future__ import annotations

import functools
import json
import math
import warnings
from pathlib import Path

from andrea_edu.data import (DataFileError, data_folder, data_search_dirs, first_nonfinite,
                             listed_but_missing, manifest_problem, provenance)

SCHEMA_VERSION = 1
SUITES = ("headdim", "projections", "layout")
REQUIRED_PARAMS = ("B", "T", "d_model", "n_head", "head_dim", "dtype")  # every chapter reads them
_TIMES = ("min_ms", "median_ms", "max_ms")
_ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
MAX_ABS_ERR = 1.0  # outputs are averages of v rows of order 1: an error of 1 is a wrong kernel

_TEXT = {"type": ["string", "null"]}
_AMOUNT = {"type": ["number", "null"], "minimum": 0}  # a count, a rate or a ratio: never negative
_MS = {"type": ["number", "null"], "maximum": 3.6e6}  # at most an hour per call (0 < min: below)
_COUNT = {"type": ["integer", "null"], "minimum": 1}
_SIZE = {"type": ["integer", "null"], "minimum": 1}
RECORD_SCHEMA = {
    "type": "object",
    "required": ["case", "backend", "status", "params"],
    "properties": {
        "case": {"type": "string"}, "backend": {"type": "string"},
        "status": {"enum": ["ok", "unavailable", "invalid", "failed", "skipped"]},
        "reason": _TEXT,
        "params": {"type": "object", "required": list(REQUIRED_PARAMS),
                   "properties": {**{k: _SIZE for k in ("B", "T", "n_head", "head_dim", "d_model")},
                                  "dtype": {"enum": list(_ELEMENT_BYTES)},
                                  "causal": {"type": "boolean"}, "shape": {"type": "string"},
                                  "series": {"type": "string"}}},
        **{k: _MS for k in ("min_ms", "median_ms", "max_ms", "p25_ms", "p75_ms")},
        **{k: _AMOUNT for k in ("flops", "tflops", "bytes_moved", "gb_per_s", "iqr_over_median",
                                "host_ms_per_call", "host_path_ms", "cpu_median_ms")},
        "max_abs_err": {"type": ["number", "null"], "minimum": 0, "exclusiveMaximum": MAX_ABS_ERR},
        "repeats": _COUNT, "calls_per_sample": _COUNT, "threads": _COUNT,
        "waited_samples": {"type": ["integer", "null"], "minimum": 0},
        "blas_calls": {"type": ["integer", "null"], "minimum": 0},
        "aten_ops": {"type": ["object", "null"], "additionalProperties": {"type": "integer",
                                                                         "minimum": 1}},
        "quality_ok": {"type": "boolean"}, "quality_reason": _TEXT,
        "host_bound": {"type": "boolean"},
        "timer": _TEXT, "cache": _TEXT, "cold": {"type": "object"},
        "sdpa_choice": _TEXT, "sdpa_eligible": {"type": "object",
                                                "additionalProperties": {"type": "boolean"}},
        "ran": _TEXT, "kernel": _TEXT, "decision": _TEXT,
        "fallbacks": {"type": "array", "items": {"type": "string"}},
    },
    "patternProperties": {"^time_ratio_to_[a-z0-9:_-]+$": _AMOUNT},
    "additionalProperties": False,  # a key no writer writes is damage, or a writer unchecked
    # an "ok" record was timed and checked: its timings, repeats and error, and its work
    # (bytes for a copy, FLOPs for the rest)
    "if": {"properties": {"status": {"const": "ok"}}},
    "then": {"required": [*_TIMES, "repeats", "max_abs_err"],
             "properties": {**{k: {"type": "number"} for k in (*_TIMES, "max_abs_err")},
                            "repeats": {"type": "integer"}},
             "if": {"required": ["bytes_moved"]},
             "then": {"properties": {"bytes_moved": {"type": "number"}}},
             "else": {"required": ["flops"], "properties": {"flops": {"type": "number"}}}},
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
                           "device": {"type": "string"},
                           "device_slug": {"type": "string", "pattern": "^[a-z0-9-]+$"},
                           "driver": _TEXT, "cuda": _TEXT, "torch": {"type": "string"},
                           "andrea_edu": {"type": "string"}, "git_commit": {"type": "string"},
                           "date_utc": {"type": "string"},
                           # shown in the chapters' captions: a number, never text or negative
                           "load_avg_1min": {"type": ["number", "null"], "minimum": 0},
                           "cpu_threads": _COUNT, "cpu_count": _COUNT},
            # CPU results are labelled "CPU: <model>" and named *_cpu.json; a GPU's never are
            "if": {"properties": {"device_kind": {"const": "cpu"}}},
            "then": {"properties": {"device": {"pattern": "^CPU"},
                                    "device_slug": {"const": "cpu"}}},
            "else": {"properties": {"device_slug": {"not": {"const": "cpu"}}}}},
        "settings": {"type": "object", "required": ["dtype", "repeats", "warmup", "timer"],
                     "properties": {"repeats": {"type": "integer", "minimum": 1},
                                    "warmup": {"type": "integer", "minimum": 0},
                                    "timer": {"enum": ["cuda-events", "perf_counter"]},
                                    "dtype": {"enum": list(_ELEMENT_BYTES)},
                                    "fast": {"type": "boolean"},
                                    "case_budget_s": {"type": ["number", "null"], "minimum": 0},
                                    "shapes": {"type": ["object", "null"], "additionalProperties": {
                                        "type": "object", "required": ["B", "T", "d_model"],
                                        "properties": {k: {"type": "integer", "minimum": 1}
                                                       for k in ("B", "T", "d_model")}}}}},
        "flop_formula": {"type": "string"},
        "options": {"type": "object"},
        "incomplete": {"type": "string"},
        "records": {"type": "array", "items": RECORD_SCHEMA},
    },
    "additionalProperties": False,
}


@functools.lru_cache(maxsize=1)
def _validator():
    import jsonschema  # a requirement of the book (requirements.txt); the GPU image lacks it
    return jsonschema.Draft7Validator(SCHEMA)


def validate_result(obj, expect_device: str | None = None, file_name: str | None = None) -> None:
    """Raise ValueError unless obj is a valid results object: SCHEMA (with jsonschema: one line
    naming the first place that does not match), then `check_values`. A file committed under
    older provenance keys (data.PROVENANCE_KEYS) is read as today's."""
    if isinstance(obj, dict) and isinstance(obj.get("provenance"), dict):
        obj = {**obj, "provenance": provenance(obj)}
    from jsonschema.exceptions import best_match
    error = best_match(_validator().iter_errors(obj))
    if error is not None:
        raise ValueError(f"results do not match the schema at "
                         f"{'/'.join(map(str, error.absolute_path)) or '$'}: {error.message}")
    check_values(obj, expect_device, file_name)


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


# The layout suite's five measurements (bench.matmuls.layout_suite): each case has all five.
SUITE_BACKENDS = {"layout": ("scores-contiguous", "scores-strided", "copy-contiguous",
                             "sdpa-contiguous", "sdpa-strided")}


def _close(a: float, b: float, rel: float) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def check_values(obj: dict, expect_device: str | None = None, file_name: str | None = None
                 ) -> None:
    """What SCHEMA cannot say, for an object that follows it (ValueError, one line): every
    number finite; expect_device "cpu"/"gpu": the file holds that kind; file_name: named for its
    suite and device_slug (CPU data in a GPU-named file is refused); one record per (case,
    backend), the same params and the same backends in every case (the layout suite's five);
    shapes the records use defined in settings; n_head x head_dim = d_model, the layout's
    strides; and for an "ok" record: 0 < min <= median <= max with p25, p75 between, at most the
    settings' repeats (a case budget may run fewer), FLOPs or bytes as the file's formula gives
    them, and TFLOP/s, GB/s and every time_ratio_to_<X> as the medians give them."""
    bad = first_nonfinite(obj)
    if bad:
        raise ValueError(f"{bad} is not a finite number")
    prov, recs, suite = obj["provenance"], obj["records"], obj["suite"]
    if expect_device in ("cpu", "gpu") and prov["device_kind"] != expect_device:
        raise ValueError(f"holds {prov['device_kind'].upper()} results ({prov['device']}) where "
                         f"{expect_device.upper()} results were asked for")
    want = f"bench_{suite}_{prov['device_slug']}.json"
    if file_name is not None and Path(file_name).name != want:
        raise ValueError(f"its content ({suite}, {prov['device_kind']} {prov['device']!r}) belongs "
                         f"in {want}, not {Path(file_name).name}")
    by_key: dict[tuple[str, str], dict] = {}
    first: dict[str, tuple[int, dict]] = {}
    cases: dict[str, set] = {}
    for i, r in enumerate(recs):
        key = (r["case"], r["backend"])
        if key in by_key:
            raise ValueError(f"records[{i}] ({key[0]}, {key[1]}) repeats records["
                             f"{recs.index(by_key[key])}]: one record per (case, backend)")
        by_key[key] = r
        cases.setdefault(r["case"], set()).add(r["backend"])
        first_i, first_params = first.setdefault(r["case"], (i, r["params"]))
        if r["params"] != first_params:  # the backends of one case measure the same problem
            diff = sorted(k for k in set(r["params"]) | set(first_params)
                          if r["params"].get(k) != first_params.get(k))
            raise ValueError(f"records[{i}] ({r['case']}, {r['backend']}): params differ from "
                             f"records[{first_i}] of the same case in {diff}")
    used = sorted({r["params"]["shape"] for r in recs if "shape" in r["params"]}
                  - set(obj["settings"].get("shapes") or {}))
    if used and obj["settings"].get("shapes") is not None:
        raise ValueError(f"records use shape(s) {used} that settings.shapes does not define")
    full = set().union(*cases.values()) if cases else set()
    lacking = next(((c, b) for c, b in cases.items() if b != full), None)
    if lacking:
        raise ValueError(f"records: case {lacking[0]!r} lacks backend(s) "
                         f"{sorted(full - lacking[1])} that the other cases have (one record per "
                         f"case and backend)")
    if suite in SUITE_BACKENDS and recs and set(SUITE_BACKENDS[suite]) != full:
        raise ValueError(f"records: the {suite} suite measures the backends "
                         f"{list(SUITE_BACKENDS[suite])}, the file has {sorted(full)}")
    for i, r in enumerate(recs):
        _check_record(suite, r, f"records[{i}] ({r['case']}, {r['backend']})", by_key,
                      obj["settings"]["repeats"])


def _check_record(suite: str, r: dict, at: str, by_key: dict, asked_repeats: int) -> None:
    """check_values for one record (`at` names it)."""
    p = r["params"]
    if p.get("d_model") is not None and p["n_head"] * p["head_dim"] != p["d_model"] and \
            suite != "headdim":
        raise ValueError(f"{at}: params n_head x head_dim = {p['n_head'] * p['head_dim']} "
                         f"but d_model = {p['d_model']}")
    if r["status"] != "ok":
        return
    if suite == "layout":
        B, T, C, nh, hs = (p.get(k) for k in ("B", "T", "d_model", "n_head", "head_dim"))
        for k, want in (("q_strides", [T * C, hs, C, 1]),  # the (B, nh, T, hs) view of (B, T, C)
                        ("contiguous_strides", [nh * T * hs, T * hs, hs, 1])):
            if p.get(k) != want:
                raise ValueError(f"{at}: params.{k} = {p.get(k)} but a (B, n_head, T, "
                                 f"head_dim) = ({B}, {nh}, {T}, {hs}) tensor has {want}")
    t = [r[k] for k in _TIMES]
    if not 0 < t[0] <= t[1] <= t[2]:
        raise ValueError(f"{at} is 'ok' but its timings {t} are not 0 < min <= median <= max")
    # the spread (files written before it lack it: still valid, and bench.timing.timing_ok
    # refuses to rest a ratio or verdict on such a record)
    q: list = [r.get(k) for k in ("p25_ms", "p75_ms")]
    if any(x is not None for x in q) and (None in q or not (
            t[0] <= q[0] * (1 + 1e-9) and q[0] <= t[1] * (1 + 1e-9)
            and t[1] <= q[1] * (1 + 1e-9) and q[1] <= t[2] * (1 + 1e-9))):
        raise ValueError(f"{at}: p25_ms, p75_ms = {q} do not lie in order between min, "
                         f"median and max {t}")
    if r["repeats"] > asked_repeats:
        raise ValueError(f"{at}: repeats = {r['repeats']} but settings.repeats = {asked_repeats} "
                         f"(a case runs at most the repeats asked for)")
    work = expected_work(suite, r)
    if work is not None and r.get(work[0]) is not None and not _close(r[work[0]], work[1], 1e-9):
        raise ValueError(f"{at}: {work[0]} = {r[work[0]]:.6g} but the file's formula gives "
                         f"{work[1]:.6g} for its params")
    per_s = 1 / (t[1] * 1e-3)
    if r.get("flops") and r.get("tflops") is not None and not _close(
            r["tflops"], r["flops"] * per_s / 1e12, 1e-3):
        raise ValueError(f"{at}: tflops = {r['tflops']:.4g} but flops / median_ms gives "
                         f"{r['flops'] * per_s / 1e12:.4g} (a timing or the FLOP count was "
                         f"changed)")
    if r.get("bytes_moved") is not None and r.get("gb_per_s") is not None and not _close(
            r["gb_per_s"], r["bytes_moved"] * per_s / 1e9, 1e-6):
        raise ValueError(f"{at}: gb_per_s = {r['gb_per_s']:.4g} but bytes_moved / median_ms "
                         f"gives {r['bytes_moved'] * per_s / 1e9:.4g}")
    for k, v in r.items():
        if not k.startswith("time_ratio_to_") or v is None:
            continue
        x = k[len("time_ratio_to_"):]
        ref = by_key.get((r["case"], x)) or by_key.get(
            (r["case"], r["backend"].split("-")[0] + "-" + x))
        if ref is None or ref["status"] != "ok" or not ref.get("median_ms"):
            raise ValueError(f"{at}: {k} = {v} but the case has no measured {x!r} record")
        if not _close(v, t[1] / ref["median_ms"], 1e-6):
            raise ValueError(f"{at}: {k} = {v:.6g} but median_ms / {ref['backend']}'s "
                             f"median_ms = {t[1] / ref['median_ms']:.6g}")


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


def _read_each(suite: str, device: str, data_dir_, errors: str):
    """The committed results files of one suite, read and checked (`read_results_file`), in the
    order device asks for ("gpu": every GPU file by name; "cpu"; "any": the GPU files, then the
    CPU one). A file that is there but invalid, or listed but gone, raises DataFileError
    (errors="raise") or warns the same line and is skipped (errors="warn")."""
    if suite not in SUITES:
        raise ValueError(f"suite={suite!r} is not one of {SUITES}")
    if device not in ("any", "gpu", "cpu"):
        raise ValueError(f"device={device!r} is not one of 'any', 'gpu', 'cpu'")
    if errors not in ("raise", "warn"):
        raise ValueError(f"errors={errors!r} is not one of 'raise', 'warn'")
    folder = Path(data_dir_) if data_dir_ is not None else data_folder(f"bench_{suite}_*.json")
    if folder is None:
        return

    def refuse(e: DataFileError) -> None:
        if errors == "raise":
            raise e
        warnings.warn(f"{e} (skipped, not shown)", RuntimeWarning)
    gone = listed_but_missing(folder, f"bench_{suite}_*.json")  # deleted: damage, not "no data"
    if gone:
        refuse(DataFileError(gone))
    files = sorted(folder.glob(f"bench_{suite}_*.json"))
    cpu = [f for f in files if f.name.endswith("_cpu.json")]
    gpu = [f for f in files if f not in cpu]
    for f in {"gpu": gpu, "cpu": cpu, "any": gpu + cpu}[device]:
        try:
            obj = read_results_file(f, expect_device="cpu" if f in cpu else "gpu")
        except DataFileError as e:
            refuse(e)
            continue
        yield obj


def load_results(suite: str, device: str = "any", data_dir_=None,
                 errors: str = "raise") -> dict | None:
    """The committed results of one suite ("headdim", "projections", "layout"): the first
    valid file of `_read_each` (device "gpu": a GPU file, "cpu", "any": a GPU file when one
    exists, else the CPU one), or None when there is none. A file that is there but invalid
    (damaged, truncated, out of range, the wrong device) is never shown: errors="raise" raises
    DataFileError naming the file and the reason; errors="warn" warns the same line and goes on
    to the next file."""
    return next(_read_each(suite, device, data_dir_, errors), None)


def load_all_results(suite: str, data_dir_=None, errors: str = "raise") -> list[dict]:
    """Every committed GPU results file of one suite, one per GPU (an H100's and an H200's
    both, in file-name order), each read and checked as load_results reads one: where both
    exist, neither shadows the other. [] when there is none."""
    return list(_read_each(suite, "gpu", data_dir_, errors))
