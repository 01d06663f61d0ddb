"""Every committed data file, damaged one field at a time: each damage is refused with one line
naming the file (and the field), or shown harmless because what the chapter reads is unchanged.

The family of single-field damages (`mutations`): on a number, NaN, +inf, -inf, a string, x10
and its negative; on a list, one entry deleted, one duplicated, a pair swapped; on an object,
one key deleted (a string: the number written as text, which numpy would read back). The files are large (the sweep holds about 60,000 numbers), so the damages are
sampled deterministically: per file and per kind, up to PER_KIND places in the data and
PER_KIND_PROV in the provenance block. Each damaged copy is written to a scratch folder and read
with the loader the chapters use; "the chapter's output" is the digest of what the chapters read
from it (`DIGESTS`).

Three guards are measured apart:
  * values alone (no SHA256SUMS beside the copy): the loaders' value checks. Every damage of a
    kind that can never be a legitimate value (NaN, infinity, a string, an entry deleted or
    duplicated) in the data fields must be caught or harmless; x10, negative and swapped values
    can stay inside what the quantity can take, and are counted, not asserted.
  * the manifest (book/data/SHA256SUMS beside the copy): every damage must be caught.
  * the pins (andrea_edu/data_pins.py, which apply to the committed folder): every damage must
    be caught even when SHA256SUMS was regenerated over it (`test_no_damage_changes_a_chapter_
    silently`, scenario "regenerated").
Run with -s to see the counts.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import json
import random
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from andrea_edu.bench import results as R
from andrea_edu import data as bookdata
from andrea_edu import data_pins
from andrea_lab import pin_writer
from andrea_edu.data import MANIFEST, DataFileError, read_manifest
from andrea_lab.store import seal_folder
from andrea_edu.heads import path_runs as PR
from andrea_edu.heads import sweep as W
from andrea_edu.heads import text_runs as TR

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "book" / "data"
PER_KIND = 6
PER_KIND_PROV = 2
NUMBER_KINDS = ("nan", "inf", "-inf", "string", "x10", "negative")
LIST_KINDS = ("delete", "duplicate", "swap")
NEVER_LEGITIMATE = {"nan", "inf", "-inf", "string", "delete", "duplicate", "delete_key"}


def _h(*parts) -> str:
    m = hashlib.sha256()
    for p in parts:
        if isinstance(p, np.ndarray):
            m.update(np.ascontiguousarray(p, dtype=np.float64).tobytes())
        elif isinstance(p, torch.Tensor):
            m.update(p.detach().double().contiguous().numpy().tobytes())
        else:
            m.update(json.dumps(p, sort_keys=True, default=str).encode())
    return m.hexdigest()


# ---------------------------------------------------------------- what the chapters read
def _bench_digest(path):
    obj = R.read_results_file(path, expect_device="cpu" if Path(path).name.endswith("_cpu.json")
                              else "gpu")
    p = obj["provenance"]  # provenance_line and the chapters' captions
    shown = {k: p.get(k) for k in ("device", "device_kind", "torch", "cuda", "driver",
                                   "andrea_edu", "git_commit", "date", "load_avg_1min",
                                   "cpu_threads")}
    st = obj["settings"]  # captions read dtype, repeats; figures the shapes the records name
    used = {r["params"].get("shape") for r in obj["records"]}
    settings = {"dtype": st["dtype"], "repeats": st["repeats"], "timer": st["timer"],
                "fast": st.get("fast", False),
                "shapes": {k: v for k, v in (st.get("shapes") or {}).items() if k in used}}
    records = [{k: v for k, v in r.items() if k != "aten_ops"} for r in obj["records"]]
    return _h(records, settings, obj["suite"], shown)  # aten_ops: counted live, never read


def _sweep_digest(path):
    prov, runs = W.load_sweep(path)  # the chapter shows the whole provenance table
    parts: list[Any] = [prov]
    for key, r in sorted(runs.items()):
        parts += [list(key), r.settings.__dict__, r.param_count, r.param_by_part, r.train_loss,
                  r.eval_steps, r.eval_loss, r.scores, r.floors, r.chance, r.ablation,
                  r.correlations, r.grad_norm, r.wall_seconds, r.cpu_seconds]
        parts += [p[k] for p in r.probes for k in ("step", "delta", "solo", "corr_max")]
    return _h(*parts)


def _run_digest(path):
    run = TR.load_run(path)
    assert run.model is not None  # load_run loads the weights by default
    p = run.provenance  # what the chapter's Evidence cell prints, and same_corpus
    shown = {k: p.get(k) for k in ("produced_by", "date_utc", "cpu", "cores", "pins",
                                   "cpu_capability", "mkl_cbwr", "torch", "python",
                                   "git_commit", "code_hash")}
    corpus = {k: p["corpus"].get(k) for k in ("content_hash", "python", "vocab_size")}
    return _h(run.settings.__dict__, run.train_loss, run.eval_steps, run.eval_loss, run.scores,
              run.baseline, run.ablation, run.ablation_se, run.wall_seconds, run.cpu_seconds,
              shown, corpus, run.summary(0.01), *run.model.state_dict().values())


def _toy_digest(path):
    s, scores, model, cpu = TR.load_toy(path)  # the circuits read the model and its scores
    return _h(s.__dict__, scores, cpu, *model.state_dict().values())


def _paths_digest(path):
    d = PR.load_paths(path)  # the chapter's path-ablation figures and sentences read the entries
    return _h(d["weights_sha256"], d["windows"], d["base_loss"], d["entries"])


DIGESTS = {"bench_headdim_cpu.json": _bench_digest, "bench_layout_cpu.json": _bench_digest,
           "bench_projections_cpu.json": _bench_digest,
           "specialization_sweep.json": _sweep_digest, "realtext_run.json": _run_digest,
           "toy_lab_model.json": _toy_digest, "realtext_paths.json": _paths_digest,
           "realtext_long_run.json": _run_digest, "realtext_deep_run.json": _run_digest,
           "realtext_steps_run.json": _run_digest}


def _gpucheck_digest(path):
    from andrea_lab.bench.gpucheck import read_report
    return _h(read_report(path))


def _pipeline_digest(path):
    from andrea_edu.pipeline.timing import load_pipeline_timing
    kind = "cpu" if Path(path).name == "pipeline_cpu.json" else "gpu"
    t = load_pipeline_timing(kind, data_dir_=Path(path).parent)
    assert t is not None
    return _h(t.to_dict())


def digest_for(name: str):
    """The digest of a data file: by name, or for what scripts/land_gpu_out.py lands, by its
    name's pattern (bench_<suite>_<gpu>.json, pipeline_<device>.json, gpucheck.json)."""
    if name in DIGESTS:
        return DIGESTS[name]
    if name.startswith("bench_") and name.endswith(".json"):
        return _bench_digest
    if name.startswith("pipeline_") and name.endswith(".json"):
        return _pipeline_digest
    if name == "gpucheck.json":
        return _gpucheck_digest
    raise KeyError(f"{name}: a new data file needs its loader and digest here")


# what the GPU suite landed (scripts/land_gpu_out.py), found by pattern
DIGESTS.update({p.name: digest_for(p.name) for p in sorted(DATA.glob("*.json"))
                if p.name not in DIGESTS and (p.name.startswith(("bench_", "pipeline_"))
                                              or p.name == "gpucheck.json")})


@functools.lru_cache(maxsize=None)
def _want(name: str) -> str:
    """The digest of the committed file: what the chapter reads from it (once per file)."""
    return DIGESTS[name](DATA / name)


def test_every_committed_data_file_has_a_digest_and_a_pin():
    committed = sorted(p.name for p in DATA.glob("*.json"))
    assert committed == sorted(DIGESTS), "a new data file needs its loader and digest here"
    listed = read_manifest(DATA)
    assert sorted(listed) == sorted(p.name for p in DATA.iterdir() if p.name != MANIFEST)
    for name, sha in listed.items():
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == sha, name
    assert data_pins.PINS == listed, "pin new data: python scripts/pin_data.py --accept FILE"
    assert data_pins.pinned(DATA) and not (DATA / data_pins.MARKER).exists()  # by its place


# ---------------------------------------------------------------- the family of damages
def _places(obj, path=()):
    """(path, value) of every number, list and object in a JSON tree."""
    yield path, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _places(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _places(v, path + (i,))


def mutations(obj, name: str):
    """[(kind, path)] sampled deterministically, per kind, from every place it applies to."""
    cands: dict[str, tuple[list[tuple], list[tuple]]] = {
        k: ([], []) for k in NUMBER_KINDS + LIST_KINDS + ("delete_key",)}
    for path, v in _places(obj):
        prov = "provenance" in path
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            for k in NUMBER_KINDS:
                if k != "x10" or v not in (0, 1):  # x10 of 0 is no damage
                    cands[k][prov].append(path)
        elif isinstance(v, list) and v:
            cands["delete"][prov].append(path)
            cands["duplicate"][prov].append(path)
            if len(v) > 1 and any(x != v[0] for x in v):
                cands["swap"][prov].append(path)
        elif isinstance(v, dict) and v:
            cands["delete_key"][prov].append(path)
    out = []
    for kind, (in_data, in_prov) in cands.items():
        rng = random.Random(f"{name}:{kind}")
        out += [(kind, p, False) for p in rng.sample(in_data, min(PER_KIND, len(in_data)))]
        out += [(kind, p, True) for p in rng.sample(in_prov, min(PER_KIND_PROV, len(in_prov)))]
    return out


def damage(obj, kind: str, path: tuple, seed: str):
    obj = copy.deepcopy(obj)
    *head, last = path if path else (None,)
    parent = obj
    for k in head:
        parent = parent[k]
    target = parent[last] if path else obj
    rng = random.Random(seed)
    if kind in NUMBER_KINDS:
        v = target
        parent[last] = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf"),
                        "string": str(v), "x10": v * 10,  # the number as text
                        "negative": -v if v else -1}[kind]
    elif kind == "delete":
        del target[rng.randrange(len(target))]
    elif kind == "duplicate":
        i = rng.randrange(len(target))
        target.insert(i, copy.deepcopy(target[i]))
    elif kind == "swap":
        pairs = [i for i in range(len(target) - 1) if target[i] != target[i + 1]]
        i = rng.choice(pairs) if pairs else 0
        target[i], target[i + 1] = target[i + 1], target[i]
    elif kind == "delete_key":
        del target[rng.choice(sorted(target))]
    return obj


def _folder(tmp: Path, name: str, manifest: bool) -> Path:
    for p in DATA.iterdir():  # the weights beside their JSON, the manifest when asked
        if p.suffix == ".pt" or (manifest and p.name == MANIFEST):
            shutil.copy(p, tmp / p.name)
    return tmp / name


def _outcome(path: Path, digest, want: str) -> str:
    """caught, harmless or slipped (caught_by_pins: refused by andrea_edu/data_pins.py)."""
    try:
        got = digest(path)
    except DataFileError as e:
        msg = str(e)
        assert "\n" not in msg and msg.startswith(str(path.parent)), msg  # one line, the file
        return "caught_by_pins" if "data_pins.py" in msg else "caught"
    return "harmless" if got == want else "slipped"


def _run_family(name: str, tmp_path: Path, manifest: bool, limit: int | None = None):
    src = DATA / name
    digest = DIGESTS[name]
    want = _want(name)  # computed once per file, cached
    obj = json.loads(src.read_text())
    muts = mutations(obj, name)
    if limit:
        muts = random.Random(name).sample(muts, min(limit, len(muts)))
    path = _folder(tmp_path, name, manifest)
    tally: Counter[tuple[str, str, str]] = Counter()
    slipped: list = []
    for kind, p, prov in muts:
        path.write_text(json.dumps(damage(obj, kind, p, f"{name}:{p}")))
        out = _outcome(path, digest, want)
        tally[(kind, "provenance" if prov else "data", out)] += 1
        if out == "slipped":
            slipped.append((kind, ".".join(map(str, p)), prov))
    return muts, tally, slipped


@pytest.mark.parametrize("name", sorted(DIGESTS))
def test_value_checks_catch_every_impossible_damage(name, tmp_path):
    muts, tally, slipped = _run_family(name, tmp_path, manifest=False)
    caught = sum(n for (k, w, o), n in tally.items() if o == "caught")
    harmless = sum(n for (k, w, o), n in tally.items() if o == "harmless")
    print(f"\n{name}: {len(muts)} damages, values alone: {caught} caught, {harmless} harmless, "
          f"{len(slipped)} slipped ({Counter(k for k, _, _ in slipped)})")
    for s in slipped:
        print("   slipped:", s)
    bad = [s for s in slipped if s[0] in NEVER_LEGITIMATE and not s[2]]
    assert not bad, f"damages no value check caught that change the chapter: {bad[:5]}"


@pytest.mark.parametrize("name", sorted(DIGESTS))
def test_the_manifest_catches_every_damage(name, tmp_path):
    muts, tally, slipped = _run_family(name, tmp_path, manifest=True, limit=12)
    print(f"\n{name}: {len(muts)} damages with {MANIFEST}: "
          f"{sum(n for (k, w, o), n in tally.items() if o == 'caught')} caught")
    assert not slipped, slipped


@pytest.mark.parametrize("name", ["realtext_run.json", "toy_lab_model.json"])
def test_damaged_weights_are_refused(name, tmp_path):
    path = _folder(tmp_path, name, manifest=False)
    shutil.copy(DATA / name, path)
    w = tmp_path / json.loads(path.read_text())["weights"]["file"]
    blob = bytearray(w.read_bytes())
    for where in (len(blob) // 2, len(blob) - 1):
        damaged = bytearray(blob)
        damaged[where] ^= 0x01
        w.write_bytes(bytes(damaged))
        with pytest.raises(DataFileError, match="sha256") as e:
            DIGESTS[name](path)
        assert "\n" not in str(e.value)
    w.write_bytes(bytes(blob[: len(blob) // 3]))
    with pytest.raises(DataFileError, match="sha256"):
        DIGESTS[name](path)


# ---------------------------------------------------------------- the issue's findings, one by one
def _best_bracket_to_null(d):
    sc = np.array(d["scores"], dtype=float)
    L, h = np.unravel_index(np.argmax(sc[-1, 1]), sc[-1, 1].shape)
    d["scores"][-1][1][L][h] = None  # the head the chapter names as the bracket head


def _sweep_run_missing(d):
    del d["runs"][4]


def _bench_duplicate(d):
    d["records"].append(copy.deepcopy(d["records"][0]))


def _bench_err_5(d):
    next(r for r in d["records"] if r["status"] == "ok")["max_abs_err"] = 5.0


@pytest.mark.parametrize("name, damage_fn, words", [
    ("realtext_run.json", _best_bracket_to_null, "scores[:, 1]"),
    ("realtext_run.json", lambda d: d["scores"][-1][0][0].__setitem__(0, 7.5), "scores must lie"),
    ("realtext_run.json", lambda d: d["eval_loss"][-1].__setitem__(0, d["eval_loss"][-1][0] * 10),
     "eval_loss"),
    ("realtext_run.json", lambda d: d["ablation"][0][0].__setitem__(1, float("nan")), "ablation"),
    ("specialization_sweep.json", lambda d: d["runs"][0]["floors"].__setitem__(
        "matching bracket", "0.34"), "floors"),
    ("specialization_sweep.json", lambda d: d["runs"][2]["train_loss"].__setitem__(
        5, float("nan")), "train_loss"),
    ("specialization_sweep.json", _sweep_run_missing, "missing"),
    ("bench_layout_cpu.json", _bench_duplicate, "one record per (case, backend)"),
    ("bench_projections_cpu.json", _bench_err_5, "max_abs_err"),
])
def test_each_finding_of_the_issue_is_refused_in_one_line(name, damage_fn, words, tmp_path):
    path = _folder(tmp_path, name, manifest=False)
    d = json.loads((DATA / name).read_text())
    damage_fn(d)
    path.write_text(json.dumps(d))
    with pytest.raises(DataFileError) as e:
        DIGESTS[name](path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and words in msg, msg


# ---------------------------------------------------------------- the manifest's four states
# Every committed file, damaged in its bytes (digit flips, truncation, the file deleted) and in its
# fields (a sample of `mutations`, plus the issue's swap of two head scores), read from a folder
# the book reads (ANDREA_DATA_DIR) whose manifest is intact, deleted, truncated mid-line, or
# regenerated over the damage. Intact, deleted or truncated: the manifest alone refuses every
# damage in one line naming the file. Regenerated (someone ran sha256sum over the damaged folder,
# vouching for it): the manifest cannot refuse, and the loaders' value checks alone let in-range
# edits through (measured before the pins: of 114 damages 66 refused, 12 harmless, 36 changed a
# chapter silently). The folder is then read as the committed one (`pin_writer.pin_folder`: what
# book/data is by its place) and the pins in andrea_edu/data_pins.py refuse every damage.
SCENARIOS = ("intact", "deleted", "truncated", "regenerated")
BYTE_KINDS = ("digit_flip", "truncate")
PER_FILE_FIELDS = 5


def _swap_two_head_scores(d):
    """The issue's finding: the last step's matching-bracket scores of the best head and another
    swapped, which renames the chapter's bracket head (values stay in range)."""
    sc = np.array(d["scores"], dtype=float)
    last = sc[-1, 1]
    (L, h), (L2, h2) = np.unravel_index(np.argsort(last, axis=None)[[-1, 0]], last.shape)
    row = d["scores"][-1][1]
    row[L][h], row[L2][h2] = row[L2][h2], row[L][h]


def _byte_damages(text: str, name: str) -> list[tuple[str, str]]:
    rng = random.Random(f"bytes:{name}")
    digits = [i for i, c in enumerate(text) if c.isdigit()]
    out = []
    for i in rng.sample(digits, 4):
        new = str((int(text[i]) + rng.randrange(1, 10)) % 10)
        out.append(("digit_flip", text[:i] + new + text[i + 1:]))
    out += [("truncate", text[: int(len(text) * f)]) for f in (0.3, 0.999)]
    return out


def _field_damages(obj, name: str) -> list[tuple[str, str]]:
    muts = mutations(obj, name)
    muts = random.Random(f"fields:{name}").sample(muts, min(PER_FILE_FIELDS, len(muts)))
    out = [(kind, json.dumps(damage(obj, kind, p, f"{name}:{p}"))) for kind, p, _ in muts]
    if name.startswith("realtext") and name.endswith("_run.json"):
        d = copy.deepcopy(obj)
        _swap_two_head_scores(d)
        out.append(("head_score_swap", json.dumps(d)))
    return out


def _set_manifest(folder: Path, scenario: str) -> None:
    m = folder / MANIFEST
    if scenario == "intact":
        shutil.copy(DATA / MANIFEST, m)
    elif scenario == "deleted":
        m.unlink(missing_ok=True)
    elif scenario == "truncated":
        m.write_bytes((DATA / MANIFEST).read_bytes()[:700])  # `head -c 700`: cut mid-line
    else:
        seal_folder(folder)
        pin_writer.pin_folder(folder)  # the committed folder: its pins stand


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("name", sorted(DIGESTS))
def test_no_damage_changes_a_chapter_silently(name, scenario, tmp_path, monkeypatch):
    monkeypatch.setenv("ANDREA_DATA_DIR", str(tmp_path))  # the folder the book reads
    digest, want = DIGESTS[name], _want(name)
    text = (DATA / name).read_text()
    path = _folder(tmp_path, name, manifest=False)
    damages = _byte_damages(text, name) + _field_damages(json.loads(text), name)
    tally: Counter[tuple[str, str]] = Counter()
    slipped = []
    for kind, damaged in damages:
        path.write_text(damaged)
        _set_manifest(tmp_path, scenario)
        out = _outcome(path, digest, want)
        tally[(kind, out)] += 1
        if out == "slipped":
            slipped.append(kind)
    print(f"\n{name}, manifest {scenario}: {len(damages)} damages: "
          f"{dict(sorted(Counter(o for (_, o), n in tally.items() for _ in range(n)).items()))}; "
          f"slipped: {Counter(slipped)}")
    assert not slipped and all(o.startswith("caught") for (_, o) in tally), tally
    # the guard that refused: the pins stand for the regenerated manifest (only what no loader
    # can parse, a truncation, is refused before them); elsewhere the manifest is enough
    by_pins = {k for (k, o) in tally if o == "caught_by_pins"}
    if scenario == "regenerated":
        assert by_pins >= {k for k, _ in damages} - {"truncate"}, tally
    else:
        assert not by_pins, tally


@pytest.mark.parametrize("manifest", ["intact", "regenerated"])
@pytest.mark.parametrize("name", sorted(p.name for p in DATA.iterdir() if p.name != MANIFEST))
def test_a_deleted_committed_file_is_refused_not_taken_for_no_data(name, manifest, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setenv("ANDREA_DATA_DIR", str(tmp_path))
    for p in DATA.iterdir():
        if p.name != name:
            shutil.copy(p, tmp_path / p.name)
    if manifest == "regenerated":  # its line gone with it: the pins still know the file
        seal_folder(tmp_path)
        pin_writer.pin_folder(tmp_path)
    with pytest.raises(DataFileError, match="listed in .* but missing|missing|sha256|cannot"):
        if name.endswith(".pt"):  # the JSON that names these weights
            owner = next(n for n in DIGESTS if (tmp_path / n).is_file() and
                         json.loads((tmp_path / n).read_text()).get("weights", {}).get("file") == name)
            DIGESTS[owner](tmp_path / owner)
        elif name.startswith("bench_"):
            R.load_results(name.split("_")[1], "cpu")
        else:
            bookdata.find_data(name, verify=False)


def test_the_issues_head_score_swap_renames_the_bracket_head_and_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("ANDREA_DATA_DIR", str(tmp_path))
    name = "realtext_run.json"
    d = json.loads((DATA / name).read_text())
    before = np.unravel_index(np.argmax(np.array(d["scores"])[-1, 1]), (2, 8))
    _swap_two_head_scores(d)
    after = np.unravel_index(np.argmax(np.array(d["scores"])[-1, 1]), (2, 8))
    assert before != after  # the damage is one that changes what the chapter names
    path = _folder(tmp_path, name, manifest=True)
    path.write_text(json.dumps(d))
    with pytest.raises(DataFileError, match="sha256"):
        DIGESTS[name](path)


# ---------------------------------------------------------------- issue 42: what is refused before parsing
# Each kind of committed data, read as a chapter reads it (`load(kind)`), with its file damaged
# in its structure rather than a field: nested deeper than any parser's stack, larger than a data
# file may be (sparse: nothing real is read), its line endings converted (core.autocrlf), or its
# folder's manifest naming a path outside the folder. Under the intact manifest, a regenerated
# one (only the size and depth checks stand: no pins), and a regenerated one in a pinned folder.
# Every one is refused with one DataFileError line, before a loader parses the file.
KINDS = {"sweep": ("specialization_sweep.json", {}), "realtext_run": ("realtext_run.json", {}),
         "realtext_variant": ("realtext_long_run.json", {"name": "long"}),
         "toy_lab_model": ("toy_lab_model.json", {}), "realtext_paths": ("realtext_paths.json", {}),
         "bench_headdim": ("bench_headdim_cpu.json", {"device": "cpu"}),
         "bench_projections": ("bench_projections_cpu.json", {"device": "cpu"}),
         "bench_layout": ("bench_layout_cpu.json", {"device": "cpu"})}
STRUCTURAL = ("deep_list", "deep_object", "oversize", "crlf", "manifest_path", "manifest_newline")


def _structural(path: Path, kind: str) -> None:
    if kind == "deep_list":
        path.write_text("[" * 200_000 + "]" * 200_000)
    elif kind == "deep_object":
        path.write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    elif kind == "oversize":
        with open(path, "r+b") as f:  # sparse: the file system holds no more blocks
            f.truncate(bookdata.MAX_DATA_BYTES[".json"] + 1)
    elif kind == "crlf":
        path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))


def _damage_manifest(folder: Path, kind: str) -> None:
    m = folder / MANIFEST
    if kind == "manifest_path":
        m.write_text(m.read_text() + "0" * 64 + "  ../victim.ipynb\n")
    elif kind == "manifest_newline":  # a name that held a newline splits into a broken line
        m.write_text(m.read_text() + "0" * 64 + "  evil\n" + "0" * 64 + "  x\x1b.json\n")


@pytest.mark.parametrize("scenario", ["intact", "regenerated", "regenerated_pinned"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_structural_damage_is_refused_before_parsing(kind, scenario, tmp_path, monkeypatch):
    monkeypatch.setenv("ANDREA_DATA_DIR", str(tmp_path))
    monkeypatch.setitem(bookdata.MAX_DATA_BYTES, ".json", 2**20)  # above every committed JSON
    name, opts = KINDS[kind]
    tried = []
    for damage_kind in STRUCTURAL:
        if damage_kind == "crlf" and scenario == "regenerated":
            continue  # the same values re-manifested, no pins: harmless (JSON ignores \r)
        for p in DATA.iterdir():  # the JSON files: refused before any weights are read
            if p.suffix != ".pt":
                shutil.copy(p, tmp_path / p.name)
        _structural(tmp_path / name, damage_kind)
        if scenario != "intact":
            seal_folder(tmp_path)
        if scenario == "regenerated_pinned":
            pin_writer.pin_folder(tmp_path)
        _damage_manifest(tmp_path, damage_kind)
        with pytest.raises(DataFileError) as e:
            bookdata.load(kind, **opts)
        assert "\n" not in str(e.value), damage_kind
        tried.append(damage_kind)
        for p in tmp_path.iterdir():
            p.unlink()
    assert len(tried) >= 5
