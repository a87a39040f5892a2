#!/usr/bin/env bash
# Build, or reuse, the virtual environment that holds the real SGLang package for the test
# that checks the tuner's launch rules against SGLang's own (tests/test_sglang_real.py).
#
#   bash tests/sglang_env.sh            # creates .venv-sglang/ in the repository root (~2 minutes)
#   bash tests/sglang_env.sh --force    # rebuilds it from scratch
#
# Only SGLang's argument code runs there: its argparse, ServerArgs resolution and
# check_server_args, on CPU. So the pinned sglang release is installed without its
# dependency tree (--no-deps: no CUDA kernels, no flashinfer, no DeepEP), next to a CPU
# build of torch and the few pure-Python modules that code imports. The GPU queries are
# faked and the GPU-only kernel modules stubbed by the probe itself
# (tuner/preflight/sglang_probe.py --fake-host), never here.
#
# A finished build leaves a stamp file naming the sglang release; without the stamp (an
# interrupted build, another release) the folder is rebuilt.
#
# Environment: TUNER_SGLANG_VENV (the folder, default <repo>/.venv-sglang),
# TUNER_SGLANG_VERSION (default 0.5.23), PYTHON (the interpreter that creates the venv,
# default python3).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${TUNER_SGLANG_VENV:-$root/.venv-sglang}
version=${TUNER_SGLANG_VERSION:-0.5.23}
python=${PYTHON:-python3}
stamp=$venv/.tuner-sglang-stamp
want="sglang==$version"

if [[ "${1:-}" != "--force" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "sglang env: reusing $venv ($want)"
    exit 0
fi

started=$SECONDS
echo "sglang env: building $venv ($want)"
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet --no-deps "$want"
# CPU torch: the same CPU build the vLLM environment uses when this machine has it, else
# the registry's default. What SGLang's argument code imports, and nothing GPU-only:
# transformers (model config), triton (imported by torch.compile decorators at import),
# and the small modules of its utility layer.
torch_req="torch==2.13.0+cpu"
"$venv/bin/python" -m pip download --quiet --no-deps --dest "$venv/.probe-torch" "$torch_req" \
    >/dev/null 2>&1 || torch_req="torch"
rm -rf "$venv/.probe-torch"
"$venv/bin/python" -m pip install --quiet "$torch_req" "transformers==5.19.0" triton \
    msgspec pydantic numpy orjson pybase64 pillow starlette pyzmq tqdm ipython aiohttp dill \
    sentencepiece gguf compressed-tensors psutil requests pyyaml 2>&1 \
    | grep -v "dependency conflicts\|requires .*, which is not installed\|which is incompatible" || true
"$venv/bin/python" - <<'PY'
import importlib.metadata as md

import torch  # noqa: F401
import transformers  # noqa: F401
import sglang.srt.server_args  # noqa: F401

print("sglang env: sglang", md.version("sglang"), "torch", md.version("torch"),
      "transformers", md.version("transformers"))
PY
echo "$want" > "$stamp"
echo "sglang env: ready in $((SECONDS - started)) s"
