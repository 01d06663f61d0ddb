"""The figures module of the chapter "From one block per head to FlashAttention: a kernel worklog".

It reads the .cu files as text (version headers, loops, marked lines), draws the emulator's
launch, and formats GPU measurements and the time model; these tests pin each of those on the
real sources and on small fake result files (no GPU needed).
"""
from __future__ import annotations

import re
from types import SimpleNamespace

import matplotlib
import pytest
import torch

from andrea_edu.figures import kernel_worklog as figs
from andrea_edu.kernels.emulator import emulate
from andrea_edu.kernels.toolkit import kernel_source

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt
    plt.close("all")


@pytest.mark.parametrize("v", figs.VERSIONS)
def test_version_header_reads_the_files_own_entry(v):
    h = figs.version_header(v)
    assert {"name", "title", "idea", "grid", "limits", "speed"} <= set(h)
    assert h["name"] in kernel_source(v)
    assert h["grid"].startswith("gridDim")
    assert "  " not in h["idea"]  # continuation lines joined with single spaces


def test_ladder_has_one_row_per_version_with_the_grid_of_each():
    table = figs.ladder_markdown().splitlines()
    assert len(table) == 2 + len(figs.VERSIONS)
    assert "gridDim = (B * nh)" in table[2] and "ceil(T / 64)" in table[4]


@pytest.mark.parametrize("v, start", [("v1", r"for \(int k0 = 0; k0 < kv_end"),
                                      ("v2", r"for \(int k0 = 0; k0 < kv_end"),
                                      ("v3", r"for \(int j = 0; j < n_tiles")])
def test_loop_lines_run_from_the_loop_to_its_closing_brace(v, start):
    lines = figs.loop_lines(v, start)
    src = kernel_source(v).splitlines()
    assert all(src[n - 1] == t for n, t in lines)  # numbered as in the .cu file
    assert [n for n, _ in lines] == list(range(lines[0][0], lines[-1][0] + 1))
    code = "".join(figs.code_part(t) for _, t in lines)
    assert code.count("{") == code.count("}") and lines[-1][1].strip() == "}"


def test_loop_lines_and_marks_fail_loudly_when_the_source_changes():
    with pytest.raises(ValueError, match="matches"):
        figs.loop_lines("v1", r"no such line anywhere")
    with pytest.raises(ValueError, match="source changed"):
        figs.marked_lines(figs.loop_lines("v1", r"for \(int k0 = 0"), [(r"wmma::", "x")])


def test_two_marks_with_one_pattern_find_two_lines_and_drop_comments():
    lines = figs.loop_lines("v1", r"for \(int k0 = 0")
    marks = figs.marked_lines(lines, [("__syncthreads", "a"), ("__syncthreads", "b")])
    assert marks[0][0] < marks[1][0]
    assert all("//" not in code for _, code, _ in marks)


def test_excerpt_numbers_lines_as_in_the_file_and_highlights_marks_in_the_book(monkeypatch):
    marks = [(r"mma_16816<T>\(s\[", "S = Q K^T")]
    monkeypatch.delenv("ANDREA_BOOK_BUILD", raising=False)
    code, table = figs.excerpt("v3", r"for \(int j = 0; j < n_tiles", marks)
    first = figs.loop_lines("v3", r"for \(int j = 0; j < n_tiles")[0][0]
    assert code.data.startswith("```cpp") and f"lines {first}-" in code.data
    n = figs.first_line("v3", r"mma_16816<T>\(s\[")[0]
    assert f"| {n} |" in table.data
    monkeypatch.setenv("ANDREA_BOOK_BUILD", "1")
    code, _ = figs.excerpt("v3", r"for \(int j = 0; j < n_tiles", marks)
    assert f":lineno-start: {first}" in code.data
    assert f":emphasize-lines: {n - first + 1}" in code.data
    (only,) = figs.excerpt("v3", r"void cp_async_16", whole_file=True)
    assert ":emphasize-lines:" not in only.data


def test_changes_table_has_a_column_per_version():
    rows = [("S", {v: figs.first_line(v, r"blockIdx\.x") for v in figs.VERSIONS})]
    table = figs.changes_markdown(rows).splitlines()
    assert len(table) == 3 and table[2].count("`") == 2 * len(figs.VERSIONS)


@pytest.mark.parametrize("v", figs.VERSIONS)
def test_decomposition_figure_draws_every_tile_of_the_chosen_head(v):
    q, k, vv = (torch.randn(1, 2, 70, 32).to(torch.float16) for _ in range(3))
    _, tr = emulate(q, k, vv, causal=True, kernel=v)
    fig = figs.decomposition_figure(tr)
    grid_ax, matrix_ax = fig.axes[:2]
    tiles = sum(len(t.steps) for b in tr.blocks if (b.b, b.h) == (0, 0) for t in b.q_tiles)
    assert len(matrix_ax.patches) == tiles
    assert len(grid_ax.patches) == tr.n_blocks
    hatched = [p for p in matrix_ax.patches if p.get_hatch()]
    assert hatched  # causal, T=70: the diagonal tiles hold masked scores


def _fake_results(kernel_for_flash="v3"):
    recs = []
    for hd, sdpa_ms in ((64, 1.0), (128, 2.0)):
        p = dict(shape="ANDREA-120M", series="n_head=12", B=8, T=1024, n_head=12, head_dim=hd,
                 causal=True, dtype="bfloat16")
        recs.append(dict(case="c", backend="sdpa", status="ok", params=p, median_ms=sdpa_ms))
        recs.append(dict(case="c", backend="cuda-naive", status="ok", params=p,
                         median_ms=50 * sdpa_ms, kernel="v1"))
        recs.append(dict(case="c", backend="cuda-wmma", status="invalid", params=p,
                         median_ms=None, kernel="v2"))
        recs.append(dict(case="c", backend="cuda-flash", status="ok", params=p,
                         median_ms=2 * sdpa_ms, kernel=kernel_for_flash))
    prov = dict(device="NVIDIA H200", driver="1", cuda="12.8", date="2026-12-01T00:00",
                git_commit="abcdef0123")
    return dict(records=recs, provenance=prov, _path="/x/bench_headdim_nvidia-h200.json")


def test_measured_rows_take_the_ok_records_and_the_speed_relative_to_sdpa():
    assert figs.measured_rows(None, nh=12) == []
    rows = figs.measured_rows(_fake_results(), nh=12)
    assert {(r["version"], r["head_dim"]) for r in rows} == {("v1", 64), ("v3", 64),
                                                             ("v1", 128), ("v3", 128)}
    v3 = next(r for r in rows if r["version"] == "v3" and r["head_dim"] == 64)
    assert v3["speed"] == pytest.approx(0.5) and v3["kernel"] == "v3"
    text = figs.measured_markdown(rows, _fake_results())
    assert "NVIDIA H200" in text and "0.50x" in text


def test_measured_figure_draws_the_model_hatched_and_labelled_model():
    rows = figs.measured_rows(_fake_results(), nh=12)
    fig = figs.measured_figure(rows, _fake_results(), model={("v3", 64): 1e-3})
    ax = fig.axes[0]
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert hatched and all(p.get_facecolor()[3] == 0 for p in hatched)  # outlined, not filled
    labels = ax.get_legend_handles_labels()[1]
    assert any("model" in s for s in labels)
    assert all("model" not in s for s in labels if "measured" in s)


def test_no_gpu_file_says_not_yet_measured_and_how_to_measure(tmp_path):
    text = figs.not_measured_markdown(tmp_path)
    assert "Not yet measured on a GPU" in text and "scripts/gpu_suite.sh" in text


def test_one_block_verdicts():
    tr = SimpleNamespace(shape=(2, 3, 130, 32))
    assert figs.one_block_row("v1", tr, {(0, 0): 1}, (96, 1, 1), 8, 12, 1024)[2] == "holds"
    row = figs.one_block_row("v3", tr, {(0, 0): 3}, (96, 16, 1), 8, 12, 1024)
    assert row[2] == "holds with a caveat" and "16 block(s) per (b, h)" in row[1]


def test_never_knows_verdicts():
    sig = SimpleNamespace(param_names=("q", "k", "v", "out", "seq_len", "head_dim"))
    reads = [(10, "base = blockIdx.x * seq_len;  // comment")]
    ok = figs.never_knows_row("v1", sig, [], reads, True)
    assert ok[2] == "holds" and "comment" not in ok[1]
    assert figs.never_knows_row("v1", sig, [], reads, False)[2] == "does not hold"
    assert figs.never_knows_row("v1", sig, ["n_head"], reads, True)[2] == "does not hold"


def test_live_markdown_marks_untimed_versions():
    dec = SimpleNamespace(backend="cuda-flash")
    live = {"v3": dict(decision=dec, check=dict(max_abs_err=1e-3, passed=True)),
            "v2": dict(decision=dec, check=dict(max_abs_err=1.0, passed=False))}
    times = {"v3": dict(median_ms=2.0), "sdpa": dict(median_ms=1.0)}
    text = figs.live_markdown(live, times, "GPU", 8, 1024)
    assert "0.50x" in text and "not timed" in text


def test_setup_sentence_names_the_case():
    cfg = SimpleNamespace(name="ANDREA-120M", n_head=12, head_dim=64)
    s = figs.setup_sentence(cfg, 8, 1024, torch.bfloat16, True, False, True)
    assert re.search(r"B=8, T=1024.*bfloat16, causal", s) and "fast mode" in s
