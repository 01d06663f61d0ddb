"""The engine behind a live slider: frames cached per position, drawn on one background thread.

Used by ``andrea_edu.notebook.slider.live_widget`` (introduced with the book's first slider). A
chapter still writes one ``plot_fn(**kw) -> Figure``; this module decides when it runs:

- every position's PNG is kept (``LiveFigure.frames``), so a position seen before is shown at
  once, without calling ``plot_fn`` again;
- a move never draws on the kernel's main thread: the slider's observer records the wanted
  position and wakes the drawing thread (``Renderer``); the main thread stays free to read the
  next move, so quick successive moves draw only the last one (latest wins: a frame finished for
  a position the reader has already left is kept for later but not shown);
- when nobody waits, the same thread draws the positions nearest to where each slider stands
  (one step on each slider first, then two..., ahead of the last move before behind it), up to
  ``PREFETCH_MAX`` frames per slider, so that a first visit usually finds its frame ready. While
  the reader's cells run (Run All) it draws only one step ahead, the rest once the kernel idles.

Thread safety. pyplot's figure registry is shared with the reader's cells (the inline backend
shows and closes every figure it holds after each cell), so the drawing thread must never put a
figure in it. While ``owned_figures()`` is active on a thread, ``pyplot.figure`` (and with it
``pyplot.subplots``) returns a plain ``Figure`` with its own Agg canvas, registered nowhere; every
other thread gets pyplot's usual figure. Plotting functions must use the figure they create (the
OO API: ``fig, ax = plt.subplots(); ax.plot(...)``), never ``plt.gca()`` / ``plt.gcf()``.
"""
from __future__ import annotations

import contextlib
import functools
import io
import sys
import threading
import time
import traceback
import weakref
from dataclasses import dataclass

LIVE_DPI = 72  # live figures: matplotlib's inline-backend resolution; static frames use 90
PREFETCH_MAX = 48  # frames drawn ahead per slider (~40-100 KiB each at 72 dpi)
# While a cell runs, draw ahead only one step from where each slider stands: drawing further
# competes with the reader's cells for the interpreter (the GIL) and for the CPU.
RING_WHILE_CELLS_RUN = 1
# ... and until the kernel has been idle this long: Run All starts the next cell within
# milliseconds of the last one, and a frame once begun cannot be stopped.
IDLE_GRACE_S = 0.75
# Interpreter switch interval while the thread draws: the main thread gets the GIL back within
# 1 ms (not Python's 5 ms) at each of the many points where it releases it to answer a move.
SWITCH_INTERVAL_S = 0.001

_owned = threading.local()
_hook_lock = threading.Lock()
_mathtext_lock = threading.RLock()


def _owned_figure(num=None, figsize=None, dpi=None, *, facecolor=None, edgecolor=None,
                  frameon=True, FigureClass=None, clear=False, **kwargs):
    """What ``pyplot.figure`` returns on an owning thread: a Figure on its own Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = (FigureClass or Figure)(figsize=figsize, dpi=dpi, facecolor=facecolor,
                                  edgecolor=edgecolor, frameon=frameon, **kwargs)
    FigureCanvasAgg(fig)
    return fig


def _install_figure_hook() -> None:
    """Wrap ``pyplot.figure`` once so that owning threads get registry-free figures, and make
    mathtext parsing one thread at a time (see ``_serialize_mathtext``)."""
    import matplotlib.pyplot as plt

    with _hook_lock:
        if getattr(plt.figure, "_andrea_owned", False):
            return
        _serialize_mathtext()
        original = plt.figure

        @functools.wraps(original)
        def figure(*args, **kwargs):
            if getattr(_owned, "depth", 0):
                return _owned_figure(*args, **kwargs)
            return original(*args, **kwargs)

        setattr(figure, "_andrea_owned", True)  # the mark that makes this hook idempotent
        plt.figure = figure  # pyplot.subplots and subplot_mosaic look it up at call time


def _serialize_mathtext() -> None:
    """Hold a lock around ``MathTextParser.parse``, for every thread.

    matplotlib's mathtext parser is one shared object (a pyparsing grammar with its own state
    stack and packrat cache): two threads parsing "$10^{2}$" at once can corrupt it, and a
    figure in the reader's cell failed that way while a frame was drawn here. Every mathtext
    string, from any thread, goes through ``MathTextParser.parse`` (Agg's draw_mathtext and the
    text-extent code both do), so one lock there makes the parses take turns; a parse takes
    well under a millisecond once cached.
    """
    from matplotlib.mathtext import MathTextParser

    original = MathTextParser.parse
    if getattr(original, "_andrea_locked", False):
        return

    @functools.wraps(original)
    def parse(self, *args, **kwargs):
        with _mathtext_lock:
            return original(self, *args, **kwargs)

    setattr(parse, "_andrea_locked", True)  # the mark that makes this patch idempotent
    setattr(MathTextParser, "parse", parse)  # a method replaced on the class, for every thread


@contextlib.contextmanager
def owned_figures():
    """On this thread, pyplot.figure/subplots make figures that pyplot does not track."""
    _install_figure_hook()
    _owned.depth = getattr(_owned, "depth", 0) + 1
    try:
        yield
    finally:
        _owned.depth -= 1


def draw_png(plot_fn, kw: dict, dpi: int = LIVE_DPI) -> bytes:
    """``plot_fn(**kw)`` drawn to PNG bytes on a figure that pyplot never sees (any thread)."""
    from matplotlib.figure import Figure

    with owned_figures():
        fig = plot_fn(**kw)
    if not isinstance(fig, Figure):
        raise TypeError(f"plot_fn must return a matplotlib Figure; with "
                        f"{', '.join(f'{k}={v}' for k, v in kw.items())} it returned "
                        f"{type(fig).__name__}")
    if fig.canvas.manager is not None:  # made through another route: take it out of pyplot
        import matplotlib.pyplot as plt

        plt.close(fig)
    buf = io.BytesIO()
    # White, not the inline backend's transparent face: readable on a dark JupyterLab theme.
    fig.savefig(buf, format="png", dpi=dpi, facecolor="white", metadata={"Software": None})
    return buf.getvalue()


@dataclass
class Frame:
    """One position of a slider: a PNG (or the message shown instead) and how it was made."""
    png: bytes | None
    message: str | None
    draw_ms: float  # compute + draw time of this frame (0 for a message)
    how: str  # "drawn" (for a move or the first view), "ahead" (before anyone asked), "message"


class LiveFigure:
    """Frames of one slider by position, the wanted position and the shown one.

    keys are tuples of value indices, one per parameter. ``make(key, how)`` returns the Frame
    of a position (it calls plot_fn, so it runs on the drawing thread, or on the caller's thread when
    there is none). ``show(key, frame, source, asked_at)`` puts a frame on screen; it is called
    with the lock held, from whichever thread finished last, and only for the wanted position.
    """

    def __init__(self, make, show, shape: tuple, *, background: bool,
                 prefetch_max: int = PREFETCH_MAX):
        self.make, self._show, self.shape = make, show, shape
        self.background = background
        self.frames: dict[tuple, Frame] = {}
        self.lock = threading.Condition(threading.RLock())
        self.wanted: tuple | None = None
        self.shown: tuple | None = None
        self.asked_at = time.perf_counter()
        self.touched = time.monotonic()
        self.prefetch_left = prefetch_max if background else 0
        self.failed: set = set()  # positions whose background draw raised: drawn only if asked
        self.heading = (0,) * len(shape)  # sign of the last move on each slider

    # -------------------------------------------------------------- main thread: moves
    def first(self, key: tuple) -> None:
        """Draw and show the starting position now, on the caller's thread (the cell's)."""
        t0 = time.perf_counter()
        frame = self.make(key, "drawn")
        with self.lock:
            self.frames[key] = frame
            self.wanted, self.asked_at = key, t0
            self._put(key, frame, "drawn")
        if self.background:
            RENDERER.add(self)

    def move(self, key: tuple, message: str | None = None) -> None:
        """The reader moved a slider: show ``key`` now if its frame exists, else have it drawn."""
        now = time.perf_counter()
        with self.lock:
            if self.wanted is not None:  # which way the reader is going, slider by slider
                self.heading = tuple((a > b) - (a < b) for a, b in zip(key, self.wanted))
            self.wanted, self.asked_at, self.touched = key, now, time.monotonic()
            if key not in self.frames and message is not None:
                self.frames[key] = Frame(None, message, 0.0, "message")
            frame = self.frames.get(key)
            if frame is not None:
                self._put(key, frame, "ready")
                return
        if self.background:
            RENDERER.wake()
            return
        frame = self.make(key, "drawn")  # no drawing thread: draw here (plain Python, tests)
        self.store(key, frame)

    # -------------------------------------------------------------- any thread
    def store(self, key: tuple, frame: Frame) -> None:
        """Keep a finished frame; show it if it is the wanted position and not on screen."""
        with self.lock:
            self.frames.setdefault(key, frame)
            if key == self.wanted and self.shown != key:
                self._put(key, self.frames[key], "drawn")

    def _put(self, key, frame, source):
        self.shown = key
        self._show(key, frame, source, self.asked_at)
        self.lock.notify_all()

    def wait(self, timeout: float = 30.0) -> bool:
        """Block until the wanted position is on screen (tests; never called by the widget)."""
        with self.lock:
            return self.lock.wait_for(lambda: self.shown == self.wanted, timeout)

    # -------------------------------------------------------------- the drawing thread
    def todo(self):
        """(priority, key, how) of the next frame to draw for this slider, or None.

        Priority 0 is the wanted position; then 1 + its distance (in steps, summed over the
        sliders) from the wanted position, nearest first, while the prefetch budget lasts; at
        equal distance the positions ahead of the last move come before those behind it.
        """
        with self.lock:
            want = self.wanted
            if want is None:
                return None
            if want not in self.frames:
                return (0, want, "drawn")
            if self.prefetch_left <= 0:
                return None
            best = None
            for key in _positions(self.shape):
                if key in self.frames or key in self.failed:
                    continue
                d = sum(abs(a - b) for a, b in zip(key, want))
                behind = any(h and (k - w) * h < 0 for k, w, h in zip(key, want, self.heading))
                if best is None or (d, behind) < best[0]:
                    best = ((d, behind), key)
            if best is None:
                self.prefetch_left = 0
                return None
            return (1 + best[0][0], best[1], "ahead")


def _positions(shape: tuple):
    if not shape:
        yield ()
        return
    for i in range(shape[0]):
        for rest in _positions(shape[1:]):
            yield (i,) + rest


class Renderer:
    """One daemon thread that draws frames for every live slider of the process.

    Its loop: the wanted position of any slider first (the most recently moved slider first),
    else the nearest not-yet-drawn position of any slider (ring by ring), else sleep until woken.
    One thread, not one per slider: the kernel's CPU time goes to one frame at a time. Inside
    an IPython kernel it follows the cells (pre/post_run_cell events): while one runs, it draws
    only what a reader waits for and the positions one step away.
    """

    def __init__(self):
        self._cond = threading.Condition()
        self._lives: weakref.WeakSet = weakref.WeakSet()
        self._thread = None
        self._hooked = False
        self.cell_running = False
        self.idle_since = 0.0  # when the last cell finished (monotonic clock)
        self.drawn = 0  # frames drawn by the thread (tests read it)
        self.idle = False  # the thread sleeps until woken: nothing to draw, nothing deferred

    def _hook_cells(self) -> None:
        try:
            from IPython import get_ipython
        except ImportError:
            return
        ip = get_ipython()
        if self._hooked or ip is None or getattr(ip, "kernel", None) is None:
            return
        ip.events.register("pre_run_cell", self._cell_started)
        ip.events.register("post_run_cell", self._cell_finished)
        self._hooked = True
        self.cell_running = True  # add() is called from the cell that made the slider

    def _cell_started(self, _info=None) -> None:
        self.cell_running = True

    def _cell_finished(self, _result=None) -> None:
        with self._cond:
            self.cell_running = False
            self.idle_since = time.monotonic()
            self._cond.notify_all()

    def _far_allowed_in(self) -> float:
        """Seconds until drawing beyond one step is allowed (0: now; inf: a cell runs)."""
        if self.cell_running:
            return float("inf")
        return max(0.0, self.idle_since + IDLE_GRACE_S - time.monotonic())

    def add(self, live: LiveFigure) -> None:
        self._hook_cells()
        with self._cond:
            self._lives.add(live)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="andrea-slider-render",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Block until the thread has nothing left to draw and nothing deferred, i.e. it sleeps
        until the next move or cell (tests; never called by the widget). False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self.idle and self._next() == (None, None),
                                       timeout)

    def _next(self):
        """(job, wait_s): the most urgent frame to draw now, else how long to sleep (None:
        until woken)."""
        best, far_in = None, self._far_allowed_in()
        deferred = False
        for live in list(self._lives):
            job = live.todo()
            if job is None:
                continue
            if far_in > 0 and job[0] > 1 + RING_WHILE_CELLS_RUN:
                deferred = True
                continue
            rank = (job[0], -live.touched)
            if best is None or rank < best[0]:
                best = (rank, live, job[1], job[2])
        if best is not None:
            return best, None
        return None, (far_in if deferred and far_in != float("inf") else None)

    def _run(self) -> None:
        while True:
            with self._cond:
                job, wait_s = self._next()
                while job is None:
                    self.idle = wait_s is None
                    self._cond.notify_all()  # wakes `wait_idle`
                    self._cond.wait(wait_s)
                    job, wait_s = self._next()
                self.idle = False
            _, live, key, how = job
            interval = sys.getswitchinterval()
            sys.setswitchinterval(min(interval, SWITCH_INTERVAL_S))
            try:
                frame = live.make(key, how)
            except Exception as e:  # noqa: BLE001 (a plot that raises must not stop the thread)
                if how == "ahead":
                    with live.lock:
                        live.failed.add(key)
                    continue
                print("".join(traceback.format_exception(e)), file=sys.stderr)
                frame = Frame(None, f"plot_fn raised {type(e).__name__}: {e}", 0.0, "message")
            else:
                if how == "ahead":
                    with live.lock:
                        live.prefetch_left -= 1
            finally:
                sys.setswitchinterval(interval)
            self.drawn += 1
            live.store(key, frame)


RENDERER = Renderer()
