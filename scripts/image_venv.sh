#!/usr/bin/env bash
# A venv with the lent GPU machine's own Python and torch, for the CPU rehearsal (issue 41
# item 8): Python 3.12 and torch 2.11.0 (+cu130) as the device's image has them (the device
# tool's KINDS.md, "pip list, as a session saw it", 2026-11: Python 3.12.3, torch 2.11.0,
# numpy 2.5.2), with the image's other packages that the suite imports (scripts/image_env.py
# IMAGE) at PyPI's versions for that torch. Not the image itself: another patch release of
# Python (whatever 3.12 this machine has), and no nvcc or driver.
#
#   bash scripts/image_venv.sh [DIR]        build it (default DIR: $ANDREA_REHEARSE_DIR/image312,
#                                           about 5 GB, a few minutes); prints its python
#   ANDREA_REHEARSE_IMAGE_PYTHON=<that python> bash scripts/gpu_suite.sh --stage 1 --rehearse
#                                           the rehearsal on it (the carried cp312 wheels: .whl/)
#
# Python 3.12 is looked up as python3.12 on PATH, then under pyenv's versions folder.
# Exit status: 0 built (or already there); 1 no Python 3.12 here, or the install failed.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-${ANDREA_REHEARSE_DIR:-${TMPDIR:-/tmp}/andrea-rehearse-$(id -u)}/image312}"
pins=(torch==2.11.0 numpy==2.5.2)
py312="$(command -v python3.12 2>/dev/null)"
if [ -z "$py312" ]; then
  for cand in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python3.12; do [ -x "$cand" ] && py312="$cand"; done
fi
[ -n "$py312" ] || { echo "image_venv: no Python 3.12 here (python3.12 on PATH or under pyenv's versions/3.12.*)" >&2; exit 1; }
if [ -x "$dir/bin/python" ] && "$dir/bin/python" - <<'PYEOF' 2>/dev/null
import sys, torch
sys.exit(0 if sys.version_info[:2] == (3, 12) and torch.__version__.startswith("2.11.0") else 1)
PYEOF
then echo "$dir/bin/python"; exit 0; fi
rm -rf "$dir"
"$py312" -m venv "$dir" || { echo "image_venv: $py312 -m venv $dir failed" >&2; exit 1; }
mapfile -t rest < <("${PROJECT_PYTHON:-$root/.venv/bin/python}" -c \
  'import sys; sys.path.insert(0, "scripts"); import image_env; print("\n".join(n for n in image_env.IMAGE if n not in ("torch", "numpy")))')
if ! "$dir/bin/pip" install -q "${pins[@]}" "${rest[@]}" >"$dir.log" 2>&1; then
  echo "image_venv: pip install failed: $(grep -m1 -iE 'error' "$dir.log" || tail -n1 "$dir.log")" >&2; exit 1
fi
echo "$dir/bin/python"
