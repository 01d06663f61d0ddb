"""Check the committed data against its pins, or accept new data deliberately.

    python scripts/pin_data.py                        check every file of book/data
    python scripts/pin_data.py --accept book/data/F   pin F as it is now (F gone: drop its pin)

The pins are the SHA-256 of every file in book/data, recorded in andrea_edu/data_pins.py: the
book refuses a committed file whose content differs from its pin, even when SHA256SUMS was
regenerated over it. --accept rewrites that table (each file must first be listed in, and match,
book/data/SHA256SUMS: write data with the command that makes it); commit the code change with the
data, so that the review sees it. Exit status 0 all pinned files match (or accepted); 1 a file
differs, lacks its pin or is gone; 2 bad arguments.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def check_all(folder: Path) -> list[str]:
    """One line per problem of `folder` against the pins (empty: every file matches)."""
    from andrea_edu import data_pins
    from andrea_edu.data import MANIFEST
    from andrea_lab.pin_writer import diagnose
    names = sorted({p.name for p in folder.iterdir() if p.is_file() and p.name != MANIFEST
                    and not p.name.startswith(".")} | set(data_pins.PINS))
    return [f"{folder / n}: {problem}" for n in names
            if (problem := diagnose(folder / n)) is not None]


def listed_as_is(path: Path) -> None:
    """ValueError (one line) unless `path` is what its folder's SHA256SUMS lists (a file that is
    gone: unless the manifest still lists it): pins follow the manifest, never lead it."""
    import hashlib

    from andrea_edu.data import MANIFEST, read_manifest
    from andrea_lab import pin_writer
    pin_writer.check_own_folder(path)  # a pinned folder, this checkout's (as accept checks)
    sums = read_manifest(path.parent, required=True)
    if not path.exists():
        if path.name in sums:
            raise ValueError(f"{path}: missing but still listed in {path.parent / MANIFEST}; "
                             f"remove its line first (or restore the file)")
        return
    if not path.is_file():
        raise ValueError(f"{path}: not a file")
    if sums.get(path.name) != hashlib.sha256(path.read_bytes()).hexdigest():
        raise ValueError(f"{path}: {'not listed in' if path.name not in sums else 'differs from'} "
                         f"{path.parent / MANIFEST}; write it with the command that makes it "
                         f"(which lists it) before pinning it")


def main(argv: list[str] | None = None) -> int:
    from andrea_edu import data_pins
    from andrea_lab import pin_writer
    ap = argparse.ArgumentParser(prog="python scripts/pin_data.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accept", nargs="+", metavar="FILE", default=None,
                    help="files of book/data to pin as they are now (review and commit the "
                         "change to andrea_edu/data_pins.py)")
    a = ap.parse_args(argv)
    if a.accept is None:
        folder = data_pins.committed_folder()
        problems = check_all(folder)
        for line in problems:
            print(line, file=sys.stderr)
        if not problems:
            print(f"{folder}: all {len(data_pins.PINS)} files match their pins")
        return 1 if problems else 0
    try:
        for f in map(Path, a.accept):
            listed_as_is(f)
        lines = pin_writer.accept(a.accept)
    except (ValueError, OSError) as e:
        print(f"{ap.prog}: error: --accept: {str(e).splitlines()[0]} (nothing pinned)",
              file=sys.stderr)
        return 2
    print("\n".join(lines + [f"rewrote {data_pins.PIN_NAME}: commit it with the data"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
