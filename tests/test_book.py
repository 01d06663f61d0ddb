"""The book builds with warnings as errors, and every page works in a real, offline browser.

One session-scoped build (``jupyter-book build <repo> --all -W -n --keep-going`` with
ANDREA_BOOK_BUILD=1 ANDREA_FAST=1) into a temporary folder; then Debian's chromium, driven by
playwright, opens every page over a local HTTP server with every non-local request blocked:
- no console error and no script exception, except the harmless ones listed below, each with
  the reason it is harmless; no request to the network except the listed ones;
- every chapter (notebook) page shows at least one figure, and every image really loaded;
- every static slider: each range input is swept over all its values (input events) and the
  figure shown must be the frame for that combination and must change at least once; no
  reachable position (no combination in the slider's frame table) may show a message instead
  of a figure; one move per slider is made with the keyboard;
- every internal link (.html on this site) answers HTTP 200 and its #fragment exists;
- a full-page screenshot of each page goes to test-artifacts/screenshots/<page>.png, and one at a
  phone's width (390 px) to test-artifacts/screenshots/390px/<page>.png;
- no machine residue in a page's text (None, nan, raw reprs, a stray " ;", an unparsed table), no
  trace of the machine or process that built it anywhere on the page, code and outputs included
  (an absolute path, a dirty-tree marker, a word about how the book was made), and no error
  output or stderr in its executed notebook (test_no_machine_residue_on_the_page).
Build time, per-page times, page weights and each slider's median compute+draw time per frame
(measured during the build: what a live update costs) go to test-artifacts/book_report.json.

Set ANDREA_BUILT_BOOK=<folder with index.html> to test an existing build instead of building.
"""
from __future__ import annotations

import re
import time
import urllib.parse
from pathlib import Path

import pytest

from book_fixtures import ARTIFACTS
from test_book_offline import _OVERFLOW_JS, PHONE, _wait_for_mathjax
from book_toc import REPO, toc_docnames, toc_notebooks
from lesson_words import LESSONS, main_and_appendix_words

pytestmark = pytest.mark.book

# Lines of the build output that contain "WARNING" and are not Sphinx warnings (Sphinx's own
# warnings already fail the build through -W). Each entry: (pattern, why it is harmless).
HARMLESS_BUILD_LINES = [
    (re.compile(r"\[IPKernelApp\] WARNING \| Kernel is running over TCP without encryption"),
     "ipykernel >= 7 logs this on the kernel's stderr at every kernel start when no CurveZMQ "
     "keys are provisioned; the build's kernels listen on 127.0.0.1 only and no page changes"),
]

# Console errors that are not the book's fault. Each entry: (pattern, why it is harmless).
# (Empty: pydata-sphinx-theme's "Got invalid theme mode: . Resetting to auto." on a first visit
# came from an unset html_context default_mode; _config.yml sets it to auto.)
HARMLESS_CONSOLE: list = []

# Script exceptions that are not the book's fault. Each entry: (pattern, why it is harmless).
# (Empty: the sphinx-thebe script that sphinx-thebe 0.3.1 doubled under Sphinx 7.4, throwing
# "Identifier 'THEBE_JS_URL' has already been declared", is dropped by book/_ext/andrea_dedupe_js.)
HARMLESS_EXCEPTIONS: list = []

# Requests that leave the local server (all are blocked: the test is offline, like a reader
# without network). Each entry: (URL pattern, why the page still works without it).
# (Empty: MathJax is served from the book's own _static, book/_ext/andrea_static.py.)
HARMLESS_EXTERNAL: list = []


def test_book_builds_without_warnings(book_build):
    built_book = book_build  # whatever became of it: the tests of its pages skip if it stopped
    if built_book.seconds is None:
        pytest.skip("ANDREA_BUILT_BOOK is set: testing an existing build, not building")
    if built_book.failure and not (built_book.html / "index.html").exists():
        # It stopped (a kernel died, a timeout): one line says where and why; the full log is
        # in test-artifacts/book_build.log.
        pytest.fail(built_book.failure, pytrace=False)
    tail = "\n".join(built_book.log.splitlines()[-40:])
    assert built_book.rc == 0, f"jupyter-book build failed (rc={built_book.rc}):\n{tail}"
    warnings = [line for line in built_book.log.splitlines() if "WARNING" in line
                and not any(p.search(line) for p, _ in HARMLESS_BUILD_LINES)]
    assert not warnings, "the build printed warnings:\n" + "\n".join(warnings)
    assert (built_book.html / "index.html").exists()


# Sweeps range input `i` of slider `id` over all its values; checks each shown state against
# the slider's own frame table and returns what was shown.
_SWEEP_JS = """([id, i]) => {
  const root = document.getElementById(id);
  const data = JSON.parse(document.getElementById(id + "-data").textContent);
  const inputs = [...root.querySelectorAll("input.andrea-slider-input")];
  const img = root.querySelector("img.andrea-slider-img");
  const msg = root.querySelector(".andrea-slider-msg");
  const inp = inputs[i], start = inp.value, p = data.params[i], states = [], problems = [];
  const shown = el => getComputedStyle(el).display !== "none";
  for (let v = 0; v <= +inp.max; v++) {
    inp.value = String(v);
    inp.dispatchEvent(new Event("input", {bubbles: true}));
    const key = inputs.map(x => x.value).join(","), f = data.frames[key];
    const label = root.querySelector('output[data-param="' + p.name + '"]').textContent;
    if (root.getAttribute("data-key") !== key) problems.push(`${p.name}[${v}]: data-key not updated`);
    if (label !== p.values[v]) problems.push(`${p.name}[${v}]: label shows ${label}`);
    if (f.img !== undefined) {
      if (!shown(img) || shown(msg) || img.getAttribute("src") !== data.images[f.img])
        problems.push(`${p.name}=${p.values[v]}: the image shown is not this combination's frame`);
      states.push(img.getAttribute("src"));
    } else {
      if (shown(img) || !shown(msg) || msg.textContent !== f.msg)
        problems.push(`${p.name}=${p.values[v]}: the message is not shown`);
      states.push("msg:" + msg.textContent);
    }
  }
  inp.value = start;
  inp.dispatchEvent(new Event("change", {bubbles: true}));
  const shownMessages = states.filter(s => s.startsWith("msg:"));
  const frameMessages = Object.entries(data.frames).filter(([k, f]) => f.msg !== undefined)
                              .map(([k, f]) => k + ": " + f.msg);
  return {name: p.name, n: p.values.length, distinct: new Set(states).size, problems,
          messages: shownMessages, frame_messages: frameMessages};
}"""

_STATE_JS = """(id) => { const r = document.getElementById(id);
  const img = r.querySelector("img.andrea-slider-img"), msg = r.querySelector(".andrea-slider-msg");
  return [r.getAttribute("data-key"), img.hidden ? "msg:" + msg.textContent : img.getAttribute("src")]; }"""

_OPEN_JS = """(id) => { for (let e = document.getElementById(id); e; e = e.parentElement)
  if (e.tagName === "DETAILS") e.open = true; }"""

_FIGURES_JS = """() => {
  const main = document.querySelector("main") || document.body;
  const imgs = [...main.querySelectorAll("img")].filter(i => i.getAttribute("src"));
  return {images: imgs.map(i => ({src: i.getAttribute("src").slice(0, 60),
                                  loaded: i.complete && i.naturalWidth > 0})),
          sliders: [...main.querySelectorAll("div.andrea-slider")].map(d => d.id),
          frame_ms: [...main.querySelectorAll("div.andrea-slider")].map(d => +d.dataset.frameMs),
          slider_messages: [...main.querySelectorAll("div.andrea-slider img.andrea-slider-img[hidden]")].length,
          links: [...document.querySelectorAll("a[href]")].map(a => a.href)};
}"""


def _open(browser, url):
    """A new page at `url`, with console errors, exceptions and external requests recorded."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    seen: dict[str, list] = {"console": [], "exceptions": [], "external": []}
    page.on("console", lambda m: seen["console"].append((m.text, m.location.get("url", "")))
            if m.type == "error" else None)
    page.on("pageerror", lambda e: seen["exceptions"].append(str(e)))
    local = url.split("/", 3)[:3]

    def route(r):
        if r.request.url.split("/", 3)[:3] == local:
            r.continue_()
        else:
            seen["external"].append(r.request.url)
            r.abort()

    page.route("**/*", route)
    response = page.goto(url, wait_until="load")
    assert response is not None and response.status == 200, f"{url}: HTTP " \
        f"{response.status if response else 'no response'}"
    page.wait_for_timeout(200)  # let deferred theme scripts run and log
    return context, page, seen


def _problems_with_requests_and_console(seen) -> list[str]:
    problems = [f"script exception: {e}" for e in seen["exceptions"]
                if not any(p.search(e) for p, _ in HARMLESS_EXCEPTIONS)]
    blocked = set(seen["external"])
    for url in sorted(blocked):
        if not any(p.search(url) for p, _ in HARMLESS_EXTERNAL):
            problems.append(f"asks the network for {url} (the book must work offline)")
    for text, where in seen["console"]:
        if text.startswith("Failed to load resource") and where in blocked:
            continue  # a blocked external request, judged just above
        if not any(p.search(text) for p, _ in HARMLESS_CONSOLE):
            problems.append(f"console error: {text} ({where})")
    return problems


def _check_links(context, links, checked: dict) -> list[str]:
    problems = []
    for href in links:
        parts = urllib.parse.urlsplit(href)
        base = urllib.parse.urlunsplit(parts._replace(fragment="", query=""))
        if not base.startswith("http://127.0.0.1:") or not (
                base.endswith(".html") or base.endswith("/")):
            continue
        if base not in checked:
            r = context.request.get(base)
            checked[base] = (r.status, r.text() if r.status == 200 else "")
        status, text = checked[base]
        if status != 200:
            problems.append(f"link {href} -> HTTP {status}")
            continue
        frag = urllib.parse.unquote(parts.fragment)
        if frag and f'id="{frag}"' not in text and f'name="{frag}"' not in text:
            problems.append(f"link {href}: no element with id {frag!r} on that page")
    return problems


def _screenshot(page, name: str, folder: str = "") -> None:
    shots = ARTIFACTS / "screenshots" / folder
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / f"{name}.png"), full_page=True)


_LINKS_CHECKED: dict = {}


@pytest.mark.parametrize("docname", toc_docnames())
def test_page_in_browser(docname, browser, site, built_book):
    t0 = time.perf_counter()
    rel = f"{docname}.html"
    page_file = built_book.html / rel
    assert page_file.exists(), f"{rel} is missing from the built book"
    html = page_file.read_text(encoding="utf-8")
    with browser.guard(rel):  # a crash: this test fails in one line, the next ones go on
        context, page, seen = _open(browser, site + rel)
        try:
            problems = _problems_with_requests_and_console(seen)
            if "application/vnd.jupyter.widget-view+json" in html:
                problems.append("embeds a live ipywidget, which is dead without a kernel: use "
                                "andrea_edu.notebook.slider.slider (static frames in the book "
                                "build)")
            _screenshot(page, docname.replace("/", "__"))  # before any slider moves: as loaded
            figs = page.evaluate(_FIGURES_JS)
            problems += [f"image did not load: {i['src']}..." for i in figs["images"]
                         if not i["loaded"]]
            n_figures = len(figs["images"]) + figs["slider_messages"]
            is_chapter = (REPO / f"{docname}.ipynb").exists()
            if is_chapter and n_figures == 0:
                problems.append("a chapter page with no figure")
            moves = 0
            for sid in figs["sliders"]:
                n_inputs = page.locator(f"#{sid} input.andrea-slider-input").count()
                for i in range(n_inputs):
                    res = page.evaluate(_SWEEP_JS, [sid, i])
                    moves += res["n"]
                    problems += [f"slider {sid}: {p}" for p in res["problems"]]
                    # No reachable position may show a message instead of a figure: neither one
                    # met while sweeping this input, nor any combination of the slider's frames.
                    problems += [f"slider {sid}: moving {res['name']} shows a message: {m[4:]}"
                                 for m in dict.fromkeys(res["messages"])]
                    problems += [f"slider {sid}: position ({m.split(': ', 1)[0]}) shows a "
                                 f"message instead of a figure: {m.split(': ', 1)[1]}"
                                 for m in res["frame_messages"] if i == 0]
                    if res["n"] > 1 and res["distinct"] < 2:
                        problems.append(f"slider {sid}: moving {res['name']} over {res['n']} "
                                        f"values never changes the figure")
                # One real keyboard move: the first input, one step. A slider in a collapsed
                # block (a hidden cell, the Evidence) is opened first, as a reader clicks it open.
                page.evaluate(_OPEN_JS, sid)
                before = page.evaluate(_STATE_JS, sid)
                first = page.locator(f"#{sid} input.andrea-slider-input").first
                at_max = first.get_attribute("value") == first.get_attribute("max")
                first.focus()
                page.keyboard.press("ArrowLeft" if at_max else "ArrowRight")
                after = page.evaluate(_STATE_JS, sid)
                if after[0] == before[0]:
                    problems.append(f"slider {sid}: the arrow key did not move the slider")
            problems += _check_links(context, figs["links"], _LINKS_CHECKED)
            # A phone: no page scrolls sideways at 390 px (a failure names what sticks out).
            page.set_viewport_size({"width": PHONE, "height": 844})
            _wait_for_mathjax(page, site)
            page.wait_for_timeout(200)
            phone = page.evaluate(_OVERFLOW_JS, PHONE)
            if phone["scroll_width"] > PHONE + 1:
                problems.append(f"scrolls sideways on a {PHONE}-px screen (scrollWidth "
                                f"{phone['scroll_width']}); sticking out: "
                                + "; ".join(phone["offenders"]))
            _screenshot(page, docname.replace("/", "__"), "390px")
        finally:
            context.close()
    seconds = time.perf_counter() - t0
    built_book.report.setdefault("pages", {})[docname] = {
        "seconds": round(seconds, 2), "html_bytes": len(html.encode()),
        "figures": n_figures, "sliders": len(figs["sliders"]), "slider_positions": moves,
        "slider_frame_ms_at_build": figs["frame_ms"],
        "blocked_external": sorted(set(seen["external"]))}
    print(f"[browser] {docname}: {seconds:.1f} s, {n_figures} figures, "
          f"{len(figs['sliders'])} sliders, {len(html.encode()) / 1024:.0f} KiB")
    problems = list(dict.fromkeys(problems))  # a broken link in the sidebar shows up once
    assert not problems, f"{rel}:\n" + "\n".join(problems)


def test_static_slider_alone_in_a_bare_page(browser):
    """The slider HTML by itself (no theme CSS, as in Jupyter): the JS swaps frames and hides
    the image for an invalid combination."""
    import matplotlib.pyplot as plt

    from andrea_edu.notebook.slider import static_html

    def plot(a, b):
        fig, ax = plt.subplots(figsize=(2, 1.5))
        ax.bar([0, 1], [a, b])
        return fig

    text = static_html(plot, valid=lambda a, b: a != b or "a equals b", a=[1, 2], b=[1, 3])
    with browser.guard("a bare page with one static slider"):
        _bare_slider_page(browser, text)


def _bare_slider_page(browser, text: str) -> None:
    context = browser.new_context()
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    try:
        page.set_content(f"<!doctype html><html><body>{text}</body></html>")
        sid = page.locator("div.andrea-slider").get_attribute("id")
        for i in range(2):
            res = page.evaluate(_SWEEP_JS, [sid, i])
            assert not res["problems"] and res["distinct"] == 2, res
        page.locator(f"#{sid} input").first.fill("0")  # a=1, b=1: invalid
        page.locator(f"#{sid} input").first.dispatch_event("input")
        assert not page.locator(f"#{sid} img").is_visible()
        assert page.locator(f"#{sid} .andrea-slider-msg").inner_text() == "a=1, b=1: a equals b"
    finally:
        context.close()
    assert not errors


def test_other_pages_in_browser(browser, site, built_book):
    """index (the redirect), search and the general index load cleanly too."""
    toc = {f"{d}.html" for d in toc_docnames()}
    others = sorted(str(p.relative_to(built_book.html)) for p in built_book.html.glob("*.html")
                    if str(p.relative_to(built_book.html)) not in toc)
    assert "index.html" in others
    problems = []
    for rel in others:
        with browser.guard(rel):
            context, page, seen = _open(browser, site + rel)
            try:
                problems += [f"{rel}: {p}" for p in _problems_with_requests_and_console(seen)]
                _screenshot(page, Path(rel).stem)
            finally:
                context.close()
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------- machine residue
# Text that a reader should never meet on a page: what a program leaves behind when a value is
# missing (None, nan), a Python repr, or a sentence glued together from empty parts. Code blocks
# (<pre>: library source shown on purpose) are not scanned; everything else in <main> is.
RESIDUE = [
    (re.compile(r"\bNone\b"), "a Python None printed as text"),
    (re.compile(r"\bnan(x|%)?\b", re.I), "a NaN printed as a number"),
    (re.compile(r"\b1 (comparisons|runs|cells|seeds|repeats|heads|steps)\b"), "a plural after 1"),
    (re.compile(r"<[\w.]+ object at 0x[0-9a-f]+>"), "a raw object repr"),
    (re.compile(r"\b(tensor|array|torch\.Size|dict_keys|OrderedDict)\(\["), "a raw tensor/array repr"),
    (re.compile(r"\{'\w+': "), "a raw dict repr"),
    (re.compile(r"\w \;(\s|$)"), "a stray ' ;' where a clause is missing"),
    (re.compile(r"\|\s*-{3,}\s*\|"), "a Markdown table that did not parse"),
    (re.compile(r"Traceback \(most recent call last\)"), "a traceback"),
]


# Traces of the machine and the process that built the book, which no reader should meet
# anywhere on a page (code and outputs included): an absolute folder of the building machine, a
# version-control marker of a tree with uncommitted edits, and words about how the book was
# made rather than about its subject. Provenance a reader needs (device, date, versions, the
# command as a reader types it) is worded for a reader by andrea_edu/figures/provenance.py.
BUILD_RESIDUE = [
    (re.compile(r"(?<![\w.~-])/(?:tmp|work|root|home|Users|mnt|private|scratch)/[\w.@+-]"),
     "an absolute path of the machine that built the book"),
    (re.compile(r"[0-9a-f]{7}-dirty\b|\bdirty \(|\bdirty tree\b"), "a dirty-tree marker"),
    (re.compile(r"\bthis checkout\b|\bworktree\b", re.I), "a word about the building checkout"),
    (re.compile(r"\b(?:the|an|this) issue (?:that|which) asked\b|\bissue #\d+"
                r"|\b(?:as|by|for|from|in|of|per|see) issue \d+\b(?![.,]\d)", re.I),
     "a word about the issue tracker that shaped the book"),
    (re.compile(r"shared with other (?:jobs|work)|\bon a shared \d+-core machine\b", re.I),
     "a word about the load of the building machine"),
]


def build_residue_in(text: str) -> list[str]:
    """'what: ...context...' for every trace of the building machine or process in `text`."""
    return [f"{what}: ...{text[max(0, m.start() - 60):m.end() + 40]}..."
            for pattern, what in BUILD_RESIDUE for m in pattern.finditer(text)]


def _main_text(html: str) -> str:
    """All text of a page's <main>, code blocks and outputs included (scripts and styles not)."""
    import html as _html

    m = re.search(r"<main[^>]*>(.*)</main>", html, re.S)
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", m.group(1) if m else html, flags=re.S)
    return re.sub(r"\s+", " ", _html.unescape(re.sub(r"<[^>]+>", "", body)))


def images_without_description(html: str) -> list[str]:
    """<img> tags in <main> whose alt text is missing, empty or a file path (what myst-nb
    writes for a figure output whose cell sets no `mystnb: image: alt:`); a hidden slider image
    that the page's script fills in is not counted."""
    m = re.search(r"<main[^>]*>(.*)</main>", html, re.S)
    bad = []
    for tag in re.findall(r"<img\b[^>]*>", m.group(1) if m else html):
        if re.search(r"\shidden\b", tag):
            continue
        alt = re.search(r'\salt="([^"]*)"', tag)
        text = alt.group(1).strip() if alt else ""
        if not text or re.fullmatch(r"\S*\.(?:png|jpe?g|svg|gif)", text):
            bad.append(f"an image without a description (alt={text!r})")
    return bad


def _page_text(html: str) -> str:
    """The readable text of a page's <main>, without code blocks, scripts and styles."""
    m = re.search(r"<main[^>]*>(.*)</main>", html, re.S)
    body = m.group(1) if m else html
    body = re.sub(r"<(pre|script|style)\b.*?</\1>", " ", body, flags=re.S)
    inline = r"</?(a|code|span|strong|em|b|i|sup|sub|abbr|kbd|var|small)\b[^>]*>"
    body = re.sub(inline, "", body)  # "<code>x</code>;" reads "x;", not "x ;"
    body = re.sub(r"<[^>]+>", " ", body)
    import html as _html
    return re.sub(r"\s+", " ", _html.unescape(body))


def residue_in(text: str) -> list[str]:
    """'what: ...context...' for every residue pattern found in `text`."""
    found = []
    for pattern, what in RESIDUE:
        for m in pattern.finditer(text):
            found.append(f"{what}: ...{text[max(0, m.start() - 60):m.end() + 40]}...")
    return found


def _table_rows_broken(markdown: str) -> list[str]:
    """Rows of Markdown tables whose count of unescaped | differs from the header's: an
    unescaped | inside a cell (e.g. 'max |difference|') silently shifts the columns."""
    bad, header = [], None
    for line in markdown.splitlines() + [""]:
        s = line.strip()
        if s.startswith("|") and s.endswith("|"):
            n = len(re.findall(r"(?<!\\)\|", s))
            if header is None:
                header = n
            elif n != header:
                bad.append(s[:120])
        else:
            header = None
    return bad


def test_residue_pages_unittest():
    assert residue_in("unique heads received nan times the gradient")
    assert residue_in("driver None, andrea_edu 0.1.0") and residue_in("this run: nanx")
    assert residue_in("the loop took 1.2x as long with reference ; ok")
    assert not residue_in("Nonetheless the nano-scale numbers hold; fine")
    for planted in ("looked in: /work/main/book/data/x.json", "commit 0a1b2c3d-dirty (x.py)",
                    "--out /tmp/h3/sweep_new.json", "the same as this checkout",
                    "the issue that asked for this section", "2 cores shared with other jobs",
                    "CPU seconds (on a shared 2-core machine)", "as issue 20 asked",
                    "see issue #12"):
        assert build_residue_in(planted), planted
    for fine in ("looked in: book/data/x.json in the repository", "commit 0a1b2c3d plus "
                 "uncommitted edits", "python -m andrea_edu.heads.sweep --out book/data/s.json",
                 "~/andrea-attention", "https://example.org/tmp/x", "a/tmp/b", "16 / 32 pairs",
                 "(a model): issue 18.4 µs", "the issue 12 µs term",
                 "each thread issues 16-byte cp.async copies"):
        assert not build_residue_in(fine), fine
    page = ('<main><img alt="../_images/ab12.png" src="../_images/ab12.png"><img alt="" hidden>'
            '<img alt="A bar chart of SMs"><img src="x.png"></main>')
    assert len(images_without_description(page)) == 2
    assert _table_rows_broken("| a | b |\n|---|---|\n| max |d| | 1 |") == ["| max |d| | 1 |"]
    assert not _table_rows_broken("| a | b |\n|---|---|\n| max \\|d\\| | 1 |")


_EXECUTED_IN = re.compile(r"/(book/[\w-]+)\.ipynb: Executed notebook in ([\d.]+) seconds")


def test_every_chapter_ran_in_the_build(built_book):
    """Every chapter the toc lists was executed by the build, once (the test run's one execution
    of each chapter): its executed copy exists and every code cell with source has an execution
    count, and a lesson's main text is within its word aim (tests/lesson_words.py); the build's
    per-notebook times go to test-artifacts/notebook_times.json. (Error
    outputs fail test_no_machine_residue_on_the_page, and the build itself: raise_on_error.)"""
    import json

    problems = []
    for docname in toc_notebooks():
        executed = built_book.html.parent / "jupyter_execute" / f"{docname}.ipynb"
        if not executed.exists():
            problems.append(f"{docname}: the build wrote no executed copy ({executed.name})")
            continue
        nb = json.loads(executed.read_text(encoding="utf-8"))
        unrun = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
                 and "".join(c.get("source", "")).strip() and c.get("execution_count") is None]
        if unrun:
            problems.append(f"{docname}: code cells {unrun} have no execution count")
        stem = docname.rsplit("/", 1)[-1]
        if stem in LESSONS:  # a lesson's main text, as executed, within its word aim (issue 30)
            main, appendix = main_and_appendix_words(nb)
            print(f"[notebooks] {docname}: {main} words of main text, {appendix} in the appendix")
            if main > LESSONS[stem]:
                problems.append(f"{docname}: {main} words before its appendix, aim {LESSONS[stem]}")
    assert not problems, "\n".join(problems)
    times = {m.group(1): float(m.group(2)) for m in _EXECUTED_IN.finditer(built_book.log)}
    if built_book.seconds is not None:  # a build made here (not ANDREA_BUILT_BOOK): its log
        assert set(toc_notebooks()) <= set(times), sorted(set(toc_notebooks()) - set(times))
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "notebook_times.json").write_text(json.dumps(times, indent=1,
                                                                  sort_keys=True) + "\n")
        print("[notebooks] executed in the build: " + ", ".join(
            f"{d.split('/')[-1]} {t:.1f} s" for d, t in sorted(times.items())))


BOX_ROWS, MEASURED_WORDS = 5, 40


def test_each_box_is_short_and_its_rows_carry_what_the_cells_measured(built_book):
    """Issue 38 item 4: a chapter's "Checking the source" box holds at most about four rows
    (BOX_ROWS), each row's "measured" is what the cells computed, in at most MEASURED_WORDS
    words; the reasoning is static and lives on the verdicts page (claims.json `reading`, a
    row's `detail`)."""
    import json

    problems, boxes = [], 0
    for docname in toc_notebooks():
        executed = built_book.html.parent / "jupyter_execute" / f"{docname}.ipynb"
        if not executed.exists():
            continue   # test_every_chapter_ran_in_the_build says so
        for cell in json.loads(executed.read_text(encoding="utf-8"))["cells"]:
            for out in cell.get("outputs", []):
                md = "".join(out.get("data", {}).get("text/markdown", ""))
                if not md.startswith("```{andrea-verdict}"):
                    continue
                boxes += 1
                rows = json.loads(md.split("\n", 2)[1])["rows"]
                if len(rows) > BOX_ROWS:
                    problems.append(f"{docname}: a box of {len(rows)} rows")
                problems += [f"{docname}: {r['claim'][:40]!r} measured in "
                             f"{len(r['measured'].split())} words"
                             for r in rows if len(r["measured"].split()) > MEASURED_WORDS]
    assert boxes >= 10 and not problems, (boxes, problems)


@pytest.mark.parametrize("docname", toc_docnames())
def test_no_machine_residue_on_the_page(docname, built_book):
    """The built page's text has no residue; its executed notebook has no error output (except
    in cells tagged raises-exception), no stderr, and no Markdown table with a shifted row."""
    import json

    html = (built_book.html / f"{docname}.html").read_text(encoding="utf-8")
    problems = (residue_in(_page_text(html)) + build_residue_in(_main_text(html))
                + images_without_description(html))
    executed = built_book.html.parent / "jupyter_execute" / f"{docname}.ipynb"
    if executed.exists():  # every chapter has one: test_every_chapter_ran_in_the_build
        nb = json.loads(executed.read_text(encoding="utf-8"))
        for i, cell in enumerate(nb["cells"]):
            tags = cell.get("metadata", {}).get("tags", [])
            for out in cell.get("outputs", []):
                kind = out.get("output_type")
                if kind == "error" and "raises-exception" not in tags:
                    problems.append(f"cell {i}: error output {out.get('ename')}: {out.get('evalue')}")
                elif kind == "stream" and out.get("name") == "stderr":
                    problems.append(f"cell {i}: stderr: {''.join(out.get('text', ''))[:200]}")
                md = "".join(out.get("data", {}).get("text/markdown", ""))
                problems += [f"cell {i}: table row with a stray |: {r}"
                             for r in _table_rows_broken(md)]
    assert not problems, f"{docname}:\n" + "\n".join(problems)
