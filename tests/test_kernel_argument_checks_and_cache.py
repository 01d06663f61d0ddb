"""Bad arguments to the dispatcher, the emulator and the compiler are refused in one line that
names the parameter and what is allowed; the kernel disk cache checks each entry it loads."""
from __future__ import annotations

import json
import warnings

import pytest
import torch

from andrea_edu.dispatch import choose_backend


@pytest.mark.parametrize("kw, match", [
    (dict(head_dim=True), "head_dim=True"), (dict(sm=-5), "sm=-5"), (dict(sm="90"), "sm='90'"),
    (dict(sm=9.0), "sm=9.0"), (dict(requires_grad="no"), "requires_grad='no'"),
    (dict(requires_grad=None), "requires_grad=None")])
def test_choose_backend_rejects_bad_arguments_in_one_line(kw, match):
    args = dict(head_dim=64, dtype=torch.float16, device_type="cuda") | kw
    with pytest.raises(ValueError, match=match) as e:
        choose_backend(**args)
    assert "\n" not in str(e.value)


def test_no_emulator_decision_for_a_head_dim_no_kernel_runs():
    assert choose_backend(256, torch.float32, "cpu", "emulator").kernel == "v1"
    with pytest.raises(ValueError, match="head_dim=1000.*reference"):
        choose_backend(1000, torch.float32, "cpu", "emulator")


def test_emulate_refuses_inputs_that_require_grad():
    from andrea_edu.kernels.emulator import emulate
    q = torch.randn(1, 2, 5, 8, requires_grad=True)
    with pytest.raises(ValueError, match="forward-only"):
        emulate(q, q, q)
    with torch.no_grad():
        out, _ = emulate(q, q, q, trace=False)  # said explicitly: fine
    assert out.shape == q.shape and not out.requires_grad


# ---------------------------------------------------------------- compile_attention
nvrtc_ok = True
try:
    from andrea_edu.kernels import toolkit as _tk
    _tk._import_nvrtc()
    _tk.include_dirs()
except Exception:  # noqa: BLE001  (no NVRTC or headers: the compile tests skip, saying why)
    nvrtc_ok = False
needs_nvrtc = pytest.mark.skipif(not nvrtc_ok, reason="NVRTC or the CUDA headers are missing")


@needs_nvrtc
@pytest.mark.parametrize("arch, match", [(90, "string like 'sm_90'"), ("90", "string like"),
                                         ("sm_70", "supported: sm_75, sm_80")])
def test_compile_attention_names_the_supported_archs(arch, match):
    from andrea_edu.kernels.nvrtc import compile_attention
    with pytest.raises(ValueError, match=match):
        compile_attention("v1", 64, torch.float32, arch=arch)


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    from andrea_edu.kernels import nvrtc
    monkeypatch.setenv("ANDREA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(nvrtc, "_MEMORY", {})
    first = nvrtc.compile_attention("v1", 32, torch.float32, "sm_80")
    assert not first.from_cache
    nvrtc._MEMORY.clear()
    return nvrtc, tmp_path, first


def _damage(kind, folder):
    cubin = next(folder.glob("*.cubin"))
    ptx = next(folder.glob("*.ptx"))
    meta = next(folder.glob("*.json"))
    if kind == "truncated cubin":
        cubin.write_bytes(cubin.read_bytes()[:64])
    elif kind == "emptied cubin":
        cubin.write_bytes(b"")
    elif kind == "random cubin":
        cubin.write_bytes(bytes(range(256)) * (len(cubin.read_bytes()) // 256 + 1))
    elif kind == "half a ptx":
        ptx.write_text(ptx.read_text()[: len(ptx.read_text()) // 2])
    elif kind == "meta is a list":
        meta.write_text("[1, 2]")
    elif kind == "meta not json":
        meta.write_text("{")
    return {"truncated cubin": cubin, "emptied cubin": cubin, "random cubin": cubin,
            "half a ptx": ptx, "meta is a list": meta, "meta not json": meta}[kind]


@needs_nvrtc
def test_an_intact_entry_loads_from_the_disk_cache(cache):
    nvrtc, _, first = cache
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = nvrtc.compile_attention("v1", 32, torch.float32, "sm_80")
    assert again.from_cache and again.cubin == first.cubin and again.ptx == first.ptx
    meta = json.loads(next(cache[1].glob("*.json")).read_text())
    assert meta["files"][".cubin"]["bytes"] == len(first.cubin)


@needs_nvrtc
@pytest.mark.parametrize("kind", ["truncated cubin", "emptied cubin", "random cubin",
                                  "half a ptx", "meta is a list", "meta not json"])
def test_a_damaged_entry_is_recompiled_and_named(cache, kind):
    nvrtc, folder, first = cache
    bad = _damage(kind, folder)
    with pytest.warns(RuntimeWarning, match="recompiling") as w:
        again = nvrtc.compile_attention("v1", 32, torch.float32, "sm_80")
    assert str(bad.with_suffix("")) in str(w[0].message)  # the path of the entry
    assert not again.from_cache and again.cubin[:4] == b"\x7fELF"
    assert again.resources == first.resources
    nvrtc._MEMORY.clear()
    assert nvrtc.compile_attention("v1", 32, torch.float32, "sm_80").from_cache  # repaired


@needs_nvrtc
def test_an_entry_from_before_the_check_is_recompiled_quietly(cache):
    nvrtc, folder, _ = cache
    meta = next(folder.glob("*.json"))
    d = json.loads(meta.read_text())
    del d["files"]
    meta.write_text(json.dumps(d))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not nvrtc.compile_attention("v1", 32, torch.float32, "sm_80").from_cache
