"""Figures and formatted text of the chapter "Heads on real text (optional deep-dive)".

Draws and formats what `andrea_edu.heads.text_corpus`, `.text_training`, `.measures`,
`.detectors` and `.circuits` computed; decides nothing (verdicts come from `detectors`).
"""
from __future__ import annotations

import html

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import HTML, Markdown, display

from andrea_edu.figures import provenance
from andrea_edu.figures.viz import head_color, heatmap
from andrea_edu.heads import detectors as D, measures as M
from andrea_edu.heads import text_corpus as tc
from andrea_edu.heads.batch import Batch

PATTERN_COLORS = {"all": "#555555", "previous token": "#1f77b4", "matching bracket": "#d62728",
                  "recent identifier": "#2ca02c"}


def md(text: str) -> None:
    display(Markdown(text))


def table(header, rows) -> None:
    """A Markdown table of computed values."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    md("\n".join(lines))


def hl(lh) -> str:
    return f"L{lh[0]}H{lh[1]}"


def caption(fig, text: str, y: float = 0.01) -> None:
    fig.text(0.5, y, text, ha="center", va="bottom", fontsize=8, wrap=True, color="#333333")


def mode_line(fast: bool) -> None:
    md("Mode: **" + ("fast (ANDREA_FAST=1): fewer windows and re-check steps, the toy model barely "
                     "trained; its numbers are not meaningful" if fast else "full") + "**.")


def window(batch: Batch, b: int) -> Batch:
    """The one-window batch of window b."""
    return batch.slice(b, b + 1)


# ---------------------------------------------------------------- the corpus
def corpus_line(corpus: tc.Corpus) -> None:
    """The corpus in one sentence (the lesson); `show_corpus` is the full table (the appendix)."""
    p = corpus.provenance
    md(f"This page read {p['n_files']} modules of Python {p['python']}'s standard library: "
       f"{p['n_train_files']} for training ({p['train_chars']:,} characters) and "
       f"{p['n_valid_files']} held out ({p['valid_chars']:,}), a vocabulary of "
       f"{p['vocab_size']} characters.")


def show_corpus(corpus: tc.Corpus, committed_prov: dict | None) -> None:
    p = corpus.provenance
    big = sorted(p["files"], key=lambda f: -f["chars"])[:3]
    table(["", "the corpus this page read"],
          [["Python", f"{p['implementation']} {p['python']} (its standard library)"],
           ["files", f"{p['n_files']} top-level modules: {p['n_train_files']} for training, "
                     f"{p['n_valid_files']} held out (validation)"],
           ["characters", f"{p['train_chars']:,} training, {p['valid_chars']:,} validation "
                          f"({p['total_bytes'] / 1e6:.1f} MB on disk)"],
           ["largest files", ", ".join(f"`{f['name']}` ({f['chars']:,})" for f in big)],
           ["vocabulary", f"{p['vocab_size']} characters (id 0 for the {p['unk_share_train']:.4%} "
                          f"of training characters seen fewer than {tc.MIN_CHAR_COUNT} times)"],
           ["content hash", f"`{p['content_hash'][:16]}…`"]])
    if committed_prov is not None:
        same, what = tc.same_corpus(committed_prov, corpus)
        md(f"The committed run below was trained on {what}.")


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
        for t in range(start, start + length):
            k = int(batch.key[p, b, t])
            if k >= start:
                style[t - start].append(css)
                style[k - start].append(css + ";outline:1px solid " +
                                        PATTERN_COLORS[tc.PATTERNS[p]])
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
            n = [sum(1 for t in range(start, start + length)
                     if int(batch.key[p, b, t]) >= start) for p in (tc.BRACKET, tc.IDENT)]
            if min(n) * 10 + sum(n) > best:
                best, arg = min(n) * 10 + sum(n), (b, start)
    return arg


def show_example(corpus, batch, b, start, length) -> None:
    display(HTML(example_html(corpus, batch, b, start, length)))


# ---------------------------------------------------------------- training
def show_run_provenance(run, path_name: str | None) -> None:
    """Where the committed run comes from, in a reader's terms: the file, the command that makes
    it again, when, on which CPU and software, and the hash of the code that trained it."""
    p = run.provenance
    pins = ", ".join(f"{k}={v}" for k, v in p["pins"].items())
    table(["provenance", ""],
          [["file", f"`book/data/{path_name}` and its weights" if path_name else
                    "none found: trained on this page"],
           ["made by", f"`{provenance.command(p['produced_by'], path_name or '')}`"],
           ["date (UTC)", p["date_utc"]],
           ["CPU", f"{p['cpu']} (one torch thread)"],
           ["instruction sets", f"{pins}; ATen used {p['cpu_capability']}, MKL's branch "
                                f"{p.get('mkl_cbwr')}"],
           ["software", f"torch {p['torch']}, Python {p['python']}"],
           ["code hash", f"`{p['code_hash']}`"],
           ["CPU time", f"{run.cpu_seconds / 60:.1f} min"]])


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


def recheck_sentence(cmp: dict, n_steps: int, same: bool, committed: dict | None = None) -> None:
    """committed: the committed run's provenance; the sentence says "the same pins" only when
    the re-check's pins and ATen level are the committed run's, and names both otherwise."""
    if not same:
        md(f"Re-check: {n_steps} steps trained now on this machine's corpus, which is not the "
           f"committed run's, so their losses are not expected to agree (largest difference "
           f"{cmp['max_abs_diff']:.3g} nats); the committed numbers below are the committed "
           f"corpus's.")
        return
    pins = ", ".join(f"{k}={v}" for k, v in cmp["pins"].items())
    if committed is None:
        how = f"with {pins} (ATen used {cmp['cpu_capability']}"
    elif (cmp["pins"] == committed.get("pins")
          and cmp["cpu_capability"] == committed.get("cpu_capability")):
        how = f"with the committed run's pins (ATen used {cmp['cpu_capability']}, as it did"
    else:
        how = (f"with {pins} (ATen used {cmp['cpu_capability']}; the committed run had "
               + ", ".join(f"{k}={v}" for k, v in (committed.get("pins") or {}).items())
               + f" and ATen {committed.get('cpu_capability')}")
    md(f"Re-check: the first {cmp['steps']} steps, trained again now in a subprocess {how}; "
       f"{cmp['wall_seconds']:.1f} s), give training "
       f"losses within **{cmp['max_abs_diff']:.2g}** nats of the committed ones: "
       f"{'inside' if cmp['agrees'] else '**outside**'} the tolerance of {cmp['tol']:g} nats "
       f"(measured, see `text_training`). "
       + ("The committed run is confirmed." if cmp["agrees"] else
          "The committed run is **not** confirmed on this machine."))


# ---------------------------------------------------------------- detectors
def rescore_sentence(live, run, batch: Batch, same_corpus: bool) -> None:
    """Compare the scores recomputed now from the committed weights with the committed ones."""
    n = batch.idx.shape[0]
    diff = float(np.nanmax(np.abs(np.asarray(live) - run.scores_after)))
    if same_corpus and n == run.settings.eval_batch:
        md(f"The committed weights, scored again now on the same {n} held-out windows, give every "
           f"head's scores within {diff:.1g} of the committed ones.")
    else:
        why = "this machine's corpus" if not same_corpus else f"{n} windows (fast mode)"
        md(f"Scored again now on {why}, the committed weights give scores within {diff:.2f} of the "
           f"committed ones (another sample of windows, so not the same numbers). The table below "
           f"is the committed run's.")

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
    caption(fig, f"Each head's score (mean attention on the key the pattern designates) divided "
                 f"by uniform attention's. Framed: at least {D.FOUND_RATIO:g}x.")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def show_summary(rows, tol: float) -> None:
    table(["pattern", "best head", "score", "uniform", "ratio", f"margin to {D.FOUND_RATIO:g}x",
           "verdict", "its ablation (nats, ± s.e.)", "head whose ablation hurts most"],
          [[r["pattern"], hl(r["head"]), f"{r['score']:.3f}", f"{r['baseline']:.4f}",
            f"{r['ratio']:.1f}x", f"{r['margin']:+.3f}", r["verdict"],
            f"+{r['ablation']:.3f} ± {r['ablation_se']:.3f}",
            f"{hl(r['carrier'])} (+{r['carrier_ablation']:.3f} ± {r['carrier_se']:.3f})"]
           for r in rows])
    md(f"*Found* or *not found*: the best score clears, or misses, the line {D.FOUND_RATIO:g} x "
       f"uniform by more than the score tolerance {tol:g} (where it comes from: appendix); "
       f"otherwise *within noise of the threshold*.")


def fig_heads_on_example(maps, corpus, batch, heads, b, start, length):
    """The best head of each pattern on one window: rows queries, columns keys; circles mark the
    key each labelled query's pattern designates."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.6))
    sl = slice(start, start + length)
    toks = [c if c not in " \n" else {" ": "␣", "\n": "↵"}[c]
            for c in corpus.decode(batch.idx[b, sl])]
    for p, ax in zip(tc.PATTERNS, axes):
        l, h = heads[p]
        heatmap(ax, maps[l, b, h, sl, sl], colorbar=False, annotate=False, vmin=0, vmax=1,
                cmap="Greys")
        ax.set_xticks(range(length), toks, fontsize=6, rotation=0)
        ax.set_yticks(range(length), toks, fontsize=6)
        pts = [(t - start, int(batch.key[p, b, t]) - start) for t in range(start, start + length)
               if int(batch.key[p, b, t]) >= start]
        if pts:
            q, k = zip(*pts)
            ax.scatter(k, q, s=30, facecolors="none", edgecolors=PATTERN_COLORS[tc.PATTERNS[p]],
                       linewidths=1.2)
        ax.set_title(f"{tc.PATTERNS[p]}: head L{l}H{h}", fontsize=9, color=head_color(h))
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    caption(fig, "Each pattern's best-scoring head on one held-out window. Circles: the key the "
                 "pattern designates for each labelled query.")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def fig_one_head(maps, corpus, batch, lh, b, start, length, scores, baseline):
    """One head (the slider's frame): its attention on the window, every pattern's designated
    keys marked, its three score ratios in the title."""
    l, h = lh
    sl = slice(start, start + length)
    toks = [c if c not in " \n" else {" ": "␣", "\n": "↵"}[c]
            for c in corpus.decode(batch.idx[b, sl])]
    fig, ax = plt.subplots(figsize=(6.2, 6.0))
    heatmap(ax, maps[l, b, h, sl, sl], colorbar=False, annotate=False, vmin=0, vmax=1,
            cmap="Greys")
    ax.set_xticks(range(length), toks, fontsize=6, rotation=0)
    ax.set_yticks(range(length), toks, fontsize=6)
    for p in tc.PATTERNS:
        pts = [(t - start, int(batch.key[p, b, t]) - start) for t in range(start, start + length)
               if int(batch.key[p, b, t]) >= start]
        if pts:
            q, k = zip(*pts)
            ax.scatter(k, q, s=26 if p else 10, facecolors="none", linewidths=1.0,
                       edgecolors=PATTERN_COLORS[tc.PATTERNS[p]], label=tc.PATTERNS[p])
    r = np.asarray(scores)[:, l, h] / np.asarray(baseline)
    ax.set_title(f"L{l}H{h}: " + ", ".join(f"{tc.PATTERNS[p]} {r[p]:.1f}x" for p in tc.PATTERNS),
                 fontsize=8, color=head_color(h))
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.legend(fontsize=6, loc="upper right")
    fig.tight_layout()
    return fig


def fig_ablation(Dt):
    L, nh, _ = Dt.shape
    fig, axes = plt.subplots(1, 4, figsize=(16, 1.1 * L + 1.8))
    for i, (key, ax) in enumerate(zip(D.LOSS_KEYS, axes)):
        heatmap(ax, Dt[..., i], [f"H{h}" for h in range(nh)], [f"L{l}" for l in range(L)],
                cmap="Reds", vmin=0, vmax=max(1e-3, float(np.nanmax(Dt[..., 1:]))),
                fmt="{:.2f}", colorbar=False, title=f"{key}: loss increase")
    caption(fig, "Loss increase (nats) on held-out windows when one head's row block of W_O is "
                 "zeroed, on every position (left) and on each pattern's queries.")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def ablation_sentence(rows, Dt) -> None:
    parts = []
    for r in rows:
        p = tc.PATTERN_NAMES.index(r["pattern"])
        own, other = r["carrier_ablation"], max(
            float(Dt[r["carrier"]][1 + q]) for q in range(3) if q != p)
        parts.append(f"{r['pattern']}: removing {hl(r['carrier'])} costs it "
                     f"+{own:.3f} ± {r['carrier_se']:.3f} nats (at most +{other:.3f} on another "
                     f"pattern); the best-scoring head {hl(r['head'])} "
                     + ("is that head" if r["carrier"] == r["head"] else
                        f"costs it +{r['ablation']:.3f} ± {r['ablation_se']:.3f}"))
    md("Per pattern, the head whose removal hurts it most: " + "; ".join(parts) + ". The previous-"
       "token pattern labels every position, so its loss is the whole loss: a head the model needs "
       "anywhere shows up there.")


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


def _reading(lh, real, pos, where: str = "on real text") -> str:
    r, p = real[lh], pos[lh]
    f = lambda v: ", ".join(f"{x:.2f}" for x in v)  # noqa: E731
    head = (f"{hl(lh)} puts {f(r)} of its attention on t, t-1, t-2 {where}; on positions alone "
            f"its QK gives {f(p)}")
    if int(np.argmax(p)) == 1:
        return head + ": the QK circuit alone makes it a previous-token head (a positional one)"
    if int(np.argmax(r)) == 1 and int(np.argmax(p)) == 0:
        return (head + ": from positions alone it looks at the last few tokens, nearest first. "
                "What moves its peak from t itself to t-1 is then, we infer, the part of the "
                "circuit this reading leaves out: the tokens (which characters they are), the "
                "token x position cross terms, and LayerNorm. An inference, not a measurement: "
                "this reading averages all three away")
    return head


def circuits_sentence(rows, real, pos, ov_tab, chance: float) -> None:
    best_ov = tuple(int(i) for i in np.unravel_index(np.argmax(ov_tab[..., 0]), ov_tab.shape[:2]))
    rate = ov_tab[best_ov][0]
    md(f"The detector's previous-token head {_reading(rows[tc.PREV]['head'], real, pos)}. "
       f"The strongest copier by OV is {hl(best_ov)}: it raises the attended character's own logit "
       f"above every other for {rate:.0%} of the characters (chance {chance:.1%}; eigenvalue "
       f"score {ov_tab[best_ov][1]:+.2f})"
       + (", so some copying is written into its weights" if rate >= 5 * chance else
          ", no better than a few times chance: no head of this model is a copier") + ".")


def toy_sentence(scores, heads, real, pos, ov_tab, chance: float) -> str:
    """Display and return (for the verdict box) what the toy laboratory's circuits show."""
    from andrea_edu.heads.toy_calls import PATTERN_NAMES as TOY_PATTERNS
    sc = np.asarray(scores)
    pl, el = heads[0], heads[2]
    rate = ov_tab[el][0]
    text = (f"its best {TOY_PATTERNS[0]} head (score {sc[0][pl]:.2f}): "
            f"{_reading(pl, real, pos, 'on its corpus')}; "
            f"its best {TOY_PATTERNS[2]} head {hl(el)} (score {sc[2][el]:.2f}) raises the attended "
            f"name's own logit first for {rate:.0%} of the names (chance {chance:.0%}, eigenvalue "
            f"score {ov_tab[el][1]:+.2f})"
            + (": its OV circuit copies" if rate >= 0.5 and ov_tab[el][1] > 0 else
               ": its OV circuit is not a plain copier"))
    md(f"Toy laboratory: {text}.")
    return text


def toy_source(path_name: str | None, settings, chapter_seed: int) -> None:
    """Where the toy model comes from. No training time: this copy was trained apart from the
    toy chapter's run of the same weights, and two CPU times for one model read as a
    contradiction (41 s here, 55 s there); the toy chapter gives its run's."""
    where = (f"`book/data/{path_name}`, committed with its weights" if path_name else
             "trained now (no committed file found)")
    same = ("the seed the toy chapter trains with" if settings.seed == chapter_seed else
            f"not the toy chapter's current seed ({chapter_seed}): another draw of the same run")
    md(f"The toy model: {where}; {settings.n_layer} layers x {settings.n_head} heads, seed "
       f"{settings.seed} ({same}), {settings.steps} steps.")


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


def gpt2_summary(scores, base) -> str:
    """GPT-2 small's best head per pattern in one phrase (the box's row)."""
    return "best heads " + ", ".join(f"{r[0]} {r[1]} at {r[4]} uniform"
                                     for r in _gpt2_rows(scores, base))


def show_gpt2_scores(scores, base) -> None:
    """GPT-2 small's best head per pattern, as a table (when its weights are on the machine)."""
    table(["pattern", "best head of GPT-2 small", "score", "uniform", "ratio",
           f"heads at >= {D.FOUND_RATIO:g}x"], _gpt2_rows(scores, base))


def claim_rows(rows, verdict: str, toy_found: str | None, gpt2_text: str | None,
               gpt2_verdict: str | None, how_to: str, settings):
    """The chapter's rows on "trained transformers show ... heads". The small model's row says
    what it showed, with its own reading as verdict ("does not hold" read as "not observed
    here": a small model cannot refute the claim); it carries the claim's key, so the verdicts
    page (figures.claims: a claim about trained transformers) shows it as unable to decide.
    toy_found: a phrase on the toy laboratory's model, or None. A GPT-2 small row (a trained
    transformer, at the claim's scale) only when it was measured (gpt2_text); `how_to` is how a
    reader gets its weights (kept for callers; the chapter points to the trained model's
    chapter instead)."""
    from andrea_edu.figures.verdicts import NOT_OBSERVED, TRAINED_TRANSFORMERS_SHOW_HEADS

    found = [r for r in rows if r["verdict"] == "found"]
    missing = [r for r in rows if r["verdict"] != "found"]
    measured = (f"On the standard library's source, an ANDREA of {settings.n_layer} layers x "
                f"{settings.n_head} heads grows "
                + ("; ".join(f"a {r['pattern']} head ({hl(r['head'])}, {r['ratio']:.1f}x uniform, "
                             f"its ablation +{r['ablation']:.3f} ± {r['ablation_se']:.3f} nats on "
                             f"that pattern)" for r in found) if found else "no pattern head"))
    if missing:
        measured += "; " + "; ".join(
            f"{r['pattern']}: {r['verdict']} (best {hl(r['head'])} at {r['ratio']:.1f}x uniform)"
            for r in missing)
    if toy_found:
        measured += f". In the toy laboratory: {toy_found}"
    if verdict == "does not hold":     # a small model that does not show them cannot refute a
        verdict = NOT_OBSERVED         # claim about trained transformers (figures.verdicts)
    out: list[tuple[str, ...]] = [("Trained transformers show heads for positional (previous token), syntactic "
            "(matching parenthesis) and semantic (most recent named entity) patterns",
            measured, verdict, TRAINED_TRANSFORMERS_SHOW_HEADS)]
    if gpt2_text:
        out.append(("The same, in a transformer trained at scale on natural text (GPT-2 small, "
                    "ANDREA-120M's shape)", f"GPT-2 small on the same held-out files: {gpt2_text}",
                    gpt2_verdict or NOT_OBSERVED))
    return out


def summary(rows, pos, rep, ids, tol: float, variants_text: str | None = None) -> None:
    """The summary's data-dependent bullets (the chapter's Markdown holds the rest)."""
    found = [r["pattern"] for r in rows if r["verdict"] == "found"]
    other = [r for r in rows if r["verdict"] != "found"]
    lh = rows[tc.PREV]["head"]
    peak = int(np.argmax(pos[lh]))
    ind, _, ratio = induction_call(rep)
    s, u, _ = ids["span"]
    items = [
        "Trained on text nobody arranged, with labels from a parser, the small ANDREA grows heads "
        f"for: {', '.join(found) if found else 'none of the three patterns'}"
        + ("" if not other else "; " + "; ".join(f"{r['pattern']}: {r['verdict']}" for r in other))
        + ".",
        f"Read from its weights alone, the previous-token head {hl(lh)} "
        + ("is positional: its QK circuit on positions peaks at t-1." if peak == 1 else
           "is not purely positional: its QK circuit on positions peaks "
           + ("at t itself" if peak == 0 else f"at t-{peak}") + "; what moves it to t-1 is "
           "inferred above, not measured."),
        ("An induction head: " if ind else "No induction head: ")
        + f"the best reaches {ratio:.1f}x uniform on repeated random characters, and the second "
          f"copy costs {rep['first_loss'] - rep['second_loss']:.2f} nats less than the first"
        + (f"; in the runs that each change one thing (appendix), {variants_text.split('; ')[-1]}"
           if variants_text else "") + ".",
        f"Read as the source states it (attention to the earlier occurrence of a name), the "
        f"recent-identifier pattern's best head reaches {float(s.max()) / u:.1f}x uniform: "
        f"{D.verdict(float(s.max()), u, tol)}.",
    ]
    md("\n".join(f"* {x}" for x in items))


# ---------------------------------------------------------------- circuits across layers
# (heads.composition, heads.paths / path_runs, heads.induction)
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
    caption(fig, "Each cell: the pair's composition score in spreads of the random baseline, "
                 "(score - mean) / std over random matrices of the same shapes; red above, blue "
                 "below. LayerNorm weights folded in, centering ignored.")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def composition_sentence(sc, base, top) -> None:
    from andrea_edu.heads.composition import KINDS
    above = int((sc > base.q99.reshape(3, 1, 1)).sum())
    below = int((sc < base.mean.reshape(3, 1, 1) - 3 * base.std.reshape(3, 1, 1)).sum())
    med = [float(np.median(sc[k])) for k in range(3)]
    md("Strongest compositions (kind, writer -> reader: score, times the random mean, spreads "
       "above it): " + "; ".join(f"{t['kind']}, L0H{t['writer']} -> L1H{t['reader']}: "
                                 f"{t['score']:.3f}, {t['times_baseline']:.2f}x, "
                                 f"{t['z']:+.1f}" for t in top)
       + f". Of the {sc.size} scores, {above} lie above the 99th percentile of the random "
       f"baseline ({base.draws} draws of {base.shapes}) and {below} more than three spreads "
       f"below its mean; the medians of the model's own Q, K, V scores are "
       + ", ".join(f"{m:.3f}" for m in med)
       + f" against random means of {', '.join(f'{m:.3f}' for m in base.mean)}. Trained weights "
       "are not random matrices (they share directions, such as the embeddings' mean), so the "
       "random spread is a floor, not a significance test: a pair stands out when it is far above "
       "the model's other pairs too.")


def fig_paths(d, nh: int, head_ablation, prev_head: int, bracket_writer: int, bracket_reader: int):
    """head_ablation: (run.ablation, run.ablation_se), each (L, nh, 4). The committed path ablations: TV of every qkv pair; the previous-token head into each
    layer-1 head by input; the bracket loss of L0H5's paths against its whole ablation."""
    from andrea_edu.heads import path_runs as PR
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8), gridspec_kw={"width_ratios": [1.1, 1.3, 1]})
    heatmap(axes[0], PR.as_grid(d, nh, "tv"), [f"L1H{h}" for h in range(nh)],
            [f"L0H{h}" for h in range(nh)], cmap="Purples", vmin=0, fmt="{:.2f}", colorbar=False,
            title="pattern change (TV) of the reader", xlabel="reader", ylabel="writer removed")
    ax = axes[1]
    xs = np.arange(nh)
    for j, i in enumerate("qkv"):
        tv = [PR.entry(d, f"L0H{prev_head} -> L1H{b} {i}")["tv"] for b in range(nh)]
        ax.bar(xs + (j - 1) * 0.27, tv, 0.27,
               label=f"from its {i} only" + (" (a value moves no pattern)" if i == "v" else ""))
    ax.set_xticks(xs, [f"L1H{b}" for b in range(nh)])
    ax.set_ylabel("pattern change (TV)")
    ax.set_title(f"L0H{prev_head} (previous token) removed from one input", fontsize=9)
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
    ax.set_title(f"Paths from L0H{a}: what the bracket pattern loses", fontsize=9)
    caption(fig, "Path ablations on the run's held-out ablation windows (committed, re-checked "
                 "live). TV: mean total-variation distance between the reader's patched and intact "
                 "attention rows. Bars: ± one standard error over windows.")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


def paths_sentence(d, nh: int, head_ablation, prev_head: int, a: int, b: int) -> None:
    from andrea_edu.heads import path_runs as PR
    e = {i: PR.entry(d, f"L0H{a} -> L1H{b} {i}") for i in ("q", "k", "v", "qkv")}
    every = PR.entry(d, f"L0H{a} -> every L1 head qkv")
    whole, whole_se = float(head_ablation[0][0, a, 2]), float(head_ablation[1][0, a, 2])
    prev = {(bb, i): PR.entry(d, f"L0H{prev_head} -> L1H{bb} {i}") for bb in range(nh) for i in "qkv"}
    top = max(prev, key=lambda k: prev[k]["tv"])
    ev = PR.entry(d, f"L0H{prev_head} -> every L1 head qkv")
    f = lambda x: f"{x['loss'][2]:+.4f} ± {x['loss_se'][2]:.4f}"  # noqa: E731
    md(f"Removing L0H{a} from L1H{b}'s query or key alone changes L1H{b}'s pattern by a total "
       f"variation of {e['q']['tv']:.3f} and {e['k']['tv']:.3f} (from its value, "
       f"{e['v']['tv']:.3f}: a value moves no pattern); it changes the "
       f"bracket-query loss by {f(e['q'])}, {f(e['k'])}, {f(e['v'])} nats; from all three at once "
       f"{f(e['qkv'])}; from every layer-1 head at once {f(every)}. Ablating L0H{a} outright costs "
       f"the bracket queries {whole:+.3f} ± {whole_se:.3f}: "
       + ("too small to split into paths." if whole <= 2 * whole_se else
          "the attention paths into layer 1 carry none of it measurably (their sum is within two "
          "standard errors of zero)."
          if abs(every["loss"][2]) <= 2 * every["loss_se"][2] else
          f"the attention paths into layer 1 carry {every['loss'][2] / whole:.0%} of it.")
       + _routes_text(d, a, 2, "the bracket queries")
       + f" The previous-token head L0H{prev_head} moves a layer-1 pattern most through "
       f"L1H{top[0]}'s {top[1]} (TV {prev[top]['tv']:.3f}); removed from every layer-1 head at "
       f"once it costs all positions {ev['loss'][0]:+.4f} ± {ev['loss_se'][0]:.4f} nats "
       f"(the intact loss there: {d['base_loss'][0]:.3f}; ablating L0H{prev_head} outright: "
       f"{float(head_ablation[0][0, prev_head, 0]):+.3f})."
       + _routes_text(d, prev_head, 0, "all positions") + " A composition score says two heads' "
       f"weights line up; only the path ablation says whether the model uses that line.")


def _routes_text(d, a: int, col: int, what: str) -> str:
    """" Removed from ... alone" for the committed routes of writer a (empty when none)."""
    from andrea_edu.heads import path_runs as PR
    es = [(n, PR.entry(d, f"L0H{a} -> {n}")) for n in PR.ROUTES.values()
          if any(e["label"] == f"L0H{a} -> {n}" for e in d["entries"])]
    if not es:
        return ""
    return (f" Removed from one other reader alone, L0H{a} costs {what} "
            + ", ".join(f"{e['loss'][col]:+.4f} ± {e['loss_se'][col]:.4f} ({n})" for n, e in es)
            + ": " + ("its effect runs through layer 0's own MLP."
                      if max(es, key=lambda ne: ne[1]["loss"][col])[0] == "MLP0" else
                      f"its largest reader is {max(es, key=lambda ne: ne[1]['loss'][col])[0]}."))


def recheck_paths_sentence(r: dict) -> None:
    md(f"Live re-check: {len(r['labels'])} of the committed path ablations "
       f"({', '.join(r['labels'])}) measured again on the same windows: largest difference "
       f"{r['max_abs_diff']:.1e} (allowed {r['tol']:.0e}): "
       + ("they agree." if r["agrees"] else "**they do not agree**: the file and the weights "
                                              "or the code have drifted apart."))


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
    ax.set_ylabel("rise of the 2nd copy's loss (nats)")
    ax.set_title("one last-layer head ablated", fontsize=9)
    m = np.vstack([sig["prefix"], sig["copying"][None, :]])
    heatmap(axes[3], m, [f"L1H{h}" for h in range(nh)],
            [f"L0H{h}" for h in range(nh)] + ["copy"], cmap="RdBu_r", vmin=-1, vmax=1,
            fmt="{:.2f}", colorbar=True,
            title="eigenvalue positivity: prefix matching (rows L0), copying")
    caption(fig, "Random characters of the model's vocabulary, repeated once. Left: mean attention "
                 "from the second copy to the character after the earlier occurrence, over the "
                 "uniform baseline. Middle: loss on each copy; the rise of the second copy's loss "
                 "when one last-layer head is ablated. Right: sum Re(lambda) / sum |lambda| of each "
                 "pair's prefix-matching matrix and of each layer-1 head's token OV circuit "
                 "(+1: every eigenvalue positive).")
    fig.tight_layout(rect=(0, 0.09, 1, 1))
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


def induction_sentence(rep, sig, what: str = "This model") -> str:
    found, lh, ratio = induction_call(rep)
    pm = sig["prefix"]
    a, b = np.unravel_index(np.argmax(pm), pm.shape)
    text = (f"best induction score {hl(lh)} at {ratio:.1f}x uniform; loss on the first "
            f"copy {rep['first_loss']:.2f} nats, on the second {rep['second_loss']:.2f} "
            f"(a drop of {rep['first_loss'] - rep['second_loss']:.2f}); largest prefix-matching "
            f"positivity L0H{a} -> L1H{b} {pm[a, b]:+.2f}, largest copying positivity "
            f"L1H{int(np.argmax(sig['copying']))} {sig['copying'].max():+.2f}")
    md(f"{what}: {text}" + (": an induction head." if found else
               ": **no induction head** (none reaches 5x uniform on the induction key while the "
               "second copy gets cheaper by half a nat)."))
    return text + (" (an induction head)" if found else " (no induction head)")


# ---------------------------------------------------------------- what it takes: other runs
def _chars(s) -> str:
    return f"{s.steps * s.batch_size * s.seq_len / 1e6:.1f}M"


def show_variants(items, budget: float) -> None:
    """items: [(label, run, induction.evidence)]: one row per run, the settings that differ and
    the three measurements at each run's best candidate head; budget: CPU seconds per new run."""
    from andrea_edu.heads import induction as IN
    table(["run", "layers", "context", "steps", "characters seen", "CPU", "val. loss",
           "best candidate", "induction score", "2nd copy cheaper by", "its ablation costs",
           "copying", "prefix matching (writer)", "induction head?"],
          [[label, r.settings.n_layer, r.settings.seq_len, f"{r.settings.steps:,}",
            _chars(r.settings), f"{r.cpu_seconds:.0f} s", f"{r.eval_loss[-1, 0]:.3f}",
            hl(e["head"]), f"{e['ratio']:.1f}x", f"{e['drop']:.2f} nats",
            f"{e['ablated']:+.3f} nats", f"{e['copying']:+.2f}",
            f"{e['prefix'][0]:+.2f} ({hl(e['prefix'][1])})", "yes" if e["found"] else "no"]
           for label, r, e in items])
    md(f"The best candidate is the head of a layer above 0 with the highest induction score on "
       f"repeated random characters (sequences of half the run's context, repeated once); "
       f"an induction head needs at least {IN.FOUND_FACTOR:g}x uniform there and a second copy "
       f"cheaper by more than {IN.DROP_NATS} nats. Validation losses are each run's own held-out "
       f"windows; a longer context predicts more characters from more history, so they compare "
       f"only roughly. CPU seconds are measured by each run; "
       + ("every new run stayed within" if all(r.cpu_seconds <= budget for _, r, _ in items[1:])
          else "**a run went over**")
       + f" the budget of {budget:.0f} s. Made by: "
       + "; ".join(f"`{provenance.command(r.provenance.get('produced_by', '?'))}` "
                   f"({r.provenance.get('date_utc', '?')})"
                   for _, r, _ in items[1:]) + ".")


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
    caption(fig, "Induction score of every head, times uniform, on random characters of the "
                 f"model's vocabulary repeated once. Found: >= {D.FOUND_RATIO:g}x, with the "
                 "second copy clearly cheaper.")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def variants_sentence(items) -> str:
    """What the runs show, computed; returns the short form for the verdicts page."""
    found = [label for label, _, e in items if e["found"]]
    text = variants_summary(items)
    if found:
        md(f"An induction head appears in: {', '.join(found)}. Across the runs, the "
           f"{text.rsplit('; ', 1)[0]}.")
    else:
        md(f"Not one of the {len(items)} runs has an induction head: the "
           f"{text.rsplit('; ', 1)[0]}. Within its CPU budget, none of the changes "
           f"({'; '.join(label for label, _, _ in items[1:])}) made one. What it takes lies beyond "
           f"this budget; these runs do not say which change, or how much of it, would.")
    return text


def variants_summary(items) -> str:
    """What the runs show in one phrase (the box and the summary): the best induction score, how
    much cheaper each run's second copy is, and in which runs an induction head appears."""
    found = [label for label, _, e in items if e["found"]]
    best = max(items, key=lambda it: it[2]["ratio"])
    drops = ", ".join(f"{e['drop']:+.2f} ({label})" for label, _, e in items)
    return (f"best induction score {best[2]['ratio']:.1f}x uniform ({best[0]}, "
            f"{hl(best[2]['head'])}); second copy cheaper by {drops}, in nats"
            + (f"; induction head in {', '.join(found)}" if found else
               "; no induction head in any"))


def show_identifier_readings(ids: dict, tol: float) -> None:
    names = {"span": "anywhere on the earlier occurrence (the source's reading)",
             "duplicate": "the same character of the earlier occurrence",
             "induction": "the character after it (induction; the detector above)"}
    rows = []
    for k in ("span", "duplicate", "induction"):
        s, u, n = ids[k]
        l, h = np.unravel_index(np.argmax(s), s.shape)
        rows.append([names[k], f"{n:,}", f"L{l}H{h}", f"{s[l, h]:.3f}", f"{u:.4f}",
                     f"{s[l, h] / u:.1f}x", D.verdict(float(s[l, h]), u, tol)])
    table(["the head attends to", "queries", "best head", "score", "uniform", "ratio",
           f"verdict (found: >= {D.FOUND_RATIO:g}x uniform)"], rows)


def identifier_row(ids: dict, tol: float, induction_text: str, long_text: str | None):
    """The "Checking the source" row of the semantic pattern, read the source's way (attention to
    the earlier occurrence) and as induction, with the model's own reading as verdict: "holds"
    when its best head is found (>= 5x uniform by the margin), "holds with a caveat" within noise
    of the threshold, "not observed here" when not found (a 2-3 layer model trained for minutes
    cannot refute a claim about trained transformers). It carries the claim's key: the verdicts
    page shows it as unable to decide that claim (figures.claims), which the trained model's
    row decides."""
    from andrea_edu.figures.verdicts import NOT_OBSERVED, TRAINED_TRANSFORMERS_SHOW_HEADS

    s, u, _ = ids["span"]
    l, h = np.unravel_index(np.argmax(s), s.shape)
    v = D.verdict(float(s[l, h]), u, tol)
    verdict = {"found": "holds", "not found": NOT_OBSERVED}.get(v, "holds with a caveat")
    si, ui, _ = ids["induction"]
    measured = (f"The source's reading (a head looks at the most recent earlier occurrence of the "
                f"name): best head L{l}H{h} puts {s[l, h]:.3f} of its attention on that "
                f"occurrence, {s[l, h] / u:.1f}x uniform ({v}); on the character after it (the "
                f"induction form, the detector above) the best is {si.max() / ui:.1f}x. Induction "
                f"on repeated random characters: {induction_text}"
                + (f". Runs that each change one thing: {long_text}" if long_text else ""))
    return ("Semantic patterns: a head looks at the most recent named entity (re-rated with the "
            "mechanism: attention to the earlier occurrence, and induction)", measured, verdict,
            TRAINED_TRANSFORMERS_SHOW_HEADS)


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


def identifier_sentence(ids: dict, tol: float) -> None:
    best = {k: (float(np.max(ids[k][0])), ids[k][1]) for k in ids}
    found = [k for k, (s, u) in best.items() if D.verdict(s, u, tol) == "found"]
    md(f"On the same {ids['induction'][2]:,} queries, the best head puts "
       f"{best['span'][0] / best['span'][1]:.1f}x uniform on the earlier occurrence as a whole, "
       f"{best['duplicate'][0] / best['duplicate'][1]:.1f}x on its same character and "
       f"{best['induction'][0] / best['induction'][1]:.1f}x on the character after it. "
       + ("No reading reaches the threshold: the model has no head for the recent identifier, in "
          "the source's sense or in the induction sense." if not found else
          "Found: " + ", ".join(found) + "."))


# ---------------------------------------------------------------- the exercises' cells
def show_bracket_heads(scores, baseline, at: str, n: int = 3) -> None:
    """The n heads with the highest bracket score (scores (3, L, nh) of measures.head_scores)."""
    s, u = np.asarray(scores)[tc.BRACKET], float(np.asarray(baseline)[tc.BRACKET])
    order = np.argsort(-s, axis=None)[:n]
    table(["head", "bracket score", "times uniform"],
          [[hl(np.unravel_index(i, s.shape)), f"{s.flat[i]:.3f}", f"{s.flat[i] / u:.1f}x"]
           for i in order])
    md(f"Queries at: **{at}** (uniform attention would score {u:.4f}).")


def show_ov_change(before, after) -> None:
    """The copy rate and eigenvalue copying score, in two ov_tables, of each head where either
    moved by 0.005 or more (a table only when one did), and the heads whose copy rate moved by
    0.05 or more."""
    b, a = np.asarray(before), np.asarray(after)
    L, nh, _ = b.shape
    changed = [(l, h) for l in range(L) for h in range(nh)
               if np.abs(a[l, h] - b[l, h]).max() >= 0.005]
    if changed:
        table(["head", "copy rate", "now", "change", "copying score", "now", "change"],
              [[f"L{l}H{h}", f"{b[l, h, 0]:.2f}", f"{a[l, h, 0]:.2f}",
                f"{a[l, h, 0] - b[l, h, 0]:+.2f}", f"{b[l, h, 1]:+.2f}", f"{a[l, h, 1]:+.2f}",
                f"{a[l, h, 1] - b[l, h, 1]:+.2f}"] for l, h in changed])
    else:
        md("No head's copy rate or copying score moves by 0.005 or more.")
    moved = [f"L{l}H{h}" for l in range(L) for h in range(nh)
             if abs(a[l, h, 0] - b[l, h, 0]) >= 0.05]
    md("Copy rates that move by 0.05 or more: " + (", ".join(moved) if moved else "none") + ".")


def show_variant_run(label: str, run, ev, tol: float) -> None:
    """One run's three pattern verdicts and its induction evidence (induction.evidence)."""
    md(f"**{label}** ({run.provenance.get('what', '')}; {run.settings.n_layer} layers, "
       f"{run.settings.seq_len}-character context, {run.settings.steps:,} steps, "
       f"{run.cpu_seconds:.0f} s of CPU):")
    table(["pattern", "best head", "ratio", "verdict"],
          [[r["pattern"], hl(r["head"]), f"{r['ratio']:.1f}x", r["verdict"]]
           for r in run.summary(tol)])
    md(f"Induction: best candidate {hl(ev['head'])} at {ev['ratio']:.1f}x uniform, second copy "
       f"cheaper by {ev['drop']:.2f} nats, copying {ev['copying']:+.2f}, prefix matching "
       f"{ev['prefix'][0]:+.2f} from {hl(ev['prefix'][1])}: "
       + ("an induction head." if ev["found"] else "no induction head."))


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
