"""Figures shared by the chapters (the slider that shows them is andrea_edu.notebook.slider).

Introduced in the book's introduction (the overview picture) and used by every chapter:
- ``head_colors``: head h has the same colour in every figure of the book, whatever n_head is.
- ``PATTERN_COLORS`` / ``caption``: the toy patterns' colours and the caption line of the two
  chapters of the part "Heads".
- ``heatmap``: a labelled matrix (attention weights, scores, strides...).
- ``overview_figure``: fused Q/K/V -> heads -> concat -> W_O, the README picture.
- ``savefig_for_readme``: a small, reproducible PNG for the README and book/images.

The library never calls ``matplotlib.use``: the notebook's backend stays as the reader set it.
Figures are made with ``matplotlib.pyplot.subplots`` so that a plain notebook cell shows them;
the slider helper closes them after drawing.
"""
from __future__ import annotations

import colorsys
import io
from pathlib import Path

import numpy as np

__all__ = ["head_colors", "head_color", "heatmap", "overview_figure", "savefig_for_readme",
           "show_source", "source_markdown", "contrast_ratio",
           "text_color_on", "PATTERN_COLORS", "caption"]


def show_source(*objs) -> None:
    """Display library code in a chapter, read from the library itself (one copy of it)."""
    from IPython.display import display

    display(source_markdown(*objs))


def source_markdown(*objs):
    """A Markdown display object with one Python code block per object (function, class or
    module), as `inspect.getsource` gives it."""
    import inspect

    from IPython.display import Markdown

    if not objs:
        raise ValueError("show_source needs at least one function, class or module")
    blocks = []
    for obj in objs:
        try:
            src = inspect.getsource(obj)
        except (TypeError, OSError) as e:
            raise TypeError(f"show_source cannot read the source of {obj!r}: {e}") from None
        blocks.append(f"```python\n{src.rstrip()}\n```")
    return Markdown("\n\n".join(blocks))


# tab20 reordered: the 10 saturated colours first, then their 10 light partners, so that the
# first heads are the most distinct. Head 20 and beyond: golden-ratio hue steps.
_TAB20 = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896",
          "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5"]


def markdown_table(header: list, rows: list) -> str:
    """The book's one Markdown table: a header row, then one row per list in `rows` (cells as
    str(), a '|' inside a cell escaped)."""
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines)


def table(header: list, rows: list) -> None:
    """Display computed values as a Markdown table (markdown_table)."""
    from IPython.display import Markdown, display

    display(Markdown(markdown_table(header, rows)))


def head_color(h: int) -> str:
    """The colour of head ``h`` (0-based) in every figure of the book, as ``#rrggbb``."""
    if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or h < 0:
        raise ValueError(f"head index h must be an int >= 0, got {h!r}")
    if h < len(_TAB20):
        return _TAB20[h]
    hue = (0.61803398875 * h) % 1.0
    r, g, b = colorsys.hls_to_rgb(hue, 0.5, 0.65)
    return "#{:02x}{:02x}{:02x}".format(round(r * 255), round(g * 255), round(b * 255))


def head_colors(n_head: int) -> list[str]:
    """Colours of heads 0..n_head-1; head h's colour does not depend on n_head."""
    if isinstance(n_head, bool) or not isinstance(n_head, (int, np.integer)) or n_head < 1:
        raise ValueError(f"n_head must be an int >= 1, got {n_head!r}")
    return [head_color(h) for h in range(n_head)]


# The toy laboratory's three patterns (andrea_edu.heads.corpus) keep one colour in both chapters
# of the part "Heads" ("Why heads specialize", "Why twelve heads, not one wider head").
PATTERN_COLORS = {"previous token": "#1f77b4", "matching bracket": "#d62728",
                  "recent entity": "#2ca02c", "all": "#444444"}


def plain_log(axis) -> None:
    """Log-scale tick labels as plain text ("0.01", "1000"), not mathtext: a live slider draws
    its next frames on a background thread, and matplotlib's mathtext parser is not thread-safe
    (a main-thread figure with "$10^{2}$" labels can fail while a frame is being drawn)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    axis.set_minor_formatter(NullFormatter())


def caption(fig, text: str, y: float = 0.01) -> None:
    """One small grey caption line (wrapped) at the bottom of a figure."""
    fig.text(0.5, y, text, ha="center", va="bottom", fontsize=8, color="#444444", wrap=True)


def _relative_luminance(color) -> float:
    """WCAG 2 relative luminance of an opaque colour (any matplotlib colour spec)."""
    from matplotlib.colors import to_rgb

    c = np.asarray(to_rgb(color), dtype=float)
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return float(lin @ (0.2126, 0.7152, 0.0722))


def _over_white(color) -> tuple:
    """An RGBA colour composited over the white figure background, as opaque RGB."""
    from matplotlib.colors import to_rgba

    r, g, b, a = to_rgba(color)
    return tuple(a * x + (1 - a) for x in (r, g, b))


def contrast_ratio(fg, bg) -> float:
    """WCAG 2 contrast ratio (1..21) of text colour fg on background bg (RGBA: over white)."""
    l1, l2 = sorted((_relative_luminance(_over_white(fg)),
                     _relative_luminance(_over_white(bg))), reverse=True)
    return (l1 + 0.05) / (l2 + 0.05)


def text_color_on(background) -> str:
    """Black or white, whichever reads better on ``background`` (WCAG contrast ratio).

    The better of the two is always >= 4.58:1 on an opaque background, above WCAG's 4.5:1 for
    normal text, so every annotated cell is readable whatever its colour map.
    """
    bg = _over_white(background)
    return "black" if contrast_ratio("black", bg) >= contrast_ratio("white", bg) else "white"


def _as_matrix(matrix) -> np.ndarray:
    if hasattr(matrix, "detach"):  # a torch tensor, possibly on a GPU or requiring grad
        matrix = matrix.detach().float().cpu().numpy()
    m = np.asarray(matrix, dtype=float)
    if m.ndim != 2:
        raise ValueError(f"heatmap needs a 2-D matrix, got shape {tuple(m.shape)}")
    return m


def heatmap(ax, matrix, xlabels=None, ylabels=None, *, cmap="viridis", vmin=None, vmax=None,
            annotate=None, fmt="{:.2f}", colorbar=True, title=None, xlabel=None, ylabel=None):
    """Draw ``matrix`` (rows = y, columns = x) on ``ax`` with tick labels; returns the image.

    annotate: write each value in its cell (default: only when the matrix has <= 144 cells).
    Labels are thinned to at most ~16 per axis so that large matrices stay readable.
    """
    m = _as_matrix(matrix)
    rows, cols = m.shape  # (rows, cols)
    for name, labels, n in (("xlabels", xlabels, cols), ("ylabels", ylabels, rows)):
        if labels is not None and len(labels) != n:
            raise ValueError(f"{name} has {len(labels)} labels but the matrix has {n} "
                             f"{'columns' if name == 'xlabels' else 'rows'} (shape {m.shape})")
    im = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    for axis, labels, n in ((ax.xaxis, xlabels, cols), (ax.yaxis, ylabels, rows)):
        step = max(1, int(np.ceil(n / 16)))
        ticks = list(range(0, n, step))
        axis.set_ticks(ticks)
        axis.set_ticklabels([str(labels[i]) if labels is not None else str(i) for i in ticks])
    if cols > 8 and xlabels is not None and max(len(str(s)) for s in xlabels) > 3:
        ax.tick_params(axis="x", labelrotation=90)
    if annotate is None:
        annotate = m.size <= 144
    if annotate:
        rgba = im.to_rgba(m)  # (rows, cols, 4): each cell's colour as drawn (norm + cmap)
        for i in range(rows):
            for j in range(cols):
                ax.text(j, i, fmt.format(m[i, j]), ha="center", va="center", fontsize=7,
                        color=text_color_on(rgba[i, j]))
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    if title:
        ax.set_title(title)
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    return im


def _box(ax, x, y, w, h, color, text=None, lw=0.6, **kw):
    from matplotlib.patches import Rectangle

    ax.add_patch(Rectangle((x, y), w, h, facecolor=color, edgecolor="black", linewidth=lw))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", **kw)


def _arrow(ax, x0, x1, y, text):
    ax.annotate("", xy=(x1, y), xytext=(x0, y),
                arrowprops={"arrowstyle": "->", "linewidth": 1.2, "color": "#333333"})
    ax.text((x0 + x1) / 2, y + 0.35, text, ha="center", va="bottom", fontsize=8)


def overview_figure(n_head: int = 12, d_model: int = 768):
    """Multi-head attention as ANDREA computes it: one fused Q/K/V matmul, a view that splits
    the columns into heads, attention for all heads at once, concat, and W_O.

    Column stripes carry each head's colour (``head_colors``): head h owns columns
    ``h*head_dim:(h+1)*head_dim`` of Q, K, V and of the concatenated output.
    """
    import matplotlib.pyplot as plt

    if isinstance(n_head, bool) or not isinstance(n_head, int) or n_head < 1:
        raise ValueError(f"n_head must be an int >= 1, got {n_head!r}")
    if d_model % n_head:
        raise ValueError(f"d_model={d_model} is not divisible by n_head={n_head}; allowed "
                         f"n_head: {[d for d in range(1, d_model + 1) if d_model % d == 0]}")
    hd = d_model // n_head
    colors = head_colors(n_head)
    lw = 0.6 if n_head <= 16 else 0.0  # thin stripes: no edges, or they turn black
    fig, ax = plt.subplots(figsize=(11, 2.9))
    ax.set_xlim(0, 31.6)
    ax.set_ylim(0.2, 5.7)
    ax.axis("off")
    H, y0 = 4.0, 1.0  # height of the (T, .) matrices, baseline
    _box(ax, 0.0, y0, 1.9, H, "#dddddd", f"X\n(B, T, {d_model})", fontsize=8)
    _arrow(ax, 1.9, 4.6, y0 + H / 2, f"× W_QKV\n({d_model}, {3 * d_model})\none matmul")
    # Fused Q|K|V: (T, 3*d_model), each third striped by head.
    x, w = 4.8, 2.4
    for name_i, name in enumerate("QKV"):
        for h in range(n_head):
            _box(ax, x + name_i * w + h * w / n_head, y0, w / n_head, H, colors[h], lw=lw)
        ax.text(x + name_i * w + w / 2, y0 + H + 0.15, name, ha="center", va="bottom",
                fontsize=10, fontweight="bold")
    ax.text(x + 1.5 * w, y0 - 0.25, f"(B, T, {3 * d_model}): head h = columns "
            f"h*{hd}:(h+1)*{hd} of each", ha="center", va="top", fontsize=8)
    _arrow(ax, 12.2, 15.5, y0 + H / 2, f"view + transpose\n(B, {n_head}, T, {hd})")
    # One small attention tile per head (all heads run in one kernel launch).
    show = min(n_head, 16)
    cols_n = 4 if show > 8 else 2 if show > 1 else 1
    rows_n = -(-show // cols_n)
    cw, ch = 3.6 / cols_n, H / rows_n
    for h in range(show):
        r, c = divmod(h, cols_n)
        _box(ax, 15.7 + c * cw + 0.06, y0 + H - (r + 1) * ch + 0.06, cw - 0.12, ch - 0.12,
             colors[h], f"h{h}", fontsize=7 if show > 8 else 9)
    ax.text(17.5, y0 + H + 0.15, rf"$\mathrm{{softmax}}(QK^\top/\sqrt{{{hd}}})\,V$ per head", ha="center",
            va="bottom", fontsize=9)
    if show < n_head:
        ax.text(17.5, y0 - 0.25, f"(first {show} of {n_head} heads shown)", ha="center",
                va="top", fontsize=8)
    _arrow(ax, 19.5, 22.4, y0 + H / 2, f"concat\n(B, T, {n_head}×{hd}={d_model})")
    for h in range(n_head):
        _box(ax, 22.6 + h * 2.4 / n_head, y0, 2.4 / n_head, H, colors[h], lw=lw)
    _arrow(ax, 25.2, 29.6, y0 + H / 2, f"× W_O ({d_model}, {d_model})\nmixes the heads")
    _box(ax, 29.6, y0, 1.9, H, "#dddddd", f"out\n(B, T, {d_model})", fontsize=8)
    ax.set_title(f"Multi-head attention, fused: d_model={d_model}, n_head={n_head}, "
                 f"head_dim={hd}", fontsize=11)
    fig.subplots_adjust(left=0.01, right=0.99, top=0.9, bottom=0.02)
    return fig


def savefig_for_readme(fig, path, *, dpi: int = 100, max_bytes: int = 150_000) -> int:
    """Save ``fig`` as a small reproducible PNG (no timestamp/version metadata) and close it.

    If the PNG is larger than ``max_bytes`` it is reduced to a 256-colour palette; if it is
    still too large, ValueError says by how much. Returns the file size in bytes.
    """
    import matplotlib.pyplot as plt
    from PIL import Image

    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"path must end in .png, got {str(path)!r}")
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    finally:
        plt.close(fig)
    data = buf.getvalue()
    if len(data) > max_bytes:
        img = Image.open(io.BytesIO(data)).convert("RGB")
        img = img.quantize(colors=256, method=Image.Quantize.MEDIANCUT,
                           dither=Image.Dither.NONE)
        buf = io.BytesIO()
        img.save(buf, format="PNG", optimize=True)
        data = buf.getvalue()
    if len(data) > max_bytes:
        raise ValueError(f"{path} would be {len(data)} bytes, over max_bytes={max_bytes}; "
                         f"lower dpi (now {dpi}) or the figure size")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return len(data)
