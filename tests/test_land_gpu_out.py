"""scripts/land_gpu_out.py: a returned $OUT folder checked file by file and landed into a data
folder with its SHA256SUMS, tested on a synthetic suite output in a temporary folder (never
committed: the measurements here are CPU numbers relabelled as a GPU's, for the test alone)."""
from __future__ import annotations

import copy
import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import land_gpu_out  # noqa: E402

from andrea_lab.pipeline_timing import save_timing
from andrea_lab.store import stamped
from andrea_edu.bench import load_results, suites  # noqa: E402
from andrea_lab.bench import gpucheck  # noqa: E402
from andrea_edu.data import manifest_problem, read_manifest  # noqa: E402

SLUG = "synthetic-test-gpu"


@pytest.fixture(scope="module")
def suite_out(tmp_path_factory):
    """What a GPU run returns, synthetic: a layout results file (measured here, on the CPU,
    then labelled as a test GPU's), a gpucheck.json and a gpu_summary.md."""
    out = tmp_path_factory.mktemp("out")
    obj = suites.run_suite("layout", device="cpu", fast=True, progress=False)
    obj["provenance"].update(device_kind="gpu", device="Synthetic test GPU (not a measurement)",
                             device_slug=SLUG, driver="0.0", cuda="0.0")
    obj["provenance"] = stamped(obj["provenance"])  # as the GPU suite's writer stamps it
    (out / f"bench_layout_{SLUG}.json").write_text(json.dumps(obj))
    rows = [dict(backend="cuda-naive", dtype="float32", B=1, n_head=1, seq_len=T, head_dim=8,
                 causal=False, passed=True, max_abs_err=0.0) for T in (1, 17)]
    rep = gpucheck.merge_reports([dict(schema=gpucheck.SCHEMA, device={"name": "Synthetic"},
                                       complete=True, backends=["cuda-naive"], cases=rows,
                                       seconds=1.0)])
    (out / "gpucheck.json").write_text(json.dumps(rep))
    from andrea_edu.config import AndreaConfig
    from andrea_edu.model import AndreaModel
    from andrea_edu.pipeline import timing as PT
    tiny = AndreaConfig(d_model=32, n_head=4, n_layer=1, vocab_size=64, block_size=16,
                        name="tiny")
    t = PT.time_steps(AndreaModel(tiny, seed=1), B=1, T=8, repeats=1, warmup=0)
    t.device_kind, t.device = "gpu", "Synthetic test GPU (not a measurement)"
    t.provenance.update(device_kind="gpu", device=t.device, device_slug=SLUG)
    save_timing(t, out)   # pipeline_<slug>.json: what "The final picture" re-rates with
    (out / "gpu_summary.md").write_text("# GPU suite: first-contact run\n")
    (out / "logs.tar.gz").write_bytes(b"")
    return out


def _data(tmp_path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    (d / "SHA256SUMS").write_text("")
    return d


def test_landing_checks_copies_and_records_every_file(suite_out, tmp_path):
    data = _data(tmp_path)
    assert land_gpu_out.main([str(suite_out), "--data", str(data)]) == 0
    sums = read_manifest(data)
    landed = {f"bench_layout_{SLUG}.json", "gpucheck.json", f"pipeline_{SLUG}.json"}
    assert set(sums) == landed and {p.name for p in data.iterdir()} == landed | {"SHA256SUMS"}
    for name in landed:
        assert hashlib.sha256((data / name).read_bytes()).hexdigest() == sums[name]
    # the chapters' loader finds it as GPU data, and the mutation tests' digests read it
    res = load_results("layout", device="gpu", data_dir_=data)
    assert res is not None and res["provenance"]["device_slug"] == SLUG
    from andrea_edu.pipeline.timing import load_pipeline_timing
    pipe = load_pipeline_timing("gpu", data_dir_=data)
    assert pipe is not None and pipe.device_kind == "gpu"
    sys.path.insert(0, str(ROOT / "tests"))
    import test_data_mutations as M
    for name in landed:
        M.digest_for(name)(data / name)
    # the same bytes again land unasked (a retry); other bytes over them need --replace
    assert land_gpu_out.main([str(suite_out), "--data", str(data)]) == 0
    assert read_manifest(data) == sums
    assert land_gpu_out.main([str(suite_out), "--data", str(data), "--replace"]) == 0


def test_a_damaged_or_foreign_file_stops_the_landing_and_nothing_lands(suite_out, tmp_path,
                                                                       capsys):
    for damage, words in (
            (lambda o: (o / f"bench_layout_{SLUG}.json").write_text(
                (o / f"bench_layout_{SLUG}.json").read_text().replace('"median_ms": ',
                                                                      '"median_ms": -', 1)),
             "bench_layout"),
            (lambda o: (o / "notes.txt").write_text("x"), "not a file the GPU suite writes"),
            (lambda o: (o / "gpu_summary.md").write_text("# GPU suite: REHEARSAL on a CPU\n"),
             "rehearsal")):
        out = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
        shutil.copytree(suite_out, out)
        damage(out)
        data = out.parent / (out.name + "-data")
        data.mkdir()
        (data / "SHA256SUMS").write_text("")
        assert land_gpu_out.main([str(out), "--data", str(data)]) == 1
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1 and "(nothing landed)" in err
        assert {p.name for p in data.iterdir()} == {"SHA256SUMS"}
        assert (data / "SHA256SUMS").read_text() == ""


@pytest.mark.parametrize("damage, words", [
    (lambda r: r.update(status="fine"), "records/0/status"),
    (lambda r: r.update(speedup=2.0), "'speedup' does not match any of the regexes"),
    (lambda r: r.update(max_abs_err=3.0), "records/0/max_abs_err"),
    (lambda r: r["params"].update(dtype="float8"), "records/0/params/dtype"),
])
def test_a_record_the_schema_refuses_stops_the_landing_in_one_line(suite_out, tmp_path, capsys,
                                                                  damage, words):
    """The GPU image's first stage writes without jsonschema (andrea_lab.bench.writer says so):
    the landing validates every results file whole (schema and values, with jsonschema) and
    refuses a record the schema does not match in one line naming the file and the place."""
    out = tmp_path / "out"
    shutil.copytree(suite_out, out)
    f = out / f"bench_layout_{SLUG}.json"
    obj = json.loads(f.read_text())
    damage(obj["records"][0])
    f.write_text(json.dumps(obj))
    data = _data(tmp_path)
    assert land_gpu_out.main([str(out), "--data", str(data)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f.name in err and "schema" in err and words in err, err
    assert "(nothing landed)" in err and (data / "SHA256SUMS").read_text() == ""


def test_landing_into_the_committed_folder_pins_what_it_lands(suite_out, tmp_path, monkeypatch):
    """Into book/data (here a folder read as it: pin_writer.pin_folder) the landing writes each
    file's pin into andrea_edu/data_pins.py (here a copy): the book reads what landed, and the
    review sees a code diff; a file copied in by hand is refused."""
    from andrea_edu import data_pins
    from andrea_lab import pin_writer
    from andrea_edu.bench.results import read_results_file
    from andrea_edu.data import DataFileError
    from andrea_lab.store import seal_folder
    copy = tmp_path / "data_pins_copy.py"
    shutil.copy(data_pins.PIN_FILE, copy)
    monkeypatch.setattr(data_pins, "PIN_FILE", copy)
    monkeypatch.setattr(data_pins, "PINS", dict(data_pins.PINS))
    data = _data(tmp_path)
    pin_writer.pin_folder(data)
    shutil.copy(ROOT / "book" / "data" / "bench_layout_cpu.json", data)  # as book/data holds it
    hand = data / f"bench_projections_{SLUG}.json"   # copied in by hand, listed, not pinned
    shutil.copy(suite_out / f"bench_layout_{SLUG}.json", hand)
    seal_folder(data)
    with pytest.raises(DataFileError, match="has no pin"):
        read_results_file(hand, expect_device="gpu")
    hand.unlink()
    seal_folder(data)
    assert land_gpu_out.main([str(suite_out), "--data", str(data)]) == 0
    landed = {f"bench_layout_{SLUG}.json", "gpucheck.json", f"pipeline_{SLUG}.json"}
    text = copy.read_text()
    for name in landed:
        sha = hashlib.sha256((data / name).read_bytes()).hexdigest()
        assert data_pins.PINS[name] == sha and f'    "{name}": "{sha}",' in text
        assert manifest_problem(data / name) is None
    assert load_results("layout", device="gpu", data_dir_=data) is not None


def test_what_landed_is_read_back_through_its_manifest(suite_out, tmp_path):
    """After the copy, each landed file is read where it now lies, through the checks every
    reader of committed data makes (its SHA256SUMS line): a file edited after landing is refused
    there, though a copy of it read apart (as OUT's files are read) is a valid report."""
    data = _data(tmp_path)
    assert land_gpu_out.main([str(suite_out), "--data", str(data)]) == 0
    for name in ("gpucheck.json", f"bench_layout_{SLUG}.json", f"pipeline_{SLUG}.json"):
        assert land_gpu_out.check_file(data / name, in_place=True).startswith(name)
        p = data / name
        p.write_text(json.dumps(json.loads(p.read_text()), indent=3) + "\n")
        assert land_gpu_out.check_file(p).startswith(name)   # apart: the content is valid
        with pytest.raises(ValueError, match="differs from the sha256") as e:
            land_gpu_out.check_file(p, in_place=True)
        assert str(p) in str(e.value) and "\n" not in str(e.value)


def _copy(suite_out, tmp_path, name) -> tuple[Path, Path]:
    out = tmp_path / name
    shutil.copytree(suite_out, out)
    data = tmp_path / (name + "-data")
    data.mkdir()
    (data / "SHA256SUMS").write_text("")
    return out, data


def test_a_file_named_for_another_device_or_a_link_is_refused(suite_out, tmp_path, capsys):
    """Issue 42 item 10: a pipeline file named for one GPU holding another's record, and a
    symbolic link in OUT pointing outside it, each stop the landing in one line."""
    out, data = _copy(suite_out, tmp_path, "a100")
    (out / f"pipeline_{SLUG}.json").rename(out / "pipeline_a100.json")
    (out / "SHA256SUMS").unlink()   # a file renamed on its way back: the name is the check
    assert land_gpu_out.main([str(out), "--data", str(data)]) == 1
    err = capsys.readouterr().err
    assert "belongs in pipeline_synthetic-test-gpu.json" in err and err.count("\n") == 1
    assert read_manifest(data) == {}
    out, data = _copy(suite_out, tmp_path, "link")
    outside = tmp_path / "elsewhere.json"
    (out / "gpucheck.json").rename(outside)
    (out / "gpucheck.json").symlink_to(outside)
    assert land_gpu_out.main([str(out), "--data", str(data)]) == 1
    err = capsys.readouterr().err
    assert "gpucheck.json is a symbolic link" in err and err.count("\n") == 1
    assert read_manifest(data) == {}


def test_a_cut_run_lands_as_partial(suite_out, tmp_path, capsys):
    """What a cut leaves (issue 41 item 4): a bench file labelled incomplete inside, a
    gpucheck.json with complete=false and an empty gpu_summary.md land, each said partial."""
    out, data = _copy(suite_out, tmp_path, "cut")
    b = out / f"bench_layout_{SLUG}.json"
    obj = json.loads(b.read_text())
    obj["incomplete"] = "checkpoint: the run had not finished"
    b.write_text(json.dumps(obj))
    g = out / "gpucheck.json"
    rep = json.loads(g.read_text())
    rep.update(complete=False, passed=False)
    g.write_text(json.dumps(rep))
    (out / "gpu_summary.md").write_text("")
    assert land_gpu_out.main([str(out), "--data", str(data)]) == 0
    said = capsys.readouterr().out
    assert "PARTIAL, labelled incomplete inside: checkpoint" in said
    assert "complete=False (PARTIAL" in said and "gpu_summary.md: empty" in said
    res = load_results("layout", device="gpu", data_dir_=data)
    assert res is not None and res["incomplete"].startswith("checkpoint")


def test_a_landing_killed_before_its_pins_is_finished_by_a_plain_retry(suite_out, tmp_path,
                                                                        monkeypatch):
    """Issue 42 item 10: killed between the data write and the pins, the files are listed but
    unpinned; landing the same OUT again (no --replace) pins them. Other bytes still need
    --replace."""
    from andrea_edu import data_pins
    from andrea_lab import pin_writer
    copy = tmp_path / "data_pins_copy.py"
    shutil.copy(data_pins.PIN_FILE, copy)
    monkeypatch.setattr(data_pins, "PIN_FILE", copy)
    monkeypatch.setattr(data_pins, "PINS", dict(data_pins.PINS))
    data = _data(tmp_path)
    pin_writer.pin_folder(data)
    real = pin_writer.accept

    def killed(paths):
        raise KeyboardInterrupt("killed between the data write and the pins")
    monkeypatch.setattr(pin_writer, "accept", killed)
    with pytest.raises(KeyboardInterrupt):
        land_gpu_out.main([str(suite_out), "--data", str(data)])
    landed = {f"bench_layout_{SLUG}.json", "gpucheck.json", f"pipeline_{SLUG}.json"}
    assert set(read_manifest(data)) == landed and not any(n in data_pins.PINS for n in landed)
    monkeypatch.setattr(pin_writer, "accept", real)
    assert land_gpu_out.main([str(suite_out), "--data", str(data)]) == 0
    assert all(manifest_problem(data / n) is None for n in landed)
    other, _ = _copy(suite_out, tmp_path, "other")
    g = other / "gpucheck.json"
    g.write_text(json.dumps(json.loads(g.read_text()), indent=2))
    assert land_gpu_out.main([str(other), "--data", str(data)]) == 1


def test_a_run_cut_before_any_measurement_lands_nothing_without_an_error(suite_out, tmp_path,
                                                                        capsys):
    """A cut can leave only the summary and the logs: that is said, and is no refusal."""
    out, data = _copy(suite_out, tmp_path, "early")
    for p in list(out.iterdir()):
        if p.name not in ("gpu_summary.md", "logs.tar.gz"):
            p.unlink()
    assert land_gpu_out.main([str(out), "--data", str(data)]) == 0
    assert "nothing landed" in capsys.readouterr().out
    assert read_manifest(data) == {}


def _two_gpu_layout_files(suite_out, tmp_path):
    """A sealed data folder holding an H100's and an H200's layout file (synthetic)."""
    from andrea_lab.store import seal_folder
    data = _data(tmp_path)
    src = json.loads((suite_out / f"bench_layout_{SLUG}.json").read_text())
    for slug in ("test-h100", "test-h200"):
        obj = copy.deepcopy(src)
        obj["provenance"].update(device=f"Synthetic {slug}", device_slug=slug)
        (data / f"bench_layout_{slug}.json").write_text(json.dumps(obj))
    seal_folder(data)
    return data


def test_an_h100_file_and_an_h200_file_are_both_read(suite_out, tmp_path):
    """Issue 41 item 6: where two GPUs' files of one suite exist, load_all_results returns
    both (load_results, one file, returns the first by name: an H100's before an H200's)."""
    from andrea_edu.bench.results import load_all_results
    data = _two_gpu_layout_files(suite_out, tmp_path)
    both = load_all_results("layout", data_dir_=data)
    assert [r["provenance"]["device_slug"] for r in both] == ["test-h100", "test-h200"]
    assert load_all_results("headdim", data_dir_=data) == []


def test_the_chapters_load_every_gpu_file_by_kind(suite_out, tmp_path, monkeypatch):
    """What a chapter calls: load("bench_<suite>_gpus") is every GPU's file ([] or the
    where-looked error when none), load("bench_<suite>", device="gpu") the first one."""
    from andrea_edu import data as D
    data = _two_gpu_layout_files(suite_out, tmp_path)
    monkeypatch.setenv("ANDREA_DATA_DIR", str(data))
    both = D.load("bench_layout_gpus")
    assert [r["provenance"]["device_slug"] for r in both] == ["test-h100", "test-h200"]
    assert D.load("bench_layout", device="gpu")["provenance"]["device_slug"] == "test-h100"
    assert D.load("bench_headdim_gpus", missing="none") == []
    with pytest.raises(D.DataFileError):
        D.load("bench_headdim_gpus")
