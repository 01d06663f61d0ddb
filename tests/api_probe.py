"""The public Python API's bad inputs, one table: every parameter probed with values outside what
its documentation allows (wrong type, NaN, infinity, out of range, wrong number of dimensions,
mismatched sizes). Each must raise ValueError or TypeError (a DataFileError or FileNotFoundError
for a file) with one line naming the parameter: never a deep traceback from inside torch/numpy,
never a silent result. tests/test_api_probe.py runs the table under hypothesis; `python
tests/api_probe.py` counts clear / deep / silent (the issue's before/after counts)."""
from __future__ import annotations

import atexit
import math
import shutil
import sys
from collections import Counter
from typing import Any, Callable

NAN, INF = float("nan"), float("inf")


def _t(*shape, dtype=None):
    import torch
    return torch.randn(*shape, dtype=dtype or torch.float32)


def cases() -> list[tuple[str, str, Callable[[Any], Any], list]]:
    """[(function, the parameter's name as the message must say it, call(bad), bad values)]."""
    import numpy as np
    import torch

    import tempfile

    from andrea_edu import config as C, data as DATA, layout as L, projections as P
    from andrea_lab import gpt2_small as G
    from andrea_edu.heads.corpus import make_batch
    from andrea_edu.kernels import nvrtc
    from andrea_edu.model import AndreaModel
    from andrea_lab import store as ST
    from andrea_edu.heads import detectors as D, measures as M, toy_calls as TC
    from andrea_edu.notebook import slider as S
    from andrea_edu import dispatch as A
    from andrea_edu.attention import reference_attention

    q = _t(1, 2, 4, 8)
    X = _t(1, 4, 12)
    W6 = _t(6, 12, 2)
    W12 = _t(12, 12, 1)
    sc = np.random.default_rng(0).random((3, 2, 4))
    cfg = C.AndreaConfig(d_model=16, n_head=4, n_layer=1, vocab_size=8, block_size=8)
    tiny, tiny_b = cfg, cfg.replace(bias=True)
    hf = dict(n_embd=16, n_head=4, n_layer=1, vocab_size=8, n_positions=8)
    scratch = tempfile.mkdtemp(prefix="andrea-api-probe-")  # the paths below are refused in it
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)  # left behind by every run before

    def fig(**kw):
        import matplotlib.pyplot as plt
        f = plt.figure(figsize=(1, 1))
        return f
    shape = (1, 2, 2, 4)
    return [
        ("attention", "causal", lambda v: A.attention(q, q, q, causal=v), ["yes", 1, None]),
        ("attention", "backend", lambda v: A.attention(q, q, q, backend=v), ["fast", 3, None]),
        ("attention", "return_decision", lambda v: A.attention(q, q, q, return_decision=v),
         ["no", 1, None, "yes"]),
        ("attention", "q", lambda v: A.attention(v, q, q), [_t(2, 4, 8), q.numpy(), None,
                                                            _t(1, 2, 4, 8, dtype=torch.float64)[..., :0]]),
        ("reference_attention", "causal", lambda v: reference_attention(q, q, q, causal=v),
         ["no", 0.5]),
        ("choose_backend", "head_dim", lambda v: A.choose_backend(v, torch.float16, "cpu"),
         [0, -8, 8.0, "64", NAN]),
        ("choose_backend", "device_type", lambda v: A.choose_backend(64, torch.float16, v),
         ["gpu", None, 3]),
        ("choose_backend", "sm", lambda v: A.choose_backend(64, torch.float16, "cuda", sm=v),
         [-1, 8.6, "90"]),
        ("AndreaConfig", "d_model", lambda v: C.AndreaConfig(d_model=v, n_head=4), [0, -16, 16.0, NAN]),
        ("AndreaConfig", "n_head", lambda v: C.AndreaConfig(d_model=16, n_head=v), [0, 5, 4.0, None]),
        ("AndreaConfig.replace", "bogus", lambda v: cfg.replace(bogus=v), [1]),
        ("AndreaConfig.replace", "n_head", lambda v: cfg.replace(n_head=v), [5, 0, "4"]),
        ("preset", "name", lambda v: C.preset(v), ["ANDREA-1B", None, 3]),
        ("divisors", "n", lambda v: C.divisors(v), [0, -4, 4.5, "12"]),
        ("split_heads", "n_head", lambda v: P.split_heads(X, v), [5, 0, -1, 2.0, None]),
        ("split_heads", "x", lambda v: P.split_heads(v, 2), [_t(4, 12), None, X.numpy()]),
        ("merge_heads", "x", lambda v: P.merge_heads(v), [_t(4, 12), None]),
        ("project_per_head", "W_K_heads", lambda v: P.project_per_head(X, W6, v, W6),
         [W12, _t(6, 11, 2), None]),
        ("project_fused", "n_head", lambda v: P.project_fused(X, _t(12, 12), _t(12, 12), _t(12, 12), v),
         [5, 0, 2.5]),
        ("project_c_attn", "W_c_attn", lambda v: P.project_c_attn(X, v, 2), [_t(12, 35), _t(36)]),
        ("check_head", "head", lambda v: P.check_head(v, 4), [4, -1, 1.0, None]),
        ("zero_head", "head", lambda v: P.zero_head(_t(12, 12), v, 4), [4, -1, 1.5]),
        ("concat_heads", "heads", lambda v: P.concat_heads(v), [[], [_t(1, 4, 2), _t(1, 3, 2)], None]),
        ("output_projection", "W_O", lambda v: P.output_projection(_t(1, 2, 4, 6), v),
         [_t(11, 12), _t(12), None]),
        ("element_offset", "layout", lambda v: L.element_offset(0, 0, 0, 0, v, shape=shape),
         [(1.5, 1, 1, 1), (-1, 1, 1, 1), (1, 1, 1), "BCT", ("a", 1, 1, 1)]),
        ("element_offset", "shape", lambda v: L.element_offset(0, 0, 0, 0, "BTC", shape=v),
         [(1, 2, 2), (0, 2, 2, 4), (1.0, 2, 2, 4), None]),
        ("element_offset", "d", lambda v: L.element_offset(0, 0, 0, v, "BTC", shape=shape),
         [4, -1, 1.0, True]),
        ("tensor_in_layout", "n_head", lambda v: L.tensor_in_layout(X, "BTHD", v), [5, 0, 2.0]),
        ("tensor_in_layout", "n_head", lambda v: L.tensor_in_layout(X, "BHTD", v), [5, -3]),
        ("tensor_in_layout", "layout", lambda v: L.tensor_in_layout(X, v, 2), ["BCT", None]),
        ("tensor_in_layout", "x", lambda v: L.tensor_in_layout(v, "BTHD", 2), [_t(4, 12), None]),
        ("memory_map", "shape", lambda v: L.memory_map("BTC", v), [(1, 2, 2), (0, 1, 1, 1), (2.0, 1, 1, 1)]),
        ("head_offsets", "h", lambda v: L.head_offsets(v, "BTC", shape), [2, -1, 1.0]),
        ("reshape_trap", "n_head", lambda v: L.reshape_trap(1, 2, v, 4), [0, -2, 2.0]),
        ("layout_steps", "head_dim", lambda v: L.layout_steps(1, 2, 2, v), [0, -4, 4.0]),
        ("toy_calls.detect", "threshold", lambda v: TC.detect(sc, v), [NAN, INF, -0.5, 1.5, "0.5"]),
        ("toy_calls.detect", "scores", lambda v: TC.detect(v), [sc[0], np.zeros((2, 2, 2)), None]),
        ("toy_calls.best_head_calls", "threshold", lambda v: TC.best_head_calls(sc, v), [NAN, "0.4", -1.0]),
        ("toy_calls.best_head_calls", "scores", lambda v: TC.best_head_calls(v), [sc[0], sc[None], None]),
        ("toy_calls.threshold_call", "score", lambda v: TC.threshold_call(v), ["0.5", None]),
        ("toy_calls.threshold_call", "threshold", lambda v: TC.threshold_call(0.5, v), [NAN, "x"]),
        ("measures.best_heads", "scores", lambda v: M.best_heads(v), [sc[0], sc[0, 0], None, 3]),
        ("detectors.verdict", "tol", lambda v: D.verdict(0.5, 0.1, v), [NAN, -0.1, "0.01"]),
        ("detectors.verdict", "score", lambda v: D.verdict(v, 0.1, 0.01), ["0.5", None]),
        ("slider", "dpi", lambda v: S.slider(fig, static=True, dpi=v, a=[1]), [0, -10, 10.5, "72", NAN]),
        ("slider", "plot_fn", lambda v: S.slider(v, static=True, a=[1]), [None, 3]),
        # issue 42: deep tracebacks and silent acceptances found by a hostile probe
        ("param_counts", "cfg", lambda v: C.param_counts(v), ["ANDREA-120M", None, 3]),
        ("AndreaModel", "device", lambda v: AndreaModel(tiny, device=v), ["gpu", "tpu", 3]),
        ("from_gpt2", "gpt2_state", lambda v: G.from_gpt2(v, tiny_b), [[1, 2], np.zeros(3), "x",
                                                                       {1: _t(2)}]),
        ("from_gpt2", "cfg", lambda v: G.from_gpt2({}, v), ["GPT-2", None]),
        ("project_fused", "W_K", lambda v: P.project_fused(X, _t(12, 12), v, _t(12, 12), 2),
         [_t(12, 12, dtype=torch.float64), _t(12, 12, dtype=torch.float16)]),
        ("config_from_hf", "n_inner", lambda v: G.config_from_hf(dict(hf, n_inner=v)),
         [0, -768, 100, 1.5, "3072", True]),
        ("config_from_hf", "n_embd", lambda v: G.config_from_hf(dict(hf, n_embd=v)), [0, "768", None]),
        ("memory_map", "shape", lambda v: L.memory_map("BTC", v), [(1024, 1024, 12, 64)]),
        ("reference_attention", "seq_len",
         lambda v: reference_attention(*(_t(1, 1, v, 8, dtype=torch.float16),) * 3), [2**21]),
        ("attention", "seq_len", lambda v: A.attention(*(_t(1, 1, v, 8, dtype=torch.float16),) * 3),
         [2**21]),
        ("store.write_json_atomic", "path", lambda v: ST.write_json_atomic(v, {}),
         [f"{scratch}/a\nb.json", f"{scratch}/\x1b.json", f"{scratch}/.."]),
        ("data.load", "kind", lambda v: DATA.load(v), ["../realtext_run", "/etc/passwd", None]),
        ("make_batch", "batch_size", lambda v: make_batch(v, 16, seed=0), [10**9, 1e9]),
        ("compile_attention", "use_cache",
         lambda v: nvrtc.compile_attention("v2", 64, torch.float16, use_cache=v), ["no", 0, None]),
    ]


def classify(param: str, call: Callable[[Any], Any], bad) -> tuple[str, str]:
    """("clear", msg) | ("deep", why) | ("silent", repr of what it returned)."""
    from andrea_edu.data import DataFileError
    try:
        out = call(bad)
    except (ValueError, TypeError, DataFileError, FileNotFoundError) as e:
        msg = str(e)
        if "\n" in msg.strip() or param.split(".")[-1] not in msg:
            return "deep", f"{type(e).__name__}: {msg.strip().splitlines()[0][:150] if msg.strip() else ''}"
        return "clear", msg
    except Exception as e:  # noqa: BLE001  (what the probe is for)
        return "deep", f"{type(e).__name__}: {str(e).splitlines()[0][:150] if str(e) else ''}"
    return "silent", repr(out)[:80]


def main() -> int:
    import matplotlib
    matplotlib.use("Agg")
    tally: Counter[str] = Counter()
    for fn, param, call, values in cases():
        for v in values:
            kind, why = classify(param, call, v)
            tally[kind] += 1
            if kind != "clear":
                print(f"{kind:6s} {fn}({param}={v!r:.40}): {why}")
            import matplotlib.pyplot as plt
            plt.close("all")
    print(f"API cases: {sum(tally.values())}: {dict(tally)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
