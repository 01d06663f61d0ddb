"""pipeline (steps, formulas), pipeline_timing (per-step times), tracer (one token), figures."""
from __future__ import annotations

import json
import math
from types import SimpleNamespace

import matplotlib
import pytest

from andrea_edu.data import DataFileError
import torch

from andrea_lab.pipeline_timing import save_timing
from andrea_edu import pipeline as P
from andrea_edu.pipeline import ops as PO
from andrea_edu.pipeline import timing as PT
from andrea_lab import pipeline_timing as lab_timing
from andrea_edu.pipeline import tracer as PTR
from andrea_edu.bench.timing import attention_flops, matmul_flops
from andrea_edu.config import ANDREA_120M, AndreaConfig, param_counts
from andrea_edu.dispatch import Backend
from andrea_edu.model import AndreaModel
from andrea_edu.projections import project_c_attn
from andrea_edu.pipeline.tracer import trace_token

TINY = AndreaConfig(d_model=32, n_head=4, n_layer=3, vocab_size=64, block_size=16, name="tiny")


@pytest.fixture(scope="module")
def model():
    return AndreaModel(TINY, attn=Backend("auto"), seed=1)


def ids(B=2, T=7, seed=0, V=TINY.vocab_size):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- formulas by hand
def test_formulas_on_hand_computed_cases():
    assert matmul_flops(2, 3, 4) == 48  # 2 * 2 * 3 * 4
    assert attention_flops(1, 1, 2, 1, causal=False) == 16  # 4 * 1 * 1 * 2^2 * 1
    assert attention_flops(1, 1, 2, 1, causal=True) == 8
    assert attention_flops(2, 3, 5, 7, causal=False) == 4 * 2 * 3 * 25 * 7
    assert P.matmul_bytes(2, 3, 4, torch.float32) == (2 * 4 + 4 * 3 + 2 * 3) * 4
    assert P.matmul_bytes(2, 3, 4, torch.bfloat16) == 26 * 2
    assert P.attention_bytes(1, 2, 3, 4, torch.float16) == 4 * 1 * 2 * 3 * 4 * 2
    assert P.attention_bytes(1, 2, 3, 4, torch.float16, scores_in_memory=True) == (96 + 36) * 2
    assert P.itemsize(torch.float32) == 4 and P.itemsize(torch.bfloat16) == 2
    with pytest.raises(TypeError, match="dtype"):
        P.itemsize("float32")


def test_one_layer_costs_against_independent_arithmetic(model):
    B, T, C, nh = 2, 8, TINY.d_model, TINY.n_head
    st = {s.name: s for s in P.layer_steps(model, B, T, layer=1)}
    N = B * T
    assert st["qkv"].flops == 2 * N * C * 3 * C
    assert st["qkv"].bytes == (N * C + C * 3 * C + N * 3 * C) * 4
    assert st["W_O"].flops == 2 * N * C * C
    assert st["mlp_up"].flops == st["mlp_down"].flops == 2 * N * C * 4 * C
    assert st["attention"].flops == 4 * B * nh * T * T * (C // nh) / 2  # the model is causal
    assert st["qkv"].intensity == st["qkv"].flops / st["qkv"].bytes
    assert all(s.flops == 0 and s.bytes == 0 and math.isnan(s.intensity)
               for s in st.values() if s.kind == "view")
    assert st["concat"].bytes == 2 * N * C * 4 and st["concat"].flops == 0


# ---------------------------------------------------------------- steps read off the model
def test_model_steps_match_the_modules(model):
    B, T = 2, 8
    steps = P.model_steps(model, B, T)
    assert len(steps) == 1 + len(P.LAYER_STEP_INFO) * TINY.n_layer + 2
    assert [s.layer for s in steps if s.name == "attention"] == list(range(TINY.n_layer))
    params = dict(model.named_parameters())
    weights = {}
    for s in steps:
        if s.kind == "matmul" and s.name != "lm_head":
            w = params[s.module]  # every weight a step names is a parameter of the model
            assert tuple(w.shape) == s.inputs[1][1]
            weights[s.module] = w
    # the matmul steps read every attention and MLP weight exactly once
    pc = param_counts(TINY)
    assert sum(w.numel() for w in weights.values()) == pc.attention + pc.mlp
    # so their FLOPs are 2 x tokens x those parameters, plus the LM head's 2 x N x V x C
    mm = sum(s.flops for s in steps if s.kind == "matmul")
    assert mm == 2 * B * T * (pc.attention + pc.mlp + TINY.vocab_size * TINY.d_model)


def test_meta_model_of_andrea_120m_and_the_five_steps():
    m = AndreaModel(ANDREA_120M, device="meta")
    assert P.qkv_is_fused(m)
    five = P.five_steps(m, 1, 128)
    layer = {s.name: s for s in P.layer_steps(m, 1, 128)}
    assert [s.name for s in five] == ["q_proj", "k_proj", "v_proj", "attention", "W_O"]
    assert sum(s.flops for s in five[:3]) == layer["qkv"].flops  # one fused matmul = three
    assert sum(s.bytes for s in five[:3]) > layer["qkv"].bytes  # ... that each re-read x
    assert len(P.model_steps(m, 1, 128)) == 3 + 14 * 12
    assert sum(P.totals(P.model_steps(m, 1, 128)).values()) == pytest.approx(
        sum(s.flops for s in P.model_steps(m, 1, 128)))


def test_run_shapes_equal_the_steps_shapes(model):
    B, T = 2, 7
    seen = []

    def mark(layer, name, out, **info):
        for o in (out if isinstance(out, tuple) else (out,)):
            seen.append((layer, name, tuple(o.shape)))
        return out

    with torch.no_grad():
        P.model_in_steps(model, ids(B, T), mark)
    expected = [(s.layer, s.name, s.output) for s in P.model_steps(model, B, T)
                for _ in range(3 if s.name in ("split_qkv", "view_heads", "transpose") else 1)]
    assert seen == expected


def test_model_in_steps_is_the_models_forward(model):
    idx = ids(3, 9)
    with torch.no_grad():
        assert torch.equal(P.model_in_steps(model, idx, P.no_mark), model(idx)[0])


def test_the_model_is_causal_as_the_steps_assume(model):
    a, b = ids(1, 9, seed=3), ids(1, 9, seed=3)
    b[0, -1] = (b[0, -1] + 1) % TINY.vocab_size
    with torch.no_grad():
        la, lb = model(a)[0], model(b)[0]
    assert P.CAUSAL and torch.equal(la[:, :-1], lb[:, :-1])
    assert not torch.equal(la[:, -1], lb[:, -1])


@pytest.mark.parametrize("kw, match", [(dict(B=0, T=4), "B must"), (dict(B=1, T=17), "block_size"),
                                       (dict(B=1, T=True), "T must")])
def test_bad_sizes_are_refused(model, kw, match):
    with pytest.raises(ValueError, match=match):
        P.model_steps(model, **kw)


def test_other_bad_input(model):
    with pytest.raises(ValueError, match="layer must"):
        P.layer_steps(model, 1, 4, layer=3)
    with pytest.raises(ValueError, match="by must"):
        P.totals([], by="kind")
    with pytest.raises(ValueError, match="idx must"):
        P.model_in_steps(model, ids().float(), P.no_mark)
    with pytest.raises(ValueError, match="token ids"):
        P.model_in_steps(model, ids() + TINY.vocab_size, P.no_mark)
    with pytest.raises(TypeError, match="AndreaModel"):
        P.model_steps(torch.nn.Linear(2, 2), 1, 1)
    with pytest.raises(ValueError, match="chapter"):
        P.chapter_link("no_such_chapter")
    assert all(P.chapter_link(info[3]).endswith(f"({info[3]}.ipynb)") for info in P.STEP_INFO.values())


# ---------------------------------------------------------------- the tracer
def test_tracer_equals_a_plain_forwards_intermediates(model):
    idx, layer, b, t = ids(2, 9, seed=5), 1, 1, 6
    blk = model.blocks[layer]
    got: dict = {}
    hooks = [mod.register_forward_hook(lambda m, i, o, key=key: got.__setitem__(key, o))
             for key, mod in (("ln_1", blk.ln_1), ("attn", blk.attn), ("ln_2", blk.ln_2),
                              ("mlp", blk.mlp), ("block", blk),
                              ("input", model.blocks[layer - 1]))]
    try:
        with torch.no_grad():
            model(idx)
    finally:
        for h in hooks:
            h.remove()
    tr = trace_token(model, idx, layer=layer, b=b, t=t, keep=True)
    ten = tr.tensors
    assert [r.step for r in tr.rows] == ["input", *P.LAYER_STEP_INFO]
    for mine, theirs in (("input", "input"), ("ln_1", "ln_1"), ("W_O", "attn"), ("ln_2", "ln_2"),
                         ("mlp_down", "mlp"), ("residual_2", "block"), ("output", "block")):
        assert torch.equal(ten[mine], got[theirs]), mine
    q, k, v = project_c_attn(got["ln_1"], blk.attn.c_attn, TINY.n_head)
    for mine, ref in zip(ten["transpose"], (q, k, v)):
        assert torch.equal(mine, ref) and mine.stride() == ref.stride()
    for r in tr.rows:
        full = ten[r.step]
        full = full[0] if isinstance(full, tuple) else full
        assert r.shape == tuple(full.shape) and r.strides == tuple(full.stride())
        pos = tuple(i for i in r.index if not isinstance(i, str))
        assert r.values == tuple(float(x) for x in full[pos][:4])
    views = {r.step for r in tr.rows if r.view_of_previous}
    assert views == {"split_qkv", "view_heads", "transpose"}  # every other step writes memory
    for r in tr.rows[1:]:
        full = ten[r.step]
        want = 0 if r.view_of_previous else full.numel() * full.element_size()
        assert r.bytes_written == want, r.step
    assert not [r for r in tr.rows if r.step == "transpose"][0].contiguous
    assert tr.token_id == int(idx[b, t]) and "|" in tr.table()


def test_tracer_refuses_bad_positions(model):
    with pytest.raises(ValueError, match="t must"):
        trace_token(model, ids(1, 5), t=5)
    with pytest.raises(ValueError, match="layer must"):
        trace_token(model, ids(1, 5), layer=-1)
    with pytest.raises(ValueError, match="n_values"):
        trace_token(model, ids(1, 5), n_values=TINY.head_dim + 1)


# ---------------------------------------------------------------- timing
def test_time_steps_shares_sum_to_one_with_every_step(model, tmp_path):
    t = PT.time_steps(model, B=1, T=8, repeats=2, warmup=1)
    assert {(s["layer"], s["name"]) for s in t.steps} == \
        {(s.layer, s.name) for s in P.model_steps(model, 1, 8)}
    for by in ("group", "name"):
        sh = t.shares(by)
        assert sum(sh.values()) == pytest.approx(1.0) and all(v >= 0 for v in sh.values())
    assert set(t.shares("group")) == set(P.totals(P.model_steps(model, 1, 8)))
    assert t.decision["backend"] == "reference" and t.device.startswith("CPU")
    assert any("mm" in op for op in t.ops["qkv"]) and t.kernels == {}
    assert t.main_ops("qkv") == ["mm"] and t.main_ops("transpose") == ["transpose"]
    assert sum(t.shares(stat="median").values()) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="stat"):
        t.shares(stat="mean")
    assert t.forward_ms > 0 and t.marked_forward_ms > 0
    path = save_timing(t, tmp_path)
    assert path.name == "pipeline_cpu.json"
    back = PT.load_pipeline_timing("cpu", data_dir_=tmp_path)
    assert back is not None and back.shares() == pytest.approx(t.shares())
    assert PT.load_pipeline_timing("gpu", data_dir_=tmp_path) is None
    (tmp_path / "SHA256SUMS").unlink()  # a scratch folder: the value checks alone, next
    bad = json.loads(path.read_text())
    bad["device"] = "NVIDIA H200"  # a CPU file must say CPU
    (tmp_path / "pipeline_cpu.json").write_text(json.dumps(bad))
    with pytest.raises(DataFileError, match="pipeline_cpu.json.*labelled 'CPU"):
        PT.load_pipeline_timing("cpu", data_dir_=tmp_path)  # never shown; the reason, named
    with pytest.warns(RuntimeWarning, match="skipped"):
        assert PT.load_pipeline_timing("cpu", data_dir_=tmp_path, errors="warn") is None


class _FakeQueue:
    """bench.timing's GPU hooks stood in for by a device queue that behaves as a GPU's does:
    work runs in the order it was queued and never before the host queued it. An event records
    the device's clock when the device reaches it; a sleep adds its cycles; every aten op the
    host dispatches adds KERNEL_MS of device work (a stand-in kernel). Wiring only: no GPU."""
    KERNEL_MS = 0.001
    RATE = 1.0e6   # cycles per ms

    def __init__(self):
        import time
        self.perf, self.base, self.t, self.ops = time.perf_counter, time.perf_counter(), 0.0, 0

    def _host(self) -> float:
        return (self.perf() - self.base) * 1e3

    def event(self):
        q = self

        class Ev:
            def record(self):
                q.t = max(q.t, q._host())
                self.t = q.t

            def synchronize(self):
                q.sync()

            def elapsed_time(self, end):
                return end.t - self.t
        return Ev()

    def sync(self, *_):
        """The host waits for the device: its clock moves on to the device's."""
        lag = self.t - self._host()
        if lag > 0:
            self.base -= lag / 1e3

    def sleep(self, cycles):
        self.t = max(self.t, self._host()) + cycles / self.RATE

    def kernel(self):
        self.ops += 1
        self.t = max(self.t, self._host()) + self.KERNEL_MS


def test_gpu_pipeline_timing_holds_kernel_time_and_the_host_apart(model, monkeypatch):
    """Issue 41 item 3. The pipeline's GPU clock (bench.timing.QueuedEvents, the benchmarks' one
    timer) with the driver's event and sleep stood in for: after the head start, each step's
    time is the device work queued in it and nothing of Python's (which is large here: a whole
    CPU forward), the host's time is its own number, and the plain forward is timed the same
    way. Without the head start (ahead_ms=0) the host's time leaks into the steps: the check
    can fail."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from andrea_edu.bench import timing as BT
    q = _FakeQueue()
    monkeypatch.setattr(BT, "_event", q.event)
    monkeypatch.setattr(BT, "_gpu_sleep", q.sleep)
    monkeypatch.setattr(BT, "_CYCLES_PER_MS", [])
    monkeypatch.setattr(torch.cuda, "synchronize", q.sync)

    class Kernels(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            q.kernel()
            return func(*args, **(kwargs or {}))

    idx = ids(B=1, T=8)
    # a head start no loaded machine outruns (the stand-in's sleep costs nothing): the test is
    # then about what the events hold, never about this machine's pace
    monkeypatch.setattr(PT, "PASS_SLEEP_CAP_MS", 1e6)
    monkeypatch.setitem(PT._FORWARD, "ahead_ms", 1e6)
    clock = PT._Clock("cuda")
    with torch.no_grad(), Kernels():
        clock.start()   # a warm-up pass (first calls are slow), then the timed one
        P.model_in_steps(model, idx, clock)
        clock.durations_ms()
        clock.ahead_ms = 1e6
        clock.start()
        q.ops = 0
        P.model_in_steps(model, idx, clock)
        dev = clock.durations_ms()
        n_ops = q.ops
        assert not clock.host_bound and sum(clock.host_ms) > 0.05
        assert clock._q is not None and clock._q.slept_ms == pytest.approx(1e6, rel=0.01)   # the device's own measure
        assert sum(ms for *_, ms in dev) == pytest.approx(n_ops * q.KERNEL_MS, abs=1e-6)
        assert sum(ms for *_, ms in dev) < 0.5 * sum(clock.host_ms)   # Python is not in it
        assert len(clock.host_ms) == len(dev) == len(P.model_steps(model, 1, 8))
        assert clock.ahead_ms == pytest.approx(1.5 * sum(clock.host_ms) + 0.05)
        q.ops = 0
        fwd = PT._time_forward(model, idx, "cuda")
        assert fwd == pytest.approx(q.ops * q.KERNEL_MS, abs=1e-6)
        assert not PT._FORWARD["host_bound"]
        clock.ahead_ms = 0.0   # the method it replaced: no head start
        clock.start()
        P.model_in_steps(model, idx, clock)
        dev = clock.durations_ms()
        assert clock.host_bound and sum(ms for *_, ms in dev) > n_ops * q.KERNEL_MS + 0.01


def test_profiler_ranges_are_attributed_to_the_right_steps(model):
    ops, kernels = PO.profile_steps(model, ids(1, 6), cuda=False)
    assert set(ops) == set(P.STEP_INFO) - set(P.SOURCE_STEP_INFO)
    assert "aten::layer_norm" in ops["ln_1"] and "aten::matmul" not in ops["ln_1"]
    assert "aten::matmul" in ops["qkv"] and "aten::gelu" in ops["gelu"]
    assert "aten::softmax" in ops["attention"] and kernels == {}
    assert PO.main_ops(["aten.view.default", "aten.mm.default"]) == ["mm"]
    assert PO.main_ops(["aten.transpose.int"]) == ["transpose"]


def test_time_block_times_every_step_of_one_layer(model):
    x = torch.randn(1, 6, TINY.d_model)
    t = PT.time_block(model.blocks[0], x, repeats=3)
    assert list(t) == list(P.LAYER_STEP_INFO)
    assert all(len(v["runs_ms"]) == 3 and 0 <= v["min_ms"] <= v["median_ms"] for v in t.values())
    noise = PT.step_noise(t, P.layer_steps(model, 1, 6), bytes_per_s=1e10)
    assert list(noise) == list(t) and all(n["predicted_ms"] >= 0 for n in noise.values())


# One layer of ANDREA-120M's width at B=2, T=8 (the chapter's fast build), timed by hand: a clean
# set near what a 2-core CPU gives, and the same set with the reader's spike planted on c_attn.
WIDE = AndreaConfig(d_model=768, n_head=12, n_layer=1, vocab_size=64, block_size=16, name="wide")
CLEAN_MS = {"ln_1": 0.02, "qkv": 1.05, "split_qkv": 0.004, "view_heads": 0.003, "transpose": 0.003,
            "attention": 0.09, "concat": 0.02, "W_O": 0.36, "residual_1": 0.01, "ln_2": 0.02,
            "mlp_up": 1.4, "gelu": 0.03, "mlp_down": 1.45, "residual_2": 0.01}


def fake_timing(spike=None, median_spike=None):
    t = {n: {"min_ms": v, "median_ms": v * 1.1} for n, v in CLEAN_MS.items()}
    if spike:
        t[spike] = {"min_ms": 44.7, "median_ms": 45.9}
    if median_spike:  # the fastest run clean, the median a quantum late
        t[median_spike]["median_ms"] = t[median_spike]["min_ms"] + 8.0
    return t


@pytest.fixture(scope="module")
def wide_steps():
    return P.layer_steps(AndreaModel(WIDE, attn=Backend("auto"), seed=0), 2, 8)


def test_step_noise_flags_a_planted_spike_and_the_summary_refuses_a_share(wide_steps):
    from andrea_edu.figures import reading_the_pipeline as R

    labels = {n: P.LAYER_STEP_INFO[n][0] for n in CLEAN_MS}
    clean = fake_timing()
    n_clean = PT.step_noise(clean, wide_steps, bytes_per_s=1e10)
    assert not any(v["noise"] for v in n_clean.values())
    said = R.cost_summary(clean, n_clean, labels)
    assert "flagged" not in said and said["four matmuls' share"].endswith("%")

    slow = {n: {"min_ms": 4 * v["min_ms"], "median_ms": 4 * v["median_ms"]} for n, v in clean.items()}
    slow["W_O"] = {"min_ms": 3.6, "median_ms": 3.8}  # a matmul at 0.4 x the others' rate: its cost,
    assert not any(v["noise"] for v in PT.step_noise(slow, wide_steps, bytes_per_s=1e10).values())

    spiked = fake_timing(spike="qkv")
    n_spiked = PT.step_noise(spiked, wide_steps, bytes_per_s=1e10)
    assert [n for n, v in n_spiked.items() if v["noise"]] == ["qkv"]
    assert "its cost predicts" in n_spiked["qkv"]["noise"]
    said = R.cost_summary(spiked, n_spiked, labels)
    assert list(said) == ["flagged"] and list(said["flagged"]) == [labels["qkv"]]
    rows = [SimpleNamespace(step=n, label=labels[n], bytes_written=0) for n in ("qkv", "mlp_up")]
    header, body = R.cost_table(rows, spiked, n_spiked, {"qkv": ["mm"], "mlp_up": ["mm"]})
    col = header.index("noise?")
    assert body[0][col] == n_spiked["qkv"]["noise"] and body[1][col] == "no"

    view = fake_timing(spike="transpose")  # a view predicts 0 ms: a spike there is named so
    n_view = PT.step_noise(view, wide_steps, bytes_per_s=1e10)
    assert [n for n, v in n_view.items() if v["noise"]] == ["transpose"]
    assert "moves no data" in n_view["transpose"]["noise"]

    late = fake_timing(median_spike="gelu")  # runs that disagree by a quantum: noise too
    n_late = PT.step_noise(late, wide_steps, bytes_per_s=1e10)
    assert [n for n, v in n_late.items() if v["noise"]] == ["gelu"]
    assert "runs disagree" in n_late["gelu"]["noise"]


def test_step_noise_refuses_bad_arguments(wide_steps):
    with pytest.raises(ValueError, match="bytes_per_s"):
        PT.step_noise(fake_timing(), wide_steps, bytes_per_s=0)
    with pytest.raises(ValueError, match="steps lacks"):
        PT.step_noise(fake_timing(), wide_steps[:3], bytes_per_s=1e10)


def test_time_steps_refuses_bad_arguments(model):
    with pytest.raises(ValueError, match="repeats"):
        PT.time_steps(model, repeats=0)
    with pytest.raises(ValueError, match="device"):
        PT.load_pipeline_timing("tpu")


def test_cli_writes_a_file(tmp_path, capsys):
    assert lab_timing.main(["--config", "ANDREA-12M", "-T", "8", "--repeats", "1", "--device", "cpu",
                    "--out", str(tmp_path)]) == 0
    assert (tmp_path / "pipeline_cpu.json").exists() and "%" in capsys.readouterr().out


# ---------------------------------------------------------------- figures
def test_figures_are_drawn_from_the_model(model):
    import matplotlib.pyplot as plt

    from andrea_edu.figures import final_picture as F
    from andrea_edu.figures import reading_the_pipeline as R

    matplotlib.use("Agg")
    fig = F.pipeline_diagram(model, 1, 8)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert [f"layer {i}" for i in range(TINY.n_layer)] == [x for x in texts if x.startswith("layer ")]
    assert any("[1, 8, 96]" in x for x in texts)  # c_attn's output, 3 x d_model
    for f in (fig, F.cost_figure(P.model_steps(model, 1, 8)), F.flop_share_figure(model, 8),
              R.journey_figure(trace_token(model, ids(1, 5)))):
        assert f.axes[0].get_title()
        plt.close(f)


# ---------------------------------------------------------------- the chapter's GPU branch
def test_final_picture_shows_a_committed_gpu_file(model, tmp_path, monkeypatch):
    """The chapter's GPU paths run before a real GPU file exists: a CPU timing relabelled as a
    fake GPU (never committed) must appear in the page, labelled with its device."""
    import nbformat
    from nbclient import NotebookClient

    from book_toc import REPO

    t = PT.time_steps(model, 1, 8, repeats=1, warmup=0)
    t.device, t.device_kind = "Fake GPU (test)", "gpu"
    t.provenance["device_slug"] = "fake-gpu"
    t.kernels = {"qkv": ["fake_gemm"], "attention": ["fake_attention"]}
    save_timing(t, tmp_path)
    t.device = "Second fake GPU (test)"   # an H100's file beside an H200's: both shown
    t.provenance["device_slug"] = "zz-fake-gpu"
    save_timing(t, tmp_path)
    monkeypatch.setenv("ANDREA_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("ANDREA_FAST", "1")
    monkeypatch.delenv("ANDREA_BOOK_BUILD", raising=False)
    path = REPO / "book" / "final_picture.ipynb"
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    outs = [o for c in nb.cells for o in c.get("outputs", [])]
    assert not [o for o in outs if o.get("output_type") == "error"]
    text = "\n".join(str(o.get("data", {}).get("text/markdown", "")) for o in outs)
    assert "Fake GPU (test)" in text and "`fake_attention`" in text
    assert "no GPU measurement committed yet" not in text
    assert "| time (Fake GPU (test)) | time (Second fake GPU (test)) |" in text  # every GPU


# ---------------------------------------------------------------- the chapters' exercise knobs
def test_kernel_matches_projections_at_three_d_model():
    """Causal attention 2·B·T²·C against the projections' 6·B·T·C²: equal at T = 3C, past
    ANDREA-120M's block_size (flagged, counted as if the context were that long)."""
    C = ANDREA_120M.d_model
    rows = P.kernel_vs_projections(ANDREA_120M, [256, 3 * C])
    assert rows[0]["ratio"] == pytest.approx(256 / (3 * C))
    assert rows[1]["ratio"] == pytest.approx(1.0) and rows[1]["beyond_block_size"]
    assert not rows[0]["beyond_block_size"]
    assert rows[1]["projections"] == 2 * 3 * C * C * 3 * C


def test_qkv_intensity_by_hand():
    C = ANDREA_120M.d_model
    (one,) = P.qkv_intensity(ANDREA_120M, [1], torch.bfloat16)
    assert one["flops"] == 2 * 3 * C * C
    assert one["bytes"] == 2 * (C + 3 * C * C + 3 * C)
    assert one["intensity"] == pytest.approx(one["flops"] / one["bytes"])
    big = P.qkv_intensity(ANDREA_120M, [128, 1024])
    assert big[0]["intensity"] < big[1]["intensity"]


@pytest.mark.parametrize("call,name", [
    (lambda: P.kernel_vs_projections(ANDREA_120M, [256, 0]), "lengths"),
    (lambda: P.kernel_vs_projections(ANDREA_120M, 1024), "lengths"),
    (lambda: P.kernel_vs_projections(ANDREA_120M, []), "lengths"),
    (lambda: P.qkv_intensity(ANDREA_120M, [1, 16.5]), "tokens"),
    (lambda: PT.memory_bandwidth(megabytes=0), "megabytes"),
    (lambda: trace_token(AndreaModel(TINY), ids(), attn=Backend("flash")), "backend"),
    (lambda: trace_token(AndreaModel(TINY), ids(), dtype=torch.int8), "dtype"),
])
def test_exercise_knobs_outside_the_allowed_give_one_line(call, name):
    with pytest.raises(ValueError) as e:
        call()
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(name), msg


def test_memory_bandwidth_and_a_group_at_it(model):
    bw = PT.memory_bandwidth(megabytes=8, repeats=1)
    assert 1e8 < bw < 1e13  # bytes/s: between 0.1 GB/s and 10 TB/s
    t = PT.time_steps(model, 2, 8, repeats=1, warmup=0)
    steps = P.model_steps(model, 2, 8)
    r = PT.group_at_bandwidth(t, steps, "residual adds", 1e9)
    assert r["bytes"] == 2 * TINY.n_layer * 3 * 2 * 8 * TINY.d_model * 4  # 2 adds/layer, 3 N C fp32
    assert r["bandwidth_ms"] == pytest.approx(1e3 * r["bytes"] / 1e9)
    assert r["measured_ms"] == t.ms()["residual adds"]
    with pytest.raises(ValueError, match=r"^group='adds' is not one of \['Q, K, V projections'"):
        PT.group_at_bandwidth(t, steps, "adds", 1e9)


def test_trace_knobs_leave_the_model_as_it_was(model):
    base = trace_token(model, ids(), layer=1, b=1, t=3, keep=True)
    assert PTR.differences(base, trace_token(model, ids(), layer=1, b=1, t=3)) == []
    emu = trace_token(model, ids(), layer=1, b=1, t=3, attn=Backend("reference"))
    assert model.backend == "auto" and model.wte.dtype == torch.float32
    diffs = dict(PTR.differences(base, emu))
    assert "note:" in diffs["attention kernel, all heads"]
    half = trace_token(model, ids(), layer=1, b=1, t=3, dtype=torch.bfloat16)
    assert model.wte.dtype == torch.float32
    diffs = dict(PTR.differences(base, half))
    assert "dtype float32 → bfloat16" in diffs["LayerNorm 1"]
    assert "strides" not in " ".join(diffs.values())  # a cast changes no layout
    hs = TINY.d_model // TINY.n_head
    for h in range(TINY.n_head):  # q of head h: token (b, t) of qkv [B, T, 3C], h*hs further
        assert base.q_offset(h) == (1 * 7 + 3) * 3 * TINY.d_model + h * hs
    with pytest.raises(ValueError, match=r"^head must be an int in 0\.\.3"):
        base.q_offset(4)


def test_head_mixing_counts_the_features_a_head_reaches():
    W = torch.randn(8, 8)
    W[4:, :2] = 0  # head 1 (rows 4..7) gives nothing to output features 0 and 1
    rows = PTR.head_mixing(W, 2)
    assert rows[0]["reaches"] == 1.0 and rows[1]["reaches"] == 6 / 8
    assert rows[0]["share_max"] == 1.0 and rows[1]["share_min"] == 0.0
    with pytest.raises(ValueError, match="^W_O must be square"):
        PTR.head_mixing(W, 3)
