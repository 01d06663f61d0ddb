"""andrea_lab.gpt2_small and the GPT-2 options of AndreaConfig/AndreaModel: a randomly initialised
transformers GPT-2 (small config, nothing downloaded) gives the same logits in AndreaModel."""
from __future__ import annotations

import re

import pytest
import torch

from andrea_edu.config import ANDREA_120M, AndreaConfig, param_counts
from andrea_lab import gpt2_small as G
from andrea_edu.model import AndreaModel, count_parameters, count_parameters_by_part

transformers = pytest.importorskip("transformers")

REL = 1e-6  # fp32 rounding (eps 1.2e-7) grown through two layers of different op orders


def _close(got, ref) -> float:
    """Max |difference| in units of the largest logit; fp32 rounding gives ~1e-7."""
    return ((got - ref).abs().max() / ref.abs().max()).item()


def _hf(seed=0, **kw):
    cfg = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=101, n_positions=40,
                                  initializer_range=0.2, bos_token_id=0, eos_token_id=0,
                                  attn_implementation="eager", **kw)
    torch.manual_seed(seed)
    m = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # transformers starts biases and LayerNorms at 0 / 1: make them matter
        for name, p in m.named_parameters():
            if name.endswith("bias") or ".ln_" in name or "ln_f" in name:
                p.add_(0.1 * torch.randn_like(p))
    return m


def test_defaults_are_andreas():
    cfg = AndreaConfig()
    assert (cfg.bias, cfg.gelu, cfg.layer_norm_eps) == (False, "exact", 1e-5)
    m = AndreaModel(ANDREA_120M, device="meta")
    assert not any(n.endswith(("b_attn", "b_O", "b_in", "b_out")) for n, _ in m.named_parameters())
    assert param_counts(ANDREA_120M).attention_per_layer == 4 * 768 * 768


def test_gpt2_small_has_gpt2_smalls_parameter_count():
    m = AndreaModel(G.GPT2_SMALL, device="meta")
    assert count_parameters(m) == param_counts(G.GPT2_SMALL).total == 124_439_808
    assert count_parameters_by_part(m) == param_counts(G.GPT2_SMALL).by_part()
    with pytest.raises(ValueError, match="gelu"):
        AndreaConfig(gelu="relu")


@pytest.mark.parametrize("seed", [0, 1])
def test_logits_equal_transformers_gpt2(seed):
    hf = _hf(seed)
    ours = G.from_transformers(hf)
    assert count_parameters(ours) == sum(p.numel() for n, p in hf.named_parameters()
                                         if n != "lm_head.weight")
    idx = torch.randint(0, 101, (3, 40), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        ref = hf(idx).logits
        got, _ = ours(idx)
    err = (got - ref).abs().max().item()
    print(f"[gpt2] max |logit difference| = {err:.2e} (logits up to {ref.abs().max():.1f})")
    assert _close(got, ref) <= REL


def test_attention_maps_equal_transformers():
    hf = _hf(2)
    ours = G.from_transformers(hf)
    idx = torch.randint(0, 101, (2, 17), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        att = hf(idx, output_attentions=True).attentions  # L x (B, nh, T, T)
    torch.testing.assert_close(ours.attention_maps(idx), torch.stack(att), atol=1e-6, rtol=1e-5)


def test_exact_gelu_is_not_gpt2s():
    """The option matters: with exact GELU the logits move by more than the tolerance."""
    hf = _hf(0)
    ours = G.from_gpt2(hf.state_dict(), G.config_from_hf(hf.config).replace(gelu="exact"))
    idx = torch.randint(0, 101, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert _close(ours(idx)[0], hf(idx).logits) > 100 * REL


def test_safetensors_names_and_refusals(tmp_path):
    hf = _hf(0)
    sd = {k[len("transformer."):]: v for k, v in hf.state_dict().items() if k.startswith("transformer.")}
    from safetensors.torch import save_file
    path = tmp_path / "model.safetensors"
    save_file({k: v.contiguous() for k, v in sd.items()}, str(path))
    from safetensors.torch import load_file
    ours = G.from_gpt2(load_file(str(path)), G.config_from_hf(hf.config))
    idx = torch.randint(0, 101, (1, 12))
    with torch.no_grad():
        assert _close(ours(idx)[0], hf(idx).logits) <= REL
    with pytest.raises(KeyError, match="no place"):
        G.andrea_state_dict({**sd, "h.0.attn.extra": torch.zeros(1)})
    with pytest.raises(ValueError, match="bias"):
        G.from_gpt2(sd, G.config_from_hf(hf.config).replace(bias=False))
    with pytest.raises(ValueError, match="activation"):
        G.config_from_hf(transformers.GPT2Config(activation_function="relu"))


def test_no_local_weights_means_one_line_how_to(monkeypatch, tmp_path):
    monkeypatch.setenv("ANDREA_GPT2_SAFETENSORS", str(tmp_path / "absent.safetensors"))
    assert G.local_gpt2_small() is None
    with pytest.raises(FileNotFoundError, match="ANDREA_GPT2_SAFETENSORS") as e:
        G.load_gpt2_small()
    assert "model.safetensors" in str(e.value) and "\n" not in G.HOW_TO_GET
    # what file is needed, not where to fetch it: no hub or registry host is named
    assert not re.search(r"hugging\s*face|\bhub\b|https?://|\.co\b|pypi", G.HOW_TO_GET, re.I)


def test_detectors_run_on_a_gpt2_shaped_model_with_another_tokenizer():
    """The chapter's GPT-2 path, on a random small GPT-2 and a made-up tokenizer (no download)."""
    import re

    from andrea_edu.heads import detectors as D, measures as M
    from andrea_edu.heads import text_corpus as tc
    ours = G.from_transformers(_hf(0))
    corpus = tc.corpus_cached()

    def pieces(text):
        spans = [m.span() for m in re.finditer(r"\w{1,2}|\s+|.", text)]
        return [hash(text[a:b]) % 101 for a, b in spans], spans
    b = G.token_batch(corpus, pieces, 3, 40, seed=0)
    S = M.head_scores(ours, b, chunk=2)
    assert S.shape == (3, 2, 4) and torch.isfinite(S[tc.PREV]).all()
    assert D.scores_verdict(S, M.baseline(b), tol=0.02) in ("holds", "holds with a caveat",
                                                             "does not hold")


def test_the_laboratorys_gpt2_record_is_what_the_chapter_reads(tmp_path):
    """andrea_lab.gpt2_small.measure on a GPT-2-shaped model (12 layers x 12 heads, tiny width,
    random weights) and a made-up tokenizer, written by the laboratory's writer and read back by
    the chapter's loader; a value out of range is refused in one line naming the field."""
    import json
    import re

    import numpy as np

    from andrea_edu.data import DataFileError
    from andrea_edu.heads import text_corpus as tc
    from andrea_edu.heads.text_runs import GPT2_FILE, load_gpt2_scores
    from andrea_lab.run_writers import save_paths

    class Pieces:  # a transformers-style fast tokenizer: ids and character offsets
        def __call__(self, text, return_offsets_mapping=True, add_special_tokens=False):
            spans = [m.span() for m in re.finditer(r"\w{1,2}|\s+|.", text)]
            return {"input_ids": [hash(text[a:b]) % 101 for a, b in spans], "offset_mapping": spans}

    cfg = transformers.GPT2Config(n_embd=24, n_layer=12, n_head=12, vocab_size=101, n_positions=40,
                                  bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    torch.manual_seed(0)
    model = G.from_transformers(transformers.GPT2LMHeadModel(cfg).eval())
    d = G.measure(model, Pieces(), tc.corpus_cached(), B=2, T=32)
    out = tmp_path / GPT2_FILE
    save_paths(d, out)
    scores, base = load_gpt2_scores(out)
    assert scores.shape == (3, 12, 12) and base.shape == (3,)
    np.testing.assert_allclose(scores[~np.isnan(scores)],
                               np.asarray(d["scores"], dtype=float)[~np.isnan(scores)])
    bad = json.loads(out.read_text())
    bad["scores"][1][3][4] = 1.5
    save_paths(bad, out, replace=True)  # the manifest vouches for it: the values must not
    with pytest.raises(DataFileError) as e:
        load_gpt2_scores(out)
    assert "scores must lie in [0, 1]" in str(e.value) and "\n" not in str(e.value)
