"""Every kernel version, in one list: the registry of KernelSpecs (kernels.spec).

Ordered as the book's ladder, from the baseline to the fastest: v1, v2, v3p, v3. The dispatcher
tries them from the last (`preferred()`): the newest kernel that can run a case runs it. v3p
(kernels/v3pad.py) is v3 run inside a wider width (72 in 80): it sits below v3, which runs its
own widths unpadded, and above v2, and the dispatcher passes over it unless asked to pad (a spec
with `pads`: walk(..., pad=True)).
Adding a version is a .cu file, a spec module beside it (kernels/v4.py) and one line here;
`register(spec)` does the same at run time (tests/test_kernel_registry.py registers a real
fourth version from a package of its own, tests/fourth_rung, and removes it).

    specs() -> [KernelSpec]       preferred() -> [KernelSpec] (best first)
    walk(head_dim, dtype, sm, start, pad=False) -> (the spec that runs or None, [(spec, why not)])
    get(version) -> KernelSpec    versions() -> ("v1", "v2", "v3p", "v3")    by_backend(name)
    ladder() -> ("v1", "v2", "v3"): the worklog's rungs (no padding spec)
    KERNEL_NAMES {version: kernel}, KERNEL_FILES {version: .cu file},
    BACKENDS {version: backend}                                       (live views)
    color(version) -> "#1f77b4"   the spec's colour, or PALETTE's at its place in the ladder
    register(spec), unregister(version)
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping

from andrea_edu.kernels import v1, v2, v3, v3pad
from andrea_edu.kernels.spec import KernelSpec

_SPECS: list[KernelSpec] = [v1.SPEC, v2.SPEC, v3pad.SPEC, v3.SPEC]


def specs() -> list[KernelSpec]:
    """The registered specs, baseline first (the book's ladder)."""
    return list(_SPECS)


def preferred() -> list[KernelSpec]:
    """The specs in the dispatcher's order of preference: newest first."""
    return _SPECS[::-1]


def walk(head_dim: int, dtype, sm: int | None = None, start: str | None = None,
         pad: bool = False) -> tuple[KernelSpec | None, list[tuple[KernelSpec, str]]]:
    """The dispatcher's rule: the first spec, newest first (from the one whose backend is
    `start`), that can run (head_dim, dtype) on an sm GPU (None: a current sm_80+ one); returns
    it (None when none can) and the (spec, reason) of each one passed over before it. pad=False
    leaves out the specs that pad (`pads`), unless `start` names one."""
    order = preferred()
    if start is not None:
        order = order[[s.backend for s in order].index(start):]
    order = [s for s in order if pad or not s.pads or s.backend == start]
    passed: list[tuple[KernelSpec, str]] = []
    for s in order:
        why = s.ineligibility(head_dim, dtype, sm)
        if why is None:
            return s, passed
        passed.append((s, why))
    return None, passed


def versions() -> tuple[str, ...]:
    return tuple(s.version for s in _SPECS)


def ladder() -> tuple[str, ...]:
    """The rungs of the worklog, baseline first: the versions that run a head_dim at its own
    width (a padding spec, v3p, is a rung's kernel run wider: it sits beside the ladder)."""
    return tuple(s.version for s in _SPECS if not s.pads)


def get(version: str) -> KernelSpec:
    """The spec of `version`; ValueError naming the registered versions otherwise."""
    for s in _SPECS:
        if s.version == version:
            return s
    raise ValueError(f"version={version!r} is not one of {versions()}")


def by_backend(backend: str) -> KernelSpec | None:
    return next((s for s in _SPECS if s.backend == backend), None)


# Colours for versions whose spec names none, by place in the ladder: matplotlib's tab10 less
# the grey and the blue and red the ladder's own specs use, the green of the published-kernel
# bands and the purple of "no kernel (sdpa)" in the figures.
PALETTE = ("#e377c2", "#ff7f0e", "#8c564b", "#17becf", "#bcbd22")


def color(version: str) -> str:
    """The colour every figure draws `version` in: its spec's, else a PALETTE colour chosen by
    its place among the registered specs that name none."""
    spec = get(version)
    if spec.color is not None:
        return spec.color
    unnamed = [s.version for s in _SPECS if s.color is None]
    return PALETTE[unnamed.index(version) % len(PALETTE)]


def register(spec: KernelSpec) -> None:
    """Add a kernel version (as the newest: the dispatcher tries it first)."""
    if not isinstance(spec, KernelSpec):
        raise TypeError(f"spec must be a KernelSpec, got {type(spec).__name__}")
    if spec.version in versions() or by_backend(spec.backend) is not None:
        raise ValueError(f"version={spec.version!r} or backend={spec.backend!r} is already "
                         f"registered")
    _SPECS.append(spec)


def unregister(version: str) -> None:
    _SPECS.remove(get(version))


class _View(Mapping):
    """A read-only {version: field} view of the registry, current at every read."""

    def __init__(self, field: str):
        self._field = field

    def __getitem__(self, version: str) -> str:
        for s in _SPECS:
            if s.version == version:
                return getattr(s, self._field)
        raise KeyError(version)

    def __iter__(self) -> Iterator[str]:
        return iter(versions())

    def __len__(self) -> int:
        return len(_SPECS)

    def __repr__(self) -> str:
        return repr(dict(self))


KERNEL_NAMES: Mapping[str, str] = _View("kernel")   # the one kernel-name list: {"v1": "attention_v1", ...}
KERNEL_FILES: Mapping[str, str] = _View("source")   # {"v1": "attention_v1.cu", ...}
BACKENDS: Mapping[str, str] = _View("backend")      # {"v1": "cuda-naive", ...}
