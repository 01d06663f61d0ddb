"""The kernel registry (kernels.spec, kernels.registry): a kernel version is one KernelSpec.

A real fourth version, v4 ("cuda-split": v1's loops with one block per query tile of 16 rows,
2 warps), lives in tests/fourth_rung/ as its own .cu and its own spec module. The fixture copies
both into a temporary package, imports it through sys.path and registers its SPEC, as
CONTRIBUTING.md says a contributor adds a rung. No file of the package changes (checked), yet
v4 flows through the dispatcher, the emulator (and its correctness checks against the fp32
reference and the .cu's loops), NVRTC, the SASS evidence, the time model, every figure and table
of the worklog, the benchmark's fast run and the GPU suite's case list; unregistered, it leaves
no trace.

Tests that name v1, v2 and v3 here pin the committed ladder's facts on purpose (its order, kernel
names, shared-memory bytes): a new rung is expected to change them.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import math
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch

import andrea_edu
from andrea_edu.dispatch import attention, backends, choose_backend
from andrea_edu.kernels import grid, nvrtc, registry, sass, time_model
from andrea_edu.kernels.emulator import emulate
from andrea_edu.kernels.spec import KernelSpec
from andrea_edu.bench import dispatched

try:
    from andrea_edu.kernels import toolkit as _tk
    _tk._import_nvrtc()
    _tk.include_dirs()
    NVRTC = True
except Exception:  # noqa: BLE001  (no NVRTC or headers: the compile parts skip, saying why)
    NVRTC = False
needs_nvrtc = pytest.mark.skipif(not NVRTC, reason="NVRTC or the CUDA headers are missing")

FOURTH = Path(__file__).parent / "fourth_rung"       # attention_v4_split.cu and v4.py
PACKAGE = Path(andrea_edu.__file__).parent


def _package_files() -> dict:
    """{path: sha256} of the library's .py and .cu files."""
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(PACKAGE.rglob("*"))
            if p.suffix in (".py", ".cu")}


@pytest.fixture()
def fourth(tmp_path, monkeypatch):
    """v4 as a module of a temporary package (andrea_rung4), registered; removed after."""
    before = _package_files()
    pkg = tmp_path / "andrea_rung4"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""A kernel version outside andrea_edu."""\n')
    for name in ("v4.py", "attention_v4_split.cu"):
        shutil.copy(FOURTH / name, pkg / name)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("andrea_rung4.v4")
    registry.register(module.SPEC)
    try:
        yield module.SPEC
    finally:
        if "v4" in registry.versions():
            registry.unregister("v4")
        for name in [m for m in sys.modules if m.split(".")[0] == "andrea_rung4"]:
            del sys.modules[name]
        assert _package_files() == before, "a file of the package changed"


def test_the_registry_lists_v1_v2_v3_and_each_spec_reads_its_file():
    """The committed ladder, pinned on purpose (v3p: v3 padded, kernels/v3pad.py)."""
    assert registry.versions() == ("v1", "v2", "v3p", "v3")
    assert [s.version for s in registry.preferred()] == ["v3", "v3p", "v2", "v1"]
    assert dict(registry.KERNEL_NAMES) == {"v1": "attention_v1", "v2": "attention_v2_wmma",
                                           "v3p": "attention_v3_flash",
                                           "v3": "attention_v3_flash"}
    for s in registry.specs():
        assert isinstance(s, KernelSpec)
        assert re.search(rf"\b{s.kernel}\(", s.source_text())
        assert s.threads == 32 * s.warps and s.rows(64) % s.warps == 0
    with pytest.raises(ValueError, match=r"version='v4' is not one of \('v1', 'v2', 'v3p', 'v3'\)"):
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
    """`if version == "v2"`, `kernel != "v1"` or `kernel in ("v1", "v2", "v3")` lives in no
    module but the spec modules (issue 17): code paths iterate the registry."""
    specs = {Path(sys.modules[s.emulate_block.__module__].__file__ or "")
             for s in registry.specs()}
    rule = re.compile(r"""(version|kernel)\s*(==|!=)\s*["']v\d|\bin\s*\(\s*["']v\d""")
    hits = [f"{p.relative_to(PACKAGE)}:{n}" for p in PACKAGE.rglob("*.py") if p not in specs
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if rule.search(line.split("#")[0])]
    assert hits == []
    assert rule.search('if trace.kernel != "v1" and band') and rule.search('d.kernel in ("v1",')


def test_the_fourth_version_is_its_own_module_not_a_copy_of_a_spec(fourth):
    assert fourth.emulate_block.__module__ == "andrea_rung4.v4"
    assert fourth.source_dir is not None and fourth.source_dir.name == "andrea_rung4"
    assert fourth.source_dir != PACKAGE / "kernels"
    assert fourth.color is None and registry.color("v4") not in {
        registry.color(v) for v in ("v1", "v2", "v3")}          # a colour of its own
    assert fourth.constants() == {"V4_WARPS": 2, "V4_THREADS": 64, "V4_ROWS_PER_WARP": 8,
                                  "V4_BQ": 16, "V4_BK": 32}


def test_a_fourth_version_flows_through_dispatcher_emulator_model_bench_and_gpu_suite(fourth):
    from andrea_edu.bench import suites
    from andrea_lab.bench import gpucheck

    # the dispatcher: the newest registered kernel is tried first
    assert "cuda-split" in backends() and registry.versions() == ("v1", "v2", "v3p", "v3", "v4")
    d = choose_backend(64, torch.float16, "cuda")
    assert (d.backend, d.kernel) == ("cuda-split", "v4")
    assert choose_backend(300, torch.float16, "cuda").backend == "sdpa"
    assert choose_backend(64, torch.float16, "cpu", "emulator").kernel == "v4"

    # the emulator: one block per (b, h, 16-row query tile), 64 threads; its correctness checks
    # against the fp32 reference and its tile schedule against attention_v4_split.cu's loops
    import test_emulator
    test_emulator.emulator_checks("v4")
    B, nh, T, hs = 2, 3, 70, 64
    q, k, v = (torch.randn(B, nh, T, hs).to(torch.float16) for _ in range(3))
    out, tr = emulate(q, k, v, causal=True, kernel="v4")
    assert tr.grid == (B * nh, math.ceil(T / 16), 1) == grid.grid_shape("v4", B, nh, T)
    assert tr.threads_per_block == 64
    out_d, dec = attention(q, k, v, causal=True, backend="emulator", return_decision=True)
    assert dec.kernel == "v4" and torch.equal(out_d, out)

    # the time model's work: v1's warp-tiles at 8 rows a warp, one block per query tile
    w, w1 = (time_model.launch_work(x, 8, 12, 1024, False, 64) for x in ("v4", "v1"))
    assert w["blocks"] == 8 * 12 * 1024 // 16 and w1["blocks"] == 8 * 12
    assert w["warps_per_block"] == 2 and w["rows_per_block_tile"] == 16
    assert ("v4", 64, torch.float16) in nvrtc.specializations()

    # the benchmark, fast, on this CPU: v4's backend is swept beside the others
    res = suites.run_suite("headdim", device="cpu", fast=True, progress=False, head_dims=(16,),
                           shapes=["ANDREA-12M"], series=["n_head"])
    mine = [r for r in res["records"] if r["backend"] == "cuda-split"]
    assert mine and all(r["status"] == "unavailable" and "CUDA" in r["reason"] for r in mine)

    # the GPU suite's cases: v4 at every shape, dtype and head_dim its limits allow
    cases = gpucheck.cases(sm=90)
    v4 = {(c[1], c[5]) for c in cases if c[0] == "cuda-split"}
    assert v4 == {(dt, hd) for dt in gpucheck.DTYPES for hd in (1, 8, 24, 32, 64, 72, 100, 128,
                                                                256)}
    assert "cuda-split" in gpucheck.all_backends()
    assert {c[4] for c in cases if c[0] == "cuda-split"} == {T for _, _, T in gpucheck.SHAPES}
    row = gpucheck.run_case(("cuda-split", torch.float32, 1, 1, 17, 8, False), sm=90)
    assert row["expected_backend"] == "cuda-split" and row["kernel"] == "v4"
    assert not row["passed"] and row["error"]   # no CUDA tensors here: the error path only


def test_the_fourth_version_leaves_no_trace(fourth):
    registry.unregister("v4")
    assert registry.versions() == ("v1", "v2", "v3p", "v3") and "cuda-split" not in backends()
    assert choose_backend(64, torch.float16, "cuda").kernel == "v3"
    with pytest.raises(ValueError, match="kernel='v4' is not one of"):
        emulate(*(torch.zeros(1, 1, 4, 64),) * 3, kernel="v4")


@needs_nvrtc
def test_a_fourth_version_compiles_and_every_worklog_figure_draws_it(fourth):
    import matplotlib
    import matplotlib.pyplot as plt

    from andrea_edu.figures import kernel_worklog as wl
    from andrea_edu.figures.kernel_source import first_line
    from andrea_edu.kernels import head_dim_evidence, occupancy

    matplotlib.use("Agg")
    ck = nvrtc.compile_attention("v4", 64, torch.float16, "sm_80")
    assert ck.threads_per_block == 64 and ck.grid(2, 3, 70) == grid.grid_shape("v4", 2, 3, 70)
    assert ck.resources.dynamic_shared_bytes == fourth.shared_bytes(2, torch.float16)
    assert not ck.has_tensor_core_instructions()
    with pytest.raises(ValueError, match=r"arch='sm_75': head_dim=256 needs more than"):
        nvrtc.compile_attention("v4", 256, torch.float16, "sm_75")   # from v4's one rule

    # the .cu reads the spec's bytes: a spec that forgets a buffer does not compile
    broken = dataclasses.replace(fourth, version="v4-broken", backend="cuda-v4-broken",
                                 smem_layout=lambda c, t, es: fourth.smem_layout(c, t, es)[:-1])
    registry.register(broken)
    try:
        with pytest.raises(nvrtc.CompileError, match="carve-up"):
            nvrtc.compile_attention("v4-broken", 64, torch.float16, "sm_80", use_cache=False)
    finally:
        registry.unregister("v4-broken")

    if _tk.find_binary("cuobjdump") is None or _tk.find_binary("nvdisasm") is None:
        pytest.skip("cuobjdump/nvdisasm missing: no SASS evidence")
    # the chapter's inputs, built as its cells build them, at one head_dim
    dtype, hs, B, nh, T = torch.bfloat16, 64, 8, 12, 1024
    versions = registry.ladder()                 # the worklog's rungs (v3p pads: beside them)
    ev = {(v, hs): sass.evidence(v, hs, dtype, "sm_90") for v in versions}
    assert ev["v4", hs]["warps_per_block"] == 2 and ev["v4", hs]["rows_per_warp"] == 8
    models = {(v, hs): {g: time_model.model_bound(v, B, nh, T, hs, True, dtype, g,
                                                  evidence=ev[v, hs] if g == "H200" else None)
                        for g in ("H200", "RTX 4090")} for v in versions}
    scores = {key: e["scores_per_tile"] for key, e in ev.items()}
    design = {v: models[v, hs]["H200"] for v in versions}

    def drew_v4(fig) -> bool:
        """Some artist of the figure is drawn (filled, outlined or as a line) in v4's colour."""
        import numpy as np
        want = matplotlib.colors.to_rgba(registry.color("v4"))[:3]
        for ax in fig.axes:
            for a in ax.get_children():
                for name in ("get_facecolor", "get_edgecolor", "get_color"):
                    try:
                        rgba = matplotlib.colors.to_rgba_array(getattr(a, name)())
                    except (AttributeError, ValueError, TypeError):
                        continue
                    if len(rgba) and np.isclose(rgba[:, :3], want).all(axis=1).any():
                        return True
        return False

    assert "**v4**, `attention_v4_split` in `attention_v4_split.cu`" in wl.ladder_markdown()
    block = wl.changes_markdown([("S", {v: first_line(v, r"blockIdx\.x") for v in versions})])
    assert "/* v4" in block
    q = torch.randn(2, 3, 70, 32).to(dtype)
    traces = {v: emulate(q, q, q, causal=True, kernel=v)[1] for v in versions}
    assert (traces["v4"].grid, traces["v4"].n_blocks) == ((6, 5, 1), 30)  # 5 per (b, h)
    fig = wl.decomposition_figure(traces["v4"])
    # one query tile per block: its warps' rows drawn dotted
    assert any(ln.get_linestyle() == ":" for ln in fig.axes[1].lines)
    assert wl.rung_numbers(ev["v4", hs], scores["v4", hs],
                           design["v4"])["scores per warp-tile"] == scores["v4", hs]
    assert "MODEL H200, µs" in wl.rung_numbers(ev["v4", hs], scores["v4", hs],
                                              models["v4", hs]["H200"])
    assert drew_v4(wl.evidence_figure(ev, scores, models, "v4", hs))
    assert drew_v4(wl.evidence_figure(ev, scores, models, "v1", hs))   # v4 as ticks
    assert drew_v4(wl.model_overview_figure(models))
    assert not drew_v4(wl.model_overview_figure({k: m for k, m in models.items()
                                                 if k[0] != "v4"}))   # the probe can fail
    rows = [head_dim_evidence.at_fixed_d_model(n, d_model=768, B=B, T=T) for n in (12, 24)]
    assert {r["version"] for r in rows} == {"v4"} and drew_v4(wl.n_head_figure(rows, 12))
    wl.fragment_figure()

    # a GPU results file holding v4: the measured rows, table and figure carry it
    recs = []
    for backend, kernel, ms in (("sdpa", None, 1.0), ("cuda-naive", "v1", 50.0),
                                ("cuda-split", "v4", 20.0)):
        p = dict(shape="ANDREA-120M", series="n_head=12", B=B, T=T, n_head=nh, head_dim=hs,
                 causal=True, dtype="bfloat16")
        recs.append(dict(backend=backend, status="ok", params=p, median_ms=ms, kernel=kernel))
    results = dict(records=recs, provenance=dict(device="NVIDIA H200", date="2026-12-01",
                                                 git_commit="0" * 10), _path="/x/b.json")
    measured = dispatched.measured_rows(results, nh=nh)
    assert {r["version"] for r in measured} == {"v1", "v4"}
    assert ["v4", "64", "v4"] in [c[:3] for c in wl.measured_cells(measured)]
    assert drew_v4(wl.measured_figure(measured, results))

    # Checking the source: its rows for v4
    fill = occupancy.grid_fill(grid.grid_shape("v4", B, nh, T)[1] * B * nh,
                               ev["v4", hs]["blocks_per_sm"]["H200"], occupancy.H200)
    per_pair = {(b, h): 5 for b in range(2) for h in range(3)}
    assert wl.one_block_check(per_pair, grid.grid_shape("v4", B, nh, T), fill)[1] \
        == "holds with a caveat"
    assert wl.cooperate_check(16, 70, ev["v4", hs], 2)[1] == "holds with a caveat"
    sig = grid.kernel_signature("v4")
    assert wl.never_knows_check(sig, [], grid.index_lines("v4"), True)[1] == "holds"
    plt.close("all")


def _stops_agree(version: str) -> None:
    """The compiler's tile, the emulator's and the launcher's refusals, reached through their
    entry points, refuse exactly the (head_dim, dtype) the spec's one limits function refuses
    with no GPU named (the emulator also runs any kernel in fp32: only head_dim decides there);
    and the GPU's refusal on an sm_90 is the same rule with sm=90."""
    from andrea_edu.kernels import launch

    spec = registry.get(version)
    for hd in (1, 8, 16, 24, 32, 48, 64, 72, 96, 100, 128, 144, 256, 257, 300):
        for dt in (torch.float32, torch.float16, torch.bfloat16):
            ok = spec.ineligibility(hd, dt, None) is None
            try:
                nvrtc._tile(version, hd, dt)
                tile_ok = True
            except ValueError:
                tile_ok = False
            assert tile_ok == ok, (version, hd, dt)
            x = torch.zeros(1, 1, 2, hd, dtype=dt)
            try:
                launch.check_launch_inputs(x, x, x, version)
                launch_ok = True
            except ValueError as e:
                launch_ok = "CUDA tensors" in str(e)   # passed the limits, refused for the CPU
            assert launch_ok == ok, (version, hd, dt)
            assert (spec.gpu_refusal(hd, dt, 90, "sm_90") is None) == (
                spec.ineligibility(hd, dt, 90) is None)
        runs_somewhere = any(spec.ineligibility(hd, dt, None) is None for dt in spec.dtypes)
        try:
            emulate(*(torch.zeros(1, 1, 2, hd),) * 3, kernel=version, trace=False)
            emu_ok = True
        except ValueError:
            emu_ok = False
        assert emu_ok == runs_somewhere, (version, hd)


@pytest.mark.parametrize("version", registry.versions())
def test_every_stop_agrees_with_the_specs_one_reason(version):
    _stops_agree(version)


def test_every_stop_agrees_for_the_fourth_version(fourth):
    _stops_agree("v4")
