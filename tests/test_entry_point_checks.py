"""Entry points check their inputs as attention() does, each failure one line naming the
argument: reference_attention, AndreaModel, the GPT-2 loader, the kernel cache."""
from __future__ import annotations

import json
import types

import pytest
import torch

from andrea_edu import reference_attention
from andrea_edu.config import AndreaConfig
from andrea_edu.model import AndreaModel


def _one_line(e) -> str:
    msg = str(e.value)
    assert "\n" not in msg and len(msg) < 400, msg
    return msg


# ---------------------------------------------------------------- reference_attention
@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64])
def test_reference_attention_refuses_non_float_dtypes(dtype):
    q = torch.ones(1, 2, 3, 4).to(dtype)
    with pytest.raises(TypeError) as e:
        reference_attention(q, q, q)
    assert "q.dtype" in _one_line(e) and "float64" in str(e.value)


def test_reference_attention_computes_float64_in_float64():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 4, generator=g, dtype=torch.float64) for _ in range(3))
    out = reference_attention(q, k, v, causal=True)
    att = torch.softmax((q @ k.transpose(-2, -1) / 2.0).masked_fill(
        ~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf")), dim=-1)
    assert out.dtype == torch.float64
    assert (out - att @ v).abs().max() < 1e-14  # float32 math would leave ~1e-7


@pytest.mark.parametrize("change, words", [
    (lambda q: (q, q[:, :, :2], q), "k.shape=(1, 2, 2, 4) differs from q.shape=(1, 2, 3, 4)"),
    (lambda q: (q, q, q.double()), "v.dtype=torch.float64 differs from q.dtype=torch.float32"),
    (lambda q: (q[0], q[0], q[0]), "4 dims"),
    (lambda q: (q[:, :, :0], q[:, :, :0], q[:, :, :0]), "empty dimension"),
])
def test_reference_attention_shapes_in_one_line(change, words):
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises((ValueError, TypeError)) as e:
        reference_attention(*change(q))
    assert words in _one_line(e)


# ---------------------------------------------------------------- AndreaModel
@pytest.fixture(scope="module")
def tiny():
    return AndreaModel(AndreaConfig(d_model=16, n_head=2, n_layer=1, vocab_size=10, block_size=8))


def test_all_targets_ignored_is_an_error_not_nan(tiny):
    x = torch.randint(0, 10, (2, 4))
    with pytest.raises(ValueError) as e:
        tiny(x, torch.full((2, 4), -100))
    assert "-100" in _one_line(e)
    some = torch.full((2, 4), -100)
    some[0, 0] = 3
    assert torch.isfinite(tiny(x, some)[1])  # one kept target: a defined mean


@pytest.mark.parametrize("call, words", [
    (lambda m: m(torch.zeros(2, 0, dtype=torch.long)), "T=0"),
    (lambda m: m(torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long)),
     "targets.shape=(2, 3)"),
    (lambda m: m(torch.zeros(2, 4, dtype=torch.long), torch.full((2, 4), 10)), "targets hold 10"),
    (lambda m: m(torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 4)), "torch.long"),
    (lambda m: m.per_position_loss(torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 5,
                                   dtype=torch.long)), "targets.shape"),
])
def test_model_inputs_in_one_line(tiny, call, words):
    with pytest.raises((ValueError, TypeError)) as e:
        call(tiny)
    assert words in _one_line(e)


def test_model_seed_must_be_an_int():
    cfg = AndreaConfig(d_model=16, n_head=2, n_layer=1, vocab_size=10, block_size=8)
    bad: object
    for bad in ("a", 1.5, -1, True):
        with pytest.raises(TypeError) as e:
            AndreaModel(cfg, seed=bad)  # type: ignore[arg-type]  # the wrong type under test
        assert "seed=" in _one_line(e)


# ---------------------------------------------------------------- the GPT-2 loader
transformers = pytest.importorskip("transformers")


def _hf_state(n_layer=2, n_embd=64, n_head=4):
    cfg = transformers.GPT2Config(n_embd=n_embd, n_layer=n_layer, n_head=n_head, vocab_size=101,
                                  n_positions=40)
    torch.manual_seed(0)
    m = transformers.GPT2LMHeadModel(cfg)
    return {k: v.detach().contiguous() for k, v in m.state_dict().items()
            if k != "lm_head.weight"}, cfg


def test_another_gpt2_size_is_one_short_line(tmp_path):
    from andrea_lab import gpt2_small as G
    from safetensors.torch import save_file
    state, _ = _hf_state()
    path = tmp_path / "model.safetensors"
    save_file(state, str(path))
    with pytest.raises(G.GPT2FileError) as e:
        G.load_gpt2_small(path)  # a 2-layer, d_model 64 file given to GPT-2 small's loader
    msg = _one_line(e)
    assert str(path) in msg and "2 layers, d_model 64" in msg and "12 layers" in msg
    assert "config_from_hf" in msg  # which call loads what was found


def test_a_wrong_head_count_is_refused_when_the_config_says_so():
    from andrea_lab import gpt2_small as G
    state, hf_cfg = _hf_state(n_head=4)
    right = G.config_from_hf(hf_cfg)
    G.from_gpt2(state, right, hf_cfg)  # loads
    wrong = right.replace(n_head=8)  # the same shapes: c_attn is [C, 3C] whatever n_head
    with pytest.raises(G.GPT2FileError) as e:
        G.from_gpt2(state, wrong, hf_cfg)
    assert "n_head=8" in _one_line(e) and "n_head=4" in str(e.value)
    assert G.describe_state(state) == {"n_layer": 2, "d_model": 64, "vocab_size": 101,
                                       "block_size": 40}


def test_a_torch_save_file_is_one_line(tmp_path):
    from andrea_lab import gpt2_small as G
    state, _ = _hf_state()
    path = tmp_path / "pytorch_model.bin"
    torch.save(state, path)
    with pytest.raises(G.GPT2FileError) as e:
        G.load_gpt2_small(path)
    msg = _one_line(e)
    assert "not a safetensors file" in msg and "torch.load" in msg


# ---------------------------------------------------------------- the kernel cache
def _fake_kernel():
    return types.SimpleNamespace(ptx="// ptx\n.visible .entry k()", cubin=b"\x7fELF" + bytes(60),
                                 lowered_name="_Z1kv", compile_seconds=0.5,
                                 log="ptxas info    : Used 40 registers, 0 bytes spill stores")


def test_the_cache_hashes_the_compiler_log(tmp_path):
    from andrea_edu.kernels import nvrtc
    disk = tmp_path / "v1_1_float_sm_90_abc"
    nvrtc._write_disk(disk, _fake_kernel())
    meta, ptx, cubin = nvrtc._read_disk(disk)
    assert meta["log"].startswith("ptxas") and cubin.startswith(b"\x7fELF")
    d = json.loads(disk.with_suffix(".json").read_text())
    d["log"] = d["log"].replace("40 registers", "20 registers")  # an edited log served as fact
    disk.with_suffix(".json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match="log"):
        nvrtc._read_disk(disk)
    del d["meta_sha256"]  # an entry from before the log was hashed: recompiled quietly
    disk.with_suffix(".json").write_text(json.dumps(d))
    with pytest.raises(nvrtc._UnverifiableEntry):
        nvrtc._read_disk(disk)


def test_no_temporary_file_outlives_a_failed_cache_write(tmp_path):
    from andrea_edu.kernels import nvrtc
    disk = tmp_path / "v1_1_float_sm_90_abc"
    disk.with_suffix(".json").mkdir()  # a folder where the meta file goes
    for _ in range(3):
        nvrtc._write_disk(disk, _fake_kernel())
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_compile_attention_refuses_a_bool_head_dim():
    from andrea_edu.kernels import nvrtc
    with pytest.raises(ValueError) as e:
        nvrtc.compile_attention("v1", True, torch.float16)
    assert "head_dim=True" in _one_line(e)



# ---------------------------------------------------------------- a busy machine
def test_notebook_kernels_cap_their_thread_pools(monkeypatch):
    from andrea_edu import env
    before = torch.get_num_threads()
    try:
        for k in env.THREAD_VARS:
            monkeypatch.delenv(k, raising=False)
        monkeypatch.setattr(env.os, "cpu_count", lambda: 64)
        assert env.cap_threads() == env.THREAD_CAP == 4
        assert all(env.os.environ[k] == "4" for k in env.THREAD_VARS)
        assert torch.get_num_threads() <= 4
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's choice stands
        assert env.cap_threads() is None and env.os.environ["OMP_NUM_THREADS"] == "2"
    finally:
        torch.set_num_threads(before)


def test_a_dead_kernel_is_reported_with_its_signal():
    import subprocess
    import sys
    from andrea_lab.execute_chapters import dead_kernel_reason
    p = subprocess.Popen([sys.executable, "-c",
                          "import os, signal; os.kill(os.getpid(), signal.SIGABRT)"])
    p.wait()
    client = types.SimpleNamespace(km=types.SimpleNamespace(
        provisioner=types.SimpleNamespace(process=p)))
    msg = dead_kernel_reason(client)
    assert "SIGABRT" in msg and "\n" not in msg
    assert "no exit status" in dead_kernel_reason(object())


def test_runs_on_says_in_one_line_when_no_gpu(capsys, monkeypatch):
    import torch

    from andrea_edu import env

    assert env.runs_on("cpu") is True
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert env.runs_on("cuda") is False
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "device='cuda'" in out and "GPU" in out
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert env.runs_on("cuda") is True
    with pytest.raises(ValueError, match=r"device='gpu': allowed values are 'cpu', 'cuda'"):
        env.runs_on("gpu")
