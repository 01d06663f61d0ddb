"""The live notebooks as a reader meets them: JupyterLab in headless Chromium, every slider moved.

For each chapter with a live slider (``andrea_edu.notebook.slider.slider`` in a running kernel) this starts a real
``jupyter lab`` on 127.0.0.1 (a token, a throw-away settings folder), opens the notebook, runs
every cell (JupyterLab's own ``notebook:run-all-cells`` command), waits until the kernel is idle,
then moves every slider with the keyboard, the way a reader does: focus the handle, ArrowRight to
the end, ArrowLeft to the start, ArrowRight back to where it began. Each move is timed in the page
from the keydown event to the mutation that puts a new figure in the slider's box (a
MutationObserver on the box: a new <img> src, a new ``data-andrea-key`` or a new message).
A last "burst" of three quick presses counts how many figures the page drew on the way.

Reported per chapter: Run All time, error outputs, console errors, widgets left as text, and for
the moves: first-visit median, revisit median and the slowest move (ms). A position is a first
visit the first time the box shows it in this run (the starting position counts as visited).
JSON goes to test-artifacts/live_bench[-LABEL].json, a table to stdout.

    python scripts/live_bench.py                       # every chapter with a slider, fast mode
    python scripts/live_bench.py one_kernel_many_heads output_projection --label after
    python scripts/live_bench.py --root /tmp/old-checkout --label before   # another tree's code
    python scripts/live_bench.py --compare test-artifacts/live_bench-before.json \
                                           test-artifacts/live_bench-after.json

Needs JupyterLab (requirements.txt), playwright and Debian's chromium (/usr/bin/chromium).
tests/test_jupyterlab.py uses the same functions on two chapters. The numbers depend on the
machine and its load: they are measured here and reported, never asserted by a timed test.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
# Chapters whose notebooks call the slider (the live path draws an ipywidgets box).
CHAPTERS = ["output_projection", "one_kernel_many_heads", "twelve_vectors_become_one",
            "parameter_count", "cuda_stores_heads", "config_mirrors_hardware", "final_picture",
            "reading_the_pipeline", "three_matrices", "why_heads_specialize"]
# Text that means a widget did not render: JupyterLab's placeholder, ipywidgets' error box, or
# the text/plain fallback (the repr of the Python object) shown when no widget manager exists.
WIDGET_FAILURES = ("Loading widget", "Error displaying widget", "Model not found",
                   "VBox(children=", "HBox(children=", "SelectionSlider(")


def missing_requirements() -> str | None:
    """Why the benchmark cannot run here, or None when it can."""
    if not CHROMIUM.exists():
        return f"{CHROMIUM} not found (apt-get install chromium)"
    for mod in ("playwright", "jupyterlab", "ipywidgets"):
        try:
            __import__(mod)
        except ImportError:
            return f"python package {mod} is not installed (pip install -r requirements.txt)"
    return None


# ----------------------------------------------------------------------------- the server
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Lab:
    url: str
    token: str
    proc: subprocess.Popen
    log: Path


@contextlib.contextmanager
def jupyter_lab(root: Path = REPO, *, fast: bool = True, python: str = sys.executable,
                start_timeout_s: float = 90):
    """A ``jupyter lab`` serving ``root`` on 127.0.0.1 with a fresh token and settings folder.

    The kernel gets ANDREA_FAST=1 when fast, never ANDREA_BOOK_BUILD, and ``root`` first on
    PYTHONPATH (so that ``--root`` measures that tree's andrea_edu). Notebook windowing is off, so
    that every cell's widgets stay in the DOM while the benchmark scrolls.
    """
    tmp = Path(tempfile.mkdtemp(prefix="andrea-lab-"))
    settings = tmp / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    config = tmp / "config"
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(json.dumps({
        "LabApp": {"news_url": None, "check_for_updates_class": "jupyterlab.NeverCheckForUpdate",
                   "extension_manager": "readonly",
                   "expose_app_in_browser": True,
                   "user_settings_dir": str(tmp / "settings"),
                   "workspaces_dir": str(tmp / "workspaces")},
        "ServerApp": {"open_browser": False, "terminals_enabled": False}}))
    token, port = secrets.token_hex(16), _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("ANDREA_BOOK_BUILD", "ANDREA_FAST")}
    if fast:
        env["ANDREA_FAST"] = "1"
    env["PATH"] = str(Path(python).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    env["JUPYTER_CONFIG_DIR"] = str(config)
    env["JUPYTER_RUNTIME_DIR"] = str(tmp / "runtime")
    log = tmp / "lab.log"  # removed with tmp at the end; its tail is in any start error
    cmd = [python, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers run as root
        cmd.append("--allow-root")
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {proc.returncode}:\n"
                                   + log.read_text()[-3000:])
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"jupyter lab did not answer within {start_timeout_s} s:\n"
                                       + log.read_text()[-3000:]) from None
                time.sleep(0.3)
        yield Lab(url, token, proc, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def chromium():
    """Debian's chromium driven by playwright (never ``playwright install``)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


# ----------------------------------------------------------------------------- in the page
# window.__andrea: the figure signature of a slider box, and an observer that timestamps every
# change of it after the next keydown. t0 is the keydown event's own timestamp (same clock as
# performance.now()), t of a change is when the MutationObserver saw the new figure in the DOM.
_PAGE_JS = r"""
() => {
  if (window.__andrea) return;
  const boxes = () => [...document.querySelectorAll('.andrea-slider-live')];
  const sig = (box) => {
    const imgs = [...box.querySelectorAll('img')].map(i => i.getAttribute('src') || '');
    const keys = [...box.querySelectorAll('[data-andrea-key]')].map(e => e.dataset.andreaKey);
    const msgs = [...box.querySelectorAll('.andrea-live-msg, .jp-RenderedMarkdown')]
                   .map(e => e.textContent.trim());
    if (!imgs.some(s => s) && !msgs.some(s => s)) return null;  // mid-swap: nothing shown
    return imgs.join('|') + '#' + keys.join('|') + '#' + msgs.join('|');
  };
  const state = {arm: null};
  document.addEventListener('keydown', (e) => {
    if (state.arm && state.arm.t0 === null) state.arm.t0 = e.timeStamp;
  }, true);
  window.__andrea = {
    count: () => boxes().length,
    sliders: (b) => [...boxes()[b].querySelectorAll('.noUi-handle')].map(h => ({
      now: +h.getAttribute('aria-valuenow'), max: +h.getAttribute('aria-valuemax'),
      min: +h.getAttribute('aria-valuemin')})),
    shown: (b) => {
      const box = boxes()[b], fig = box.querySelector('[data-andrea-key]');
      const img = box.querySelector('img');
      return {sig: sig(box), key: fig ? fig.dataset.andreaKey : null,
              source: fig ? (fig.dataset.andreaSource || null) : null,
              img: !!(img && img.getAttribute('src')),
              alt: img ? (img.getAttribute('alt') || '').trim() : null};
    },
    arm: (b) => {
      const box = boxes()[b];
      if (state.arm && state.arm.obs) state.arm.obs.disconnect();
      const a = {t0: null, changes: [], last: sig(box), obs: null};
      a.obs = new MutationObserver(() => {
        const s = sig(box);
        if (s !== null && s !== a.last) {
          a.last = s;
          const fig = box.querySelector('[data-andrea-key]');
          a.changes.push({t: performance.now(), key: fig ? fig.dataset.andreaKey : null,
                          source: fig ? (fig.dataset.andreaSource || null) : null});
        }
      });
      a.obs.observe(box, {subtree: true, childList: true, attributes: true,
                          characterData: true});
      state.arm = a;
    },
    armed: () => {
      const a = state.arm;
      return a ? {t0: a.t0, changes: a.changes} : null;
    },
    disarm: () => { if (state.arm && state.arm.obs) state.arm.obs.disconnect(); state.arm = null; },
  };
}
"""

_KERNEL_IDLE = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!(k && k.status === 'idle' && w.content && w.content.widgets.length);
}"""

_RUN_ALL = """() => {
  window.__andreaRunAll = null;
  window.jupyterapp.commands.execute('notebook:run-all-cells')
    .then(() => { window.__andreaRunAll = 'done'; },
          (e) => { window.__andreaRunAll = 'failed: ' + e; });
}"""

_CELLS = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  return w.content.widgets.filter(c => c.model.type === 'code').map((c, i) => ({
    count: c.model.executionCount,
    outputs: c.model.outputs.toJSON().map(o => ({type: o.output_type, ename: o.ename || null,
                                                 evalue: o.evalue || null,
                                                 name: o.name || null,
                                                 text: o.text ? String(o.text).slice(0, 300)
                                                              : null}))}));
}"""

_WIDGET_TEXT = """(needles) => {
  const found = [];
  for (const o of document.querySelectorAll('.jp-OutputArea-output')) {
    const t = o.innerText || '';
    for (const n of needles) if (t.includes(n)) found.push(n + ': ' + t.slice(0, 120));
  }
  return found;
}"""


@dataclass
class Move:
    box: int
    slider: int
    key: str          # "ArrowRight" / "ArrowLeft"
    position: list    # index of every slider in the box after the move
    first_visit: bool
    ms: float | None  # keydown -> new figure in the DOM; None when none came
    source: str | None = None  # what the box says it showed: cache / prefetched / drawn ...


@dataclass
class ChapterRun:
    chapter: str
    run_all_s: float | None = None
    error_outputs: list = field(default_factory=list)
    stderr_outputs: list = field(default_factory=list)
    console_errors: list = field(default_factory=list)
    widget_text: list = field(default_factory=list)
    boxes: int = 0
    missing_alt: int = 0
    moves: list = field(default_factory=list)
    burst: list = field(default_factory=list)
    problem: str | None = None

    def summary(self) -> dict:
        first = [m.ms for m in self.moves if m.first_visit and m.ms is not None]
        again = [m.ms for m in self.moves if not m.first_visit and m.ms is not None]
        timed = first + again
        return {"chapter": self.chapter, "boxes": self.boxes, "moves": len(self.moves),
                "unchanged_moves": sum(m.ms is None for m in self.moves),
                "first_visit_median_ms": round(statistics.median(first)) if first else None,
                "revisit_median_ms": round(statistics.median(again)) if again else None,
                "slowest_ms": round(max(timed)) if timed else None,
                "console_errors": len(self.console_errors),
                "figures_without_alt": self.missing_alt,
                "error_outputs": len(self.error_outputs),
                "burst_figures": [b["figures"] for b in self.burst],
                "burst_settle_ms": [b["settle_ms"] for b in self.burst],
                "run_all_s": self.run_all_s, "problem": self.problem}


def open_and_run(page, lab: Lab, chapter: str, run: ChapterRun, *, timeout_s: float = 300):
    """Open book/<chapter>.ipynb in JupyterLab, Run All, wait until every cell ran and the kernel
    is idle; record error outputs and widgets left as text into ``run``."""
    page.goto(f"{lab.url}/lab/tree/book/{chapter}.ipynb?reset&token={lab.token}")
    deadline = time.monotonic() + 120
    while not page.evaluate(_KERNEL_IDLE):
        dialog = page.locator(".jp-Dialog .jp-mod-accept")
        if dialog.count():  # "Select Kernel": take the proposed one
            dialog.first.click()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{chapter}: no idle kernel within 120 s")
        page.wait_for_timeout(250)
    t0 = time.perf_counter()
    page.evaluate(_RUN_ALL)
    page.wait_for_function("() => window.__andreaRunAll !== null", timeout=timeout_s * 1e3,
                           polling=200)
    page.wait_for_function(_KERNEL_IDLE, timeout=timeout_s * 1e3, polling=200)
    run.run_all_s = round(time.perf_counter() - t0, 2)
    status = page.evaluate("() => window.__andreaRunAll")
    if status != "done":
        run.problem = f"Run All: {status}"
    page.wait_for_timeout(500)  # the last widget views attach after the kernel is idle
    for i, cell in enumerate(page.evaluate(_CELLS)):
        for o in cell["outputs"]:
            if o["type"] == "error":
                run.error_outputs.append(f"cell {i}: {o['ename']}: {o['evalue']}")
            elif o["type"] == "stream" and o["name"] == "stderr":
                run.stderr_outputs.append(f"cell {i}: {o['text']}")
        if cell["count"] is None:
            run.error_outputs.append(f"cell {i}: not executed")
    run.widget_text = page.evaluate(_WIDGET_TEXT, list(WIDGET_FAILURES))
    page.evaluate(_PAGE_JS)
    run.boxes = page.evaluate("() => window.__andrea.count()")


def _press_and_wait(page, b: int, key: str, timeout_ms: float):
    page.evaluate("(b) => window.__andrea.arm(b)", b)
    page.keyboard.press(key)
    try:
        page.wait_for_function("() => { const a = window.__andrea.armed();"
                               " return a && a.t0 !== null && a.changes.length > 0; }",
                               timeout=timeout_ms, polling="raf")
    except Exception:  # playwright's TimeoutError: no new figure came
        page.evaluate("() => window.__andrea.disarm()")
        return None, None
    a = page.evaluate("() => window.__andrea.armed()")
    page.evaluate("() => window.__andrea.disarm()")
    c = a["changes"][0]
    return c["t"] - a["t0"], c["source"]


def sweep_box(page, b: int, run: ChapterRun, *, pause_s: float, move_timeout_s: float,
              burst: bool = True):
    """Move every slider of box ``b`` to its last position, to its first, back to the start."""
    handles = page.locator(".andrea-slider-live").nth(b).locator(".noUi-handle")
    page.locator(".andrea-slider-live").nth(b).scroll_into_view_if_needed()
    state = page.evaluate("(b) => window.__andrea.sliders(b)", b)
    visited = {tuple(s["now"] for s in state)}

    def check_alt():  # every figure on screen must carry alt text
        shown = page.evaluate("(b) => window.__andrea.shown(b)", b)
        if shown["img"] and not shown["alt"]:
            run.missing_alt += 1

    check_alt()
    for s, st in enumerate(state):
        start, last = st["now"], st["max"]
        plan = (["ArrowRight"] * (last - start) + ["ArrowLeft"] * (last - st["min"])
                + ["ArrowRight"] * (start - st["min"]))
        handles.nth(s).focus()
        for key in plan:
            ms, source = _press_and_wait(page, b, key, move_timeout_s * 1e3)
            pos = tuple(x["now"] for x in page.evaluate("(b) => window.__andrea.sliders(b)", b))
            run.moves.append(Move(b, s, key, list(pos), pos not in visited,
                                  None if ms is None else round(ms, 1), source))
            visited.add(pos)
            check_alt()
            if pause_s:
                page.wait_for_timeout(pause_s * 1e3)
        if burst and last - st["min"] >= 3:
            # Three quick presses (40 ms apart): how many figures does the page show on the way?
            page.evaluate("(b) => window.__andrea.arm(b)", b)
            keys = ["ArrowRight"] * 3 if start + 3 <= last else ["ArrowLeft"] * 3
            for key in keys:
                page.keyboard.press(key)
                page.wait_for_timeout(40)
            page.wait_for_timeout(3000)  # quiet: every figure the burst causes has come
            a = page.evaluate("() => window.__andrea.armed()")
            page.evaluate("() => window.__andrea.disarm()")
            run.burst.append({"box": b, "slider": s, "keys": keys, "figures": len(a["changes"]),
                              "settle_ms": round(a["changes"][-1]["t"] - a["t0"])
                              if a["changes"] else None})
            for key in keys:  # and back, so that the next slider starts where it was
                page.keyboard.press("ArrowLeft" if key == "ArrowRight" else "ArrowRight")
                page.wait_for_timeout(40)
            page.wait_for_timeout(1500)


def bench_chapter(browser, lab: Lab, chapter: str, *, pause_s: float = 0.25,
                  move_timeout_s: float = 20, burst: bool = True) -> ChapterRun:
    run = ChapterRun(chapter)
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = ctx.new_page()
    def on_console(m) -> None:
        if m.type == "error":
            run.console_errors.append(m.text[:300])

    page.on("console", on_console)
    page.on("pageerror", lambda e: run.console_errors.append(f"pageerror: {str(e)[:300]}"))
    try:
        open_and_run(page, lab, chapter, run)
        for b in range(run.boxes):
            sweep_box(page, b, run, pause_s=pause_s, move_timeout_s=move_timeout_s, burst=burst)
    except Exception as e:  # a broken chapter is a result, not the end of the benchmark
        run.problem = f"{type(e).__name__}: {str(e)[:500]}"
    finally:
        with contextlib.suppress(Exception):  # shut the kernel down with the page
            page.evaluate("() => window.jupyterapp.commands.execute('kernelmenu:shutdown')")
        ctx.close()
    return run


def table(summaries: list[dict]) -> str:
    head = (f"{'chapter':28} {'moves':>5} {'first med':>9} {'revisit med':>11} {'slowest':>8} "
            f"{'no change':>9} {'console err':>11} {'burst figs':>10} {'run all s':>9}")
    rows = [head, "-" * len(head)]
    fmt = lambda v: "-" if v is None else str(v)  # noqa: E731
    for s in summaries:
        rows.append(f"{s['chapter']:28} {s['moves']:>5} {fmt(s['first_visit_median_ms']):>9} "
                    f"{fmt(s['revisit_median_ms']):>11} {fmt(s['slowest_ms']):>8} "
                    f"{s['unchanged_moves']:>9} {s['console_errors']:>11} "
                    f"{','.join(map(str, s['burst_figures'])) or '-':>10} "
                    f"{fmt(s['run_all_s']):>9}"
                    + (f"  PROBLEM: {s['problem']}" if s["problem"] else ""))
    return "\n".join(rows)


def compare(before: Path, after: Path) -> str:
    """A before/after table of two benchmark JSON files (chapters present in both)."""
    a = {s["chapter"]: s for s in json.loads(Path(before).read_text())["summary"]}
    b = {s["chapter"]: s for s in json.loads(Path(after).read_text())["summary"]}
    cols = [("first_visit_median_ms", "first visit med"), ("revisit_median_ms", "revisit med"),
            ("slowest_ms", "slowest"), ("console_errors", "console err")]
    fmt = lambda v: "-" if v is None else str(v)  # noqa: E731
    head = f"{'chapter (ms: before -> after)':30}" + "".join(f"{t:>20}" for _, t in cols)
    rows = [head, "-" * len(head)]
    for ch in [c for c in a if c in b]:
        rows.append(f"{ch:30}" + "".join(f"{fmt(a[ch][k]) + ' -> ' + fmt(b[ch][k]):>20}"
                                         for k, _ in cols))
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("chapters", nargs="*", help=f"default: all of {CHAPTERS}")
    ap.add_argument("--root", type=Path, default=REPO, help="checkout to serve (default: this)")
    ap.add_argument("--full", action="store_true", help="full sizes (default: ANDREA_FAST=1)")
    ap.add_argument("--pause", type=float, default=0.25,
                    help="seconds between moves once a figure came (a brisk reader)")
    ap.add_argument("--label", default="", help="suffix of the JSON file (e.g. before, after)")
    ap.add_argument("--no-burst", action="store_true")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"),
                    help="print a before/after table of two JSON files and exit")
    args = ap.parse_args(argv)
    if args.compare:
        print(compare(*args.compare))
        return 0
    unknown = [c for c in args.chapters if c not in CHAPTERS]
    if unknown or not (math.isfinite(args.pause) and args.pause >= 0):
        ap.error(f"chapters: {unknown[0]!r} is not one of {', '.join(CHAPTERS)}" if unknown else
                 f"--pause: {args.pause!r} is not allowed; a finite number of seconds >= 0")
    why = missing_requirements()
    if why:
        print(f"live_bench: cannot run: {why}", file=sys.stderr)
        return 2
    chapters = args.chapters or CHAPTERS
    # SIGTERM (timeout, kill) unwinds like Ctrl-C, so that jupyter lab and its kernels stop too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    runs = []
    with jupyter_lab(args.root.resolve(), fast=not args.full) as lab, chromium() as browser:
        for ch in chapters:
            t0 = time.perf_counter()
            run = bench_chapter(browser, lab, ch, pause_s=args.pause, burst=not args.no_burst)
            runs.append(run)
            print(f"[live_bench] {ch}: {time.perf_counter() - t0:.0f} s "
                  f"{json.dumps(run.summary())}", flush=True)
    summaries = [r.summary() for r in runs]
    ARTIFACTS.mkdir(exist_ok=True)
    out = ARTIFACTS / f"live_bench{'-' + args.label if args.label else ''}.json"
    out.write_text(json.dumps({
        "label": args.label, "root": str(args.root), "fast": not args.full,
        "pause_s": args.pause, "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpus": os.cpu_count(), "load_avg": os.getloadavg(),
        "summary": summaries, "runs": [asdict(r) for r in runs]}, indent=1) + "\n")
    print(table(summaries))
    print(f"[live_bench] wrote {out.relative_to(REPO) if out.is_relative_to(REPO) else out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
