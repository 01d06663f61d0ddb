"""Same bits on every x86-64 machine: the CPU instruction-set pins (andrea_edu.env), that each
library honours its knob, that every entry point pins before torch loads, and that provenance
records the settings. Plus the data finder and the atomic JSON writer every writer uses."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from andrea_edu import env
from andrea_edu import data as bookdata
from andrea_lab import process, store

REPO = Path(__file__).resolve().parents[1]
X86 = env.is_x86()
needs_x86 = pytest.mark.skipif(not X86, reason="the ISA knobs exist on x86-64 only")


def _clean_env(**extra) -> dict:
    e = {k: v for k, v in os.environ.items() if k not in env.ISA_KNOBS + ("ANDREA_CPU_ISA",)}
    e.update(extra)
    return e


def _py(code: str, **extra) -> str:
    r = subprocess.run([sys.executable, "-c", code], env=_clean_env(**extra), cwd=REPO,
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout + r.stderr


# ---------------------------------------------------------------- the helper
def test_pin_sets_only_what_is_unset(monkeypatch):
    for k in env.ISA_KNOBS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")  # set by hand: wins
    monkeypatch.delenv("ANDREA_CPU_ISA", raising=False)
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not imported yet
    monkeypatch.delitem(sys.modules, "torch")
    got = env.pin_cpu_isa()
    if X86:
        assert got == {**env.PINNED_ISA, "MKL_CBWR": "COMPATIBLE"}
    else:
        assert got["ATEN_CPU_CAPABILITY"] == ""  # ARM: nothing to pin


def test_native_opts_out(monkeypatch):
    for k in env.ISA_KNOBS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("ANDREA_CPU_ISA", "native")
    assert env.pin_cpu_isa() == dict.fromkeys(env.ISA_KNOBS, "")


@needs_x86
def test_pinning_after_torch_warns(monkeypatch):
    import torch  # noqa: F401  (already imported: the pin comes too late)
    for k in env.ISA_KNOBS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.delenv("ANDREA_CPU_ISA", raising=False)
    with pytest.warns(RuntimeWarning, match="torch was imported before"):
        env.pin_cpu_isa()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env.pin_cpu_isa()  # everything set now: nothing to warn about


def test_same_cpu_numerics_rule():
    a = {"machine": "x86_64", "isa_settings": dict(env.PINNED_ISA), "aten_cpu_capability": "AVX2",
         "cpu": "Intel(R) Xeon(R)"}
    b = {**a, "cpu": "Intel(R) Xeon(R) Platinum 8481C"}  # another model, same vendor and pins
    assert env.same_cpu_numerics(a, b)
    # another vendor, same pins: no promise (an AMD EPYC ran the sweep's chapter run 7.1e-4 away
    # from the Intel Xeon that produced it)
    assert not env.same_cpu_numerics(a, {**b, "cpu": "AMD EPYC 9B14"})
    assert not env.same_cpu_numerics(a, {**b, "aten_cpu_capability": "AVX512"})
    assert not env.same_cpu_numerics(a, {**b, "machine": "aarch64"})
    unpinned = {**a, "isa_settings": dict.fromkeys(env.ISA_KNOBS, "")}
    assert not env.same_cpu_numerics(unpinned, unpinned)  # unpinned: no promise
    assert not env.same_cpu_numerics(a, None)


def test_scripts_pin_the_same_values():
    sh = (REPO / "scripts" / "cpu_isa.sh").read_text()
    for k, v in env.PINNED_ISA.items():
        assert f'{k}="${{{k}:-{v}}}"' in sh, k
    for script in ("test.sh", "build_book.sh"):
        text = (REPO / "scripts" / script).read_text()
        assert "source scripts/cpu_isa.sh" in text, script
        assert text.index("cpu_isa.sh") < text.index("python -m pytest" if script == "test.sh"
                                                      else "scripts/jupyter_book_build.py")


@needs_x86
def test_the_test_session_is_pinned():
    import torch
    if os.environ.get("ANDREA_CPU_ISA", "").lower() == "native":
        pytest.skip("ANDREA_CPU_ISA=native: pins switched off for this run")
    for k in env.ISA_KNOBS:
        assert os.environ.get(k), f"{k} not set in the test process (conftest pins it)"
    if os.environ["ATEN_CPU_CAPABILITY"] == "avx2":
        assert torch.backends.cpu.get_cpu_capability() == "AVX2"


# ---------------------------------------------------------------- each knob is honoured
def test_importing_andrea_edu_changes_no_environment_variable():
    """Neither the package nor its top-level names touch os.environ, even in a notebook kernel
    (ipykernel loaded) with no knob set; `import andrea_edu.env` does not load torch."""
    code = ("import json, os, sys, types\n"
            "sys.modules['ipykernel'] = types.ModuleType('ipykernel')  # as in a notebook kernel\n"
            "for k in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS'):  # no thread count chosen\n"
            "    os.environ.pop(k, None)\n"
            "before = dict(os.environ)\n"
            "import andrea_edu, andrea_edu.env\n"
            "light = 'torch' not in sys.modules\n"
            "andrea_edu.AndreaModel, andrea_edu.reference_attention  # the lazy names, loaded\n"
            "changed = sorted(k for k in set(before) | set(os.environ)\n"
            "                 if before.get(k) != os.environ.get(k))\n"
            "print(json.dumps({'light': light, 'changed': changed,\n"
            "                  'fn': callable(andrea_edu.reference_attention)}))")
    got = json.loads(_py(code).strip().splitlines()[-1])
    assert got == {"light": True, "changed": [], "fn": True}


@needs_x86
def test_a_data_command_reruns_itself_pinned_when_started_without_the_pins(monkeypatch):
    """Importing the package no longer pins, so a command whose CPU numbers are committed
    (sweep, path_runs, text_longer) re-runs itself with the pins filled in (process.rerun_pinned)."""
    seen: list = []

    def run_child(cmd, env=None):
        seen.append((cmd, env))
        return 0

    monkeypatch.setattr(process, "run_child", run_child)
    monkeypatch.setattr(sys, "argv", ["x", "--out", "o.json"])
    monkeypatch.delenv("ANDREA_CPU_ISA", raising=False)
    assert process.rerun_pinned("andrea_edu.heads.sweep") is None and not seen  # pinned already
    monkeypatch.delenv("ATEN_CPU_CAPABILITY")
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")  # a value set by hand stays
    assert process.rerun_pinned("andrea_edu.heads.sweep") == 0
    (cmd, child), = seen
    assert cmd[1:] == ["-m", "andrea_edu.heads.sweep", "--out", "o.json"]
    assert child["ATEN_CPU_CAPABILITY"] == "avx2" and child["MKL_CBWR"] == "COMPATIBLE"
    monkeypatch.setenv("ANDREA_CPU_ISA", "native")
    assert process.rerun_pinned("andrea_edu.heads.sweep") is None and len(seen) == 1
    for f in ("make_sweep", "make_realtext_paths"):   # the laboratory's data commands
        assert f'rerun_pinned("andrea_lab.{f}")' in (REPO / "andrea_lab" / f"{f}.py").read_text()
    variant = (REPO / "andrea_lab" / "make_realtext_variant.py").read_text()
    assert "env = pinned_env()" in variant  # (re-runs itself, with make_realtext_run's pins)


@needs_x86
def test_setup_kernel_first_pins_aten():
    code = ("from andrea_edu.env import setup_kernel; setup_kernel(); import torch; "
            "print('CAP', torch.backends.cpu.get_cpu_capability())")
    assert "CAP AVX2" in _py(code)
    free = _py(code, ANDREA_CPU_ISA="native")
    assert "CAP" in free  # the machine's own level (AVX2 on an AVX2-only CPU, else higher)


@needs_x86
def test_a_timing_chapter_asks_for_the_native_isa_in_its_setup_cell():
    code = ("from andrea_edu.env import setup_kernel; r = setup_kernel(cpu_isa='native'); "
            "import torch, os; print('R', r, 'ISA', os.environ['ANDREA_CPU_ISA'], "
            "'ATEN' in ' '.join(k for k in os.environ if k.startswith('ATEN_CPU')))")
    env_ = {k: v for k, v in os.environ.items() if k not in env.ISA_KNOBS + ("ANDREA_CPU_ISA",)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env_,
                         timeout=300).stdout
    assert "R None ISA native False" in out  # prints nothing itself; no pin was set
    with pytest.raises(ValueError, match=r"cpu_isa='fast': allowed values are None, 'avx2'"):
        env.setup_kernel(cpu_isa="fast")


@needs_x86
def test_mkl_and_onednn_honour_their_knobs():
    import torch
    if not torch.backends.mkl.is_available():
        pytest.skip("this torch has no MKL")
    code = ("import andrea_edu.env; andrea_edu.env.setup_kernel(); import torch\n"
            "a = torch.randn(64, 64); a @ a\n"
            "x = torch.randn(2, 3, 16, 16)\n"
            "torch.nn.functional.conv2d(x, torch.randn(4, 3, 3, 3))\n")
    out = _py(code, MKL_VERBOSE="1", ONEDNN_VERBOSE="1")
    if env.cpu_vendor(env.cpu_name()) == "intel":
        assert "CNR:AVX2,STRICT" in out  # MKL ran its AVX2 code path in strict reproducible mode
    else:
        # Measured on an AMD EPYC: MKL keeps STRICT but reports CNR:AUTO (it does not take the
        # AVX2 branch it was asked for on another vendor's CPU). One reason the pins promise the
        # same bits only within a vendor (env.same_cpu_numerics).
        assert "CNR:AUTO,STRICT" in out or "CNR:AVX2,STRICT" in out, out[:400]
    if "onednn_verbose" in out:
        assert "isa:Intel AVX2" in out or "isa:AVX2" in out


def test_provenance_blocks_record_the_settings():
    import torch
    from andrea_edu.bench.timing import provenance
    p = provenance("cpu")["cpu_numerics"]
    assert p["isa_settings"] == env.isa_settings()
    assert p["aten_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert p["cpu"] == env.cpu_name() and p["machine"]


# ---------------------------------------------------------------- data finder
def test_data_dir_env_is_the_only_place_when_set(tmp_path, monkeypatch):
    monkeypatch.setenv("ANDREA_DATA_DIR", str(tmp_path))
    assert bookdata.data_search_dirs() == [tmp_path]
    assert bookdata.find_data("specialization_sweep.json", verify=False) is None
    assert str(tmp_path) in bookdata.where_looked("specialization_sweep.json")


def test_finder_order_package_repository_then_notebook(tmp_path, monkeypatch):
    monkeypatch.delenv("ANDREA_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)  # a Colab-like working directory outside the clone
    dirs = bookdata.data_search_dirs()
    assert dirs[0] == REPO / "book" / "data"  # beside the installed package's repository
    assert dirs[1:] == [tmp_path / "data", tmp_path / "book" / "data",
                        tmp_path.parent / "book" / "data"]
    assert bookdata.find_data("specialization_sweep.json", verify=False) == REPO / "book" / "data" / \
        "specialization_sweep.json"


# ---------------------------------------------------------------- atomic writes
def test_write_json_atomic_keeps_the_old_file_when_interrupted(tmp_path, monkeypatch):
    path = tmp_path / "d.json"
    store.write_json_atomic(path, {"v": 1})
    assert json.loads(path.read_text()) == {"v": 1}

    def boom(*a, **k):
        raise KeyboardInterrupt  # killed between writing the temporary file and the rename
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        store.write_json_atomic(path, {"v": 2, "big": list(range(1000))})
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["d.json"]  # no temporary file left


def test_every_json_writer_is_atomic():
    """No writer of committed data writes in place (a plain write_text can leave half a file)."""
    files = ["andrea_lab/bench/writer.py", "andrea_lab/make_sweep.py",
             "andrea_lab/pipeline_timing.py", "andrea_lab/bench/gpucheck.py"]
    for f in files:
        src = (REPO / f).read_text()
        assert "write_json_atomic(" in src, f
        assert ".write_text(json.dumps" not in src, f


# ---------------------------------------------------------------- timings run unpinned
def test_native_drops_inherited_pins(monkeypatch):
    for k, v in env.PINNED_ISA.items():
        monkeypatch.setenv(k, v)  # as a pinning parent (conftest, scripts/) leaves them
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")  # a value set by hand stays
    child = process.native_isa_env()
    assert child["ANDREA_CPU_ISA"] == "native" and child["MKL_CBWR"] == "COMPATIBLE"
    assert "ATEN_CPU_CAPABILITY" not in child and "ONEDNN_MAX_CPU_ISA" not in child
    monkeypatch.setenv("ANDREA_CPU_ISA", "native")
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.delitem(sys.modules, "torch")  # before torch loads, as in a fresh kernel
    got = env.pin_cpu_isa()
    if X86:
        assert got == {"ATEN_CPU_CAPABILITY": "", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": ""}


@needs_x86
def test_the_bench_command_times_unpinned(tmp_path):
    """The oneDNN cap turns bfloat16 matmuls into a reference loop (measured 736 ms instead of
    2.8 ms on an AVX512-BF16 Xeon): timing commands run themselves again unpinned."""
    r = subprocess.run([sys.executable, "-m", "andrea_lab.bench", "layout", "--fast",
                        "--no-progress", "--out", str(tmp_path)], cwd=REPO, timeout=600,
                       env={**os.environ, **env.PINNED_ISA}, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    prov = json.loads((tmp_path / "bench_layout_cpu.json").read_text())["provenance"]
    assert prov["cpu_numerics"]["isa_settings"] == dict.fromkeys(env.ISA_KNOBS, "")


@needs_x86
def test_the_real_text_recheck_child_keeps_the_pins_it_is_given():
    """andrea_lab.make_realtext_run.pinned_env hands a child the three pins with ANDREA_CPU_ISA=asis: its
    `import andrea_edu` must neither drop them (under "native" it did, and the "Heads on real
    text" re-check ran with ATen at AVX512) nor fill in a knob the parent left unset."""
    from andrea_edu.heads import text_training as TT
    from andrea_lab.make_realtext_run import pinned_env
    code = ("import os, andrea_edu, torch; print('CAP', torch.backends.cpu.get_cpu_capability(), "
            "[os.environ.get(k) for k in andrea_edu.env.ISA_KNOBS])")
    child = pinned_env()
    out = subprocess.run([sys.executable, "-c", code], env=child, capture_output=True, text=True,
                         timeout=120).stdout
    assert child["ANDREA_CPU_ISA"] == "asis"
    assert f"CAP AVX2 {[TT.CPU_PINS[k] for k in env.ISA_KNOBS]}" in out
    part = pinned_env({**TT.CPU_PINS, "ATEN_CPU_CAPABILITY": None})
    out = subprocess.run([sys.executable, "-c", code], env=part, capture_output=True, text=True,
                         timeout=120).stdout
    assert "[None, 'AVX2,STRICT', 'AVX2']" in out       # the unset knob stays unset


def test_one_commit_id_helper_names_the_changed_files(monkeypatch, tmp_path):
    """store.git_commit, the one commit id every written record's provenance names (the writer
    stamps it on: store.stamped): the override, HEAD with the changed files under andrea_edu/,
    and "unknown" outside a repository."""
    import shutil
    import subprocess

    from andrea_edu import data, env
    from andrea_edu.bench import timing
    from andrea_lab import store
    from andrea_lab.bench import gpucheck
    from andrea_edu.heads import sweep, text_training

    for mod in (timing, gpucheck, sweep, text_training, data, env):  # no commit helper of their own
        assert getattr(mod, "git_commit", store.git_commit) is store.git_commit, mod.__name__
        assert not hasattr(mod, "_git_commit"), mod.__name__
    monkeypatch.setenv("ANDREA_GIT_COMMIT", "abc123")
    assert store.git_commit() == "abc123"
    run = data.new_provenance("a test", "python -m x")  # a run's block: no commit yet
    assert "git_commit" not in run and store.stamped(run)["git_commit"] == "abc123"
    monkeypatch.delenv("ANDREA_GIT_COMMIT")
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    pkg = tmp_path / "andrea_edu"
    pkg.mkdir()
    (pkg / "env.py").write_text("x = 1\n")
    git = dict(cwd=tmp_path, check=True, capture_output=True)
    subprocess.run(["git", "init", "-q"], **git)
    subprocess.run(["git", "add", "."], **git)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
                   **git)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], **git, text=True).stdout.strip()
    monkeypatch.setattr(store, "EDU_DIR", pkg)
    assert store.git_commit() == sha
    (pkg / "env.py").write_text("x = 2\n")
    assert store.git_commit() == f"{sha}-dirty (andrea_edu/env.py)"
    outside = tmp_path / "elsewhere" / "andrea_edu"
    outside.mkdir(parents=True)
    monkeypatch.setattr(store, "EDU_DIR", outside)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert store.git_commit() == "unknown"
