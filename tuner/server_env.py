"""The environment a launched server gets: an allow-list, never the tuner's own.

The tuner's environment holds its settings (``TUNER_*``: the storage URL with its
password, the Hugging Face token) and whatever else the person's shell exports; a
server's log, crash dump or a misbehaving plugin could show any of it. A server gets
the variables a serving engine needs (paths, locale, CUDA/NCCL/engine tuning, Python
environment), then the space's own ``env``, and ``HF_TOKEN`` only when the space asks
for it (``launch.hf_token: true``).
"""

from __future__ import annotations

from collections.abc import Mapping

#: Variables passed on by name.
ALLOWED_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "TERM",
        "PWD",
        "LD_LIBRARY_PATH",
        "LD_PRELOAD",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONUNBUFFERED",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "CONDA_DEFAULT_ENV",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "HF_HOME",
        "HF_HUB_CACHE",
        "HF_HUB_OFFLINE",
        "HF_HUB_ENABLE_HF_TRANSFER",
        "TRANSFORMERS_CACHE",
        "TRANSFORMERS_OFFLINE",
        "HUGGINGFACE_HUB_CACHE",
    }
)
#: Variables passed on by prefix: GPU runtime, collective communication, compilers and the
#: engines' own switches.
ALLOWED_PREFIXES = (
    "LC_",
    "CUDA_",
    "NCCL_",
    "NVIDIA_",
    "CUBLAS_",
    "CUDNN_",
    "TORCH_",
    "TORCHINDUCTOR_",
    "PYTORCH_",
    "TRITON_",
    "SGLANG_",
    "SGL_",
    "VLLM_",
    "FLASHINFER_",
    "XDG_",
)
#: Never passed on, whatever the allow-list says: the tuner's settings and secrets.
DENIED_PREFIXES = ("TUNER_",)


def allowed(name: str) -> bool:
    if name.startswith(DENIED_PREFIXES):
        return False
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)


def server_environment(
    inherited: Mapping[str, str], space_env: Mapping[str, str], secret_env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The allow-listed part of ``inherited``, then the space's env, then ``secret_env``
    (the Hugging Face token, already limited to spaces that ask for it)."""
    env = {k: v for k, v in inherited.items() if allowed(k)}
    env.update(space_env)
    env.update(secret_env or {})
    return env
