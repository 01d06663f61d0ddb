"""The small ANDREA: parameter counts against the formula, forward/backward, capture, ablation."""
import math

import pytest
import torch
import torch.nn.functional as F

from andrea_edu.attention import reference_attention
from andrea_edu.config import ANDREA_12M, ANDREA_120M, AndreaConfig, param_counts
from andrea_edu.dispatch import Backend
from andrea_edu.model import (AndreaModel, attention_probabilities, count_parameters,
                              count_parameters_by_part, part_of)
from andrea_edu.projections import project_c_attn

TOY = AndreaConfig(d_model=32, n_head=4, n_layer=2, vocab_size=29, block_size=16)


def _idx(cfg, B=3, T=11, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab_size, (B, T), generator=g)


def test_andrea_120m_instantiates_on_the_cpu_with_the_formula_s_count():
    model = AndreaModel(ANDREA_120M)  # real tensors: about 2 s, 0.5 GB
    counts = param_counts(ANDREA_120M)
    assert count_parameters(model) == counts.total == 124_356_864
    assert count_parameters_by_part(model) == counts.by_part()
    assert list(count_parameters_by_part(model)) == list(counts.by_part())  # same order
    # GPT-2 initialisation really happened: std 0.02, LayerNorm weights 1 and biases 0.
    assert model.blocks[0].attn.c_attn.std().item() == pytest.approx(0.02, rel=0.02)
    assert model.blocks[3].attn.W_O.std().item() == pytest.approx(0.02 / math.sqrt(24), rel=0.02)
    assert torch.all(model.ln_f.weight == 1) and torch.all(model.blocks[5].ln_2.bias == 0)


@pytest.mark.parametrize("cfg", [ANDREA_12M, TOY, TOY.replace(n_head=1), TOY.replace(n_head=32)])
def test_counts_by_part_equal_the_formula(cfg):
    model = AndreaModel(cfg, device="meta")
    assert count_parameters_by_part(model) == param_counts(cfg).by_part()
    assert count_parameters(model) == param_counts(cfg).total


def test_the_output_head_is_the_token_embedding():
    model = AndreaModel(TOY)
    idx = _idx(TOY)
    logits, _ = model(idx)
    assert torch.allclose(logits, model.hidden(idx) @ model.wte.t())
    assert "lm_head" not in dict(model.named_parameters())


def test_every_parameter_name_has_a_part():
    model = AndreaModel(TOY)
    parts = {part_of(n) for n, _ in model.named_parameters()}
    assert parts == set(param_counts(TOY).by_part())
    with pytest.raises(ValueError, match="name='head.weight'"):
        part_of("head.weight")


def test_same_seed_same_weights_different_seed_different_weights():
    a, b, c = AndreaModel(TOY, seed=3), AndreaModel(TOY, seed=3), AndreaModel(TOY, seed=4)
    for (n, p), (_, q), (_, r) in zip(a.named_parameters(), b.named_parameters(),
                                      c.named_parameters()):
        assert torch.equal(p, q), n
        if "ln_" not in n:
            assert not torch.equal(p, r), n


def test_loss_is_the_mean_of_the_per_position_losses_and_backward_reaches_every_weight():
    model = AndreaModel(TOY)
    idx, tgt = _idx(TOY), _idx(TOY, seed=1)
    logits, loss = model(idx, tgt)
    assert logits.shape == (3, 11, TOY.vocab_size)
    per_pos = model.per_position_loss(idx, tgt)
    assert per_pos.shape == (3, 11)
    assert loss.item() == pytest.approx(per_pos.mean().item(), rel=1e-6)
    ref = F.cross_entropy(logits.reshape(-1, TOY.vocab_size), tgt.reshape(-1))
    assert loss.item() == pytest.approx(ref.item(), rel=1e-6)
    loss.backward()
    for n, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, n


def test_sdpa_backend_gives_the_reference_logits():
    model = AndreaModel(TOY)
    idx = _idx(TOY)
    ref, _ = model(idx)
    assert model.backend == "reference" and model.attention is reference_attention
    model.set_attention(Backend("sdpa"))
    assert model.backend == "sdpa"
    out, _ = model(idx)
    assert torch.allclose(out, ref, atol=1e-5)


def test_the_model_runs_the_attention_it_is_given_and_names_it():
    """attn is a value: any callable (q, k, v, causal) runs in every layer, causal, and
    model.backend is its name; None is reference_attention."""
    seen = []

    def my_attention(q, k, v, causal=False):
        seen.append((tuple(q.shape), causal))
        return reference_attention(q, k, v, causal)

    idx = _idx(TOY)
    model, ref = AndreaModel(TOY, attn=my_attention, seed=1), AndreaModel(TOY, seed=1)
    assert model.backend == "my_attention" and model.attention is my_attention
    assert torch.equal(model(idx)[0], ref(idx)[0])
    assert seen == [((3, 4, 11, 8), True)] * TOY.n_layer
    assert AndreaModel(TOY, attn=Backend("auto", pad=True)).backend == "auto+pad"
    model.set_attention(None)
    assert model.backend == "reference" and all(
        b.attn.attention is reference_attention for b in model.blocks)


@pytest.mark.parametrize("bad,match", [
    ("sdpa", r"attn='sdpa' is a name; pass a callable .*Backend\('sdpa'\)"),
    (3, r"attn=3 is not callable; allowed: None \(reference_attention\) or a callable")])
def test_a_bad_attention_is_refused_in_one_line_before_any_weight(bad, match, monkeypatch):
    def no_allocation(*a, **k):
        raise AssertionError("a weight was allocated before attn was checked")
    with monkeypatch.context() as m:
        m.setattr(torch, "empty", no_allocation)
        with pytest.raises(TypeError, match=match) as e:
            AndreaModel(ANDREA_120M, attn=bad)
    assert "\n" not in str(e.value)
    model = AndreaModel(TOY)
    with pytest.raises(TypeError, match=match):
        model.set_attention(bad)
    assert model.backend == "reference"  # unchanged


def test_the_model_is_causal():
    model = AndreaModel(TOY)
    idx = _idx(TOY)
    changed = idx.clone()
    changed[:, 7] = (changed[:, 7] + 1) % TOY.vocab_size
    a, _ = model(idx)
    b, _ = model(changed)
    assert torch.allclose(a[:, :7], b[:, :7], atol=1e-6)
    assert not torch.allclose(a[:, 7:], b[:, 7:], atol=1e-4)


def test_hooked_probabilities_are_what_attention_applied():
    model = AndreaModel(TOY, seed=2)
    idx = _idx(TOY)
    inputs = []
    hook = model.blocks[1].attn.register_forward_hook(lambda m, a, o: inputs.append(a[0]))
    with model.record("attn.probs") as maps:
        assert maps == [None, None]
        model(idx)
    hook.remove()
    P = maps[1]  # (B, nh, T, T)
    assert P.shape == (3, 4, 11, 11)
    assert torch.allclose(P.sum(-1), torch.ones(3, 4, 11), atol=1e-6)
    assert torch.all(P.triu(diagonal=1) == 0)  # no attention to the future
    q, k, v = project_c_attn(inputs[0], model.blocks[1].attn.c_attn, 4)
    assert torch.allclose(P @ v, reference_attention(q, k, v, causal=True), atol=1e-6)
    assert all(b.attn.hooks == {} for b in model.blocks)  # the hooks end with the block
    assert model.attention_maps(idx).shape == (2, 3, 4, 11, 11)


def test_hooks_call_fn_per_layer_nest_and_restore():
    model = AndreaModel(TOY, seed=2)
    idx = _idx(TOY)
    seen, inner = [], []
    with model.hooks({"attn.probs": lambda layer, p: seen.append((layer, p.shape))}):
        with model.hooks({"attn.probs": lambda layer, p: inner.append(layer)}):
            model(idx)  # the inner hook replaces the outer one for its block
        model(idx)
    model(idx)  # no hook any more
    assert inner == [0, 1] and seen == [(0, (3, 4, 11, 11)), (1, (3, 4, 11, 11))]
    assert all(b.attn.hooks == {} for b in model.blocks)
    with pytest.raises(ValueError, match="'attn.pattern'.*allowed: a hook point of"):
        with model.hooks({"attn.pattern": print}):
            pass
    with pytest.raises(ValueError, match="'attn.probs' -> int"):
        with model.hooks({"attn.probs": 3}):  # type: ignore[dict-item]
            pass


def test_attention_probabilities_without_mask_are_a_full_softmax():
    q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    P = attention_probabilities(q, k, causal=False)
    assert torch.allclose(P, torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8), -1), atol=1e-6)


def test_ablating_a_head_removes_exactly_its_contribution_and_restores_the_weights():
    model = AndreaModel(TOY, seed=5)
    idx = _idx(TOY)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    full, _ = model(idx)
    with model.ablate([(1, 2)]):
        W = model.blocks[1].attn.W_O
        assert torch.all(W[16:24] == 0) and torch.equal(W[:16], before["blocks.1.attn.W_O"][:16])
        ablated, _ = model(idx)
    assert not torch.allclose(full, ablated, atol=1e-5)
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]), n
    again, _ = model(idx)
    assert torch.equal(again, full)
    # Restored even when the body raises.
    with pytest.raises(RuntimeError, match="boom"):
        with model.ablate([(0, 0), (1, 3)]):
            raise RuntimeError("boom")
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]), n


def test_ablating_every_head_of_a_layer_equals_a_layer_without_attention():
    model = AndreaModel(TOY, seed=6)
    idx = _idx(TOY)
    with model.ablate([(0, h) for h in range(4)]):
        out, _ = model(idx)
    blk = model.blocks[0]
    x = model.wte[idx] + model.wpe[: idx.shape[1]]
    x = x + blk.mlp(blk.ln_2(x))  # attention contributes nothing
    x = model.blocks[1](x)
    assert torch.allclose(out, model.ln_f(x) @ model.wte.t(), atol=1e-5)


@pytest.mark.parametrize("heads, match", [([(2, 0)], "layer=2"), ([(0, 4)], "head=4"),
                                           ([(0, -1)], "head=-1")])
def test_ablate_rejects_heads_that_do_not_exist(heads, match):
    model = AndreaModel(TOY)
    with pytest.raises(ValueError, match=match):
        with model.ablate(heads):
            pass


def test_bad_inputs_are_named():
    model = AndreaModel(TOY)
    with pytest.raises(ValueError, match="token ids"):
        model(torch.full((1, 4), TOY.vocab_size))
    with pytest.raises(ValueError, match="block_size=16"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="idx"):
        model(torch.zeros(1, 4))
    with pytest.raises(TypeError, match="AndreaConfig"):
        AndreaModel({"d_model": 32})  # type: ignore[arg-type]  # the wrong type under test
    with pytest.raises(ValueError, match="targets.shape"):
        model.per_position_loss(torch.zeros(1, 4, dtype=torch.long),
                                torch.zeros(1, 5, dtype=torch.long))
