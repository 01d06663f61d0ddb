"""andrea_edu.bench: FLOP formulas, validate-before-timing, JSON schema, the CLI, and the chapter
"The configuration mirrors the hardware" with and without committed measurements."""
from __future__ import annotations

import copy
import json
import shutil
import sys
import types
from pathlib import Path

import pytest
import torch

from andrea_edu.data import DataFileError
from andrea_edu import bench
from andrea_edu.bench import cases as bench_cases, suites, timing
from andrea_lab.bench import cli
from andrea_lab.bench.writer import write_results
from andrea_lab.store import seal_folder, stamped

REPO = Path(__file__).resolve().parents[1]
CHAPTER = REPO / "book" / "config_mirrors_hardware.ipynb"


def _found(results: dict | None) -> dict:
    """A load_results() answer the test expects to exist."""
    assert results is not None, "load_results found no file"
    return results


# ---------------------------------------------------------------- FLOP formulas
def test_attention_flops_hand_computed():
    # B=1, nh=1, T=2, hs=3: Q K^T is (2x3)@(3x2): 2*2*3 multiply-adds = 24 FLOPs; P V is
    # (2x2)@(2x3): 2*3*2 multiply-adds = 24 FLOPs; 48 in all, half of it when causal.
    assert bench.attention_flops(1, 1, 2, 3, causal=False) == 48
    assert bench.attention_flops(1, 1, 2, 3, causal=True) == 24
    assert bench.matmul_flops(2, 2, 3) + bench.matmul_flops(2, 3, 2) == 48
    # scales linearly in B, nh and hs, quadratically in T
    assert bench.attention_flops(8, 12, 1024, 64, False) == 8 * 12 * 64 * 4 * 1024 ** 2


@pytest.mark.parametrize("bad", [dict(B=0), dict(T=-1), dict(hs=2.5), dict(nh="12")])
def test_attention_flops_rejects_bad_sizes(bad):
    kw = dict(B=1, nh=1, T=2, hs=3) | bad
    with pytest.raises(ValueError, match=list(bad)[0]):
        bench.attention_flops(causal=False, **kw)


@pytest.mark.parametrize("head_dims", [(0,), (64, 70.5), (), 64])
def test_headdim_suite_names_bad_head_dims_in_one_line(head_dims):
    """The exercise's knob `bench_head_dims`: a bad value stops before any case is built."""
    from andrea_edu.bench import suites

    with pytest.raises(ValueError) as e:
        suites.run_suite("headdim", device="cpu", fast=True, progress=False, head_dims=head_dims)
    assert str(e.value).startswith(f"head_dims={head_dims!r}: allowed values are a tuple of "
                                   "positive ints") and "\n" not in str(e.value)


def test_time_fns_orders_min_median_max():
    calls = []
    out = bench.time_fns({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                         "cpu", repeats=4, warmup=1)
    assert calls[:2] == ["a", "b"]  # the warm-up round, one call each
    n = {name: out[name]["calls_per_sample"] for name in "ab"}
    rounds = out["a"]["repeats"]
    assert rounds == timing.CPU_MIN_REPEATS  # a CPU takes at least this many samples
    # then the rounds take turns: a group of calls of a, then one of b, ...
    assert calls[2:] == (["a"] * n["a"] + ["b"] * n["b"]) * rounds
    for t in out.values():
        assert 0 <= t["min_ms"] <= t["p25_ms"] <= t["median_ms"] <= t["p75_ms"] <= t["max_ms"]
        assert t["threads"] == 1 and t["timer"] == "perf_counter-1-thread"
        assert isinstance(t["quality_ok"], bool)
    with pytest.raises(ValueError, match="repeats"):
        bench.time_fn(lambda: None, "cpu", repeats=0)


def test_cpu_timing_runs_on_one_thread_and_restores_the_setting():
    before = torch.get_num_threads()
    seen = []
    torch.set_num_threads(2)
    try:
        bench.time_fns({"a": lambda: seen.append(torch.get_num_threads())}, "cpu", repeats=3,
                       warmup=0)
        assert set(seen) == {1} and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_timing_that_waits_for_a_core_or_sits_on_a_quantum_fails_the_check():
    """A callable that sleeps instead of computing (as a thread does while another process
    holds the core) is flagged: wall time far above the thread's CPU time."""
    import time as _t
    t = bench.time_fn(lambda: _t.sleep(0.004), "cpu", repeats=3, warmup=1)
    ok, why = timing.timing_ok(t)
    assert not ok and ("waited for a CPU core" in why or "scheduler quantum" in why), why
    # the quantum rule alone: 11 samples of 8.0 ms on a thread that computed 1.5 ms
    q = dict(median_ms=7.98, p25_ms=7.96, p75_ms=8.0, iqr_over_median=0.005, repeats=11,
             calls_per_sample=1, cpu_median_ms=1.5, waited_samples=0)
    ok, reason = timing.timing_quality(q)
    assert not ok and reason is not None and "2 x 4 ms" in reason
    assert timing.timing_quality({**q, "cpu_median_ms": 7.9}) == (True, None)
    spread = {**q, "cpu_median_ms": 7.9, "p25_ms": 4.0, "p75_ms": 10.0, "iqr_over_median": 0.75}
    assert str(timing.timing_quality(spread)[1]).startswith("too spread")
    # an old record (min, median, max only) is never used for a verdict, and says why
    ok, why = timing.timing_ok({"min_ms": 1.0, "median_ms": 1.1, "max_ms": 2.0})
    assert not ok and "before timings carried their spread" in why
    assert timing.spread_text({"min_ms": 1.0, "median_ms": 1.1}).endswith("spread unknown)")


# ---------------------------------------------------------------- the CPU run and its JSON
@pytest.fixture(scope="module")
def cpu_results(tmp_path_factory):
    """`python -m andrea_lab.bench all --fast` on this CPU, into a fresh folder."""
    out = tmp_path_factory.mktemp("bench")
    code = cli.main(["all", "--fast", "--no-progress", "--out", str(out)])
    return code, out


def test_cpu_run_writes_valid_labelled_json(cpu_results):
    code, out = cpu_results
    assert code == 0
    names = sorted(p.name for p in out.glob("*.json"))
    assert names == [f"bench_{s}_cpu.json" for s in sorted(bench.SUITES)]
    for name in names:
        obj = json.loads((out / name).read_text())
        bench.validate_result(obj)
        prov = obj["provenance"]
        assert prov["device_kind"] == "cpu" and prov["device"].startswith("CPU: ")
        assert prov["torch"] == torch.__version__ and prov["date_utc"] and prov["git_commit"]
        # a file written now carries the one schema's keys, never the older names
        assert prov["produced_by"] is not None and prov["cpu_numerics"]["machine"]
        assert not {"date", "command", "cpu_provenance"} & set(prov)
        assert obj["settings"]["timer"] == "perf_counter"
        ok = [r for r in obj["records"] if r["status"] == "ok"]
        assert ok and all(r["median_ms"] > 0 and r["max_abs_err"] is not None for r in ok)


def test_cpu_headdim_marks_cuda_unavailable_and_records_sdpa(cpu_results):
    _, out = cpu_results
    obj = _found(bench.load_results("headdim", device="cpu", data_dir_=out))
    by: dict[str, list] = {}
    for r in obj["records"]:
        by.setdefault(r["backend"], []).append(r)
    for backend in ("cuda-naive", "cuda-wmma"):
        assert {r["status"] for r in by[backend]} == {"unavailable"}
        assert all("CUDA" in r["reason"] for r in by[backend])
    sdpa = [r for r in by["sdpa"] if r["status"] == "ok"]
    assert sdpa and all(r["time_ratio_to_sdpa"] == 1.0 for r in sdpa)
    assert all(r["sdpa_choice"] and r["sdpa_eligible"]["math"] for r in sdpa)
    ref = [r for r in by["reference"] if r["status"] == "ok"]
    assert all(r["tflops"] == pytest.approx(r["flops"] / (r["median_ms"] * 1e-3) / 1e12)
               for r in ref)


def test_cpu_projections_count_blas_calls(cpu_results):
    _, out = cpu_results
    obj = _found(bench.load_results("projections", device="cpu", data_dir_=out))
    calls = {r["backend"]: r["blas_calls"] for r in obj["records"]}
    nh = obj["records"][0]["params"]["n_head"]
    assert calls == {"per-head": 3 * nh, "per-head-matmuls": 3 * nh, "fused": 3, "c-attn": 1}


def test_load_results_prefers_gpu_and_handles_missing(cpu_results, tmp_path):
    _, out = cpu_results
    assert bench.load_results("headdim", data_dir_=tmp_path) is None
    shutil.copy(out / "bench_layout_cpu.json", tmp_path)
    assert bench.load_results("layout", device="gpu", data_dir_=tmp_path) is None
    assert _found(bench.load_results("layout", data_dir_=tmp_path))["provenance"]["device_kind"] \
        == "cpu"
    fake = json.loads((out / "bench_layout_cpu.json").read_text())
    fake["provenance"].update(device_kind="gpu", device="NVIDIA H200", device_slug="nvidia-h200")
    (tmp_path / "bench_layout_nvidia-h200.json").write_text(json.dumps(fake))
    assert _found(bench.load_results("layout", data_dir_=tmp_path))["provenance"]["device"] \
        == "NVIDIA H200"
    (tmp_path / "bench_layout_nvidia-h200.json").write_text("{not json")
    with pytest.raises(DataFileError, match="bench_layout_nvidia-h200.json: not valid"):
        bench.load_results("layout", data_dir_=tmp_path)  # a damaged file: its reason, not a
    with pytest.warns(RuntimeWarning, match="not valid JSON"):  # silent fallback
        got = _found(bench.load_results("layout", data_dir_=tmp_path, errors="warn"))
    assert got["provenance"]["device_kind"] == "cpu"
    with pytest.raises(ValueError, match="suite"):
        bench.load_results("nope")


# ---------------------------------------------------------------- the schema rejects bad files
def _mutations():
    def drop(o):
        del o["provenance"]

    def status(o):
        o["records"][0]["status"] = "fine"

    def order(o):
        r = next(r for r in o["records"] if r["status"] == "ok")
        r["min_ms"], r["max_ms"] = r["max_ms"] + 1, r["min_ms"]

    def cpu_label(o):
        o["provenance"]["device"] = "NVIDIA H200"  # a CPU run passed off as a GPU

    def tflops(o):
        o["records"][0]["tflops"] = "fast"

    def repeats(o):
        o["settings"]["repeats"] = 0

    return [drop, status, order, cpu_label, tflops, repeats]


@pytest.mark.parametrize("mutate", _mutations(), ids=lambda f: f.__name__)
def test_invalid_results_are_rejected(cpu_results, mutate):
    _, out = cpu_results
    good = json.loads((out / "bench_layout_cpu.json").read_text())
    bench.validate_result(copy.deepcopy(good))
    bad = copy.deepcopy(good)
    mutate(bad)
    with pytest.raises(ValueError):
        bench.validate_result(bad)
    with pytest.raises(ValueError):
        write_results(bad, out / "never")
    assert not (out / "never").exists() or not list((out / "never").iterdir())


def test_without_jsonschema_the_writer_checks_values_and_says_so(cpu_results, tmp_path,
                                                                 monkeypatch, capsys):
    """The GPU image's first stage has no jsonschema: the writer checks the values
    (results.check_values: a timing out of order is still refused, nothing written), writes a
    valid file, and says on stderr, once per file, that its schema was not checked (the landing
    checks it: tests/test_land_gpu_out.py)."""
    _, out = cpu_results
    good = json.loads((out / "bench_layout_cpu.json").read_text())
    monkeypatch.setitem(sys.modules, "jsonschema", None)  # as on the GPU image's first stage
    bad = copy.deepcopy(good)
    next(r for r in bad["records"] if r["status"] == "ok")["min_ms"] = -1.0
    with pytest.raises(ValueError, match="min <= median"):
        write_results(bad, tmp_path / "never")
    assert not (tmp_path / "never").exists()
    for _ in range(2):  # a checkpoint rewrites the file: said once
        path = write_results(copy.deepcopy(good), tmp_path, replace=True)
    err = capsys.readouterr().err
    assert err.count("written without schema validation") == 1, err
    assert err.startswith(f"[bench] {path.name}:") and "land_gpu_out" in err, err
    monkeypatch.delitem(sys.modules, "jsonschema")
    bench.validate_result(json.loads(path.read_text()))  # what was written is valid


# ---------------------------------------------------------------- validate before timing
def _garbage(q, k, v, causal):
    return torch.zeros_like(q), {}


def test_wrong_backend_is_caught_before_timing(monkeypatch):
    monkeypatch.setitem(bench_cases.BACKEND_FNS, "sdpa:math", _garbage)
    timed = []
    real = bench.time_fns
    def counting_time_fns(fns, *a, **k):
        timed.append(len(fns))
        return real(fns, *a, **k)

    monkeypatch.setattr(timing, "time_fns", counting_time_fns)
    with pytest.raises(bench.ValidationError, match=r"sdpa:math.*not timed"):
        suites.run_suite("headdim", fast=True, progress=False, head_dims=[16],
                              shapes=["ANDREA-12M"], series=["n_head"],
                              backends=("sdpa", "sdpa:math"))
    assert timed == []  # nothing of that case was timed
    res = suites.run_suite("headdim", fast=True, progress=False, strict=False,
                                head_dims=[16], shapes=["ANDREA-12M"], series=["n_head"],
                                backends=("sdpa", "sdpa:math"))
    bad = next(r for r in res["records"] if r["backend"] == "sdpa:math")
    assert bad["status"] == "invalid" and "median_ms" not in bad
    assert timed == [1]  # only the valid backend, sdpa, was timed


def test_cli_exit_status_reports_invalid_backend(monkeypatch, tmp_path):
    monkeypatch.setitem(bench_cases.BACKEND_FNS, "reference", _garbage)
    monkeypatch.setattr(bench_cases, "HEAD_DIMS_FAST", (16,))
    assert cli.main(["head-dim", "--fast", "--no-progress", "--keep-going",
                       "--out", str(tmp_path)]) == 1
    obj = _found(bench.load_results("headdim", data_dir_=tmp_path))
    assert {r["status"] for r in obj["records"] if r["backend"] == "reference"} == {"invalid"}


def test_cpu_runs_on_one_thread_and_restores_it():
    before = torch.get_num_threads()
    res = suites.run_suite("layout", fast=True, progress=False, repeats=1, warmup=0)
    assert res["provenance"]["cpu_threads"] == 1
    assert torch.get_num_threads() == before


def test_deadline_skips_cases_instead_of_timing(tmp_path):
    res = suites.run_suite("layout", fast=True, progress=False, deadline=0.0)
    assert {r["status"] for r in res["records"]} == {"skipped"}
    bench.validate_result(dict(res, provenance=stamped(res["provenance"])))  # as written


# ---------------------------------------------------------------- CLI plumbing
def test_gpu_check_delegates_to_gpucheck(monkeypatch):
    seen = []
    fake = types.ModuleType("andrea_lab.bench.gpucheck")

    def fake_main(argv):
        seen.append(argv)
        return 3

    setattr(fake, "main", fake_main)  # a stand-in module built at run time
    monkeypatch.setitem(sys.modules, "andrea_lab.bench.gpucheck", fake)
    import andrea_lab.bench as lab_bench
    monkeypatch.setattr(lab_bench, "gpucheck", fake, raising=False)
    assert cli.main(["gpu-check", "--out", "x"]) == 3
    assert seen == [["--out", "x"]]


def test_gpu_suite_refuses_without_gpu(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: gpu-suite would run")
    assert cli.main(["gpu-suite", "--out", str(tmp_path)]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_bad_arguments_name_the_parameter():
    with pytest.raises(ValueError, match="suite="):
        suites.run_suite("everything")
    with pytest.raises(ValueError, match="backends"):
        suites.run_suite("headdim", fast=True, progress=False, backends=("cuda-magic",))
    with pytest.raises(ValueError, match="device="):
        bench.pick_device("tpu")


@pytest.mark.gpu
def test_gpu_headdim_sweep_validates_and_times():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU: torch.cuda.is_available() is False")
    res = suites.run_suite("headdim", device="cuda", fast=True, progress=False,
                                head_dims=[64, 72], shapes=["ANDREA-120M"], series=["n_head"],
                                backends=("sdpa", "cuda-naive", "cuda-wmma"))
    bench.validate_result(dict(res, provenance=stamped(res["provenance"])))  # as written
    by = {(r["params"]["head_dim"], r["backend"]): r for r in res["records"]}
    assert by[(64, "cuda-wmma")]["ran"] == "cuda-wmma"
    assert by[(72, "cuda-wmma")]["ran"] == "cuda-naive"  # the dispatcher's fallback
    assert all(r["status"] == "ok" for r in res["records"])


# ---------------------------------------------------------------- the chapter
def _run_chapter(data_dir: Path, monkeypatch) -> str:
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("ANDREA_FAST", "1")
    monkeypatch.setenv("ANDREA_DATA_DIR", str(data_dir))
    monkeypatch.delenv("ANDREA_BOOK_BUILD", raising=False)
    nb = nbformat.read(CHAPTER, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(CHAPTER.parent)}}).execute()
    errors = [f"{o.get('ename')}: {o.get('evalue')}" for c in nb.cells
              for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    return json.dumps([c.get("outputs", []) for c in nb.cells])


def test_chapter_runs_with_no_data(tmp_path, monkeypatch):
    text = _run_chapter(tmp_path, monkeypatch)
    assert "'GPU measurement': 'none exists yet'" in text  # the chapter's source dict
    assert "'CPU measurement': 'none exists yet'" in text


def _fake_gpu_results(cpu_obj: dict) -> dict:
    """A CPU results file relabelled as a GPU's, with the CUDA backends filled in from SDPA's
    timings: it exercises the chapter's GPU code paths before a real GPU file exists."""
    obj = copy.deepcopy(cpu_obj)
    obj["provenance"].update(device_kind="gpu", device="Fake GPU (test)", device_slug="fake-gpu",
                             driver="0.0")
    obj["settings"]["timer"] = "cuda-events"
    sdpa = {r["case"]: r for r in obj["records"] if r["backend"] == "sdpa"}
    for r in obj["records"]:
        if r["backend"] in ("cuda-naive", "cuda-wmma"):
            s = sdpa[r["case"]]
            hd = r["params"]["head_dim"]
            ran = "cuda-wmma" if r["backend"] == "cuda-wmma" and hd % 16 == 0 else "cuda-naive"
            r.update({k: s[k] for k in ("min_ms", "median_ms", "max_ms", "repeats", "tflops")},
                     status="ok", reason=None, ran=ran, max_abs_err=0.0)
    return obj


def test_chapter_runs_with_gpu_and_cpu_data_files(cpu_results, tmp_path, monkeypatch):
    # (the committed CPU file alone is the repository's state: test_notebooks.py runs that)
    _, out = cpu_results
    shutil.copy(out / "bench_headdim_cpu.json", tmp_path)
    gpu = _fake_gpu_results(json.loads((out / "bench_headdim_cpu.json").read_text()))
    write_results(gpu, tmp_path)
    # a second GPU's file at the chapter's own shape (issue 41 item 6: both shown)
    from test_head_dim_slider import _fake_gpu_file
    _fake_gpu_file(tmp_path, device="Second fake GPU (test)", slug="zz-fake-gpu")
    seal_folder(tmp_path)  # the copied CPU file too: the book reads only listed files
    text = _run_chapter(tmp_path, monkeypatch)
    assert "| Second fake GPU (test) | 72 | cuda-naive | 3000.0 | 60.0 | 50.0 |" in text  # all GPUs
    assert "'GPU measurement': 'none exists yet'" not in text
    assert "'GPU measurement': {'device': 'Fake GPU (test)'" in text
    assert "'CPU measurement': {'device': 'CPU: " in text
    assert "Fake GPU (test), cuda-wmma" in text  # the 32 vs 64 comparison used the GPU file


# ------------------------------------------------------------- the one op counter, SDPA live
def test_the_one_op_counter_counts_matmuls_and_hidden_copies():
    from andrea_edu.bench.aten import AtenOps, blas_calls, count_aten_ops

    x, w = torch.randn(4, 6), torch.randn(6, 6)
    assert blas_calls(lambda: [x @ w for _ in range(3)]) == 3
    assert count_aten_ops(lambda: x.t().contiguous()).get("clone") == 1
    assert count_aten_ops(lambda: x.view(6, 4)).get("clone") is None
    with AtenOps() as rec:
        torch.relu(x @ w)
    assert [str(f) for f in rec.calls] == ["aten.mm.default", "aten.relu.default"]
    assert rec.counts() == {"mm": 1, "relu": 1}


def test_the_pipeline_op_recorder_is_the_same_counter_split_by_step():
    from andrea_edu.bench.aten import AtenOps
    from andrea_edu.pipeline.ops import OpRecorder

    x, w = torch.randn(4, 6), torch.randn(6, 6)
    assert issubclass(OpRecorder, AtenOps)
    with OpRecorder() as rec:
        y = rec.mark(0, "matmul", x @ w)
        rec.mark(0, "act", torch.relu(y) + torch.relu(y))
    assert rec.ops == {"matmul": ["aten.mm.default"],
                       "act": ["aten.relu.default", "aten.add.Tensor"]}


def test_sdpa_on_the_view_makes_no_copy_and_the_contiguous_path_copies_q_k_v():
    from andrea_edu.bench.sdpa import sdpa_view_vs_contiguous

    r = sdpa_view_vs_contiguous(B=1, T=8, n_head=2, head_dim=4, repeats=1)
    assert "clone" not in r["transposed view"]["ops"]
    assert r[".contiguous() first"]["ops"]["clone"] == 3
    assert r["max_abs_diff"] == 0.0 and r["strides"] == (64, 4, 8, 1)
    assert all(0 < r[p]["min_ms"] <= r[p]["median_ms"]
               for p in ("transposed view", ".contiguous() first"))


def test_sdpa_one_wide_head_cuts_the_same_numbers_two_ways():
    from andrea_edu.bench.sdpa import sdpa_one_wide_head

    r = sdpa_one_wide_head(B=1, T=8, d_model=16, n_head=4, repeats=1)
    assert {k: v["head_dim"] for k, v in r.items()} == {"4 heads of 4": 4, "1 head of 16": 16}
    assert all(sum(v["ops"].values()) >= 1 and 0 < v["min_ms"] <= v["median_ms"]
               for v in r.values())


def test_a_cut_gpu_suite_keeps_its_partial_results_in_its_own_labelled_file(tmp_path,
                                                                            monkeypatch):
    """Issue 41 item 4: the device returns 8 files at most, so gpu-suite's checkpoints and a cut's
    partial results go into the suite's own bench_<suite>_<device>.json, labelled incomplete
    inside (never a ninth incomplete_bench_* file); the finished run's write replaces them. On a
    committed file nothing is replaced: the partial results go apart."""
    from types import SimpleNamespace

    from andrea_edu.bench import suites
    from andrea_lab.bench import cli
    from andrea_lab.bench.writer import write_results
    obj = suites.run_suite("layout", device="cpu", fast=True, progress=False)
    save = cli._checkpoint(SimpleNamespace(out=str(tmp_path), replace=False))
    save(obj)
    save(obj)   # its own earlier checkpoint: replaced
    f = tmp_path / "bench_layout_cpu.json"
    assert json.loads(f.read_text())["incomplete"].startswith("checkpoint: ")
    where = cli._save_partial_in_place(dict(obj, incomplete="KeyboardInterrupt: stopped"),
                                       tmp_path)
    assert where == f and json.loads(f.read_text())["incomplete"] == "KeyboardInterrupt: stopped"
    assert [p.name for p in tmp_path.iterdir()] == [f.name]
    write_results(obj, tmp_path)   # the run's own final write
    assert "incomplete" not in json.loads(f.read_text())
    from andrea_lab.store import seal_folder
    seal_folder(tmp_path)   # now committed there: a cut never replaces it
    monkeypatch.setenv("ANDREA_OUT_DIR", str(tmp_path / "apart"))
    where = cli._save_partial_in_place(dict(obj, incomplete="stopped"), tmp_path)
    assert where == tmp_path / "apart" / "incomplete_bench_layout_cpu.json"
    assert "incomplete" not in json.loads(f.read_text())


def test_the_headline_sweep_times_dispatch_with_pad_and_cold_beside_warm():
    """Issue 41 items 1 and 5, on the CPU (wiring; the GPU runs the same code in stage 1):
    attention()'s own choice is timed as "auto" (and "auto:pad" where attention takes pad),
    and at cold_head_dims every ok record carries a cold timing on rotated input sets beside
    its warm one, each labelled."""
    import inspect

    from andrea_edu.bench import cases, suites
    from andrea_edu.dispatch import attention
    assert cases.dispatched_backends()[0] == "auto"
    assert ("auto:pad" in cases.dispatched_backends()) == (
        "pad" in inspect.signature(attention).parameters)
    assert not set(cases.dispatched_backends()) & set(cases.headdim_backends())
    obj = suites.run_suite("headdim", device="cpu", fast=True, progress=False,
                           head_dims=(16,), shapes=("ANDREA-12M",), series=("n_head",),
                           backends=("sdpa", *cases.dispatched_backends()),
                           cold_head_dims=(16,), repeats=1, warmup=0)
    assert "warm" in obj["settings"]["cache"]
    recs = {r["backend"]: r for r in obj["records"]}
    assert set(recs) == {"sdpa", *cases.dispatched_backends()}
    for r in recs.values():
        assert r["status"] == "ok" and r["cache"].startswith("warm"), r
        c = r["cold"]
        assert c["status"] == "ok" and c["median_ms"] > 0 and c["input_sets"] >= 2, c
        assert c["input_sets"] * c["bytes_per_set"] >= 3 * c["cache_bytes"] or \
            c["input_sets"] == 64, c
        assert "_prepare" not in r
    from andrea_edu.bench import validate_result
    validate_result(dict(obj, provenance=stamped(obj["provenance"])))  # as the writer writes it
    with pytest.raises(ValueError, match="not in"):
        suites.run_suite("headdim", device="cpu", fast=True, progress=False,
                         backends=("sdpa", "auto:fast"), head_dims=(16,))
