"""The kernel registry (kernels.spec, kernels.registry): a kernel version is one KernelSpec.

The toy-spec test registers a new version, "toy": kernel v2's .cu copied to a temporary folder
with 2 warps per block instead of 4 (64 threads, 32-row query tiles, half the shared memory),
and a spec that is v2's with that source. No file of the package changes, yet the toy flows
through the dispatcher, the emulator, NVRTC, the SASS evidence, the time model and the
worklog's tables; removed, it leaves no trace.
"""
from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch

from andrea_edu.attention import attention, backends, choose_backend, reference_attention
from andrea_edu.kernels import grid, nvrtc, registry, sass, time_model
from andrea_edu.kernels.emulator import emulate
from andrea_edu.kernels.spec import KernelSpec

try:
    from andrea_edu.kernels import toolkit as _tk
    _tk._import_nvrtc()
    _tk.include_dirs()
    NVRTC = True
except Exception:  # noqa: BLE001  (no NVRTC or headers: the compile parts skip, saying why)
    NVRTC = False
needs_nvrtc = pytest.mark.skipif(not NVRTC, reason="NVRTC or the CUDA headers are missing")


def _toy_source(tmp_path, warps: int = 2):
    src = registry.get("v2").source_text()
    old = "constexpr int V2_WARPS = 4;"
    assert src.count(old) == 1
    (tmp_path / "attention_toy.cu").write_text(src.replace(old, f"constexpr int V2_WARPS = "
                                                                 f"{warps};"))
    return tmp_path


@pytest.fixture()
def toy(tmp_path):
    spec = dataclasses.replace(registry.get("v2"), version="toy", backend="cuda-toy",
                               source="attention_toy.cu", source_dir=_toy_source(tmp_path))
    registry.register(spec)
    try:
        yield spec
    finally:
        registry.unregister("toy")


def test_the_registry_lists_v1_v2_v3_and_each_spec_reads_its_file():
    assert registry.versions() == ("v1", "v2", "v3")
    assert [s.version for s in registry.preferred()] == ["v3", "v2", "v1"]
    assert dict(registry.KERNEL_NAMES) == {"v1": "attention_v1", "v2": "attention_v2_wmma",
                                           "v3": "attention_v3_flash"}
    for s in registry.specs():
        assert isinstance(s, KernelSpec)
        assert re.search(rf"\b{s.kernel}\(", s.source_text())
        assert s.threads == 32 * s.warps and s.rows(64) % s.warps == 0
    with pytest.raises(ValueError, match=r"version='v4' is not one of \('v1', 'v2', 'v3'\)"):
        registry.get("v4")
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.get("v1"))


def test_shared_memory_is_the_sum_of_each_specs_carve_up():
    """One derivation per kernel (KernelSpec.smem_layout); the numbers the chapters quote."""
    v1, v2, v3 = (registry.get(v) for v in ("v1", "v2", "v3"))
    assert v1.shared_bytes(4, torch.float32) == 4 * (16 * 128 + 32 * 129 + 32 * 128)  # 41 KB
    assert v2.shared_bytes(64, torch.float16) == 2 * 32 * 72 * 2 + 64 * (36 * 4 + 40 * 2 + 68 * 4)
    assert v3.shared_bytes(64, torch.bfloat16) == 4 * 64 * 72 * 2                       # 36 KB
    assert [n for n, _ in v3.smem_layout(v3.constants(), 64, 2)] == ["K[0]", "V[0]", "K[1]",
                                                                     "V[1]"]


def test_no_version_branches_outside_the_specs():
    """`if version == "v2"` lives in no module but the spec modules (issue 17)."""
    from pathlib import Path

    import andrea_edu
    root = Path(andrea_edu.__file__).parent
    specs = {root / "kernels" / f"{v}.py" for v in ("v1", "v2", "v3")}
    hits = [f"{p.relative_to(root)}:{n}" for p in root.rglob("*.py") if p not in specs
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if re.search(r"""(version|kernel) == ["']v\d""", line)]
    assert hits == []


def test_a_toy_spec_flows_through_dispatcher_emulator_and_model(toy):
    # the dispatcher: the newest registered kernel is tried first
    assert "cuda-toy" in backends() and registry.versions()[-1] == "toy"
    d = choose_backend(64, torch.float16, "cuda")
    assert (d.backend, d.kernel) == ("cuda-toy", "toy")
    d72 = choose_backend(72, torch.float16, "cuda")
    assert d72.kernel == "v1" and d72.fallbacks_considered[0].startswith("cuda-toy: head_dim=72")
    assert choose_backend(64, torch.float16, "cpu", "emulator").kernel == "toy"
    assert choose_backend(64, torch.float16, "cuda", "cuda-toy").backend == "cuda-toy"

    # the emulator: its grid has twice v2's query tiles, its blocks half the threads
    B, nh, T, hs = 2, 3, 70, 64
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, nh, T, hs, generator=g).to(torch.float16) for _ in range(3))
    out, tr = emulate(q, k, v, causal=True, kernel="toy")
    _, tr2 = emulate(q, k, v, causal=True, kernel="v2")
    assert tr.grid == (B * nh, math.ceil(T / 32), 1) == grid.grid_shape("toy", B, nh, T)
    assert tr2.grid == (B * nh, math.ceil(T / 64), 1) and tr.threads_per_block == 64
    assert [t.q_start for blk in tr.blocks for t in blk.q_tiles][:B * nh + 1] == \
        [0] * (B * nh) + [32]
    ref = reference_attention(q, k, v, causal=True)
    assert (out.float() - ref.float()).abs().max() < 2e-3
    out_d, dec = attention(q, k, v, causal=True, backend="emulator", return_decision=True)
    assert dec.kernel == "toy" and torch.equal(out_d, out)

    # the time model's work: as many warp-tiles as v2 (16 rows per warp both), twice the blocks
    w, w2 = (time_model.launch_work(x, 8, 12, 1024, False, 64) for x in ("toy", "v2"))
    assert w["blocks"] == 2 * w2["blocks"] and w["warp_tiles"] == w2["warp_tiles"]
    assert w["warps_per_block"] == 2 and w["rows_per_block_tile"] == 32
    assert ("toy", 64, torch.float16) in nvrtc.specializations()


def test_the_toy_spec_leaves_no_trace(toy):
    registry.unregister("toy")
    try:
        assert registry.versions() == ("v1", "v2", "v3") and "cuda-toy" not in backends()
        assert choose_backend(64, torch.float16, "cuda").kernel == "v3"
        with pytest.raises(ValueError, match="kernel='toy' is not one of"):
            emulate(*(torch.zeros(1, 1, 4, 64),) * 3, kernel="toy")
    finally:
        registry.register(toy)   # the fixture removes it again


@needs_nvrtc
def test_a_toy_spec_compiles_and_shows_its_sass_and_worklog_tables(toy, tmp_path):
    from andrea_edu.figures import kernel_worklog as wl

    ck = nvrtc.compile_attention("toy", 64, torch.float16, "sm_80")
    ck2 = nvrtc.compile_attention("v2", 64, torch.float16, "sm_80")
    assert ck.threads_per_block == 64 and ck.grid(2, 3, 70) == grid.grid_shape("toy", 2, 3, 70)
    assert ck.resources.dynamic_shared_bytes == toy.shared_bytes(64, torch.float16) \
        < ck2.resources.dynamic_shared_bytes
    assert ck.has_tensor_core_instructions()

    # the .cu reads the spec's bytes: a spec that forgets a buffer does not compile
    broken = dataclasses.replace(toy, version="toy-broken", backend="cuda-toy-broken",
                                 smem_layout=lambda c, t, es: toy.smem_layout(c, t, es)[:-1])
    registry.register(broken)
    try:
        with pytest.raises(nvrtc.CompileError, match="carve-up"):
            nvrtc.compile_attention("toy-broken", 64, torch.float16, "sm_80", use_cache=False)
    finally:
        registry.unregister("toy-broken")

    if _tk.find_binary("cuobjdump") is None or _tk.find_binary("nvdisasm") is None:
        pytest.skip("cuobjdump/nvdisasm missing: no SASS evidence")
    ev = {x: sass.evidence(x, 64, torch.float16, "sm_80") for x in ("v2", "toy")}
    assert ev["toy"]["warps_per_block"] == 2 and ev["toy"]["rows_per_warp"] == 16
    assert ev["toy"]["per_tile"]["HMMA"] == ev["v2"]["per_tile"]["HMMA"] > 0  # same warp work
    models = {x: time_model.model_bound(x, 8, 12, 1024, 64, True, torch.float16, "H200",
                                        evidence=ev[x]) for x in ev}
    assert all(m["kind"] == "model" for m in models.values())
    scores = {x: e["scores_per_tile"] for x, e in ev.items()}
    table = wl.evidence_markdown(ev, scores, models, models)
    assert table.splitlines()[0] == "| per warp and K/V tile | v2 | toy |"
    assert "toy" in wl.ladder_markdown(("toy",)) and "attention_toy.cu" in wl.ladder_markdown(
        ("toy",))
    B, nh, T = 1, 2, 40
    q = torch.randn(B, nh, T, 64).to(torch.float16)
    traces = {x: emulate(q, q, q, kernel=x)[1] for x in ("v2", "toy")}
    checks = {x: dict(max_abs_err=0.0, passed=True) for x in traces}
    assert "| toy | (2, 2, 1) | 4 |" in wl.emulator_table(traces, checks)


@pytest.mark.parametrize("version", ["v1", "v2", "v3"])
def test_every_stop_agrees_with_the_specs_one_reason(version):
    """The compiler's tile, the emulator's and the launcher's checks refuse exactly the
    (head_dim, dtype) the spec's ineligibility refuses (with no GPU named): a case the
    dispatcher would send to a kernel is never refused further down, and no stop lets through
    what the dispatcher refuses."""
    spec = registry.get(version)
    for hd in (1, 8, 16, 24, 32, 48, 64, 72, 96, 100, 128, 144, 256, 257, 300):
        for dt in (torch.float32, torch.float16, torch.bfloat16):
            ok = spec.ineligibility(hd, dt, None) is None
            try:
                spec.tile(hd, dt)
                tile_ok = True
            except ValueError:
                tile_ok = False
            x = torch.zeros(1, 1, 2, hd, dtype=dt)
            assert tile_ok == ok, (version, hd, dt)
            assert (spec.launch_refusal(x, x, x, hd) is None) == ok, (version, hd, dt)
            if dt != torch.float32 or version == "v1":   # the emulator also runs v2/v3 in fp32
                assert (spec.emulator_refusal(hd) is None) == ok, (version, hd, dt)
