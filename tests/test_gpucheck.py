"""Tests of andrea_lab.bench.gpucheck that run anywhere (the check itself needs a GPU)."""
from __future__ import annotations

import pytest
import torch

from andrea_edu.kernels import launch as cuda_launch
from andrea_lab.bench import gpucheck
from andrea_edu.kernels.limits import V2_HEAD_DIMS, V3_HEAD_DIMS


def test_without_gpu_it_exits_nonzero_and_writes_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cuda_launch, "has_gpu", lambda: False)
    out = tmp_path / "out"
    assert gpucheck.main(["--out", str(out)]) == 2
    assert "needs an NVIDIA GPU" in capsys.readouterr().err
    assert not out.exists()


def test_out_is_required(capsys):
    with pytest.raises(SystemExit):
        gpucheck.main([])
    assert "--out" in capsys.readouterr().err


def test_sweep_covers_the_awkward_cases():
    cases = gpucheck.cases()
    explicit = [c for c in cases if c[0] != "auto"]
    Ts = {c[4] for c in explicit}
    assert 1 in Ts and any(T % 16 for T in Ts) and any(T % 64 and T > 64 for T in Ts)
    assert {c[2] for c in explicit} >= {1} and {c[3] for c in explicit} >= {1}
    assert {c[6] for c in explicit} == {False, True}
    assert {c[0] for c in cases} == set(gpucheck.all_backends())
    assert {"cuda-naive", "cuda-wmma", "cuda-flash", "auto"} <= set(gpucheck.all_backends())
    v2 = {(c[1], c[5]) for c in cases if c[0] == "cuda-wmma"}
    assert v2 >= {(dt, hd) for dt in (torch.float16, torch.bfloat16) for hd in V2_HEAD_DIMS}
    assert {c[1] for c in cases if c[0] == "cuda-naive"} == {torch.float32, torch.float16,
                                                              torch.bfloat16}
    assert {c[5] for c in cases if c[0] == "cuda-naive"} >= {1, 72, 256}
    v3 = {(c[1], c[5]) for c in cases if c[0] == "cuda-flash" and c[2:5] != (2, 3, 50)}
    assert v3 == {(dt, hd) for dt in (torch.float16, torch.bfloat16) for hd in V3_HEAD_DIMS}
    assert (torch.bfloat16, 8, 12, 1024, 64, True) in {c[1:] for c in cases
                                                        if c[0] == "cuda-flash"}
    assert not any(c[0] == "cuda-flash" for c in gpucheck.cases(sm=75))  # v3 needs sm_80+
    # the fallbacks attention() takes (cuda-flash asked for head_dim 48 runs cuda-wmma) are
    # checked too, and every auto case is decided by the same dispatcher
    assert ("cuda-flash", torch.float16, 2, 3, 50, 48, True) in cases


def test_one_failing_case_is_recorded_and_the_sweep_goes_on():
    """On a CPU every case raises inside attention() (no CUDA tensors): each becomes a row with
    the exception, none ends the sweep. (Not evidence of GPU behaviour: the error path only.)"""
    rows = [gpucheck.run_case(c, sm=90) for c in
            (("cuda-naive", torch.float32, 1, 1, 17, 8, False),
             ("cuda-flash", torch.bfloat16, 1, 1, 17, 64, True))]
    assert [r["passed"] for r in rows] == [False, False]
    assert all(r["error"] and r["expected_backend"] == r["backend"] for r in rows)
    assert rows[1]["kernel"] == "v3"


def test_a_run_cut_short_still_writes_its_json(monkeypatch, tmp_path):
    """gpucheck writes gpucheck.json after each backend and once more when stopped, with
    complete=false and passed=false (wiring test: not evidence of GPU behaviour)."""
    import json
    monkeypatch.setattr(cuda_launch, "has_gpu", lambda: True)
    monkeypatch.setattr(cuda_launch, "device_info", lambda device=None: {"name": "stand-in"})
    row = dict(backend="cuda-naive", passed=True, max_abs_err=0.0)

    def sweep(log=print, checkpoint=None, backends=None, small=False):
        checkpoint([row])
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(gpucheck, "run_sweep", sweep)
    assert gpucheck.main(["--out", str(tmp_path), "--skip-pytest"]) == 1
    report = json.loads((tmp_path / "gpucheck.json").read_text())
    assert report["complete"] is False and report["passed"] is False
    assert report["cases"] == [row] and "illegal memory access" in report["stopped"]
    assert report["by_backend"]["cuda-naive"] == dict(cases=1, passed=1, failed=0, first=[])


def test_the_gpu_tests_it_runs_are_every_file_with_gpu_marked_tests():
    from pathlib import Path
    tests = Path(__file__).resolve().parent
    files = {p.name for p in gpucheck.gpu_test_files(tests)}
    assert {"test_cuda.py", "test_attention.py"} <= files
    assert Path(__file__).name not in files          # no gpu-marked test here


# ----------------------------------------------------------------- read_report: as landed data
def _report_in(folder):
    """A valid gpucheck.json written into `folder` through the laboratory's one writer, with
    the folder's SHA256SUMS (as land_gpu_out lands it)."""
    from andrea_lab.store import write_json_atomic
    rows = [dict(backend="cuda-naive", dtype="float32", B=1, n_head=1, seq_len=T, head_dim=8,
                 causal=False, passed=True, max_abs_err=0.0) for T in (1, 17)]
    rep = gpucheck.merge_reports([dict(schema=gpucheck.SCHEMA, device={"name": "Synthetic"},
                                       complete=True, backends=["cuda-naive"], cases=rows,
                                       seconds=1.0)])
    folder.mkdir(exist_ok=True)
    return write_json_atomic(folder / "gpucheck.json", rep, manifest=True, indent=1)


def test_a_landed_report_is_read_through_its_manifest(tmp_path):
    """read_report makes the checks every reader of committed data makes (andrea_edu.data):
    bytes that differ from the SHA256SUMS line (damage, or a write cut short before its
    manifest: the line names `git checkout -- <folder>`), a file the manifest lacks and a listed
    file that is gone are each refused in one line naming the file; a writer's stray temporary
    file beside it is not read."""
    import json

    from andrea_edu.data import DataFileError
    from andrea_lab.store import seal_folder
    path = _report_in(tmp_path / "data")
    assert gpucheck.read_report(path)["n_cases"] == 2
    # 1. edited after it was listed: still valid JSON, still a valid report, but not its bytes
    rep = json.loads(path.read_text())
    path.write_text(json.dumps(rep, indent=2) + "\n")
    with pytest.raises(DataFileError, match="differs from the sha256") as e:
        gpucheck.read_report(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)
    assert f"git checkout -- {path.parent}" in str(e.value)
    # 2. a manifest beside it that does not list it
    seal_folder(path.parent, names=[])
    with pytest.raises(DataFileError, match="not listed in"):
        gpucheck.read_report(path)
    # 3. listed, then deleted
    seal_folder(path.parent)
    assert gpucheck.read_report(path)["n_cases"] == 2
    path.unlink()
    with pytest.raises(DataFileError, match="listed in .* but missing") as e:
        gpucheck.read_report(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)
    # 4. a write cut short after its rename, before its manifest: refused; a stray temporary
    #    file of that writer beside the file is never read
    path = _report_in(tmp_path / "half")
    (path.parent / ".gpucheck.json.andrea-999999999-00000000.tmp").write_text("{")
    assert gpucheck.read_report(path)["n_cases"] == 2
    path.write_text(json.dumps({**rep, "seconds": 2.5}, indent=1) + "\n")  # renamed in
    with pytest.raises(DataFileError, match=r"differs from the sha256.*git checkout --") as e:
        gpucheck.read_report(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)
    # a scratch folder (no manifest: the suite's per-backend parts) is read without one
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "gpucheck.json").write_text(json.dumps(rep))
    assert gpucheck.read_report(scratch / "gpucheck.json")["n_cases"] == 2
    with pytest.raises(DataFileError, match="missing"):
        gpucheck.read_report(scratch / "nothing.json")
