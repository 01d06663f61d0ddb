"""One plotting function, two front ends: live ipywidgets sliders and a static HTML slider.

Introduced in the book's first chapter that has a figure; every chapter imports it from here
(``from andrea_edu.notebook.slider import slider``). A caller writes one
``plot_fn(**kw) -> matplotlib Figure`` and passes the values each parameter may take::

    slider(plot_fn, n_head=[1, 2, 4, 8, 12], head_dim=[16, 32, 64])

- live (a running kernel, not a book build): one ``SelectionSlider`` per parameter and the
  figure as an ``<img>`` with alt text and a caption (an ipywidgets HTML widget). Each position's
  PNG is kept, moves are drawn on a background thread (the last move wins), and the positions one
  step away are drawn ahead: ``andrea_edu.notebook.live``. The box says how long an update took
  on the reader's machine.
- static (``static=True``, or ``ANDREA_BOOK_BUILD=1``): every valid combination is rendered now
  to a PNG and embedded in one self-contained HTML block (range inputs + a few lines of vanilla
  JavaScript that swap the image). It needs no kernel, no CDN and no network.

Arguments of ``slider(plot_fn, *, static=None, alt="", title=None, valid=None, default=None,
dpi=None, **params)``:

- plot_fn: ``plot_fn(**kw)`` returns a matplotlib Figure, drawn on a canvas that pyplot never
  holds (``live.draw_png``): use the figure it makes (``fig, ax = plt.subplots()``), not
  ``plt.gca()``.
- static: True for the static slider (an ``IPython.display.HTML``), False for the live one (an
  ipywidgets ``VBox``); None means static exactly when the book is being built.
- alt: the figure's alt text (a string, or ``alt(**kw) -> str``); the values are appended.
- title: shown above the sliders.
- valid: ``valid(**kw)`` may return False, or a string saying why a combination is impossible
  (e.g. "n_head * head_dim must be 768"); that message is shown instead of a figure.
- default: ``{name: value}`` initial values (else the middle value of each list).
- dpi: resolution of the PNGs, an int in 1..MAX_DPI; default ``DPI`` (90) for static frames,
  ``live.LIVE_DPI`` (72) for live figures, which are drawn while the reader waits.
- params: ``name=[values...]``, one slider each.

The returned object shows itself when it is a cell's last expression; elsewhere (a loop, two
sliders in one cell) pass it to ``IPython.display.display``. In fast mode pass shorter lists
(``andrea_edu.env.pick(full, fast)``): the static slider renders every combination.
Measured on the 2-core build machine: ~12 KiB per frame for a 7x3.2 in figure at 90 dpi
(palette PNG, base64), i.e. ~280 KiB for a 6 x 4 slider; ~0.1-0.2 s per frame to render.
"""
from __future__ import annotations

import base64
import hashlib
import html
import io
import itertools
import json
import statistics
import time
from typing import Any

from andrea_edu.env import book_build
from andrea_edu.notebook import live

DPI = 90  # static frames: sharp enough on a laptop screen
MAX_DPI = 600  # beyond print quality: a slip (dpi=9000) would allocate gigabytes per frame
PALETTE = 256  # static frames are stored as 256-colour PNGs: ~3x smaller pages, ~10 ms/frame
# The width (CSS px) of the built book's content column in a 1280-px-wide window, where a reader
# found the headline slider's frames shown at about 680 px (issue 39). A static frame is shown
# at most 100 % of the column's width (max-width): one at least CONTENT_PX / DPI inches wide spans
# the column, and its text reads at displayed_pt(fontsize, width) there.
CONTENT_PX = 680
_counter = itertools.count()  # several sliders per page need distinct DOM ids


def displayed_pt(fontsize: float, fig_width_in: float, content_px: int = CONTENT_PX) -> float:
    """The size (pt, 96 CSS px per inch) at which text of `fontsize` pt in a figure
    `fig_width_in` inches wide reads when the figure is shown `content_px` CSS px wide."""
    return fontsize * content_px / (fig_width_in * 96)


def _checked(plot_fn, valid, dpi, params: dict, default=None) -> tuple[dict, dict]:
    """The slider's arguments checked (a bad one raises one line naming it): ``{name: tuple of
    values}`` and the starting value of each, ``default[name]`` or else the middle value."""
    if not callable(plot_fn):
        raise TypeError(f"plot_fn must be callable (a function returning a matplotlib Figure), "
                        f"got {type(plot_fn).__name__}")
    if valid is not None and not callable(valid):
        raise TypeError(f"valid must be callable or None, got {type(valid).__name__}")
    if isinstance(dpi, bool) or not isinstance(dpi, int) or not 1 <= dpi <= MAX_DPI:
        raise ValueError(f"dpi={dpi!r} is not allowed; an integer in 1..{MAX_DPI}")
    if not params:
        raise ValueError("slider needs at least one parameter, e.g. n_head=[1, 2, 4]; got none")
    default = dict(default or {})
    if set(default) - set(params):
        raise ValueError(f"default names {sorted(set(default) - set(params))} that are not "
                         f"slider parameters; parameters are {list(params)}")
    out, start = {}, {}
    for name, values in params.items():
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise TypeError(f"slider parameter {name!r} must be a list of values, "
                            f"got {type(values).__name__} {values!r}")
        values = out[name] = tuple(values)
        if not values:
            raise ValueError(f"slider parameter {name!r} has no values; give at least one")
        if len(set(map(repr, values))) != len(values):
            raise ValueError(f"slider parameter {name!r} has repeated values: {list(values)}")
        if name in default and default[name] not in values:
            raise ValueError(f"default {name}={default[name]!r} is not one of the allowed "
                             f"values {list(values)}")
        start[name] = default[name] if name in default else values[(len(values) - 1) // 2]
    return out, start


def _verdict(valid, kw: dict) -> str | None:
    """None when the combination is valid, else the message to show instead of a figure."""
    ok = True if valid is None else valid(**kw)
    if isinstance(ok, str):
        return ok or "This combination is not valid."
    return None if ok else "This combination is not valid."


def _label(kw: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in kw.items())


def _alt_text(alt, kw: dict) -> str:
    return f"{alt(**kw) if callable(alt) else (alt or 'figure')} ({_label(kw)})"


def _combinations(params: dict):
    """(indices, {name: value}) of every combination, the last parameter varying fastest."""
    for idx in itertools.product(*(range(len(v)) for v in params.values())):
        yield idx, {n: params[n][i] for n, i in zip(params, idx)}


def _palette_png(png: bytes) -> bytes:
    """The PNG with an adaptive palette of PALETTE colours (no dithering, so flat areas stay
    flat) when that is smaller."""
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB").quantize(
        colors=PALETTE, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=True)
    return buf.getvalue() if len(buf.getvalue()) < len(png) else png


def static_frames(plot_fn, *, valid=None, dpi: int = DPI, **params) -> dict:
    """Render every valid combination: ``{tuple of values (in parameter order): PNG bytes}``,
    the palette PNGs a static slider embeds; invalid combinations are left out."""
    params, _ = _checked(plot_fn, valid, dpi, params)
    return {tuple(kw.values()): _palette_png(live.draw_png(plot_fn, kw, dpi, facecolor=None))
            for _, kw in _combinations(params) if _verdict(valid, kw) is None}


# The whole front end of the static slider. It reads the JSON next to it, so each block is
# independent; the range inputs hold indices into each parameter's list of values.
_JS = """(function(){
var root=document.getElementById("%(id)s");
var data=JSON.parse(document.getElementById("%(id)s-data").textContent);
var inputs=root.querySelectorAll("input.andrea-slider-input");
var img=root.querySelector("img.andrea-slider-img"), msg=root.querySelector(".andrea-slider-msg");
function show(){
  var idx=[];
  inputs.forEach(function(inp,i){
    var v=data.params[i].values[+inp.value]; idx.push(inp.value);
    inp.setAttribute("aria-valuetext",v);
    root.querySelector('output[data-param="'+data.params[i].name+'"]').textContent=v;
  });
  var key=idx.join(","), f=data.frames[key];
  root.setAttribute("data-key",key);
  if(f.img!==undefined){img.src=data.images[f.img];img.alt=f.alt;img.hidden=false;msg.hidden=true;}
  else{img.hidden=true;msg.textContent=f.msg;msg.hidden=false;}
}
inputs.forEach(function(inp){inp.addEventListener("input",show);inp.addEventListener("change",show);});
show();
})();"""

_CSS = (".andrea-slider{margin:0.5em 0 1em 0}.andrea-slider [hidden]{display:none!important}"
        ".andrea-slider-title{font-weight:600;margin-bottom:0.3em}"
        ".andrea-slider-row{display:flex;align-items:center;gap:0.6em;margin:0.15em 0;font-size:0.9em}"
        ".andrea-slider-row label{min-width:7em;font-family:monospace}"
        ".andrea-slider-row input{flex:0 1 18em}"
        ".andrea-slider-row output{font-family:monospace;min-width:4em}"
        ".andrea-slider-img{max-width:100%;height:auto;display:block;margin-top:0.4em}"
        ".andrea-slider-msg{padding:1em;margin-top:0.4em;border:1px dashed #999;}")


def static_html(plot_fn, *, alt="", title=None, valid=None, default=None, dpi: int = DPI,
                **params) -> str:
    """The self-contained HTML of a static slider (what ``slider(..., static=True)`` shows)."""
    params, start = _checked(plot_fn, valid, dpi, params, default)
    images: list[str] = []
    seen: dict[str, int] = {}
    frames: dict[str, dict[str, Any]] = {}
    draw_s: list[float] = []
    for idx, kw in _combinations(params):
        key = ",".join(map(str, idx))
        why = _verdict(valid, kw)
        if why is not None:
            frames[key] = {"msg": f"{_label(kw)}: {why}"}
            continue
        t0 = time.perf_counter()
        png = live.draw_png(plot_fn, kw, dpi, facecolor=None)
        draw_s.append(time.perf_counter() - t0)  # what one live update costs (compute + draw)
        png = _palette_png(png)
        digest = hashlib.sha1(png).hexdigest()
        if digest not in seen:  # identical frames are stored once
            seen[digest] = len(images)
            images.append("data:image/png;base64," + base64.b64encode(png).decode("ascii"))
        frames[key] = {"img": seen[digest], "alt": _alt_text(alt, kw)}
    if not images:
        raise ValueError("valid() rejected every combination of "
                         + ", ".join(f"{n}={list(v)}" for n, v in params.items()))
    data = {"params": [{"name": n, "values": [str(v) for v in vals]}
                       for n, vals in params.items()],
            "frames": frames, "images": images}
    # "<" escaped so that no value can close the <script> element early.
    blob = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    uid = f"andrea-slider-{next(_counter)}-{hashlib.sha1(blob.encode()).hexdigest()[:8]}"
    first = frames[",".join(str(params[n].index(start[n])) for n in params)]
    rows = []
    for n, vals in params.items():
        i, e = vals.index(start[n]), html.escape(n)
        rows.append(
            f'<div class="andrea-slider-row"><label for="{uid}-{e}">{e}</label><input '
            f'type="range" class="andrea-slider-input" id="{uid}-{e}" data-param="{e}" min="0" '
            f'max="{len(vals) - 1}" step="1" value="{i}" aria-label="{e}" '
            f'aria-valuetext="{html.escape(str(vals[i]))}"><output data-param="{e}">'
            f'{html.escape(str(vals[i]))}</output></div>')
    if "img" in first:
        img = (f'<img class="andrea-slider-img" src="{images[first["img"]]}" '
               f'alt="{html.escape(first["alt"])}"><div class="andrea-slider-msg" hidden></div>')
    else:
        img = (f'<img class="andrea-slider-img" alt="" hidden>'
               f'<div class="andrea-slider-msg">{html.escape(first["msg"])}</div>')
    head = f'<div class="andrea-slider-title">{html.escape(title)}</div>' if title else ""
    return (f'<div class="andrea-slider" id="{uid}" data-params="{html.escape(",".join(params))}"'
            f' data-frames="{len(images)}" data-combinations="{len(frames)}"'
            f' data-frame-ms="{statistics.median(draw_s) * 1e3:.0f}">'
            f'<style>{_CSS}</style>{head}{"".join(rows)}{img}'
            f'<script type="application/json" id="{uid}-data">{blob}</script>'
            f'<script>{_JS % {"id": uid}}</script></div>')


def live_widget(plot_fn, *, alt="", title=None, valid=None, default=None,
                dpi: int = live.LIVE_DPI, **params):
    """ipywidgets front end: one SelectionSlider per parameter, how long the update took, and
    the figure (an HTML widget: the PNG with alt text and a caption, or the message shown
    instead), its frames kept and drawn by ``live.LiveFigure`` (the box's ``live``)."""
    import ipywidgets as widgets

    params, start = _checked(plot_fn, valid, dpi, params, default)
    kws = dict(_combinations(params))  # {value indices: {name: value}}
    sliders = {n: widgets.SelectionSlider(options=list(vals), value=start[n], description=n,
                                          continuous_update=False,
                                          style={"description_width": "initial"})
               for n, vals in params.items()}
    figure, timing = widgets.HTML(), widgets.HTML()

    def make(key):
        t0 = time.perf_counter()
        png = live.draw_png(plot_fn, kws[key], dpi)
        return live.Frame(png, None, (time.perf_counter() - t0) * 1e3)

    def show(key, frame, source, asked_at):
        # data-andrea-key names the position, data-andrea-source says whether its frame was ready
        # or drawn for this move (the live benchmark reads both); the caption repeats the alt
        # text for sighted readers, aria-hidden so that a screen reader reads it once.
        alt_text, at = _alt_text(alt, kws[key]), html.escape(_label(kws[key]))
        tag = f'data-andrea-key="{at}" data-andrea-source="{source}"'
        ms = (time.perf_counter() - asked_at) * 1e3
        if frame.png is None:
            figure.value = (f'<div class="andrea-live-msg" role="status" {tag} style="padding:'
                            f'1em;border:1px dashed #999"><b>{at}</b>: '
                            f'{html.escape(frame.message)}</div>')
            timing.value = ""
            return
        src = "data:image/png;base64," + base64.b64encode(frame.png).decode("ascii")
        figure.value = (
            f'<figure class="andrea-live-figure" {tag} style="margin:0.3em 0"><img src="{src}" '
            f'alt="{html.escape(alt_text)}" style="max-width:100%;height:auto"><figcaption '
            f'class="andrea-live-caption" aria-hidden="true" style="font-size:0.85em;color:'
            f'var(--jp-ui-font-color2,#555)">{html.escape(alt_text)}</figcaption></figure>')
        timing.value = (f"<small>updated in {ms:.0f} ms ({'kept, ' if source == 'ready' else ''}"
                        f"drawn in {frame.draw_ms:.0f} ms, this machine)</small>")

    messages = {k: live.Frame(None, why, 0.0) for k, kw in kws.items()
                if (why := _verdict(valid, kw)) is not None}
    state = live.LiveFigure(make, show, tuple(map(len, params.values())), messages)
    title_row = [widgets.HTML(f"<b>{html.escape(title)}</b>")] if title else []
    box = widgets.VBox(title_row + list(sliders.values()) + [timing, figure])
    box.add_class("andrea-slider-live")
    box.sliders, box.figure, box.timing, box.live = sliders, figure, timing, state
    state.move(tuple(params[n].index(start[n]) for n in params), here=True)
    for s in sliders.values():
        s.observe(lambda _: state.move(tuple(params[n].index(sliders[n].value) for n in params)),
                  names="value")
    return box


def slider(plot_fn, *, static=None, alt="", title=None, valid=None, default=None,
           dpi: int | None = None, **params):
    """A figure with one slider per parameter: the arguments are described in the module
    docstring. Static (``IPython.display.HTML``) when ``static``, or when it is None and the
    book is being built (``ANDREA_BOOK_BUILD=1``); else live (an ipywidgets ``VBox``)."""
    if book_build() if static is None else static:
        from IPython.display import HTML
        return HTML(static_html(plot_fn, alt=alt, title=title, valid=valid, default=default,
                                dpi=DPI if dpi is None else dpi, **params))
    return live_widget(plot_fn, alt=alt, title=title, valid=valid, default=default,
                       dpi=live.LIVE_DPI if dpi is None else dpi, **params)
