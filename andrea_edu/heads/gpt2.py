"""GPT-2's weights in AndreaModel: ANDREA-120M has GPT-2 small's shape, so its weights load as is.

Introduced in the chapter "Heads on real text" (its optional GPT-2 section runs the detectors on
GPT-2 small when the weights are on this machine).

What GPT-2 needs beyond ANDREA's defaults (AndreaConfig options, defaults unchanged):
    bias=True            c_attn, c_proj (our W_O), c_fc (W_in) and the MLP's c_proj (W_out) have biases
    gelu="tanh"          GPT-2's "gelu_new" is the tanh approximation of GELU
    layer_norm_eps=1e-5  GPT-2's, and torch's default
Everything else already matches: pre-LayerNorm blocks, learned positions, scores scaled by
1/sqrt(head_dim), a causal softmax, and the output head tied to the token embedding. GPT-2 stores
its linear weights as `Conv1D`, [in_features, out_features], the book's convention (X . W): they
copy without a transpose. GPT-2's c_attn is [W_Q | W_K | W_V], exactly our c_attn.

    transformers name (under "transformer.", or none)   AndreaModel name
    wte.weight, wpe.weight                              wte, wpe
    h.{i}.ln_1 / ln_2 .weight .bias                     blocks.{i}.ln_1 / ln_2
    h.{i}.attn.c_attn.weight / .bias                    blocks.{i}.attn.c_attn / b_attn
    h.{i}.attn.c_proj.weight / .bias                    blocks.{i}.attn.W_O / b_O
    h.{i}.mlp.c_fc.weight / .bias                       blocks.{i}.mlp.W_in / b_in
    h.{i}.mlp.c_proj.weight / .bias                     blocks.{i}.mlp.W_out / b_out
    ln_f.weight / .bias                                 ln_f
    lm_head.weight                                      (tied to wte: checked equal, not copied)

No download happens here: `local_gpt2_small()` looks in the Hugging Face cache only.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from ..config import ANDREA_120M, AndreaConfig
from ..model import AndreaModel

GPT2_SMALL = ANDREA_120M.replace(bias=True, gelu="tanh", layer_norm_eps=1e-5, name="GPT-2 small")
HF_REPOS = ("openai-community/gpt2", "gpt2")  # the same weights under the new and the old name
HOW_TO_GET = ("set ANDREA_GPT2_SAFETENSORS to the path of GPT-2 small's weights, one "
              "`model.safetensors` file (124M parameters, about 0.5 GB; transformers' local cache "
              "is searched too), then run this page again")

_RENAME = [
    (r"^wte\.weight$", "wte"), (r"^wpe\.weight$", "wpe"),
    (r"^h\.(\d+)\.ln_(1|2)\.(weight|bias)$", r"blocks.\1.ln_\2.\3"),
    (r"^h\.(\d+)\.attn\.c_attn\.weight$", r"blocks.\1.attn.c_attn"),
    (r"^h\.(\d+)\.attn\.c_attn\.bias$", r"blocks.\1.attn.b_attn"),
    (r"^h\.(\d+)\.attn\.c_proj\.weight$", r"blocks.\1.attn.W_O"),
    (r"^h\.(\d+)\.attn\.c_proj\.bias$", r"blocks.\1.attn.b_O"),
    (r"^h\.(\d+)\.mlp\.c_fc\.weight$", r"blocks.\1.mlp.W_in"),
    (r"^h\.(\d+)\.mlp\.c_fc\.bias$", r"blocks.\1.mlp.b_in"),
    (r"^h\.(\d+)\.mlp\.c_proj\.weight$", r"blocks.\1.mlp.W_out"),
    (r"^h\.(\d+)\.mlp\.c_proj\.bias$", r"blocks.\1.mlp.b_out"),
    (r"^ln_f\.(weight|bias)$", r"ln_f.\1"),
]
# Buffers some transformers versions keep in the state dict (the causal mask): not weights.
_IGNORED = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")


def config_from_hf(hf_config) -> AndreaConfig:
    """AndreaConfig of a transformers GPT2Config (or a dict with its keys)."""
    get = (lambda k, d=None: hf_config.get(k, d)) if isinstance(hf_config, dict) else \
        (lambda k, d=None: getattr(hf_config, k, d))
    act = get("activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh", "gelu"):
        raise ValueError(f"activation_function={act!r}: AndreaModel has exact GELU and GPT-2's "
                         f"tanh approximation (gelu_new) only")
    inner = get("n_inner")
    C = get("n_embd")
    if not isinstance(C, int) or isinstance(C, bool) or C < 1:
        raise ValueError(f"n_embd={C!r} must be an int >= 1")
    if inner is not None and (not isinstance(inner, int) or isinstance(inner, bool) or inner < C
                              or inner % C):
        raise ValueError(f"n_inner={inner!r} must be None (4 * n_embd) or a positive multiple of "
                         f"n_embd={C}")
    for k, v in (("scale_attn_by_inverse_layer_idx", False), ("reorder_and_upcast_attn", False),
                 ("scale_attn_weights", True)):
        if get(k, v) != v:
            raise ValueError(f"{k}={get(k)!r} is not GPT-2's setting ({v}); AndreaModel has only that")
    return AndreaConfig(d_model=C, n_head=get("n_head"), n_layer=get("n_layer"),
                        vocab_size=get("vocab_size"), block_size=get("n_positions"),
                        mlp_ratio=(inner or 4 * C) // C, bias=True,
                        gelu="exact" if act == "gelu" else "tanh",
                        layer_norm_eps=float(get("layer_norm_epsilon", 1e-5)), name="GPT-2")


def andrea_state_dict(gpt2_state: dict) -> dict:
    """Rename a transformers GPT-2 state dict (GPT2LMHeadModel, GPT2Model or the safetensors
    file) to AndreaModel's names. Unknown keys raise, naming them."""
    out, unknown, lm_head = {}, [], None
    for key, value in gpt2_state.items():
        k = key[len("transformer."):] if key.startswith("transformer.") else key
        if k == "lm_head.weight":
            lm_head = value
            continue
        if _IGNORED.match(k):
            continue
        for pat, rep in _RENAME:
            if re.match(pat, k):
                out[re.sub(pat, rep, k)] = value
                break
        else:
            unknown.append(key)
    if unknown:
        raise KeyError(f"{len(unknown)} GPT-2 key(s) have no place in AndreaModel: {unknown[:5]}")
    if lm_head is not None and "wte" in out and not torch.equal(lm_head, out["wte"]):
        raise ValueError("lm_head.weight differs from wte: AndreaModel ties its output head to the "
                         "token embedding, as GPT-2 does, and cannot hold an untied head")
    return out


class GPT2FileError(ValueError):
    """Weights that are not the GPT-2 asked for; one line: what was found, what was expected,
    and which call loads what was found."""


def describe_state(state: dict) -> dict:
    """What a GPT-2 state dict's shapes say: n_layer, d_model, vocab_size, block_size (n_head
    is not among them: c_attn is [C, 3C] whatever the head count)."""
    strip = {k[len("transformer."):] if k.startswith("transformer.") else k: v
             for k, v in state.items()}
    layers = {int(m.group(1)) for k in strip for m in [re.match(r"^h\.(\d+)\.", k)] if m}
    wte, wpe = strip.get("wte.weight"), strip.get("wpe.weight")
    return {"n_layer": len(layers),
            "d_model": int(wte.shape[1]) if wte is not None and wte.dim() == 2 else None,
            "vocab_size": int(wte.shape[0]) if wte is not None and wte.dim() == 2 else None,
            "block_size": int(wpe.shape[0]) if wpe is not None and wpe.dim() == 2 else None}


def _check_fits(found: dict, cfg: AndreaConfig, hf_config=None) -> None:
    want = {"n_layer": cfg.n_layer, "d_model": cfg.d_model, "vocab_size": cfg.vocab_size,
            "block_size": cfg.block_size}
    diff = [k for k in want if found.get(k) != want[k]]
    if diff:
        sizes: dict[tuple[int | None, int | None], str] = {(12, 768): "GPT-2 small", (24, 1024): "GPT-2 medium", (36, 1280): "GPT-2 large",
                 (48, 1600): "GPT-2 XL"}
        name = sizes.get((found.get("n_layer"), found.get("d_model")), "another model")
        raise GPT2FileError(
            f"the weights hold {name} ({found['n_layer']} layers, d_model {found['d_model']}, "
            f"vocab {found['vocab_size']}, {found['block_size']} positions) but cfg "
            f"{cfg.name!r} expects {want['n_layer']} layers, d_model {want['d_model']}, vocab "
            f"{want['vocab_size']}, {want['block_size']} positions; load them with "
            f"from_gpt2(state, config_from_hf(<their config.json>))")
    if hf_config is not None:
        theirs = config_from_hf(hf_config)
        if theirs.n_head != cfg.n_head:
            raise GPT2FileError(
                f"cfg.n_head={cfg.n_head} but the checkpoint's config says n_head={theirs.n_head}; "
                f"the weights' shapes cannot tell (c_attn is [C, 3C] for any head count), so the "
                f"config decides: use config_from_hf(<its config>)")


def from_gpt2(gpt2_state: dict, cfg: AndreaConfig, hf_config=None) -> AndreaModel:
    """AndreaModel(cfg) with a GPT-2 state dict's weights (every weight must be present).
    The shapes must be cfg's (layers, d_model, vocab, positions: GPT2FileError, one line, says
    what was found otherwise); the head count is not in the shapes, so when the checkpoint's
    config (hf_config: a GPT2Config or its config.json as a dict) is given, its n_head must be
    cfg's too."""
    if not isinstance(gpt2_state, dict) or not all(isinstance(k, str) for k in gpt2_state):
        raise TypeError(f"gpt2_state must be a dict of weight name -> tensor (a state dict), got "
                        f"{type(gpt2_state).__name__}; load_gpt2_small reads a checkpoint file")
    if not isinstance(cfg, AndreaConfig):
        raise TypeError(f"cfg must be an AndreaConfig, got {type(cfg).__name__}")
    if not cfg.bias:
        raise ValueError("cfg.bias must be True: GPT-2's linear layers have biases "
                         "(use config_from_hf(...) or GPT2_SMALL)")
    _check_fits(describe_state(gpt2_state), cfg, hf_config)
    bad = next((k for k, v in gpt2_state.items() if isinstance(v, torch.Tensor)
                and v.is_floating_point() and not bool(torch.isfinite(v).all())), None)
    if bad is not None:  # a damaged checkpoint would load, and every output would be NaN
        raise GPT2FileError(f"weight {bad!r} holds NaN or infinity; the checkpoint is damaged")
    model = AndreaModel(cfg, device="meta")
    state = andrea_state_dict(gpt2_state)
    try:
        model.load_state_dict({k: v.float() for k, v in state.items()}, strict=True, assign=True)
    except RuntimeError as e:
        first = str(e).splitlines()[1].strip() if len(str(e).splitlines()) > 1 else str(e)
        raise GPT2FileError(f"the weights do not fit {cfg.name!r}: {first[:200]}") from None
    return model.eval()


def from_transformers(hf_model) -> AndreaModel:
    """AndreaModel with the weights of a transformers GPT2LMHeadModel / GPT2Model instance."""
    return from_gpt2({k: v.detach() for k, v in hf_model.state_dict().items()},
                     config_from_hf(hf_model.config))


def local_gpt2_small() -> Path | None:
    """The path of GPT-2 small's model.safetensors in the Hugging Face cache, or None. Never
    downloads (an environment variable ANDREA_GPT2_SAFETENSORS may name the file directly)."""
    env = os.environ.get("ANDREA_GPT2_SAFETENSORS")
    if env:
        return Path(env) if Path(env).exists() else None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    for repo in HF_REPOS:
        p = try_to_load_from_cache(repo, "model.safetensors")
        if isinstance(p, str) and Path(p).exists():
            return Path(p)
    return None


def load_gpt2_small(path: Path | None = None) -> AndreaModel:
    """GPT-2 small in AndreaModel, from a local model.safetensors (`local_gpt2_small()` by
    default). Raises FileNotFoundError with HOW_TO_GET when there is none, GPT2FileError (one
    line) for a file that is not GPT-2 small's safetensors: a torch.save file, another size,
    a config.json beside it with another head count."""
    path = path or local_gpt2_small()
    if path is None:
        raise FileNotFoundError(f"GPT-2 small's weights are not on this machine: {HOW_TO_GET}")
    path = Path(path)
    from safetensors.torch import load_file
    try:
        state = load_file(str(path))
    except Exception as e:  # noqa: BLE001 - SafetensorError, OSError: one line either way
        hint = (" (it looks like a torch.save/pickle file: load it with torch.load and "
                "from_gpt2(state, GPT2_SMALL))" if path.read_bytes()[:2] in (b"PK", b"\x80\x02")
                else "")
        raise GPT2FileError(f"{path}: not a safetensors file ({type(e).__name__}: "
                            f"{str(e).splitlines()[0][:80] if str(e) else ''}){hint}") from None
    hf_config = None
    cfg_path = path.with_name("config.json")
    if cfg_path.is_file():
        import json
        try:
            hf_config = json.loads(cfg_path.read_text())
        except ValueError:
            hf_config = None
    try:
        return from_gpt2(state, GPT2_SMALL, hf_config)
    except GPT2FileError as e:
        raise GPT2FileError(f"{path}: {e}") from None


def local_tokenizer():
    """GPT-2's tokenizer from the Hugging Face cache, or None (never downloads)."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None
    for repo in HF_REPOS:
        try:
            return AutoTokenizer.from_pretrained(repo, local_files_only=True)
        except (OSError, ValueError):
            continue
    return None


def tokenize_with_offsets(tokenizer):
    """`text -> (ids, offsets)` for `text_corpus.token_batch`, from a transformers fast tokenizer."""
    def tokenize(text: str):
        enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
        return enc["input_ids"], enc["offset_mapping"]
    return tokenize
