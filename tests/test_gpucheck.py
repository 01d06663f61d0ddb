"""Tests of andrea_edu.bench.gpucheck that run anywhere (the check itself needs a GPU)."""
from __future__ import annotations

import pytest
import torch

from andrea_edu.kernels import launch as cuda_launch
from andrea_edu.bench import gpucheck
from andrea_edu.attention import V2_HEAD_DIMS, V3_HEAD_DIMS


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
    Ts = {c[4] for c in cases}
    assert 1 in Ts and any(T % 16 for T in Ts) and any(T % 64 and T > 64 for T in Ts)
    assert {c[2] for c in cases} >= {1} and {c[3] for c in cases} >= {1}
    assert {c[6] for c in cases} == {False, True}
    v2 = {(c[1], c[5]) for c in cases if c[0] == "v2"}
    assert v2 >= {(dt, hd) for dt in (torch.float16, torch.bfloat16) for hd in V2_HEAD_DIMS}
    assert all(c[1] != torch.float32 for c in cases if c[0] == "v2")
    assert {c[5] for c in cases if c[0] == "v1"} >= {1, 72, 256}
    v3 = {(c[1], c[5]) for c in cases if c[0] == "v3"}
    assert v3 == {(dt, hd) for dt in (torch.float16, torch.bfloat16) for hd in V3_HEAD_DIMS}
    assert (torch.bfloat16, 8, 12, 1024, 64, True) in {c[1:] for c in cases if c[0] == "v3"}
    assert not any(c[0] == "v3" for c in gpucheck.cases(sm=75))    # v3 needs sm_80+
