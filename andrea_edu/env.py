"""Run-time switches shared by the library, the notebooks and the tests.

ANDREA_FAST=1        shrink sizes so every notebook runs in seconds (the tests set it).
ANDREA_BOOK_BUILD=1  the book is being built (scripts/build_book.sh): sliders render static frames.
ANDREA_CPU_ISA       "avx2" (the default) pins the CPU instruction sets of torch's numeric
                     libraries, so that CPU results are the same bits on x86-64 CPUs of one vendor
                     (see `pin_cpu_isa`); "native" leaves every library free to pick its own
                     (and drops pins inherited from a parent). Timings want "native": the bench
                     and pipeline-timing commands re-run themselves so (`native_isa_env`), and a
                     chapter that times on the CPU sets it and calls `pin_cpu_isa` before torch loads.
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
is first imported: set them before that (`setup_kernel`, which every chapter's first cell calls;
importing `andrea_edu` changes no environment variable).
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
                      f"from the committed ones. Call andrea_edu.env.pin_cpu_isa before importing "
                      f"torch, or run through "
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
    rc = run_child([sys.executable, "-m", module, *sys.argv[1:]], env=native_isa_env())
    return child_status(f"python -m {module}", rc)


@contextlib.contextmanager
def sigterm_interrupts():
    """While inside, SIGTERM (and SIGHUP) stop this process as Ctrl-C does, with
    KeyboardInterrupt, so that a command can save what it measured and say in one line what was
    left unwritten (the default action ends the process on the spot); the previous handlers
    come back on leaving. Only from the main thread; elsewhere a no-op."""
    import signal

    def stop(signum, frame):
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")
    old = {}
    for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if s is not None:
            with contextlib.suppress(ValueError, OSError):
                old[s] = signal.signal(s, stop)
    try:
        yield
    finally:
        for s, h in old.items():
            with contextlib.suppress(ValueError, OSError):
                signal.signal(s, h)


def stop_signal(e: BaseException) -> int:
    """The signal that stopped a command, from the KeyboardInterrupt it raised: SIGTERM or SIGHUP
    under `sigterm_interrupts` (its message names the signal), else SIGINT (Ctrl-C). A command
    exits with 128 + this number, as a shell reports a process the signal ended."""
    import signal
    words = str(e).split()
    if len(words) == 2 and words[0] == "signal" and words[1] in signal.Signals.__members__:
        return int(signal.Signals[words[1]])
    return int(signal.SIGINT)


def die_with_parent(parent: int | None = None) -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux prctl
    PR_SET_PDEATHSIG, through ctypes): a child doing a command's work then stops when the
    process the user sees is killed, kill -9 included. `parent`: the pid the caller expects as
    its parent; if it is already gone (it died before the call), exit at once. True when set
    (False off Linux). Used as a subprocess preexec_fn and as a process pool's initializer."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes
    import signal
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        ok = libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return False
    if parent is not None and os.getppid() != parent:
        os._exit(137)  # the parent died between the fork and the prctl
    return ok


def run_child(cmd: list[str], env: dict | None = None) -> int:
    """Run cmd as a child that does this command's work, and return its exit status (negative:
    the signal that ended it). The child dies with this process (`die_with_parent`: kill -9 of
    the visible process stops the work, and the child writes nothing more) and runs in its own
    process group; SIGTERM, SIGINT and SIGHUP sent to this process are passed on to it once, so
    that it can save what it measured and say so in one line."""
    import signal
    import subprocess
    me = os.getpid()

    def setup() -> None:  # in the child, before exec
        os.setpgid(0, 0)  # Ctrl-C reaches the child once, through this process
        die_with_parent(me)
    proc = subprocess.Popen(cmd, env=env, preexec_fn=setup if os.name == "posix" else None)
    passed = (signal.SIGTERM, signal.SIGINT) + ((signal.SIGHUP,) if hasattr(signal, "SIGHUP")
                                                 else ())
    old = {}

    def forward(signum, frame):
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)
    try:
        for s in passed:
            with contextlib.suppress(ValueError, OSError):  # not the main thread
                old[s] = signal.signal(s, forward)
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:  # a handler not installed: pass it on and wait
                forward(signal.SIGINT, None)
    finally:
        for s, h in old.items():
            with contextlib.suppress(ValueError, OSError):
                signal.signal(s, h)
        if proc.poll() is None:  # this process is leaving (an exception): the child too
            proc.kill()
            proc.wait()


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


def setup_kernel() -> dict[str, str]:
    """What a chapter needs before torch loads, set once by its first cell (the install cell):
    the CPU instruction-set pins (`pin_cpu_isa`, as ANDREA_CPU_ISA says) and, inside a notebook
    kernel, the thread cap (`cap_threads`). Importing andrea_edu sets neither: a program that
    wants them calls this (or `pin_cpu_isa`) itself. Returns the knobs' values now in effect."""
    settings = pin_cpu_isa(warn=False)  # a reader who imported torch first loses only low bits
    if "ipykernel" in sys.modules:
        cap_threads()
    return settings


def rerun_pinned(module: str) -> int | None:
    """For the __main__ of a command whose CPU results are committed: when pinning is wanted and
    this process did not start with every knob set (torch is loaded by now, too late to pin), run
    the same command again in a child with the pins filled in and return its exit status; None
    when the knobs are in place (then the caller goes on). The mirror of `rerun_unpinned`."""
    if not pinning_wanted() or all(k in os.environ for k in ISA_KNOBS):
        return None
    child = dict(os.environ)
    for k, v in PINNED_ISA.items():
        child.setdefault(k, v)
    rc = run_child([sys.executable, "-m", module, *sys.argv[1:]], env=child)
    return child_status(f"python -m {module}", rc)


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
    """The first data_search_dirs()/<name> that is a file, or None (see `where_looked`). A file
    its folder's SHA256SUMS lists but that is gone is an error (DataFileError), not "no data":
    committed data that was deleted is damage."""
    for d in data_search_dirs():
        if (d / name).is_file():
            return d / name
        problem = listed_but_missing(d, name)
        if problem:
            raise DataFileError(problem)
    return None


def listed_but_missing(folder, pattern: str) -> str | None:
    """One line when folder/SHA256SUMS lists a file matching `pattern` (fnmatch) that is not
    there (or the manifest cannot be read), or, in the committed folder, when a file pinned in
    andrea_edu/data_pins.py is gone (`data_pins.missing`); None otherwise."""
    import fnmatch
    folder = Path(folder)
    if (folder / MANIFEST).exists():
        try:
            sums = read_manifest(folder)
        except DataFileError as e:
            return str(e)
        gone = sorted(n for n in sums if fnmatch.fnmatchcase(n, pattern)
                      and not (folder / n).is_file())
        if gone:
            return (f"{folder / gone[0]}: listed in {folder / MANIFEST} but missing (committed "
                    f"data deleted: restore it, e.g. git checkout, or remove its line with the "
                    f"command that writes the folder)")
    from andrea_edu import data_pins  # the committed folder: a pinned file gone, line and all
    return data_pins.missing(folder, pattern)


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


def write_json_atomic(path, obj, manifest: bool | None = None, **dumps_kw) -> Path:
    """Write obj as JSON to path through a temporary file in the same folder and os.replace:
    a reader (or a crash, kill -9 included) sees the old file or the new one, never half of one.
    In a folder with a SHA256SUMS (book/data), or with manifest=True, the file and its new
    sha256 there are written as one unit (`write_files_as_unit`)."""
    import json

    path = Path(path)
    text = json.dumps(obj, **dumps_kw) + "\n"
    write_files_as_unit([(path, lambda tmp: tmp.write_text(text))], manifest=manifest)
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


# ---------------------------------------------------------------- the manifest: the one reader and writer
MANIFEST = "SHA256SUMS"  # beside committed data: "<sha256>  <name>" per line (sha256sum -c reads it)
_JOURNAL = ".andrea-unit."  # .andrea-unit.<tag>.json: a unit's renames, written before the first
_TAG = "andrea-"  # temporary and backup files: .<name>.andrea-<pid>-<random>.tmp / .bak


def _hex64(s: str) -> bool:
    return len(s) == 64 and all(c in "0123456789abcdef" for c in s)


def read_manifest(folder, required: bool = False) -> dict[str, str]:
    """{file name: sha256} of folder/SHA256SUMS, parsed strictly: every line exactly
    '<64 lowercase hex digits>  <file name>' (sha256sum's text or binary form), the last one
    ended by a newline (a manifest cut short is damage, not a shorter list), no name twice, no
    folder in a name. DataFileError naming the manifest and the line otherwise. No manifest:
    {} (DataFileError when `required`)."""
    path = Path(folder) / MANIFEST
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if required:
            raise DataFileError(f"{path}: missing; committed data is checked against it (restore "
                                f"it, e.g. git checkout {MANIFEST}, or rewrite the data with the "
                                f"command that made it)") from None
        return {}
    except OSError as e:
        raise DataFileError(f"{path}: cannot be read ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataFileError(f"{path}: not UTF-8 text (byte {e.start}); damaged") from None
    lines = text.split("\n")
    if lines[-1] != "":
        raise DataFileError(f"{path}: line {len(lines)} is cut short (no newline at its end): "
                            f"the manifest is truncated or damaged")
    out: dict[str, str] = {}
    for i, line in enumerate(lines[:-1], 1):
        sha, sep, name = line[:64], line[64:66], line[66:]
        if not (_hex64(sha) and sep in ("  ", " *") and name and name == name.strip()
                and "/" not in name and "\\" not in name and name not in (".", "..")):
            raise DataFileError(f"{path}: line {i} is not '<64 lowercase hex digits>  <file "
                                f"name>': {line[:80]!r}")
        if name in out:
            raise DataFileError(f"{path}: line {i} lists {name} a second time")
        out[name] = sha
    return out


def manifest_text(sums: dict[str, str]) -> str:
    """The manifest for {name: sha256}, sorted by name (what read_manifest reads back)."""
    return "".join(f"{h}  {n}\n" for n, h in sorted(sums.items()))


def is_data_folder(folder) -> bool:
    """True when `folder` holds committed data: it has a SHA256SUMS, or it is a folder the book
    reads data from (`data_search_dirs`: $ANDREA_DATA_DIR, the repository's book/data, ...).
    There the manifest is required and every file must be listed in it."""
    folder = Path(folder)
    if (folder / MANIFEST).exists():
        return True
    key = os.path.normcase(os.path.realpath(folder))
    return any(os.path.normcase(os.path.realpath(d)) == key for d in data_search_dirs())


@contextlib.contextmanager
def folder_lock(folder, shared: bool = False):
    """An fcntl.flock on the folder itself (its directory file descriptor: no lock file is left
    behind, and a read-only folder can be locked too): every writer of a folder's files and its
    manifest holds it exclusively, so two writers never lose each other's manifest entries. A
    no-op where fcntl is missing (Windows)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not Linux/macOS
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _tag_pid(name: str) -> int | None:
    """The writer's pid in '.<name>.andrea-<pid>-<rand>.tmp' (or .bak, or a journal), else None."""
    import re
    m = re.search(r"andrea-(\d+)-[0-9a-f]+\.(tmp|bak|json)$", name)
    return int(m.group(1)) if m else None


def pending_units(folder) -> list[Path]:
    """Journals of units whose writer died (kill -9) between its first and its last rename, and
    temporary/backup files of writers that are gone."""
    folder = Path(folder)
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    out = []
    for n in names:
        pid = _tag_pid(n)
        if pid is not None and n.startswith(".") and not _pid_alive(pid):
            out.append(folder / n)
    return sorted(out)


def recover_units(folder) -> list[str]:
    """Finish what a killed writer left (call with `folder_lock` held): a unit whose journal was
    written is rolled forward (its remaining temporary files renamed over their targets: every
    file of it was complete and synced before the journal), or rolled back when its writer had
    started undoing it; temporary and backup files of dead writers are removed. Returns one
    line per unit finished."""
    import json
    folder = Path(folder)
    done = []
    for p in pending_units(folder):
        if not p.name.startswith(_JOURNAL):
            continue
        try:
            j = json.loads(p.read_text())
            pairs = [(folder / t, folder / n, folder / b if b else None) for t, n, b in j["pairs"]]
            mode = j.get("mode", "forward")
        except (OSError, ValueError, KeyError, TypeError):
            pairs, mode = [], "broken"
        if mode == "forward":
            for tmp, target, _ in pairs:
                if tmp.exists():
                    os.replace(tmp, target)
        elif mode == "back":
            for tmp, target, bak in pairs[:j.get("done", len(pairs))]:
                if bak is not None and bak.exists():
                    os.replace(bak, target)
                elif bak is None and not tmp.exists():
                    with contextlib.suppress(FileNotFoundError):
                        target.unlink()
        done.append(f"{folder}: finished a unit write a killed writer left "
                    f"({mode}: {', '.join(t.name for _, t, _ in pairs) or 'unreadable journal'})")
        _fsync_dir(folder)
        p.unlink()
    for p in pending_units(folder):  # the journals are gone: what is left is orphaned
        with contextlib.suppress(OSError):
            p.unlink()
    return done


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _fsync_file(p: Path) -> None:
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def manifest_problem(path) -> str | None:
    """None when `path` may be read: it matches its sha256 in its folder's SHA256SUMS, or its
    folder holds no committed data (`is_data_folder` false: a scratch folder). Otherwise one
    line: the manifest missing or damaged (its line named), the file not listed in it (a file
    the manifest lacks is refused), or its content differing from the recorded sha256. In the
    committed folder (book/data) the file must also match its pin in andrea_edu/data_pins.py
    (`data_pins.check`): a manifest regenerated over a damaged file does not vouch for it. A unit
    write a killed writer left half done is finished first, when the folder is writable."""
    import hashlib
    path = Path(path)
    folder = path.parent
    if pending_units(folder):
        try:
            with folder_lock(folder):
                recover_units(folder)
        except OSError as e:
            return (f"an interrupted write left files in {folder} and they cannot be finished "
                    f"here ({e.strerror or e}); run the command that writes it again")
    from andrea_edu import data_pins  # the committed folder's pins, whatever SHA256SUMS says
    pinned = data_pins.check(path)
    if pinned:
        return pinned
    if not is_data_folder(folder):
        return None
    for attempt in (0, 1):
        try:
            sums = read_manifest(folder, required=True)
        except DataFileError as e:
            return f"its folder's manifest cannot be trusted ({e})"
        want = sums.get(path.name)
        if want is None:
            return (f"not listed in {folder / MANIFEST}; a data file the manifest lacks is "
                    f"refused (write it with the command that makes it, which lists it)")
        try:
            got = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as e:
            return f"cannot be read ({e.strerror or e})"
        if got == want:
            return None
        if attempt == 0:  # a writer may be between its renames: wait for it, look again
            with contextlib.suppress(OSError), folder_lock(folder, shared=True):
                pass
    return (f"content differs from the sha256 recorded for it in {MANIFEST} (damaged or "
            f"edited by hand: rewrite it with the command that made it, which updates "
            f"{MANIFEST})")


def write_files_as_unit(items, manifest: bool | None = None) -> list[Path]:
    """Write several files as one unit, all or nothing, even under kill -9 at any point.
    items: [(path, write)], write(tmp) fills a temporary file beside `path`; all in one folder
    when the manifest is kept. manifest: keep the folder's SHA256SUMS current (None: when the
    folder has one; True: create it if missing).

    Under the folder's lock (`folder_lock`: concurrent writers never lose manifest entries):
    what a killed writer left is finished (`recover_units`); every file is written to its
    temporary name and synced, the new manifest too; a journal naming the renames is written
    (atomically); then each file is renamed over its target, the manifest last, and the journal
    removed. A kill before the journal leaves the old set (its temporary files are removed by the
    next reader or writer); after it, the next reader or writer rolls the unit forward: the
    folder holds the old set or the new one, and no .tmp/.bak file stays. An exception in this
    process (a full disk) puts the old set back from hard-linked backups."""
    import hashlib
    import json
    import secrets
    items = [(Path(p), w) for p, w in items]
    if not items:
        return []
    folders = sorted({p.parent for p, _ in items})
    if manifest is None:  # the manifest of a folder that has one is kept up to date
        manifest = len(folders) == 1 and (folders[0] / MANIFEST).is_file()
    if manifest and len(folders) != 1:
        raise ValueError(f"a unit kept in a manifest lies in one folder, not {len(folders)}")
    for f in folders:
        f.mkdir(parents=True, exist_ok=True)
    folder = folders[0]
    tag = f"{_TAG}{os.getpid()}-{secrets.token_hex(4)}"
    with contextlib.ExitStack() as locks:
        for f in folders:
            locks.enter_context(folder_lock(f))
            recover_units(f)
        return _write_locked(items, folder, manifest, tag, hashlib, json)


def _write_locked(items, folder: Path, manifest: bool, tag: str, hashlib, json) -> list[Path]:
    tmps = [p.with_name(f".{p.name}.{tag}.tmp") for p, _ in items]
    journal = folder / f"{_JOURNAL}{tag}.json"
    done: list[tuple[Path, Path | None]] = []
    asked = len(items)
    umask = os.umask(0)
    os.umask(umask)
    try:
        for (path, write), tmp in zip(items, tmps):
            write(tmp)
            os.chmod(tmp, 0o666 & ~umask)  # a data file is as readable as any
            _fsync_file(tmp)
        if manifest:
            sums = read_manifest(folder)  # strict: a damaged manifest is not silently rewritten
            sums.update({p.name: hashlib.sha256(t.read_bytes()).hexdigest()
                         for (p, _), t in zip(items, tmps)})
            mpath = folder / MANIFEST
            asked = len(items)
            items = items + [(mpath, None)]
            tmps.append(mpath.with_name(f".{MANIFEST}.{tag}.tmp"))
            tmps[-1].write_text(manifest_text(sums))
            os.chmod(tmps[-1], 0o666 & ~umask)
            _fsync_file(tmps[-1])
        baks = [p.with_name(f".{p.name}.{tag}.bak") if p.exists() else None for p, _ in items]
        for (path, _), bak in zip(items, baks):
            if bak is not None:
                try:
                    os.link(path, bak)
                except OSError:  # a file system without hard links: a copy
                    import shutil
                    shutil.copy2(path, bak)
        pairs = [[os.path.relpath(t, folder), os.path.relpath(p, folder),
                  os.path.relpath(b, folder) if b else None]
                 for (p, _), t, b in zip(items, tmps, baks)]
        jtmp = journal.with_suffix(".tmp")
        jtmp.write_text(json.dumps({"mode": "forward", "pairs": pairs}))
        _fsync_file(jtmp)
        os.replace(jtmp, journal)  # the unit is decided: from here on it completes
        _fsync_dir(folder)
        for (path, _), tmp, bak in zip(items, tmps, baks):
            done.append((path, bak))  # before the rename: a failed rename still cleans up
            os.replace(tmp, path)
        _fsync_dir(folder)
    except BaseException:
        if journal.exists():  # undo what was renamed; a kill while undoing finishes the undo
            with contextlib.suppress(OSError):
                j = json.loads(journal.read_text())
                j.update(mode="back", done=len(done))
                jtmp = journal.with_suffix(".tmp")
                jtmp.write_text(json.dumps(j))
                os.replace(jtmp, journal)
        for path, bak in reversed(done):
            with contextlib.suppress(OSError):
                if bak is not None:
                    os.replace(bak, path)
                else:
                    path.unlink()
        raise
    finally:
        for tmp in tmps + [journal.with_suffix(".tmp")]:
            with contextlib.suppress(OSError):
                tmp.unlink()
        for p, _ in items:
            with contextlib.suppress(OSError):
                p.with_name(f".{p.name}.{tag}.bak").unlink()
        with contextlib.suppress(OSError):
            journal.unlink()
    return [p for p, _ in items[:asked]]  # the files asked for (the manifest is not one)


def seal_folder(folder, names=None) -> Path:
    """Write folder/SHA256SUMS listing `names` (default: every file in it that is not hidden)
    with their sha256 now, under the folder's lock: what a test, or a person who has checked a
    folder of data by hand, does to make the book read it (the book reads only listed files)."""
    import hashlib
    folder = Path(folder)
    with folder_lock(folder):
        recover_units(folder)
        names = sorted(names if names is not None else
                       (p.name for p in folder.iterdir() if p.is_file() and p.name != MANIFEST
                        and not p.name.startswith(".")))
        sums = {n: hashlib.sha256((folder / n).read_bytes()).hexdigest() for n in names}
        mpath = folder / MANIFEST
        tmp = mpath.with_name(f".{MANIFEST}.{_TAG}{os.getpid()}-0.tmp")
        tmp.write_text(manifest_text(sums))
        os.replace(tmp, mpath)
    return mpath


def default_out_dir() -> Path:
    """Where a command writes when no --out is given: $ANDREA_OUT_DIR, else andrea_runs/ in the
    working directory, never inside the book's folder (from book/ it is the repository's
    andrea_runs/). Committed data in book/data changes only when a command is pointed there by
    name (--out book/data, with --replace where a file would be replaced)."""
    if os.environ.get("ANDREA_OUT_DIR", "").strip():
        return Path(os.environ["ANDREA_OUT_DIR"].strip()).expanduser()
    repo = Path(__file__).resolve().parents[1]
    here = Path.cwd().resolve()
    book = (repo / "book").resolve()
    if here == book or book in here.parents:
        return repo / "andrea_runs"
    return here / "andrea_runs"


# ---------------------------------------------------------------- argument checks of the public API
def check_real(name: str, value, lo: float | None = None, hi: float | None = None) -> float:
    """value as a float when it is a real number (not bool, not text), finite, in [lo, hi];
    else ValueError/TypeError in one line naming `name` and what is allowed."""
    import math
    import numbers
    rng = ("" if lo is None and hi is None else
           f" in [{lo:g}, {hi:g}]" if lo is not None and hi is not None else
           f" >= {lo:g}" if lo is not None else f" <= {hi:g}")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}={value!r} must be a finite number{rng}, got "
                        f"{type(value).__name__}")
    v = float(value)
    if not math.isfinite(v) or (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{name}={value!r} is not allowed; a finite number{rng}")
    return v


def check_pos_int(name: str, value, lo: int = 1) -> int:
    """value when it is an int (not bool) >= lo; else one line naming `name`."""
    import numbers
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}={value!r} must be an integer >= {lo}, got {type(value).__name__}")
    if value < lo:
        raise ValueError(f"{name}={value!r} is not allowed; an integer >= {lo}")
    return int(value)


def check_scores(name: str, scores, n_patterns: int = 3, allow_nan: bool = True):
    """scores as a float array of shape (n_patterns, n_layer, n_head), values in [0, 1] (NaN
    where nothing was measured, when allowed); else one line naming `name` and the shape."""
    import numpy as np
    try:
        s = np.asarray(scores, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be numbers of shape ({n_patterns}, n_layer, n_head), got "
                        f"{type(scores).__name__}") from None
    if s.ndim != 3 or s.shape[0] != n_patterns or 0 in s.shape:
        raise ValueError(f"{name} must have shape ({n_patterns}, n_layer, n_head) (one score per "
                         f"pattern, layer and head), got {tuple(s.shape)}")
    bad = ~np.isnan(s) & ((s < 0) | (s > 1)) if allow_nan else ~np.isfinite(s) | (s < 0) | (s > 1)
    if bad.any() or np.isinf(s).any():
        raise ValueError(f"{name}: scores must lie in [0, 1]"
                         f"{' (NaN: not measured)' if allow_nan else ''}; "
                         f"got {s[bad | np.isinf(s)].ravel()[0]!r}")
    if np.isnan(s).all():
        raise ValueError(f"{name}: every score is NaN; nothing was measured")
    return s
