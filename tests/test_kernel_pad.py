"""The padded tensor-core path (issue 39): attention_v3_flash<T, HD, RD>, backend
cuda-flash-padded, spec kernels/v3pad.py.

Checked here: the dispatcher's two worlds (pad=False falls back as the source says, pad=True
pads, and the reason names the padded width); the emulator block, driven by the spec, against
the fp32 reference at every head_dim 8..128 in steps of 8 plus 70, 72 and 100, causal and not,
fp16 and bf16 (the kernel the dispatcher picks with pad=True: v3 at its own widths, v3p at the
others); the compiled evidence (tensor-core instructions, the pad's share of the mma work, the
time MODEL). The .cu itself runs on the host simulator in tests/test_kernel_v3_on_host.py (its
docstring says which head_dims and why), with the mutation tests of the padded paths.
"""
from __future__ import annotations

import pytest
import torch

from andrea_edu.dispatch import choose_backend, compare_to_reference
from andrea_edu.kernels import emulator, registry, v3pad
from andrea_edu.kernels.v3 import V3_HEAD_DIMS

GRID = tuple(range(8, 129, 8)) + (70, 72, 100)


@pytest.mark.parametrize("hd, width", [(72, 80), (70, 80), (8, 16), (100, 112), (120, 128),
                                        (80, 80), (1, 16)])
def test_padded_width_and_useful_fraction(hd, width):
    assert v3pad.padded_width(hd) == width == registry.get("v3p").width(hd)
    assert v3pad.useful_fraction(hd) == hd / width
    assert registry.get("v3p").template_args(hd) == (width, hd)


def test_the_dispatcher_pads_only_when_asked():
    for hd in GRID:
        for dt in (torch.float16, torch.bfloat16):
            off = choose_backend(hd, dt, "cuda")
            on = choose_backend(hd, dt, "cuda", pad=True)
            assert off.backend != "cuda-flash-padded"            # the source's world
            if hd in V3_HEAD_DIMS:
                assert on.backend == off.backend == "cuda-flash" and not off.notes
            else:
                assert on.backend == "cuda-flash-padded" and on.kernel == "v3p"
                w = v3pad.padded_width(hd)
                assert (f"head_dim={hd} padded to {w}" in on.reason if w != hd
                        else "needs no padding" in on.reason)
                assert any("pad=True would run cuda-flash-padded" in n for n in off.notes)
    # fp32 has no tensor-core kernel: padding changes nothing
    assert choose_backend(72, torch.float32, "cuda", pad=True).backend == "cuda-naive"
    # too wide to pad (O would not fit in registers): the fallback, in both worlds
    assert choose_backend(136, torch.float16, "cuda", pad=True).backend == "cuda-naive"
    # an old GPU: no cp.async, no padded kernel either
    assert choose_backend(72, torch.float16, "cuda", sm=75, pad=True).backend == "cuda-naive"
    # asking for the padded kernel by name pads whatever `pad` says
    assert choose_backend(72, torch.float16, "cuda", backend="cuda-flash-padded").kernel == "v3p"


def test_the_reason_names_the_padded_width():
    d = choose_backend(72, torch.float16, "cuda", pad=True)
    assert "head_dim=72 padded to 80 (8 zero columns, 90% of the tensor-core work useful)" in \
        d.reason


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_pad_must_be_a_bool(bad):
    with pytest.raises(ValueError, match=r"^pad=.* must be True or False$"):
        choose_backend(72, torch.float16, "cuda", pad=bad)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_padded_world_on_the_emulator_matches_reference(dtype, causal):
    """Every head_dim of the grid, through the kernel the dispatcher runs with pad=True."""
    g = torch.Generator().manual_seed(39)
    for hd in GRID:
        spec, _ = registry.walk(hd, dtype, pad=True)
        assert spec is not None and spec.version == ("v3" if hd in V3_HEAD_DIMS else "v3p")
        T = 70 if hd % 16 else 65                        # a tail in every K/V and query tile
        q, k, v = (torch.randn(1, 2, T, hd, generator=g).to(dtype) for _ in range(3))
        out, tr = emulator.emulate(q, k, v, causal=causal, kernel=spec.version, trace=False)
        res = compare_to_reference(out, q, k, v, causal)
        assert res["passed"], (hd, res)


def test_padded_emulator_block_is_v3s_block_at_the_padded_width():
    """The v3p block is v3's on zero-padded columns: same grid, same K/V steps, same row
    statistics as v3 run on the padded inputs (which a v3 width, 64, lets us run directly)."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 1, 130, 56, generator=g) for _ in range(3))  # 56 pads to 64
    pad = lambda x: torch.nn.functional.pad(x, (0, 8))  # noqa: E731
    out, tr = emulator.emulate(q, k, v, causal=True, kernel="v3p")
    ref, tr3 = emulator.emulate(pad(q), pad(k), pad(v), causal=True, kernel="v3")
    assert tr.grid == tr3.grid and tr.kv_tiles_loaded() == tr3.kv_tiles_loaded()
    # same scores once the scale is the real head_dim's: compare against v3 with q rescaled
    ref, _ = emulator.emulate(pad(q) * (64 / 56) ** 0.5, pad(k), pad(v), causal=True, kernel="v3")
    torch.testing.assert_close(out, ref[..., :56], atol=1e-5, rtol=1e-5)


def test_at_v3s_widths_the_padded_spec_is_v3s_own_kernel():
    """RD = HD compiles the code v3 runs (the padded paths are `if constexpr`): the same
    specialization, the same SASS; the dispatcher tries v3 first there anyway."""
    from andrea_edu.kernels import nvrtc
    for hd in V3_HEAD_DIMS:
        spec = registry.walk(hd, torch.float16, pad=True)[0]
        assert spec is not None and spec.version == "v3"
    a = nvrtc.compile_attention("v3", 64, torch.float16, "sm_90")
    b = nvrtc.compile_attention("v3p", 64, torch.float16, "sm_90")
    assert a.lowered_name == b.lowered_name and a.resources == b.resources
    if a.sass() is not None:
        assert a.sass() == b.sass()
    assert choose_backend(64, torch.float16, "cuda", backend="cuda-flash-padded").kernel == "v3p"


@pytest.mark.parametrize("hd", [72, 80])
def test_padded_kernel_compiles_to_tensor_cores_and_pays_for_the_pad(hd):
    """NVRTC's CUBIN for sm_90 (no GPU): mma.sync in the PTX, HMMA in the SASS, and the pad's
    price in the SASS count: 72 issues the tensor-core work of 80 (8 of its 80 columns zero)."""
    from andrea_edu.kernels import head_dim_evidence, nvrtc
    ck = nvrtc.compile_attention("v3p", hd, torch.bfloat16, "sm_90")
    assert ck.name_expression == f"andrea::attention_v3_flash<__nv_bfloat16, 80, {hd}>"
    assert ck.has_tensor_core_instructions() and ck.resources.spill_stores == 0
    if ck.sass() is None:
        pytest.skip("cuobjdump/nvdisasm not installed")
    r = head_dim_evidence.at(hd, pad=True)
    r80 = head_dim_evidence.at(80, pad=True)
    assert r["version"] == "v3p" and r["width"] == 80 and r["useful_columns"] == hd / 80
    assert r["tensor_per_score"] == r80["tensor_per_score"]         # zeros cost full mma
    band = r["model"]["H200"]
    assert 0 < band["lower_us"] <= band["upper_us"]
    from andrea_edu.kernels import time_model
    m = time_model.model_bound("v3p", 8, 12, 1024, hd)
    assert (m["width"], m["useful_columns"]) == (80, hd / 80)
    assert m["lower"] * 1e6 == pytest.approx(band["lower_us"])
    fallback = head_dim_evidence.at(hd, pad=False)
    assert fallback["version"] != "v3p" and fallback["pad"] is False


def test_the_cpu_backends_follow_pad():
    """The emulator and the host simulator run the kernel a GPU would run in each world."""
    for backend in ("emulator", "cpu-sim"):
        assert choose_backend(72, torch.float16, "cpu", backend=backend).kernel == "v1"
        assert choose_backend(72, torch.float16, "cpu", backend=backend, pad=True).kernel == "v3p"
