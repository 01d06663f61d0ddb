"""The committed data's second guard: the SHA-256 of every file in book/data, recorded in code.

SHA256SUMS beside the data catches a damaged file, but the manifest can be regenerated over the
damage (`sha256sum * > SHA256SUMS`), and then it vouches for the damage: values that stay within
range pass every value check and change a chapter without a word (a head score swapped renames
the chapter's bracket head). The pins below change only with a change to this module, which a
review sees as a code diff beside the data's.

This module is the table and where it applies (`pinned`): the committed data folder of a
checkout (a folder book/data beside the package folder andrea_edu/, whichever clone it is in),
and a folder marked with andrea_lab.pin_writer.pin_folder (a test's copy of the committed data,
read as the book reads book/data). There every file must have its pin and match it, and every
pinned file must be there: andrea_edu.data.manifest_problem checks the pins before SHA256SUMS,
wherever committed data is read, and refuses in one line that names the file and how to
restore it or accept new data. Elsewhere (scratch folders, andrea_runs/, a test's synthetic data)
only SHA256SUMS and the loaders' checks stand.

Accepting new data deliberately: `python scripts/pin_data.py --accept book/data/NAME` (the
laboratory's andrea_lab.pin_writer.accept) rewrites the table below from the files as they are
(each must be listed in, and match, its folder's SHA256SUMS); commit it with the data.
scripts/land_gpu_out.py does this for the files it lands. `python scripts/pin_data.py` checks
the whole folder. Standard library only (env.py's children load it without torch).
"""
from __future__ import annotations

import os
from pathlib import Path

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
    holds andrea_edu/data_pins.py), as named or as resolved (book/data may be a symbolic link:
    the pins follow what the book reads, not where the bytes lie), or a folder
    `andrea_lab.pin_writer.pin_folder` marked."""
    folder = Path(folder)
    if (folder / MARKER).is_file():
        return True
    for f in (Path(os.path.abspath(folder)), Path(os.path.realpath(folder))):
        if (f.name == "data" and f.parent.name == "book"
                and (f.parent.parent / "andrea_edu" / "data_pins.py").is_file()):
            return True
    try:
        return os.path.samefile(folder, committed_folder())
    except OSError:
        return False
