"""Sphinx extension: collects every "Checking the source" box into one page.

A chapter's box (andrea_edu.figures.verdicts.box) emits an `andrea-verdict` directive holding its rows
as JSON; the directive leaves an anchor in the page and records the rows in the build
environment. The directive `andrea-verdict-list` (on book/verdicts.md) becomes a table of all of
them, in the order of the table of contents, each row linking back to its box, after a line
that counts the verdicts by value ("not yet measured" included: a check whose data does not exist).
"""
from __future__ import annotations

import json

from docutils import nodes
from sphinx.util.docutils import SphinxDirective


# The verdicts a box may give, in this order, with their icons (as andrea_edu.figures.verdicts;
# repeated here so that the extension loads without the library).
VERDICTS = ("holds", "holds with a caveat", "does not hold", "not yet measured")
ICONS = {"holds": "✅", "holds with a caveat": "⚠️", "does not hold": "❌", "not yet measured": "⏳"}


def count_line(entries) -> str:
    """'N verdicts: a holds, b hold with a caveat, ...' over every row of every box."""
    values = [row["verdict"] for entry in entries for row in entry["rows"]]
    parts = [f"{ICONS.get(v, '')} {values.count(v)} {v}".strip() for v in VERDICTS]
    parts += [f"{values.count(v)} {v}" for v in sorted(set(values) - set(VERDICTS))]
    return f"{len(values)} verdicts in {len(entries)} boxes: " + ", ".join(parts) + "."


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
        if not hasattr(env, "andrea_verdicts"):
            env.andrea_verdicts = []
        env.andrea_verdicts.append(
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
        table = nodes.table(classes=["andrea-verdict-list"])
        group = nodes.tgroup(cols=4)
        table += group
        for width in (18, 34, 34, 14):
            group += nodes.colspec(colwidth=width)
        head = nodes.thead()
        group += head
        row = nodes.row()
        for title in ("Chapter", "Claim of the source", "What the code measured", "Verdict"):
            row += nodes.entry("", nodes.paragraph(text=title))
        head += row
        body = nodes.tbody()
        group += body
        for entry in entries:
            title = env.titles.get(entry["docname"])
            chapter = title.astext() if title is not None else entry["docname"]
            uri = app.builder.get_relative_uri(fromdocname, entry["docname"]) + "#" + entry["target"]
            for claim in entry["rows"]:
                row = nodes.row()
                link = nodes.reference("", chapter, internal=True, refuri=uri)
                row += nodes.entry("", nodes.paragraph("", "", link))
                row += nodes.entry("", nodes.paragraph(text=claim["claim"]))
                row += nodes.entry("", nodes.paragraph(text=claim["measured"]))
                icon = ICONS.get(claim["verdict"], "")
                row += nodes.entry("", nodes.paragraph(text=f"{icon} {claim['verdict']}".strip()))
                body += row
        if not entries:
            node.replace_self(nodes.paragraph(text="No chapter has a Checking-the-source box yet."))
        else:
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
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
