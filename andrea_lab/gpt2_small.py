"""GPT-2 small's heads on the book's corpus, measured and committed where GPT-2's weights are:

    python -m andrea_lab.gpt2_small --out book/data/realtext_gpt2.json

ANDREA-120M has GPT-2 small's shape, so GPT-2's weights load into AndreaModel as they are; the
command scores every head on the real-text chapter's held-out windows, cut into GPT-2's tokens
(`token_batch`), with the chapter's detectors, and writes the scores and the uniform baseline. The
chapter "Heads on real text" reads that file (`heads.text_runs.load_gpt2_scores`) in its Evidence
section; without it, it says how to make it.

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

import argparse
import os
import random
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch

from andrea_edu.config import ANDREA_120M, AndreaConfig
from andrea_edu.data import new_provenance
from andrea_edu.heads import measures as M
from andrea_edu.heads import text_corpus as tc
from andrea_edu.heads.batch import Batch
from andrea_edu.heads.text_corpus import BRACKET, IDENT, PREV, Corpus, _window_offsets
from andrea_edu.heads.text_runs import GPT2_FILE, GPT2_SHAPE, SCHEMA
from andrea_edu.heads.text_training import EVAL_SEED  # the chapter's held-out windows
from andrea_edu.model import AndreaModel
from andrea_lab.store import stamped

GPT2_SMALL = ANDREA_120M.replace(bias=True, gelu="tanh", layer_norm_eps=1e-5, name="GPT-2 small")
HF_REPOS = ("openai-community/gpt2", "gpt2")  # the same weights under the new and the old name
HOW_TO_GET = ("set ANDREA_GPT2_SAFETENSORS to the path of GPT-2 small's weights, one "
              "`model.safetensors` file (124M parameters, about 0.5 GB; transformers' local cache "
              "is searched too), then run this command again")

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
    """`text -> (ids, offsets)` for `token_batch`, from a transformers fast tokenizer."""
    def tokenize(text: str):
        enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
        return enc["input_ids"], enc["offset_mapping"]
    return tokenize


# ---------------------------------------------------------------- GPT-2's tokens, labelled
def token_batch(corpus: Corpus, tokenize, B: int, T: int, seed: int, split: str = "valid",
                chars_per_window: int | None = None) -> Batch:
    """B labelled windows of T tokens of another tokenizer, `tokenize(text) -> (ids, offsets)`
    with offsets[i] = (start, end) characters of token i. The character labels carry over where
    token boundaries allow: a bracket where the closer starts its token (query: the token before
    it; key: the opener's token); an identifier copy where the query character ends its token and
    the key character starts one (query and key: those tokens). Windows are drawn as in
    `labelled_batch`, chars_per_window characters long (8 T by default), cut to T + 1 tokens."""
    files = {"valid": corpus.valid, "train": corpus.train}[split]
    n_chars = chars_per_window or 8 * T
    rng = random.Random(seed)
    idx, keys, where = [], [], []
    for f, s in _window_offsets(files, B, n_chars, rng):
        text = f.text[s: s + n_chars]
        ids, offs = tokenize(text)
        if len(ids) < T + 1:
            raise ValueError(f"{n_chars} characters gave {len(ids)} tokens, fewer than T+1={T + 1}: "
                             f"raise chars_per_window")
        ids, offs = list(ids[: T + 1]), [tuple(o) for o in offs[: T]]
        tok_of = np.full(len(text) + 1, -1, dtype=np.int64)  # character -> token (-1: none)
        starts, ends = {}, {}
        for i, (a, b) in enumerate(offs):
            tok_of[a:b] = i
            starts[a], ends[b] = i, i
        lab = corpus.labels(f.name)
        k = np.full((3, T), -1, dtype=np.int64)
        k[PREV, 1:] = np.arange(T - 1)
        for o, c in lab["pairs"]:
            if s <= o and c < s + len(text) and (c - s) in starts and starts[c - s] >= 1:
                q, key = starts[c - s] - 1, tok_of[o - s]
                if 0 <= key <= q:
                    k[BRACKET, q] = key
        for qc in np.nonzero(lab["ident"][s: s + len(text)] >= 0)[0]:
            kc = lab["ident"][s + qc] - s
            if kc >= 0 and (qc + 1) in ends and kc in starts:
                q, key = ends[qc + 1], starts[kc]
                if key <= q:
                    k[IDENT, q] = key
        idx.append(np.asarray(ids, dtype=np.int64))
        keys.append(k)
        where.append((f.name, s))
    a = torch.from_numpy(np.stack(idx))  # (B, T+1)
    return Batch(idx=a[:, :-1], targets=a[:, 1:], key=torch.from_numpy(np.stack(keys, axis=1)),
                     where=where)


# ---------------------------------------------------------------- the measurement, written
B_WINDOWS, T_TOKENS = 16, 256


def measure(model: AndreaModel, tokenizer, corpus: Corpus, B: int = B_WINDOWS,
            T: int = T_TOKENS) -> dict:
    """The record `heads.text_runs.load_gpt2_scores` reads: every head's pattern scores on B
    held-out windows of T GPT-2 tokens (the chapter's seed), the uniform baseline, provenance."""
    t0, c0 = time.perf_counter(), time.process_time()
    batch = token_batch(corpus, tokenize_with_offsets(tokenizer), B, T, seed=EVAL_SEED)
    scores = M.head_scores(model, batch, chunk=4).numpy()  # (3, L, nh)
    if scores.shape != GPT2_SHAPE:
        raise ValueError(f"scores have shape {scores.shape}, expected {GPT2_SHAPE} (GPT-2 small)")
    nan_list = lambda a: [None if np.isnan(x) else round(float(x), 6) for x in a]  # noqa: E731
    return {"schema": SCHEMA,
            "scores": [[nan_list(row) for row in layer] for layer in scores],
            "baseline": nan_list(M.baseline(batch)),
            "windows": {"n": B, "seq_len": T, "seed": "text_training.EVAL_SEED",
                        "tokenizer": "GPT-2 (byte-level BPE)"},
            "provenance": stamped(new_provenance(
                "GPT-2 small's head scores on the real-text corpus (andrea_lab.gpt2_small)",
                "python -m andrea_lab.gpt2_small --out book/data/" + GPT2_FILE,
                corpus=corpus.provenance.get("content_hash"),
                cpu_seconds=round(time.process_time() - c0, 1),
                wall_seconds=round(time.perf_counter() - t0, 1)))}


def main(argv: list[str] | None = None) -> int:
    from andrea_lab.arg_checks import check_out_file, fail
    from andrea_lab.run_writers import save_paths
    prog = "python -m andrea_lab.gpt2_small"
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="e.g. book/data/" + GPT2_FILE)
    ap.add_argument("--replace", action="store_true", help="overwrite an existing --out")
    ap.add_argument("--weights", type=Path, help="GPT-2 small's model.safetensors (default: "
                    "ANDREA_GPT2_SAFETENSORS, then transformers' local cache)")
    args = ap.parse_args(argv)
    problem = (f"--out {args.out} must end in .json" if args.out.suffix != ".json" else
               check_out_file("--out", str(args.out), GPT2_FILE))
    if problem is None and args.out.exists() and not args.replace:
        problem = f"--out {args.out} exists: pass --replace to overwrite committed data"
    weights = args.weights or local_gpt2_small()
    tokenizer = local_tokenizer()
    if problem is None and (weights is None or not Path(weights).is_file()):
        problem = f"--weights: GPT-2 small's weights are not on this machine: {HOW_TO_GET}"
    if problem is None and tokenizer is None:
        problem = ("GPT-2's tokenizer is not in transformers' local cache (never downloaded "
                   "here): put openai-community/gpt2's tokenizer files there")
    if problem or weights is None:  # before any work: one line, exit status 2
        return fail(prog, problem or HOW_TO_GET)
    try:
        model = load_gpt2_small(Path(weights))
    except GPT2FileError as e:
        return fail(prog, str(e))
    d = measure(model, tokenizer, tc.corpus_cached())
    save_paths(d, args.out, replace=args.replace)
    print(f"wrote {args.out}: {d['provenance']['cpu_seconds']} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
