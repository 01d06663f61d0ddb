"""Committed data that cannot be lost or silently wrong: validation of the bench results, the
sweep and the pipeline timings (one line naming the file and the reason), and no fast or empty
run replacing full-size data."""
from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from andrea_lab.pipeline_timing import save_timing
from andrea_edu.data import DataFileError
from andrea_edu.bench import results as R
from andrea_lab.bench.writer import write_results
from andrea_lab.make_sweep import save_sweep
from andrea_edu.heads import sweep as W
from andrea_edu.pipeline import timing as PT

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "book" / "data"


# ---------------------------------------------------------------- bench results
@pytest.fixture()
def layout(tmp_path):
    """The committed CPU layout file, copied into a scratch folder."""
    shutil.copy(DATA / "bench_layout_cpu.json", tmp_path)
    return tmp_path, json.loads((tmp_path / "bench_layout_cpu.json").read_text())


def test_committed_results_are_valid():
    for suite in R.SUITES:
        obj = R.load_results(suite, device="cpu")
        assert obj is not None and Path(obj["_path"]).parent == DATA


def _ok(obj):
    return next(r for r in obj["records"] if r["status"] == "ok")


def _mutate(kind, obj):
    r = _ok(obj)
    if kind == "negative":
        r["min_ms"] = -1.0
    elif kind == "times_1000":  # the timings scaled, the TFLOP/s left as they were
        for k in ("min_ms", "median_ms", "max_ms"):
            r[k] *= 1000
    elif kind == "negative_tflops":
        r["tflops"] = -r["tflops"]
    elif kind == "no_n_head":
        del r["params"]["n_head"]
    elif kind == "gpu_data_in_cpu_file":
        obj["provenance"].update(device_kind="gpu", device="NVIDIA H200", device_slug="nvidia-h200")
    return obj


@pytest.mark.parametrize("kind, reason", [
    ("negative", "min <= median"), ("times_1000", "flops / median"),
    ("negative_tflops", "less than the minimum of 0"), ("no_n_head", "n_head"),
    ("gpu_data_in_cpu_file", "holds GPU results")])
def test_loader_names_the_file_and_the_reason(layout, kind, reason):
    folder, good = layout
    (folder / "bench_layout_cpu.json").write_text(json.dumps(_mutate(kind, copy.deepcopy(good))))
    with pytest.raises(DataFileError) as e:
        R.load_results("layout", device="cpu", data_dir_=folder)
    msg = str(e.value)
    assert "\n" not in msg and "bench_layout_cpu.json" in msg and reason in msg, msg


@pytest.mark.parametrize("text, reason", [
    ('{"schema_version": 1, "suite": "lay', "not valid JSON"), ("", "not valid JSON"),
    ("[1, 2]", "not an object"), ('{"x": Infinity}', "Infinity"), ('{"x": NaN}', "NaN")])
def test_damaged_or_non_finite_files_are_refused(tmp_path, text, reason):
    (tmp_path / "bench_layout_cpu.json").write_text(text)
    with pytest.raises(DataFileError, match=reason):
        R.load_results("layout", data_dir_=tmp_path)
    with pytest.warns(RuntimeWarning, match="bench_layout_cpu.json"):
        assert R.load_results("layout", data_dir_=tmp_path, errors="warn") is None


def test_device_asked_for_must_match(layout):
    folder, good = layout
    fake = copy.deepcopy(good)  # CPU data in a GPU-named file
    (folder / "bench_layout_nvidia-h200.json").write_text(json.dumps(fake))
    with pytest.raises(DataFileError, match="holds CPU results .* GPU results were asked"):
        R.load_results("layout", device="gpu", data_dir_=folder)


def test_fast_or_empty_run_does_not_replace_full_data(layout):
    folder, good = layout
    before = (folder / "bench_layout_cpu.json").read_text()
    fast = copy.deepcopy(good)
    fast["settings"]["fast"] = True
    with pytest.raises(FileExistsError, match="full-size"):
        write_results(fast, folder)
    empty = copy.deepcopy(good)
    for r in empty["records"]:
        r.update(status="skipped", reason="budget")
        for k in ("min_ms", "median_ms", "max_ms", "tflops"):
            r.pop(k, None)
    with pytest.raises(FileExistsError, match="no 'ok' record"):
        write_results(empty, folder)
    assert (folder / "bench_layout_cpu.json").read_text() == before
    write_results(fast, folder, replace=True)  # asked for: done
    assert json.loads((folder / "bench_layout_cpu.json").read_text())["settings"]["fast"]


def test_results_are_found_beside_the_package_from_anywhere(tmp_path, monkeypatch):
    monkeypatch.delenv("ANDREA_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    found = R.load_results("layout")
    assert found is not None and Path(found["_path"]) == DATA / "bench_layout_cpu.json"
    monkeypatch.setenv("ANDREA_DATA_DIR", str(tmp_path))
    assert R.load_results("layout") is None


# ---------------------------------------------------------------- the sweep file
@pytest.fixture(scope="module")
def sweep_obj():
    return json.loads((DATA / W.DATA_NAME).read_text())


def test_committed_sweep_is_valid(sweep_obj):
    W.validate_sweep(sweep_obj, "committed")
    prov, runs = W.load_sweep(DATA / W.DATA_NAME)
    assert len(runs) == len(prov["n_heads"]) * len(prov["seeds"])


def _sweep_mutations():
    def truncated(o):
        return None

    def duplicate(o):
        o["runs"].append(copy.deepcopy(o["runs"][0]))

    def key_mismatch(o):
        o["runs"][0]["seed"] = 7

    def negative_loss(o):
        o["runs"][0]["train_loss"][3] = -1.0

    def score_above_one(o):
        o["runs"][0]["scores"][0][0][0][0] = 1.5

    def missing(o):
        del o["runs"][1]["probes"]

    def wrong_type(o):
        o["runs"][1]["param_count"] = "many"
    return {"truncated": (truncated, "not valid JSON"), "duplicate": (duplicate, "appears twice"),
            "key_mismatch": (key_mismatch, "settings say"),
            "negative_loss": (negative_loss, "train_loss must be finite and in"),
            "score_above_one": (score_above_one, "scores must be finite and in [0, 1]"),
            "missing": (missing, "'probes' is missing"), "wrong_type": (wrong_type, "param_count")}


@pytest.mark.parametrize("name", list(_sweep_mutations()))
def test_sweep_loader_refuses_bad_files_in_one_line(sweep_obj, tmp_path, name):
    mutate, reason = _sweep_mutations()[name]
    obj = copy.deepcopy(sweep_obj)
    path = tmp_path / "s.json"
    if mutate(obj) is None and name == "truncated":
        text = json.dumps(obj)
        path.write_text(text[: len(text) // 2])
    else:
        path.write_text(json.dumps(obj))
    with pytest.raises(DataFileError) as e:
        W.load_sweep(path)
    assert str(path) in str(e.value) and reason in str(e.value) and "\n" not in str(e.value)


def test_sweep_not_found_says_where_it_looked(tmp_path, monkeypatch):
    from andrea_edu.data import find_data
    monkeypatch.setenv("ANDREA_DATA_DIR", str(tmp_path))
    assert find_data(W.DATA_NAME) is None
    with pytest.raises(FileNotFoundError, match="looked in") as e:
        W.load_sweep()
    assert str(tmp_path / W.DATA_NAME) in str(e.value) and "\n" not in str(e.value)


def test_save_sweep_validates_before_writing(tmp_path, sweep_obj):
    _, runs = W.load_sweep(DATA / W.DATA_NAME)
    key = next(iter(runs))
    bad = copy.deepcopy(runs[key])
    bad.train_loss = np.full_like(bad.train_loss, np.inf)
    with pytest.raises(DataFileError):
        save_sweep(tmp_path / "s.json", {"what": "t"}, {key: bad})
    assert not (tmp_path / "s.json").exists()


# ---------------------------------------------------------------- pipeline timings
def _pipeline_dict():
    step = {"layer": 0, "name": next(iter(PT.STEP_INFO)), "median_ms": 2.0, "min_ms": 1.0}
    return {"config": "c", "B": 1, "T": 8, "dtype": "float32", "backend": "auto",
            "device": "CPU: test", "device_kind": "cpu", "repeats": 3, "steps": [step],
            "forward_ms": 3.0, "marked_forward_ms": 3.1, "decision": {}, "ops": {},
            "kernels": {}, "provenance": {"device_slug": "cpu"}}


def test_pipeline_round_trip_and_validation(tmp_path, monkeypatch):
    import dataclasses
    monkeypatch.setenv("ANDREA_GIT_COMMIT", "abc123")
    t = PT.StepTiming.from_dict(_pipeline_dict())
    path = save_timing(t, tmp_path)
    assert path.name == "pipeline_cpu.json"
    assert PT.load_pipeline_timing("cpu", data_dir_=tmp_path) == dataclasses.replace(
        t, provenance={**t.provenance, "git_commit": "abc123"})  # the writer stamps the commit
    (tmp_path / "SHA256SUMS").unlink()  # a scratch folder: the value checks alone, next
    changes: tuple[tuple[tuple[Any, ...], str], ...] = (
        (("steps", 0, "min_ms", -1.0), "min"), (("forward_ms", None), "forward_ms"))
    for change, reason in changes:
        d = _pipeline_dict()
        if change[0] == "steps":
            d["steps"][0][change[2]] = change[3]
        else:
            d[change[0]] = change[1]
        path.write_text(json.dumps(d))
        with pytest.raises(DataFileError, match=reason) as e:
            PT.load_pipeline_timing("cpu", data_dir_=tmp_path)
        assert "pipeline_cpu.json" in str(e.value)
    path.write_text('{"steps": [Infinity]}')
    with pytest.raises(DataFileError, match="Infinity"):
        PT.load_pipeline_timing("cpu", data_dir_=tmp_path)
    (tmp_path / "pipeline_nvidia-h200.json").write_text(json.dumps(_pipeline_dict()))
    with pytest.raises(DataFileError, match="holds CPU data"):
        PT.load_pipeline_timing("gpu", data_dir_=tmp_path)
    with pytest.raises(DataFileError, match="holds CPU data"):
        PT.load_all_pipeline_timings(data_dir_=tmp_path)


def test_every_gpu_pipeline_timing_is_read(tmp_path, monkeypatch):
    """Issue 41 item 6: an H100's and an H200's pipeline files both reach the chapter
    (load("pipeline_timing_gpus")), by file name; the CPU file is not among them."""
    from andrea_edu import data as D
    from andrea_lab.store import seal_folder
    for slug, name in (("nvidia-h100", "NVIDIA H100 (test)"), ("nvidia-h200", "NVIDIA H200 (test)")):
        d = {**_pipeline_dict(), "device": name, "device_kind": "gpu",
             "provenance": {"device_slug": slug}}
        (tmp_path / f"pipeline_{slug}.json").write_text(json.dumps(d))
    (tmp_path / "pipeline_cpu.json").write_text(json.dumps(_pipeline_dict()))
    seal_folder(tmp_path)
    monkeypatch.setenv("ANDREA_DATA_DIR", str(tmp_path))
    assert [t.device for t in D.load("pipeline_timing_gpus")] == ["NVIDIA H100 (test)",
                                                                  "NVIDIA H200 (test)"]
    assert D.load("pipeline_timing", device="gpu").device == "NVIDIA H100 (test)"
    assert PT.load_all_pipeline_timings(data_dir_=tmp_path / "none") == []


# ---------------------------------------------------------------- andrea_edu.data: one reader
def test_load_reads_every_kind_through_its_loader_and_refuses_an_unknown_one():
    from andrea_edu import data as D
    from andrea_edu.heads import path_runs as PR
    from andrea_edu.heads import text_runs as TR
    prov, runs = D.load("sweep")
    assert (prov, runs.keys()) == (W.load_sweep()[0], W.load_sweep()[1].keys())
    run = D.load("realtext_run")
    assert run.settings == TR.load_run(DATA / TR.RUN_FILE, with_model=False).settings
    assert D.load("toy_lab_model")[0] == TR.load_toy(DATA / TR.TOY_FILE)[0]
    assert D.load("realtext_paths") == PR.load_paths(DATA / PR.PATHS_FILE)
    from andrea_edu.bench import results as R
    for suite in R.SUITES:  # a kind whose loader picks the file (GPU first, else CPU)
        got = D.load(f"bench_{suite}", device="cpu")
        assert got == R.load_results(suite, device="cpu") and got["suite"] == suite
    assert D.load("bench_headdim", device="gpu", missing="none") is None  # none committed yet
    with pytest.raises(ValueError,
                       match="kind='nosuch'.*one of bench_headdim, bench_headdim_gpus, bench_layout"):
        D.load("nosuch")
    with pytest.raises(ValueError, match="missing='maybe' is not one of"):
        D.load("sweep", missing="maybe")


def test_load_says_where_it_looked_when_the_file_is_missing(tmp_path, monkeypatch):
    from andrea_edu import data as D
    monkeypatch.setenv("ANDREA_DATA_DIR", str(tmp_path))
    with pytest.raises(D.DataFileError, match="no committed specialization_sweep.json found"):
        D.load("sweep")
    assert D.load("sweep", missing="none") is None  # a chapter that computes it instead
    with pytest.raises(D.DataFileError, match=r"no committed pipeline_\*.json"):
        D.load("pipeline_timing", device="any")
    assert D.load("pipeline_timing", device="any", missing="none") is None
    assert D.load("realtext_variant", name="long", missing="none") is None


def test_provenance_reads_older_keys_under_todays_names():
    from andrea_edu import data as D
    bench = json.loads((DATA / "bench_layout_cpu.json").read_text())   # "date", "command"
    p = D.provenance(bench)
    assert p["date_utc"] == bench["provenance"]["date"] and "date" not in p
    assert p["produced_by"] == bench["provenance"]["command"]
    run = json.loads((DATA / "realtext_run.json").read_text())           # "cpu_provenance"
    assert D.provenance(run)["cpu_numerics"] == run["provenance"]["cpu_provenance"]
    sweep = json.loads((DATA / "specialization_sweep.json").read_text())  # today's keys already
    assert D.provenance(sweep) == sweep["provenance"]
    with pytest.raises(D.DataFileError, match="provenance must be an object"):
        D.provenance({"provenance": [1]})


def test_every_writer_builds_its_provenance_with_the_one_builder(monkeypatch):
    """New records get today's keys: the shared ones from data.new_provenance, then each
    writer's own; an own key that is a shared one, an older name of one or a writer's stamp
    (git_commit, code_hash) is refused. The writer's stamp (store.stamped) adds the commit and,
    given the code, its hash, and keeps a block's own (a record written again keeps them)."""
    import dataclasses

    from andrea_edu import data as D
    from andrea_lab import store
    from andrea_edu.bench import timing
    from andrea_edu.heads import sweep, text_training as TT
    from andrea_edu.heads.training import default_settings
    shared = set(D.new_provenance("w", "c"))
    assert {"what", "produced_by", *D.PROVENANCE_KEYS} <= shared
    old = {o for olds in D.PROVENANCE_KEYS.values() for o in olds}
    blocks = {"bench": timing.provenance("cpu", "cmd"),
              "sweep": sweep.provenance(default_settings(), (1, 2), (0,), 1.0),
              "text run cpu": D.new_provenance("w", "c", **TT.cpu_keys())}
    for name, b in blocks.items():
        assert shared <= set(b) and not old & set(b), name
        assert D.provenance(b) == b, name  # read back as written: nothing to map
    assert blocks["sweep"]["base_settings"] == dataclasses.asdict(default_settings())
    for bad in ("date", "cpu_provenance", "command", "git_commit", "code_hash"):
        with pytest.raises(ValueError, match=r"own=\['" + bad):
            D.new_provenance("w", "c", **{bad: 1})
    monkeypatch.setenv("ANDREA_GIT_COMMIT", "abc123")
    run = blocks["sweep"]
    assert not set(D.WRITER_KEYS) & set(run)  # made by a run, not yet written
    got = store.stamped(run, (store,))
    assert got == {**run, "git_commit": "abc123", "code_hash": store.code_hash((store,))}
    assert len(got["code_hash"]) == 16 and store.code_hash((D,)) != got["code_hash"]
    assert store.stamped({**run, "git_commit": "old"})["git_commit"] == "old"  # kept
