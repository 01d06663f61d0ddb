#!/usr/bin/env bash
# Download, here (with network), the wheels the lent GPU machine's image lacks, for CPython 3.12
# manylinux x86-64, into .whl/ (git-ignored; name it in the device tool's `carry`).
#
#   bash scripts/gpu_wheels.sh            -> .whl/*.whl          (cp312: what travels)
#   bash scripts/gpu_wheels.sh --python 311 -> $ANDREA_REHEARSE_DIR/wheels-cp311 (the CPU
#     rehearsal's Python 3.11; outside the tree, so that it never travels)
#
# The list is `python scripts/image_env.py wheels`: the notebook runner's and the chapters'
# imports (ipykernel, nbclient, nbformat, ipywidgets, IPython, tqdm, jsonschema, and what they
# require) that the image's own packages do not already bring, plus nvidia-cuda-crt (crt/mma.h),
# each at the version installed in the project's .venv. One version of each, --no-deps:
# the list is complete by construction. Wheels already present are not fetched again.
# Exit status: 0 every wheel present; 1 a download failed (one line says so: no network to
# PyPI, or no wheel of that version for the platform); 2 bad arguments; 3 over 40 MiB.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py=312
case "${1:-}" in
  "") ;;
  --python) py="${2:-}"; [[ "$py" =~ ^3[0-9]+$ ]] || { echo "gpu_wheels: --python takes e.g. 312, got '$py'" >&2; exit 2; } ;;
  *) echo "gpu_wheels: unknown argument '$1' (allowed: --python 3XY)" >&2; exit 2 ;;
esac
PY="${PROJECT_PYTHON:-$root/.venv/bin/python}"
dest="$root/.whl"; [ "$py" = 312 ] || dest="${ANDREA_REHEARSE_DIR:-${TMPDIR:-/tmp}/andrea-rehearse-$(id -u)}/wheels-cp$py"
mkdir -p "$dest"
missing="$("$PY" scripts/image_env.py check-wheels "$dest" --python "$py")"
[ $? -le 1 ] || { echo "gpu_wheels: could not list the wheels" >&2; exit 1; }
mapfile -t need < <(sed -n 's/^missing wheel (cp[0-9]*): //p' <<<"$missing")
if [ "${#need[@]}" -gt 0 ]; then
  echo "gpu_wheels: downloading ${#need[@]} wheels for cp$py into $dest"
  if ! "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "${py:0:1}.${py:1}" \
      --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 --platform manylinux_2_27_x86_64 --platform linux_x86_64 \
      --retries 1 --timeout 20 -d "$dest" "${need[@]}" >"${TMPDIR:-/tmp}/gpu_wheels_download.log" 2>&1; then
    echo "gpu_wheels: download failed (no network to PyPI, or a version without a cp$py wheel): $(grep -m1 -iE 'error|could not' "${TMPDIR:-/tmp}/gpu_wheels_download.log" || tail -n1 "${TMPDIR:-/tmp}/gpu_wheels_download.log")" >&2
    exit 1
  fi
fi
if ! "$PY" scripts/image_env.py check-wheels "$dest" --python "$py"; then
  echo "gpu_wheels: some wheels are still missing (above)" >&2
  exit 1
fi
mib=$(( ($(cat "$dest"/*.whl | wc -c) + 1048575) / 1048576 ))
echo "gpu_wheels: $(ls "$dest"/*.whl | wc -l) wheels, ${mib} MiB in $dest"
[ "$mib" -le 40 ] || { echo "gpu_wheels: over the 40 MiB budget" >&2; exit 3; }
