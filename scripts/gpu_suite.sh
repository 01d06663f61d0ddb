#!/usr/bin/env bash
# The first-contact run for a lent GPU machine (an H200): everything it should show, in one
# command of at most 9 minutes, writing at most 8 files under $OUT.
#
#   OUT=/some/folder bash scripts/gpu_suite.sh      on the device tool ($OUT is set there);
#                                                   carry .whl (bash scripts/gpu_wheels.sh first)
#   bash scripts/gpu_suite.sh --rehearse            on a CPU: the same script in an environment
#                                                   that holds only what the GPU image holds
#   ANDREA_GIT_COMMIT=<sha> ...                     the commit, when the copy has no .git folder
#
# Steps (budget in seconds: each has a hard timeout; "bg" runs beside the steps after it):
#   environment    15  the image's python (/opt/torch/.venv/bin/python3, else python3); versions
#   wheels         30  install the carried .whl/ into a folder on PYTHONPATH (unzip: no pip
#                      needed, no network), then import what the notebooks need and find the
#                      CUDA headers (crt/mma.h); rehearsal: gpu_wheels.sh first (network)
#   model       bg 90  SASS counts + lower-bound time MODEL of v1, v2, v3 (CPU only)
#   notebooks  bg 270  every chapter executed, 6 at a time, per-cell timeout 240 s; they share
#                      the GPU with gpu-check and the sanitizer (correctness steps, not timed):
#                      any time a chapter prints was measured under that load
#   gpu-check     150  attention(backend=cuda-naive|cuda-wmma|cuda-flash|auto) vs the fp32
#                      reference, 633 cases, then pytest -m gpu (60 s of it)
#   sanitizer      90  compute-sanitizer memcheck, racecheck, synccheck, initcheck at once, each
#                      over scripts/gpu_kernel_cases.py small (v1, v2, v3; tails, causal, fp16,
#                      bf16); a refusal (exit status other than 0 or 9) is reported, not fatal
#   bench         120  python -m andrea_edu.bench gpu-suite, 95 s of measuring (alone on the GPU)
#   ncu            70  Nsight Compute counters of v2 and v3 at the headline case (B=8, T=1024,
#                      nh=12, hs=64, causal, bf16), --clock-control none; a metric this ncu does
#                      not know: retried with its SpeedOfLight and Occupancy sections in the
#                      time left; a refusal is reported
#   summary         5  gpu_summary.md, notebooks.tar.gz, logs.tar.gz
# Worst case: 15 + 30 + max(270 bg, 150 + 90) + 120 + 70 + 5 = 510 s (9 minutes = 540 s);
# expected about 6 minutes.
# Files under $OUT (8 at most): gpu_summary.md, gpucheck.json, bench_{projections,layout,
# headdim}_<gpu>.json, sass_model.json, notebooks.tar.gz, logs.tar.gz. Copy the bench_*.json and
# sass_model.json into book/data/ and commit them: the chapters read them from there.
#
# --rehearse (in the test command, tests/test_gpu_suite.py): GPU steps say "skipped: no GPU";
# everything else runs, in a venv at $ANDREA_REHEARSE_DIR (default /tmp/andrea-rehearse-<uid>)
# whose site-packages exposes ONLY the image's distributions (scripts/image_env.py site: links
# to the project venv's copies, real metadata), plus the carried wheels. Differences from the
# image, said here once: Python 3.11 (the project venv's) instead of 3.12, so the carried wheels
# are installed from a cp311 download of the same versions (the cp312 set is still downloaded
# and checked); torch and the CUDA wheels at the project's pinned versions, not the image's
# torch 2.11; no nvcc, so no /usr/local/cuda headers (the carried nvidia-cuda-crt must do); the
# image's system cuobjdump/nvdisasm are stood in for by the project venv's. Notebooks: only
# $REHEARSE_NOTEBOOKS (default: book/one_kernel_many_heads.ipynb), in fast mode (ANDREA_FAST=1),
# to stay within ~3 minutes on 2 cores; the model step gets 240 s instead of 90 and reuses the
# CPU tests' kernel cache; a rehearsal-only step collects the gpu-marked tests (pytest
# --collect-only -m gpu --noconftest, 180 s): what gpu-check's pytest imports must import. A wheel download that fails for want of network makes
# the wheels step fail in a rehearsal (one line says so) and the notebooks step skip; on the GPU
# machine there is no network by design and the wheels must have been carried (a missing one
# fails the wheels step, and the notebooks are skipped, the rest runs).
# Exit status: 0 no step failed (skipped and refused are not failures), 1 a step failed, 2 bad
# arguments.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
REHEARSE=0
case "${1:-}" in
  "") ;;
  --rehearse) REHEARSE=1 ;;
  *) echo "gpu_suite: unknown argument '$1' (allowed: --rehearse)" >&2; exit 2 ;;
esac
OUT="${OUT:-$root/gpu-out}"
mkdir -p "$OUT" || { echo "gpu_suite: cannot create OUT=$OUT" >&2; exit 2; }
work="$(mktemp -d "${TMPDIR:-/tmp}/gpu_suite.XXXXXX")"
logs="$work/logs"; mkdir -p "$logs" "$work/notebooks"
steps="$work/steps.tsv"; : >"$steps"
log="$logs/gpu_suite.log"
start=$(date +%s)
say() { echo "[gpu_suite +$(( $(date +%s) - start ))s] $*" | tee -a "$log"; }
# record NAME STATUS SECONDS BUDGET REASON
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "${5//$'\n'/ }" >>"$steps"; say "$1: $2 ($3 s of $4) $5"; }
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"

if [ -z "${ANDREA_GIT_COMMIT:-}" ] && [ -e .git ]; then
  ANDREA_GIT_COMMIT="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
fi
export ANDREA_GIT_COMMIT="${ANDREA_GIT_COMMIT:-unknown}"

# ------------------------------------------------------------------ environment
t0=$(date +%s)
SITE="$work/site"            # the carried wheels, unpacked
if [ "$REHEARSE" = 1 ]; then
  R="${ANDREA_REHEARSE_DIR:-${TMPDIR:-/tmp}/andrea-rehearse-$(id -u)}"
  export ANDREA_REHEARSE_DIR="$R"
  PROJECT_PY="${PROJECT_PYTHON:-$root/.venv/bin/python}"
  stamp="$("$PROJECT_PY" scripts/image_env.py image | sha256sum | cut -c1-16)"
  if [ ! -f "$R/venv.$stamp" ]; then
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
  # the kernel cache the CPU tests fill (keyed by source, options and NVRTC version): the GPU
  # machine starts cold with 16 cores; 2 shared cores here would spend minutes recompiling
  export ANDREA_CACHE_DIR="${ANDREA_CACHE_DIR:-$HOME/.cache/andrea_edu/kernels}"
  export PATH="$R/bin:$R/venv/bin:/usr/bin:/bin" HOME="$work/home"
  mkdir -p "$HOME"
  WHEELS="$R/wheels-cp311"
  unset VIRTUAL_ENV PYTHONHOME
else
  PY="${PYTHON:-}"
  [ -z "$PY" ] && [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
  PY="${PY:-python3}"
  WHEELS="$root/.whl"
fi
export PYTHONPATH="$root:$SITE"
envline="$("$PY" - 2>>"$log" <<'EOF'
import sys, torch
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
print(f"{int(torch.cuda.is_available())} python {sys.version.split()[0]} ({sys.executable}), "
      f"torch {torch.__version__} (CUDA {torch.version.cuda}), GPU: {gpu}")
EOF
)"
HAS_GPU="${envline%% *}"; envline="${envline#* }"; [ "$HAS_GPU" = 1 ] || HAS_GPU=0
smi="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
if [ -z "$envline" ]; then
  record environment fail $(( $(date +%s) - t0 )) 15 "$PY cannot import torch (see logs)"
else
  record environment pass $(( $(date +%s) - t0 )) 15 "$envline; nvidia-smi: ${smi:-none}; commit $ANDREA_GIT_COMMIT"
fi
NOGPU="skipped: no GPU"

# ------------------------------------------------------------------ wheels
t0=$(date +%s)
wheels_ok=1; why=""
if [ "$REHEARSE" = 1 ]; then
  if ! timeout 120 bash scripts/gpu_wheels.sh >>"$logs/wheels.log" 2>&1; then
    wheels_ok=0; why="$(grep -m1 'gpu_wheels:.*\(failed\|missing\|over\)' "$logs/wheels.log")"
  elif ! timeout 120 bash scripts/gpu_wheels.sh --python 311 >>"$logs/wheels.log" 2>&1; then
    wheels_ok=0; why="$(grep -m1 'gpu_wheels:.*\(failed\|missing\|over\)' "$logs/wheels.log") (cp311)"
  fi
fi
if [ "$wheels_ok" = 1 ] && ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  wheels_ok=0; why="no wheels in $WHEELS: run bash scripts/gpu_wheels.sh here and carry .whl"
fi
if [ "$wheels_ok" = 1 ]; then
  timeout 30 "$PY" - "$WHEELS" "$SITE" >>"$logs/wheels.log" 2>&1 <<'EOF' || { wheels_ok=0; why="unpacking the wheels failed"; }
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
if [ "$wheels_ok" = 1 ]; then
  if ! timeout 60 "$PY" - >>"$logs/wheels.log" 2>&1 <<'EOF'
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
if [ "$wheels_ok" = 1 ]; then
  record wheels pass $(( $(date +%s) - t0 )) 30 "$(ls "$WHEELS"/*.whl | wc -l) wheels unpacked; notebook modules import; $(grep -m1 '^headers:' "$logs/wheels.log"); $(grep -m1 '^headers in the wheels alone' "$logs/wheels.log")"
else
  record wheels fail $(( $(date +%s) - t0 )) 30 "${why:-see logs}"
fi

# ------------------------------------------------------------------ model (background, CPU)
t_model=$(date +%s)
model_t=90; [ "$REHEARSE" = 1 ] && model_t=240   # 2 shared cores, not 16
( timeout $model_t "$PY" -m andrea_edu.kernels.time_model --out "$OUT" >"$logs/model.log" 2>&1; echo $? >"$work/model.rc" ) &
pid_model=$!

# ------------------------------------------------------------------ notebooks (background)
t_nb=$(date +%s)
if [ "$REHEARSE" = 1 ]; then
  notebooks="${REHEARSE_NOTEBOOKS:-book/one_kernel_many_heads.ipynb}"; nbfast=(--fast); nbpar=1
else
  notebooks="$(ls book/*.ipynb | tr '\n' ' ')"; nbfast=(); nbpar=6
fi
if [ "$wheels_ok" = 1 ]; then
  ( printf '%s\n' $notebooks | timeout 270 xargs -P "$nbpar" -I{} "$PY" -m andrea_edu.notebook.execute {} \
      --out "$work/notebooks" --timeout 240 "${nbfast[@]}" >"$logs/notebooks.log" 2>&1
    echo $? >"$work/notebooks.rc" ) &
  pid_nb=$!
else
  pid_nb=""
fi

# ------------------------------------------------------------------ gpu-check
t0=$(date +%s)
if [ "$HAS_GPU" = 1 ]; then
  timeout 150 "$PY" -m andrea_edu.bench gpu-check --out "$OUT" --pytest-timeout 60 >"$logs/gpu_check.log" 2>&1
  rc=$?
  line="$(grep -m1 '^gpucheck on' "$logs/gpu_check.log")"
  case $rc in
    0) record gpu-check pass $(( $(date +%s) - t0 )) 150 "$line" ;;
    124) record gpu-check fail $(( $(date +%s) - t0 )) 150 "timed out (partial gpucheck.json written); $line" ;;
    *) record gpu-check fail $(( $(date +%s) - t0 )) 150 "exit status $rc; ${line:-$(tail -n1 "$logs/gpu_check.log")}" ;;
  esac
else
  record gpu-check skipped 0 150 "$NOGPU"
  if [ "$REHEARSE" = 1 ]; then   # what the GPU run imports must import here: collect the gpu tests
    t0=$(date +%s)
    if timeout 180 "$PY" -m pytest --collect-only -q -m gpu --noconftest -p no:cacheprovider \
        tests/test_cuda.py tests/test_attention.py tests/test_emulator.py >"$logs/gpu_tests_collect.log" 2>&1; then
      record gpu-tests-collect pass $(( $(date +%s) - t0 )) 180 "$(tail -n1 "$logs/gpu_tests_collect.log")"
    else
      record gpu-tests-collect fail $(( $(date +%s) - t0 )) 180 "$(grep -m1 -E 'Error|error' "$logs/gpu_tests_collect.log" || echo 'timed out or no output')"
    fi
  fi
fi

# ------------------------------------------------------------------ sanitizer
t0=$(date +%s)
if [ "$HAS_GPU" = 1 ] && command -v compute-sanitizer >/dev/null; then
  # only our kernels are instrumented (--kernel-name kns=attention_v: torch's and cuBLAS's
  # kernels in the same process are not ours to judge); an older tool that rejects the filter
  # gets one more try without it
  sanitize() {
    local tool=$1 lg="$logs/sanitizer_$1.log" rc
    timeout 70 compute-sanitizer --tool "$tool" --error-exitcode 9 --target-processes all \
      --kernel-name kns=attention_v "$PY" scripts/gpu_kernel_cases.py small >"$lg" 2>&1
    rc=$?
    if [ "$rc" != 0 ] && [ "$rc" != 9 ] && [ "$rc" != 124 ] && grep -qiE 'kernel-name|unrecognized|invalid (option|value)' "$lg"; then
      echo "--- retried without --kernel-name" >>"$lg"
      timeout 70 compute-sanitizer --tool "$tool" --error-exitcode 9 --target-processes all \
        "$PY" scripts/gpu_kernel_cases.py small >>"$lg" 2>&1
      rc=$?
    fi
    return $rc
  }
  for tool in memcheck racecheck synccheck initcheck; do
    sanitize "$tool" &
    eval "pid_$tool=$!"
  done
  verdicts=(); worst=pass
  for tool in memcheck racecheck synccheck initcheck; do
    eval "wait \$pid_$tool"; rc=$?
    case $rc in
      0) verdicts+=("$tool: clean") ;;
      9) verdicts+=("$tool: ERRORS ($(grep -m1 -E '=========.*(Invalid|Race|race|Barrier|Uninitialized|ERROR)' "$logs/sanitizer_$tool.log" | cut -c1-120))"); worst=fail ;;
      1) verdicts+=("$tool: a kernel case failed under the tool"); worst=fail ;;
      124) verdicts+=("$tool: timed out"); [ "$worst" = fail ] || worst=refused ;;
      *) verdicts+=("$tool: refused or could not run, status $rc ($(grep -m1 -v '^\s*$' "$logs/sanitizer_$tool.log" | cut -c1-120))"); [ "$worst" = fail ] || worst=refused ;;
    esac
  done
  record sanitizer "$worst" $(( $(date +%s) - t0 )) 90 "$(IFS=';'; echo "${verdicts[*]}")"
elif [ "$HAS_GPU" = 1 ]; then
  record sanitizer skipped 0 90 "compute-sanitizer not found on PATH"
else
  rc=0; "$PY" scripts/gpu_kernel_cases.py small >"$logs/sanitizer_driver.log" 2>&1 || rc=$?
  if [ "$rc" = 2 ] && grep -q "skipped: no GPU" "$logs/sanitizer_driver.log"; then
    record sanitizer skipped $(( $(date +%s) - t0 )) 90 "$NOGPU (its driver script imports and stops cleanly)"
  else
    record sanitizer fail $(( $(date +%s) - t0 )) 90 "driver script: status $rc: $(tail -n1 "$logs/sanitizer_driver.log")"
  fi
fi

# ------------------------------------------------------------------ notebooks: wait
if [ -n "$pid_nb" ]; then
  wait "$pid_nb"
  rc="$(cat "$work/notebooks.rc" 2>/dev/null || echo '?')"
  n_ok=$(grep -c ': ok (' "$logs/notebooks.log" 2>/dev/null); n_ok=${n_ok:-0}
  n_all=$(printf '%s\n' $notebooks | grep -c .)
  bad="$(grep 'FAILED' "$logs/notebooks.log" | sed 's/^\[execute\] //' | cut -c1-160 | head -n 4 | tr '\n' ';')"
  what="$n_ok/$n_all chapters ran$([ "$REHEARSE" = 1 ] && echo " (rehearsal: $notebooks, fast mode)")"
  if [ "$n_ok" = "$n_all" ]; then
    record notebooks pass $(( $(date +%s) - t_nb )) 270 "$what"
  else
    record notebooks fail $(( $(date +%s) - t_nb )) 270 "$what; status $rc; $bad"
  fi
else
  record notebooks skipped 0 270 "the wheels step failed: no Jupyter kernel to run them"
fi

# ------------------------------------------------------------------ bench (alone on the GPU)
t0=$(date +%s)
if [ "$HAS_GPU" = 1 ]; then
  timeout 120 "$PY" -m andrea_edu.bench gpu-suite --out "$OUT" --budget-s 95 --no-progress \
    >"$logs/gpu_bench.log" 2>&1
  rc=$?
  line="$(grep '^\[bench\]' "$logs/gpu_bench.log" | sed 's/ -> .*//' | tr '\n' ';')"
  case $rc in
    0) record bench pass $(( $(date +%s) - t0 )) 120 "$line" ;;
    *) record bench fail $(( $(date +%s) - t0 )) 120 "exit status $rc (124: timed out); $line" ;;
  esac
else
  record bench skipped 0 120 "$NOGPU"
fi

# ------------------------------------------------------------------ ncu
t0=$(date +%s)
if [ "$HAS_GPU" = 1 ] && command -v ncu >/dev/null; then
  metrics="sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,sm__warps_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum"
  timeout 60 ncu --clock-control none --target-processes all -k "regex:attention_v[23]" \
    --metrics "$metrics" --csv "$PY" scripts/gpu_kernel_cases.py headline >"$logs/ncu.csv" 2>"$logs/ncu.log"
  rc=$?
  left=$(( 70 - ($(date +%s) - t0) ))
  if [ $rc != 0 ] && [ $rc != 124 ] && [ $left -ge 20 ] && grep -qiE 'metric|not found|invalid' "$logs/ncu.log" "$logs/ncu.csv"; then
    # a metric name this ncu does not know: its standard sections hold the same four numbers
    echo "--- retried with --section SpeedOfLight --section Occupancy" >>"$logs/ncu.log"
    timeout $left ncu --clock-control none --target-processes all -k "regex:attention_v[23]" \
      --section SpeedOfLight --section Occupancy --csv "$PY" scripts/gpu_kernel_cases.py headline \
      >"$logs/ncu.csv" 2>>"$logs/ncu.log"
    rc=$?
  fi
  if [ $rc = 0 ] && grep -q '"Metric Name"' "$logs/ncu.csv"; then
    record ncu pass $(( $(date +%s) - t0 )) 70 "$(grep -c 'attention_v' "$logs/ncu.csv") metric rows (table below)"
  else
    record ncu refused $(( $(date +%s) - t0 )) 70 "status $rc: $(grep -m1 -E 'ERR|rror|permission' "$logs/ncu.log" "$logs/ncu.csv" | cut -c1-160)"
  fi
elif [ "$HAS_GPU" = 1 ]; then
  record ncu skipped 0 70 "ncu not found on PATH"
else
  record ncu skipped 0 70 "$NOGPU"
fi

# ------------------------------------------------------------------ model: wait
wait "$pid_model"
rc="$(cat "$work/model.rc" 2>/dev/null || echo '?')"
if [ "$rc" = 0 ] && [ -s "$OUT/sass_model.json" ]; then
  record model pass $(( $(date +%s) - t_model )) $model_t "sass_model.json: $(grep -c '^\[model\]' "$logs/model.log") kernels at hd=64 (a model, not a measurement)"
else
  record model fail $(( $(date +%s) - t_model )) $model_t "status $rc (124: timed out): $(tail -n1 "$logs/model.log" | cut -c1-160)"
fi

# ------------------------------------------------------------------ archives and summary
t0=$(date +%s)
tar -czf "$OUT/notebooks.tar.gz" -C "$work" notebooks 2>>"$log"
if "$PY" scripts/gpu_summary.py "$OUT" "$steps" "$logs" $([ "$REHEARSE" = 1 ] && echo --rehearse) 2>>"$log"; then
  record summary pass $(( $(date +%s) - t0 )) 5 "gpu_summary.md, notebooks.tar.gz ($(ls "$work/notebooks" | wc -l) executed), logs.tar.gz; total $(( $(date +%s) - start )) s"
else
  record summary fail $(( $(date +%s) - t0 )) 5 "gpu_summary.py failed (see gpu_suite.log)"
fi
"$PY" scripts/gpu_summary.py "$OUT" "$steps" "$logs" $([ "$REHEARSE" = 1 ] && echo --rehearse) 2>>"$log"
cp "$steps" "$logs/steps.tsv"
tar -czf "$OUT/logs.tar.gz" -C "$work" logs 2>/dev/null
say "files under $OUT: $(ls "$OUT" | tr '\n' ' ')"
status=0; grep -q $'\tfail\t' "$steps" && status=1
(rm -rf "$work" </dev/null >/dev/null 2>&1 &)   # thousands of small files: no one waits
say "exit status $status"
exit $status
