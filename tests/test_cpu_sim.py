"""backend="cpu-sim": each kernel version's own .cu, compiled by g++ and run on the CPU
(andrea_edu.kernels.cpu_sim), checked against the fp32 reference on the kernels' correctness grid.

The grid: seq_len that is no multiple of any tile, batch 1, one head and two, causal and not,
every dtype each kernel is compiled for. attention(backend="cpu-sim") picks the kernel by the
registry's rule, so head_dim and dtype choose v1 (fp32, or head_dim 24), v2 (fp16/bf16, head_dim
16 or 48) or v3 (fp16/bf16, head_dim 32 or 64). Builds are cached (cache_dir()/host_sim), so a
second run of this file compiles nothing. Skipped without a C++ compiler.
"""
from __future__ import annotations

import shutil

import pytest
import torch

from andrea_edu.dispatch import attention, choose_backend, compare_to_reference
from andrea_edu.kernels import cpu_sim, registry

pytestmark = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")),
                                reason="no host C++ compiler (g++) found")

GRID = [  # kernel the dispatcher picks, B, nh, T, hs, dtype
    ("v1", 1, 2, 37, 24, torch.float32),
    ("v1", 1, 1, 33, 40, torch.bfloat16),
    ("v1", 2, 1, 17, 64, torch.float32),
    ("v2", 1, 2, 70, 48, torch.float16),
    ("v2", 1, 1, 17, 16, torch.bfloat16),
    ("v3", 1, 1, 65, 64, torch.float16),
    ("v3", 1, 2, 30, 32, torch.bfloat16),
    ("v3", 2, 1, 1, 64, torch.bfloat16),
]


def _qkv(B, nh, T, hs, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, nh, T, hs, generator=g).to(dtype) for _ in range(3))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("version, B, nh, T, hs, dtype", GRID)
def test_cpu_sim_backend_matches_the_reference(version, B, nh, T, hs, dtype, causal):
    q, k, v = _qkv(B, nh, T, hs, dtype, seed=T + hs)
    out, d = attention(q, k, v, causal=causal, backend="cpu-sim", return_decision=True)
    assert (d.backend, d.kernel) == ("cpu-sim", version), d
    assert out.shape == q.shape and out.dtype == dtype
    assert not torch.isnan(out.float()).any(), "an output element was never written"
    res = compare_to_reference(out, q, k, v, causal)
    assert res["passed"], res


@pytest.mark.parametrize("version", registry.versions())
def test_every_registered_kernel_runs_by_name_and_the_seed_changes_nothing(version):
    """run_attention takes any registered version, the dispatcher's or not (the padded v3 when
    it is registered), with no code of its own: its smallest head_dim, a dtype it is compiled
    for, T a multiple of no tile. Two barrier orders give the same bits (no kernel races)."""
    spec = registry.get(version)
    hd, dtype = min(spec.specializations(), key=lambda s: (s[0], str(s[1])))
    hd = next(h for h in range(1, hd + 1) if spec.ineligibility(h, dtype, None) is None)
    q, k, v = _qkv(1, 2, 21, hd, dtype, seed=5)
    a = cpu_sim.run_attention(q, k, v, True, version, seed=1)
    b = cpu_sim.run_attention(q, k, v, True, version, seed=2)
    assert torch.equal(a, b), version
    assert compare_to_reference(a, q, k, v, True)["passed"], version


def test_the_decision_says_what_runs_and_why():
    d = choose_backend(64, torch.float16, "cpu", backend="cpu-sim")
    assert d.backend == "cpu-sim" and d.kernel == "v3" and "attention_v3_flash.cu" in d.reason
    d = choose_backend(72, torch.float16, "cpu", backend="cpu-sim")
    assert d.kernel == "v1" and any("cuda-wmma" in f for f in d.fallbacks_considered)
    with pytest.raises(ValueError, match="backend='cpu-sim' cannot run head_dim=4096"):
        choose_backend(4096, torch.float32, "cpu", backend="cpu-sim")
    q = torch.randn(1, 1, 4, 32, requires_grad=True)
    with pytest.raises(ValueError, match="forward-only"):
        attention(q, q, q, backend="cpu-sim")


def test_no_compiler_is_one_line_naming_what_to_install(monkeypatch):
    monkeypatch.setenv("CXX", "")
    monkeypatch.setattr(cpu_sim.shutil, "which", lambda name: None)
    with pytest.raises(cpu_sim.CompilerMissingError, match=r"apt-get install -y g\+\+"):
        cpu_sim.compiler()
    q = torch.randn(1, 1, 5, 32)
    with pytest.raises(cpu_sim.CompilerMissingError, match="backend='emulator'"):
        attention(q, q, q, backend="cpu-sim")


def test_builds_are_cached_by_content(monkeypatch):
    src = "__global__ void add1(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] += 1.0f; }"
    call = "add1((float*)p[0], (int)s[0]);"
    exe = cpu_sim.build(src, call)
    calls: list = []
    real_run = cpu_sim.subprocess.run

    def recording_run(cmd, **kw):
        calls.append(cmd)
        return real_run(cmd, **kw)

    monkeypatch.setattr(cpu_sim.subprocess, "run", recording_run)
    assert cpu_sim.build(src, call) == exe                # the same text: no compiler run
    assert not [c for c in calls if "-o" in c]
    assert cpu_sim.build(src.replace("1.0f", "2.0f"), call) != exe   # other text, other binary
    x = torch.arange(5, dtype=torch.float32)
    run = cpu_sim.launch(exe, (1,), (8,), 0, [cpu_sim.Buffer("x", 20, x.numpy().tobytes())], [5])
    assert torch.frombuffer(bytearray(run.outputs["x"]), dtype=torch.float32).tolist() == \
        [1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_read_past_the_end_becomes_a_sentence():
    src = "__global__ void k(float* x, int n) { int i = threadIdx.x; x[i] = x[i + 1024]; }"
    exe = cpu_sim.build(src, "k((float*)p[0], (int)s[0]);")
    with pytest.raises(cpu_sim.SimulatorError, match=r"out-of-bounds access: x is 64 bytes long; "
                       r"block \(0,0,0\) thread \(\d+,0,0\) touched byte \d+, \d+ bytes past its end"):
        cpu_sim.launch(exe, (1,), (16,), 0, [cpu_sim.Buffer("x", 64, bytes(64))], [16])
