"""The package's shape: subpackages by layer, imports that point one way, no import circle, and
the rules that keep each place doing one job.

The import graph is built from the source with `ast` (every import, including those inside
functions), so a circle is caught even where Python would tolerate it at run time.
Layers, from the bottom:
    kernels   the .cu sources and everything about them (compiler, launcher, emulator, limits):
              imports nothing of the package outside itself
    core      the package's root: config, env, data (committed data, read), projections, layout,
              attention (plain torch), dispatch (the dispatcher, which uses the kernels) and model
              (whose forward runs the attention it is given)
    heads, pipeline, bench      computation and measurement (heads and pipeline may use bench)
    notebook  the tooling that shows chapters (slider, live renderer, kernel cells)
    figures   one module per chapter plus shared drawing helpers: they draw, never measure
Rules beyond the arrows: the root holds the core only (no CLI shims); a chapter module imports no
other chapter module; figures compute no timings; notebook tooling (Jupyter, widgets, ZeroMQ)
lives in andrea_edu/notebook; a figures or tooling module re-exports nothing; every module's
docstring says what it is, a chapter module's names its chapter, a subpackage's describes each
of its modules and the chapters that use it. The book reads committed data and the laboratory
(andrea_lab) writes it: no andrea_edu module imports andrea_lab or calls a writer, and no chapter
imports andrea_lab.
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
CORE = ("andrea_edu.config", "andrea_edu.env", "andrea_edu.data", "andrea_edu.data_pins",
        "andrea_edu.projections", "andrea_edu.layout", "andrea_edu.attention", "andrea_edu.dispatch",
        "andrea_edu.model")
TOOLING_LIBRARIES = ("ipywidgets", "nbclient", "nbconvert", "nbformat", "jupyter_client", "zmq")
TIMERS = ("perf_counter", "perf_counter_ns", "process_time", "monotonic", "monotonic_ns",
          "Event", "elapsed_time", "synchronize", "time_fn", "time_fns", "timeit")


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
    if mod == "andrea_edu":
        return "entry"
    return "core"


# What each layer may import (besides itself): the arrows point one way.
ALLOWED = {
    "kernels": {"kernels"},
    "core": {"core", "kernels"},
    "bench": {"bench", "core", "kernels"},
    "heads": {"heads", "bench", "core", "kernels"},
    "pipeline": {"pipeline", "bench", "core", "kernels"},
    "notebook": {"notebook", "core", "kernels"},
    "figures": {"figures", "heads", "pipeline", "bench", "core", "kernels"},
    "entry": {"core"},
}


def chapter_titles() -> dict[str, str]:
    """{notebook stem: its title (the first "# " heading)} for every chapter of book/."""
    out = {}
    for nb_path in sorted((ROOT / "book").glob("*.ipynb")):
        for cell in json.loads(nb_path.read_text())["cells"]:
            m = re.search(r"^# (.+)$", "".join(cell["source"]), re.M)
            if cell["cell_type"] == "markdown" and m:
                out[nb_path.stem] = m.group(1).strip()
                break
    return out


def short_title(title: str) -> str:
    """What a docstring must quote of a title: up to its first colon, comma or " and "."""
    return re.split(r":|,| and ", title)[0].strip()


CHAPTER_MODULES = {f"andrea_edu.figures.{stem}" for stem in chapter_titles()}


def _tree(mod: str, mods=None) -> ast.Module:
    path = (mods or modules())[mod]
    return ast.parse(path.read_text(), filename=str(path))


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


def test_the_layer_rule_catches_a_planted_upward_import():
    """The rule is not vacuous: the model importing the figures, or a kernel the dispatcher,
    is refused."""
    planted = {"andrea_edu.model": {"andrea_edu.figures.viz"},
               "andrea_edu.kernels.grid": {"andrea_edu.dispatch"}}
    bad = [m for m, deps in planted.items() for d in deps if layer(d) not in ALLOWED[layer(m)]]
    assert bad == ["andrea_edu.model", "andrea_edu.kernels.grid"]


def documented_order() -> list[list[str]]:
    """The layers in the order the package's own docstring states them ("imports point one way
    only: figures -> (heads, pipeline) -> bench -> core ... -> kernels"), top first, a group in
    parentheses being one rank."""
    import andrea_edu
    doc = " ".join((andrea_edu.__doc__ or "").split())
    m = re.search(r"imports point one way only: (.+?);", doc)
    assert m, "andrea_edu's docstring no longer states the import order"
    ranks = []
    for part in m.group(1).split("->"):
        names = re.findall(r"[a-z]+", re.sub(r"\(this folder\)", "", part))
        ranks.append(names)
    return ranks


def allowed_from_docs() -> dict[str, set[str]]:
    """What each layer may import, derived from documented_order (a layer: itself and every
    rank below it) and the docstring's sentence on the notebook tooling."""
    ranks = documented_order()
    out = {}
    for i, rank in enumerate(ranks):
        below = {name for r in ranks[i + 1:] for name in r}
        for name in rank:
            out[name] = {name} | below
    import andrea_edu
    doc = " ".join((andrea_edu.__doc__ or "").split())
    m = re.search(r"the notebook tooling uses only the ((?:\w+, the )*\w+) and the (\w+)\b", doc)
    assert m, "andrea_edu's docstring no longer says what the notebook tooling uses"
    out["notebook"] = {"notebook", *m.group(1).split(", the "), m.group(2)}
    return out


def test_the_allowed_table_is_the_documented_order():
    """ALLOWED is checked against the package's own statement of its layers, not against
    itself: a row widened here (or an order changed in the docstring) fails."""
    documented = allowed_from_docs()
    assert {k: v for k, v in ALLOWED.items() if k != "entry"} == documented
    assert ALLOWED["entry"] == {"core"}


def test_the_documented_order_is_read_as_written():
    ranks = documented_order()
    assert ranks[0] == ["figures"] and ranks[-1] == ["kernels"]
    assert ["heads", "pipeline"] in ranks


def test_the_kernels_import_nothing_above_them():
    g = graph()
    assert not {d for m in g if layer(m) == "kernels" for d in g[m] if layer(d) != "kernels"}


def test_the_root_holds_the_core_only():
    root = {f"andrea_edu.{p.stem}" for p in PKG.glob("*.py")} - {"andrea_edu.__init__"}
    assert root == set(CORE), f"not core: {sorted(root - set(CORE))}; missing: " \
                              f"{sorted(set(CORE) - root)}"
    for sub in SUBPACKAGES:
        assert (PKG / sub / "__init__.py").is_file(), sub
    shims = [m for m in sorted(root) if is_a_command(_tree(m))]
    assert not shims, f"command lines at the root (they belong in a subpackage): {shims}"


def is_a_command(tree: ast.AST) -> bool:
    """Whether a module runs as a command: `if __name__ == "__main__":` anywhere in it."""
    return any(isinstance(n, ast.Compare) and getattr(n.left, "id", None) == "__name__"
               and any(getattr(c, "value", None) == "__main__" for c in n.comparators)
               for n in ast.walk(tree))


def test_the_command_finder_sees_a_shim():
    assert is_a_command(ast.parse('import sys\nif __name__ == "__main__":\n    sys.exit(0)\n'))
    assert not is_a_command(ast.parse('NAME = "__main__"\n'))


def test_a_chapter_module_imports_no_other_chapter_module():
    g = graph()
    bad = {m: sorted(g[m] & CHAPTER_MODULES) for m in g if m.startswith("andrea_edu.figures")}
    assert not {m: d for m, d in bad.items() if d}, bad
    assert len(CHAPTER_MODULES) >= 13  # the rule sees every chapter


def timers_in(tree: ast.AST) -> list[str]:
    """What in a module's source takes a time: the time/timeit modules, perf_counter and the
    like, CUDA events, synchronisation, the bench's time_fn(s)."""
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            found += [a.name for a in n.names if a.name.split(".")[0] in ("time", "timeit")]
        elif isinstance(n, ast.ImportFrom):
            if (n.module or "").split(".")[0] in ("time", "timeit") or n.module == \
                    "andrea_edu.bench.timing" and any(a.name in TIMERS for a in n.names):
                found.append(n.module or "")
        elif isinstance(n, ast.Attribute) and n.attr in TIMERS:
            found.append(n.attr)
        elif isinstance(n, ast.Name) and n.id in TIMERS:
            found.append(n.id)
    return found


def test_the_timer_finder_sees_a_planted_timing():
    assert timers_in(ast.parse("import time\nt0 = time.perf_counter()")) == \
        ["time", "perf_counter"]
    assert timers_in(ast.parse("e = torch.cuda.Event(enable_timing=True)")) == ["Event"]
    assert timers_in(ast.parse("from andrea_edu.bench.timing import time_fns")) != []
    assert timers_in(ast.parse("def f(timings):\n    return len(timings)")) == []


def test_figures_compute_no_timings():
    mods = modules()
    bad = {m: timers_in(_tree(m, mods)) for m in mods if m.startswith("andrea_edu.figures")}
    assert not {m: t for m, t in bad.items() if t}, bad


def test_notebook_tooling_lives_in_its_subpackage():
    mods = modules()
    tooling = set()
    for m in mods:
        for n in ast.walk(_tree(m, mods)):
            names = ([a.name for a in n.names] if isinstance(n, ast.Import) else
                     [n.module or ""] if isinstance(n, ast.ImportFrom) else [])
            if any(x.split(".")[0] in TOOLING_LIBRARIES for x in names):
                tooling.add(m)
    assert tooling, "no module uses the notebook machinery: the rule checks nothing"
    assert {m for m in tooling if layer(m) != "notebook"} == set()


def re_exports(mod: str, mods) -> list[str]:
    """Names a module imports from the package and never uses (nor lists in __all__)."""
    tree = _tree(mod, mods)
    imported = [(a.asname or a.name) for n in tree.body if isinstance(n, ast.ImportFrom)
                and ((n.module or "").startswith("andrea_edu") or n.level) for a in n.names]
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    for n in tree.body:
        if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in n.targets) \
                and isinstance(n.value, (ast.List, ast.Tuple)):
            used |= {e.value for e in n.value.elts
                     if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return [name for name in imported if name not in used]


@pytest.mark.parametrize("mod", [m for m in sorted(modules()) if layer(m) in ("figures", "notebook")
                                 and not _is_package(m, modules())])
def test_figures_and_tooling_re_export_nothing(mod):
    """The one-module-per-chapter rule once bred re-exports (a chapter module passing on shared
    helpers so that its notebook imported from one place): a figures or tooling module imports
    only what it uses, and a chapter imports a shared helper from where it lives."""
    assert not re_exports(mod, modules())


def test_the_re_export_finder_sees_a_planted_one(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("from andrea_edu.figures.kernel_source import excerpt, first_line\n"
                 "def f():\n    return first_line('v1', 'x')\n")
    assert re_exports("m", {"m": p}) == ["excerpt"]


def _first_line(doc: str) -> str:
    return doc.strip().splitlines()[0] if doc.strip() else ""


@pytest.mark.parametrize("mod", sorted(modules()))
def test_every_module_says_what_it_is(mod):
    doc = ast.get_docstring(_tree(mod)) or ""
    assert len(re.findall(r"[A-Za-z]{2,}", _first_line(doc))) >= 5, \
        f"{mod}: the docstring's first line should say what the module is, got {doc[:80]!r}"


@pytest.mark.parametrize("stem, title", sorted(chapter_titles().items()))
def test_a_chapter_module_names_its_chapter(stem, title):
    doc = ast.get_docstring(_tree(f"andrea_edu.figures.{stem}")) or ""
    assert short_title(title).lower() in " ".join(doc.split()).lower(), \
        f"andrea_edu/figures/{stem}.py's docstring does not name its chapter {title!r}"


def undescribed(doc: str, names) -> list[str]:
    """The module names that no line of `doc` describes: a line that starts with the name (or a
    comma-separated list holding it) followed by at least ten characters of description."""
    return [m for m in sorted(names) if not re.search(
        rf"^\s*(\S+,\s*)*{m}\b(,\s*\S+)*\s+\S.{{8,}}", doc, re.M)]


def test_a_module_named_only_in_passing_is_not_described():
    doc = "Tools.\n\n    slider    one plotting function, two front ends\n\nUses live and execute."
    assert undescribed(doc, ["slider", "live", "execute"]) == ["execute", "live"]


@pytest.mark.parametrize("sub", SUBPACKAGES)
def test_each_subpackage_says_what_it_holds_and_which_chapters_use_it(sub):
    doc = ast.get_docstring(ast.parse((PKG / sub / "__init__.py").read_text())) or ""
    named = {p.stem for p in (PKG / sub).glob("*.py")} - {"__init__", "__main__"}
    undescribed_ = undescribed(doc, named)
    assert not undescribed_, f"andrea_edu/{sub}/__init__.py does not describe {undescribed_} " \
                            f"(one line each: the name, then what it holds)"
    flat = " ".join(doc.split()).lower()
    chapters = [t for t in chapter_titles().values() if short_title(t).lower() in flat]
    assert chapters or "every chapter" in flat, \
        f"andrea_edu/{sub}/__init__.py names no chapter that uses it"


# ---------------------------------------------------------------- the book reads, the laboratory writes
LAB = "andrea_lab"  # what makes, writes and re-checks book/data: only scripts and tests import it
WRITERS = ("write_files_as_unit", "write_json_atomic", "remove_stray_temporaries",
           "seal_folder", "manifest_text", "write_results", "save_sweep", "save_timing",
           "save_run", "save_toy", "save_paths", "save_variant", "save_long")


def lab_reach(tree: ast.AST) -> list[str]:
    """What in a module's source reaches the laboratory: an import of andrea_lab (a statement,
    or importlib.import_module / __import__ of a name in it) or a call to one of its writers."""
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            found += [a.name for a in n.names if a.name.split(".")[0] == LAB]
        elif isinstance(n, ast.ImportFrom):
            if not n.level and (n.module or "").split(".")[0] == LAB:
                found.append(n.module or "")
        elif isinstance(n, ast.Call):
            f = n.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
                else None
            if name in WRITERS:
                found.append(f"{name}()")
            elif name in ("import_module", "__import__") and n.args and \
                    isinstance(n.args[0], ast.Constant) and \
                    str(n.args[0].value).split(".")[0] == LAB:
                found.append(str(n.args[0].value))
    return found


def test_the_lab_finder_sees_planted_faults():
    assert lab_reach(ast.parse("from andrea_lab.store import seal_folder")) == ["andrea_lab.store"]
    assert lab_reach(ast.parse("def f():\n    import andrea_lab.bench")) == ["andrea_lab.bench"]
    assert lab_reach(ast.parse("store.write_files_as_unit([(p, w)])")) == ["write_files_as_unit()"]
    assert lab_reach(ast.parse("with seal_folder(d):\n    pass")) == ["seal_folder()"]
    assert lab_reach(ast.parse("importlib.import_module('andrea_lab.make_sweep')")) == \
        ["andrea_lab.make_sweep"]
    assert lab_reach(ast.parse('"""made by andrea_lab.store.write_json_atomic"""')) == []
    assert lab_reach(ast.parse("from ..data import read_manifest")) == []


def test_no_book_module_imports_the_laboratory_or_calls_a_writer():
    bad = {m: lab_reach(_tree(m)) for m in modules()}
    bad = {m: f for m, f in bad.items() if f}
    assert not bad, ("andrea_edu reads committed data only (andrea_edu.data); what writes is the "
                     f"laboratory's (andrea_lab), which no andrea_edu module imports: {bad}")


def test_the_laboratory_is_installed_beside_the_book_and_no_chapter_imports_it():
    assert (ROOT / LAB / "__init__.py").is_file()
    assert f'"{LAB}*"' in (ROOT / "pyproject.toml").read_text()  # a package of the install
    for nb in sorted((ROOT / "book").glob("*.ipynb")):
        code = "\n".join("".join(c["source"]) for c in json.loads(nb.read_text())["cells"]
                         if c["cell_type"] == "code")
        assert not re.search(rf"\b(import|from)\s+{LAB}\b", code), nb.name


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
    shared = {m for m in modules() if m.startswith("andrea_edu.figures")} - CHAPTER_MODULES
    figs = {m for m in _notebook_imports(nb) if m.startswith("andrea_edu.figures")} - shared
    assert figs <= {f"andrea_edu.figures.{nb.stem}"}, figs
    assert (PKG / "figures" / f"{nb.stem}.py").is_file(), f"no andrea_edu/figures/{nb.stem}.py"


# ---------------------------------------------------------------- data.load's table: the one reach up
LOADER_LAYERS = ("heads", "bench", "pipeline")  # where a loader of committed data may live


def dispatch_table(tree: ast.AST) -> dict[str, tuple[str, str]]:
    """{kind: (module, function)} of data.py's LOADERS, read from its source: the loaders
    `load(kind)` imports by name when called (the records they return are defined above the
    core, so the table names them rather than importing them)."""
    for n in ast.walk(tree):
        if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", None) == "LOADERS":
            assert isinstance(n.value, ast.Dict)
            out: dict[str, tuple[str, str]] = {}
            for k, v in zip(n.value.keys, n.value.values):
                assert isinstance(k, ast.Constant) and isinstance(v, ast.Call), ast.dump(v)
                file, module, function = (str(ast.literal_eval(a)) for a in v.args[:3])
                out[str(k.value)] = (module, function)
            return out
    raise AssertionError("andrea_edu/data.py has no LOADERS table")


def dynamic_imports(tree: ast.AST) -> list[str]:
    """The argument of every importlib.import_module / __import__ call, as source."""
    return [ast.unparse(n.args[0]) for n in ast.walk(tree) if isinstance(n, ast.Call)
            and (getattr(n.func, "attr", None) or getattr(n.func, "id", None))
            in ("import_module", "__import__") and n.args]


def loader_problems(table: dict[str, tuple[str, str]], tree: ast.AST) -> list[str]:
    """What is wrong with data.py's reach above the core: a loader outside heads/bench/
    pipeline or missing, a loader module that reaches the laboratory, or an import_module of
    anything but a table entry's module (`k.module`)."""
    mods = modules()
    bad = []
    for kind, (module, function) in table.items():
        if module not in mods or layer(module) not in LOADER_LAYERS:
            bad.append(f"{kind}: {module} is not a module of {LOADER_LAYERS}")
            continue
        t = _tree(module)
        if not any(isinstance(n, ast.FunctionDef) and n.name == function for n in t.body):
            bad.append(f"{kind}: {module} defines no {function}")
        if lab_reach(t):
            bad.append(f"{kind}: {module} reaches the laboratory ({lab_reach(t)})")
    bad += [f"import_module({a})" for a in dynamic_imports(tree) if a != "k.module"]
    return bad


def test_data_load_reaches_above_the_core_only_through_its_table():
    """andrea_edu.data is core, yet `load(kind)` returns heads', bench's and the pipeline's
    records: it imports their read-only loaders by the names in LOADERS when called. That is
    its one reach above the core, stated here: every name in the table is a loader function
    in heads, bench or pipeline (never a writer, never the laboratory), and data.py imports
    nothing else dynamically (statically it imports the core only: the layer rule)."""
    tree = _tree("andrea_edu.data")
    table = dispatch_table(tree)
    assert {"sweep", "realtext_run", "bench_headdim", "pipeline_timing"} <= set(table)
    assert loader_problems(table, tree) == []
    import andrea_edu.data as D
    assert {k: (v.module, v.function) for k, v in D.LOADERS.items()} == table


def test_the_table_rule_catches_planted_faults():
    tree = _tree("andrea_edu.data")
    table = dispatch_table(tree)
    up = {**table, "x": ("andrea_edu.figures.viz", "plain_log")}        # a loader in figures
    gone = {**table, "x": ("andrea_edu.heads.sweep", "no_such_loader")}
    assert loader_problems(up, tree) == ["x: andrea_edu.figures.viz is not a module of "
                                         "('heads', 'bench', 'pipeline')"]
    assert loader_problems(gone, tree) == ["x: andrea_edu.heads.sweep defines no no_such_loader"]
    sneak = ast.parse("import importlib\nimportlib.import_module('andrea_edu.figures.viz')")
    assert loader_problems(table, sneak) == ["import_module('andrea_edu.figures.viz')"]


def direct_reads(code: str, loaders: set[str]) -> list[str]:
    """Calls in a chapter's code of a kind's own loader (`load_sweep(...)`, `bench.load_results
    (...)`), which the chapter should reach through `andrea_edu.data.load(kind)`."""
    found = []
    for n in ast.walk(ast.parse(code)):
        if isinstance(n, ast.Call):
            f = n.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
                else None
            if name in loaders:
                found.append(name)
    return found


def _chapter_code(nb: Path) -> str:
    cells = json.loads(nb.read_text())["cells"]
    return "\n".join("\n".join(l for l in "".join(c["source"]).splitlines()
                               if not l.lstrip().startswith(("%", "!")))
                     for c in cells if c["cell_type"] == "code")


def test_chapters_read_committed_data_through_data_load():
    table = dispatch_table(_tree("andrea_edu.data"))
    loaders = {fn for _, fn in table.values()} | {"read_results_file"}
    assert direct_reads("x = bench.load_results('headdim')\ny = load('sweep')", loaders) == \
        ["load_results"]  # the finder sees a planted direct read
    bad = {nb.stem: direct_reads(_chapter_code(nb), loaders) for nb in CHAPTERS}
    assert not {k: v for k, v in bad.items() if v}, bad


def _classes(root: Path = ROOT, packages=("andrea_edu", "andrea_lab")) -> dict[str, list[str]]:
    """{class name: [files defining it]} over the packages' sources."""
    out: dict[str, list[str]] = {}
    for pkg in packages:
        for p in sorted((root / pkg).rglob("*.py")):
            for n in ast.walk(ast.parse(p.read_text())):
                if isinstance(n, ast.ClassDef):
                    out.setdefault(n.name, []).append(p.relative_to(root).as_posix())
    return out


def test_no_class_name_is_defined_twice():
    """Issue 37 item 3: one class per name across both packages (a Trace or a Step that means
    two things makes a reader ask which)."""
    twice = {k: v for k, v in _classes().items() if len(v) > 1}
    assert not twice, twice


def test_the_class_finder_sees_a_planted_twin(tmp_path):
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "m.py").write_text("class Twin:\n    pass\n")
    assert _classes(tmp_path, ("a", "b"))["Twin"] == ["a/m.py", "b/m.py"]


def _module_names(root: Path = ROOT, packages=("andrea_edu", "andrea_lab")) -> dict[str, set[str]]:
    """{module file name: packages holding one} (package __init__/__main__ files aside)."""
    out: dict[str, set[str]] = {}
    for pkg in packages:
        for p in (root / pkg).rglob("*.py"):
            if p.stem not in ("__init__", "__main__"):
                out.setdefault(p.stem, set()).add(pkg)
    return out


def test_no_module_name_is_in_both_packages():
    """Issue 37 item 3: andrea_lab's commands are named for what they make (make_sweep beside
    the book's heads.sweep), so an import never leaves a reader asking which one."""
    both = sorted(k for k, v in _module_names().items() if len(v) > 1)
    assert not both, both


def test_the_module_finder_sees_a_planted_pair(tmp_path):
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "sweep.py").write_text("")
    assert _module_names(tmp_path, ("a", "b"))["sweep"] == {"a", "b"}
