"""The built book works with no network, on a phone-sized screen too.

Uses the session fixtures of tests/book_fixtures.py (one build, a local server, Debian's
chromium). Every request that leaves the local server is blocked and fails the test.
- Math: MathJax is served from the book's own _static (book/_ext/andrea_static.py, files from
  the sphinx-mathjax-offline package); on every page that has formulas, every `$...$` and
  `$$...$$` (myst writes them as `\\(...\\)` / `\\[...\\]` in `class="math"` elements) is typeset:
  each math element holds a MathJax container, none holds an error or leftover TeX delimiters,
  and no local file that MathJax asks for (fonts, extensions) is missing.
- Narrow screens: `_OVERFLOW_JS` finds what sticks out past a 390-px viewport;
  tests/test_book.py::test_page_in_browser checks every page with it (scrollWidth <= 391), in the
  same visit that sweeps the sliders, and keeps the screenshots (test-artifacts/screenshots/).
"""
from __future__ import annotations

import pytest

from book_toc import toc_docnames

pytestmark = pytest.mark.book

PHONE, DESKTOP = 390, 1280
MATHJAX_TIMEOUT_MS = 30_000

# What sticks out past the viewport: the outermost elements wider than it that no scrolling
# or clipping ancestor contains.
_OVERFLOW_JS = """(W) => {
  const clipped = (el) => {
    for (let p = el.parentElement; p && p !== document.documentElement; p = p.parentElement)
      if (getComputedStyle(p).overflowX !== 'visible') return true;
    return false; };
  const out = [];
  for (const el of document.querySelectorAll('body *')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.right <= W + 1 || clipped(el)) continue;
    const p = el.parentElement;
    if (p && p !== document.body && p.getBoundingClientRect().right > W + 1 && !clipped(p))
      continue;
    out.push(`<${el.tagName.toLowerCase()} class="${el.getAttribute('class') || ''}"> ` +
             `right edge ${Math.round(r.right)} px: ` + (el.textContent || '').trim().slice(0, 70));
  }
  return {scroll_width: document.documentElement.scrollWidth, offenders: out.slice(0, 8)};
}"""

_MATH_JS = r"""() => {
  const main = document.querySelector('main') || document.body;
  const maths = [...main.querySelectorAll('.math')];
  const script = [...document.scripts].map(s => s.src).find(s => /mathjax/i.test(s)) || null;
  const leftover = [];
  for (const m of maths) {
    const box = m.querySelector('mjx-container');
    if (!box) { leftover.push('not typeset: ' + m.textContent.trim().slice(0, 60)); continue; }
    if (box.querySelector('mjx-merror'))
      leftover.push('MathJax error: ' + box.textContent.trim().slice(0, 60));
  }
  // TeX delimiters left in the visible prose (code is allowed to show them)
  const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (n.parentElement.closest('pre, code, script, style, mjx-container, mjx-assistive-mml, .highlight'))
      continue;
    const t = n.textContent;
    if (/\\\(|\\\)|\\\[|\\\]|\$\$/.test(t) || /(^|[^\\])\$[^$\s][^$]*\$/.test(t))
      leftover.push('raw TeX in the text: ' + t.trim().slice(0, 60));
  }
  return {n_math: maths.length,
          n_typeset: main.querySelectorAll('.math mjx-container').length,
          version: window.MathJax && window.MathJax.version || null,
          script, leftover: leftover.slice(0, 8)};
}"""


def _math_pages(html_root) -> list[str]:
    pages = [html_root / f"{d}.html" for d in toc_docnames()]
    return [str(p.relative_to(html_root).with_suffix("")) for p in pages
            if p.exists() and 'class="math' in p.read_text(encoding="utf-8")]


def _offline_page(browser, url: str, width: int):
    """A page at `url` in a `width`-px viewport; every request off the local server is blocked
    and recorded, and local requests that fail or answer >= 400 are recorded too."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    seen: dict[str, list] = {"external": [], "failed": []}
    local = url.split("/", 3)[:3]

    def route(r):
        if r.request.url.split("/", 3)[:3] == local or r.request.url.startswith("data:"):
            r.continue_()
        else:
            seen["external"].append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.on("requestfailed", lambda req: seen["failed"].append(f"{req.url} ({req.failure})")
            if req.url.split("/", 3)[:3] == local else None)
    page.on("response", lambda res: seen["failed"].append(f"{res.url} (HTTP {res.status})")
            if res.status >= 400 else None)
    response = page.goto(url, wait_until="load")
    assert response is not None and response.status == 200, url
    return context, page, seen


def _wait_for_mathjax(page, site: str) -> None:
    """Until MathJax has typeset the page. No-op on a page without MathJax, or whose MathJax
    is not on this site (blocked: the math test reports that)."""
    src = page.evaluate("() => ([...document.scripts].map(s => s.src)"
                        ".find(s => /mathjax/i.test(s)) || '')")
    if not src.startswith(site):
        return
    page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise",
                           timeout=MATHJAX_TIMEOUT_MS)
    page.evaluate("() => MathJax.startup.promise")


def test_some_pages_have_math(built_book):
    assert len(_math_pages(built_book.html)) >= 3, "the book's formulas went missing"


def test_math_typesets_offline_from_the_books_own_files(browser, site, built_book):
    problems = []
    for docname in _math_pages(built_book.html):
        with browser.guard(f"{docname}.html"):  # a crash: one line (tests/book_fixtures.py)
            context, page, seen = _offline_page(browser, site + f"{docname}.html", DESKTOP)
            try:
                _wait_for_mathjax(page, site)
                page.wait_for_timeout(300)  # lazily loaded fonts and extensions
                m = page.evaluate(_MATH_JS)
            finally:
                context.close()
        where = f"{docname}.html"
        if not (m["script"] or "").startswith(site):
            problems.append(f"{where}: MathJax is not loaded from this site: {m['script']}")
        if m["version"] is None:
            problems.append(f"{where}: MathJax did not start")
        if m["n_typeset"] < m["n_math"]:
            problems.append(f"{where}: {m['n_typeset']} of {m['n_math']} formulas typeset")
        problems += [f"{where}: {x}" for x in m["leftover"]]
        problems += [f"{where}: asks the network for {u}" for u in sorted(set(seen["external"]))]
        problems += [f"{where}: local file failed: {u}" for u in sorted(set(seen["failed"]))]
    assert not problems, "\n".join(problems)
