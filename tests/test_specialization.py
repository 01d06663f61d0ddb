"""Training, the per-head measurements, the gradient-pressure rule, the sweep file, the demo."""
import dataclasses
import json

import numpy as np
import pytest
import torch

from andrea_edu.heads import corpus as C
from andrea_edu.heads import training as S
from andrea_edu.heads.gradient_pressure import MIN_SOLO, classify, gradient_pressure, sign_test
from andrea_edu.model import AndreaModel
from andrea_edu.data import find_data
from andrea_edu.heads.sweep import DATA_NAME, load_sweep
from andrea_lab.make_sweep import compare_runs, recheck
from andrea_lab.make_sweep import save_sweep
from andrea_edu.heads.two_places import two_places_table

FAST = S.default_settings(4, fast=True)


@pytest.fixture(scope="module")
def fast_run():
    return S.train(FAST, progress=False)


# ------------------------------------------------------------------ training (fast mode)
def test_training_lowers_the_loss(fast_run):
    r = fast_run
    assert r.train_loss.shape == (FAST.steps,)
    assert r.train_loss[-20:].mean() < r.train_loss[:20].mean() - 0.5
    first, last = r.eval_loss[0], r.eval_loss[-1]
    assert last[0] < first[0] - 0.5  # "all"
    assert r.eval_steps[0] == 0 and r.eval_steps[-1] == FAST.steps
    assert r.param_count == sum(r.param_by_part.values())


def test_same_seed_same_run_different_seed_different_run(fast_run):
    again = S.train(FAST, progress=False)
    assert np.array_equal(again.train_loss, fast_run.train_loss)
    assert again.grad_norm is not None and fast_run.grad_norm is not None
    assert np.array_equal(again.grad_norm, fast_run.grad_norm)
    assert np.array_equal(again.scores, fast_run.scores)
    other = S.train(dataclasses.replace(FAST, seed=FAST.seed + 1), progress=False)
    assert not np.array_equal(other.train_loss, fast_run.train_loss)


def test_stop_after_reproduces_the_first_steps(fast_run):
    part = S.train(FAST, progress=False, stop_after=30)
    assert np.array_equal(part.train_loss, fast_run.train_loss[:30])
    cmp = compare_runs(part, fast_run, first_steps=30)
    assert cmp["max_diff_first_steps"] == 0.0 and "final_loss_diff" not in cmp
    with pytest.raises(ValueError, match="stop_after"):
        S.train(FAST, progress=False, stop_after=FAST.steps + 1)


def test_the_training_threads_are_restored():
    before = torch.get_num_threads()
    S.train(dataclasses.replace(FAST, steps=6, n_probes=2, eval_every=3), progress=False)
    assert torch.get_num_threads() == before


def test_train_cached_trains_once():
    s = dataclasses.replace(FAST, steps=8, n_probes=2, eval_every=4, seed=99)
    assert S.train_cached(s, progress=False) is S.train_cached(s, progress=False)


# ------------------------------------------------------------------ measurements
def _toy_batch():
    # One sequence of 5 positions; t=2 is positional (key 1), t=4 semantic (key 0).
    pat = torch.tensor([[0, 0, C.POSITIONAL, 0, C.SEMANTIC]])
    key = torch.tensor([[-1, -1, 1, -1, 0]])
    z = torch.zeros(1, 5, dtype=torch.long)
    return C.from_labels(z, z, pat, key, torch.zeros(1, 5))


def test_score_is_the_probability_on_the_designated_key():
    b = _toy_batch()
    maps = torch.zeros(1, 1, 2, 5, 5)  # (L, B, nh, T, T)
    maps[0, 0, 0, 2, 1] = 1.0  # head 0: at t=2 all on key 1 (right)
    maps[0, 0, 0, 4, 3] = 1.0  # ... at t=4 all on key 3 (wrong)
    maps[0, 0, 1, 2, 1] = 0.25  # head 1: a quarter on the right key at t=2
    maps[0, 0, 1, 4, 0] = 0.6
    s = S.scores_from_maps(maps, b)  # (3, L, nh)
    i_pos, i_sem = S.PATTERN_IDS.index(C.POSITIONAL), S.PATTERN_IDS.index(C.SEMANTIC)
    assert s[i_pos, 0].tolist() == pytest.approx([1.0, 0.25])
    assert s[i_sem, 0].tolist() == pytest.approx([0.0, 0.6])
    assert torch.isnan(s[S.PATTERN_IDS.index(C.SYNTACTIC)]).all()  # no such position
    assert S.chance_scores(b)["previous token"] == pytest.approx(1 / 3)


def test_the_measures_read_the_toy_labels_through_the_one_batch_type():
    """Both labs build the one heads.batch.Batch; the toy's one label per position reaches the
    measures through its per-pattern key rows: scores, losses and floors equal a direct reading
    of `corpus.labels` (query by query), and a slice keeps every field."""
    from andrea_edu.heads import measures as M, toy_calls as TC
    from andrea_edu.heads.batch import Batch
    b = C.make_batch(6, 24, seed=3)
    assert type(b) is Batch and b.key.shape == (3, 6, 24) and b.where == []
    assert b.floor is not None
    pattern, key = C.labels(b)
    model = AndreaModel(FAST.model_config(), seed=1)
    with torch.no_grad():
        maps = model.attention_maps(b.idx)  # (L, B, nh, T, T)
        pp = model.per_position_loss(b.idx, b.targets)
    s, losses, fl = M.scores_from_maps(maps, b), M.pattern_losses(pp, b), TC.floors(b)
    for p, label in enumerate(C.PATTERN_IDS):
        qs = [(i, t) for i in range(6) for t in range(24) if int(pattern[i, t]) == label]
        assert qs, C.PATTERNS[label]
        want = torch.stack([maps[:, i, :, t, int(key[i, t])] for i, t in qs]).mean(dim=0)
        torch.testing.assert_close(s[p], want)
        assert losses[1 + p] == pytest.approx(float(torch.stack([pp[i, t] for i, t in qs]).mean()))
        assert fl[C.PATTERNS[label]] == pytest.approx(
            float(torch.stack([b.floor[i, t] for i, t in qs]).mean()))
    assert M.best_heads(s) == [(c["layer"], c["head"]) for c in TC.best_head_calls(s).values()]
    sub = b.slice(2, 4)
    assert torch.equal(sub.idx, b.idx[2:4]) and torch.equal(sub.key, b.key[:, 2:4])
    assert sub.floor is not None
    assert torch.equal(sub.floor, b.floor[2:4]) and sub.where == []
    with pytest.raises(ValueError, match="no floor"):
        TC.floors(Batch(idx=b.idx, targets=b.targets, key=b.key))


def test_detect_takes_the_best_pattern_above_the_threshold():
    s = np.zeros((3, 1, 3))
    s[:, 0, 0] = [0.9, 0.2, 0.95]  # both above: the higher wins
    s[:, 0, 1] = [0.1, 0.49, 0.0]  # none above 0.5
    s[:, 0, 2] = [0.0, 0.7, 0.1]
    d = S.detect(s, threshold=0.5)
    assert d == {(0, 0): "recent entity", (0, 1): None, (0, 2): "matching bracket"}
    assert S.detect(s, threshold=0.4)[(0, 1)] == "matching bracket"


def test_head_grad_norms_match_the_per_head_slices():
    cfg = FAST.model_config()
    model = AndreaModel(cfg, seed=1)
    b = C.make_batch(4, 16, seed=2)
    _, loss = model(b.idx, b.targets)
    loss.backward()
    G = S.head_grad_norms(model)
    C_, hs = cfg.d_model, cfg.head_dim
    for l, blk in enumerate(model.blocks):
        for h in range(cfg.n_head):
            cols = [w * C_ + h * hs + j for w in range(3) for j in range(hs)]  # Q, K, V columns
            g_attn, g_o = blk.attn.c_attn.grad, blk.attn.W_O.grad
            assert g_attn is not None and g_o is not None  # loss.backward() ran above
            parts = [g_attn[:, cols], g_o[h * hs:(h + 1) * hs]]
            expect = torch.cat([p.flatten() for p in parts]).norm()
            assert G[l, h].item() == pytest.approx(expect.item(), rel=1e-5)


def test_ablation_and_solo_values_are_loss_differences(fast_run):
    model, b = fast_run.model, C.make_batch(16, FAST.seq_len, seed=5)
    d, se = S.ablation(model, b, chunk=None)
    assert d.shape == se.shape == (FAST.n_layer, FAST.n_head, 4)
    with torch.no_grad():
        base = model.per_position_loss(b.idx, b.targets).mean().item()
        with model.ablate([(1, 2)]):
            hit = model.per_position_loss(b.idx, b.targets).mean().item()
    assert d[1, 2, 0] == pytest.approx(hit - base, abs=1e-5)
    v = S.solo_values(model, b)
    with torch.no_grad():
        with model.ablate([(0, h) for h in range(FAST.n_head)]):
            none = model.per_position_loss(b.idx, b.targets).mean().item()
        with model.ablate([(0, h) for h in range(FAST.n_head) if h != 1]):
            one = model.per_position_loss(b.idx, b.targets).mean().item()
    assert v[0, 1, 0] == pytest.approx(none - one, abs=1e-5)


def test_head_output_correlations(fast_run):
    c = S.head_output_correlations(fast_run.model, C.make_batch(8, FAST.seq_len, seed=1))
    assert c.shape == (FAST.n_layer, FAST.n_head, FAST.n_head)
    assert np.allclose(np.diagonal(c, axis1=1, axis2=2), 1, atol=1e-5)
    assert np.allclose(c, c.transpose(0, 2, 1), atol=1e-6)
    m = S.max_other_correlation(c)
    assert m.shape == (FAST.n_layer, FAST.n_head) and (m < 1).all()
    assert S.max_other_correlation(np.ones((2, 1, 1))).tolist() == [[0.0], [0.0]]


@pytest.mark.parametrize("bias", [False, True])
def test_head_outputs_are_what_w_o_turns_into_each_layers_attention_output(bias):
    from andrea_edu.config import AndreaConfig
    from andrea_edu.heads.per_head import head_outputs
    from andrea_edu.projections import output_projection

    cfg = AndreaConfig(d_model=16, n_head=4, n_layer=2, vocab_size=11, block_size=8, bias=bias)
    model = AndreaModel(cfg, seed=3).eval()
    idx = torch.randint(0, 11, (3, 8), generator=torch.Generator().manual_seed(0))
    seen = []
    hooks = [b.attn.register_forward_hook(lambda m, a, o: seen.append(o)) for b in model.blocks]
    ys = head_outputs(model, idx)
    for hk in hooks:
        hk.remove()
    assert [tuple(y.shape) for y in ys] == [(3, 4, 8, 4)] * 2
    for block, y, o in zip(model.blocks, ys, seen):
        b_O = 0 if block.attn.b_O is None else block.attn.b_O
        assert torch.allclose(output_projection(y, block.attn.W_O) + b_O, o, atol=1e-6)


# ------------------------------------------------------------------ gradient pressure
def test_classify_follows_the_stated_rule():
    assert classify(0.4, MIN_SOLO / 2) == "inactive"
    assert classify(0.1, 0.3) == "redundant"  # removing it costs a third of what it does alone
    assert classify(0.2, 0.3) == "unique"
    assert classify(0.2, 0.3, corr=0.7, by="correlation") == "redundant"
    assert classify(0.2, 0.3, corr=0.2, by="correlation") == "unique"
    with pytest.raises(ValueError, match="by="):
        classify(0.1, 0.3, by="votes")


class _FakeRun:
    def __init__(self, probes):
        self.probes = probes


def _probe(step, delta, solo, grad):
    a = lambda x: np.asarray(x, float)[None]  # noqa: E731  (1, nh): one layer
    return {"step": step, "delta": a(delta), "solo": a(solo), "corr_max": a([0.0] * len(delta)),
            "grad": a(grad)}


@pytest.mark.parametrize("g_unique, g_redundant, verdict", [
    (2.0, 1.0, "holds"), (1.15, 1.0, "holds with a caveat"), (1.05, 1.0, "not observed here"),
    (0.95, 1.0, "not observed here"), (0.5, 1.0, "does not hold")])
def test_gradient_pressure_verdicts(g_unique, g_redundant, verdict):
    # Head 0 unique (Δ = V), head 1 redundant (Δ = V / 10), head 2 inactive.
    probes = [_probe(s, [0.5, 0.05, 0.0], [0.5, 0.5, 0.0], [g_unique, g_redundant, 9.0])
              for s in (10, 20, 30, 40)]
    p = gradient_pressure(_FakeRun(probes))
    assert p.verdict == verdict
    assert len(p.ratios) == 4
    assert p.pooled_ratio == pytest.approx(g_unique / g_redundant)
    assert p.count("inactive") == 4 and p.mean_grad("inactive") == 9.0


def test_sign_test():
    assert sign_test(5, 10) == 1.0
    assert sign_test(10, 10) == pytest.approx(2 / 1024)
    assert sign_test(0, 10) == sign_test(10, 10)
    assert sign_test(2, 10) == pytest.approx(2 * (1 + 10 + 45) / 1024)


def test_gradient_pressure_needs_enough_cells():
    p = gradient_pressure(_FakeRun([_probe(1, [0.5, 0.5], [0.5, 0.5], [1, 1])]))
    assert p.verdict == "not measurable" and "not measurable" in p.summary()


# ------------------------------------------------------------------ sweep file
def test_run_survives_json_and_the_sweep_file_round_trips(tmp_path, fast_run, monkeypatch):
    from andrea_lab.make_sweep import sweep_code
    from andrea_lab.store import code_hash

    d = json.loads(json.dumps(fast_run.to_dict()))
    back = S.Run.from_dict(d, S.Settings(**d["settings"]))
    assert back.settings == fast_run.settings
    assert np.allclose(back.train_loss, fast_run.train_loss, atol=5e-5)
    assert back.final_loss == pytest.approx(fast_run.final_loss, abs=5e-5)
    monkeypatch.setenv("ANDREA_GIT_COMMIT", "abc123")
    path = save_sweep(tmp_path / "s.json", {"what": "test"}, {(4, FAST.seed): fast_run})
    prov, runs = load_sweep(path)  # the run's block, stamped by the writer
    assert prov == {"what": "test", "git_commit": "abc123", "code_hash": code_hash(sweep_code())}
    assert list(runs) == [(4, FAST.seed)]
    cmp = compare_runs(fast_run, runs[(4, FAST.seed)])
    assert cmp["max_diff_first_steps"] <= 5e-5
    assert max(cmp["final_loss_diff"].values()) <= 5e-5
    with pytest.raises(ValueError, match="settings differ"):
        compare_runs(fast_run, S.Run.from_dict(d, S.Settings(**{**d["settings"], "seed": 7})))
    with pytest.raises(FileNotFoundError, match="specialization_sweep"):
        load_sweep(tmp_path / "missing.json")


# ------------------------------------------------------------------ the worked example
def test_one_softmax_loses_half_two_heads_lose_nothing():
    t = two_places_table(splits=(0.5, 0.8), n=3000)
    ones = [v for k, v in t.items() if k.startswith("one head")]
    assert all(v == pytest.approx(0.5, abs=0.03) for v in ones)
    assert t["two heads, one key each"] < 1e-9


# ------------------------------------------------------------------ the full run (slow)
# Claims rest on the committed multi-seed sweep (deterministic data: rounding cannot flip a
# test); the live run is only checked against its committed entry (andrea_lab.make_sweep.recheck: exact
# under the same CPU instruction-set pins, within the measured cross-ISA spread otherwise) and
# against margins stated here. A live score is compared with the committed one within
# S.SCORE_MARGIN (0.1): the same run scored 0.505 on one x86 CPU and 0.428 on another.
@pytest.fixture(scope="module")
def full_run():
    return S.train(S.default_settings(4, fast=False, seed=S.CHAPTER_SEED), progress=False)


@pytest.fixture(scope="module")
def committed():
    path = find_data(DATA_NAME, verify=False)
    if path is None:
        pytest.skip("book/data/specialization_sweep.json is not in this checkout")
    return load_sweep(path)


@pytest.mark.slow
def test_full_run_learns_all_three_patterns(full_run):
    # margin: the recent-entity excess was 0.017 on one CPU and 0.057 on another (issue 12)
    excess = {p: full_run.final_loss[p] - full_run.floors[p] for p in S.PATTERN_NAMES}
    assert all(v < 0.1 for v in excess.values()), excess


def test_every_pattern_gets_a_specialised_head_in_every_committed_run(committed):
    _, runs = committed
    for (n, seed), r in runs.items():
        if n < 4:
            continue  # one or two heads for three patterns: sharing is expected
        best = np.asarray(r.scores_after).reshape(3, -1).max(axis=1)
        chance = np.array([r.chance[p] for p in S.PATTERN_NAMES])
        assert (best >= 4 * chance).all(), ((n, seed), dict(zip(S.PATTERN_NAMES, best)))
        before = np.asarray(r.scores_before).reshape(3, -1).max(axis=1)
        assert (before < 2 * chance).all()  # nothing is specialised at initialisation


@pytest.mark.slow
def test_the_live_run_scores_like_its_committed_entry(full_run, committed):
    prov, runs = committed
    stored = runs[(4, S.CHAPTER_SEED)]
    if recheck(full_run, stored, prov)["mode"] != "exact":
        pytest.skip("CPU numerics differ from the file's producer (other ISA pins, or a CPU "
                    "of another vendor: env.same_cpu_numerics): after "
                    "1500 steps it is another run (best scores moved by up to 0.36 between two "
                    "CPUs); the first steps are compared in test_the_committed_sweep_holds_this_run")
    live = np.asarray(full_run.scores_after)
    assert np.abs(live - np.asarray(stored.scores_after)).max() <= 5e-4  # stored to 3 decimals


def test_the_chapter_seed_follows_its_rule(committed):
    _, runs = committed  # the n_head-4 run whose worst pattern ends closest to its floor
    worst = {s: max(r.final_loss[p] - r.floors[p] for p in S.PATTERN_NAMES)
             for (n, s), r in runs.items() if n == 4}
    assert S.CHAPTER_SEED == min(worst, key=lambda s: worst[s]), worst


def test_a_clearly_specialised_head_is_needed_for_its_pattern(committed):
    # n_head 4 (the chapter's), every seed: a best head clearly above the threshold (by
    # S.SCORE_MARGIN) is one the pattern needs: removing it costs more than 0.1 nats there.
    _, runs = committed
    for (n, seed), r in runs.items():
        if n != 4:
            continue
        for i, (name, b) in enumerate(S.best_head_calls(r.scores_after).items()):
            if b["call"] == "above":
                hit = r.ablation[b["layer"], b["head"], 1 + i]
                assert hit > 0.1, ((n, seed), name, b, hit)


@pytest.mark.slow
def test_the_committed_sweep_holds_this_run(full_run, committed):
    prov, runs = committed
    chk = recheck(full_run, runs[(full_run.settings.n_head, full_run.settings.seed)], prov)
    assert chk["ok"], chk["says"]


def test_the_sweeps_first_steps_train_alike_again(committed):
    """The re-run "Why twelve heads" once did live in its Evidence section (in fast mode): the
    committed run with the fewest heads (first seed), its first 5 steps trained again and compared
    with the file (exact under its CPU pins, within the cross-ISA spread otherwise). Outside fast
    mode the chapter also re-ran the run with the most heads (16); that one costs about 30 s here
    and is not repeated."""
    prov, runs = committed
    n = min(n for n, _ in runs)
    stored = runs[(n, min(s for k, s in runs if k == n))]
    live = S.train(stored.settings, progress=False, stop_after=5)
    chk = recheck(live, stored, prov, 5)
    assert chk["ok"] and chk["first_steps"] == 5, chk["says"]


def test_model_after_steps_of_the_schedule():
    """"Reading the pipeline", exercise 5: the model after n steps, 0 being the initialisation;
    a step count outside the schedule stops with one line."""
    s = S.default_settings(fast=True)
    init = S.model_after(0, s)
    fresh = AndreaModel(s.model_config(), seed=s.seed)
    assert all(torch.equal(a, b) for a, b in zip(init.parameters(), fresh.parameters()))
    two = S.model_after(2, s)
    assert not torch.equal(two.blocks[0].attn.W_O, init.blocks[0].attn.W_O)
    assert torch.equal(two.blocks[0].attn.W_O, S.model_after(2, s).blocks[0].attn.W_O)
    with pytest.raises(ValueError) as e:
        S.model_after(s.steps + 1, s)
    assert "\n" not in str(e.value) and str(e.value).startswith(f"steps={s.steps + 1} must be an int in 0..{s.steps}")


# ------------------------------------------------------------------ relative gradients (exercise 2)
def test_relative_gradients_divide_by_each_heads_parameter_norm():
    probes = [_probe(s, [0.5, 0.1], [0.5, 0.5], [2.0, 1.0]) for s in (1, 2, 3, 4)]
    run = _FakeRun(probes)
    assert gradient_pressure(run).pooled_ratio == pytest.approx(2.0)
    run.param_norm = np.array([[[4.0, 1.0]]] * 4)  # type: ignore[attr-defined]  # the unique head 4x larger
    p = gradient_pressure(run, relative=True)
    assert p.pooled_ratio == pytest.approx(0.5) and p.verdict == "does not hold"


def test_relative_gradients_need_parameter_norms_and_a_bool():
    with pytest.raises(ValueError) as e:
        gradient_pressure(_FakeRun([_probe(1, [0.5], [0.5], [1.0])]), relative=True)
    assert "\n" not in str(e.value) and "relative=False" in str(e.value)
    with pytest.raises(ValueError, match="relative='yes' is not allowed; True or False"):
        gradient_pressure(_FakeRun([]), relative="yes")  # type: ignore[arg-type]  # a wrong type on purpose


def test_a_trained_run_keeps_each_heads_parameter_norm_at_the_probes(fast_run):
    from andrea_edu.heads.per_head import head_param_norms
    s = fast_run.settings
    assert fast_run.param_norm.shape == (len(fast_run.probes), s.n_layer, s.n_head)
    m = fast_run.model  # after training: its norms by hand, head 1 of layer 0
    C_, hs = s.d_model, s.d_model // s.n_head
    att = m.blocks[0].attn
    cols = [part * C_ + hs + j for part in range(3) for j in range(hs)]
    by_hand = (att.c_attn.detach()[:, cols].pow(2).sum() + att.W_O.detach()[hs:2 * hs].pow(2).sum()).sqrt()
    assert float(head_param_norms(m)[0, 1]) == pytest.approx(float(by_hand), rel=1e-6)
    assert "param_norm" not in fast_run.to_dict()  # the JSON of a run (the sweep) is unchanged
