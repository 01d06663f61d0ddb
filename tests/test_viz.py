"""Tests of andrea_edu.notebook.slider (the static and live slider, frames, latency) and of
andrea_edu.figures.viz (the shared figure helpers)."""
from __future__ import annotations

import html
import html.parser
import json
import re
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pytest

from andrea_edu.figures import viz
from andrea_edu.notebook import slider as S

N_HEAD = [1, 2, 4]
HEAD_DIM = [8, 16]


def plot_bars(n_head=1, head_dim=8):
    """A figure that depends on both parameters (n_head bars of height head_dim)."""
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.bar(range(n_head), [head_dim] * n_head, color=viz.head_colors(n_head))
    ax.set_ylim(0, 20)
    ax.set_title(f"n_head={n_head}, head_dim={head_dim}")
    return fig


def plot_ignores_head_dim(n_head=1, head_dim=8):
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.bar(range(n_head), [1] * n_head)
    return fig


def only_small(n_head, head_dim):
    return n_head * head_dim <= 32 or f"n_head*head_dim={n_head * head_dim} exceeds 32"


class _Parser(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []  # (tag, attrs dict)
        self.scripts = []
        self._in_script = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = dict(attrs)
            self.scripts.append([dict(attrs), ""])

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = None

    def handle_data(self, data):
        if self._in_script is not None:
            self.scripts[-1][1] += data


def parse(text):
    p = _Parser()
    p.feed(text)
    return p


def slider_data(p):
    blobs = [body for attrs, body in p.scripts if attrs.get("type") == "application/json"]
    assert len(blobs) == 1
    return json.loads(blobs[0])


def test_static_html_one_range_per_param_one_frame_per_combination():
    text = S.static_html(plot_bars, alt="bars", n_head=N_HEAD, head_dim=HEAD_DIM)
    p = parse(text)
    ranges = [a for t, a in p.tags if t == "input" and a.get("type") == "range"]
    assert [a["data-param"] for a in ranges] == ["n_head", "head_dim"]
    assert [int(a["max"]) for a in ranges] == [len(N_HEAD) - 1, len(HEAD_DIM) - 1]
    data = slider_data(p)
    assert len(data["frames"]) == len(N_HEAD) * len(HEAD_DIM)
    assert len(data["images"]) == len(N_HEAD) * len(HEAD_DIM)  # every frame differs here
    assert all(src.startswith("data:image/png;base64,") for src in data["images"])
    root = [a for t, a in p.tags if "andrea-slider" in a.get("class", "").split()]
    assert len(root) == 1 and root[0]["data-params"] == "n_head,head_dim"
    assert int(root[0]["data-frame-ms"]) >= 0  # median compute+draw time of one frame
    # Self-contained: no external resources of any kind.
    assert not re.search(r"(src|href)=\"(https?:)?//", text)
    assert "require" not in text


def test_static_html_default_and_initial_frame():
    text = S.static_html(plot_bars, default={"n_head": 4}, n_head=N_HEAD, head_dim=HEAD_DIM)
    p = parse(text)
    values = {a["data-param"]: int(a["value"]) for t, a in p.tags if t == "input"}
    assert values == {"n_head": 2, "head_dim": 0}  # n_head=4 given; head_dim: middle of 2 -> 0
    img = [a for t, a in p.tags if t == "img"][0]
    data = slider_data(p)
    assert img["src"] == data["images"][data["frames"]["2,0"]["img"]]
    assert "n_head=4" in img["alt"] and "head_dim=8" in img["alt"]


def test_identical_frames_stored_once():
    data = slider_data(parse(S.static_html(plot_ignores_head_dim, n_head=N_HEAD,
                                             head_dim=HEAD_DIM)))
    assert len(data["frames"]) == 6 and len(data["images"]) == 3
    assert data["frames"]["1,0"]["img"] == data["frames"]["1,1"]["img"]


def test_unique_dom_ids_per_slider():
    found = [re.search(r'class="andrea-slider" id="([^"]+)"', S.static_html(
        plot_bars, n_head=[1, 2], head_dim=[8])) for _ in range(3)]
    ids = [m.group(1) for m in found if m is not None]
    assert len(ids) == 3
    assert len(set(ids)) == 3


def test_static_frames_differ_when_a_param_changes():
    frames = S.static_frames(plot_bars, n_head=N_HEAD, head_dim=HEAD_DIM)
    assert set(frames) == {(n, d) for n in N_HEAD for d in HEAD_DIM}
    assert all(png[:8] == b"\x89PNG\r\n\x1a\n" for png in frames.values())
    assert frames[(1, 8)] != frames[(2, 8)]
    assert frames[(1, 8)] != frames[(1, 16)]
    same = S.static_frames(plot_ignores_head_dim, n_head=[2], head_dim=HEAD_DIM)
    assert same[(2, 8)] == same[(2, 16)]


def test_invalid_combinations_show_the_message():
    text = S.static_html(plot_bars, valid=only_small, n_head=N_HEAD, head_dim=HEAD_DIM)
    data = slider_data(parse(text))
    assert data["frames"]["2,1"] == {"msg": "n_head=4, head_dim=16: n_head*head_dim=64 exceeds 32"}
    assert "img" in data["frames"]["2,0"]
    assert len(data["images"]) == 5
    assert set(S.static_frames(plot_bars, valid=only_small, n_head=N_HEAD,
                                 head_dim=HEAD_DIM)) == {(n, d) for n in N_HEAD
                                                         for d in HEAD_DIM} - {(4, 16)}
    # Starting on an invalid combination shows the message, not an image.
    start = parse(S.static_html(plot_bars, valid=only_small, default={"n_head": 4,
                                  "head_dim": 16}, n_head=N_HEAD, head_dim=HEAD_DIM))
    assert "hidden" in [a for t, a in start.tags if t == "img"][0]
    text = S.static_html(plot_bars, valid=lambda n_head: n_head != 2, n_head=N_HEAD)
    assert slider_data(parse(text))["frames"]["1"]["msg"] == "n_head=2: This combination is not valid."


def test_message_cannot_close_the_script_element():
    text = S.static_html(plot_bars, valid=lambda n_head: n_head == 1 or "</script><b>x",
                           n_head=[1, 2])
    assert "</script><b>" not in text
    assert "</script><b>x" in slider_data(parse(text))["frames"]["1"]["msg"]


@pytest.mark.parametrize("kwargs, exc, words", [
    ({}, ValueError, "at least one parameter"),
    ({"n_head": []}, ValueError, "n_head"),
    ({"n_head": 4}, TypeError, "n_head"),
    ({"n_head": "124"}, TypeError, "n_head"),
    ({"n_head": [1, 1]}, ValueError, "repeated"),
    ({"n_head": [1, 2], "default": {"n_head": 3}}, ValueError, "n_head=3"),
    ({"n_head": [1, 2], "default": {"head_dim": 8}}, ValueError, "head_dim"),
    ({"n_head": [1, 2], "valid": lambda n_head: False}, ValueError, "rejected every"),
])
def test_bad_input_names_the_parameter(kwargs, exc, words):
    with pytest.raises(exc, match=re.escape(words)):
        S.slider(plot_bars, static=True, **kwargs)


def test_plot_fn_must_return_a_figure():
    with pytest.raises(TypeError, match="returned list"):
        S.static_frames(lambda n_head: [n_head], n_head=[1])
    with pytest.raises(TypeError, match="callable"):
        S.slider("plot", static=True, n_head=[1])


def test_slider_static_returns_html_and_closes_figures():
    from IPython.display import HTML

    before = len(plt.get_fignums())
    out = S.slider(plot_bars, static=True, n_head=N_HEAD, head_dim=HEAD_DIM)
    assert isinstance(out, HTML) and 'class="andrea-slider"' in out.data
    assert len(plt.get_fignums()) == before


def test_book_build_env_selects_static(monkeypatch):
    from IPython.display import HTML

    monkeypatch.setenv("ANDREA_BOOK_BUILD", "1")
    assert isinstance(S.slider(plot_bars, n_head=[1, 2]), HTML)
    monkeypatch.setenv("ANDREA_BOOK_BUILD", "0")
    assert not isinstance(S.slider(plot_bars, n_head=[1, 2]), HTML)


def shown(box, timeout: float = 10.0) -> dict:
    """What a live slider shows once its wanted position is on screen, read from the figure's
    HTML as a reader's browser gets it: the position (data-andrea-key), whether its frame was
    kept or drawn for this move (data-andrea-source), the PNG, or the message shown instead."""
    import base64
    import time

    end = time.monotonic() + timeout
    while True:
        with box.live.lock:  # held while a frame is put on screen
            if box.live.shown == box.live.wanted:
                value = box.figure.value
                break
        assert time.monotonic() < end, f"the wanted position did not show in {timeout} s"
        time.sleep(0.01)
    key, source = (re.search(rf'data-andrea-{a}="([^"]*)"', value) for a in ("key", "source"))
    png = re.search(r'src="data:image/png;base64,([^"]+)"', value)
    msg = re.search(r"</b>: (.*)</div>$", value)
    assert key and source and (png or msg), value[:300]
    return {"key": html.unescape(key.group(1)), "source": source.group(1),
            "png": base64.b64decode(png.group(1)) if png else None,
            "message": html.unescape(msg.group(1)) if msg else None}


def idle(box, timeout: float = 20.0) -> None:
    """Wait until the drawing thread has nothing left to draw for this slider."""
    import time

    end = time.monotonic() + timeout
    while box.live.todo() is not None:
        assert time.monotonic() < end, f"still drawing after {timeout} s"
        time.sleep(0.01)


def test_live_mode_returns_widgets_that_redraw(monkeypatch):
    import ipywidgets as widgets

    monkeypatch.delenv("ANDREA_BOOK_BUILD", raising=False)
    box = S.slider(plot_bars, valid=only_small, title="bars", n_head=N_HEAD, head_dim=HEAD_DIM,
                     alt=lambda n_head, head_dim: f"{n_head} bars")
    assert isinstance(box, widgets.VBox)
    sliders = [c for c in box.children if isinstance(c, widgets.SelectionSlider)]
    assert [s.description for s in sliders] == ["n_head", "head_dim"]
    assert all(s.continuous_update is False for s in sliders)
    assert box.figure in box.children and isinstance(box.figure, widgets.HTML)
    now = shown(box)
    first = now["png"]
    assert first is not None and now["key"] == "n_head=2, head_dim=8"
    assert re.search(r"updated in \d+ ms", box.timing.value)
    # The figure carries its alt text (and shows it as a caption) and names its position.
    img = [a for t, a in parse(box.figure.value).tags if t == "img"]
    assert img[0]["alt"] == "2 bars (n_head=2, head_dim=8)"
    assert img[0]["src"].startswith("data:image/png;base64,")
    assert 'data-andrea-key="n_head=2, head_dim=8"' in box.figure.value
    assert "<figcaption" in box.figure.value
    box.sliders["n_head"].value = 4
    now = shown(box)
    assert now["key"] == "n_head=4, head_dim=8" and now["png"] not in (None, first)
    box.sliders["head_dim"].value = 16
    now = shown(box)
    assert now["png"] is None and "exceeds 32" in now["message"]
    assert "andrea-live-msg" in box.figure.value and "exceeds 32" in box.figure.value
    box.sliders["head_dim"].value = 8  # seen before: shown from the kept frame, not redrawn
    now = shown(box)
    assert now["source"] == "ready" and now["png"] == box.live.frames[(2, 0)].png
    for w in box.children:
        w.close()
    box.close()


def test_live_background_draws_ahead_and_the_last_move_wins():
    """The drawing thread: quick moves while it is busy show only the last position, which is
    drawn next (before any neighbour); figures pyplot never sees; invalid positions show their
    message without a draw."""
    import threading

    from andrea_edu.notebook.slider import live_widget

    calls, gate, busy = [], threading.Event(), threading.Event()

    def slow_plot(n_head, head_dim):
        calls.append((n_head, head_dim, threading.current_thread().name))
        if len(calls) > 1:
            busy.set()
            gate.wait(10)  # the first background draw waits until the moves below are made
        return plot_bars(n_head, head_dim)

    before = set(plt.get_fignums())
    box = live_widget(slow_plot, valid=only_small, n_head=N_HEAD, head_dim=HEAD_DIM,
                      default={"n_head": 1, "head_dim": 8})
    assert calls[0][2] == threading.current_thread().name  # the first view: the cell's thread
    assert busy.wait(10)  # the thread is now drawing a neighbour (held by the gate)
    assert calls[1][:2] == (2, 8)  # one step away from (1, 8), on the first slider
    for n in (2, 4, 1, 4):  # quick moves while it is busy
        box.sliders["n_head"].value = n
    gate.set()
    now = shown(box)
    assert now["key"] == "n_head=4, head_dim=8" and now["source"] == "drawn"
    idle(box)
    drawn = [(n, d) for n, d, _ in calls]
    assert drawn == [(1, 8), (2, 8), (4, 8)]  # the last move next; n_head=1 was kept
    assert {t for _, _, t in calls[1:]} == {"andrea-slider-render"}
    assert set(plt.get_fignums()) == before  # pyplot never held a figure of the thread
    assert box.live.frames[(2, 1)].message.startswith("n_head*head_dim=64")
    assert box.live.frames[(2, 1)].png is None
    box.close()


def test_live_draws_one_step_ahead_of_where_the_slider_stands():
    from andrea_edu.notebook.slider import live_widget

    box = live_widget(plot_bars, n_head=[1, 2, 3, 4, 5], head_dim=[8])
    idle(box)
    assert set(box.live.frames) == {(1, 0), (2, 0), (3, 0)}  # start 3: itself, 2 and 4
    box.sliders["n_head"].value = 4  # drawn ahead: shown at once, its own neighbour drawn
    assert shown(box)["source"] == "ready"
    assert "kept, drawn in" in box.timing.value
    idle(box)
    assert set(box.live.frames) == {(1, 0), (2, 0), (3, 0), (4, 0)}
    box.close()


def test_a_plot_that_raises_on_the_drawing_thread_shows_its_error():
    from andrea_edu.notebook.slider import live_widget

    def plot(n_head):
        if n_head == 3:
            raise ValueError("no three")
        return plot_bars(n_head)

    box = live_widget(plot, n_head=[1, 2, 3, 4, 5, 6], default={"n_head": 1})
    box.sliders["n_head"].value = 3
    assert shown(box)["message"] == "plot_fn raised ValueError: no three"
    box.sliders["n_head"].value = 4  # the thread goes on
    assert shown(box)["png"] is not None
    box.close()


def test_head_colors_are_consistent_and_distinct():
    assert viz.head_colors(4) == viz.head_colors(12)[:4]
    many = viz.head_colors(48)
    assert len(set(many)) == 48
    assert all(re.fullmatch(r"#[0-9a-f]{6}", c) for c in many)
    bad: Any
    for bad in (0, -1, 2.0, True):  # a float and a bool among them: the check under test
        with pytest.raises(ValueError, match="n_head"):
            viz.head_colors(bad)


def test_heatmap_draws_the_matrix_and_checks_labels():
    m = np.arange(12.0).reshape(3, 4)  # (rows=3, cols=4)
    fig, ax = plt.subplots()
    try:
        im = viz.heatmap(ax, m, xlabels=list("abcd"), ylabels=["r0", "r1", "r2"], title="t")
        np.testing.assert_array_equal(im.get_array(), m)
        assert [t.get_text() for t in ax.get_xticklabels()] == list("abcd")
        assert len(ax.texts) == 12  # annotated: small matrix
        with pytest.raises(ValueError, match="xlabels has 3 labels"):
            viz.heatmap(ax, m, xlabels=list("abc"))
        with pytest.raises(ValueError, match="2-D"):
            viz.heatmap(ax, np.zeros((2, 2, 2)))
    finally:
        plt.close(fig)


def test_overview_figure_and_readme_png(tmp_path):
    fig = viz.overview_figure(n_head=12, d_model=768)
    assert "head_dim=64" in fig.axes[0].get_title()
    size = viz.savefig_for_readme(fig, tmp_path / "o.png")
    data = (tmp_path / "o.png").read_bytes()
    assert size == len(data) <= 150_000 and data[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="max_bytes"):
        viz.savefig_for_readme(viz.overview_figure(), tmp_path / "big.png", max_bytes=1000)
    with pytest.raises(ValueError, match="not divisible by n_head=5"):
        viz.overview_figure(n_head=5)


def test_show_source_reads_the_library_and_refuses_what_has_no_source():
    from andrea_edu import projections
    from andrea_edu.figures import viz

    md = viz.source_markdown(projections.split_heads, projections.merge_heads).data
    assert md.count("```python") == 2
    assert "def split_heads" in md and "def merge_heads" in md
    with pytest.raises(TypeError, match="cannot read the source"):
        viz.source_markdown(len)
    with pytest.raises(ValueError, match="at least one"):
        viz.show_source()


def test_mathtext_parses_take_turns_across_threads():
    """A live slider draws on a background thread while the reader's cells draw on the main
    one; matplotlib's mathtext parser is one shared object, so parses must take turns."""
    import threading

    from matplotlib.mathtext import MathTextParser

    from andrea_edu.notebook import live

    live._patch_matplotlib()
    parser, done = MathTextParser("path"), threading.Event()
    with live._mathtext_lock:  # as if the other thread were parsing now
        def parse_then_signal() -> None:
            parser.parse(r"$10^{3}$")
            done.set()

        t = threading.Thread(target=parse_then_signal)
        t.start()
        assert not done.wait(0.3)  # this parse waits its turn
    assert done.wait(10)
    t.join(10)
