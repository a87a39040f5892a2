"""systemd unit and shell renderings of a launch."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import BEST
from tuner.engines.base import LaunchSpec
from tuner.space import DEFAULT_SPACE, load_space
from tuner.systemd_unit import looks_secret, parse_shell, render_shell, render_systemd_unit, systemd_quote

SYSTEMD_ANALYZE = shutil.which("systemd-analyze") or "/usr/bin/systemd-analyze"

#: Values a real launch may carry that every quoting layer must survive.
AWKWARD_ARGS = [
    "--served-model-name",
    'Kimi "K2.6" 100% ready',
    "--chat-template",
    "/opt/templates/my template $HOME ${USER} %h \\ it's.jinja",
    "--empty",
    "",
    "--separator",
    ";",
    "--multi",
    "a\nb\tc",
]
AWKWARD_ENV = {"SGLANG_LOG_PREFIX": "a b\"c%d$e\\f'g", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}


@pytest.fixture(scope="module")
def spec() -> LaunchSpec:
    # NCCL_PROTO with a comma: a value the shell form must keep as one word.
    base = load_space(DEFAULT_SPACE).render({**BEST, "nccl_proto": "LL,Simple"})
    return base.model_copy(update={"argv": [*base.argv, *AWKWARD_ARGS], "env": {**base.env, **AWKWARD_ENV}})


# ----------------------------------------------------------------- a reader of systemd's syntax

_C_UNESCAPES = {
    "\\": "\\",
    '"': '"',
    "'": "'",
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "s": " ",
}


def _unquote_systemd(text: str) -> list[str]:
    """Split a value the way systemd does for ExecStart=/Environment= (systemd.syntax(7)):
    whitespace-separated words, double-quoted words with C escapes."""
    words, i = [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        word = ""
        if text[i] == '"':
            i += 1
            while text[i] != '"':
                if text[i] == "\\":
                    nxt = text[i + 1]
                    if nxt == "x":
                        word += chr(int(text[i + 2 : i + 4], 16))
                        i += 4
                        continue
                    word += _C_UNESCAPES[nxt]
                    i += 2
                else:
                    word += text[i]
                    i += 1
            i += 1
        else:
            while i < len(text) and not text[i].isspace():
                assert text[i] not in "\"'\\", "unquoted word with a quote or backslash"
                word += text[i]
                i += 1
        words.append(word)
    return words


def _specifiers(word: str, *, dollars: bool) -> str:
    return re.sub(r"%%|\$\$" if dollars else "%%", lambda m: m.group(0)[0], word)


def read_unit(text: str) -> dict[str, list[str]]:
    """Settings of a unit file as systemd reads them: continuation lines joined, comments
    dropped, repeated settings collected in order."""
    settings: dict[str, list[str]] = {}
    for line in text.replace("\\\n", " ").splitlines():
        if not line or line[0] in "#;[":
            continue
        key, _, value = line.partition("=")
        settings.setdefault(key, []).append(value)
    return settings


def exec_start(text: str) -> list[str]:
    (line,) = read_unit(text)["ExecStart"]
    return [_specifiers(w, dollars=True) for w in _unquote_systemd(line)]


def environment(text: str) -> dict[str, str]:
    env = {}
    for value in read_unit(text).get("Environment", []):
        for word in _unquote_systemd(value):
            name, _, val = _specifiers(word, dollars=False).partition("=")
            env[name] = val
    return env


def verify(tmp_path: Path, unit: str) -> str:
    path = tmp_path / "tuner-test.service"
    path.write_text(unit)
    done = subprocess.run([SYSTEMD_ANALYZE, "verify", str(path)], capture_output=True, text=True, timeout=60)
    return (done.stdout + done.stderr).strip()


# ----------------------------------------------------------------- systemd


def test_unit_has_every_section_and_setting(spec):
    header = ["peak 1538 tok/s at C=192, single stream 65 tok/s", "study kimi, trial 17"]
    unit = render_systemd_unit(spec, description="SGLang Kimi K2.6", python=sys.executable, header=header)
    assert unit.startswith(f"# {header[0]}\n# {header[1]}\n[Unit]\n")
    settings = read_unit(unit)
    assert settings["Description"] == ["SGLang Kimi K2.6"]
    assert settings["After"] == settings["Wants"] == ["network-online.target"]
    assert settings["Type"] == ["simple"]
    assert settings["Restart"] == ["on-failure"]
    assert int(settings["TimeoutStartSec"][0]) >= 3600
    assert int(settings["RestartSec"][0]) > 0
    assert settings["KillMode"] == ["control-group"]
    assert settings["LimitNOFILE"] == ["65535"]
    assert settings["WantedBy"] == ["multi-user.target"]
    assert "User" not in settings and "EnvironmentFile" not in settings
    sections = [line for line in unit.splitlines() if line.startswith("[")]
    assert sections == ["[Unit]", "[Service]", "[Install]"]


def test_exec_start_and_environment_read_back_exactly(spec):
    unit = render_systemd_unit(spec, description="x", python=sys.executable)
    assert exec_start(unit) == [sys.executable, *spec.argv[1:]]
    assert environment(unit) == spec.env
    # one Environment= line per variable
    assert len(read_unit(unit)["Environment"]) == len(spec.env)


@pytest.mark.skipif(not Path(SYSTEMD_ANALYZE).exists(), reason="systemd-analyze not installed")
def test_systemd_analyze_verify_is_silent(tmp_path, spec):
    unit = render_systemd_unit(
        spec,
        description="SGLang Kimi K2.6 (100% tuned)",
        python=sys.executable,
        user="sglang",
        working_directory="/srv/my models",
        environment_file="-/etc/sglang/kimi.env",
        header=["study kimi-k2.6-8x-rtx-pro-6000, trial 17", "peak 1538 tok/s"],
    )
    assert verify(tmp_path, unit) == ""


@pytest.mark.skipif(not Path(SYSTEMD_ANALYZE).exists(), reason="systemd-analyze not installed")
def test_systemd_analyze_sees_what_a_bad_quote_would_do(tmp_path):
    # the check above means something: a naive rendering of the same values is flagged
    unit = render_systemd_unit(LaunchSpec(argv=[sys.executable], env={}, engine="sglang"), description="x")
    naive = unit.replace(f"ExecStart={sys.executable}", f'ExecStart={sys.executable} "a\\qb" %Z')
    assert "escape" in verify(tmp_path, naive) or "specifier" in verify(tmp_path, naive)


def test_secrets_are_never_written_into_the_unit():
    spec = LaunchSpec(
        argv=[
            sys.executable,
            "-m",
            "sglang.launch_server",
            "--api-key",
            "sk-live-123",
            "--port",
            "30001",
            "--ssl-keyfile-password=hunter2",
        ],
        env={"HF_TOKEN": "hf_abc", "OPENAI_API_KEY": "sk-2", "TOKENIZERS_PARALLELISM": "false"},
        engine="sglang",
    )
    unit = render_systemd_unit(spec, description="x", environment_file="/etc/sglang/env")
    for secret in ("sk-live-123", "hf_abc", "sk-2", "hunter2"):
        assert secret not in unit
    assert read_unit(unit)["EnvironmentFile"] == ["/etc/sglang/env"]
    assert environment(unit) == {"TOKENIZERS_PARALLELISM": "false"}
    assert "# HF_TOKEN looks like a secret: not written here; set it in /etc/sglang/env" in unit
    assert "# OPENAI_API_KEY looks like a secret" in unit
    # secret flag values come from the environment file via systemd's ${VAR} expansion
    (line,) = read_unit(unit)["ExecStart"]
    assert _unquote_systemd(line)[3:] == [
        "--api-key",
        "${API_KEY}",
        "--port",
        "30001",
        "--ssl-keyfile-password=${SSL_KEYFILE_PASSWORD}",
    ]
    assert "# --api-key: value read from $API_KEY" in unit


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("HUGGING_FACE_HUB_TOKEN", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("DB_PASSWORD", True),
        ("--api-key", True),
        ("WANDB_APIKEY", True),
        ("TOKENIZERS_PARALLELISM", False),
        ("--max-total-tokens", False),
        ("NCCL_PROTO", False),
        ("--kv-cache-dtype", False),
        ("KEYBOARD", False),
    ],
)
def test_looks_secret(name, secret):
    assert looks_secret(name) is secret


def test_executable_must_be_absolute(monkeypatch):
    spec = LaunchSpec(argv=["python3", "-m", "sglang.launch_server"], env={}, engine="sglang")
    # the unit's interpreter replaces python/python3
    assert (
        exec_start(render_systemd_unit(spec, description="x", python="/opt/venv/bin/python3"))[0]
        == "/opt/venv/bin/python3"
    )
    # otherwise the program is looked up on PATH, as the shell would
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    resolved = exec_start(
        render_systemd_unit(spec.model_copy(update={"argv": [Path(sys.executable).name]}), description="x")
    )[0]
    assert Path(resolved).is_absolute() and Path(resolved).name == Path(sys.executable).name
    with pytest.raises(ValueError, match="absolute path"):
        render_systemd_unit(spec.model_copy(update={"argv": ["no-such-program-xyz"]}), description="x")
    with pytest.raises(ValueError, match="absolute path"):
        render_systemd_unit(spec, description="x", python="venv/bin/python")
    with pytest.raises(ValueError, match="WorkingDirectory"):
        render_systemd_unit(spec, description="x", python="/usr/bin/python3", working_directory="srv")


def test_description_and_header_are_single_lines():
    spec = LaunchSpec(argv=[sys.executable], env={}, engine="sglang")
    unit = render_systemd_unit(spec, description="100% fast\nreally", header=["two\nlines", ""])
    assert read_unit(unit)["Description"] == ["100%% fast really"]
    assert unit.startswith("# two lines\n#\n[Unit]\n")


@pytest.mark.parametrize(
    ("arg", "quoted"),
    [
        ("plain", "plain"),
        ("0.88", "0.88"),
        ("", '""'),
        ("a b", '"a b"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("100%", "100%%"),
        ("$HOME", "$$HOME"),
        ("back\\slash", '"back\\\\slash"'),
        (";", '";"'),
        ("it's", '"it\'s"'),
        ("tab\there", '"tab\\there"'),
        ("bell\x07", '"bell\\a"'),
        ("\x01", '"\\x01"'),
    ],
)
def test_systemd_quote(arg, quoted):
    assert systemd_quote(arg) == quoted
    assert [_specifiers(w, dollars=True) for w in _unquote_systemd(quoted)] == [arg]


# ----------------------------------------------------------------- shell


def test_shell_form_round_trips(spec):
    text = render_shell(spec)
    argv, env = parse_shell(text)
    assert argv == spec.argv
    assert env == spec.env
    lines = text.splitlines()
    assert lines[0] == "NCCL_PROTO=LL,Simple \\"
    assert lines[len(spec.env)] == "python3 -m sglang.launch_server \\"
    assert lines[len(spec.env) + 1] == "  --model-path /models/Kimi-K2.6 \\"


def test_shell_form_runs_in_a_real_shell(spec):
    bash = shutil.which("bash") or shutil.which("sh")
    if bash is None:
        pytest.skip("no POSIX shell")
    printer = "import json, os, sys; print(json.dumps([sys.argv[1:], dict(os.environ)]))"
    probe = spec.model_copy(update={"argv": [sys.executable, "-c", printer, *spec.argv[1:]]})
    done = subprocess.run(
        [bash, "-c", render_shell(probe)], capture_output=True, text=True, timeout=60, check=True
    )
    argv, env = json.loads(done.stdout)
    assert argv == spec.argv[1:]
    assert {k: env[k] for k in spec.env} == spec.env


def test_parse_shell_reads_a_pasted_command():
    argv, env = parse_shell(
        "NCCL_PROTO=LL CUDA_VISIBLE_DEVICES='0,1' \\\n  python3 -m sglang.launch_server "
        "--model-path '/a b' \\\n  --tp 2"
    )
    assert env == {"NCCL_PROTO": "LL", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert argv == ["python3", "-m", "sglang.launch_server", "--model-path", "/a b", "--tp", "2"]
    # a backslash-newline inside single quotes is data, as in a shell
    assert parse_shell("echo 'a\\\nb'")[0] == ["echo", "a\\\nb"]
