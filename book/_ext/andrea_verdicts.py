"""Sphinx extension: collects every "Checking the source" box into one page, one row per claim.

A chapter's box (andrea_edu.figures.verdicts.box) emits an `andrea-verdict` directive holding its rows
as JSON; the directive leaves an anchor in the page and records the rows in the build
environment. The directive `andrea-verdict-list` (on book/verdicts.md) becomes a table with each
source claim once (rows of several chapters with the same key, or the same claim text, are one
claim): every chapter's evidence with its verdict and a link back to its box, and one combined
verdict (andrea_edu.figures.verdicts.combine), after a line that counts the combined verdicts.
Two chapters that contradict each other on one claim, unreconciled, give a build warning (an
error under -W) and the row says so.
"""
from __future__ import annotations

import json

from docutils import nodes
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

# One source of truth for the verdicts, their icons and how they combine: the library (every
# chapter of the book imports it, so the build has it).
from andrea_edu.figures.verdicts import ICONS, VERDICTS, group_claims

logger = logging.getLogger(__name__)


def count_line(entries) -> str:
    """'N source claims (M verdicts in K boxes), combined: a holds, b hold with a caveat, ...'."""
    claims = group_claims([dict(e, chapter=e.get("docname", "")) for e in entries])
    values = [c["verdict"] or "unreconciled" for c in claims]
    n_rows = sum(len(e["rows"]) for e in entries)
    parts = [f"{ICONS.get(v, '')} {values.count(v)} {v}".strip() for v in VERDICTS]
    parts += [f"{values.count(v)} {v}" for v in sorted(set(values) - set(VERDICTS))]
    return (f"{len(claims)} source claims ({n_rows} verdicts in {len(entries)} boxes), "
            "combined: " + ", ".join(parts) + ".")


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
    def run(self):
        return [verdict_list("")]


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


def _resolve(app, doctree, fromdocname):
    env = app.builder.env
    entries = getattr(env, "andrea_verdicts", [])
    order = {d: i for i, d in enumerate(_toc_order(env))}
    entries = sorted(entries, key=lambda v: (order.get(v["docname"], 1 << 30), v["target"]))
    for node in doctree.findall(verdict_list):
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
        table = nodes.table(classes=["andrea-verdict-list"])
        group = nodes.tgroup(cols=3)
        table += group
        for width in (28, 54, 18):
            group += nodes.colspec(colwidth=width)
        head = nodes.thead()
        group += head
        row = nodes.row()
        for title in ("Claim of the source", "Evidence, chapter by chapter", "Verdict"):
            row += nodes.entry("", nodes.paragraph(text=title))
        head += row
        body = nodes.tbody()
        group += body
        for claim in group_claims(chapters):
            row = nodes.row()
            row += nodes.entry("", nodes.paragraph(text=claim["claim"]))
            cell = nodes.entry()
            for ev in claim["evidence"]:
                link = nodes.reference("", ev["chapter"], internal=True,
                                       refuri=uris[ev["chapter"], ev["target"]])
                text = f" {ICONS.get(ev['verdict'], '')} {ev['verdict']}: {ev['measured']}"
                if ev["claim"] != claim["claim"]:
                    text = f" (as \"{ev['claim']}\")" + text
                cell += nodes.paragraph("", "", link, nodes.Text(text))
            row += cell
            if claim["error"]:
                logger.warning(f"andrea-verdict-list: {claim['error']}", location=node)
                verdict = nodes.paragraph(text="unreconciled: the chapters contradict each other")
            else:
                verdict = nodes.paragraph(
                    "", "", nodes.strong(text=f"{ICONS.get(claim['verdict'], '')} "
                                              f"{claim['verdict']}".strip()),
                    nodes.Text(f" ({claim['how']})" if len(claim["evidence"]) > 1 else ""))
            row += nodes.entry("", verdict)
            body += row
        counts = nodes.paragraph("", "", nodes.strong(text=count_line(entries)),
                                 classes=["andrea-verdict-counts"])
        node.replace_self([counts, table])


def setup(app):
    app.add_node(verdict_list)
    app.add_directive("andrea-verdict", VerdictDirective)
    app.add_directive("andrea-verdict-list", VerdictListDirective)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    app.connect("doctree-resolved", _resolve)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True, "env_version": 2}
