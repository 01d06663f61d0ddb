"""figures.kernel_source: kernel code shown in the book, found in the .cu files by pattern.

Pinned on the real sources: version headers, blocks to their closing brace, marked lines,
excerpts numbered as in the file (highlighted in the book build), quotes of library text.
"""
from __future__ import annotations

import pytest

from andrea_edu.figures import kernel_source as ks
from andrea_edu.kernels.toolkit import kernel_source

VERSIONS = ("v1", "v2", "v3")


@pytest.mark.parametrize("v", VERSIONS)
def test_version_header_reads_the_files_own_entry(v):
    h = ks.version_header(v)
    assert {"name", "title", "idea", "grid", "limits", "speed"} <= set(h)
    assert h["name"] in kernel_source(v)
    assert h["grid"].startswith("gridDim")
    assert "  " not in h["idea"]  # continuation lines joined with single spaces


@pytest.mark.parametrize("v, start", [("v1", r"for \(int k0 = 0; k0 < kv_end"),
                                      ("v2", r"for \(int k0 = 0; k0 < kv_end"),
                                      ("v3", r"for \(int j = 0; j < n_tiles")])
def test_loop_lines_run_from_the_loop_to_its_closing_brace(v, start):
    lines = ks.loop_lines(v, start)
    src = kernel_source(v).splitlines()
    assert all(src[n - 1] == t for n, t in lines)  # numbered as in the .cu file
    assert [n for n, _ in lines] == list(range(lines[0][0], lines[-1][0] + 1))
    code = "".join(ks.code_part(t) for _, t in lines)
    assert code.count("{") == code.count("}") and lines[-1][1].strip() == "}"


def test_loop_lines_and_marks_fail_loudly_when_the_source_changes():
    with pytest.raises(ValueError, match="matches"):
        ks.loop_lines("v1", r"no such line anywhere")
    with pytest.raises(ValueError, match="source changed"):
        ks.marked_lines(ks.loop_lines("v1", r"for \(int k0 = 0"), [(r"wmma::", "x")])


def test_two_marks_with_one_pattern_find_two_lines_and_drop_comments():
    lines = ks.loop_lines("v1", r"for \(int k0 = 0")
    marks = ks.marked_lines(lines, [("__syncthreads", "a"), ("__syncthreads", "b")])
    assert marks[0][0] < marks[1][0]
    assert all("//" not in code for _, code, _ in marks)


def test_excerpt_numbers_lines_as_in_the_file_and_highlights_marks_in_the_book(monkeypatch):
    marks = [(r"mma_16816<T>\(s\[", "S = Q K^T")]
    monkeypatch.delenv("ANDREA_BOOK_BUILD", raising=False)
    code, table = ks.excerpt("v3", r"for \(int j = 0; j < n_tiles", marks)
    first = ks.loop_lines("v3", r"for \(int j = 0; j < n_tiles")[0][0]
    assert code.data.startswith("```cpp") and f"lines {first}-" in code.data
    n = ks.first_line("v3", r"mma_16816<T>\(s\[")[0]
    assert f"| {n} |" in table.data
    monkeypatch.setenv("ANDREA_BOOK_BUILD", "1")
    code, _ = ks.excerpt("v3", r"for \(int j = 0; j < n_tiles", marks)
    assert f":lineno-start: {first}" in code.data
    assert f":emphasize-lines: {n - first + 1}" in code.data
    (only,) = ks.excerpt("v3", r"void cp_async_16", whole_file=True)
    assert ":emphasize-lines:" not in only.data


def test_source_block_shows_a_constant_with_its_comments():
    text = "x = 1\nGPUS = {\n    # a source\n    'a': 1,\n}\ny = 2\n"
    block = ks.source_block(text, r"^GPUS = \{")
    assert block.startswith("```python\nGPUS = {") and "# a source" in block
    assert block.endswith("}\n```") and "y = 2" not in block


def test_doc_paragraph_quotes_one_paragraph_of_a_docstring():
    import types
    mod = types.ModuleType("m")
    mod.__doc__ = "Title.\n\n  Rule: one\n  two.\n\n  Other: three.\n"
    assert ks.doc_paragraph(mod, "Rule:") == "> Rule: one two. (`m`)"
    with pytest.raises(ValueError, match="no paragraph"):
        ks.doc_paragraph(mod, "Missing:")


def test_header_quote_cites_the_file():
    q = ks.header_quote("v3", "What changed from v2")
    assert q.startswith("> What changed from v2")
    assert q.endswith("(`attention_v3_flash.cu`, its header)")
    with pytest.raises(ValueError, match="has no"):
        ks.header_quote("v1", "What changed from v2")
