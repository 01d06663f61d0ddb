"""heads.composition, andrea_lab.path_ablation, heads.induction on a hand-built two-layer model whose answer is
known: layer 0 head 0 is a previous-token head, layer 1 head 0 an induction head that reads it
through its keys (K-composition) and copies; the other head of each layer is small noise."""
from __future__ import annotations

import numpy as np
import pytest

from andrea_edu.data import DataFileError
import torch

from andrea_edu.config import AndreaConfig
from andrea_edu.heads import circuits as K
from andrea_edu.heads import composition as CO
from andrea_edu.heads import induction as IN
from andrea_lab import path_ablation as PA
from andrea_edu.heads import text_corpus as tc
from andrea_edu.heads.batch import Batch
from andrea_edu.model import AndreaModel

V, T = 16, 16
TOK, POS, PREVTOK = 0, V, V + T  # the residual's three blocks of coordinates
C, NH = V + T + V, 2  # 48 = 2 heads of 24
HS = C // NH


def induction_model(noise_seed: int = 0) -> AndreaModel:
    """wte[x] = e_x (token block), wpe[t] = e_{V+t} (position block). L0H0: query slot t reads
    position t, key slot s+1 reads position s, so position t attends to t-1; it copies the token
    block into the previous-token block. L1H0: query reads the token block, key reads the
    previous-token block (the key's previous token), so it attends to the position after an
    earlier copy of its own token; its OV copies that token into the token block, read by the
    tied unembedding. MLPs are zero."""
    m = AndreaModel(AndreaConfig(d_model=C, n_head=NH, n_layer=2, vocab_size=V, block_size=T),
                    seed=noise_seed)  # every weight small noise (std 0.02) to start with
    with torch.no_grad():
        m.wte.zero_()
        m.wte[torch.arange(V), TOK + torch.arange(V)] = 1.0
        m.wpe.zero_()
        m.wpe[torch.arange(T), POS + torch.arange(T)] = 1.0
        for b in m.blocks:
            b.mlp.W_in.zero_()
            b.mlp.W_out.zero_()
            b.attn.c_attn[:, :HS].zero_()  # head 0's W_Q
            b.attn.c_attn[:, C: C + HS].zero_()  # head 0's W_K
            b.attn.c_attn[:, 2 * C: 2 * C + HS].zero_()  # head 0's W_V
            b.attn.W_O[:HS].zero_()  # head 0's row block
        a0, a1 = m.blocks[0].attn, m.blocks[1].attn
        t = torch.arange(T)
        a0.c_attn[POS + t, t] = 2.0  # W_Q: position t -> slot t
        a0.c_attn[POS + t[:-1], C + t[:-1] + 1] = 2.0  # W_K: position s -> slot s+1
        x = torch.arange(V)
        a0.c_attn[TOK + x, 2 * C + x] = 1.0  # W_V: token x -> slot x
        a0.W_O[x, PREVTOK + x] = 0.3  # W_O: slot x -> previous-token block
        a1.c_attn[TOK + x, x] = 3.0  # W_Q: my token x -> slot x
        a1.c_attn[PREVTOK + x, C + x] = 3.0  # W_K: previous token x -> slot x
        a1.c_attn[TOK + x, 2 * C + x] = 1.0  # W_V: token x -> slot x
        a1.W_O[x, TOK + x] = 6.0  # W_O: slot x -> token block (copy)
    return m.eval()


@pytest.fixture(scope="module")
def model():
    return induction_model()


def test_composition_finds_the_k_composition(model):
    s = CO.composition(model)  # (3, nh, nh)
    base = CO.random_baseline(C, HS, draws=200)
    z = CO.zscores(s, base)
    # K: previous-token head -> induction head. Two maps of rank V, each a multiple of a
    # projection, compose perfectly at 1/sqrt(V) = 0.25 (the score's maximum for that rank)
    assert s[1, 0, 0] == pytest.approx(1 / np.sqrt(V), rel=0.02) and z[1, 0, 0] > 10
    assert s[0, 0, 0] < base.q99[0] and s[2, 0, 0] < base.q99[2]  # not Q, not V
    top = CO.top_pairs(s, base, n=1)[0]
    assert (top["kind"], top["writer"], top["reader"]) == ("K", 0, 0)
    assert CO.strongest_writer(s, base)[0][:2] == ("K", 0)
    assert np.all((s >= 0) & (s <= 1))


def test_random_baseline_is_a_distribution_of_random_shapes():
    b = CO.random_baseline(C, HS, draws=100, seed=1)
    assert np.all(b.std > 0) and np.all(b.mean > 0) and np.all(b.q99 >= b.mean)
    # K and Q composition of independent random matrices have the same law: close means
    assert abs(b.mean[0] - b.mean[1]) < 4 * b.std[0] / np.sqrt(100) * 3
    with pytest.raises(ValueError, match="head_dim"):
        CO.random_baseline(8, 16)
    with pytest.raises(ValueError, match="src_layer"):
        CO.composition(induction_model(), 1, 1)


def test_composition_is_scale_free_and_folds_layernorm(model):
    m = induction_model()
    with torch.no_grad():
        m.blocks[1].attn.c_attn[:, C: C + HS] *= 7.0  # rescaling a reader leaves the score
    np.testing.assert_allclose(CO.composition(m)[1, 0, 0], CO.composition(model)[1, 0, 0], rtol=1e-9)
    g = torch.linspace(0.5, 2.0, C)  # a non-uniform LayerNorm weight is folded in: diag(g) W
    with torch.no_grad():
        m.blocks[1].ln_1.weight.copy_(g)
    WQ, WK, WV, WO = (w.double() for w in K._split(m, 1, 1))  # the noise heads: anisotropic
    _, _, WV1, WO1 = (w.double() for w in K._split(m, 0, 1))
    gd = g.double()[:, None]
    want = CO._scores(gd * WQ, gd * WK, gd * WV, WO, WV1, WO1)
    np.testing.assert_allclose(CO.composition(m)[:, 1, 1], want, rtol=1e-12)
    unfolded = CO._scores(WQ, WK, WV, WO, WV1, WO1)
    assert max(abs(a - b) for a, b in zip(want, unfolded)) > 1e-3


def test_induction_score_signatures_and_loss(model):
    r = IN.measure_repeats(model, B=64, n=T // 2, seed=0)
    ind = r["induction"]
    assert ind[1, 0] > 0.5 and ind[1, 0] > 5 * r["uniform"]
    assert ind[1, 1] < 3 * r["uniform"] and ind[0].max() < 3 * r["uniform"]
    assert r["previous"][0, 0] > 0.95  # the layer-0 head looks at t-1
    assert r["first_loss"] - r["second_loss"] > 1.0  # the second copy is predicted
    assert r["ablated_second"][0] > 1.0 and abs(r["ablated_second"][1]) < 0.1
    sig = IN.signatures(model)
    assert sig["copying"][0] > 0.9 and sig["prefix"][0, 0] > 0.9
    assert abs(sig["copying"][1]) < 0.5 and abs(sig["prefix"][1, 1]) < 0.5


def test_random_model_has_no_induction():
    m = AndreaModel(AndreaConfig(d_model=C, n_head=NH, n_layer=2, vocab_size=V, block_size=T),
                    seed=3).eval()
    r = IN.measure_repeats(m, B=32, n=T // 2)
    assert r["induction"].max() < 2 * r["uniform"]
    assert abs(r["first_loss"] - r["second_loss"]) < 0.1


def test_path_ablation_of_the_key_path_breaks_induction(model):
    n = T // 2
    idx = IN.repeated_batch(V, 32, n, seed=1)
    logits, maps = PA.forward(model, idx)
    ref_logits, _ = model(idx)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(maps, model.attention_maps(idx), rtol=1e-4, atol=1e-5)
    scores = {}
    for inp in ("q", "k", "v"):
        _, m2 = PA.forward(model, idx, [PA.Path(0, 0, 1, 0, inp)])
        scores[inp] = IN.offset_scores(m2, n)["induction"][1, 0]
        assert torch.equal(m2[0], maps[0]) and torch.equal(m2[1, :, 1], maps[1, :, 1])
    base = IN.offset_scores(maps, n)["induction"][1, 0]
    assert scores["k"] < 0.2 * base  # the key path carries induction
    assert scores["q"] > 0.8 * base and abs(scores["v"] - base) < 1e-6  # V does not move A


def test_path_ablation_equals_head_ablation_when_nothing_else_reads(model):
    """With zero MLPs, removing L0H0 from the q and k of every layer-1 head gives the layer-1
    patterns of ablating L0H0 outright."""
    idx = IN.repeated_batch(V, 8, T // 2, seed=2)
    _, m2 = PA.forward(model, idx, [PA.Path(0, 0, 1, h, "qk") for h in range(NH)])
    with model.ablate([(0, 0)]):
        ref = model.attention_maps(idx)
    torch.testing.assert_close(m2[1], ref[1], rtol=1e-4, atol=1e-5)


def test_routes_to_the_other_readers(model):
    """attn1 is every layer-1 head's q, k, v at once; the MLPs are zero here, so removing a head
    from them changes nothing; the induction head's only reader is the output."""
    idx = IN.repeated_batch(V, 8, T // 2, seed=4)
    every = [PA.Path(0, 0, 1, h, "qkv") for h in range(NH)]
    torch.testing.assert_close(PA.forward_route(model, idx, (0, 0), "attn1"),
                               PA.forward(model, idx, every)[0])
    intact = PA.forward(model, idx)[0]
    for r in ("mlp0", "mlp1"):
        torch.testing.assert_close(PA.forward_route(model, idx, (0, 0), r), intact)
    n = T // 2
    loss = lambda lg: PA.per_position_loss(lg[:, :-1], idx[:, 1:])[:, n:].mean()  # noqa: E731
    assert loss(PA.forward_route(model, idx, (1, 0), "out")) > loss(intact) + 1.0
    with pytest.raises(ValueError, match="reader"):
        PA.forward_route(model, idx, (1, 0), "mlp0")


def test_path_effects_and_errors(model):
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, V, (4, T), generator=g)
    key = torch.full((3, 4, T), -1, dtype=torch.long)
    key[tc.PREV, :, 1:] = torch.arange(T - 1)
    batch = Batch(idx=idx[:, :-1].contiguous(), targets=idx[:, 1:].contiguous(),
                  key=key[:, :, :-1].contiguous(), where=[("x", 0)] * 4)
    r = PA.path_effects(model, batch, [[PA.Path(0, 0, 1, 0, "k")], [PA.Path(0, 1, 1, 1, "v")]])
    assert r["tv"].shape == (2,) and r["loss"].shape == (2, 4) and r["tv"][0] > r["tv"][1]
    with pytest.raises(ValueError, match="inputs"):
        PA.forward(model, idx, [PA.Path(0, 0, 1, 0, "x")])
    with pytest.raises(ValueError, match="src_layer"):
        PA.forward(model, idx, [PA.Path(1, 0, 1, 0, "q")])
    with pytest.raises(ValueError, match="dst_head"):
        PA.forward(model, idx, [PA.Path(0, 0, 1, 5, "q")])
    with pytest.raises(ValueError, match="token ids"):
        PA.forward(model, idx + 100)
    with pytest.raises(ValueError, match="n="):
        IN.repeated_batch(V, 2, 1)


def test_identifier_targets_on_a_small_file():
    text = "abc = 1\nxy = abc + abc\n"
    prev, length, off = IN._occurrences(text)
    second = text.index("abc", 9)
    assert prev[second] == 0 and length[second] == 3 and list(off[second: second + 3]) == [0, 1, 2]
    third = text.rindex("abc")
    assert prev[third] == second  # the most recent earlier occurrence


def test_identifier_scores_on_constructed_maps():
    """Maps that put all weight on a known key score 1 on that reading and 0 elsewhere; the span
    reading sums over the earlier occurrence."""
    L, B, nh, Tq = 1, 1, 2, 10
    maps = torch.zeros(L, B, nh, Tq, Tq)
    maps[..., torch.arange(Tq), torch.arange(Tq)] = 1.0  # head 1: itself
    maps[0, 0, 0, 7, 3] = 1.0  # head 0: query 7 -> key 3 (the "induction" key)
    maps[0, 0, 0, 7, 7] = 0.0
    neg = torch.full((B, Tq), -1, dtype=torch.long)
    tg = {"induction": neg.clone(), "duplicate": neg.clone(), "span_start": neg.clone(),
          "span_end": neg.clone()}
    tg["induction"][0, 7], tg["duplicate"][0, 7] = 3, 2
    tg["span_start"][0, 7], tg["span_end"][0, 7] = 2, 5
    r = IN.identifier_scores(maps, tg)
    assert r["induction"][0][0, 0] == 1.0 and r["duplicate"][0][0, 0] == 0.0
    assert r["span"][0][0, 0] == 1.0 and r["span"][0][0, 1] == 0.0
    assert r["induction"][1] == pytest.approx(1 / 8) and r["span"][1] == pytest.approx(3 / 8)
    assert r["induction"][2] == 1


def test_committed_path_ablations_validate_and_recheck(tmp_path):
    import json

    from andrea_edu.heads import path_runs as PR
    from andrea_edu.heads import text_training as TT
    from andrea_edu.data import find_data
    run_path = find_data(TT.RUN_FILE, verify=False)
    paths_path = find_data(PR.PATHS_FILE, verify=False)
    if run_path is None or paths_path is None:
        pytest.skip("no committed real-text run or path ablations next to this checkout")
    sha = PR.weights_sha256(run_path)
    d = PR.load_paths(paths_path, sha)
    assert len(d["entries"]) == len(PA.grid(8)) + 2 * len(PR.ROUTES) == len(PR.expected_entries(8))
    assert PR.as_grid(d, 8).shape == (8, 8)
    with pytest.raises(DataFileError, match="other weights"):
        PR.load_paths(paths_path, "0" * 64)
    bad = json.loads(paths_path.read_text())
    bad["entries"][3]["tv"] = 1.5
    (tmp_path / "p.json").write_text(json.dumps(bad))
    with pytest.raises(DataFileError, match="tv must lie"):
        PR.load_paths(tmp_path / "p.json")
    run = TT.load_run(run_path)
    from andrea_edu.heads import text_corpus as tc
    same, _ = tc.same_corpus(run.provenance["corpus"], tc.corpus_cached())
    if not same:
        pytest.skip("another Python's standard library: the windows differ")
    r = PA.recheck(run, tc.corpus_cached(), d, ["L0H5 -> L1H1 q"])
    assert r["agrees"], r


def test_circuit_figures_render_and_calls_follow_the_numbers(model, monkeypatch):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from andrea_edu.figures import heads_on_real_text as F
    s = CO.composition(model)
    base = CO.random_baseline(C, HS, draws=30)
    plt.close(F.fig_composition(s, base))
    top = CO.top_pairs(s, base, 3)  # the chapter's table of the strongest compositions
    assert any((e["kind"], e["writer"], e["reader"], f"{e['score']:.3f}") == ("K", 0, 0, "0.250")
               for e in top), top
    rep = IN.measure_repeats(model, B=16, n=T // 2)
    sig = IN.signatures(model)
    plt.close(F.fig_induction(rep, sig, NH))
    found, lh, ratio = F.induction_call(rep)
    assert found and lh == (1, 0) and ratio > 5
    flat = dict(rep, induction=np.zeros_like(rep["induction"]), second_loss=rep["first_loss"])
    assert not F.induction_call(flat)[0]
    maps = model.attention_maps(IN.repeated_batch(V, 1, T // 2, seed=3))

    class _Corpus:  # decode() is all fig_pair needs of a corpus
        @staticmethod
        def decode(ids):
            return "".join("abcdefghijklmnop"[int(i)] for i in ids)
    ids = IN.repeated_batch(V, 1, T // 2, seed=3)
    batch = Batch(idx=ids, targets=ids, key=torch.full((3, 1, T), -1), where=[("x", 0)])
    plt.close(F.fig_pair(maps, _Corpus, batch, 0, 0, T, 0, 0, "K", 15.8))


def test_evidence_finds_the_hand_built_induction_head(model):
    e = IN.evidence(model, B=32)
    again = IN.evidence(model, rep=e["rep"])  # the measurement made once, reused
    assert again["ratio"] == e["ratio"] and again["ablated"] == e["ablated"]
    assert e["head"] == (1, 0) and e["found"] and e["ratio"] > IN.FOUND_FACTOR
    assert e["drop"] > 1.0 and e["ablated"] > 1.0  # the second copy is cheap, through L1H0
    assert e["copying"] > 0.9 and e["prefix"][1] == (0, 0) and e["prefix"][0] > 0.9
    r = AndreaModel(AndreaConfig(d_model=C, n_head=NH, n_layer=3, vocab_size=V, block_size=T),
                    seed=3).eval()
    e3 = IN.evidence(r, B=16)  # a random 3-layer model: a candidate above layer 0, not found
    assert e3["head"][0] in (1, 2) and not e3["found"] and e3["prefix"][1][0] < e3["head"][0]
    one = AndreaModel(AndreaConfig(d_model=C, n_head=NH, n_layer=1, vocab_size=V, block_size=T))
    with pytest.raises(ValueError, match="n_layer=1"):
        IN.evidence(one)
    assert IN.is_induction(IN.FOUND_FACTOR, IN.DROP_NATS + 0.01)
    assert not IN.is_induction(IN.FOUND_FACTOR - 0.01, 2.0)
    assert not IN.is_induction(10.0, IN.DROP_NATS)


def test_variant_names_and_commands():
    from andrea_edu.heads import text_longer as TL
    with pytest.raises(ValueError) as e:
        TL.variant_settings("wide")
    assert "\n" not in str(e.value) and "'long', 'deep'" in str(e.value)
    with pytest.raises(ValueError, match="allowed"):
        TL.variant_run("wide")
    assert TL.variant_settings("deep", False).n_layer == 3
    assert TL.variant_settings("deep", True).steps < TL.variant_settings("deep", False).steps
    assert TL.command("deep", REPO_DATA / "x_run.json") == \
        f"python -m {TL.MODULE} --variant deep --out {(REPO_DATA / 'x_run.json').as_posix()}"
    assert TL.VARIANTS["deep"].weights == "realtext_deep_model.pt"


REPO_DATA = __import__("pathlib").Path("/elsewhere/book/data")


def test_variant_run_in_fast_mode_trains_seconds(monkeypatch):
    """The exercises' path: in fast mode, a few steps of the variant's settings, said so."""
    from andrea_edu.heads import text_longer as TL
    monkeypatch.setenv("ANDREA_FAST", "1")
    TL.clear_caches()
    run = TL.variant_run("long")
    assert run.settings.steps == TL.EXERCISE_FAST["steps"] and run.model is not None
    assert "fast mode" in run.provenance["what"] and run.cpu_seconds < TL.CPU_BUDGET
    assert TL.variant_run("long", True) is run  # made once
    e = TL.variant_evidence("long", B=4)
    assert TL.variant_evidence("long", True, 4) is e and e["head"][0] == 1
    TL.clear_caches()


@pytest.mark.parametrize("name", ["long", "deep", "steps"])
def test_variant_run_files_when_committed(name, monkeypatch):
    from andrea_edu.heads import text_longer as TL
    from andrea_edu.heads import text_runs as R
    from andrea_edu.heads import text_training as TT
    from andrea_edu.data import find_data
    v = TL.variant(name)
    path = find_data(v.file, verify=False)
    if path is None:
        pytest.skip(f"the {name} run is not committed")
    run = TT.load_run(path)  # validates shapes, values and the weights' sha256
    assert run.settings == TL.variant_settings(name, False)
    assert R.weights_path(path).name == v.weights and run.model is not None
    assert run.model.cfg.block_size == run.settings.seq_len
    assert 0 < run.cpu_seconds <= TL.CPU_BUDGET  # the budget, measured by the run
    from andrea_edu.figures import provenance as P  # a command that moved, under its name now
    assert P.command(run.provenance["produced_by"]) == (f"python -m {TL.MODULE} --variant {name} "
                                                        f"--out book/data/{v.file}")
    from andrea_lab.run_writers import save_variant
    with pytest.raises(FileExistsError):
        save_variant(run, name, path)  # committed data is never overwritten unasked
    monkeypatch.delenv("ANDREA_FAST", raising=False)
    TL.clear_caches()
    assert TL.variant_run(name).settings == run.settings  # outside fast mode: the file
    TL.clear_caches()


def test_variant_figures_and_sentences_follow_the_numbers(model, monkeypatch):
    """The chapter's table, figure and sentence of the runs, and the exercises' displays, on the
    hand-built model (an induction head) and a random one (none)."""
    import types

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from andrea_edu.figures import heads_on_real_text as F
    from andrea_edu.heads.text_runs import TextSettings
    shown: list[str] = []
    monkeypatch.setattr(F, "table", lambda header, rows: shown.append(str(rows)))
    rand = AndreaModel(AndreaConfig(d_model=C, n_head=NH, n_layer=2, vocab_size=V, block_size=T),
                       seed=3).eval()

    def fake(cpu, steps):
        s = TextSettings(n_head=NH, d_model=C, seq_len=T, steps=steps, eval_every=steps // 2)
        sc = np.full((3, 3, 2, NH), 0.1)
        sc[:, tc.IDENT] = [[[0.1, 0.2]] * 2, [[0.2, 0.3]] * 2, [[0.3, 0.4]] * 2]
        return types.SimpleNamespace(settings=s, cpu_seconds=cpu, eval_loss=np.full((3, 4), 2.0),
                                     provenance={"produced_by": "cmd", "date_utc": "d"},
                                     eval_steps=[0, steps // 2, steps], scores=sc,
                                     baseline=np.array([0.1, 0.1, 0.1]))
    items = [("random", fake(100.0, 10), IN.evidence(rand, B=16)),
             ("hand-built", fake(200.0, 20), IN.evidence(model, B=16))]
    F.show_variants(items)
    assert "'random'" in shown[-1] and "'yes'" in shown[-1] and "'no'" in shown[-1]
    assert "'200 s'" in shown[-1]
    plt.close(F.fig_variants(items))
    items[1][1].summary = lambda tol: [dict(pattern="recent identifier", head=(1, 0), ratio=4.0,
                                            verdict="not found")]
    F.show_variant_run("hand-built", items[1][1], items[1][2], 0.005)  # exercise 1
    assert "'hand-built'" in shown[-1] and "'yes'" in shown[-1] and "recent identifier" in shown[-2]
    fig = F.fig_score_trajectory(fake(1.0, 20), fake(1.0, 10))
    for line in fig.axes[0].lines[:2]:  # the best identifier head / uniform at each evaluation
        np.testing.assert_allclose(line.get_ydata(), [2.0, 3.0, 4.0])
    plt.close(fig)
    n = len(shown)
    moved = F.ov_change(np.zeros((1, 2, 2)), np.array([[[0.1, 0.0], [0.01, 0.5]]]))
    assert moved == {"moved >= 0.005": ["L0H0", "L0H1"], "copy rate moved >= 0.05": ["L0H0"]}
    assert len(shown) == n + 1 and "L0H1" in shown[-1]
    moved = F.ov_change(np.zeros((1, 2, 2)), np.full((1, 2, 2), 0.004))  # nothing moved: no table
    assert moved == {"moved >= 0.005": [], "copy rate moved >= 0.05": []} and len(shown) == n + 1
    sc = torch.zeros(3, 2, NH)
    sc[tc.BRACKET, 1, 1] = 0.5
    F.show_bracket_heads(sc, np.array([0.1, 0.1, 0.1]), "closer")
    assert "'L1H1', 'closer', '0.500', '0.1000', '5.0x'" in shown[-1]


@pytest.mark.parametrize("best,expected", [(0.02, "not observed here"), (0.2, "holds"),
                                           (0.05, "holds with a caveat")])
def test_the_identifier_row_never_refutes_a_claim_about_trained_transformers(best, expected):
    """A small model with no recent-identifier head cannot say "does not hold" of a claim about
    trained transformers (issue 18 item 3's rule, as source_rows applies it to the whole claim);
    the row carries the claim's key, so the verdicts page reads it as unable to decide."""
    from andrea_edu.figures import heads_on_real_text as F
    from andrea_edu.figures.verdicts import TRAINED_TRANSFORMERS_SHOW_HEADS

    span = np.full((2, 4), 0.01)
    span[1, 2] = best
    ids = {"span": (span, 0.01, None), "induction": (np.full((2, 4), 0.012), 0.01, None)}
    rep = {"induction": np.full((2, 4), 0.012), "uniform": 0.01, "first_loss": 3.0,
           "second_loss": 2.9}
    row = dict(pattern="previous token", head=(0, 1), ratio=3.0, verdict="not found")
    patterns, ident = F.source_rows([row], "does not hold", ids, rep, 0.005)
    assert patterns[2] == "not observed here" and "previous token L0H1 3.0x" in patterns[1]
    claim, measured, verdict, key, scale = ident
    assert verdict == expected and key == TRAINED_TRANSFORMERS_SHOW_HEADS, (best, measured)
    assert "L1H2" in measured and "+0.10 nats (not found)" in measured and scale == ""
