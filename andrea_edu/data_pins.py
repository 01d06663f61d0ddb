"""The committed data's second guard: the SHA-256 of every file in book/data, recorded in code.

SHA256SUMS beside the data catches a damaged file, but the manifest can be regenerated over the
damage (`sha256sum * > SHA256SUMS`), and then it vouches for the damage: values that stay within
range pass every value check and change a chapter without a word (a head score swapped renames
the chapter's bracket head). The pins below change only with a change to this module, which a
review sees as a code diff beside the data's.

Where pins apply (`pinned`): the committed data folder of a checkout (a folder book/data beside
the package folder andrea_edu/, whichever clone it is in), and a folder marked with
andrea_lab.pin_writer.pin_folder (a test's copy of the committed data, read as the book reads
book/data). Everywhere else (scratch folders, andrea_runs/, a test's synthetic data) only
SHA256SUMS and the loaders' checks stand.

In a pinned folder every file has its pin and matches it, and every pinned file is there:
    check(path)             None, or one line: no pin, differs from its pin, or pinned but gone
    missing(folder, "x*")   one line naming a pinned file of that pattern that is gone, or None
The book calls both through andrea_edu.env (manifest_problem before it reads a data file,
listed_but_missing when it looks one up by name), so every loader refuses a file whose pin
differs, in one line that names it and says how to restore it or how to accept new data.

Accepting new data deliberately: `python scripts/pin_data.py --accept book/data/NAME` (the
laboratory's andrea_lab.pin_writer.accept) rewrites the table below from the files as they are
(each must be listed in, and match, its folder's SHA256SUMS); commit it with the data.
scripts/land_gpu_out.py does this for the files it lands. `python scripts/pin_data.py` checks
the whole folder. Standard library only (env.py's children load it without torch).
"""
from __future__ import annotations

import fnmatch
import hashlib
import os
from pathlib import Path

MANIFEST = "SHA256SUMS"  # data.MANIFEST: never pinned itself (the pins stand in for it)
MARKER = ".andrea-pinned"  # in a folder marked by pin_writer.pin_folder: read as book/data
PIN_FILE = Path(__file__)  # the module pin_writer.accept rewrites (a test points it at a copy)
PIN_NAME = "andrea_edu/data_pins.py"  # as a reader names it in a message

PINS: dict[str, str] = {
    # pins: begin (one line per committed file, sorted; written by pin_writer.accept: review the diff)
    "bench_headdim_cpu.json": "893768718b15b05da3a572f2403d73566abcd22876d10809652fd13c12a637b5",
    "bench_layout_cpu.json": "11db3ade423b64572825628dce8d7cd15d560e4b80ed392378a95ac2c28cdcde",
    "bench_projections_cpu.json": "9283863135482fc8562dd4c142d140da1e251ed166f23cc5cf3dc6efd16501b2",
    "realtext_deep_model.pt": "8b6946f065221c499895d76d6fb103b16f73cf0a28a4c2b9b2de18743f35373f",
    "realtext_deep_run.json": "10a50e96ebacdfeb115019d039cf4ca6c7270e7f0ee8f320d9326857550f1536",
    "realtext_long_model.pt": "e7dcfc972f7f0f613d02ec9691435ecf9ae2d4af99f18d0557301b749ab1723b",
    "realtext_long_run.json": "057ad7d9fbec3cdc46bd9de7abd84858992276a41635361eb29a2078a7979929",
    "realtext_model.pt": "c9815a7723e2043e56a683f667f0dc1e567066e80c260f9eb5ba78dc6c68f409",
    "realtext_paths.json": "1390b5f2f972394a40f9937f2197f6b4b58719ef927d9a88f3bc2efa24266f10",
    "realtext_run.json": "8d0a290f0ce6ff0fe9d7ef6a6af38a5c17059b56f7ccb4d5c1a04e693ec06ea3",
    "realtext_steps_model.pt": "93a6c2ed1f3c6be7bece65d7763b8bd56d3ef2546628729a43297b3f69031463",
    "realtext_steps_run.json": "f3d9a0c6a6a53695b7e8996a4013ddc67e2cee3e9b5d0932d8429de1bf222b70",
    "specialization_sweep.json": "f4bb4bcc52f1c63d01b9049d2c2f348980f2ad7d032ea946fbbb33e3f32cbf65",
    "toy_lab_model.json": "4be9a1b9d6cfe89e36cd18ca36572547b3d55d6d648f959080a7c939ea3f67b5",
    "toy_lab_model.pt": "6982ea418fedcea0d65908c932c49b68f4b21ac34e10713a940cf6be6957d417",
    # pins: end
}


def committed_folder() -> Path:
    """The repository's book/data, beside the package this module belongs to."""
    return Path(__file__).resolve().parents[1] / "book" / "data"


def pinned(folder) -> bool:
    """True when `folder` holds the committed data: a checkout's book/data (its parent's parent
    holds andrea_edu/), or a folder `andrea_lab.pin_writer.pin_folder` marked."""
    folder = Path(folder)
    if (folder / MARKER).is_file():
        return True
    # as named and as resolved: book/data may be a symbolic link to a folder of any name (the
    # pins follow what the book reads, not where the bytes lie), or a link may lead to it
    for f in (Path(os.path.abspath(folder)), Path(os.path.realpath(folder))):
        if (f.name == "data" and f.parent.name == "book"
                and (f.parent.parent / "andrea_edu" / "data_pins.py").is_file()):
            return True
    return same_folder(folder, committed_folder())


def same_folder(a, b) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def shown(path: Path) -> str:
    """The path as a reader types it: relative to the repository when inside it."""
    root = Path(__file__).resolve().parents[1]
    try:
        return Path(os.path.abspath(path)).relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _restore(path: Path) -> str:
    return f"restore it with `git checkout -- {shown(path)}`"


def _accept(path: Path) -> str:
    return (f"accept new data deliberately with `python scripts/pin_data.py --accept "
            f"{shown(path)}` and commit that code change with the data")


def check(path, sha256: str | None = None) -> str | None:
    """None when `path` may be read as far as the pins go: its folder is not pinned, or the file
    matches its pin. Otherwise one line (without the path, which the caller puts first, as
    data.manifest_problem's lines): the file has no pin, its content differs from its pin, or a
    pinned file is gone. sha256: the file's digest when the caller has it already."""
    path = Path(path)
    if path.name in (MANIFEST, MARKER) or not pinned(path.parent):
        return None
    want = PINS.get(path.name)
    if not path.is_file():
        if want is None:
            return None
        return (f"pinned in {PIN_NAME} but missing (committed data deleted): {_restore(path)}, "
                f"or remove its pin deliberately with `python scripts/pin_data.py --accept "
                f"{shown(path)}`")
    if want is None:
        return (f"has no pin in {PIN_NAME}: every file of the committed data folder is pinned, "
                f"so a file added by hand is refused; {_accept(path)} (scripts/land_gpu_out.py "
                f"pins what it lands), or remove the file")
    try:
        got = sha256 or sha256_file(path)
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if got != want and crlf_converted(path, want):
        return (f"its line endings were converted to CRLF (git's core.autocrlf=true changed every "
                f"sha256 in the folder): restore the bytes with `git -c core.autocrlf=false "
                f"checkout -- {shown(path.parent)}`")
    if got != want:
        return (f"content differs from its pin in {PIN_NAME} (committed data changed; "
                f"{MANIFEST} alone cannot vouch for it, it can be regenerated over damage): "
                f"{_restore(path)}, or {_accept(path)}")
    return None


def missing(folder, pattern: str = "*") -> str | None:
    """One line naming the first pinned file matching `pattern` (fnmatch) that `folder` lacks,
    when the folder is pinned; None otherwise. A pinned file that is gone is damage, not "no
    data" (its line in SHA256SUMS may have been removed with it)."""
    folder = Path(folder)
    if not pinned(folder):
        return None
    for name in sorted(PINS):
        if fnmatch.fnmatchcase(name, pattern) and not (folder / name).is_file():
            return f"{folder / name}: {check(folder / name)}"
    return None


def sha256_file(path) -> str:
    """The sha256 of a file, read in 1 MiB blocks (never whole in memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(2**20), b""):
            h.update(block)
    return h.hexdigest()


def crlf_converted(path, want: str) -> bool:
    """True when `path` is the file of sha256 `want` with its line endings turned into CRLF (what
    git does to a clone with core.autocrlf=true and no .gitattributes): the remedy is a checkout
    that keeps bytes, not new data. Reads only files of at most 64 MiB."""
    try:
        if os.path.getsize(path) > 64 * 2**20:
            return False
        raw = Path(path).read_bytes()
    except OSError:
        return False
    return b"\r\n" in raw and hashlib.sha256(raw.replace(b"\r\n", b"\n")).hexdigest() == want
