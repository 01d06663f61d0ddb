"""Drops repeated <script> entries from each page.

sphinx-thebe 0.3.1 and sphinx-togglebutton under Sphinx 7.4 register their inline config
scripts twice (once with filename None, once with ''); the second THEBE copy throws
"Identifier 'THEBE_JS_URL' has already been declared" in every page.
"""


def _dedupe(app, pagename, templatename, context, doctree):
    seen, kept = set(), []
    for js in context.get("script_files", []):
        # None and '' both mean an inline script; priority does not make a script different.
        key = (str(getattr(js, "filename", js) or ""),
               tuple(sorted(getattr(js, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            kept.append(js)
    context["script_files"] = kept


def setup(app):
    app.connect("html-page-context", _dedupe, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
