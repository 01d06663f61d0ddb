"""How much of a chapter's code teaches: the counter behind issue 38's targets.

Run `python tests/lesson_counts.py` for the table (one row per chapter of _toc.yml); the tests
(tests/test_lesson_counts.py) hold the rewritten chapters to the targets.

Method, on the committed notebook (no outputs needed), cell by cell:
- **Exercise cells** are the code cells between a `## Exercises` heading and the next level-2
  heading. Every other code cell counts, the hidden setup cell and the collapsed `## Evidence`
  block at the chapter's end included.
- A code cell is **visible** unless tagged `hide-input`, `hide-cell`, `remove-input` or `remove-cell` (the
  book hides its source; a reader reads only its output, if any).
- A visible cell **computes in view** when, with IPython magics set aside (a `%%cuda` cell is a
  kernel the reader reads: it counts), it holds a statement that computes: an assignment, a loop,
  a `def`, an assert, a call... but it does not count when any of these is true:
    * it only sets up: every statement imports, or assigns a constant, a name, an attribute or
      a call to a set-up helper (`pick`, `pick_device`, `provenance`, `load`, ...), or calls one;
    * it assembles prose: it calls `Markdown(`/`HTML(`/`display_markdown(`, or holds an f-string
      with five or more words of literal text, or builds a Markdown table by hand (`|---`, `"| "`);
    * it only shows code or a verdict box (`show_source(`, `box(`), or draws a slider whose
      function is defined elsewhere is fine (a figure is an output of the computation).
  These rules are mechanical on purpose, so the count can be re-run by anyone; they undercount a
  cell that both computes and writes a sentence, which is the habit the targets discourage.
"""
from __future__ import annotations

import ast
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_CODE_CELLS = 25      # code cells outside the exercises
MIN_IN_VIEW = 0.5        # share of those that compute the lesson in view
HIDDEN = {"hide-input", "hide-cell", "remove-input", "remove-cell"}
EXERCISES = re.compile(r"^## Exercises", re.M)
LEVEL2 = re.compile(r"^## ", re.M)
PROSE_CALLS = ("Markdown", "HTML", "display_markdown")
SHOW_ONLY = ("show_source", "box")
SETUP_CALLS = ("pick", "pick_device", "provenance", "load", "setup_kernel", "pin_cpu_isa",
               "check_rows", "fast_mode", "book_build", "setdefault", "device_label")


def _simple(v: ast.AST | None) -> bool:
    """A value a set-up line assigns: a constant, a name, an attribute, a set-up call, or a
    tuple/list/dict of those (arithmetic is a computation)."""
    if v is None or isinstance(v, (ast.Constant, ast.Name, ast.Attribute)):
        return True
    if isinstance(v, ast.Call):
        return _call_name(v) in SETUP_CALLS and all(_simple(a) for a in v.args)
    if isinstance(v, (ast.Tuple, ast.List)):
        return all(_simple(e) for e in v.elts)
    if isinstance(v, ast.Dict):
        return all(_simple(e) for e in [*v.keys, *v.values])
    if isinstance(v, ast.Subscript):
        return _simple(v.value)
    return False


def _setup(s: ast.stmt) -> bool:
    if isinstance(s, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(s, (ast.Assign, ast.AnnAssign)):
        return _simple(s.value)
    if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
        return _call_name(s.value) in SETUP_CALLS
    return False


def _source(cell) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def _words_in_fstring(node: ast.JoinedStr) -> int:
    text = " ".join(v.value for v in node.values
                    if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return sum(1 for w in text.split() if re.search(r"[A-Za-z]{2,}", w))


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def computes_in_view(src: str) -> bool:
    """True when a visible code cell computes (see the module's rules)."""
    lines = src.splitlines()
    if lines and lines[0].startswith("%%"):
        return lines[0].split()[0] not in ("%%capture",) and len(lines) > 1
    py = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in lines)
    try:
        tree = ast.parse(py)
    except SyntaxError:
        return False
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    if any(_call_name(c) in PROSE_CALLS for c in calls):
        return False
    if any(_words_in_fstring(n) >= 5 for n in ast.walk(tree) if isinstance(n, ast.JoinedStr)):
        return False
    strings = [n.value for n in ast.walk(tree)
               if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    if any("|---" in t or t.startswith("| ") for t in strings):
        return False
    body = [s for s in tree.body
            if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if not body:
        return False
    if all(_setup(s) for s in body):
        return False
    top_calls = [s.value for s in body if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)]
    if len(top_calls) == len(body) and all(_call_name(c) in SHOW_ONLY for c in top_calls):
        return False
    return True


@dataclass
class Counts:
    chapter: str
    code: int        # code cells outside the exercises
    visible: int     # of those, with their source shown
    in_view: int     # of those, computing the lesson in view
    exercises: int   # code cells in the exercises

    @property
    def share(self) -> float:
        return self.in_view / self.code if self.code else 0.0

    def meets_targets(self) -> bool:
        return self.code <= MAX_CODE_CELLS and self.share >= MIN_IN_VIEW


def count(path: Path) -> Counts:
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    code = visible = in_view = exercises = 0
    in_exercises = False
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            text = _source(cell)
            if LEVEL2.search(text):  # a new section: the exercises start or end here
                in_exercises = bool(EXERCISES.search(text))
            continue
        if cell["cell_type"] != "code":
            continue
        if in_exercises:
            exercises += 1
            continue
        code += 1
        if set(cell.get("metadata", {}).get("tags", [])) & HIDDEN:
            continue
        visible += 1
        in_view += computes_in_view(_source(cell))
    return Counts(Path(path).stem, code, visible, in_view, exercises)


def figure_prose_words(folder: Path | None = None, prose_only: bool = True) -> dict[str, int]:
    """Words in the string literals of each module under andrea_edu/figures/ (f-strings' literal
    parts included; docstrings never): a word is a token with two letters in a row.

    prose_only=True (what issue 38's 1,500 is compared with: labels, captions, alt text) counts
    only literals of two or more tokens, outside `raise ...(...)` and `warnings.warn(...)`. A
    one-token literal is a key into a results file ("median_ms"), a matplotlib option ("center",
    "upper left" is two and counts), a colour or a one-word label; an error message is the
    one-line refusal the project's standards require, not a lesson's prose. prose_only=False
    counts every literal's words (the method of earlier notes)."""
    folder = folder or ROOT / "andrea_edu" / "figures"
    out: dict[str, int] = {}
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and n.body and isinstance(n.body[0], ast.Expr)
                and isinstance(n.body[0].value, ast.Constant)}
        if prose_only:
            for n in ast.walk(tree):
                refusal = (isinstance(n, ast.Raise) and n.exc is not None) or (
                    isinstance(n, ast.Call) and isinstance(n.func, (ast.Attribute, ast.Name))
                    and getattr(n.func, "attr", getattr(n.func, "id", "")) == "warn")
                if refusal:
                    skip |= {id(m) for m in ast.walk(n)}
        words = 0
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip:
                tokens = n.value.split()
                if prose_only and len(tokens) < 2:
                    continue
                words += sum(1 for w in tokens if re.search(r"[A-Za-z]{2,}", w))
        out[path.stem] = words
    return out


def chapters() -> list[Path]:
    """The notebooks of _toc.yml, in reading order."""
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    names = re.findall(r"file:\s*(\S+)", toc)
    return [ROOT / f"{n}.ipynb" for n in names if (ROOT / f"{n}.ipynb").exists()]


def table(rows: list[Counts]) -> str:
    out = ["| chapter | code cells (outside exercises) | visible | computing in view | share "
           "| exercise cells |", "|---|---:|---:|---:|---:|---:|"]
    out += [f"| {r.chapter} | {r.code} | {r.visible} | {r.in_view} | {r.share:.0%} | {r.exercises} |"
            for r in rows]
    tot = Counts("all", *(sum(getattr(r, f) for r in rows)
                          for f in ("code", "visible", "in_view", "exercises")))
    out.append(f"| **all** | {tot.code} | {tot.visible} | {tot.in_view} | {tot.share:.0%} "
               f"| {tot.exercises} |")
    return "\n".join(out)


if __name__ == "__main__":
    paths = [Path(p) for p in sys.argv[1:]] or chapters()
    print(table([count(p) for p in paths]))
    words = figure_prose_words()
    every = figure_prose_words(prose_only=False)
    print(f"\nProse words in andrea_edu/figures/ string literals (two or more tokens, refusals "
          f"not counted): {sum(words.values()):,} "
          f"({', '.join(f'{k} {v:,}' for k, v in sorted(words.items(), key=lambda kv: -kv[1]))}); "
          f"every literal's words: {sum(every.values()):,}")
