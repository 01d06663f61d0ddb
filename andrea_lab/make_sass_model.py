"""The SASS counts and the time MODEL of every registered kernel version, written to one file:
python -m andrea_lab.make_sass_model --out DIR writes DIR/sass_model.json.

scripts/gpu_suite.sh runs it (its "model" step) and keeps the file in its logs archive; no chapter
reads it (the chapters compute the model themselves, with andrea_edu.kernels.time_model, which
this module only calls). Everything in it is labelled kind="model": a model, not a measurement.
"""
from __future__ import annotations

import torch

from andrea_edu.kernels.time_model import GPUS, model_bound


def report(head_dims=(32, 64, 96, 128), shape=(8, 12, 1024), causal: bool = True,
           dtype=torch.bfloat16, gpus=("H200", "H100", "RTX 4090")) -> dict:
    """SASS evidence and the model bound of every version at every head_dim, per GPU: what
    scripts/gpu_suite.sh keeps in its logs archive (all of it labelled "model"; no chapter reads
    the file: the chapters compute the model themselves)."""
    from andrea_edu.kernels import registry
    from andrea_edu.kernels.sass import evidence
    B, nh, T = shape
    rows = []
    for gpu in gpus:
        for spec in registry.specs():
            if spec.pads:    # v3 run wider: head_dim_evidence.at(..., pad=True) models it
                continue
            version = spec.version
            for hd in head_dims:
                if spec.ineligibility(hd, dtype, None) is not None:
                    continue
                ev = evidence(version, hd, dtype, GPUS[gpu]["arch"])
                rows.append(dict(evidence=ev, model=model_bound(version, B, nh, T, hd, causal,
                                                                dtype, gpu, evidence=ev)))
    return dict(schema="andrea_edu.sass_model/1", kind="model",
                note="counts read from the compiled SASS; times are a MODEL (lower: every term "
                     "overlapped; upper: none), not "
                     "measurements (andrea_edu.kernels.time_model)",
                shape=dict(B=B, n_head=nh, T=T, causal=causal,
                           dtype=str(dtype).replace("torch.", "")), rows=rows)


def main(argv=None) -> int:
    import argparse
    import json
    import os
    from pathlib import Path
    ap = argparse.ArgumentParser(prog="python -m andrea_lab.make_sass_model",
                                 description="write sass_model.json: SASS evidence and the "
                                             "time model (a bracket) of every registered "
                                             "kernel version")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    out = Path(args.out)
    try:  # before the report's compilations: an unwritable --out is one line, exit status 2
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-test.{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        ap.error(f"--out: {args.out} is not a writable folder ({e.strerror or e})")
    obj = report()
    tmp = out / f".sass_model.json.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(obj, indent=1, default=str))
    os.replace(tmp, out / "sass_model.json")
    for r in obj["rows"]:
        ev, m = r["evidence"], r["model"]
        if ev["head_dim"] == 64:
            print(f"[model] {m['gpu']} {ev['version']} hd=64: {ev['per_tile']['total']} instr/"
                  f"warp-tile, {ev['smem_bytes_per_tile']} smem B/warp-tile, {ev['registers']} "
                  f"regs, model {m['lower'] * 1e6:.1f}-{m['upper'] * 1e6:.1f} us (largest term: {m['bound_by']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
