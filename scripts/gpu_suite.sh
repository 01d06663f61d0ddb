#!/usr/bin/env bash
# The one prepared script for a lent GPU machine (an H200): checks the kernels, then measures.
#
#   OUT=/some/folder bash scripts/gpu_suite.sh        (on the device tool, $OUT is set for you)
#   ANDREA_GIT_COMMIT=<sha> ... to record the commit when the copy carries no .git folder
#
# 1. setup: uses the machine's python3 if it already has torch and NVIDIA's cuda-bindings (the
#    GPU image does; jsonschema is optional); otherwise tries `pip install -r requirements.txt`.
#    andrea_edu runs from this checkout (PYTHONPATH), nothing is installed into site-packages.
# 2. python -m andrea_edu.bench gpu-check --out $OUT   (gpucheck.json: correctness on the GPU,
#    v1, v2 and v3 (cuda-flash) against the fp32 reference)
# 3. python -m andrea_edu.bench gpu-suite --out $OUT   (bench_{projections,layout,headdim}_<gpu>.json;
#    the head_dim sweep times cuda-naive, cuda-wmma and cuda-flash against SDPA)
# 4. python -m andrea_edu.kernels.time_model --out $OUT (sass_model.json: the SASS counts and the
#    lower-bound MODEL of v1, v2, v3 from the same commit, so that the chapter can show
#    measured / model; no GPU needed for this step, it runs last and takes about 30 s)
# Each step has a hard timeout; the whole script stays under 8 minutes (gpu-check <= 200 s,
# gpu-suite <= 250 s, of which 210 s of measuring, model <= 60 s). Expected on an H200: about
# 4 to 5 minutes. Results under $OUT (8 files, the device tool's limit): gpucheck.json,
# bench_*_<gpu>.json, sass_model.json, gpu_suite.log, gpu_check.log, gpu_bench.log (the model
# step's output goes to gpu_suite.log). Copy the bench_*.json and sass_model.json files into
# book/data/ and commit them: the chapters read them from there.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
OUT="${OUT:-$root/gpu-out}"
mkdir -p "$OUT"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
log="$OUT/gpu_suite.log"
start=$(date +%s)
say() { echo "[gpu_suite +$(( $(date +%s) - start ))s] $*" | tee -a "$log"; }

if [ -z "${ANDREA_GIT_COMMIT:-}" ] && [ -d .git ]; then
  ANDREA_GIT_COMMIT="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
fi
export ANDREA_GIT_COMMIT="${ANDREA_GIT_COMMIT:-unknown}"

say "machine: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null \
  | head -1 || true)"
if ! "$PY" -c "import torch, cuda.bindings.nvrtc" 2>>"$log"; then
  say "$PY lacks torch or cuda-bindings: trying pip install -r requirements.txt (120 s at most)"
  timeout 120 "$PY" -m pip install -q --retries 0 --timeout 10 -r requirements.txt >>"$log" 2>&1 \
    || say "pip install failed (see $log)"
fi
"$PY" - <<'EOF' 2>&1 | tee -a "$log"
import torch, andrea_edu
print(f"python {__import__('sys').version.split()[0]}, torch {torch.__version__} (CUDA "
      f"{torch.version.cuda}), GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}, "
      f"andrea_edu {andrea_edu.__version__} from {andrea_edu.__file__}")
EOF

say "gpu-check (timeout 200 s)"
timeout 200 "$PY" -m andrea_edu.bench gpu-check --out "$OUT" >"$OUT/gpu_check.log" 2>&1
check=$?
tail -n 25 "$OUT/gpu_check.log" | tee -a "$log"
say "gpu-check exit status $check (0 passed, 1 something failed, 2 no GPU, 124 timed out)"

say "gpu-suite (timeout 250 s, measuring budget 210 s)"
timeout 250 "$PY" -m andrea_edu.bench gpu-suite --out "$OUT" --budget-s 210 --no-progress \
  >"$OUT/gpu_bench.log" 2>&1
suite=$?
tail -n 25 "$OUT/gpu_bench.log" | tee -a "$log"
say "gpu-suite exit status $suite (0 ok, 1 a backend invalid or failed, 2 no GPU, 124 timed out)"

say "model: SASS evidence and lower-bound time model of v1, v2, v3 (timeout 60 s)"
timeout 60 "$PY" -m andrea_edu.kernels.time_model --out "$OUT" 2>&1 | tee -a "$log"
say "model exit status ${PIPESTATUS[0]} (a model, not a measurement; 0 ok)"
ls -l "$OUT" | tee -a "$log"
say "done"
[ "$check" = 0 ] && [ "$suite" = 0 ]
