"""What the lent GPU machine's image holds, and what must travel to it: one list for the wheel
download (scripts/gpu_wheels.sh) and for the CPU rehearsal (scripts/gpu_suite.sh --rehearse).

    python scripts/image_env.py wheels              name==version per line: the carried wheels
    python scripts/image_env.py image               name==version per line: the image's closure
    python scripts/image_env.py site DIR            DIR exposes ONLY the image's distributions
    python scripts/image_env.py check-wheels DIR [--python 312]   every carried wheel present?

Run it with the project's Python (the .venv): the versions are the ones installed there, which
the tests pass with. The image (RECIPES.md, "The device machine"; issue 22) is Python 3.12 with
torch, cuda-bindings, cuda-toolkit, nvidia-cuda-nvrtc, numpy, matplotlib, jinja2, pytest and
hypothesis, and what they require on Linux x86-64 (torch's cuda-toolkit extras included).
Carried: what the chapters and the notebook runner import beyond that (ipykernel, nbclient,
nbformat, ipywidgets, IPython, tqdm, jsonschema and their requirements), and nvidia-cuda-crt:
the kernels include crt/mma.h, which only that wheel brings (torch's CUDA wheels do not; an
nvcc install has it under its include folder, and kernels.toolkit looks there too).

`site DIR` builds a folder of symlinks into this venv's site-packages that holds the image's
distributions and nothing else (a folder shared with other distributions, like nvidia/ or
cuda/, is rebuilt one level down), with their real metadata; a venv whose .pth file points at
it imports what the image would import, and fails where the image would.
"""
from __future__ import annotations

import importlib.metadata as md
import os
import re
import sys
import sysconfig
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

IMAGE = ["torch", "cuda-bindings", "cuda-toolkit", "nvidia-cuda-nvrtc", "numpy", "matplotlib",
         "jinja2", "pytest", "hypothesis"]
CARRY = ["ipykernel", "nbclient", "nbformat", "ipywidgets", "ipython", "tqdm", "jsonschema",
         "nvidia-cuda-crt"]
TARGET = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
          "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
          "implementation_name": "cpython", "platform_python_implementation": "CPython"}


def _applies(marker: Marker | None, extras: set[str]) -> bool:
    if marker is None:
        return True
    return any(marker.evaluate({**TARGET, "extra": e}) for e in (extras or {""}))


def closure(tops: list[str]) -> dict[str, md.Distribution]:
    """canonical name -> installed distribution, for tops and everything they require on the
    image's platform (Linux x86-64, CPython 3.12), extras followed."""
    want: dict[str, set[str]] = {}
    todo = [Requirement(t) for t in tops]
    out: dict[str, md.Distribution] = {}
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        extras = set(req.extras)
        if name in out and extras <= want.get(name, set()):
            continue
        want.setdefault(name, set()).update(extras)
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            sys.exit(f"image_env: {req} is required but not installed in {sys.prefix}; "
                     f"this script reads the project's venv")
        out[name] = dist
        for r in dist.requires or []:
            rr = Requirement(r)
            if _applies(rr.marker, want[name]):
                todo.append(rr)
    return out


def carried() -> dict[str, md.Distribution]:
    image = closure(IMAGE)
    return {n: d for n, d in sorted(closure(CARRY).items()) if n not in image}


def _site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def build_site(target: Path) -> int:
    """Symlink the image's distributions (files as their RECORD lists them) into target."""
    site = _site_packages().resolve()
    image = closure(IMAGE)
    owners: dict[Path, set[str]] = {}            # top-level path -> distributions under it
    files_of: dict[str, list[Path]] = {}
    for d in md.distributions():
        name = str(canonicalize_name(d.metadata["Name"]))
        rel = []
        for f in d.files or []:
            p = Path(str(f))
            if p.parts and p.parts[0] != "..":
                rel.append(p)
        files_of[name] = rel
    for name, rel in files_of.items():
        for p in rel:
            for i in range(1, len(p.parts) + 1):
                owners.setdefault(Path(*p.parts[:i]), set()).add(name)
    target.mkdir(parents=True, exist_ok=True)
    made = 0

    def place(rel: Path) -> None:
        nonlocal made
        dst = target / rel
        if dst.exists() or dst.is_symlink():
            return
        who = owners.get(rel, set())
        src = site / rel
        if not src.exists():
            return
        if who <= set(image) or not src.is_dir():
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(src, dst)
            made += 1
            return
        dst.mkdir(parents=True, exist_ok=True)   # shared folder: one level down
        for child in src.iterdir():
            crel = rel / child.name
            if owners.get(crel, set()) & set(image):
                place(crel)

    for name in image:
        for p in files_of.get(name, []):
            place(Path(p.parts[0]))
    return made


def check_wheels(folder: Path, py: str) -> list[str]:
    """name==version of each carried distribution with no wheel for CPython `py` (e.g. 312)."""
    have = [w.name for w in folder.glob("*.whl")]
    missing = []
    for name, d in carried().items():
        stem = re.sub(r"[-_.]+", "_", name).lower() + "-" + d.version + "-"
        ok = [w for w in have if w.lower().startswith(stem) and
              (f"cp{py}" in w or "-py3-" in w or "-py2.py3-" in w or "abi3" in w)]
        if not ok:
            missing.append(f"{name}=={d.version}")
    return missing


def main(argv: list[str]) -> int:
    usage = ("usage: python scripts/image_env.py wheels | image | site DIR | check-wheels DIR "
             "[--python 312]")
    if not argv or argv[0] not in ("wheels", "image", "site", "check-wheels") or (
            argv[0] == "check-wheels" and (len(argv) < 2 or argv[1].startswith("-"))):
        print(f"image_env.py: error: {' '.join(argv) or 'no command'}; {usage}", file=sys.stderr)
        return 2
    if argv[0] == "wheels":
        print("\n".join(f"{n}=={d.version}" for n, d in carried().items()))
    elif argv[0] == "image":
        print("\n".join(f"{n}=={d.version}" for n, d in sorted(closure(IMAGE).items())))
    elif argv[0] == "site":
        if len(argv) != 2:
            print("usage: image_env.py site DIR", file=sys.stderr)
            return 2
        n = build_site(Path(argv[1]))
        print(f"image_env: {argv[1]}: {n} links to {len(closure(IMAGE))} distributions")
    else:
        py = argv[argv.index("--python") + 1] if "--python" in argv else "312"
        missing = check_wheels(Path(argv[1]), py)
        for m in missing:
            print(f"missing wheel (cp{py}): {m}")
        return 1 if missing else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
