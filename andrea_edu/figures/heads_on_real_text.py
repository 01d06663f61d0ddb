"""Figures and formatted text of the chapter "Heads on real text (optional deep-dive)".

Draws and formats what `andrea_edu.heads.text_corpus`, `.text_training`, `.measures`,
`.detectors` and `.circuits` computed; decides nothing (verdicts come from `detectors`).
"""
from __future__ import annotations

import html

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import HTML, display

from andrea_edu.figures.head_figures import attention_window, head_name, window_keys
from andrea_edu.figures.viz import caption, head_color, heatmap, table
from andrea_edu.heads import detectors as D, measures as M
from andrea_edu.heads import text_corpus as tc
from andrea_edu.heads.batch import Batch

PATTERN_COLORS = {"all": "#555555", "previous token": "#1f77b4", "matching bracket": "#d62728",
                  "recent identifier": "#2ca02c"}


# ---------------------------------------------------------------- the corpus
def show_label_counts(rows: list[dict]) -> None:
    """Table `measures.label_counts(batch)`: each pattern's labelled queries, their share of the
    positions and the score of uniform attention."""
    table(["pattern", "kind (source)", "labelled queries", "share of positions",
           "score of uniform attention"],
          [[tc.PATTERNS[p], tc.PATTERN_KIND[p], f"{rows[p]['queries']:,}",
            f"{rows[p]['share']:.1%}", f"{rows[p]['baseline']:.4f}"] for p in tc.PATTERNS])


def example_html(corpus: tc.Corpus, batch: Batch, b: int, start: int, length: int) -> str:
    """One window as text: each labelled bracket query and its opener, each identifier query and
    its key, coloured by pattern (previous token is every position, so it is not drawn)."""
    chars = corpus.decode(batch.idx[b, start: start + length])
    style: dict[int, list[str]] = {i: [] for i in range(length)}
    for p, css in ((tc.BRACKET, "background:#f6c6c6"), (tc.IDENT, "border-bottom:2px solid #2ca02c")):
        for q, k in window_keys(batch, p, b, start, length):
            style[q].append(css)
            style[k].append(css + ";outline:1px solid " + PATTERN_COLORS[tc.PATTERNS[p]])
    out = []
    for i, c in enumerate(chars):
        s = html.escape(c) if c != "\n" else "↵<br>"
        out.append(f'<span style="{";".join(style[i])}">{s}</span>' if style[i] else s)
    return ('<pre style="font-size:12px;line-height:1.6;white-space:pre-wrap">' + "".join(out)
            + "</pre>")


def pick_example(batch: Batch, length: int = 48) -> tuple[int, int]:
    """A window (b, start) of `length` holding the most bracket and identifier labels whose keys
    lie inside it (deterministic)."""
    best, arg = -1, (0, 0)
    B, T = batch.idx.shape
    for b in range(B):
        for start in range(0, T - length + 1, 8):
            n = [len(window_keys(batch, p, b, start, length)) for p in (tc.BRACKET, tc.IDENT)]
            if min(n) * 10 + sum(n) > best:
                best, arg = min(n) * 10 + sum(n), (b, start)
    return arg


def show_example(corpus, batch, b, start, length) -> None:
    display(HTML(example_html(corpus, batch, b, start, length)))


# ---------------------------------------------------------------- training
def fig_training(run):
    s = run.settings
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(11, 3.8))
    tl = np.asarray(run.train_loss)
    k = 25
    a0.plot(np.arange(len(tl)), tl, color="#bbbbbb", lw=0.6, label="training batch")
    a0.plot(np.arange(k - 1, len(tl)), np.convolve(tl, np.ones(k) / k, "valid"), color="k", lw=1,
            label=f"training, mean of {k} steps")
    for i, key in enumerate(D.LOSS_KEYS):
        a0.plot(run.eval_steps, run.eval_loss[:, i], color=PATTERN_COLORS[key], lw=1.8,
                marker="o", ms=3, label=f"validation: {key}")
    a0.set_xlabel("training step")
    a0.set_ylabel("next-character loss (nats)")
    a0.set_ylim(0, None)
    a0.legend(fontsize=7)
    base = np.asarray(run.baseline)
    for p in tc.PATTERNS:
        best = np.nanmax(run.scores[:, p].reshape(len(run.eval_steps), -1), axis=1) / base[p]
        a1.plot(run.eval_steps, best, color=PATTERN_COLORS[tc.PATTERNS[p]], marker="o", ms=3,
                label=tc.PATTERNS[p])
    a1.axhline(D.FOUND_RATIO, color="k", ls="--", lw=0.8)
    a1.text(0, D.FOUND_RATIO * 1.05, f"found: {D.FOUND_RATIO:g}x uniform", fontsize=7)
    a1.set_yscale("log")
    a1.set_xlabel("training step")
    a1.set_ylabel("best head's score / uniform attention's")
    a1.legend(fontsize=7)
    fig.suptitle(f"Training on the standard library ({s.n_layer} layers x {s.n_head} heads, "
                 f"d_model {s.d_model}, {s.steps} steps of {s.batch_size} x {s.seq_len} characters)",
                 fontsize=10)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- detectors
def fig_ratios(scores, baseline):
    s = np.asarray(scores) / np.asarray(baseline)[:, None, None]  # (3, L, nh)
    L, nh = s.shape[1:]
    fig, axes = plt.subplots(1, 3, figsize=(4.2 * 3, 1.1 * L + 1.6))
    for p, ax in zip(tc.PATTERNS, axes):
        heatmap(ax, s[p], [f"H{h}" for h in range(nh)], [f"L{l}" for l in range(L)],
                cmap="Blues", vmin=0, vmax=max(D.FOUND_RATIO * 2, np.nanmax(s)), fmt="{:.1f}",
                colorbar=False, title=f"{tc.PATTERNS[p]}: score / uniform")
        for l in range(L):
            for h in range(nh):
                if s[p, l, h] >= D.FOUND_RATIO:
                    ax.add_patch(plt.Rectangle((h - 0.5, l - 0.5), 1, 1, fill=False,
                                               ec=PATTERN_COLORS[tc.PATTERNS[p]], lw=2))
    caption(fig, f"framed: >= {D.FOUND_RATIO:g}x uniform")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def show_summary(rows) -> None:
    table(["pattern", "best head", "score", "uniform", "ratio", f"margin to {D.FOUND_RATIO:g}x",
           "verdict", "its ablation (nats, ± s.e.)", "head whose ablation hurts most"],
          [[r["pattern"], head_name(r["head"]), f"{r['score']:.3f}", f"{r['baseline']:.4f}",
            f"{r['ratio']:.1f}x", f"{r['margin']:+.3f}", r["verdict"],
            f"+{r['ablation']:.3f} ± {r['ablation_se']:.3f}",
            f"{head_name(r['carrier'])} (+{r['carrier_ablation']:.3f} ± {r['carrier_se']:.3f})"]
           for r in rows])


def _window_chars(corpus, batch, b, start, length) -> list[str]:
    """The window's characters as tick labels (space and newline made visible)."""
    chars = corpus.decode(batch.idx[b, start:start + length])
    return [{" ": "␣", "\n": "↵"}.get(c, c) for c in chars]


def fig_heads_on_example(maps, corpus, batch, heads, b, start, length):
    """The best head of each pattern on one window: rows queries, columns keys; circles mark the
    key each labelled query's pattern designates."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.6))
    sl, toks = slice(start, start + length), _window_chars(corpus, batch, b, start, length)
    for (p, name), ax in zip(tc.PATTERNS.items(), axes):
        l, h = heads[p]
        circles = [(PATTERN_COLORS[name], window_keys(batch, p, b, start, length), 30, None)]
        attention_window(ax, maps[l, b, h, sl, sl], toks, circles)
        ax.set_title(f"{name}: head L{l}H{h}", fontsize=9, color=head_color(h))
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.tight_layout()
    return fig


def fig_one_head(maps, corpus, batch, lh, b, start, length, scores, baseline):
    """One head (the slider's frame): its attention on the window, every pattern's designated
    keys marked, its three score ratios in the title."""
    l, h = lh
    fig, ax = plt.subplots(figsize=(6.2, 6.0))
    sl = slice(start, start + length)
    circles = [(PATTERN_COLORS[name], window_keys(batch, p, b, start, length), 26 if p else 10, name)
               for p, name in tc.PATTERNS.items()]
    attention_window(ax, maps[l, b, h, sl, sl], _window_chars(corpus, batch, b, start, length), circles)
    r = np.asarray(scores)[:, l, h] / np.asarray(baseline)
    ax.set_title(f"L{l}H{h}: " + ", ".join(f"{tc.PATTERNS[p]} {r[p]:.1f}x" for p in tc.PATTERNS),
                 fontsize=8, color=head_color(h))
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.legend(fontsize=6, loc="upper right")
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- circuits
def fig_positional(P, title: str, n: int = 24):
    fig, ax = plt.subplots(figsize=(4.6, 4.2))
    heatmap(ax, P[:n, :n], cmap="Greys", vmin=0, vmax=1, annotate=False, colorbar=True,
            title=title, xlabel="key position", ylabel="query position")
    fig.tight_layout()
    return fig


def fig_ov(M, labels, title: str):
    m = np.asarray(M, dtype=float)
    m = m - m.mean(axis=1, keepdims=True)  # a constant per row does not change a softmax
    fig, ax = plt.subplots(figsize=(5.4, 4.8))
    v = float(np.abs(m).max())
    heatmap(ax, m, labels, labels, cmap="RdBu_r", vmin=-v, vmax=v, annotate=False,
            title=title, xlabel="logit raised (output token)", ylabel="token attended to")
    fig.tight_layout()
    return fig


def show_circuit_table(real, pos, ov_tab, chance: float, what: str) -> None:
    """real, pos: (L, nh, 3) weight on keys t, t-1, t-2 (measured attention; positional QK);
    ov_tab: (L, nh, 2) copy rate and eigenvalue copying score."""
    L, nh, _ = pos.shape
    f = lambda v: " / ".join(f"{x:.2f}" for x in v)  # noqa: E731
    table(["head", "attention on t / t-1 / t-2 (measured)", "positional QK on t / t-1 / t-2",
           f"OV copy rate ({what}; chance {chance:.3f})", "OV eigenvalue copying score"],
          [[f"L{l}H{h}", f(real[l, h]), f(pos[l, h]), f"{ov_tab[l, h, 0]:.0%}",
            f"{ov_tab[l, h, 1]:+.2f}"] for l in range(L) for h in range(nh)])


# ---------------------------------------------------------------- checking the source
def _gpt2_rows(scores, base) -> list[list[str]]:
    s = np.asarray(scores)
    rows = []
    for p in tc.PATTERNS:
        l, h = np.unravel_index(np.nanargmax(s[p]), s[p].shape)
        rows.append([tc.PATTERNS[p], f"L{l}H{h}", f"{s[p, l, h]:.3f}", f"{base[p]:.4f}",
                     f"{s[p, l, h] / base[p]:.1f}x",
                     f"{int((s[p] >= D.FOUND_RATIO * base[p]).sum())} of {s[p].size}"])
    return rows


def show_gpt2_scores(scores, base) -> None:
    """GPT-2 small's best head per pattern, as a table (when the laboratory measured it)."""
    table(["pattern", "best head of GPT-2 small", "score", "uniform", "ratio",
           f"heads at >= {D.FOUND_RATIO:g}x"], _gpt2_rows(scores, base))


def source_rows(rows, verdict: str, ids: dict, rep, tol: float, gpt2=None):
    """The "Checking the source" rows of this chapter, (label, measured, verdict, key, scale):
    the small model's three patterns (`rows`: TextRun.summary; `verdict`:
    detectors.claim_verdict), its semantic pattern read the source's way (attention anywhere on
    the earlier occurrence, `ids`: induction.identifier_readings) beside induction (`rep`:
    induction.measure_repeats), and GPT-2 small's best heads when it was measured (`gpt2`:
    (scores, baseline, verdict)). The small model gives its own reading as verdict, never "does
    not hold" (a model trained for minutes cannot refute a claim about trained transformers:
    "not observed here" instead); its rows carry the claim's key, so the verdicts page shows
    them as unable to decide, and GPT-2's row (scale "trained") decides."""
    from andrea_edu.figures.verdicts import TRAINED_TRANSFORMERS_SHOW_HEADS as KEY
    from andrea_edu.heads.verdict_words import CAVEAT, DOES_NOT_HOLD, HOLDS, NOT_OBSERVED

    small = NOT_OBSERVED if verdict == DOES_NOT_HOLD else verdict
    out = [("Pattern heads, this model", "; ".join(
        f"{r['pattern']} {head_name(r['head'])} {r['ratio']:.1f}x ({r['verdict']})" for r in rows),
        small, KEY, "")]
    s, u, _ = ids["span"]
    l, h = np.unravel_index(np.argmax(s), s.shape)
    v = D.verdict(float(s[l, h]), u, tol)
    found, lh, ratio = induction_call(rep)
    out.append(("Most recent named entity, this model", (
        f"earlier occurrence L{l}H{h} {s[l, h] / u:.1f}x ({v}); induction {head_name(lh)} "
        f"{ratio:.1f}x, 2nd copy {rep['first_loss'] - rep['second_loss']:+.2f} nats "
        f"({'found' if found else 'not found'})"),
        {"found": HOLDS, "not found": NOT_OBSERVED}.get(v, CAVEAT), KEY, ""))
    if gpt2 is not None:
        scores, base, gv = gpt2
        out.append(("Pattern heads, GPT-2 small", "; ".join(
            f"{r[0]} {r[1]} {r[4]}" for r in _gpt2_rows(scores, base)), gv, KEY, "trained"))
    return out


# ---------------------------------------------------------------- circuits across layers
# (heads.composition, heads.path_runs, heads.induction)
def fig_composition(sc, base):
    """sc (3, nh, nh) [kind, layer-0 writer, layer-1 reader]; each panel shows score / baseline
    mean, annotated with the score."""
    from andrea_edu.heads.composition import KINDS, zscores
    nh = sc.shape[1]
    z = zscores(sc, base)
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.2))
    vmax = float(np.abs(z).max())
    for k, ax in enumerate(axes):
        heatmap(ax, z[k], [f"L1H{h}" for h in range(nh)], [f"L0H{h}" for h in range(nh)],
                cmap="RdBu_r", vmin=-vmax, vmax=vmax, fmt="{:.0f}", colorbar=k == 2,
                title=f"{KINDS[k]}-composition: random {base.mean[k]:.3f} ± {base.std[k]:.3f}",
                xlabel="reader (layer 1)", ylabel="writer (layer 0)")
    fig.tight_layout()
    return fig


def fig_paths(d, nh: int, head_ablation, prev_head: int, bracket_writer: int, bracket_reader: int):
    """head_ablation: (run.ablation, run.ablation_se), each (L, nh, 4). The committed path ablations: TV of every qkv pair; the previous-token head into each
    layer-1 head by input; the bracket loss of L0H5's paths against its whole ablation."""
    from andrea_edu.heads import path_runs as PR
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8), gridspec_kw={"width_ratios": [1.1, 1.3, 1]})
    heatmap(axes[0], PR.as_grid(d, nh, "tv"), [f"L1H{h}" for h in range(nh)],
            [f"L0H{h}" for h in range(nh)], cmap="Purples", vmin=0, fmt="{:.2f}", colorbar=False,
            title="reader's pattern change (TV)", xlabel="reader", ylabel="writer removed")
    ax = axes[1]
    xs = np.arange(nh)
    for j, i in enumerate("qkv"):
        tv = [PR.entry(d, f"L0H{prev_head} -> L1H{b} {i}")["tv"] for b in range(nh)]
        ax.bar(xs + (j - 1) * 0.27, tv, 0.27,
               label=f"from its {i} only")
    ax.set_xticks(xs, [f"L1H{b}" for b in range(nh)])
    ax.set_ylabel("pattern change (TV)")
    ax.set_title(f"L0H{prev_head} removed from one input", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[2]
    a, b, col = bracket_writer, bracket_reader, 2  # loss column 2: matching bracket
    names = [f"L1H{b} {i}" for i in ("q", "k", "v", "qkv")] + ["every L1 head qkv"] + \
        [n for n in PR.ROUTES.values() if any(e["label"] == f"L0H{a} -> {n}" for e in d["entries"])]
    es = [PR.entry(d, f"L0H{a} -> {n}") for n in names]
    labels = [f"L0H{a} -> {n}" for n in names] + [f"L0H{a} ablated outright"]
    vals = [e["loss"][col] for e in es] + [float(head_ablation[0][0, a, col])]
    ses = [e["loss_se"][col] for e in es] + [float(head_ablation[1][0, a, col])]
    ax.barh(range(len(vals)), vals, xerr=ses,
            color=["#d62728"] * 5 + ["#ff7f0e"] * (len(names) - 5) + ["#555555"])
    ax.set_yticks(range(len(vals)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("bracket-query loss increase (nats)")
    ax.set_title(f"Paths from L0H{a}", fontsize=9)
    fig.tight_layout()
    return fig


def fig_induction(rep, sig, nh: int):
    """Induction three ways: induction score per head (x uniform), the loss on the two copies
    and what ablating each layer-1 head does to the second, the weight signatures."""
    fig, axes = plt.subplots(1, 4, figsize=(19, 4.6),
                             gridspec_kw={"width_ratios": [1.3, 0.5, 0.9, 1.2]})
    L = rep["induction"].shape[0]
    r = rep["induction"] / rep["uniform"]
    heatmap(axes[0], r, [f"H{h}" for h in range(nh)], [f"L{l}" for l in range(L)],
            cmap="Greens", vmin=0, vmax=max(2 * D.FOUND_RATIO, float(r.max())), fmt="{:.1f}",
            colorbar=False, title=f"induction score, times uniform (found: >= {D.FOUND_RATIO:g}x)")
    ax = axes[1]
    ax.bar([0, 1], [rep["first_loss"], rep["second_loss"]], color=["#999999", "#2ca02c"])
    ax.set_xticks([0, 1], ["1st copy", "2nd copy"])
    ax.set_ylabel("next-character loss (nats)")
    ax.set_title(f"loss (n={rep['n']})", fontsize=9)
    ax = axes[2]
    ax.bar(range(nh), rep["ablated_second"], color="#d62728")
    ax.set_xticks(range(nh), [f"L{L - 1}H{h}" for h in range(nh)], fontsize=7)
    ax.set_ylabel("2nd copy's loss rise (nats)")
    ax.set_title("one last-layer head ablated", fontsize=9)
    m = np.vstack([sig["prefix"], sig["copying"][None, :]])
    heatmap(axes[3], m, [f"L1H{h}" for h in range(nh)],
            [f"L0H{h}" for h in range(nh)] + ["copy"], cmap="RdBu_r", vmin=-1, vmax=1,
            fmt="{:.2f}", colorbar=True,
            title="eigenvalue positivity: prefix matching, copying")
    fig.tight_layout()
    return fig


def induction_call(rep, factor: float = 5.0) -> tuple[bool, tuple[int, int], float]:
    """(an induction head exists?, best head, its ratio to uniform): exists when the best head
    puts `factor` x uniform on the induction key and the second copy's loss is lower by more
    than 0.5 nats (half a nat: far beyond the batch's sampling noise)."""
    from andrea_edu.heads.induction import DROP_NATS
    ind = rep["induction"]
    l, h = (int(i) for i in np.unravel_index(np.argmax(ind), ind.shape))
    ratio = float(ind[l, h] / rep["uniform"])
    return ratio >= factor and rep["first_loss"] - rep["second_loss"] > DROP_NATS, (l, h), ratio


# ---------------------------------------------------------------- what it takes: other runs
def _chars(s) -> str:
    return f"{s.steps * s.batch_size * s.seq_len / 1e6:.1f}M"


def show_variants(items) -> None:
    """items: [(label, run, induction.evidence)]: one row per run, the settings that differ and
    the three measurements at each run's best candidate head."""
    table(["run", "layers", "context", "steps", "characters seen", "CPU", "val. loss",
           "best candidate", "induction score", "2nd copy cheaper by", "its ablation costs",
           "copying", "prefix matching (writer)", "induction head?"],
          [[label, r.settings.n_layer, r.settings.seq_len, f"{r.settings.steps:,}",
            _chars(r.settings), f"{r.cpu_seconds:.0f} s", f"{r.eval_loss[-1, 0]:.3f}",
            head_name(e["head"]), f"{e['ratio']:.1f}x", f"{e['drop']:.2f} nats",
            f"{e['ablated']:+.3f} nats", f"{e['copying']:+.2f}",
            f"{e['prefix'][0]:+.2f} ({head_name(e['prefix'][1])})", "yes" if e["found"] else "no"]
           for label, r, e in items])


def fig_variants(items):
    """Each run's induction score per head (times uniform), one panel per run, one color scale."""
    k = len(items)
    vmax = max(2 * D.FOUND_RATIO, max(float((e["rep"]["induction"] / e["rep"]["uniform"]).max())
                                      for _, _, e in items))
    fig, axes = plt.subplots(1, k, figsize=(4.6 * k, 3.4))
    for ax, (label, r, e) in zip(np.atleast_1d(axes), items):
        rr = e["rep"]["induction"] / e["rep"]["uniform"]
        L, nh = rr.shape
        heatmap(ax, rr, [f"H{h}" for h in range(nh)], [f"L{l}" for l in range(L)], cmap="Greens",
                vmin=0, vmax=vmax, fmt="{:.1f}", colorbar=False,
                title=f"{label}\n2nd copy {e['drop']:+.2f} nats cheaper")
        ax.title.set_fontsize(9)
    caption(fig, f"Induction score, times uniform. Found: >= {D.FOUND_RATIO:g}x and a "
                 "cheaper second copy.")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def show_identifier_readings(ids: dict, tol: float) -> None:
    names = {"span": "anywhere on the earlier occurrence",   # the source's reading
             "duplicate": "its same character",
             "induction": "the character after it (induction)"}
    rows = []
    for k in ("span", "duplicate", "induction"):
        s, u, n = ids[k]
        l, h = np.unravel_index(np.argmax(s), s.shape)
        rows.append([names[k], f"{n:,}", f"L{l}H{h}", f"{s[l, h]:.3f}", f"{u:.4f}",
                     f"{s[l, h] / u:.1f}x", D.verdict(float(s[l, h]), u, tol)])
    table(["the head attends to", "queries", "best head", "score", "uniform", "ratio",
           f"verdict (found: >= {D.FOUND_RATIO:g}x uniform)"], rows)


def fig_pair(maps, corpus, batch, b, start, length, reader: int, writer: int, kind: str, z: float):
    """The slider's frame: a layer-1 head next to the layer-0 head it composes with most."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.6))
    sl = slice(start, start + length)
    toks = [c if c not in " \n" else {" ": "␣", "\n": "↵"}[c]
            for c in corpus.decode(batch.idx[b, sl])]
    for ax, (l, h, what) in zip(axes, ((0, writer, f"writer L0H{writer}"),
                                       (1, reader, f"reader L1H{reader}"))):
        heatmap(ax, maps[l, b, h, sl, sl], colorbar=False, annotate=False, vmin=0, vmax=1,
                cmap="Greys")
        ax.set_xticks(range(length), toks, fontsize=6, rotation=0)
        ax.set_yticks(range(length), toks, fontsize=6)
        ax.set_title(what, fontsize=9, color=head_color(h))
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.suptitle(f"L1H{reader} composes most with L0H{writer}: {kind}-composition, "
                 f"{z:+.1f} random spreads", fontsize=10)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- the exercises' cells
def show_bracket_heads(scores, baseline, at: str, n: int = 3) -> None:
    """The n heads with the highest bracket score (scores (3, L, nh) of measures.head_scores),
    queries at `at`, beside uniform attention's score."""
    s, u = np.asarray(scores)[tc.BRACKET], float(np.asarray(baseline)[tc.BRACKET])
    order = np.argsort(-s, axis=None)[:n]
    table(["head", "queries at", "bracket score", "uniform", "times uniform"],
          [[head_name(np.unravel_index(i, s.shape)), at, f"{s.flat[i]:.3f}", f"{u:.4f}",
            f"{s.flat[i] / u:.1f}x"] for i in order])


def ov_change(before, after) -> dict[str, list[str]]:
    """Which heads' OV readings move between two ov_tables ((L, nh, 2): copy rate, eigenvalue
    copying score): the heads where either moves by 0.005 or more (shown as a table when there
    are any), and those whose copy rate moves by 0.05 or more."""
    b, a = np.asarray(before), np.asarray(after)
    L, nh, _ = b.shape
    changed = [(l, h) for l in range(L) for h in range(nh)
               if np.abs(a[l, h] - b[l, h]).max() >= 0.005]
    if changed:
        table(["head", "copy rate", "now", "change", "copying score", "now", "change"],
              [[f"L{l}H{h}", f"{b[l, h, 0]:.2f}", f"{a[l, h, 0]:.2f}",
                f"{a[l, h, 0] - b[l, h, 0]:+.2f}", f"{b[l, h, 1]:+.2f}", f"{a[l, h, 1]:+.2f}",
                f"{a[l, h, 1] - b[l, h, 1]:+.2f}"] for l, h in changed])
    return {"moved >= 0.005": [f"L{l}H{h}" for l, h in changed],
            "copy rate moved >= 0.05": [f"L{l}H{h}" for l in range(L) for h in range(nh)
                                        if abs(a[l, h, 0] - b[l, h, 0]) >= 0.05]}


def show_variant_run(label: str, run, ev, tol: float) -> None:
    """One run's three pattern verdicts, then its row of the runs' table (show_variants)."""
    table(["pattern", "best head", "ratio", "verdict"],
          [[r["pattern"], head_name(r["head"]), f"{r['ratio']:.1f}x", r["verdict"]]
           for r in run.summary(tol)])
    show_variants([(label, run, ev)])


def fig_score_trajectory(run, reference, pattern: int = tc.IDENT):
    """The best head's score / uniform for `pattern` at each evaluation of two runs."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for r, style in ((reference, "--"), (run, "-")):
        best = np.nanmax(r.scores[:, pattern].reshape(len(r.eval_steps), -1), axis=1)
        ax.plot(r.eval_steps, best / r.baseline[pattern], style, marker="o",
                label=f"{r.settings.n_layer} layers, {r.settings.seq_len} characters, "
                      f"{r.settings.steps:,} steps")
    ax.axhline(D.FOUND_RATIO, color="#999999", lw=0.8)
    ax.set_xlabel("training step")
    ax.set_ylabel("best head / uniform")
    ax.set_title(f"{tc.PATTERNS[pattern]}: best head during training", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
