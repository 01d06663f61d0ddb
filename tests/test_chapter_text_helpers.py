"""Helpers that write a chapter's sentences and tables (the roofline ratio, the tensor-core claim,
the kernel walkthrough, where a measurement came from): each computes what its chapter states."""
from pathlib import Path
from typing import Any

import pytest


def test_projection_roofline_is_the_published_ratio():
    from andrea_edu.bench.matmuls import projection_roofline

    r = projection_roofline(128)
    assert r["flops"] == 2 * 128 * 768 * 768
    assert r["compute_s"] == pytest.approx(r["flops"] / 989.5e12)  # 1,979 with sparsity / 2
    m = r["compute_bound_from_rows"]
    below, at = projection_roofline(m - 1), projection_roofline(m)
    assert below["compute_s"] < below["memory_s"] and at["compute_s"] >= at["memory_s"]


def test_tensor_core_claim_waits_for_a_gpu_file():
    from andrea_edu.figures.three_matrices import tensor_core_claim
    from andrea_edu.figures.verdicts import NOT_MEASURED

    facts, verdict = tensor_core_claim(None, 12, rows=128)
    assert verdict == NOT_MEASURED and facts["GPU file"] is None
    assert facts["per-head / fused"] is None and facts["why"] == "no GPU file committed"
    assert facts["B·T"] == 128 and facts["µs at peak"] > 0 and facts["µs moving bytes"] > 0
    fake: dict[str, Any] = {"provenance": {"device": "NVIDIA H200"}, "records": [
        {"status": "ok", "backend": w, "params": {"n_head": 12}, "blas_calls": c,
         "median_ms": ms, "tflops": tf, "time_ratio_to_fused": None, "quality_ok": True,
         "quality_reason": None, "p25_ms": ms, "p75_ms": ms}
        for w, c, ms, tf in (("per-head", 36, 0.3, 100.0), ("fused", 3, 0.1, 600.0))]}
    facts, verdict = tensor_core_claim(fake, 12, rows=128)
    assert verdict == "holds" and facts["GPU file"] == "NVIDIA H200"
    assert facts["per-head / fused"] == pytest.approx(3.0) and facts["share of peak"] == 0.61
    assert "H200" in facts["peak of"]  # the calculation uses the measured GPU's published peak
    # a ratio at or below 1.1 does not hold the claim
    fake["records"][0].update(median_ms=0.105, p25_ms=0.105, p75_ms=0.105)
    assert tensor_core_claim(fake, 12, rows=128)[1] == "does not hold"
    # a GPU timing that fails the check (or a record written before the check) rates nothing
    fake["records"][0].update(quality_ok=False, quality_reason="too spread: 0.9 > 0.5")
    facts, verdict = tensor_core_claim(fake, 12, rows=128)
    assert verdict == NOT_MEASURED and "too spread" in facts["why"]
    assert facts["per-head / fused"] is None


def _v2_loop_key() -> list:
    """The chapter's V2_LOOP_KEY, read from the notebook cell that defines it."""
    import ast
    import json

    nb = Path(__file__).resolve().parents[1] / "book" / "config_mirrors_hardware.ipynb"
    for cell in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and "V2_LOOP_KEY = [" in src:
            for node in ast.walk(ast.parse(src)):
                if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "V2_LOOP_KEY":
                    return ast.literal_eval(node.value)
    raise AssertionError("no cell of config_mirrors_hardware defines V2_LOOP_KEY")


def test_a_kernel_excerpt_marks_lines_of_the_cu_file():
    """figures.kernel_source.excerpt, as the chapters call it: the block from `start` (or the
    whole kernel function), and a table whose rows name the marked lines by their numbers in the
    .cu file, their code as it is there."""
    from andrea_edu.figures.kernel_source import code_part, excerpt
    from andrea_edu.kernels.toolkit import kernel_source

    V2_LOOP_KEY = _v2_loop_key()
    block, table = (m.data for m in excerpt("v2", r"for \(int k0", V2_LOOP_KEY))
    src = kernel_source("v2").splitlines()
    rows = [r for r in table.splitlines() if r.startswith("| ") and r[2].isdigit()]
    assert len(rows) == len(V2_LOOP_KEY)
    for r in rows:  # the line number and the code agree with the file
        n, code = r.split(" | ")[0][2:], r.split(" | ")[1].strip("`")
        assert code_part(src[int(n) - 1]).strip() == code.replace("\\|", "|")
    assert "wmma::mma_sync(sf, qf[kk], kf, sf);" in table and "for (int k0" in block
    whole = excerpt("v1", marks=[(r"blockIdx", "the grid enters")])[0].data
    assert whole.count("blockIdx") >= 1 and "attention_v1(" in whole
    # a pipe in a marked line reads as a pipe once rendered (MyST's parser), inside code spans too
    from markdown_it import MarkdownIt

    piped = excerpt("v2", marks=[(r"\|\||&&|<", "a line with an operator")])[1].data
    html = MarkdownIt("commonmark").enable("table").render(piped)
    assert "#124" not in html and "\\|" not in html and html.count("<tr>") == 2, html


def test_measurement_source_has_only_the_fields_a_file_holds():
    from andrea_edu.figures.config_mirrors_hardware import measurement_source

    res: dict[str, Any] = {
        "provenance": {"device": "CPU: test", "device_kind": "cpu", "torch": "2", "cuda": "13",
                       "driver": None, "andrea_edu": "0.1", "git_commit": "abc", "date": "2026"},
        "settings": {"repeats": 3, "dtype": "bfloat16"}, "_path": "/x/bench_headdim_cpu.json"}
    src = measurement_source(res)
    assert src is not None and None not in src.values()
    assert "driver" not in src and "cuda" not in src and src["file"] == "bench_headdim_cpu.json"
    live = measurement_source(res, live=res)
    assert live is not None and live["file"] == "live" and src["commit"] == "abc"
    unwritten = dict(res, provenance={k: v for k, v in res["provenance"].items()
                                      if k != "git_commit"})  # a live run: no commit stamped
    assert "commit" not in (measurement_source(unwritten, live=unwritten) or {})
    gpu = measurement_source(dict(res, provenance=dict(res["provenance"], device_kind="gpu")))
    assert gpu is not None and gpu["cuda"] == "13" and "driver" not in gpu
    assert measurement_source(None) is None
