"""The Colab path (issue 12, item 3): a bare runtime outside the clone finds the committed data
beside the installed package, installs the pinned CUDA toolkit and keeps its own torch.

The test stands in for Colab without a network: a fresh virtual environment in which andrea_edu
is NOT importable (it sees this venv's other packages through a path entry, so nothing is
downloaded), a local mirror of this repository as the "remote", HOME and the working directory
in a scratch folder (/content's role). The chapter runs its own install cell (clone, then
scripts/install_book.py: pip install -e repo[cuda13] for a runtime without a driver, with pip kept
offline by PIP_NO_INDEX), then a check cell appended by the test says which andrea_edu, which
data file, which toolkit and which torch the chapter used. The install cell's branches are
tests/test_install_cell.py."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
CHAPTER = REPO / "book" / "why_twelve_heads.ipynb"


def _requirements() -> dict[str, str]:
    out = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            m = re.match(r"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?(.*)", line)
            assert m, line
            out[m.group(1).lower()] = (m.group(2) or "") + m.group(3).strip()
    return out


@pytest.fixture()
def bare_runtime(tmp_path, monkeypatch):
    """(python of a venv without andrea_edu, HOME, /content, the mirror's URL)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], capture_output=True, text=True, check=True).stdout
    ours = sysconfig.get_paths()["purelib"]  # a plain path entry: its .pth files (our editable
    (Path(purelib.strip()) / "shared_site.pth").write_text(  # andrea_edu) are not run
        f"import sys; sys.path.append({ours!r})\n")
    check = subprocess.run([str(py), "-c", "import importlib.util as u; "
                            "print(u.find_spec('andrea_edu') is None)"],
                           capture_output=True, text=True, cwd=tmp_path)
    assert check.stdout.strip() == "True", check.stderr
    mirror = tmp_path / "mirror.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(REPO), str(mirror)], check=True)
    home, content = tmp_path / "home", tmp_path / "content"
    home.mkdir()
    content.mkdir()
    kernels = tmp_path / "jupyter" / "kernels" / "bare"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [str(py), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "bare runtime", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # offline: the extras must already be satisfied
    monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "0")  # (pip's spelling for: no isolation)
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    monkeypatch.setenv("ANDREA_FAST", "1")
    monkeypatch.setenv("ANDREA_REPO_URL", mirror.as_uri())
    monkeypatch.setenv("ANDREA_DRIVER_CUDA", "none")  # a CPU runtime, whatever this machine has
    monkeypatch.delenv("ANDREA_DATA_DIR", raising=False)
    monkeypatch.delenv("ANDREA_BOOK_BUILD", raising=False)
    return py, home, content, mirror


BEFORE = '''
import importlib.metadata as md
print("TORCH-BEFORE " + md.version("torch"))
'''

CHECK = '''
import importlib.metadata as md, json, andrea_edu
from andrea_edu.data import find_data
print("COLAB-CHECK " + json.dumps({"andrea_edu": andrea_edu.__file__,
      "sweep": str(find_data("specialization_sweep.json", verify=False)), "cuda-toolkit": md.version("cuda-toolkit"),
      "torch": md.version("torch"),
      "cwd": __import__("os").getcwd()}))
'''


def test_a_chapter_on_a_bare_runtime_uses_the_committed_data(bare_runtime):
    from nbclient import NotebookClient
    py, home, content, mirror = bare_runtime
    nb = nbformat.read(CHAPTER, as_version=4)
    install = nb.cells[1].source
    assert "install_book.py" in install and "find_spec" in install and "ANDREA_REPO_URL" in install
    nb.cells.insert(1, nbformat.v4.new_code_cell(BEFORE))  # the runtime's torch, before
    nb.cells.append(nbformat.v4.new_code_cell(CHECK))
    NotebookClient(nb, timeout=600, kernel_name="bare", allow_errors=False,
                   resources={"metadata": {"path": str(content)}}).execute()
    text = "\n".join(o.get("text", "") + json.dumps(o.get("data", {}))
                     for c in nb.cells for o in c.get("outputs", []))
    found = json.loads(text.split("COLAB-CHECK ", 1)[1].splitlines()[0])
    clone = home / "andrea-attention"
    assert found["cwd"] == str(content)
    assert Path(found["andrea_edu"]).is_relative_to(clone)  # the clone the install cell made
    assert found["sweep"] == str(clone / "book" / "data" / "specialization_sweep.json")
    assert "computed now" not in text and "no committed" not in text  # nothing retrained
    pinned = _requirements()["cuda-toolkit"].split("==")[1]
    assert found["cuda-toolkit"] == pinned
    before = text.split("TORCH-BEFORE ", 1)[1].split()[0].strip('"\\')
    assert found["torch"] == before  # installing the book kept the runtime's torch
    # The no-driver branch of install_book.py installed cuda13 (the pinned toolkit, checked above),
    # and the setup cell said nothing while doing it: no pip lines, no dict, no value.
    assert nb.cells[2].outputs == [], nb.cells[2].outputs
