"""The engine behind a live slider: frames kept per position, drawn on one background thread.

Used by ``andrea_edu.notebook.slider.live_widget`` (introduced with the book's first slider). A
chapter still writes one ``plot_fn(**kw) -> Figure``; this module decides when it runs:

- every position's PNG is kept (``LiveFigure.frames``), so a position seen before is shown at
  once, without calling ``plot_fn`` again;
- a move never draws on the kernel's main thread: the slider's observer records the wanted
  position and puts the slider in the drawing thread's queue (a ``queue.SimpleQueue``); the
  main thread stays free to read the next move, so quick successive moves draw only the last
  one (latest wins: what a slider wants is read when its turn comes; a frame finished for a
  position the reader has already left is kept for later but not shown);
- after the wanted frame, the same thread draws the positions one step away from where the
  slider stands (one step on any one slider), one frame per turn, so that the next step
  usually finds its frame ready; sliders that wait take turns with it, one frame each.

Thread safety. pyplot's figure registry is shared with the reader's cells (the inline backend
shows and closes every figure it holds after each cell), so a frame's figure must never be put
in it. While ``draw_png`` calls ``plot_fn``, ``pyplot.figure`` (and with it ``pyplot.subplots``)
returns, on that thread only, a plain ``Figure`` with its own Agg canvas, registered nowhere;
every other thread gets pyplot's usual figure. Plotting functions must use the figure they
create (``fig, ax = plt.subplots(); ax.plot(...)``), never ``plt.gca()`` / ``plt.gcf()``.
matplotlib's mathtext parser is one shared object (a pyparsing grammar with its own state and
cache): two threads parsing "$10^{2}$" at once corrupted it, and a figure in the reader's cell
failed that way while a frame was drawn here; its parses take turns under one lock.
"""
from __future__ import annotations

import functools
import io
import queue
import sys
import threading
import time
import traceback
from dataclasses import dataclass

LIVE_DPI = 72  # live figures: matplotlib's inline-backend resolution; static frames use 90
# Interpreter switch interval while the thread draws: the main thread gets the GIL back within
# 1 ms (not Python's 5 ms) at each of the many points where it releases it to answer a move.
SWITCH_INTERVAL_S = 0.001

_owned = threading.local()  # .on: this thread is drawing a frame
_patch_lock = threading.Lock()
_mathtext_lock = threading.RLock()
_todo: queue.SimpleQueue = queue.SimpleQueue()  # sliders with a move to answer (FIFO)
_thread: list[threading.Thread] = []  # the drawing thread, once started
_start_lock = threading.Lock()


def _patch_matplotlib() -> None:
    """Once per process: inside ``draw_png``, ``pyplot.figure`` (and with it ``subplots``) makes
    a Figure on its own Agg canvas that pyplot never holds; mathtext parses take turns."""
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.mathtext import MathTextParser

    with _patch_lock:
        if getattr(plt.figure, "_andrea_owned", False):
            return
        figure, parse = plt.figure, MathTextParser.parse

        @functools.wraps(figure)
        def owned_figure(num=None, figsize=None, dpi=None, *, FigureClass=Figure, clear=False,
                         **kwargs):
            if not getattr(_owned, "on", False):
                return figure(num, figsize, dpi, FigureClass=FigureClass, clear=clear, **kwargs)
            fig = FigureClass(figsize=figsize, dpi=dpi, **kwargs)
            FigureCanvasAgg(fig)
            return fig

        @functools.wraps(parse)
        def locked_parse(self, *args, **kwargs):
            with _mathtext_lock:
                return parse(self, *args, **kwargs)

        setattr(owned_figure, "_andrea_owned", True)  # the mark that makes this idempotent
        plt.figure = owned_figure  # pyplot.subplots and subplot_mosaic look it up at call time
        setattr(MathTextParser, "parse", locked_parse)  # for every thread


def draw_png(plot_fn, kw: dict, dpi: int = LIVE_DPI, facecolor: str | None = "white") -> bytes:
    """``plot_fn(**kw)`` as PNG bytes, drawn on a figure that pyplot never holds (any thread);
    facecolor "white" (live: readable on a dark JupyterLab theme) or None (the figure's own)."""
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    _patch_matplotlib()
    _owned.on = True
    try:
        fig = plot_fn(**kw)
    finally:
        _owned.on = False
    if not isinstance(fig, Figure):
        raise TypeError(f"plot_fn must return a matplotlib Figure; with "
                        f"{', '.join(f'{k}={v}' for k, v in kw.items())} it returned "
                        f"{type(fig).__name__}")
    if fig.canvas.manager is not None:  # made through another route: take it out of pyplot
        plt.close(fig)
    buf = io.BytesIO()  # no "Software" metadata: identical figures give identical bytes
    fig.savefig(buf, format="png", dpi=dpi, facecolor=facecolor, metadata={"Software": None})
    return buf.getvalue()


@dataclass
class Frame:
    """One position of a slider: a PNG (or the message shown instead) and how it was made."""
    png: bytes | None
    message: str | None
    draw_ms: float  # compute + draw time of this frame (0 for a message)


class LiveFigure:
    """One slider's frames by position (tuples of value indices), the wanted and the shown one.

    ``make(key)`` draws a position's Frame; ``show(key, frame, source, asked_at)`` puts one
    on screen, called with the lock held and only for the wanted position. ``frames`` starts
    with the messages of the invalid positions.
    """

    def __init__(self, make, show, shape: tuple, frames: dict):
        self.make, self._show, self.shape, self.frames = make, show, shape, frames
        self.lock = threading.RLock()
        self.wanted: tuple | None = None
        self.shown: tuple | None = None
        self.asked_at = time.perf_counter()

    def move(self, key: tuple, here: bool = False) -> None:
        """Show ``key`` now if its frame is kept, else have it drawn: on the drawing thread, or
        on this one when ``here``; then the thread draws the positions a step away."""
        with self.lock:
            self.wanted, self.asked_at = key, time.perf_counter()
            if key in self.frames:
                self._put(key, "ready")
        if here and key not in self.frames:
            self.store(key, self.make(key))
        with _start_lock:
            if not _thread:
                _thread.append(threading.Thread(target=_draw_forever, daemon=True,
                                                name="andrea-slider-render"))
                _thread[0].start()
        _todo.put(self)

    def store(self, key: tuple, frame: Frame) -> None:
        """Keep a finished frame; show it if it is the wanted position and not on screen."""
        with self.lock:
            self.frames.setdefault(key, frame)
            if key == self.wanted and self.shown != key:
                self._put(key, "drawn")

    def _put(self, key: tuple, source: str) -> None:
        self.shown = key
        self._show(key, self.frames[key], source, self.asked_at)

    def todo(self) -> tuple | None:
        """The next position to draw: the wanted one, else one a step away on one slider."""
        with self.lock:
            w = self.wanted
            near = [] if w is None else [w] + [
                w[:i] + (w[i] + d,) + w[i + 1:] for i in range(len(w)) for d in (1, -1)
                if 0 <= w[i] + d < self.shape[i]]
            return next((k for k in near if k not in self.frames), None)


def _draw_forever() -> None:
    """The drawing thread: takes the next slider from the queue (each move puts its slider
    there), draws one frame of it (``todo``: the wanted position first, else one a step away),
    and puts the slider back while it has more to draw. Latest wins: what a slider wants is
    read when its turn comes, so moves made while a frame is drawn change what is drawn next."""
    while True:
        live = _todo.get()
        key = live.todo()
        if key is None:
            continue
        interval = sys.getswitchinterval()
        sys.setswitchinterval(min(interval, SWITCH_INTERVAL_S))
        try:
            frame = live.make(key)
        except Exception as e:  # noqa: BLE001 (a plot that raises must not stop the thread)
            print("".join(traceback.format_exception(e)), file=sys.stderr)
            frame = Frame(None, f"plot_fn raised {type(e).__name__}: {e}", 0.0)
        finally:
            sys.setswitchinterval(interval)
        live.store(key, frame)
        _todo.put(live)
