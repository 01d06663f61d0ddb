"""Verdicts re-rate themselves when a GPU file lands in book/data.

Without a GPU measurement, the claims that need one say "not yet measured". Here each chapter
that has such a claim runs (fast mode) against a data folder holding the committed CPU files
plus GPU files made from them (relabelled "Fake GPU (test)", never committed): the same boxes
must then give a rated verdict and name the fake device. This is the path a real GPU file takes.
"""
from __future__ import annotations

import json
import shutil

import nbformat
import pytest

from book_toc import REPO
from andrea_edu.bench import validate_result
from andrea_lab.store import seal_folder

DATA = REPO / "book" / "data"
FAKE = "Fake GPU (test)"
SECOND = "Second fake GPU (test)"
NOT_MEASURED = "not yet measured"


def _fake_gpu(suite: str, out_dir, device: str = FAKE, slug: str = "fake-gpu") -> None:
    obj = json.loads((DATA / f"bench_{suite}_cpu.json").read_text())
    obj["provenance"].update(device_kind="gpu", device=device, device_slug=slug,
                             driver="0.0 (test)", cuda="0.0")
    obj["settings"]["timer"] = "cuda-events"
    if suite == "headdim":  # the GPU suite also times the book's tensor-core kernel: its
        # record of each case (skipped on the CPU) becomes a timed one, one per (case, backend)
        timed = {r["case"]: r for r in obj["records"] if r["backend"] == "sdpa"
                 and r["status"] == "ok"}
        obj["records"] = [r for r in obj["records"]
                          if not (r["backend"] == "cuda-wmma" and r["case"] in timed)]
        obj["records"] += [dict(r, backend="cuda-wmma") for r in timed.values()]
    for r in obj["records"]:  # what the GPU suite's timings carry: spread and the timing check
        if r["status"] == "ok":
            r.update(p25_ms=r["median_ms"], p75_ms=r["median_ms"], iqr_over_median=0.0,
                     quality_ok=True, quality_reason=None)
    validate_result(obj)  # the loader's own checks: the fake must pass them as a GPU file would
    (out_dir / f"bench_{suite}_{slug}.json").write_text(json.dumps(obj))


def _verdict_rows(nb) -> list[dict]:
    rows = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            md = "".join(out.get("data", {}).get("text/markdown", ""))
            if md.startswith("```{andrea-verdict}"):
                rows += json.loads(md.split("\n", 2)[1])["rows"]
    return rows


def _run(docname: str, data_dir, monkeypatch) -> tuple[list[dict], str]:
    from nbclient import NotebookClient

    monkeypatch.setenv("ANDREA_DATA_DIR", str(data_dir))
    monkeypatch.setenv("ANDREA_FAST", "1")
    monkeypatch.delenv("ANDREA_BOOK_BUILD", raising=False)
    path = REPO / "book" / f"{docname}.ipynb"
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [f"{o.get('ename')}: {o.get('evalue')}" for c in nb.cells
              for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{docname} with a fake GPU file: {errors}"
    return _verdict_rows(nb), json.dumps([c.get("outputs", []) for c in nb.cells])


# chapter -> (bench suites it reads, the claim that waits for a GPU measurement)
CASES = {
    "three_matrices": (("projections",), "CUDA tensor cores reach peak throughput"),
    "cuda_stores_heads": (("layout",), "CUDA matmul operations run faster on contiguous"),
    "config_mirrors_hardware": (("headdim",), "head_dim=32 (ANDREA-12M) also fits but underuses"),
}


@pytest.mark.parametrize("docname", sorted(CASES))
def test_a_gpu_file_turns_not_yet_measured_into_a_verdict(docname, tmp_path, monkeypatch):
    suites, claim = CASES[docname]
    cpu_only = tmp_path / "cpu"
    with_gpu = tmp_path / "gpu"
    for d in (cpu_only, with_gpu):
        d.mkdir()
        for f in DATA.glob("bench_*_cpu.json"):
            shutil.copy(f, d / f.name)
    for s in suites:
        _fake_gpu(s, with_gpu)
        _fake_gpu(s, with_gpu, device=SECOND, slug="zz-fake-gpu")  # a second GPU's file
    for d in (cpu_only, with_gpu):
        seal_folder(d)  # the book reads only files its folder's SHA256SUMS lists

    before = {r["claim"]: r for r in _run(docname, cpu_only, monkeypatch)[0]}
    row = next(r for c, r in before.items() if c.startswith(claim))
    assert row["verdict"] == NOT_MEASURED, row

    rows, text = _run(docname, with_gpu, monkeypatch)
    after = {r["claim"]: r for r in rows}
    row = next(r for c, r in after.items() if c.startswith(claim))
    assert row["verdict"] != NOT_MEASURED and FAKE in row["measured"], row   # the first file
    if docname != "config_mirrors_hardware":   # (its every-GPU table reads the training shape:
        assert SECOND in text, docname         # tests/test_bench.py) issue 41 item 6: both shown
