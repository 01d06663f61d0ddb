"""Ready to publish (issue 21): a licence, a workflow that builds and deploys the site, one
repository URL, links that hold.

- LICENSE (MIT), LICENSE-CONTENT (CC BY 4.0), the README and the book's footer say so;
  CITATION.cff is CFF 1.2.0 with its required keys.
- .github/workflows lint clean under actionlint (offline), and a planted error makes it fail; the
  workflows run the README's two commands, deploy _build/html to Pages, pin their actions.
- The repository URL is written in _config.yml only: every other use is generated from it
  (scripts/repo_url.py), and a copy with another URL sees every use follow, the launch buttons
  included (sphinx-book-theme's own code, fed Jupyter Book's configuration of the copy).
- Over the built book (the shared fixture): every internal link and anchor resolves to a file
  and an id, offline; each chapter's Colab link is the form the theme builds for its notebook;
  the footer shows the licence; the theme's default mode is set (no console error).
"""
from __future__ import annotations

import html.parser
import importlib.util
import re
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from book_toc import toc_docnames

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / ".github" / "workflows"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


repo_url = _load("repo_url")


# ---- licence and citation ------------------------------------------------------------------

def test_licences_are_stated_in_the_files_the_readme_and_the_footer():
    assert (REPO / "LICENSE").read_text().startswith("MIT License\n")
    content = " ".join((REPO / "LICENSE-CONTENT").read_text().split())
    assert "Creative Commons Attribution 4.0" in content and "CC BY 4.0" in content
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Licence", 1)[1]
    assert "MIT License" in section and "CC BY 4.0" in section and "`LICENSE`" in section
    footer = yaml.safe_load((REPO / "_config.yml").read_text())["html"]["extra_footer"]
    assert "MIT License" in footer and "creativecommons.org/licenses/by/4.0/" in footer


def test_citation_cff_is_cff_1_2_0_with_its_required_keys():
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0"
    for key in ("message", "title", "authors"):  # the keys CFF 1.2.0 requires
        assert isinstance(cff.get(key), (str, list)) and cff[key], key
    assert all(isinstance(a, dict) and (a.get("name") or a.get("family-names"))
               for a in cff["authors"])
    assert set(cff["license"]) == {"MIT", "CC-BY-4.0"}  # SPDX identifiers
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(cff["date-released"]))
    assert cff["repository-code"] == repo_url.read_config(REPO).url


# ---- the workflows -------------------------------------------------------------------------

def _actionlint(cwd: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("actionlint") or str(Path(sys.executable).with_name("actionlint"))
    return subprocess.run([exe, "-no-color", "-shellcheck=", "-pyflakes="], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_workflows_lint_clean():
    r = _actionlint(REPO)
    assert r.returncode == 0, r.stdout + r.stderr


def test_actionlint_fails_on_a_planted_error(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)  # actionlint's project
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    broken = (WORKFLOWS / "book.yml").read_text().replace("needs: build", "needs: biuld")
    assert broken != (WORKFLOWS / "book.yml").read_text()
    (tmp_path / ".github" / "workflows" / "book.yml").write_text(broken)
    r = _actionlint(tmp_path)
    assert r.returncode == 1 and 'needs job "biuld" which does not exist' in r.stdout, \
        r.stdout + r.stderr


def _workflow(name: str) -> dict:
    wf = yaml.safe_load((WORKFLOWS / name).read_text())
    wf["on"] = wf.pop(True, wf.get("on"))  # YAML 1.1 reads the key `on` as True
    return wf


def _readme_command(script: str) -> str:
    readme = (REPO / "README.md").read_text()
    m = re.search(rf"^\s+(bash scripts/{script}\.sh)\b", readme, flags=re.M)
    assert m, f"the README shows no 'bash scripts/{script}.sh'"
    return m.group(1)


def _steps(wf: dict) -> list[dict]:
    return [s for job in wf["jobs"].values() for s in job.get("steps", [])]


def test_pull_requests_run_the_readmes_test_command():
    wf = _workflow("tests.yml")
    assert "pull_request" in wf["on"]
    runs = [s.get("run") or "" for s in _steps(wf)]
    test = runs.index(_readme_command("test"))
    # the browser tests get a Chromium (tests/book_fixtures.py reads ANDREA_CHROMIUM) before it
    assert any("ANDREA_CHROMIUM=" in r and "GITHUB_ENV" in r for r in runs[:test])


def test_pushes_to_main_build_and_deploy_to_pages():
    wf = _workflow("book.yml")
    assert wf["on"]["push"]["branches"] == ["main"]
    assert wf["permissions"]["pages"] == "write" and wf["permissions"]["id-token"] == "write"
    assert wf["concurrency"]["group"]
    build, deploy = wf["jobs"]["build"]["steps"], wf["jobs"]["deploy"]
    runs = [s.get("run") for s in build]
    upload = next(s for s in build if s.get("uses", "").startswith("actions/upload-pages-artifact@"))
    assert _readme_command("build_book") in runs
    assert runs.index(_readme_command("build_book")) < build.index(upload)
    assert upload["with"]["path"] == "_build/html"
    assert deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    assert any(s.get("uses", "").startswith("actions/deploy-pages@") for s in deploy["steps"])


@pytest.mark.parametrize("name", ["tests.yml", "book.yml"])
def test_actions_are_pinned_and_pip_is_cached(name):
    steps = _steps(_workflow(name))
    for s in steps:
        if "uses" in s:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@(v\d+(\.\d+){0,2}|[0-9a-f]{40})", s["uses"]), s
    py = [s for s in steps if s.get("uses", "").startswith("actions/setup-python@")]
    assert py and all(s["with"]["cache"] == "pip" and
                      s["with"]["cache-dependency-path"] == "requirements.txt" for s in py)


# ---- one repository URL --------------------------------------------------------------------

def test_every_use_of_the_url_agrees_with_config():
    assert repo_url.sync(REPO, check=True) == []


def test_the_url_is_written_nowhere_else():
    """Outside _config.yml, the URL appears only in the files scripts/repo_url.py writes."""
    url = repo_url.read_config(REPO).url
    org, name = repo_url.read_config(REPO).org_name
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split()
    written = {p.relative_to(REPO).as_posix() for p in repo_url.expected(REPO)}
    users = sorted(f for f in files if (REPO / f).is_file() and f != "_config.yml"
                   and (url in (text := (REPO / f).read_text(errors="replace"))
                        or f"{org}/{name}" in text or f"{org.lower()}.github.io" in text))
    assert set(users) <= written, sorted(set(users) - written)


def _copy_with_url(tmp_path: Path, url: str, branch: str) -> Path:
    copy = tmp_path / "copy"
    (copy / "book").mkdir(parents=True)
    for f in ("_config.yml", "_toc.yml", "README.md", "CITATION.cff"):
        shutil.copy(REPO / f, copy / f)
    for nb in repo_url.chapters(REPO):
        shutil.copy(nb, copy / "book" / nb.name)
    cfg = (copy / "_config.yml").read_text()
    cfg, n = re.subn(r"(?m)^(repository:\n(?:  #.*\n)*  url: ).*$", rf"\g<1>{url}", cfg)
    assert n == 1
    cfg, n = re.subn(r"(?m)^  branch: main$", f"  branch: {branch}", cfg)
    assert n == 1
    (copy / "_config.yml").write_text(cfg)
    return copy


def _launch_links(root: Path, pages: list[str]) -> dict[str, str]:
    """{page: its Colab link}, built by sphinx-book-theme's add_launch_buttons from Jupyter
    Book's translation of root/_config.yml (what `jupyter-book build` hands to Sphinx)."""
    from jupyter_book.config import get_final_config
    from sphinx_book_theme.header_buttons import update_context_with_repository_info
    from sphinx_book_theme.header_buttons.launch import add_launch_buttons

    conf, *_ = get_final_config(user_yaml=root / "_config.yml",
                                 cli_config={"latex_individualpages": False},
                                 sourcedir=root)

    class Config(SimpleNamespace):
        def __getitem__(self, key):
            return getattr(self, key)

    env = SimpleNamespace(doc2path=lambda page: str(root / f"{page}.ipynb"),
                          metadata={p: {"kernelspec": {"name": "python3"}} for p in pages})
    app = SimpleNamespace(config=Config(html_theme_options=conf["html_theme_options"],
                                        html_context=dict(conf.get("html_context", {}))),
                          env=env, builder=None)
    update_context_with_repository_info(app)
    out = {}
    for page in pages:
        ctx = dict(app.config.html_context, pagename=page, header_buttons=[],
                   sourcename=f"{page}.ipynb", page_source_suffix=".ipynb")
        add_launch_buttons(app, page, "page.html", ctx, None)
        colab = [b["url"] for g in ctx["header_buttons"] for b in g["buttons"]
                 if b["text"] == "Colab"]
        assert len(colab) == 1, (page, ctx["header_buttons"])
        out[page] = colab[0]
    return out


def _chapter_pages() -> list[str]:
    return [d for d in toc_docnames() if (REPO / f"{d}.ipynb").is_file()]


def test_launch_buttons_give_each_chapter_its_colab_link():
    repo = repo_url.read_config(REPO)
    org, name = repo.org_name
    links = _launch_links(REPO, _chapter_pages())
    assert len(links) == len(repo_url.chapters(REPO)) == 13  # "Heads in a trained model" is part of "Why heads specialize" (#38)
    for page, link in links.items():
        m = re.fullmatch(r"https://colab\.research\.google\.com/github/([\w.-]+)/([\w.-]+)/blob/"
                         r"([\w.-]+)/(.+\.ipynb)", link)
        assert m, link
        assert m.groups()[:3] == (org, name, repo.branch)
        assert (REPO / m.group(4)).is_file() and m.group(4) == f"{page}.ipynb"
        assert link == repo.colab(f"{page}.ipynb")


def test_a_new_url_in_config_moves_every_use(tmp_path):
    old = repo_url.read_config(REPO)
    new_url, new_branch = "https://github.com/Someone-Else/attention-fork", "published"
    copy = _copy_with_url(tmp_path, new_url, new_branch)
    stale = repo_url.sync(copy)
    assert {p.name for p in stale} == {"README.md", "CITATION.cff"} | {
        p.name for p in repo_url.chapters(REPO)}
    assert repo_url.sync(copy, check=True) == []
    for f in [copy / "README.md", copy / "CITATION.cff", *repo_url.chapters(copy)]:
        text = f.read_text()
        assert old.url not in text and "andrea-edu" not in text, f.name
        assert new_url in text, f.name
    for nb in repo_url.chapters(copy):
        assert f'os.environ.get("ANDREA_REPO_URL", "{new_url}")' in repo_url.cell_source(nb)
    readme = (copy / "README.md").read_text()
    assert "https://someone-else.github.io/attention-fork/" in readme
    links = _launch_links(copy, _chapter_pages())
    assert all(link.startswith("https://colab.research.google.com/github/Someone-Else/"
                               "attention-fork/blob/published/book/") for link in links.values())
    # the original files are untouched
    assert repo_url.sync(REPO, check=True) == []


def test_a_url_that_is_no_github_repository_is_one_line(tmp_path):
    copy = _copy_with_url(tmp_path, "ftp://example.org/x", "main")
    with pytest.raises(ValueError, match=r"^_config.yml repository.url='ftp://example.org/x': "
                                         r"expected https://github.com/<org>/<repository>"):
        repo_url.read_config(copy)


# ---- over the built book -------------------------------------------------------------------

class _Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.refs: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if a.get(key):
                self.ids.add(a[key])
        for key in ("href", "src"):
            if a.get(key) and not (tag == "link" and a.get("rel") in ("preconnect",
                                                                     "dns-prefetch")):
                self.refs.append(a[key])


def _parse(path: Path) -> _Page:
    p = _Page()
    p.feed(path.read_text(errors="replace"))
    return p


def internal_link_problems(site: Path) -> list[str]:
    """Every href/src of every built page that stays on the site: its file exists and its
    #fragment is an id (or an <a name>) there. External links (http:, mailto:, ...) are not
    followed (the test is offline)."""
    pages: dict[Path, _Page] = {}

    def page(p: Path) -> _Page:
        if p not in pages:
            pages[p] = _parse(p)
        return pages[p]

    problems = []
    for src in sorted(site.rglob("*.html")):
        if src.relative_to(site).parts[0] in ("_static", "_sources", "_images"):
            continue  # not pages: the themes' template fragments (webpack-macros.html) and copies
        for ref in page(src).refs:
            parts = urllib.parse.urlsplit(ref)
            if parts.scheme or parts.netloc or ref.startswith(("javascript:", "data:")):
                continue
            target = src if not parts.path else (src.parent / urllib.parse.unquote(
                parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            rel = src.relative_to(site)
            if not target.is_file():
                problems.append(f"{rel}: {ref} -> no such file")
                continue
            if not target.is_relative_to(site.resolve()) and not target.is_relative_to(site):
                problems.append(f"{rel}: {ref} leaves the site")
                continue
            frag = urllib.parse.unquote(parts.fragment)
            if frag and target.suffix == ".html" and frag not in page(target).ids:
                problems.append(f"{rel}: {ref} -> no id {frag!r} on {target.name}")
    return problems


def test_the_link_checker_finds_a_planted_broken_link_and_anchor(tmp_path):
    (tmp_path / "a.html").write_text('<a href="b.html#there">ok</a><a href="b.html#nowhere">x</a>'
                                     '<img src="_static/missing.png"><a href="#top">t</a>'
                                     '<a id="top" href="https://example.org/">e</a>')
    (tmp_path / "b.html").write_text('<h1 id="there">b</h1>')
    assert internal_link_problems(tmp_path) == [
        "a.html: b.html#nowhere -> no id 'nowhere' on b.html",
        "a.html: _static/missing.png -> no such file"]


@pytest.mark.book
def test_every_internal_link_and_anchor_of_the_built_book_resolves(built_book):
    assert built_book.rc == 0, built_book.log[-3000:]
    assert sorted(built_book.html.glob("*.html"))
    problems = internal_link_problems(built_book.html)
    assert not problems, "\n".join(problems[:40])


@pytest.mark.book
def test_built_chapters_carry_the_colab_link_of_their_notebook(built_book):
    want = _launch_links(REPO, _chapter_pages())
    for page, link in want.items():
        text = (built_book.html / f"{page}.html").read_text()
        found = set(re.findall(r'href="(https://colab\.research\.google\.com/[^"]+)"', text))
        assert found == {link}, (page, found)


@pytest.mark.book
def test_built_pages_show_the_licence_and_a_valid_theme_mode(built_book):
    pages = sorted(built_book.html.glob("*.html")) + sorted(built_book.html.glob("book/*.html"))
    assert len(pages) > 13
    for page in pages:
        text = page.read_text()
        if 'http-equiv="refresh"' in text.lower():
            continue  # index.html: a redirect to the first chapter
        assert "creativecommons.org/licenses/by/4.0/" in text and "MIT License" in text, page.name
        # pydata-sphinx-theme's setTheme() logs a console error for any mode but these
        assert re.search(r'<body data-default-mode="(auto|light|dark)"', text), page.name
