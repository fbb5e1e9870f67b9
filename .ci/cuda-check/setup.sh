#!/usr/bin/env bash
# Make (or reuse) a venv with the NVIDIA CUDA wheels that .ci/cuda-check/analyse.py needs.
# Usage: .ci/cuda-check/setup.sh [VENV_DIR]   (default: target/cuda-check/venv under the repo root)
# Then:  VENV_DIR/bin/python .ci/cuda-check/analyse.py --venv VENV_DIR FOLDER
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${1:-$root/target/cuda-check/venv}"
start=$SECONDS
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
# pip skips the downloads when the pinned versions are already installed.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt"
echo "cuda-check venv ready at $venv in $((SECONDS - start)) s"
