"""scripts/gpu_suite.sh, the prepared first-contact run for a lent GPU, rehearsed on this CPU.

`bash scripts/gpu_suite.sh --rehearse` runs the whole script in a venv that holds only what the
GPU image holds (scripts/image_env.py) plus the carried wheels: the GPU steps say "skipped: no
GPU", everything else runs (wheel download and unpacking, imports, the gpu tests' collection,
one chapter executed in fast mode, the SASS model, the archives, the summary). About 2 to 3
minutes on 2 cores. It needs PyPI for the wheels the first time (they are kept in .whl/ and
the rehearsal folder): without network the wheels step fails with one line saying so, and
this test is skipped with that line, like a GPU test without a GPU.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(SCRIPTS))

import gpu_summary  # noqa: E402
import image_env  # noqa: E402


def steps_of(out: Path) -> dict[str, list[str]]:
    with tarfile.open(out / "logs.tar.gz") as t:
        f = t.extractfile("logs/steps.tsv")
        assert f is not None
        rows = [ln.split("\t") for ln in f.read().decode().splitlines() if ln.strip()]
    return {r[0]: r[1:] for r in rows}


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-out")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env["OUT"] = str(out)
    run = subprocess.run(["bash", str(SCRIPTS / "gpu_suite.sh"), "--rehearse"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=420)
    return run, out


def test_the_rehearsal_runs_every_step_that_needs_no_gpu(rehearsal):
    run, out = rehearsal
    steps = steps_of(out)
    if steps.get("wheels", [""])[0] == "fail" and "no network" in steps["wheels"][3]:
        pytest.skip(f"rehearsal needs PyPI for the carried wheels: {steps['wheels'][3]}")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    for gpu_step in ("gpu-check", "bench", "ncu"):
        assert steps[gpu_step][0] == "skipped" and steps[gpu_step][3] == "skipped: no GPU"
    assert steps["sanitizer"][0] == "skipped"
    assert "driver script imports" in steps["sanitizer"][3]
    for step in ("environment", "wheels", "gpu-tests-collect", "notebooks", "model", "summary"):
        assert steps[step][0] == "pass", (step, steps[step])
    assert "notebook modules import" in steps["wheels"][3] and "headers:" in steps["wheels"][3]
    # the image's venv, not the project's: without the carried wheels it lacks what the image
    # lacks, and has what the image has
    rdir = Path(os.environ.get("ANDREA_REHEARSE_DIR") or f"/tmp/andrea-rehearse-{os.getuid()}")
    assert str(rdir / "venv") in steps["environment"][3]
    bare = {"PATH": "/usr/bin:/bin", "HOME": str(out)}
    for module, present in (("nbclient", False), ("jsonschema", False), ("transformers", False),
                            ("tqdm", False), ("matplotlib", True), ("cuda.bindings", True)):
        r = subprocess.run([str(rdir / "venv" / "bin" / "python"), "-c", f"import {module}"],
                           env=bare, capture_output=True, timeout=120)
        assert (r.returncode == 0) == present, (module, r.stderr[-300:])


def test_the_rehearsal_writes_at_most_eight_files_and_a_summary(rehearsal):
    run, out = rehearsal
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8, files
    assert {"gpu_summary.md", "logs.tar.gz", "notebooks.tar.gz"} <= set(files)
    page = (out / "gpu_summary.md").read_text()
    assert page.startswith("# GPU suite: REHEARSAL on a CPU")
    assert "| gpu-check | **skipped** |" in page and "| notebooks |" in page
    if (out / "sass_model.json").is_file():
        rows = json.loads((out / "sass_model.json").read_text())["rows"]
        assert {r["evidence"]["version"] for r in rows} == {"v1", "v2", "v3"}
        assert "(a model, not a measurement)" in page


def test_the_executed_chapter_comes_back_executed(rehearsal):
    run, out = rehearsal
    if steps_of(out)["notebooks"][0] != "pass":
        pytest.skip("the notebooks step did not run (see the test above)")
    with tarfile.open(out / "notebooks.tar.gz") as t:
        names = [m.name for m in t.getmembers() if m.name.endswith(".ipynb")]
        assert names, "no executed notebook in the archive"
        f = t.extractfile(names[0])
        assert f is not None
        nb = json.loads(f.read())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c.get("execution_count") for c in code)
    assert not any(o.get("output_type") == "error" for c in code for o in c.get("outputs", []))


# ----------------------------------------------------------------- fast checks of the pieces
def test_the_carried_wheels_are_what_the_image_lacks():
    image = image_env.closure(image_env.IMAGE)
    carried = image_env.carried()
    assert {"torch", "cuda-bindings", "numpy", "matplotlib", "pytest"} <= set(image)
    assert {"ipykernel", "nbclient", "nbformat", "ipywidgets", "ipython", "tqdm",
            "jupyter-client", "pyzmq", "nvidia-cuda-crt"} <= set(carried)
    assert not set(carried) & set(image)        # nothing the image has travels twice
    assert "nvidia-cuda-crt" not in image       # crt/mma.h: only the carried wheel brings it


def test_check_wheels_names_each_missing_wheel(tmp_path):
    (tmp_path / "tqdm-0.0.1-py3-none-any.whl").write_bytes(b"")   # the wrong version
    missing = image_env.check_wheels(tmp_path, "312")
    assert len(missing) == len(image_env.carried())
    assert any(m.startswith("tqdm==") for m in missing)


def test_summary_page_reports_each_step_and_the_check(tmp_path):
    steps = tmp_path / "steps.tsv"
    steps.write_text("environment\tpass\t3\t15\tpython 3.12, torch 2.11, GPU: H200\n"
                     "gpu-check\tfail\t80\t150\texit status 1\n"
                     "ncu\trefused\t4\t80\tstatus 1: ERR_NVGPUCTRPERM\n")
    (tmp_path / "gpucheck.json").write_text(json.dumps(dict(
        n_cases=3, n_failed=1, complete=True, device={"name": "H200"},
        pytest={"returncode": 0},
        by_backend={"cuda-flash": dict(cases=2, passed=1, failed=1, first=["CompileError: x"]),
                    "cuda-naive": dict(cases=1, passed=1, failed=0, first=[])})))
    assert gpu_summary.main([str(tmp_path), str(steps)]) == 0
    page = (tmp_path / "gpu_summary.md").read_text()
    assert "Overall: **fail** (failed: gpu-check)" in page
    assert "| ncu | **refused** | 4 (80) | status 1: ERR_NVGPUCTRPERM |" in page
    assert "- cuda-flash: 1/2 passed. First failure: CompileError: x" in page
    assert "2/3 cases passed on H200" in page


def test_the_suite_refuses_an_unknown_argument():
    run = subprocess.run(["bash", str(SCRIPTS / "gpu_suite.sh"), "--rehaerse"], cwd=ROOT,
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 2 and "allowed: --rehearse" in run.stderr


def test_summary_page_reads_ncu_csv_and_the_headline_ratios(tmp_path):
    """ncu --csv output mixed with the driver script's own lines and ncu's ==PROF== lines; a
    head_dim sweep file with a kernel row at head_dim 64."""
    steps = tmp_path / "steps.tsv"
    steps.write_text("ncu\tpass\t40\t70\t2 metric rows\n")
    (tmp_path / "ncu.csv").write_text(
        '==PROF== Connected to process 1234\n'
        'ok   cuda-wmma bfloat16 B=8 nh=12 T=1024 hs=64 causal=True: ran cuda-wmma\n'
        '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
        '"0","andrea::attention_v2_wmma<__nv_bfloat16, 64>",'
        '"sm__warps_active.avg.pct_of_peak_sustained_active","%","41.2"\n'
        '"1","andrea::attention_v3_flash<__nv_bfloat16, 64>",'
        '"dram__throughput.avg.pct_of_peak_sustained_elapsed","%","12.5"\n')
    rec: dict[str, Any] = dict(backend="cuda-flash", status="ok", median_ms=0.5, tflops=100.0,
               time_ratio_to_sdpa=1.7, params=dict(shape="ANDREA-120M", B=8, T=1024, n_head=12,
                                                   head_dim=64, dtype="bfloat16", causal=True))
    (tmp_path / "bench_headdim_h200.json").write_text(json.dumps(dict(records=[
        rec, {**rec, "backend": "sdpa"}, {**rec, "params": {**rec["params"], "head_dim": 32}}])))
    assert gpu_summary.main([str(tmp_path), str(steps), str(tmp_path)]) == 0
    page = (tmp_path / "gpu_summary.md").read_text()
    assert "| andrea::attention_v2_wmma<__nv_bfloat16, 64> | sm__warps_active.avg.pct_of_peak_" \
           "sustained_active | 41.2 | % |" in page
    assert "dram__throughput" in page and "==PROF==" not in page
    assert page.count("| cuda-flash | 0.500 | 100.0 | 1.70 |") == 1   # hd=64 only, kernels only
