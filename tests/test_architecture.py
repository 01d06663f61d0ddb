"""The package's shape: subpackages by layer, imports that point one way, no import circle.

The import graph is built from the source with `ast` (every import, including those inside
functions), so a circle is caught even where Python would tolerate it at run time.
Layers, from the bottom: core (config, projections, layout, model, env) -> kernels -> attention
(the dispatcher) -> heads, pipeline, bench -> figures.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "andrea_edu"
SUBPACKAGES = ("kernels", "heads", "pipeline", "bench", "notebook", "figures")
CORE = ("andrea_edu.config", "andrea_edu.projections", "andrea_edu.layout", "andrea_edu.model",
        "andrea_edu.env")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _is_package(mod: str, mods) -> bool:
    return mods[mod].name == "__init__.py"


def imports_of(mod: str, mods) -> set[str]:
    """Modules of the package that `mod` imports, anywhere in its source."""
    path = mods[mod]
    tree = ast.parse(path.read_text(), filename=str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in mods:
                    out.add(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if _is_package(mod, mods) else mod.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("andrea_edu"):
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                if sub in mods:          # `from andrea_edu.kernels import nvrtc`: the submodule
                    out.add(sub)
                elif target in mods:     # `from andrea_edu.kernels.nvrtc import X`: the module
                    out.add(target)
    out.discard(mod)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imports_of(m, mods) for m in mods}


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One import circle as [a, b, ..., a], or None (iterative DFS, colours)."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = {m: WHITE for m in g}
    for start in sorted(g):
        if colour[start] != WHITE:
            continue
        stack = [(start, iter(sorted(g[start])))]
        path = [start]
        colour[start] = GREY
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                colour[node] = BLACK
                stack.pop()
                path.pop()
            elif colour.get(nxt) == GREY:
                return path[path.index(nxt):] + [nxt]
            elif colour.get(nxt) == WHITE:
                colour[nxt] = GREY
                stack.append((nxt, iter(sorted(g[nxt]))))
                path.append(nxt)
    return None


def layer(mod: str) -> str:
    parts = mod.split(".")
    if len(parts) >= 2 and parts[1] in SUBPACKAGES:
        return parts[1]
    if mod == "andrea_edu.attention":
        return "attention"
    if mod == "andrea_edu":
        return "entry"
    return "core"


# What each layer may import (besides itself). The arrows point one way: figures -> computation
# (heads, pipeline, bench) -> attention -> kernels -> core.
ALLOWED = {
    "core": {"core", "attention"},  # model.py runs attention() in its forward: the one exception
    "kernels": {"kernels", "core"},
    "attention": {"attention", "kernels", "core"},
    "heads": {"heads", "attention", "kernels", "core", "bench"},
    "pipeline": {"pipeline", "attention", "kernels", "core", "bench"},
    "bench": {"bench", "attention", "kernels", "core"},
    "notebook": {"notebook", "bench", "core"},
    "figures": {"figures", "heads", "pipeline", "bench", "attention", "kernels", "core"},
    "entry": set(SUBPACKAGES) | {"attention", "core"},
}


def test_cycle_finder_finds_a_planted_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_import_graph_sees_imports_inside_functions(tmp_path):
    mods = {"andrea_edu.x": tmp_path / "x.py", "andrea_edu.y": tmp_path / "y.py"}
    mods["andrea_edu.x"].write_text("def f():\n    from andrea_edu.y import g\n    return g\n")
    mods["andrea_edu.y"].write_text("def g():\n    from andrea_edu import x\n")
    assert imports_of("andrea_edu.x", mods) == {"andrea_edu.y"}
    assert imports_of("andrea_edu.y", mods) == {"andrea_edu.x"}


def test_no_import_circle_anywhere():
    cycle = find_cycle(graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_imports_point_one_way():
    bad = [f"{m} ({layer(m)}) imports {d} ({layer(d)})" for m, deps in graph().items()
           for d in sorted(deps) if layer(d) not in ALLOWED[layer(m)]]
    assert not bad, "\n".join(bad)


def test_nothing_in_kernels_imports_the_dispatcher():
    g = graph()
    assert not [m for m in g if layer(m) == "kernels" and "andrea_edu.attention" in g[m]]


def test_the_model_imports_only_the_core_and_the_dispatcher():
    assert graph()["andrea_edu.model"] <= {"andrea_edu.attention", *CORE, "andrea_edu.config"}


def test_top_level_holds_at_most_ten_modules():
    top = sorted(p.name for p in PKG.glob("*.py"))
    assert len(top) <= 10, top
    for sub in SUBPACKAGES:
        assert (PKG / sub / "__init__.py").is_file(), sub


@pytest.mark.parametrize("sub", SUBPACKAGES)
def test_each_subpackage_says_what_it_holds_and_which_chapters_use_it(sub):
    doc = ast.get_docstring(ast.parse((PKG / sub / "__init__.py").read_text())) or ""
    named = {p.stem for p in (PKG / sub).glob("*.py")} - {"__init__", "__main__"}
    missing = [m for m in named if not re.search(rf"\b{m}\b", doc)]
    assert not missing, f"andrea_edu/{sub}/__init__.py does not describe {missing}"
    assert "chapter" in doc.lower() or '"' in doc


def _notebook_imports(nb_path: Path) -> set[str]:
    nb = json.loads(nb_path.read_text())
    out = set()
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        src = "\n".join(l for l in src.splitlines() if not l.lstrip().startswith(("%", "!")))
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("andrea_edu"):
                mod = node.module or ""
                for a in node.names:
                    out.add(f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules() else mod)
            elif isinstance(node, ast.Import):
                out |= {a.name for a in node.names if a.name.startswith("andrea_edu")}
    return out


CHAPTERS = sorted((ROOT / "book").glob("*.ipynb"))


@pytest.mark.parametrize("nb", CHAPTERS, ids=lambda p: p.stem)
def test_a_chapter_takes_figures_only_from_the_module_named_after_it(nb):
    shared = {"andrea_edu.figures.viz", "andrea_edu.figures.verdicts",
              "andrea_edu.figures.kernel_source", "andrea_edu.figures"}
    figs = {m for m in _notebook_imports(nb) if m.startswith("andrea_edu.figures")} - shared
    assert figs <= {f"andrea_edu.figures.{nb.stem}"}, figs
    assert (PKG / "figures" / f"{nb.stem}.py").is_file(), f"no andrea_edu/figures/{nb.stem}.py"
