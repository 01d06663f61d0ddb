#!/usr/bin/env bash
# The GPU suite for a lent machine (an H100 SXM on a first call, possibly an H200), in STAGES
# that each land on their own: every command ends before the device's 600 s per-command
# limit, writes at most 8 files under $OUT, and rewrites gpu_summary.md and logs.tar.gz after
# EVERY step (a call cut short still returns what has run).
#
# THE DEVICE COMMANDS (the one place they are written; README's GPU paragraph points here).
# The lease: 15 minutes of device time in all (start-up, transfers and idle time included),
# at most 600 s a command, no machine starts with under 4 minutes left.
#   here, once:  bash scripts/gpu_wheels.sh    (stage 2's chapters need the Jupyter wheels in
#                .whl/, ignored by git; stage 1 needs none)
#   call 1, stage 1 (the headline, most valuable first; about 200 s + the machine's start):
#     run(command="ANDREA_GIT_COMMIT=$(git rev-parse HEAD) bash scripts/gpu_suite.sh --stage 1",
#         timeout_s=260)
#     (write the sha into the command here: the device's copy has no .git folder)
#   if stage 1 failed for a reason of set-up, fix it and run call 1 once more (budgeted).
#   call 2, stage 2 (the rest), on the same warm machine, with what is left:
#     run(command="ANDREA_GIT_COMMIT=<sha> GPU_SUITE_DEADLINE_S=<s> bash scripts/gpu_suite.sh
#         --stage 2", carry=[".whl"], timeout_s=<s + 60>)
#     <s> = the device time left (status's budget_left_s) less 90 s, at most 540
#   then, here, per returned folder: python scripts/land_gpu_out.py <files_at>
#     (stage 1 lands gpucheck.json and bench_headdim_<gpu>.json, stage 2 the rest; a run cut
#     short lands as partial: each file says so inside)
# Budget (device seconds): start ~60-90, stage 1 <= 200 + 20 (deadline, kill grace, summary),
# a re-run of stage 1 <= 220, stage 2 what is left (about 300 of 900 after two stage-1 calls;
# its deadline cuts the cheapest steps first, and every step lands on its own).
#   bash scripts/gpu_suite.sh                       both stages as one call ("all": the old
#                                                   single first-contact run, 540 s deadline)
#   bash scripts/gpu_suite.sh [--stage N] --rehearse   on a CPU: the same script in an
#                                                   environment that holds only what the GPU
#                                                   image holds (tests/test_gpu_suite.py)
#   ANDREA_GIT_COMMIT=<sha> ...                     the commit, when the copy has no .git folder
#   GPU_SUITE_DEADLINE_S=<s>                        the global deadline (default: 200 for
#                                                   stage 1, 540 otherwise; 60..560)
#   then, here: python scripts/land_gpu_out.py <the returned $OUT folder>   (lands the data)
#
# Stage 1 (--stage 1): environment; the carried wheels unpacked if any (none needed);
#   gpu-check (90): every registered kernel version (the padded one too) and auto through
#   attention() against the fp32 reference, one process per backend, on the small grid
#   (gpu-check --small: two shapes, head_dims 8/32/64/72/80/96/100/128, both dtypes and
#   causal flags, the headline case, the fallbacks and the auto calls); headline (100): python -m andrea_lab.bench gpu-headline: head_dim 32, 64,
#   72, 80, 96, 100, 128 at the headline shape (B=8, T=1024, nh=12, causal, bf16) for every
#   kernel, attention()'s own choice with pad off and on ("auto", "auto:pad") and SDPA; cold
#   beside warm at head_dim 64 (inputs rotated through copies over 3x the L2 the device
#   reports); bench_headdim_<gpu>.json written after every case, labelled incomplete inside
#   until the sweep ends. Stage 2 (--stage 2): wheels, model, notebooks, gpu-tests, sanitizer,
#   bench (the full gpu-suite: projections, layout, headdim), pipeline, ncu, mma-ceiling.
#
# Chapters: a chapter whose inputs cannot exist on the device (all-MiniLM-L6-v2's 83 MB wheel:
# not in the image, cannot travel) is a chapter:<name> row "skipped" with its one-line reason
# (scripts/gpu_notebook_needs.py), never a failure; the summary keeps kernel results and
# chapter results apart, each with its verdict.
#
# Known limits (issue 41 item 7), said here once:
#   - torch.cuda._sleep's rate is calibrated once per process; clocks that rise later shorten
#     the real head start. The timer (bench.timing.QueuedEvents) reads the device's own time
#     from an event before the sleep, so a head start that fell short shows as host-bound
#     instead of passing unseen.
#   - warnings that the image's torch 2.11 or cuda-bindings raise only while a kernel runs on a
#     GPU cannot show in a rehearsal (filterwarnings=error): gpu-tests on the device meet them
#     first (see "Python 3.12 and torch 2.11" below for what the image rehearsal covers).
#   - the commit reads "unknown" in the device's copy unless ANDREA_GIT_COMMIT is passed (the
#     commands above pass it).
#   - outputs of the kernels are torch.empty_like, never poisoned before a launch: an element a
#     kernel never writes could hold a right value by chance; gpucheck's many shapes make that
#     unlikely, not impossible.
#   - a chapter still running when the notebooks' group time-out fires is lost whole (a notebook
#     is written when it ends); its log lines say which ran.
#   - compute-sanitizer and ncu: PATH first, then the CUDA toolkit's and Nsight Compute's own
#     folders (/usr/local/cuda/bin, /opt/nvidia/nsight-compute/*).
#   - Python 3.12 and torch 2.11: the rehearsal in the test command runs the project venv's
#     Python 3.11 with the project's pinned torch. The image's own versions are rehearsed by
#     hand (about 5 GB, not in the test command): bash scripts/image_venv.sh builds a venv with
#     this machine's Python 3.12 (pyenv) and torch 2.11.0+cu130, numpy 2.5.2 from PyPI, then
#     ANDREA_REHEARSE_IMAGE_PYTHON=<its python> bash scripts/gpu_suite.sh --stage 1|2 --rehearse.
#     Seen 2026-12-07 (Python 3.12.1, torch 2.11.0+cu130, cuda-bindings 13.5.0, NVRTC 13.0):
#     stage 1 passed; stage 2 passed every step but fault-budget, whose 30 s pretend deadline
#     cut gpucheck before it began on a loaded machine (now FLOOR_S, as every torch step).
#     Collecting the gpu tests (their imports, under filterwarnings=error) warned nothing.
#
# The deadline: every step's time limit is min(its nominal budget, the time left before the
# global deadline less RESERVE_S for the final summary); a step with under 5 s left is
# skipped ("no time left"). Every command runs under `timeout -k KILL_S LIMIT` (SIGTERM at the
# limit, SIGKILL KILL_S later: a kernel hung in synchronize ignores SIGTERM). A step whose
# Python imports torch gets at least FLOOR_S (120 s), never past the deadline plus
# HARD_EXTRA_S (40 s): a loaded machine's honest start is never cut. So the real worst case is
#   540 + 40 + 5 + 15 = 600 s at most, and in practice the deadline plus the kill grace plus
#   the final summary (560 s); stage 1: 200 + 60 = 260 s at most (the nominal budgets below
#   add up to more; the deadline cuts the last steps first, and they are the cheapest to lose).
#
# Steps (nominal budget in seconds; "bg" runs beside the steps after it):
#   environment    15  the image's python (/opt/torch/.venv/bin/python3, else python3); versions
#   wheels         30  install the carried .whl/ into a folder on PYTHONPATH (unzip: no pip
#                      needed, no network), then import what the notebooks need and find the
#                      CUDA headers (crt/mma.h); rehearsal: gpu_wheels.sh first (network)
#   model       bg 90  SASS counts + lower-bound time MODEL of v1, v2, v3 (CPU only; its
#                      sass_model.json goes into logs.tar.gz: a model, not a measurement)
#   notebooks  bg 200  every chapter executed, 6 at a time, per-cell timeout 180 s, while the
#                      correctness steps share the GPU: each executed chapter gets a first cell
#                      saying its timings were taken under that load and are not evidence
#   correctness   150  at once, all correctness (nothing timed):
#     gpu-check        one process per backend (each registered kernel's, and auto), each
#                      attention(backend=...) vs the fp32 reference; a sticky CUDA error stops
#                      only its own process and is reported once with backend and case; the
#                      reports merged into gpucheck.json
#     gpu-tests        pytest -m gpu (its own process, the whole 150 s: collection alone took
#                      36 s on the CPU rehearsal)
#     sanitizer        compute-sanitizer memcheck, racecheck, synccheck, initcheck, one process
#                      per tool and kernel version (scripts/gpu_kernel_cases.py small
#                      --version vN; inputs copied from the host so initcheck sees them
#                      written), --kernel-name kns=attention_v, --report-api-errors no (an
#                      option this compute-sanitizer lacks is left out and logged); each
#                      report parsed (scripts/gpu_sanitizer_report.py): kernel, tool, count,
#                      first finding
#   bench         110  python -m andrea_lab.bench gpu-suite (alone on the GPU: the notebooks are
#                      waited for first): kernel time of prepared launches, SDPA the same way,
#                      host time per call apart; JSON checkpointed every 4 cases
#   pipeline       45  python -m andrea_lab.pipeline_timing, ANDREA-120M, B=8, T=1024, bf16:
#                      pipeline_<gpu>.json, what "The final picture" re-rates with (written
#                      apart and copied: its SHA256SUMS would be a ninth file under $OUT)
#   ncu            70  Nsight Compute counters of v2 and v3 at the headline case (B=8, T=1024,
#                      nh=12, hs=64, causal, bf16), --clock-control none; shared-memory bank
#                      conflicts per instruction kind: _op_ld/_op_st (LSU: ld.shared/st.shared),
#                      _op_ldsm (ldmatrix), _op_ldgsts (cp.async global->shared), which v3 uses
#                      for nearly all its shared-memory traffic; a metric this ncu does not
#                      know: retried without the ldsm/ldgsts pair, then with its SpeedOfLight
#                      and Occupancy sections
#   mma-ceiling    30  scripts/gpu_mma_ceiling.py: register-only mma.sync.m16n8k16 and WMMA loops,
#                      bf16, non-zero operands, every SM: the tensor-core ceiling the time model
#                      needs (TFLOP/s and % of the dense peak; numbers in the summary)
#   summary        15  gpu_summary.md, notebooks.tar.gz, logs.tar.gz (also after every step)
# Files under $OUT (8 at most): gpu_summary.md, gpucheck.json, bench_{projections,layout,
# headdim}_<gpu>.json, pipeline_<gpu>.json, notebooks.tar.gz, logs.tar.gz. Land them with
# python scripts/land_gpu_out.py OUT (validates, copies into book/data/, updates SHA256SUMS).
#
# --rehearse (in the test command, tests/test_gpu_suite.py): GPU steps say "skipped: no GPU";
# everything else runs, in a venv at $ANDREA_REHEARSE_DIR (default /tmp/andrea-rehearse-<uid>)
# whose site-packages exposes ONLY the image's distributions (scripts/image_env.py site: links
# to the project venv's copies, real metadata), plus the carried wheels. Differences from the
# image, said here once (ANDREA_REHEARSE_IMAGE_PYTHON lifts the first two: see "Python 3.12"
# below): Python 3.11 (the project venv's) instead of 3.12, so the carried wheels
# are installed from a cp311 download of the same versions (the cp312 set is still downloaded
# and checked); torch and the CUDA wheels at the project's pinned versions, not the image's
# torch 2.11; no nvcc, so no /usr/local/cuda headers (the carried nvidia-cuda-crt must do); the
# image's system cuobjdump/nvdisasm are stood in for by the project venv's. Notebooks: only
# $REHEARSE_NOTEBOOKS (default: book/one_kernel_many_heads.ipynb), in fast mode (ANDREA_FAST=1);
# the model step gets 240 s instead of 90 and reuses the CPU tests' kernel cache; a
# rehearsal-only step collects the gpu-marked tests (pytest --collect-only -m gpu --noconftest,
# 180 s): what gpu-tests imports must import. Fault rehearsal (scripts/gpu_fault_standin.py,
# started after that collection, beside the steps that follow): a gpu-check process whose kernel leaves a
# sticky error beside one that is fine (fault-sticky), the bench with a faulting case
# (fault-bench), a hung kernel that ignores SIGTERM (fault-hang: the kill-after ends it) and a
# step cut by the deadline (fault-budget: SIGTERM, and gpucheck keeps a partial report): each
# must be contained and reported, or the step fails. A wheel download that fails for want of
# network makes the wheels step fail in a rehearsal (one line says so) and the notebooks step
# skip; on the GPU machine there is no network by design and the wheels must have been carried.
# Exit status: 0 no step failed (skipped and refused are not failures), 1 a step failed, 2 bad
# arguments.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
REHEARSE=0; STAGE=all
while [ $# -gt 0 ]; do
  case "$1" in
    --rehearse) REHEARSE=1 ;;
    --stage) case "${2:-}" in 1|2|all) STAGE="$2"; shift ;;
               *) echo "gpu_suite: --stage '${2:-}' (allowed: 1, 2, all)" >&2; exit 2 ;; esac ;;
    *) echo "gpu_suite: unknown argument '$1' (allowed: --rehearse, --stage 1|2|all)" >&2; exit 2 ;;
  esac
  shift
done
# each stage's global deadline (GPU_SUITE_DEADLINE_S overrides): stage 1 fits a first call of
# about 4 minutes with the machine's own start, stage 2 and "all" the 600 s per command
case $STAGE in 1) DEADLINE_S="${GPU_SUITE_DEADLINE_S:-200}" ;; *) DEADLINE_S="${GPU_SUITE_DEADLINE_S:-540}" ;; esac
[[ "$DEADLINE_S" =~ ^[0-9]+$ ]] && [ "$DEADLINE_S" -ge 60 ] && [ "$DEADLINE_S" -le 560 ] || {
  echo "gpu_suite: GPU_SUITE_DEADLINE_S='$DEADLINE_S' (allowed: an integer 60..560; the device allows 600 s a command)" >&2; exit 2; }
KILL_S=5; RESERVE_S=15
# FLOOR_S: the least time limit of a step whose interpreter imports torch: such a Python can take
# over 20 s to start and finish on a loaded machine (load 4-10 on 2 cores; 16 busy processes on
# the device), so a short step is never cut before it could honestly end. A floor never runs
# past the hard end (the deadline plus HARD_EXTRA_S, under the device's 600 s a command).
FLOOR_S=120; HARD_EXTRA_S=40
# runs STEP: whether this --stage runs STEP (stage 1: the headline, most valuable first; stage
# 2: the rest; all: both, as one call, without stage 1's own headline sweep)
runs() {
  case "$STAGE:$1" in
    1:environment|1:wheels|1:gpu-check|1:headline|*:summary) return 0 ;;
    1:*) return 1 ;;
    2:gpu-check|2:headline|all:headline) return 1 ;;
    *) return 0 ;;
  esac
}
if [ -n "${ANDREA_REHEARSE_IMAGE_PYTHON:-}" ]; then
  [ "$REHEARSE" = 1 ] || { echo "gpu_suite: ANDREA_REHEARSE_IMAGE_PYTHON is for --rehearse only (unset it on the GPU machine)" >&2; exit 2; }
  [ -x "$ANDREA_REHEARSE_IMAGE_PYTHON" ] || { echo "gpu_suite: ANDREA_REHEARSE_IMAGE_PYTHON='$ANDREA_REHEARSE_IMAGE_PYTHON' (allowed: an executable Python, e.g. the one bash scripts/image_venv.sh prints)" >&2; exit 2; }
fi
OUT="${OUT:-$root/gpu-out}"
mkdir -p "$OUT" || { echo "gpu_suite: cannot create OUT=$OUT" >&2; exit 2; }
work="$(mktemp -d "${TMPDIR:-/tmp}/gpu_suite.XXXXXX")"
logs="$work/logs"; mkdir -p "$logs" "$work/notebooks"
steps="$work/steps.tsv"; : >"$steps"
log="$logs/gpu_suite.log"
start=$(date +%s)
deadline=$(( start + DEADLINE_S ))
say() { echo "[gpu_suite +$(( $(date +%s) - start ))s] $*" | tee -a "$log"; }
# snapshot: gpu_summary.md and logs.tar.gz as they stand (after every step)
snapshot() {
  cp "$steps" "$logs/steps.tsv" 2>/dev/null
  timeout -k 2 30 "$PY" scripts/gpu_summary.py "$OUT" "$steps" "$logs" --deadline "$DEADLINE_S" \
    --stage "$STAGE" $([ "$REHEARSE" = 1 ] && echo --rehearse) 2>>"$log"
  timeout -k 2 30 tar -czf "$OUT/.logs.tar.gz.tmp" -C "$work" logs 2>/dev/null \
    && mv -f "$OUT/.logs.tar.gz.tmp" "$OUT/logs.tar.gz"
}
# record NAME STATUS SECONDS BUDGET REASON
record() {
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "${5//$'\n'/ }" >>"$steps"
  say "$1: $2 ($3 s of $4) $5"
  snapshot
}
# floor NOMINAL: a torch-importing step's limit: at least FLOOR_S, never past the hard end
floor() {
  local want=$1; [ "$want" -lt "$FLOOR_S" ] && want=$FLOOR_S
  local left=$(( start + DEADLINE_S + HARD_EXTRA_S - $(date +%s) - RESERVE_S ))
  [ "$left" -lt "$want" ] && want=$left
  [ "$want" -lt 5 ] && want=5
  echo "$want"
}
# limit NOMINAL: this step's time limit in seconds (0: no time left before the deadline)
limit() {
  local left=$(( deadline - $(date +%s) - RESERVE_S ))
  local b=$1; [ "$left" -lt "$b" ] && b=$left
  [ "$b" -lt 5 ] && b=0
  echo "$b"
}
# why RC: the words for a timeout's exit status
why() { case $1 in 124) echo "stopped at its time limit (SIGTERM)";; 137) echo "killed ${KILL_S} s after its time limit (it ignored SIGTERM: hung)";; *) echo "exit status $1";; esac; }
NOLEFT="no time left before the global deadline (${DEADLINE_S} s)"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"
PY="${PYTHON:-python3}"   # until the environment step picks the image's

if [ -z "${ANDREA_GIT_COMMIT:-}" ] && [ -e .git ]; then
  ANDREA_GIT_COMMIT="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
fi
export ANDREA_GIT_COMMIT="${ANDREA_GIT_COMMIT:-unknown}"

# ------------------------------------------------------------------ environment
t0=$(date +%s)
SITE="$work/site"            # the carried wheels, unpacked
IMAGE_PY="${ANDREA_REHEARSE_IMAGE_PYTHON:-}"
if [ "$REHEARSE" = 1 ]; then
  R="${ANDREA_REHEARSE_DIR:-${TMPDIR:-/tmp}/andrea-rehearse-$(id -u)}"
  export ANDREA_REHEARSE_DIR="$R"
  PROJECT_PY="${PROJECT_PYTHON:-$root/.venv/bin/python}"
  # the stamp names the image's distributions AND the venv the links point into: a cached
  # rehearsal venv built from another checkout (whose .venv may since be gone) is rebuilt
  stamp="$( { "$PROJECT_PY" scripts/image_env.py image; "$PROJECT_PY" -c 'import sys; print(sys.prefix)'; } \
    | sha256sum | cut -c1-16)"
  if [ -n "$IMAGE_PY" ]; then
    : # the image's own Python and torch (scripts/image_venv.sh): used as it is, no linked site
  elif [ ! -f "$R/venv.$stamp" ]; then
    rm -rf "$R/venv" "$R/image-site" "$R"/venv.*
    base="$("$PROJECT_PY" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')"
    "$base" -m venv --without-pip "$R/venv" >>"$log" 2>&1 \
      && "$PROJECT_PY" scripts/image_env.py site "$R/image-site" >>"$log" 2>&1 \
      && sp="$("$R/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
      && echo "$R/image-site" >"$sp/andrea_image.pth" && touch "$R/venv.$stamp" \
      || { record environment fail $(( $(date +%s) - t0 )) 15 "could not build the rehearsal venv (see logs)"; }
  fi
  mkdir -p "$R/bin"          # the image's system tools, stood in for by the project venv's
  for tool in cuobjdump nvdisasm; do
    src="$("$PROJECT_PY" -c "from andrea_edu.kernels.toolkit import find_binary; print(find_binary('$tool') or '')" 2>/dev/null)"
    [ -n "$src" ] && ln -sf "$src" "$R/bin/$tool"
  done
  PY="$R/venv/bin/python"
  WHEELS="$R/wheels-cp311"
  if [ -n "$IMAGE_PY" ]; then PY="$IMAGE_PY"; WHEELS="$root/.whl"; fi
  # the kernel cache the CPU tests fill (keyed by source, options and NVRTC version): the GPU
  # machine starts cold with 16 cores; 2 shared cores here would spend minutes recompiling
  export ANDREA_CACHE_DIR="${ANDREA_CACHE_DIR:-$HOME/.cache/andrea_edu/kernels}"
  export PATH="$R/bin:$R/venv/bin:/usr/bin:/bin" HOME="$work/home"
  mkdir -p "$HOME"
  unset VIRTUAL_ENV PYTHONHOME
else
  PY="${PYTHON:-}"
  [ -z "$PY" ] && [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
  PY="${PY:-python3}"
  WHEELS="$root/.whl"
fi
export PYTHONPATH="$root:$SITE"
envline="$(timeout -k $KILL_S "$(floor 60)" "$PY" - 2>>"$log" <<'EOF'
import sys, torch
from importlib import metadata
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
def version(dist):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"
try:   # the NVRTC the kernels compile with (kernels.toolkit's own reading)
    from andrea_edu.kernels.toolkit import nvrtc_version
    nvrtc = ".".join(map(str, nvrtc_version()))
except Exception as e:   # said, never fatal: the probe only reports
    nvrtc = f"unreadable ({type(e).__name__})"
print(f"{int(torch.cuda.is_available())} python {sys.version.split()[0]} ({sys.executable}), "
      f"torch {torch.__version__} (CUDA {torch.version.cuda}), cuda-bindings "
      f"{version('cuda-bindings')}, NVRTC {nvrtc}, GPU: {gpu}")
EOF
)"
HAS_GPU="${envline%% *}"; envline="${envline#* }"; [ "$HAS_GPU" = 1 ] || HAS_GPU=0
smi="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
if [ -z "$envline" ]; then
  record environment fail $(( $(date +%s) - t0 )) 15 "$PY cannot import torch (see logs)"
else
  record environment pass $(( $(date +%s) - t0 )) 15 "$envline; nvidia-smi: ${smi:-none}; commit $ANDREA_GIT_COMMIT; stage $STAGE"
fi
NOGPU="skipped: no GPU"

# ------------------------------------------------------------------ wheels
t0=$(date +%s)
wheels_ok=1; why=""
if [ "$REHEARSE" = 1 ] && [ "$STAGE" != 1 ]; then   # stage 1 runs no chapter: no download
  if ! timeout -k $KILL_S 120 bash scripts/gpu_wheels.sh >>"$logs/wheels.log" 2>&1; then
    wheels_ok=0; why="$(grep -m1 'gpu_wheels:.*\(failed\|missing\|over\)' "$logs/wheels.log")"
  elif [ -z "$IMAGE_PY" ] && ! timeout -k $KILL_S 120 bash scripts/gpu_wheels.sh --python 311 >>"$logs/wheels.log" 2>&1; then
    wheels_ok=0; why="$(grep -m1 'gpu_wheels:.*\(failed\|missing\|over\)' "$logs/wheels.log") (cp311)"
  fi
fi
if [ "$STAGE" = 1 ] && [ "$REHEARSE" = 1 ]; then   # the rehearsal's wheel cache is no carry
  wheels_ok=0; why="stage1"
elif [ "$wheels_ok" = 1 ] && ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  wheels_ok=0; why="no wheels in $WHEELS: run bash scripts/gpu_wheels.sh here and carry .whl"
  [ "$STAGE" = 1 ] && why="stage1"
fi
if [ "$wheels_ok" = 1 ]; then
  timeout -k $KILL_S 30 "$PY" - "$WHEELS" "$SITE" >>"$logs/wheels.log" 2>&1 <<'EOF' || { wheels_ok=0; why="unpacking the wheels failed"; }
# pip install --no-index --no-deps --target, without pip: a wheel is a zip; .data/purelib and
# .data/platlib go to the top (headers, scripts and data files are not needed here).
import sys, zipfile
from pathlib import Path
src, site = Path(sys.argv[1]), Path(sys.argv[2])
site.mkdir(parents=True, exist_ok=True)
for whl in sorted(src.glob("*.whl")):
    with zipfile.ZipFile(whl) as z:
        for m in z.infolist():
            parts = m.filename.split("/")
            if len(parts) > 2 and parts[0].endswith(".data"):
                if parts[1] not in ("purelib", "platlib"):
                    continue
                parts = parts[2:]
            dest = site.joinpath(*parts)
            if m.is_dir():
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(z.read(m))
            if (m.external_attr >> 16) & 0o111:
                dest.chmod(0o755)
print(f"unpacked {len(list(src.glob('*.whl')))} wheels into {site}")
EOF
fi
if [ "$wheels_ok" = 1 ] && [ "$STAGE" != 1 ]; then   # what the chapters import (stage 2)
  if ! timeout -k $KILL_S "$(floor 60)" "$PY" - >>"$logs/wheels.log" 2>&1 <<'EOF'
import importlib
for m in ("ipykernel", "nbclient", "nbformat", "jupyter_client", "zmq", "ipywidgets", "IPython",
          "tqdm", "jsonschema"):
    importlib.import_module(m)
from pathlib import Path
import nvidia
from andrea_edu.kernels import toolkit
print("headers:", toolkit.include_dirs())
# the pip wheels alone (image + carried) must hold every header the kernels include, whatever
# a system CUDA install adds: NVRTC gets them from there on a machine without one
dirs = [d for r in nvidia.__path__ for d in Path(r).glob("*/include")]
lack = [h for h in ("cuda_fp16.h", "cuda_bf16.h", "mma.h", "crt/mma.h")
        if not any((d / h).is_file() for d in dirs)]
print("headers in the wheels alone: " + (f"missing {lack}" if lack else "all four"))
raise SystemExit(1 if lack else 0)
EOF
  then wheels_ok=0; why="$(tail -n1 "$logs/wheels.log")"; fi
fi
if [ "$wheels_ok" = 1 ] && [ "$STAGE" = 1 ]; then
  record wheels pass $(( $(date +%s) - t0 )) 30 "$(ls "$WHEELS"/*.whl | wc -l) carried wheels unpacked (stage 1 runs no chapter: not checked further)"
elif [ "$STAGE" = 1 ] && [ "$why" = stage1 ]; then
  record wheels skipped $(( $(date +%s) - t0 )) 30 "stage 1 runs no chapter: no wheels needed (none carried)"
elif [ "$wheels_ok" = 1 ]; then
  record wheels pass $(( $(date +%s) - t0 )) 30 "$(ls "$WHEELS"/*.whl | wc -l) wheels unpacked; notebook modules import; $(grep -m1 '^headers:' "$logs/wheels.log"); $(grep -m1 '^headers in the wheels alone' "$logs/wheels.log")"
else
  record wheels fail $(( $(date +%s) - t0 )) 30 "${why:-see logs}"
fi

# ------------------------------------------------------------------ model (background, CPU)
t_model=$(date +%s); pid_model=""
model_t=$(limit 90); [ "$REHEARSE" = 1 ] && model_t=$(limit 240)   # 2 shared cores, not 16
if runs model; then
  mkdir -p "$logs/model"
  ( timeout -k $KILL_S $model_t "$PY" -m andrea_lab.make_sass_model --out "$logs/model" >"$logs/model.log" 2>&1; echo $? >"$work/model.rc" ) &
  pid_model=$!
fi

# ------------------------------------------------------------------ notebooks (background)
t_nb=$(date +%s)
if [ "$REHEARSE" = 1 ]; then
  notebooks="${REHEARSE_NOTEBOOKS:-book/one_kernel_many_heads.ipynb}"; nbfast=(--fast); nbpar=1; nb_t=$(limit 270)
else
  notebooks="$(ls book/*.ipynb | tr '\n' ' ')"; nbfast=(); nbpar=6; nb_t=$(limit 200)
fi
# a chapter whose inputs cannot exist here (the MiniLM wheel) is skipped with its reason, never
# run to fail (scripts/gpu_notebook_needs.py); recorded below as chapter:<name> rows
nb_skips="$work/notebook_skips.tsv"; : >"$nb_skips"
if runs notebooks && [ "$wheels_ok" = 1 ]; then
  needs="$(timeout -k 2 30 "$PY" scripts/gpu_notebook_needs.py $notebooks 2>>"$log")"
  if [ -n "$needs" ]; then
    grep $'^skip\t' <<<"$needs" >"$nb_skips"
    notebooks="$(awk -F'\t' '$1 == "run" {print $2}' <<<"$needs" | tr '\n' ' ')"
  fi
fi
if runs notebooks && [ "$wheels_ok" = 1 ] && [ "$nb_t" -gt 0 ] && [ -n "${notebooks// /}" ]; then
  ( printf '%s\n' $notebooks | timeout -k $KILL_S $nb_t xargs -P "$nbpar" -I{} "$PY" -m andrea_lab.execute_chapters {} \
      --out "$work/notebooks" --timeout 180 "${nbfast[@]}" >"$logs/notebooks.log" 2>&1
    echo $? >"$work/notebooks.rc" ) &
  pid_nb=$!
else
  pid_nb=""
fi

# ------------------------------------------------------------------ correctness (GPU shared)
# the image's profilers: on PATH, else where the CUDA toolkit and Nsight Compute install them
SAN="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -n1)"
t0=$(date +%s)
b=$(limit 150); [ "$STAGE" = 1 ] && b=$(limit 90)   # stage 1: gpu-check alone, 16 processes
if [ "$HAS_GPU" = 1 ] && [ "$b" -gt 0 ]; then
  mkdir -p "$work/gpucheck"
  # the registered kernels (kernels/registry.py): their backends, then their versions
  { read -r kbackends; read -r kversions; } < <(timeout -k 2 "$(floor 60)" "$PY" scripts/gpu_kernel_cases.py kernels 2>>"$logs/kernels_list.log")
  [ -z "${kbackends:-}" ] && echo "gpu_kernel_cases.py kernels listed no kernel" >>"$logs/kernels_list.log"
  cpids=()
  for be in $(runs gpu-check && echo ${kbackends:-} auto); do   # one process per backend
    ( timeout -k $KILL_S $b "$PY" -m andrea_lab.bench gpu-check --out "$work/gpucheck/$be" --skip-pytest \
        --backends $be $([ "$STAGE" = 1 ] && echo --small) >"$logs/gpu_check_$be.log" 2>&1; echo $? >"$work/gpucheck/$be.rc" ) &
    cpids+=($!)
  done
  if runs gpu-tests; then
    ( ANDREA_FAST=1 timeout -k $KILL_S $b "$PY" -m pytest -q -m gpu -p no:cacheprovider --noconftest \
        $(grep -l 'pytest.mark.gpu' tests/test_*.py) >"$logs/gpu_tests.log" 2>&1; echo $? >"$work/gpu_tests.rc" ) &
    cpids+=($!)
  fi
  if runs sanitizer && [ -n "$SAN" ]; then
    mkdir -p "$logs/sanitizer"
    # three processes in turn per tool, each with its share (kill graces included)
    per=$(( (b - 3 * KILL_S) / 3 )); [ "$per" -lt 5 ] && per=5
    # the options this compute-sanitizer knows (an older one lacks some: said in the log)
    san_opts=(--error-exitcode 9 --target-processes all)
    san_help="$(timeout -k 2 10 "$SAN" --help 2>&1)"
    for opt in "--report-api-errors no" "--kernel-name kns=attention_v"; do
      if grep -q -- "${opt%% *}" <<<"$san_help"; then san_opts+=($opt)
      else echo "compute-sanitizer lacks ${opt%% *}: run without it" >>"$logs/sanitizer/options.txt"; fi
    done
    for tool in memcheck racecheck synccheck initcheck; do
      ( for ver in ${kversions:-}; do   # one process per tool and kernel version
          timeout -k $KILL_S $per "$SAN" --tool "$tool" "${san_opts[@]}" \
            "$PY" scripts/gpu_kernel_cases.py small --version $ver >"$logs/sanitizer/${tool}_$ver.log" 2>&1
          echo $? >"$logs/sanitizer/${tool}_$ver.rc"
        done ) &
      cpids+=($!)
    done
  fi
  [ ${#cpids[@]} -gt 0 ] && wait "${cpids[@]}"
  used=$(( $(date +%s) - t0 ))
  # gpu-check: merge what each process wrote (one that wrote nothing is named as missing)
  parts=(); lines=()
  for be in $(runs gpu-check && echo ${kbackends:-} auto); do
    parts+=("$work/gpucheck/$be/gpucheck.json")
    rc=$(cat "$work/gpucheck/$be.rc" 2>/dev/null || echo '?')
    case $rc in 0|1) ;; *) lines+=("$be: $(why "$rc")") ;; esac
  done
  if runs gpu-check; then   # the merge imports torch: a floor, never 20 s (issue 41 item 8)
    merged="$(timeout -k 2 "$(floor 20)" "$PY" -m andrea_lab.bench gpu-check --merge "${parts[@]}" --out "$OUT" 2>&1)"; mrc=$?
    cp -r "$work/gpucheck" "$logs/" 2>/dev/null
    extra="$(IFS=';'; echo "${lines[*]:-}")"
    if [ $mrc = 0 ]; then record gpu-check pass $used $b "$merged"
    else record gpu-check fail $used $b "$merged${extra:+; $extra}"; fi
  fi
  if runs gpu-tests; then
    rc=$(cat "$work/gpu_tests.rc" 2>/dev/null || echo '?')
    if [ "$rc" = 0 ]; then record gpu-tests pass $used $b "$(tail -n1 "$logs/gpu_tests.log")"
    else record gpu-tests fail $used $b "$(why "$rc"); $(tail -n1 "$logs/gpu_tests.log" | cut -c1-200)"; fi
  fi
  if ! runs sanitizer; then
    :
  elif [ -z "${kversions:-}" ]; then
    record sanitizer fail 0 $b "no kernel version listed (scripts/gpu_kernel_cases.py kernels): nothing checked"
  elif [ -n "$SAN" ]; then
    verdict="$(timeout -k 2 30 "$PY" scripts/gpu_sanitizer_report.py --verdict "$logs/sanitizer" 2>&1)"; vrc=$?
    case $vrc in
      0) record sanitizer pass $used $b "$verdict" ;;
      3) record sanitizer refused $used $b "$verdict" ;;
      *) record sanitizer fail $used $b "$verdict" ;;
    esac
  else
    record sanitizer skipped 0 $b "compute-sanitizer not found on PATH"
  fi
elif [ "$HAS_GPU" = 1 ]; then
  for s_ in gpu-check gpu-tests sanitizer; do runs $s_ && record $s_ skipped 0 0 "$NOLEFT"; done
elif [ "$STAGE" = 1 ]; then
  record gpu-check skipped 0 "$b" "$NOGPU"
else
  runs gpu-check && record gpu-check skipped 0 150 "$NOGPU"
  record gpu-tests skipped 0 150 "$NOGPU"
  if [ "$REHEARSE" = 1 ]; then   # what the GPU run imports must import here: collect the gpu tests
    t0=$(date +%s); b=$(limit 180)
    if timeout -k $KILL_S $b "$PY" -m pytest --collect-only -q -m gpu --noconftest -p no:cacheprovider \
        $(grep -l 'pytest.mark.gpu' tests/test_*.py) >"$logs/gpu_tests_collect.log" 2>&1; then
      record gpu-tests-collect pass $(( $(date +%s) - t0 )) $b "$(tail -n1 "$logs/gpu_tests_collect.log")"
    else
      record gpu-tests-collect fail $(( $(date +%s) - t0 )) $b "$(grep -m1 -E 'Error|error' "$logs/gpu_tests_collect.log" || echo 'timed out or no output')"
    fi
  fi
  t0=$(date +%s)
  rc=0; timeout -k $KILL_S "$(floor 60)" "$PY" scripts/gpu_kernel_cases.py small --version v3 >"$logs/sanitizer_driver.log" 2>&1 || rc=$?
  if [ "$rc" = 2 ] && grep -q "skipped: no GPU" "$logs/sanitizer_driver.log"; then
    record sanitizer skipped $(( $(date +%s) - t0 )) 150 "$NOGPU (its driver script imports and stops cleanly)"
  else
    record sanitizer fail $(( $(date +%s) - t0 )) 150 "driver script: status $rc: $(tail -n1 "$logs/sanitizer_driver.log")"
  fi
fi

# ------------------------------------------------------------------ faults (rehearsal, bg)
# the fault-injecting stand-ins run beside the steps that follow (after the gpu tests'
# collection, which a loaded 2-core machine would otherwise starve) and are read at the end
if [ "$REHEARSE" = 1 ] && runs faults; then
  fw="$work/faults"; mkdir -p "$fw"
  ( t0=$(date +%s)
    timeout -k 2 200 "$PY" scripts/gpu_fault_standin.py sticky cuda-wmma "$fw/wmma" >"$logs/fault_sticky_wmma.log" 2>&1; echo $? >"$fw/wmma.rc"
    echo $(( $(date +%s) - t0 )) >"$fw/sticky.s" ) &
  pid_f1=$!
  ( timeout -k 2 200 "$PY" scripts/gpu_fault_standin.py sticky cuda-naive "$fw/naive" >"$logs/fault_sticky_naive.log" 2>&1; echo $? >"$fw/naive.rc" ) &
  pid_f2=$!
  ( t0=$(date +%s); timeout -k 2 200 "$PY" scripts/gpu_fault_standin.py bench "$fw/bench" >"$logs/fault_bench.log" 2>&1; echo $? >"$fw/bench.rc"; echo $(( $(date +%s) - t0 )) >"$fw/bench.s" ) &
  pid_f3=$!
  ( t0=$(date +%s); timeout -k 2 3 "$PY" scripts/gpu_fault_standin.py hang >"$logs/fault_hang.log" 2>&1; echo $? >"$fw/hang.rc"; echo $(( $(date +%s) - t0 )) >"$fw/hang.s" ) &
  pid_f4=$!
  # a step cut by the deadline: a pretend deadline that leaves it FLOOR_S (120 s: an
  # interpreter that imports torch can take over 30 s to start on a loaded machine; 30 s cut a
  # rehearsal under torch 2.11 before gpucheck had begun), a command that wants about 160 s
  ( deadline=$(( $(date +%s) + RESERVE_S + FLOOR_S )); b=$(limit 999)
    t0=$(date +%s); timeout -k 2 "$b" "$PY" scripts/gpu_fault_standin.py slow "$fw/slow" >"$logs/fault_budget.log" 2>&1
    echo $? >"$fw/slow.rc"; echo "$b" >"$fw/slow.limit"; echo $(( $(date +%s) - t0 )) >"$fw/slow.s" ) &
  pid_f5=$!
fi

# ------------------------------------------------------------------ notebooks: wait
if [ -n "$pid_nb" ]; then
  wait "$pid_nb"
  rc="$(cat "$work/notebooks.rc" 2>/dev/null || echo '?')"
  n_ok=$(grep -c ': ok (' "$logs/notebooks.log" 2>/dev/null); n_ok=${n_ok:-0}
  n_all=$(printf '%s\n' $notebooks | grep -c .)
  bad="$(grep 'FAILED' "$logs/notebooks.log" | sed 's/^\[execute\] //' | cut -c1-160 | head -n 4 | tr '\n' ';')"
  note=""
  if [ "$HAS_GPU" = 1 ]; then   # run beside gpu-check and the sanitizer: each chapter says so
    note="$(timeout -k 2 30 "$PY" scripts/gpu_summary.py --mark-under-load "$work/notebooks" 2>&1)"
  fi
  what="$n_ok/$n_all chapters ran$([ "$REHEARSE" = 1 ] && echo " (rehearsal: $notebooks, fast mode)")${note:+; $note}"
  # a chapter cut by the group's time-out is lost whole (a notebook is written when it ends):
  # its log lines say which ran; stated as a known limit in the header
  timeout -k 2 30 tar -czf "$OUT/.notebooks.tar.gz.tmp" -C "$work" notebooks 2>>"$log" \
    && mv -f "$OUT/.notebooks.tar.gz.tmp" "$OUT/notebooks.tar.gz"
  n_skip=$(grep -c . "$nb_skips" 2>/dev/null); n_skip=${n_skip:-0}
  [ "$n_skip" -gt 0 ] && what="$what; $n_skip skipped with their reason (chapter:<name> rows)"
  if [ "$n_ok" = "$n_all" ]; then
    record notebooks pass $(( $(date +%s) - t_nb )) $nb_t "$what"
  else
    record notebooks fail $(( $(date +%s) - t_nb )) $nb_t "$what; $(why "$rc"); $bad"
  fi
elif ! runs notebooks; then
  :   # not this stage's
elif [ "$wheels_ok" = 1 ] && [ -z "${notebooks// /}" ]; then
  record notebooks skipped 0 0 "no chapter can run here (each skipped with its reason below)"
elif [ "$wheels_ok" = 1 ]; then
  record notebooks skipped 0 0 "$NOLEFT"
else
  record notebooks skipped 0 "$nb_t" "the wheels step failed: no Jupyter kernel to run them"
fi
# each chapter whose inputs cannot exist here: skipped, with its reason (never a failure)
while IFS=$'\t' read -r _ nb why_nb; do
  [ -n "$nb" ] && record "chapter:$(basename "$nb" .ipynb)" skipped 0 0 "$why_nb"
done <"$nb_skips"

# ------------------------------------------------------------------ headline (stage 1)
# the head_dim headline at the headline shape: every kernel, attention()'s choice with pad off
# and on, SDPA; cold beside warm at head_dim 64; bench_headdim_<gpu>.json written after every
# case, labelled incomplete inside until the sweep ends (a cut leaves it landable)
if runs headline; then
  t0=$(date +%s)
  b=$(limit 100)
  if [ "$HAS_GPU" = 1 ] && [ "$b" -gt 0 ]; then
    timeout -k $KILL_S $b "$PY" -m andrea_lab.bench gpu-headline --out "$OUT" --budget-s $(( b * 3 / 4 )) --no-progress \
      >"$logs/gpu_headline.log" 2>&1
    rc=$?
    line="$(grep '^\[bench\]' "$logs/gpu_headline.log" | sed 's/ -> .*//' | tr '\n' ';')"
    case $rc in
      0) record headline pass $(( $(date +%s) - t0 )) $b "$line" ;;
      *) record headline fail $(( $(date +%s) - t0 )) $b "$(why $rc) (what was measured is in bench_headdim_*.json, labelled incomplete); $line" ;;
    esac
  elif [ "$HAS_GPU" = 1 ]; then
    record headline skipped 0 0 "$NOLEFT"
  elif [ "$REHEARSE" = 1 ]; then   # its code path, in the image's environment, at CPU sizes
    timeout -k $KILL_S "$(floor 150)" "$PY" scripts/gpu_fault_standin.py suite gpu-headline --out "$work/headline" --no-progress \
      >"$logs/gpu_headline.log" 2>&1
    rc=$?
    if [ $rc = 0 ]; then
      record headline skipped $(( $(date +%s) - t0 )) $b "$NOGPU (its sweep ran here at CPU fast sizes, nothing kept: $(grep -m1 '^\[bench\]' "$logs/gpu_headline.log" | sed 's/ -> .*//'))"
    else
      record headline fail $(( $(date +%s) - t0 )) $b "the sweep does not run at CPU sizes: $(why $rc): $(tail -n1 "$logs/gpu_headline.log" | cut -c1-160)"
    fi
  else
    record headline skipped 0 $b "$NOGPU"
  fi
fi

# ------------------------------------------------------------------ bench (alone on the GPU)
t0=$(date +%s)
b=$(limit 110)
if ! runs bench; then
  :
elif [ "$HAS_GPU" = 1 ] && [ "$b" -gt 0 ]; then
  timeout -k $KILL_S $b "$PY" -m andrea_lab.bench gpu-suite --out "$OUT" --budget-s $(( b * 3 / 4 )) --no-progress \
    >"$logs/gpu_bench.log" 2>&1
  rc=$?
  line="$(grep '^\[bench\]' "$logs/gpu_bench.log" | sed 's/ -> .*//' | tr '\n' ';')"
  case $rc in
    0) record bench pass $(( $(date +%s) - t0 )) $b "$line" ;;
    *) record bench fail $(( $(date +%s) - t0 )) $b "$(why $rc) (checkpointed JSON kept); $line" ;;
  esac
elif [ "$HAS_GPU" = 1 ]; then
  record bench skipped 0 0 "$NOLEFT"
else
  record bench skipped 0 110 "$NOGPU"
fi

# ------------------------------------------------------------------ pipeline timing
t0=$(date +%s)
b=$(limit 45)
if ! runs pipeline; then
  :
elif [ "$HAS_GPU" = 1 ] && [ "$b" -gt 0 ]; then
  # written apart, then the JSON alone into $OUT: its writer adds a SHA256SUMS to the folder it
  # writes, a ninth file under $OUT (8 come back); that manifest goes into logs.tar.gz
  mkdir -p "$work/pipeline"
  timeout -k $KILL_S $b "$PY" -m andrea_lab.pipeline_timing --config ANDREA-120M -B 8 -T 1024 \
    --dtype bfloat16 --repeats 10 --out "$work/pipeline" >"$logs/pipeline.log" 2>&1
  rc=$?
  for f in "$work"/pipeline/pipeline_*.json; do   # through a dot name: a cut leaves no half file
    [ -f "$f" ] && cp "$f" "$OUT/.$(basename "$f").tmp" && mv -f "$OUT/.$(basename "$f").tmp" "$OUT/$(basename "$f")"
  done
  cp "$work/pipeline/SHA256SUMS" "$logs/pipeline_SHA256SUMS" 2>/dev/null
  if [ $rc = 0 ]; then record pipeline pass $(( $(date +%s) - t0 )) $b "$(tail -n1 "$logs/pipeline.log")"
  else record pipeline fail $(( $(date +%s) - t0 )) $b "$(why $rc): $(tail -n1 "$logs/pipeline.log" | cut -c1-160)"; fi
elif [ "$HAS_GPU" = 1 ]; then
  record pipeline skipped 0 0 "$NOLEFT"
else
  record pipeline skipped 0 45 "$NOGPU"
fi

# ------------------------------------------------------------------ ncu
t0=$(date +%s)
b=$(limit 70)
NCU="$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n1)"
if ! runs ncu; then
  :
elif [ "$HAS_GPU" = 1 ] && [ -n "$NCU" ] && [ "$b" -gt 0 ]; then
  # bank conflicts per shared-memory instruction kind: LSU loads/stores (ld.shared, st.shared),
  # ldmatrix (_op_ldsm) and cp.async global->shared (_op_ldgsts): v3 moves its tiles through the
  # last two, which the LSU counters do not count
  metrics="sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldgsts.sum,sm__warps_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum"
  timeout -k $KILL_S $(( b * 2 / 3 )) "$NCU" --clock-control none --target-processes all -k "regex:attention_v[23]" \
    --metrics "$metrics" --csv "$PY" scripts/gpu_kernel_cases.py headline >"$logs/ncu.csv" 2>"$logs/ncu.log"
  rc=$?
  left=$(( b - ($(date +%s) - t0) ))
  if [ $rc != 0 ] && [ $rc != 124 ] && [ $rc != 137 ] && [ $left -ge 15 ] && grep -qiE 'metric|not found|invalid' "$logs/ncu.log" "$logs/ncu.csv"; then
    # a metric name this ncu does not know: first without the ldmatrix/cp.async counters
    echo "--- retried without the _op_ldsm/_op_ldgsts counters" >>"$logs/ncu.log"
    timeout -k $KILL_S $(( left / 2 )) "$NCU" --clock-control none --target-processes all -k "regex:attention_v[23]" \
      --metrics "$(tr ',' '\n' <<<"$metrics" | grep -v -e _op_ldsm -e _op_ldgsts | paste -sd,)" --csv \
      "$PY" scripts/gpu_kernel_cases.py headline >"$logs/ncu.csv" 2>>"$logs/ncu.log"
    rc=$?
    left=$(( b - ($(date +%s) - t0) ))
  fi
  if [ $rc != 0 ] && [ $rc != 124 ] && [ $rc != 137 ] && [ $left -ge 15 ] && grep -qiE 'metric|not found|invalid' "$logs/ncu.log" "$logs/ncu.csv"; then
    # still refused: its standard sections hold most of the same numbers
    echo "--- retried with --section SpeedOfLight --section Occupancy" >>"$logs/ncu.log"
    timeout -k $KILL_S $left "$NCU" --clock-control none --target-processes all -k "regex:attention_v[23]" \
      --section SpeedOfLight --section Occupancy --csv "$PY" scripts/gpu_kernel_cases.py headline \
      >"$logs/ncu.csv" 2>>"$logs/ncu.log"
    rc=$?
  fi
  if [ $rc = 0 ] && grep -q '"Metric Name"' "$logs/ncu.csv"; then
    record ncu pass $(( $(date +%s) - t0 )) $b "$(grep -c 'attention_v' "$logs/ncu.csv") metric rows (table below)"
  else
    record ncu refused $(( $(date +%s) - t0 )) $b "$(why $rc): $(grep -m1 -E 'ERR|rror|permission' "$logs/ncu.log" "$logs/ncu.csv" | cut -c1-160)"
  fi
elif [ "$HAS_GPU" = 1 ] && [ "$b" -gt 0 ]; then
  record ncu skipped 0 $b "ncu not found on PATH"
elif [ "$HAS_GPU" = 1 ]; then
  record ncu skipped 0 0 "$NOLEFT"
else
  record ncu skipped 0 70 "$NOGPU"
fi

# ------------------------------------------------------------------ tensor-core ceiling
t0=$(date +%s)
b=$(limit 30)
if ! runs mma-ceiling; then
  :
elif [ "$HAS_GPU" = 1 ] && [ "$b" -gt 0 ]; then
  timeout -k $KILL_S $b "$PY" scripts/gpu_mma_ceiling.py --out "$logs/mma_ceiling.json" >"$logs/mma_ceiling.log" 2>&1
  rc=$?
  case $rc in
    0) record mma-ceiling pass $(( $(date +%s) - t0 )) $b "$(grep -E '^(mma_sync|wmma)_loop' "$logs/mma_ceiling.log" | tr '\n' ';')" ;;
    2) record mma-ceiling skipped $(( $(date +%s) - t0 )) $b "$(tail -n1 "$logs/mma_ceiling.log")" ;;
    *) record mma-ceiling fail $(( $(date +%s) - t0 )) $b "$(why $rc): $(tail -n1 "$logs/mma_ceiling.log" | cut -c1-160)" ;;
  esac
elif [ "$HAS_GPU" = 1 ]; then
  record mma-ceiling skipped 0 0 "$NOLEFT"
else   # the loops compile here; only the launch needs the GPU
  if timeout -k $KILL_S "$(floor 60)" "$PY" scripts/gpu_mma_ceiling.py --compile-only >"$logs/mma_ceiling.log" 2>&1; then
    record mma-ceiling skipped $(( $(date +%s) - t0 )) 30 "$NOGPU ($(head -n1 "$logs/mma_ceiling.log"))"
  else
    record mma-ceiling fail $(( $(date +%s) - t0 )) 30 "the loops do not compile: $(tail -n1 "$logs/mma_ceiling.log" | cut -c1-160)"
  fi
fi

# ------------------------------------------------------------------ model: wait
[ -n "$pid_model" ] && wait "$pid_model"
rc="$(cat "$work/model.rc" 2>/dev/null || echo '?')"
if [ -z "$pid_model" ]; then
  :   # not this stage's
elif [ "$rc" = 0 ] && [ -s "$logs/model/sass_model.json" ]; then
  record model pass $(( $(date +%s) - t_model )) $model_t "sass_model.json (in logs.tar.gz): $(grep -c '^\[model\]' "$logs/model.log") kernels at hd=64 (a model, not a measurement)"
else
  record model fail $(( $(date +%s) - t_model )) $model_t "$(why "$rc"): $(tail -n1 "$logs/model.log" | cut -c1-160)"
fi

# ------------------------------------------------------------------ faults: read (rehearsal)
if [ "$REHEARSE" = 1 ] && runs faults; then
  wait $pid_f1 $pid_f2 $pid_f3 $pid_f4 $pid_f5
  fw="$work/faults"
  # a sticky error: one process stopped, reported once with backend and case; the other whole
  merged="$("$PY" -m andrea_lab.bench gpu-check --merge "$fw/wmma/gpucheck.json" "$fw/naive/gpucheck.json" --out "$fw" 2>&1)"
  if verdict="$("$PY" - "$fw/gpucheck.json" 2>&1 <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
by = r["by_backend"]
stop = r.get("stopped", "")
ok = (stop.count("sticky CUDA error") == 1 and "cuda-wmma" in stop and "case B=" in stop
      and by["cuda-wmma"]["failed"] == 1 and by["cuda-naive"]["failed"] == 0
      and by["cuda-naive"]["cases"] > by["cuda-wmma"]["cases"] and not r["passed"])
print(("contained" if ok else "NOT contained") +
      f": cuda-wmma's process stopped after {by['cuda-wmma']['cases']} cases, reported once "
      f"({stop[:150]}); cuda-naive's own process: "
      f"{by['cuda-naive']['passed']}/{by['cuda-naive']['cases']} passed")
raise SystemExit(0 if ok else 1)
EOF
)"; then record fault-sticky pass "$(cat "$fw/sticky.s")" 200 "$verdict"
  else record fault-sticky fail "$(cat "$fw/sticky.s" 2>/dev/null)" 200 "$verdict; $merged"; fi
  rc=$(cat "$fw/bench.rc" 2>/dev/null || echo '?')
  line="$(grep -m1 '^bench stand-in' "$logs/fault_bench.log")"
  if [ "$rc" = 0 ] && [ -s "$fw/bench/bench_headdim_cpu.json" ]; then
    record fault-bench pass "$(cat "$fw/bench.s")" 200 "contained: $line; $(grep -m1 '^skipped because' "$logs/fault_bench.log" | cut -c1-120)"
  else
    record fault-bench fail "$(cat "$fw/bench.s" 2>/dev/null)" 200 "NOT contained ($(why "$rc")): ${line:-$(tail -n1 "$logs/fault_bench.log")}"
  fi
  rc=$(cat "$fw/hang.rc" 2>/dev/null || echo '?')
  if [ "$rc" = 137 ]; then
    record fault-hang pass "$(cat "$fw/hang.s")" 3 "contained: a kernel hung past SIGTERM was $(why 137 | sed 's/5 s/2 s/'), and the suite went on"
  else
    record fault-hang fail "$(cat "$fw/hang.s" 2>/dev/null)" 3 "NOT contained: $(why "$rc")"
  fi
  rc=$(cat "$fw/slow.rc" 2>/dev/null || echo '?')
  partial="$("$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); print(f\"{r['n_cases']} cases, complete={r['complete']}, {r.get('stopped', '')[:60]}\")" "$fw/slow/gpucheck.json" 2>/dev/null)"
  # timeout answers 124 for a command it stopped (137 when the kill-after ended its exit, which
  # a loaded machine can slow past 2 s): either is contained when the partial report is there
  if { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && [[ "$partial" == *"complete=False"* ]]; then
    record fault-budget pass "$(cat "$fw/slow.s")" "$(cat "$fw/slow.limit")" "contained: the deadline gave a step that wanted 999 s $(cat "$fw/slow.limit") s; SIGTERM at its limit$([ "$rc" = 137 ] && echo ' (its exit outlasted the 2 s kill-after)'), and gpucheck kept a partial report ($partial)"
  else
    record fault-budget fail "$(cat "$fw/slow.s" 2>/dev/null)" "$(cat "$fw/slow.limit" 2>/dev/null)" "NOT contained: $(why "$rc"); ${partial:-no partial report}"
  fi
fi

# ------------------------------------------------------------------ summary (final)
t0=$(date +%s)
runs notebooks && { [ -f "$OUT/notebooks.tar.gz" ] || tar -czf "$OUT/notebooks.tar.gz" -C "$work" notebooks 2>>"$log"; }
record summary pass $(( $(date +%s) - t0 )) $RESERVE_S "gpu_summary.md, $(runs notebooks && echo "notebooks.tar.gz ($(ls "$work/notebooks" | wc -l) executed), ")logs.tar.gz; total $(( $(date +%s) - start )) s of the ${DEADLINE_S} s deadline (stage $STAGE)"
say "files under $OUT: $(ls "$OUT" | tr '\n' ' ')"
status=0; grep -q $'\tfail\t' "$steps" && status=1
say "exit status $status"
(rm -rf "$work" </dev/null >/dev/null 2>&1 &)   # thousands of small files: no one waits
exit $status
