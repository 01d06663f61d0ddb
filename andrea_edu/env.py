"""Run-time switches shared by the library, the notebooks and the tests.

ANDREA_FAST=1        shrink sizes so every notebook runs in seconds (the tests set it).
ANDREA_BOOK_BUILD=1  the book is being built (scripts/build_book.sh): sliders render static frames.
ANDREA_CPU_ISA       "avx2" (the default) pins the CPU instruction sets of torch's numeric
                     libraries, so that CPU results are the same bits on x86-64 CPUs of one vendor
                     (see `pin_cpu_isa`); "native" leaves every library free to pick its own
                     (and drops pins inherited from a parent). Timings want "native": the bench
                     and pipeline-timing commands re-run themselves so (`native_isa_env`), and a
                     chapter that times on the CPU sets it before importing andrea_edu.
                     "asis" leaves the three knobs exactly as the environment has them (neither
                     filled in nor dropped): for a child whose parent chose each knob (the
                     re-check of "Heads on real text", heads.text_training.pinned_env).
ANDREA_DATA_DIR      the folder of committed measurements (else found: see `data_search_dirs`).
ANDREA_GIT_COMMIT    the commit a copy without its .git folder was made from (`git_commit`).

Why pin: on one machine two seeded CPU trainings are bit-identical, but ATen, MKL and oneDNN each
pick kernels by the CPU's instruction set (AVX2 vs AVX-512), and the low bits grow through
training: 3e-4 to 1.4e-3 after 100 steps between two x86 machines, enough to move a head score
across the chapter's threshold. Every x86-64 machine this book targets has AVX2 (Haswell, 2013;
every AMD Zen), so AVX2 is the level pinned. The three knobs are read by the libraries when torch
is first imported: set them before that (importing `andrea_edu` does, if it comes first).
"""
from __future__ import annotations

import contextlib
import os
import platform
import sys
import warnings
from pathlib import Path

__version__ = "0.1.0"  # the library's version, recorded in every provenance block

# The pinned level, knob by knob (each one alone moved a 100-step training by 3e-4 to 8e-4).
#   ATEN_CPU_CAPABILITY: ATen's own vectorised kernels (softmax, GELU, layer norm, reductions).
#   MKL_CBWR: MKL's conditional bitwise reproducibility: the AVX2 code path, STRICT so that
#             alignment and run-time dispatch cannot change the bits (the sgemm of every Linear).
#   ONEDNN_MAX_CPU_ISA: the highest ISA oneDNN (mkldnn) may use.
PINNED_ISA = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT",
              "ONEDNN_MAX_CPU_ISA": "AVX2"}
ISA_KNOBS = tuple(PINNED_ISA)
_X86 = ("x86_64", "amd64", "i686", "x86")


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def fast_mode() -> bool:
    """True when ANDREA_FAST is set: notebooks and benchmarks shrink their sizes."""
    return _flag("ANDREA_FAST")


def book_build() -> bool:
    """True when ANDREA_BOOK_BUILD is set: the rendered book is being built."""
    return _flag("ANDREA_BOOK_BUILD")


def pick(full, fast):
    """`fast` in fast mode, `full` otherwise: one place for every size a notebook shrinks."""
    return fast if fast_mode() else full


# ---------------------------------------------------------------- CPU instruction-set pinning
def is_x86() -> bool:
    return platform.machine().lower() in _X86


def _isa_mode() -> str:
    return os.environ.get("ANDREA_CPU_ISA", "avx2").strip().lower()


def pinning_wanted() -> bool:
    """False when ANDREA_CPU_ISA is "native" or "asis", or on a CPU that is not x86 (ARM has
    none of the knobs)."""
    return is_x86() and _isa_mode() not in ("native", "asis")


def pin_cpu_isa(warn: bool = True) -> dict[str, str]:
    """Set ATEN_CPU_CAPABILITY, MKL_CBWR and ONEDNN_MAX_CPU_ISA to the AVX2 level, each only where
    it is not already set (a value set by hand wins). Returns the knobs' values now in effect.

    Must run before torch is imported: the libraries read the knobs once, at load. If torch is
    already imported and a knob was not yet set, the pin comes too late; with `warn` it says so
    (the provenance records what ATen really uses, `torch.backends.cpu.get_cpu_capability()`).
    """
    if not pinning_wanted():
        # "native" drops pins inherited from a pinning parent (tests, scripts/); "asis" keeps
        # whatever the parent set
        if is_x86() and _isa_mode() == "native" and "torch" not in sys.modules:
            for k, v in PINNED_ISA.items():
                if os.environ.get(k) == v:
                    del os.environ[k]
        return isa_settings()
    late = [k for k in ISA_KNOBS if k not in os.environ] if "torch" in sys.modules else []
    for k, v in PINNED_ISA.items():
        os.environ.setdefault(k, v)
    if late and warn:
        warnings.warn(f"torch was imported before andrea_edu pinned the CPU instruction sets "
                      f"({', '.join(late)} set too late): CPU results may differ in the low bits "
                      f"from the committed ones. Import andrea_edu before torch, or run through "
                      f"scripts/ (they export the settings).", RuntimeWarning, stacklevel=2)
    return isa_settings()


def native_isa_env(environ=None) -> dict[str, str]:
    """A copy of the environment for a child process that must run at this CPU's full speed
    (timings): ANDREA_CPU_ISA=native and the pinned knobs removed. Why: the oneDNN cap makes
    bfloat16 matmuls fall back to a reference path (measured: 736 ms instead of 2.8 ms for
    512x768 @ 768x2304 on an AVX512-BF16 Xeon), and MKL's AVX2 path costs fp32 sgemm about 1.5x.
    Timings are measured unpinned; their provenance says so."""
    env = dict(os.environ if environ is None else environ)
    for k, v in PINNED_ISA.items():
        if env.get(k) == v:
            env.pop(k)
    env["ANDREA_CPU_ISA"] = "native"
    return env


def timing_process_is_pinned() -> bool:
    """True when torch in this process was loaded with a pinned knob (so timings would be slow)."""
    return is_x86() and any(os.environ.get(k) == v for k, v in PINNED_ISA.items())


def rerun_unpinned(module: str) -> int | None:
    """For a timing command's __main__: when this process's torch was loaded pinned, run the
    same command again in a child with `native_isa_env` and return its exit status; None when
    the process is already unpinned (then the caller goes on)."""
    if not timing_process_is_pinned():
        return None
    import subprocess
    rc = subprocess.run([sys.executable, "-m", module, *sys.argv[1:]],
                        env=native_isa_env()).returncode
    return child_status(f"python -m {module}", rc)


def signal_name(rc: int) -> str | None:
    """'SIGSEGV (segmentation fault)' for a child's negative return code, else None."""
    import signal
    if rc >= 0:
        return None
    try:
        sig = signal.Signals(-rc)
    except ValueError:
        return f"signal {-rc}"
    desc = signal.strsignal(sig) if hasattr(signal, "strsignal") else None
    return f"{sig.name} ({desc.lower()})" if desc else sig.name


def child_status(what: str, rc: int) -> int:
    """A child's exit status for the parent to return: a child killed by a signal is reported in
    one line on stderr (which signal) and becomes 128 + its number, as a shell reports it."""
    name = signal_name(rc)
    if name is None:
        return rc
    print(f"{what}: the process died from {name}; nothing it was writing was replaced "
          f"(writes are atomic)", file=sys.stderr)
    return 128 - rc


THREAD_CAP = 4  # a notebook kernel's thread pools: enough for the book's sizes, kind to a busy laptop
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def cap_threads(cap: int = THREAD_CAP) -> int | None:
    """Cap torch's and OpenMP's thread pools at min(CPU count, cap), unless the user chose a
    count (OMP_NUM_THREADS or MKL_NUM_THREADS set): returns the cap, or None when the user's
    setting stands. A notebook kernel on a loaded machine otherwise starts one OpenMP thread per
    core per pool, and libgomp that cannot create them aborts the kernel ("Thread creation
    failed: Resource temporarily unavailable"). The variables reach torch when set before it is
    imported, and child processes (the kernels an executor starts) inherit them; a torch already
    imported is capped with torch.set_num_threads."""
    if any(os.environ.get(k, "").strip() for k in THREAD_VARS):
        return None
    n = max(1, min(os.cpu_count() or 1, int(cap)))
    for k in THREAD_VARS:
        os.environ[k] = str(n)
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "set_num_threads"):
        torch.set_num_threads(min(torch.get_num_threads(), n))
    return n


DEVICES = ("cpu", "cuda")


def runs_on(device: str) -> bool:
    """True when a cell can run on `device` ("cpu" or "cuda"). For "cuda" with no GPU visible to
    torch it prints one line saying so and what to do, and returns False: an exercise cell edited
    to `device = "cuda"` then ends cleanly on a laptop instead of raising from deep inside torch.
    Any other value raises ValueError naming the allowed ones."""
    if device not in DEVICES:
        raise ValueError(f"device={device!r}: allowed values are {', '.join(map(repr, DEVICES))}")
    if device == "cpu":
        return True
    import torch

    if torch.cuda.is_available():
        return True
    print("device='cuda': no CUDA GPU visible to torch here (torch.cuda.is_available() is False); "
          "run this cell on a machine with an NVIDIA GPU, or on Colab with a GPU runtime")
    return False


def git_commit() -> str:
    """The commit every provenance block records: ANDREA_GIT_COMMIT when set (a copy without its
    .git folder), else HEAD of the repository andrea_edu sits in, plus "-dirty (files)" naming
    the files under andrea_edu/ that differ from it; "unknown" without git or a repository."""
    if os.environ.get("ANDREA_GIT_COMMIT"):
        return os.environ["ANDREA_GIT_COMMIT"]
    import subprocess
    here = Path(__file__).resolve().parent  # andrea_edu/
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=here, capture_output=True, text=True,
                              timeout=10).stdout

    try:
        sha = git("rev-parse", "HEAD").strip()
        if not sha:
            return "unknown"
        changed = git("status", "--porcelain", "--", ".")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    files = sorted(line[3:] for line in changed.splitlines() if line[3:])
    return sha + (f"-dirty ({', '.join(files)})" if files else "")


def isa_settings() -> dict[str, str]:
    """The three knobs as this process sees them ("" = not set: the library picks)."""
    return {k: os.environ.get(k, "") for k in ISA_KNOBS}


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_provenance() -> dict:
    """What decides CPU results' low bits: the CPU, the knobs, and the level ATen really uses.
    Goes into every provenance block; `same_cpu_numerics` compares two of them."""
    cap = "unknown"
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            cap = str(torch.backends.cpu.get_cpu_capability())
        except Exception:  # an old or unusual torch build
            pass
    return {"cpu": cpu_name(), "machine": platform.machine(), "cpu_count": os.cpu_count(),
            "isa_settings": isa_settings(), "aten_cpu_capability": cap}


def cpu_vendor(cpu: str) -> str:
    """'intel', 'amd', or the model name itself when it names neither."""
    low = cpu.lower()
    return next((v for v in ("intel", "amd") if v in low), low)


def same_cpu_numerics(a: dict | None, b: dict | None) -> bool:
    """True when two cpu_provenance blocks promise the same bits: both x86 from the same vendor,
    with the three knobs set alike and the same ATen capability (the CPU model within a vendor
    may differ: that is the point of the pins). Across vendors the pins do not give the same
    bits: measured, the chapter's sweep run (n_head 4, seed 2, 100 steps, same torch, same
    pins) differs by 7.1e-4 between an Intel Xeon and an AMD EPYC, so such a pair is compared
    within the measured tolerance instead."""
    if not a or not b:
        return False
    keys = ("isa_settings", "aten_cpu_capability")
    x86 = all(str(p.get("machine", "")).lower() in _X86 for p in (a, b))
    vendor = cpu_vendor(str(a.get("cpu", ""))) == cpu_vendor(str(b.get("cpu", "")))
    return x86 and vendor and all(a.get(k) == b.get(k) for k in keys) and all(
        (a.get("isa_settings") or {}).get(k) for k in ISA_KNOBS)


# ---------------------------------------------------------------- committed data: find, write
DATA_ENV = "ANDREA_DATA_DIR"


def data_search_dirs() -> list[Path]:
    """Where committed measurements are looked for, in order:
    1. $ANDREA_DATA_DIR, when set, and then nowhere else (a reader or a test points the book at
       other data, or at an empty folder, and gets exactly that);
    2. book/data beside the installed package's repository (the clone an install cell made:
       an editable install, or the clone put on sys.path), found from this file's location;
    3. relative to the working directory, i.e. to the notebook: data/ (a chapter runs in book/),
       book/data (the repository root), ../book/data.
    """
    return [d for d, _ in _search_dirs()]


def _search_dirs() -> list[tuple[Path, str]]:
    """data_search_dirs with, for each, how a reader names it (never an absolute folder of the
    machine that ran it, except the one the reader set in ANDREA_DATA_DIR)."""
    if os.environ.get(DATA_ENV, "").strip():
        given = os.environ[DATA_ENV].strip()
        return [(Path(given).expanduser(), str(Path(given) / "{name}") + f" (from {DATA_ENV})")]
    cwd = Path.cwd()
    dirs = [(Path(__file__).resolve().parents[1] / "book" / "data",
             "book/data/{name} in the repository andrea_edu was installed from"),
            (cwd / "data", "data/{name} in the working directory"),
            (cwd / "book" / "data", "book/data/{name} in the working directory"),
            (cwd.parent / "book" / "data", "../book/data/{name} from the working directory")]
    out, seen = [], set()
    for d, label in dirs:  # the same folder reached twice is looked in once
        key = os.path.normcase(os.path.realpath(d))
        if key not in seen:
            seen.add(key)
            out.append((d, label))
    return out


def find_data_file(name: str) -> Path | None:
    """The first data_search_dirs()/<name> that is a file, or None (see `where_looked`)."""
    for d in data_search_dirs():
        if (d / name).is_file():
            return d / name
    return None


def reader_path(path) -> str:
    """A path as a reader of the book names it: relative to the repository root when inside it,
    else to the home folder (~/...), else as given (a folder the reader chose). Pages never show
    the absolute folders of the machine that built them."""
    p = Path(os.path.abspath(os.path.expanduser(str(path))))
    for base, prefix in ((Path(__file__).resolve().parents[1], ""), (Path.home(), "~/")):
        try:
            return prefix + p.relative_to(base).as_posix()
        except ValueError:
            continue
    return str(path)


def where_looked(name: str) -> str:
    """One line for a reader: every place `find_data_file(name)` tried, in order, named by its
    rule rather than by the absolute folders of the machine that ran it."""
    return (f"no committed {name} found; looked in: "
            + "; ".join(label.replace("{name}", name) for _, label in _search_dirs())
            + f" (set {DATA_ENV} to the folder that holds it)")


def write_json_atomic(path, obj, **dumps_kw) -> Path:
    """Write obj as JSON to path through a temporary file in the same folder and os.replace:
    a reader (or a crash) sees the old file or the new one, never half of one. In a folder
    with a SHA256SUMS (book/data), the file and its new sha256 there are written as one unit."""
    import json
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(obj, **dumps_kw) + "\n"
    if (path.parent / MANIFEST).is_file():
        write_files_as_unit([(path, lambda tmp: tmp.write_text(text))])
        return path
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a data file is as readable as any
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


class DataFileError(ValueError):
    """A data file that cannot be trusted. str() is one line: the file, the field, what was
    expected and what was found. Every loader's own error (bench ResultsFileError, sweep
    SweepFileError, real-text RunFileError) is a subclass, so a chapter catches this one."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))  # one line, whatever it quotes


def first_nonfinite(obj, where: str = "", skip=None) -> str | None:
    """The path (e.g. "runs[3].scores[0][1]") of the first NaN or infinity in a parsed JSON
    tree, or None; skip(path) -> True leaves a subtree out (a field where NaN means "none")."""
    import math
    if skip is not None and skip(where):
        return None
    if isinstance(obj, float):
        return None if math.isfinite(obj) else (where or "$")
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        got = first_nonfinite(v, f"{where}.{k}" if isinstance(k, str) else f"{where}[{k}]", skip)
        if got:
            return got.lstrip(".")
    return None


def holds_text(obj) -> bool:
    """True when a parsed JSON value holds a string anywhere (numpy would read "0.34" as a
    number: a number stored as text is damage, not data)."""
    if isinstance(obj, str):
        return True
    if isinstance(obj, dict):
        return any(holds_text(v) for v in obj.values())
    if isinstance(obj, list):
        return any(holds_text(v) for v in obj)
    return False


MANIFEST = "SHA256SUMS"  # beside committed data: "<sha256>  <name>" per line (sha256sum -c reads it)


def read_manifest(folder) -> dict[str, str]:
    """{file name: sha256} of folder/SHA256SUMS ({} when there is none); ValueError naming the
    manifest and the line when it is damaged."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return {}
    out = {}
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(None, 1)
        if len(parts) != 2 or len(parts[0]) != 64 or any(c not in "0123456789abcdef" for c in parts[0]):
            raise ValueError(f"{path}: line {i} is not '<64 hex digits>  <file name>'")
        out[parts[1].strip().lstrip("*")] = parts[0]
    return out


def manifest_problem(path) -> str | None:
    """None when `path` is not listed in its folder's SHA256SUMS or matches it; otherwise one
    line saying that the file differs from the sha256 recorded when it was written (a damaged
    or hand-edited file: the values it holds are not the ones the command wrote)."""
    import hashlib
    path = Path(path)
    try:
        want = read_manifest(path.parent).get(path.name)
    except (OSError, ValueError) as e:
        return f"its folder's {MANIFEST} cannot be read ({e})".replace("\n", " ")
    if want is None:
        return None
    got = hashlib.sha256(path.read_bytes()).hexdigest()
    if got != want:
        return (f"content differs from the sha256 recorded for it in {MANIFEST} (damaged or "
                f"edited by hand: rewrite it with the command that made it, which updates "
                f"{MANIFEST})")
    return None


def write_files_as_unit(items, manifest: bool | None = None) -> list[Path]:
    """Write several files as one unit, all or nothing. items: [(path, write)], write(tmp) fills
    a temporary file beside `path`. Every file is first written to its temporary name; then each
    is renamed over its target in order (put the file that names the others, the JSON, last); a
    failure anywhere removes every temporary file and puts back the files already replaced
    (from hard-linked backups), so the folder holds the old set or the new one."""
    import hashlib
    items = [(Path(p), w) for p, w in items]
    tag = f"{os.getpid()}"
    tmps = [p.with_name(f".{p.name}.{tag}.tmp") for p, _ in items]
    done: list[tuple[Path, Path | None]] = []
    try:
        for (path, write), tmp in zip(items, tmps):
            path.parent.mkdir(parents=True, exist_ok=True)
            write(tmp)
        folders = {p.parent for p, _ in items}
        if manifest is None:  # the manifest of a folder that has one is kept up to date
            manifest = len(folders) == 1 and (next(iter(folders)) / MANIFEST).is_file()
        if manifest:
            folder = next(iter(folders))
            sums = read_manifest(folder)
            sums.update({p.name: hashlib.sha256(t.read_bytes()).hexdigest()
                         for (p, _), t in zip(items, tmps)})
            text = "".join(f"{h}  {n}\n" for n, h in sorted(sums.items()))
            mpath = folder / MANIFEST
            items.append((mpath, None))
            tmps.append(mpath.with_name(f".{MANIFEST}.{tag}.tmp"))
            tmps[-1].write_text(text)
        for (path, _), tmp in zip(items, tmps):
            bak = None
            if path.exists():
                bak = path.with_name(f".{path.name}.{tag}.bak")
                with contextlib.suppress(FileNotFoundError):
                    bak.unlink()
                try:
                    os.link(path, bak)
                except OSError:  # a file system without hard links: a copy
                    import shutil
                    shutil.copy2(path, bak)
            done.append((path, bak))  # before the rename: a failed rename still cleans up
            os.replace(tmp, path)
    except BaseException:
        for path, bak in reversed(done):
            with contextlib.suppress(OSError):
                if bak is not None:
                    os.replace(bak, path)
                else:
                    path.unlink()
        raise
    finally:
        for tmp in tmps:
            with contextlib.suppress(OSError):
                tmp.unlink()
        for _, bak in done:
            if bak is not None:
                with contextlib.suppress(OSError):
                    bak.unlink()
    return [p for p, _ in items]
