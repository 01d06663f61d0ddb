"""The repository's URL lives in _config.yml (repository.url) only; this writes every other use.

    python scripts/repo_url.py           rewrite the uses from _config.yml
    python scripts/repo_url.py --check   exit 1, naming the files, when a use disagrees

The uses: the first code cell of every chapter (the install cell, which cannot read a file before
it has cloned the repository, so it carries the URL as its default), the README's block between
the `repository-url` markers (the site, the repository, a Colab link), CITATION.cff's
repository-code. The launch buttons read _config.yml themselves (Jupyter Book). A notebook is
rewritten only in its install cell, byte for byte as Jupyter writes it otherwise; a new chapter
gets its install cell from here (run this once after adding book/<chapter>.ipynb).
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLAB = "https://colab.research.google.com"
README_START = "<!-- repository-url:"
README_END = "<!-- /repository-url -->"
README_EXAMPLE = "why_twelve_heads"  # the chapter the README's Colab example opens


@dataclass(frozen=True)
class Repo:
    url: str  # https://github.com/<org>/<name>
    branch: str
    path_to_book: str

    @property
    def org_name(self) -> tuple[str, str]:
        m = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?/?", self.url)
        if not m:
            raise ValueError(f"_config.yml repository.url={self.url!r}: expected "
                             "https://github.com/<org>/<repository> (the launch buttons, Pages "
                             "and Colab links need a GitHub repository)")
        return m.group(1), m.group(2)

    @property
    def pages(self) -> str:
        org, name = self.org_name
        return f"https://{org.lower()}.github.io/{name}/"

    def colab(self, notebook: str) -> str:
        """The Colab link of a notebook (its path in the repository), in the form the launch
        buttons of sphinx-book-theme build: {colab_url}/github/{org}/{repo}/blob/{branch}/{path}."""
        org, name = self.org_name
        return f"{COLAB}/github/{org}/{name}/blob/{self.branch}/{notebook}"


def read_config(root: Path = ROOT) -> Repo:
    import yaml  # the sync runs in the project's environment (Jupyter Book brings PyYAML)
    cfg = yaml.safe_load((root / "_config.yml").read_text())
    repo = cfg.get("repository") or {}
    if not repo.get("url"):
        raise ValueError("_config.yml has no repository.url: set it to the book's GitHub URL")
    out = Repo(str(repo["url"]).rstrip("/"), str(repo.get("branch") or "main"),
               str(repo.get("path_to_book") or ""))
    out.org_name  # noqa: B018  (validates the form now, with its one-line message)
    return out


def install_cell(url: str, cpu_isa: str | None = None) -> str:
    """The first code cell of every chapter: hidden in the book, silent unless it fails.
    cpu_isa: the chapter's notebook metadata `andrea.cpu_isa` ("native" in a chapter that times
    things at the CPU's own speed), passed to setup_kernel."""
    isa = "" if cpu_isa is None else f"cpu_isa={cpu_isa!r}"
    return f'''\
# Setup, silent: on a fresh runtime (Colab, say) it clones the book's repository and installs its
# library with scripts/install_book.py (NVRTC and CUDA headers that fit this machine's driver, never
# another torch); then it pins this kernel's CPU. Written by scripts/repo_url.py from _config.yml.
import importlib.util, os, pathlib, subprocess, sys
if importlib.util.find_spec("andrea_edu") is None:
    url = os.environ.get("ANDREA_REPO_URL", "{url}")  # a fork or a mirror
    repo = pathlib.Path.home() / "andrea-attention"
    run = lambda *cmd: subprocess.run(cmd, capture_output=True, text=True)  # noqa: E731
    r = None if repo.exists() else run("git", "clone", "-q", "--depth", "1", "--", url, str(repo))
    if r is not None and r.returncode:
        why = (r.stderr.strip() or "no message").splitlines()[0]  # git's reason
        raise SystemExit(f"Could not clone {{url}} ({{why}}): set os.environ['ANDREA_REPO_URL'] to a "
                         "reachable copy, or pip install -e a clone of it, then rerun this cell.")
    if not (repo / "scripts" / "install_book.py").is_file():
        raise SystemExit(f"{{repo}} exists but is not the book's repository: move it aside "
                         "(or delete it), then rerun this cell.")
    r = run(sys.executable, str(repo / "scripts" / "install_book.py"), str(repo))
    if r.returncode:  # its one line (and pip's message), then why the cell stops
        raise SystemExit(r.stdout + r.stderr + "andrea_edu was not installed: the lines above say why.")
    sys.path.insert(0, str(repo))  # this kernel started before the install: make it importable now
from andrea_edu.env import setup_kernel  # noqa: E402  (light: it does not load torch)
setup_kernel({isa})  # before torch loads: the CPU pins (ANDREA_CPU_ISA) and a notebook's thread cap'''


def readme_block(repo: Repo) -> str:
    book = f"{repo.path_to_book.strip('/')}/" if repo.path_to_book.strip("/") else ""
    return f"""\
{README_START} written from _config.yml's repository.url by `python scripts/repo_url.py`; edit the URL there -->
The book's site: {repo.pages} (built and published by
`.github/workflows/book.yml` on every push to {repo.branch}). Its repository:
{repo.url}. A chapter opens in Colab as, for example,
{repo.colab(f"{book}book/{README_EXAMPLE}.ipynb")}
(the rocket button on each chapter page gives its own link).
{README_END}"""


def chapters(root: Path = ROOT) -> list[Path]:
    return sorted((root / "book").glob("*.ipynb"))


def _first_code_cell(nb: dict) -> dict:
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            return cell
    raise ValueError("no code cell")


def cell_source(path: Path) -> str:
    return "".join(_first_code_cell(json.loads(path.read_text()))["source"])


def chapter_isa(nb: dict) -> str | None:
    """The chapter's CPU mode for setup_kernel: its notebook metadata `andrea.cpu_isa`."""
    return (nb.get("metadata", {}).get("andrea") or {}).get("cpu_isa")


def _notebook_text(path: Path, url: str) -> str:
    """The notebook with its install cell written; a new chapter without one gets it inserted
    before its first code cell (hidden, like the others)."""
    nb = json.loads(path.read_text())
    source = install_cell(url, chapter_isa(nb))
    cell = _first_code_cell(nb)
    if "find_spec(\"andrea_edu\")" not in "".join(cell["source"]):
        cell = {"cell_type": "code", "execution_count": None, "id": f"{path.stem}-install",
                "metadata": {"tags": ["hide-input"]}, "outputs": [], "source": []}
        nb["cells"].insert(nb["cells"].index(_first_code_cell(nb)), cell)
    cell["source"] = source.splitlines(keepends=True)
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def _readme_text(path: Path, repo: Repo) -> str:
    text = path.read_text()
    i, j = text.find(README_START), text.find(README_END)
    if i < 0 or j < i:
        raise ValueError(f"{path}: no {README_START} ... {README_END} block")
    return text[:i] + readme_block(repo) + text[j + len(README_END):]


def _citation_text(path: Path, repo: Repo) -> str:
    text, n = re.subn(r'(?m)^repository-code: .*$', f'repository-code: "{repo.url}"',
                      path.read_text())
    if n != 1:
        raise ValueError(f"{path}: expected one repository-code line, found {n}")
    return text


def expected(root: Path = ROOT) -> dict[Path, str]:
    """Every file that uses the URL, with the text it should have."""
    repo = read_config(root)
    out = {root / "README.md": _readme_text(root / "README.md", repo),
           root / "CITATION.cff": _citation_text(root / "CITATION.cff", repo)}
    for nb in chapters(root):
        out[nb] = _notebook_text(nb, repo.url)
    return out


def sync(root: Path = ROOT, check: bool = False) -> list[Path]:
    """The files whose use of the URL differs from _config.yml (rewritten unless check)."""
    stale = [p for p, text in expected(root).items() if p.read_text() != text]
    if not check:
        for p, text in expected(root).items():
            if p in stale:
                tmp = p.with_name(p.name + ".tmp")
                tmp.write_text(text)
                tmp.replace(p)
    return stale


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--check"]):
        print("usage: python scripts/repo_url.py [--check]", file=sys.stderr)
        return 2
    check = args == ["--check"]
    try:
        stale = sync(ROOT, check=check)
    except ValueError as e:
        print(f"repo_url: {e}", file=sys.stderr)
        return 2
    for p in stale:
        print(f"{'differs from' if check else 'rewritten from'} _config.yml: "
              f"{p.relative_to(ROOT)}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
