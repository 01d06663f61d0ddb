"""Sphinx extension: collects every "Checking the source" box into one page, one row per claim.

A chapter's box (andrea_edu.figures.verdicts.box) emits an `andrea-verdict` directive holding its rows
as JSON; the directive leaves an anchor in the page and records the rows in the build
environment. The directive `andrea-verdict-list` (on book/verdicts.md; option `:kind: source` or
`:kind: hypothesis`) becomes a table with each registered claim of that kind once
(andrea_edu/figures/data/claims.json, in its order): every chapter's evidence with its verdict and a
link back to its box, the published findings where the book's evidence is not at the claim's
scale, and one combined verdict (andrea_lab.verdict_page.combine), after a line that counts
the combined verdicts. A build warning (an error under -W), and a row that says so, for: two
chapters contradicting each other on one claim, unreconciled; a row naming no registered claim;
a registered claim no chapter checks (unless `andrea_verdicts_require_all = False`). The
registry's file is checked when the extension loads (andrea_lab.verdict_page.check_registry).
"""
from __future__ import annotations

import json

from docutils import nodes
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

# One source of truth for the verdicts and their icons (the chapters' box,
# andrea_edu.figures.verdicts) and for how they combine (the laboratory's andrea_lab.verdict_page).
from andrea_edu.figures.verdicts import CANNOT_DECIDE, CANNOT_DECIDE_ICON, ICONS, VERDICTS, fold
from andrea_lab.verdict_page import PUBLISHED_CHAPTER, check_registry, group_claims

logger = logging.getLogger(__name__)


KINDS = {"source": (("claim", "claims"), "of the source", "Claim of the source"),
         "hypothesis": (("hypothesis", "hypotheses"), "of the book", "Hypothesis of the book")}


def count_line(claims, kind: str = "source") -> str:
    """'N claims of the source (M rows of evidence), combined: a holds, b holds with a caveat,
    ...' over the grouped claims of one kind."""
    mine = [c for c in claims if c["kind"] == kind]
    values = [_combined(c) or c["how"] for c in mine]
    n_rows = sum(len(c["evidence"]) for c in mine)
    parts = [f"{ICONS.get(v, '')} {values.count(v)} {v}".strip() for v in VERDICTS]
    if CANNOT_DECIDE in values:
        parts.append(f"{CANNOT_DECIDE_ICON} {values.count(CANNOT_DECIDE)} {CANNOT_DECIDE}")
    parts += [f"{values.count(v)} {v}" for v in sorted(set(values) - {*VERDICTS, CANNOT_DECIDE})]
    (one, many), of, _ = KINDS[kind]
    return (f"{len(mine)} {one if len(mine) == 1 else many} {of} ({n_rows} "
            f"row{'' if n_rows == 1 else 's'} of evidence), combined: " + ", ".join(parts) + ".")


def _combined(claim) -> str | None:
    """The combined verdict as the page shows it: a claim that only the book's toys checked
    reads "cannot decide at this scale" (❔), so 🔍 keeps its one meaning, "not observed here"."""
    if claim["verdict"] and claim["evidence"] and not any(e["decides"] for e in claim["evidence"]):
        return CANNOT_DECIDE
    return claim["verdict"]


def _icon(verdict: str) -> str:
    return CANNOT_DECIDE_ICON if verdict == CANNOT_DECIDE else ICONS.get(verdict, "")


class verdict_list(nodes.General, nodes.Element):
    """Placeholder replaced by the table once every page has been read."""


class VerdictDirective(SphinxDirective):
    has_content = True

    def run(self):
        try:
            data = json.loads("\n".join(self.content))
            rows = data["rows"]
        except (ValueError, KeyError) as exc:
            raise self.error(f"andrea-verdict: content must be JSON with 'rows': {exc}")
        env = self.env
        serial = env.new_serialno("andrea-verdict")
        target_id = f"checking-the-source-{serial}" if serial else "checking-the-source"
        if not hasattr(env, "andrea_verdicts"):  # Sphinx's idiom: an extension's data on the env
            setattr(env, "andrea_verdicts", [])
        getattr(env, "andrea_verdicts").append(
            {"docname": env.docname, "target": target_id, "title": data.get("title", ""), "rows": rows}
        )
        return [nodes.target("", "", ids=[target_id])]


class VerdictListDirective(SphinxDirective):
    option_spec = {"kind": lambda arg: arg.strip()}

    def run(self):
        kind = self.options.get("kind", "source")
        if kind not in KINDS:
            raise self.error(f"andrea-verdict-list: kind must be one of {sorted(KINDS)}, "
                             f"got {kind!r}")
        return [verdict_list("", kind=kind)]


def _purge(app, env, docname):
    env.andrea_verdicts = [v for v in getattr(env, "andrea_verdicts", []) if v["docname"] != docname]


def _merge(app, env, docnames, other):
    env.andrea_verdicts = getattr(env, "andrea_verdicts", []) + [
        v for v in getattr(other, "andrea_verdicts", []) if v["docname"] in docnames
    ]


def _toc_order(env) -> list[str]:
    order, seen = [], set()

    def walk(doc):
        if doc in seen:
            return
        seen.add(doc)
        order.append(doc)
        for child in env.toctree_includes.get(doc, []):
            walk(child)

    walk(env.config.root_doc)
    return order


def _evidence_text(ev: dict, claim: dict) -> str:
    shown = (f"{CANNOT_DECIDE_ICON} {CANNOT_DECIDE} (the toy: {ev['verdict']})"
             if not ev["decides"] else f"{ICONS.get(ev['verdict'], '')} {ev['verdict']}")
    text = f" {shown}: {ev['measured']}" + (f". {ev['detail']}" if ev.get("detail") else "")
    if fold(ev["claim"]) != fold(claim["claim"]):
        text = f" (as \"{ev['claim']}\")" + text
    return text


def _table(claims, kind: str, uris: dict, node):
    table = nodes.table(classes=["andrea-verdict-list"])
    group = nodes.tgroup(cols=3)
    table += group
    for width in (28, 54, 18):
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    group += head
    row = nodes.row()
    for title in (KINDS[kind][2], "Evidence, chapter by chapter", "Verdict"):
        row += nodes.entry("", nodes.paragraph(text=title))
    head += row
    body = nodes.tbody()
    group += body
    for claim in claims:
        row = nodes.row()
        row += nodes.entry("", nodes.paragraph(text=claim["claim"]),
                           nodes.paragraph(text=claim["section"], classes=["andrea-section"]))
        cell = nodes.entry()
        for ev in claim["evidence"]:
            if ev["chapter"] == PUBLISHED_CHAPTER:
                head_node = nodes.emphasis(text=ev["chapter"])
            else:
                head_node = nodes.reference("", ev["chapter"], internal=True,
                                            refuri=uris[ev["chapter"], ev["target"]])
            cell += nodes.paragraph("", "", head_node, nodes.Text(_evidence_text(ev, claim)))
        if claim.get("reading"):   # the static reasoning (claims.json), once per claim
            cell += nodes.paragraph("", "", nodes.emphasis(text="How to read it: "),
                                    nodes.Text(claim["reading"]), classes=["andrea-reading"])
        row += cell
        if claim["error"]:
            logger.warning(f"andrea-verdict-list: {claim['error']}"
                           + (f" (the claim {claim['key']!r}: no chapter checks it; remove it "
                              "from andrea_edu/figures/data/claims.json or check it)"
                              if claim["error"] == "no evidence" else ""), location=node)
            verdict = nodes.paragraph(text={"unreconciled": "unreconciled: the chapters "
                                            "contradict each other",
                                            "unregistered": "unregistered: no claim of the "
                                            "registry"}.get(claim["how"], claim["how"]))
        else:
            verdict = nodes.paragraph(
                "", "", nodes.strong(text=f"{_icon(_combined(claim) or '')} "
                                          f"{_combined(claim)}".strip()),
                nodes.Text(f" ({claim['how']})" if len(claim["evidence"]) > 1
                           or not all(e["decides"] for e in claim["evidence"]) else ""))
        row += nodes.entry("", verdict)
        body += row
    return table


def _resolve(app, doctree, fromdocname):
    env = app.builder.env
    entries = getattr(env, "andrea_verdicts", [])
    order = {d: i for i, d in enumerate(_toc_order(env))}
    entries = sorted(entries, key=lambda v: (order.get(v["docname"], 1 << 30), v["target"]))
    require_all = app.config.andrea_verdicts_require_all
    for node in doctree.findall(verdict_list):
        kind = node["kind"]
        if not entries:
            node.replace_self(nodes.paragraph(text="No chapter has a Checking-the-source box yet."))
            continue
        chapters = []
        for entry in entries:
            title = env.titles.get(entry["docname"])
            chapters.append(dict(entry, chapter=title.astext() if title is not None
                                 else entry["docname"],
                                 uri=app.builder.get_relative_uri(fromdocname, entry["docname"])
                                 + "#" + entry["target"]))
        uris = {(c["chapter"], c["target"]): c["uri"] for c in chapters}
        grouped = group_claims(chapters)
        if not require_all:   # only the claims some chapter checks
            grouped = [c for c in grouped
                       if any(e["chapter"] != PUBLISHED_CHAPTER for e in c["evidence"])]
        # Unregistered rows are listed (and warned about) with the claims of the source.
        mine = [c for c in grouped
                if c["kind"] == kind or (kind == "source" and c["kind"] == "unregistered")]
        counts = nodes.paragraph("", "", nodes.strong(text=count_line(grouped, kind)),
                                 classes=["andrea-verdict-counts"])
        node.replace_self([counts, _table(mine, kind, uris, node)])


def setup(app):
    check_registry()  # a bad claims.json stops the build here, in one line naming the entry
    app.add_node(verdict_list)
    app.add_config_value("andrea_verdicts_require_all", True, "env")
    app.add_directive("andrea-verdict", VerdictDirective)
    app.add_directive("andrea-verdict-list", VerdictListDirective)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    app.connect("doctree-resolved", _resolve)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True, "env_version": 3}
