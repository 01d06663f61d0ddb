"""A kernel's tile schedule read from its .cu text: the K/V tiles each block visits, found by
running the kernel's own loop headers and the `int` definitions they depend on, in Python.

    schedule(spec, text, T, causal, head_dim, grid_y, block_y) -> [(q0, rows, [(k0, keys)])]
    emulator_schedule(trace) -> {(blockIdx.x, blockIdx.y): [(q0, q_stop, [(k_start, k_stop)])]}
    assert_emulator_follows_cu(spec, text, trace)

No formula of the schedule is written here: the query tile comes from the kernel's
`for (int q0 = ...; ...; ...)` header or its `const int q0 = ...;` line, the K/V tiles from the
`for` loop whose body starts at a `k0` (its header, and `const int k0 = ...;` when it counts
tiles), the causal early stop from whatever the kernel writes for the loop's bound (kv_end,
n_tiles); tile sizes from the file's constexprs (and a template struct's, V3Shape<HD>::BQ). A
.cu whose loops change changes this schedule, and the emulator's trace must follow it.
Only what these loop lines use is understood: ints, + - * / %, ?:, min/max, &&, ||, !.
"""
from __future__ import annotations

import re

from andrea_edu.kernels.spec import parse_constants

_DEF = re.compile(r"^\s*(?:static\s+)?(?:const|constexpr)\s+int\s+(\w+)\s*=\s*([^;]+);")
_FOR = re.compile(r"^\s*for\s*\(\s*int\s+(\w+)\s*=\s*([^;]+);\s*([^;]+);\s*([^)]+)\)")


def _match(rx: re.Pattern, line: str) -> re.Match:
    m = rx.match(line)
    assert m is not None, line
    return m


def _code(line: str) -> str:
    return line.split("//")[0]


def _kernel_body(spec, text: str) -> list[str]:
    """The code lines of the __global__ function spec.kernel, its parameters to its closing
    brace (the first line that is exactly "}")."""
    lines = text.splitlines()
    start = next(i for i, t in enumerate(lines) if re.match(rf"^{spec.kernel}\(", t))
    end = next(i for i in range(start, len(lines)) if lines[i] == "}")
    return [_code(t) for t in lines[start:end]]


def _template_params(text: str, kernel: str) -> list[str]:
    """The names of the kernel template's int parameters (CHUNKS; HD; HD, RD for the padded
    v3), in order: what KernelSpec.template_args gives values for."""
    m = re.search(r"template <([^>]*)>\s*\n__global__[^\n]*\n" + kernel + r"\(", text)
    assert m is not None, f"no template line above {kernel}("
    ints = [p.split("=")[0].split()[-1] for p in m.group(1).split(",")
            if p.split()[0] == "int"]
    assert ints, m.group(1)
    return ints


def _py(expr: str, text: str, env: dict) -> str:
    """A C int expression as Python: templates' struct members inlined, ?: and logic rewritten."""
    def member(m):
        name, arg, field = m.group(1), m.group(2), m.group(3)
        body = re.search(rf"template <int (\w+)> struct {name} \{{(.*?)\n\}};", text, re.S)
        assert body is not None, f"no template struct {name}"
        local = dict(env, **{body.group(1): env[arg]})
        for n, e in re.findall(r"static constexpr int (\w+) = ([^;]+);", body.group(2)):
            local[n] = _eval(e, text, local)
        return str(local[field])

    expr = re.sub(r"(\w+)<(\w+)>::(\w+)", member, expr)
    expr = expr.replace("gridDim.y", "gridDim_y").replace("blockIdx.y", "blockIdx_y")
    expr = expr.replace("&&", " and ").replace("||", " or ")
    expr = re.sub(r"!(?!=)", " not ", expr).replace("/", "//")
    m = re.fullmatch(r"\s*(.+?)\s*\?\s*(.+?)\s*:\s*(.+?)\s*", expr)
    if m:
        expr = f"(({m.group(2)}) if ({m.group(1)}) else ({m.group(3)}))"
    return expr


def _eval(expr: str, text: str, env: dict) -> int:
    return int(eval(_py(expr, text, env), {"__builtins__": {}, "min": min, "max": max},
                    dict(env)))


def _top_level_comma(expr: str) -> bool:
    depth = 0
    for ch in expr:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            return True
    return False


def _define(lines: list[str], text: str, env: dict) -> None:
    """Evaluate, in order, every `const int NAME = ...;` of `lines` whose names are known (the
    others, e.g. thread indices, are not part of the schedule)."""
    for t in lines:
        m = _DEF.match(t)
        if m and not _top_level_comma(m.group(2)):     # not `int a = .., b = ..;`
            try:
                env[m.group(1)] = _eval(m.group(2), text, env)
            except (NameError, SyntaxError, KeyError, TypeError):
                pass


def _loop(header: re.Match, text: str, env: dict, limit: int = 10_000):
    """The values the for loop's variable takes (header: _FOR's match), and its step."""
    var, init, cond, inc = header.groups()
    x = _eval(init, text, env)

    def step(x):
        m = re.fullmatch(rf"\s*{var}\s*\+=\s*(.+?)\s*", inc)
        if m:
            return x + _eval(m.group(1), text, env)
        assert re.fullmatch(rf"\s*(\+\+{var}|{var}\+\+)\s*", inc), inc
        return x + 1

    out = []
    while eval(_py(cond, text, {**env, var: x}), {"__builtins__": {}, "min": min, "max": max},
               {**env, var: x}):
        out.append(x)
        x = step(x)
        assert len(out) < limit
    return out, step(0)


def schedule(spec, text: str, T: int, causal: bool, head_dim: int, grid_y: int,
             block_y: int) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """[(q0, query rows, [(k0, keys of the tile)...])] of block (x, block_y) of a grid with
    gridDim.y = grid_y, from the .cu `text` of kernel spec.kernel: its loops, run in Python."""
    consts = parse_constants(text, spec.source)
    body = _kernel_body(spec, text)
    env = dict(consts, seq_len=T, head_dim=head_dim, causal=int(causal), gridDim_y=grid_y,
               blockIdx_y=block_y)
    args = spec.template_args(spec.tile_of(head_dim))
    names = _template_params(text, spec.kernel)
    env.update(zip(names, args))
    for name in names[len(args):]:                         # defaulted (RD = HD): the width
        env[name] = args[0]
    fors = [(i, _match(_FOR, t)) for i, t in enumerate(body) if _FOR.match(t)]
    q_at = next((i for i, m in fors if m.group(1) == "q0"), None)
    q_def = next((i for i, t in enumerate(body) if re.match(r"^\s*const int q0 = ", t)), None)
    assert (q_at is None) != (q_def is None), "the kernel's query tile: one for loop or one line"
    q_line = q_at if q_at is not None else q_def
    assert q_line is not None
    _define(body[:q_line], text, env)
    if q_at is not None:                                   # the block walks every query tile
        q0s, rows = _loop(_match(_FOR, body[q_at]), text, env)
    else:                                                  # one query tile per blockIdx.y
        expr = _match(_DEF, body[q_line]).group(2)
        q0s = [_eval(expr, text, env)]
        rows = abs(_eval(expr, text, {**env, "blockIdx_y": block_y + 1}) - q0s[0])
    # the K/V loop: the first for loop after q0 whose variable is k0 or whose body opens with
    # `const int k0 = ...` (a loop that counts tiles)
    k_at = next(i for i, m in fors if i > q_line and (
        m.group(1) == "k0" or re.match(r"^\s*const int k0 = ", body[i + 1])))
    out = []
    for q0 in q0s:
        local = dict(env, q0=q0)
        _define(body[q_line + 1:k_at], text, local)
        values, keys = _loop(_match(_FOR, body[k_at]), text, local)   # keys: the loop's step
        var = _match(_FOR, body[k_at]).group(1)
        k0s = values
        if var != "k0":                                    # k0 = j * BK: tiles counted by j
            expr = _match(_DEF, body[k_at + 1]).group(2)
            k0s = [_eval(expr, text, {**local, var: j}) for j in values]
            keys = _eval(expr, text, {**local, var: 1}) - _eval(expr, text, {**local, var: 0})
        out.append((q0, rows, [(k0, keys) for k0 in k0s]))
    return out


def emulator_schedule(trace) -> dict:
    """{(blockIdx.x, blockIdx.y): [(q_start, q_stop, [(k_start, k_stop), ...]), ...]}."""
    return {blk.grid_index: [(t.q_start, t.q_stop, [(s.k_start, s.k_stop) for s in t.steps])
                             for t in blk.q_tiles] for blk in trace.blocks}


def assert_emulator_follows_cu(spec, text: str, trace) -> None:
    """Every block of `trace` (emulate(..., kernel=spec.version)) took the query tiles and
    staged the K/V tiles, in order, that the .cu `text` gives that block; rows and keys past
    T are the kernel's zero-filled tail (clipped in the trace); every (b, h)'s query rows are
    covered once."""
    B, nh, T, hs = trace.shape
    got = emulator_schedule(trace)
    assert len(got) == trace.grid[0] * trace.grid[1], "one record per block of the grid"
    covered: dict[int, list[int]] = {}
    for (x, y), tiles in got.items():
        want = [(q0, min(q0 + rows, T), [(k0, min(k0 + keys, T)) for k0, keys in kv])
                for q0, rows, kv in schedule(spec, text, T, trace.causal, hs, trace.grid[1], y)
                if q0 < T]
        assert tiles == want, (spec.version, (x, y), tiles, want)
        for q_start, q_stop, _ in tiles:
            covered.setdefault(x, []).extend(range(q_start, q_stop))
    assert all(sorted(rows) == list(range(T)) for rows in covered.values()), "rows once each"
    assert sorted(covered) == list(range(B * nh))
