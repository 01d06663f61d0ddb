"""How much of the library a chapter reaches: the AST call-closure behind issue 37's target.

Run `python tests/library_reach.py` for the per-chapter table and the packages' line counts.

Method (static, on the source; nothing is imported or run):
1. Every module of `andrea_edu` and `andrea_lab` is parsed. Its *definitions* are its top-level
   functions and classes (a class with all its methods, as one definition); its *imports* map a
   local name to a module (`import a.b as m`, `from a import b` when `a.b` is a module) or to a
   name in another module (`from a.b import f`), followed through re-exports. An import written
   inside a function or method counts as the module's too (when no module-level name shadows it),
   so a lazy import reaches what it names like any other.
2. A chapter's *roots* are the library names its code cells use: every name bound by an import
   from the library (`from andrea_edu.x import f` -> f; `import andrea_edu.x as m` with `m.f`
   used -> f).
3. From the roots the closure follows, inside each reached definition, every name and
   `module.attr` it uses that resolves (through that module's own definitions and imports) to a
   library definition. A module-level assignment to a name (`LOADERS = {...}`, `_RING = Ring()`,
   a table of presets) is a definition too: a reached function that uses the name reaches its
   lines and what its value names. `data.load("kind", ...)` with a literal kind (in a chapter or
   in the library) reaches the loader that `data.LOADERS` names for that kind (the table names
   loaders by module and function strings); a kind held in a variable reaches no loader. Other
   module-level statements are not counted, nor code reached only through other dynamic
   dispatch (a registry holding functions reaches what its module's definitions name, since the
   registry's spec modules are imported by name).
4. A chapter's *reach* is the number of distinct source lines (first to last line of each
   definition, decorators and docstring included) of the definitions reached.
Issue 37 aims at a median reach of at most 1,500 lines.
"""
from __future__ import annotations

import ast
import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("andrea_edu", "andrea_lab")


@dataclass
class Module:
    name: str
    path: Path
    defs: dict[str, tuple[int, int, ast.AST]] = field(default_factory=dict)
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # local -> (mod, attr)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _resolve_relative(mod: str, is_pkg: bool, level: int, target: str | None) -> str:
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([target] if target else []))


def index() -> dict[str, Module]:
    mods: dict[str, Module] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            m = Module(_module_name(path), path)
            tree = ast.parse(path.read_text(encoding="utf-8"))
            is_pkg = path.name == "__init__.py"
            top = set(map(id, tree.body))
            nested = [n for n in ast.walk(tree)
                      if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in top]
            for node in list(tree.body) + nested:
                put = m.imports.__setitem__ if id(node) in top else m.imports.setdefault
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                    m.defs[node.name] = (start, node.end_lineno or node.lineno, node)
                elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for t in targets:
                        if isinstance(t, ast.Name) and t.id != "__all__":
                            m.defs[t.id] = (node.lineno, node.end_lineno or node.lineno, node)
                elif isinstance(node, ast.Import):
                    for a in node.names:
                        if a.name.split(".")[0] in PACKAGES:
                            put(a.asname or a.name.split(".")[0],
                                (a.name if a.asname else a.name.split(".")[0], None))
                elif isinstance(node, ast.ImportFrom):
                    src = (_resolve_relative(m.name, is_pkg, node.level, node.module)
                           if node.level else node.module or "")
                    if src.split(".")[0] in PACKAGES:
                        for a in node.names:
                            put(a.asname or a.name, (src, a.name))
            mods[m.name] = m
    return mods


def resolve(mods: dict[str, Module], mod: str, name: str, depth: int = 0
            ) -> tuple[str, str] | str | None:
    """(module, definition) that `name` in `mod` names, or a module name, or None."""
    if depth > 20 or mod not in mods:
        return None
    m = mods[mod]
    if name in m.defs:
        return (mod, name)
    if name in m.imports:
        src, attr = m.imports[name]
        if attr is None:
            return src if src in mods else None
        if f"{src}.{attr}" in mods:
            return f"{src}.{attr}"
        return resolve(mods, src, attr, depth + 1)
    if f"{mod}.{name}" in mods:
        return f"{mod}.{name}"
    return None


def _uses(node: ast.AST) -> list[tuple[str, ...]]:
    """Names and dotted attribute chains a piece of code uses."""
    out: list[tuple[str, ...]] = []
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.append((n.id,))
        elif isinstance(n, ast.Attribute):
            chain: list[str] = []
            cur: ast.AST = n
            while isinstance(cur, ast.Attribute):
                chain.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name):
                out.append(tuple([cur.id] + chain[::-1]))
    return out


def _targets(mods, mod: str, use: tuple[str, ...]) -> set[tuple[str, str]]:
    got = resolve(mods, mod, use[0])
    for attr in use[1:]:
        if isinstance(got, str):  # a module: follow the attribute into it
            got = resolve(mods, got, attr)
        else:
            break
    return {got} if isinstance(got, tuple) else set()


LOAD = ("andrea_edu.data", "load")


def _loaders(mods) -> dict[str, tuple[str, str]]:
    """kind -> (module, function) of data.LOADERS, read from its source."""
    d = mods.get(LOAD[0])
    entry = d.defs.get("LOADERS") if d else None
    value = getattr(entry[2], "value", None) if entry else None
    out: dict[str, tuple[str, str]] = {}
    for k, v in zip(getattr(value, "keys", []), getattr(value, "values", [])):
        args = [a.value for a in getattr(v, "args", [])
                if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if isinstance(k, ast.Constant) and isinstance(k.value, str) and len(args) >= 3:
            out[k.value] = (args[1], args[2])
    return out


def _loaded(mods, mod: str, node: ast.AST, table: dict[str, tuple[str, str]]
            ) -> set[tuple[str, str]]:
    """The loaders (`table`: _loaders) that `load("kind", ...)` calls in `node` (code of module
    `mod`) reach."""
    out = set()
    for n in ast.walk(node):
        if not (isinstance(n, ast.Call) and n.args and isinstance(n.args[0], ast.Constant)):
            continue
        func = _uses(n.func)
        if func and LOAD in _targets(mods, mod, func[0]) and n.args[0].value in table:
            m, f = table[n.args[0].value]
            if m in mods and f in mods[m].defs:
                out.add((m, f))
    return out


def closure(mods: dict[str, Module], roots: set[tuple[str, str]]) -> set[tuple[str, str]]:
    seen: set[tuple[str, str]] = set()
    todo = list(roots)
    table = _loaders(mods)
    while todo:
        mod, name = todo.pop()
        if (mod, name) in seen:
            continue
        seen.add((mod, name))
        node = mods[mod].defs[name][2]
        for use in _uses(node):
            todo.extend(_targets(mods, mod, use) - seen)
        todo.extend(_loaded(mods, mod, node, table) - seen)
    return seen


def lines(mods, defs: set[tuple[str, str]]) -> int:
    return sum(mods[m].defs[n][1] - mods[m].defs[n][0] + 1 for m, n in defs)


def chapter_roots(mods, nb_path: Path) -> set[tuple[str, str]]:
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    src = "\n".join(
        "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln
                  for ln in ("".join(c["source"]) if isinstance(c["source"], list)
                             else c["source"]).splitlines())
        for c in nb["cells"] if c["cell_type"] == "code")
    try:
        tree = ast.parse(src)
    except SyntaxError:
        tree = ast.Module(body=[], type_ignores=[])
    fake = Module("__chapter__", nb_path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in PACKAGES:
                    fake.imports[a.asname or a.name.split(".")[0]] = (
                        a.name if a.asname else a.name.split(".")[0], None)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PACKAGES:
            for a in node.names:
                fake.imports[a.asname or a.name] = (node.module or "", a.name)
    mods = dict(mods)
    mods["__chapter__"] = fake
    roots: set[tuple[str, str]] = set()
    for use in _uses(tree):
        roots |= _targets(mods, "__chapter__", use)
    return roots | _loaded(mods, "__chapter__", tree, _loaders(mods))


def package_lines() -> dict[str, int]:
    return {pkg: sum(len(p.read_text(encoding="utf-8").splitlines())
                     for p in (ROOT / pkg).rglob("*.py")) for pkg in PACKAGES}


def reach_table(book: Path | None = None) -> list[tuple[str, int]]:
    mods = index()
    book = book or ROOT / "book"
    return [(p.stem, lines(mods, closure(mods, chapter_roots(mods, p))))
            for p in sorted(book.glob("*.ipynb"))]


if __name__ == "__main__":
    rows = reach_table(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
    print("| chapter | library lines reached |\n|---|---:|")
    for name, n in rows:
        print(f"| {name} | {n:,} |")
    print(f"| **median** | {statistics.median(n for _, n in rows):,.0f} |")
    print("\nPython lines per package:", package_lines())
