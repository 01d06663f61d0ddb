"""Kernel source in the book: the .cu files read as text, shown with their own line numbers.

Used by the chapter "From one block per head to FlashAttention: a kernel worklog" (through
andrea_edu.figures.kernel_worklog); any chapter that shows kernel code can use it. Nothing is
copied into a notebook: every line shown is found in the installed .cu file by a pattern, so the
book shows what is compiled, and a pattern that no longer matches fails loudly.

    version_header(version) -> dict            the file's entry in "Versions in this file"
    header_quote(version, start, field)        part of that entry, quoted with the file's name
    loop_lines(version, start) -> [(n, line)]  a block of the kernel (or file) to its brace
    first_line(version, pattern), marked_lines(lines, marks)   lines found by pattern
    excerpt(version, start, marks)             the block as a code block numbered as in the .cu
                                               (marked lines highlighted in the book) + a table
    code_part(line)                            a line without its // comment
    doc_paragraph(module, start), source_block(text, start)    library text quoted
"""
from __future__ import annotations

import re

from andrea_edu.env import book_build
from andrea_edu.kernels import grid, registry
from andrea_edu.kernels.toolkit import KERNEL_FILES, kernel_source


def version_header(version: str) -> dict:
    """{"name", "title", "idea", "grid", "limits", "speed"} of the kernel's entry in its file's
    "Versions in this file" comment (continuation lines joined)."""
    name = registry.get(version).kernel
    lines = kernel_source(version).splitlines()
    start = next((i for i, t in enumerate(lines) if re.match(rf"// {name}\s{{2,}}\S", t)), None)
    if start is None:
        raise ValueError(f"{KERNEL_FILES[version]} has no '// {name}  <title>' version entry")
    out = {"name": name, "title": lines[start][len(f"// {name}"):].strip()}
    key = None
    for t in lines[start + 1:]:
        m = re.match(r"//\s{2,4}(\w+):\s+(.*)", t)
        if m:
            key, out[m.group(1)] = m.group(1), m.group(2).strip()
        elif key and re.match(r"//\s{5,}\S", t):
            out[key] += " " + t[2:].strip()
        else:
            break
    return out


def _first_sentence(text: str) -> str:
    """The first sentence, without long parenthetical remarks (the table stays narrow)."""
    m = re.match(r"(.+?)\.(\s|$)", re.sub(r"\s*\([^()]{40,}\)", "", text))
    return m.group(1) if m else text


def header_quote(version: str, start: str, field: str = "idea") -> str:
    """The part of a header field from `start` on, quoted with the file it comes from."""
    text = version_header(version)[field]
    i = text.find(start)
    if i < 0:
        raise ValueError(f"{KERNEL_FILES[version]}'s {field} has no {start!r}")
    return f"> {text[i:]} (`{KERNEL_FILES[version]}`, its header)"


def _code(line: str) -> str:
    return line.split("//")[0]


def _file_lines(version: str) -> list[tuple[int, str]]:
    return list(enumerate(kernel_source(version).splitlines(), start=1))


def loop_lines(version: str, start: str, whole_file: bool = False) -> list[tuple[int, str]]:
    """(line number in the .cu file, line) from the first line matching `start` (in the kernel
    function, or anywhere in the file with whole_file=True) to the brace closing its block."""
    lines = _file_lines(version) if whole_file else grid.kernel_lines(version)
    i0 = next((i for i, (_, t) in enumerate(lines) if re.search(start, _code(t))), None)
    if i0 is None:
        raise ValueError(f"no line of {KERNEL_FILES[version]} matches {start!r}")
    depth, opened = 0, False
    for i in range(i0, len(lines)):
        code = _code(lines[i][1])
        depth += code.count("{") - code.count("}")
        opened = opened or "{" in code
        if opened and depth <= 0:
            return lines[i0:i + 1]
    raise ValueError(f"the block opened at {KERNEL_FILES[version]}:{lines[i0][0]} never closes")


def first_line(version: str, pattern: str) -> tuple[int, str]:
    """(line number, code) of the kernel function's first line whose code matches `pattern`."""
    return marked_lines(grid.kernel_lines(version), [(pattern, "")])[0][:2]


def marked_lines(lines, marks) -> list[tuple[int, str, str]]:
    """(line number, code without its comment, role) for each (pattern, role) in `marks`: the
    first line matching the pattern that no earlier mark took (two marks on `__syncthreads`
    find both)."""
    out, taken = [], set()
    for pattern, role in marks:
        hit = next(((n, _code(t).strip()) for n, t in lines
                    if n not in taken and re.search(pattern, _code(t))), None)
        if hit is None:
            raise ValueError(f"no line matches {pattern!r} (the source changed?)")
        taken.add(hit[0])
        out.append((*hit, role))
    return out


def _cell(text: str) -> str:
    """A Markdown table cell: a pipe escaped as GFM and MyST read it, inside code spans too (an
    HTML entity would show literally inside a code span)."""
    return text.replace("|", "\\|")


def excerpt(version: str, start: str | None = None, marks=(), whole_file: bool = False) -> list:
    """Display objects: the block starting at `start` (default: the whole kernel function),
    numbered as in the .cu, marked lines highlighted in the book, and a table of the marked lines
    (`marks`: [(regex, what the line does)]) and what they do. Nothing is copied: every line is
    read from the package's .cu source."""
    from IPython.display import Markdown

    lines = loop_lines(version, start, whole_file) if start else grid.kernel_lines(version)
    marked = marked_lines(lines, marks)
    body = "\n".join(t for _, t in lines)
    first = lines[0][0]
    if book_build():
        emph = ",".join(str(n - first + 1) for n, _, _ in marked)
        code = (f"```{{code-block}} cuda\n:lineno-start: {first}\n"
                + (f":emphasize-lines: {emph}\n" if emph else "") + f"{body}\n```")
    else:
        code = f"```cpp\n// {KERNEL_FILES[version]}, lines {first}-{lines[-1][0]}\n{body}\n```"
    if not marked:
        return [Markdown(code)]
    table = "| line | code | what it does |\n|---|---|---|\n" + "\n".join(
        f"| {n} | `{_cell(t)}` | {role} |" for n, t, role in marked)
    return [Markdown(code), Markdown(table)]


def code_part(line: str) -> str:
    """A .cu line without its // comment."""
    return _code(line)


def doc_paragraph(module, start: str) -> str:
    """The paragraph of a module's docstring that begins with `start`, as a Markdown quote."""
    lines = (module.__doc__ or "").splitlines()
    i0 = next((i for i, t in enumerate(lines) if t.strip().startswith(start)), None)
    if i0 is None:
        raise ValueError(f"{module.__name__}'s docstring has no paragraph starting {start!r}")
    indent = len(lines[i0]) - len(lines[i0].lstrip())
    para = [lines[i0].strip()]
    for t in lines[i0 + 1:]:  # to a blank line or a line indented less
        if not t.strip() or len(t) - len(t.lstrip()) < indent:
            break
        para.append(t.strip())
    return f"> {' '.join(para)} (`{module.__name__}`)"


def source_block(text: str, start: str, end: str = r"^\}") -> str:
    """The lines of `text` from the first matching `start` to the next matching `end`, as a
    Markdown Python block (to show a library constant with the comments that cite it)."""
    lines = text.splitlines()
    i0 = next((i for i, t in enumerate(lines) if re.search(start, t)), None)
    if i0 is None:
        raise ValueError(f"no line matches {start!r}")
    i1 = next((i for i in range(i0 + 1, len(lines)) if re.search(end, lines[i])), len(lines) - 1)
    return "```python\n" + "\n".join(lines[i0:i1 + 1]) + "\n```"
