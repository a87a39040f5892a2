"""Search-space files: loading and its errors, sampling, rendering, identity, rules, grid."""

from __future__ import annotations

import argparse
import copy
import re
from pathlib import Path

import optuna
import pytest
import yaml

from tests.helpers import BEST
from tuner import cli, engines
from tuner.engines.base import Engine, LaunchSpec, format_value, render_flags
from tuner.engines.sglang import ENGINE as SGLANG
from tuner.engines.sglang import parse_args, validate
from tuner.errors import UsageError
from tuner.space import (
    DEFAULT_SPACE,
    Space,
    SpaceError,
    load_space,
    packaged_spaces,
    resolve_space,
)

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "search_spaces" / f"{DEFAULT_SPACE}.yaml"

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture(scope="module")
def space() -> Space:
    return load_space(REFERENCE)


def small(**overrides) -> dict:
    """A minimal valid space document; ``overrides`` replace top-level keys."""
    doc = {
        "name": "small",
        "engine": "sglang",
        "hardware": "rtx-pro-6000-pcie-x8",
        "model": "kimi-k2.6",
        "launch": {
            "command": ["python3", "-m", "sglang.launch_server"],
            "flags": {"--model-path": "/m", "--mem-fraction-static": 0.88, "--trust-remote-code": True},
            "env": {"NCCL_P2P_DISABLE": "1"},
        },
        "parameters": {
            "layout": {
                "type": "categorical",
                "choices": {
                    "tp8": {"flags": {"--tp-size": 8}},
                    "tp4pp2": {"flags": {"--tp-size": 4, "--pp-size": 2}},
                },
            },
            "ep_size": {"flag": "--ep-size", "type": "categorical", "choices": [1, 8]},
            "enable_eplb": {"flag": "--enable-eplb", "type": "bool", "when": "ep_size > 1"},
            "mem": {"flag": "--mem-fraction-static", "type": "categorical", "choices": [None, 0.9]},
            "proto": {"env": "NCCL_PROTO", "type": "categorical", "choices": [None, "LL", "LL,Simple"]},
            "p2p": {"env": "NCCL_P2P_DISABLE", "type": "bool"},
            "mrr": {"flag": "--max-running-requests", "type": "int", "low": 128, "high": 256, "step": 64},
        },
    }
    doc.update(overrides)
    return doc


def write(tmp_path: Path, doc: dict | str, name: str = "space.yaml") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    return path


def load_error(tmp_path: Path, doc: dict | str) -> SpaceError:
    path = write(tmp_path, doc)
    with pytest.raises(SpaceError) as info:
        load_space(path)
    for line in str(info.value).splitlines():
        assert line.startswith(f"{path}: "), line  # every problem names the file
    return info.value


# ----------------------------------------------------------------- the reference space


def test_reference_space_loads(space):
    assert space.name == DEFAULT_SPACE
    assert space.engine.name == "sglang"
    assert (space.hardware, space.model, space.gpu_count) == ("rtx-pro-6000-pcie-x8", "kimi-k2.6", 8)
    # the sweep itself is tuned for fidelity per cost; it always starts with the single stream
    assert space.workload.kind == "burst"
    assert space.workload.levels[0] == 1 and len(space.workload.levels) >= 2
    assert space.objective.name == "peak"
    assert list(space.parameters) == [
        "layout",
        "ep_size",
        "moe_dense_tp_size",
        "enable_eplb",
        "moe_a2a_backend",
        "deepep_mode",
        "disable_cuda_graph",
        "cuda_graph_max_bs",
        "max_running_requests",
        "num_continuous_decode_steps",
        "mem_fraction_static",
        "nccl_proto",
        "nccl_min_nchannels",
        "nccl_max_nchannels",
        "nccl_nthreads",
        "nccl_buffsize",
    ]


def test_every_reference_parameter_has_a_comment():
    lines = REFERENCE.read_text().splitlines()
    start = lines.index("parameters:")
    for i, line in enumerate(lines[start + 1 :], start + 1):
        if re.match(r"^  [a-z_]+:", line):
            assert lines[i - 1].lstrip().startswith("#"), f"no comment above {line.strip()}"
        if line and not line.startswith(" ") and i > start:
            break


def test_reference_best_renders_the_hand_tuned_launch(space):
    spec = space.render(BEST)
    assert spec.engine == "sglang"
    assert spec.argv == [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/models/Kimi-K2.6",
        "--trust-remote-code",
        "--host",
        "127.0.0.1",
        "--port",
        "30001",
        "--tp-size",
        "8",
        "--ep-size",
        "8",
        "--moe-a2a-backend",
        "none",
        "--cuda-graph-max-bs-decode",
        "256",
        "--max-running-requests",
        "256",
        "--num-continuous-decode-steps",
        "8",
        "--mem-fraction-static",
        "0.88",
    ]
    assert spec.env == {
        "NCCL_PROTO": "LL",
        "NCCL_MIN_NCHANNELS": "8",
        "NCCL_MAX_NCHANNELS": "16",
        "NCCL_NTHREADS": "512",
        "NCCL_BUFFSIZE": "16777216",
    }
    assert space.check(BEST) == []


# ----------------------------------------------------------------- loader errors


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    err = load_error(tmp_path, "name: x\nparameters:\n  a: {flag: --a, type: bool\n")
    assert "YAML syntax error" in str(err)
    assert re.search(r"line 4, column \d+", str(err))


def test_duplicate_keys_are_refused(tmp_path):
    text = yaml.safe_dump(small(), sort_keys=False) + "name: again\n"
    err = load_error(tmp_path, text)
    assert "duplicate key 'name' (first at line 1)" in str(err)


def test_unknown_keys_name_the_field_and_the_allowed_keys(tmp_path):
    doc = small()
    doc["parameters"]["ep_size"]["choises"] = [1, 2]
    doc["launch"]["unit"] = {"descripton": "x"}
    doc["objetive"] = {"name": "peak"}
    err = load_error(tmp_path, doc)
    fields = {field for field, _ in err.problems}
    assert fields == {"parameters.ep_size.choises", "launch.unit.descripton", "objetive"}
    text = str(err)
    assert "parameters.ep_size.choises: unknown key 'choises'; allowed: type, flag, env, choices" in text
    assert "launch.unit.descripton: unknown key 'descripton'; allowed: description, user" in text
    assert "objetive: unknown key 'objetive'; allowed: name, engine" in text


@pytest.mark.parametrize(
    ("mutate", "field", "fragment"),
    [
        (
            lambda d: d["parameters"]["ep_size"].update(choices="1,2"),
            "parameters.ep_size.choices",
            "must be a list of values, or a mapping of bundle names",
        ),
        (
            lambda d: d["parameters"]["ep_size"].update(choices=[1, [2]]),
            "parameters.ep_size.choices[1]",
            "must be null, a boolean, a number or a string, not a list",
        ),
        (
            lambda d: d["parameters"]["ep_size"].update(type="choice"),
            "parameters.ep_size.type",
            "'categorical', 'bool', 'int' or 'float'",
        ),
        (lambda d: d["parameters"]["mrr"].update(low="a lot"), "parameters.mrr.low", "must be a number"),
        (lambda d: d["parameters"]["mrr"].update(step=32.5), "parameters.mrr.step", "needs an integer"),
        (lambda d: d["parameters"]["mrr"].update(high=250), "parameters.mrr.high", "not a multiple of step"),
        (lambda d: d["parameters"]["mrr"].update(low=512), "parameters.mrr.low", "above high"),
        (lambda d: d["parameters"]["mrr"].update(log=True), "parameters.mrr.log", "cannot be combined"),
        (lambda d: d["parameters"]["mrr"].pop("high"), "parameters.mrr.high", "required for a int"),
        (
            lambda d: d["parameters"]["ep_size"].update(choices=[1, 2, 1]),
            "parameters.ep_size.choices[2]",
            "duplicate choice 1",
        ),
        (
            lambda d: d["parameters"]["ep_size"].update(choices=[]),
            "parameters.ep_size.choices",
            "at least one choice",
        ),
        (
            lambda d: d["parameters"]["ep_size"].update(env="EP"),
            "parameters.ep_size",
            "exactly one of 'flag', 'env' or bundle choices",
        ),
        (
            lambda d: d["parameters"]["ep_size"].pop("flag"),
            "parameters.ep_size",
            "exactly one of 'flag', 'env' or bundle choices",
        ),
        (
            lambda d: d["parameters"]["layout"].update(flag="--tp-size"),
            "parameters.layout",
            "bundle choices set their own flags/env",
        ),
        (
            lambda d: d["parameters"]["ep_size"].update(flag="ep-size"),
            "parameters.ep_size.flag",
            "not a flag name",
        ),
        (
            lambda d: d["parameters"]["proto"].update(env="NCCL-PROTO"),
            "parameters.proto.env",
            "not an environment variable name",
        ),
        (
            lambda d: d["parameters"]["layout"]["choices"]["tp8"].update(flags={"--tp-size": {"a": 1}}),
            "parameters.layout.choices.tp8.flags.--tp-size",
            "not a mapping",
        ),
        (
            lambda d: d["parameters"]["enable_eplb"].update(choices=[True]),
            "parameters.enable_eplb.choices",
            "remove 'choices'",
        ),
        (
            lambda d: d["parameters"].update(tp={"flag": "--tp-size", "type": "categorical", "choices": [8]}),
            "parameters.tp",
            "--tp-size is also set by parameter 'layout'",
        ),
        (
            lambda d: d["parameters"].update({"class": {"flag": "--x", "type": "bool"}}),
            "parameters.class",
            "cannot be a parameter name",
        ),
        (
            lambda d: d["parameters"]["enable_eplb"].update(when="ep_size.real > 1"),
            "parameters.enable_eplb.when",
            "col 8: attribute access is not allowed",
        ),
        (
            lambda d: d["parameters"]["enable_eplb"].update(when="ep > 1"),
            "parameters.enable_eplb.when",
            "unknown name 'ep'; known names: enable_eplb, ep_size, layout, mem, mrr, p2p, proto",
        ),
        (
            lambda d: d["parameters"]["enable_eplb"].update(when="mrr > 128"),
            "parameters.enable_eplb.when",
            "refers to mrr, not defined above 'enable_eplb'",
        ),
        (
            lambda d: d.update(constraints=[{"expr": "ep_size > 1"}, {"expr": "__import__('os')"}]),
            "constraints[1].expr",
            "call to '__import__' is not allowed",
        ),
        (
            lambda d: d.update(constraints=[{"expr": "eplb and ep_size == 1"}]),
            "constraints[0].expr",
            "unknown name 'eplb'",
        ),
        (lambda d: d.update(engine="tgi"), "engine", "unknown engine 'tgi'; known: sglang"),
        (lambda d: d.update(hardware="dgx-b300"), "hardware", "unknown hardware profile 'dgx-b300'"),
        (lambda d: d.update(model="llama-5"), "model", "unknown models profile 'llama-5'"),
        (lambda d: d.pop("model"), "model", "required field is missing"),
        (lambda d: d["launch"].update(command=[]), "launch.command", "at least 1 item"),
        (lambda d: d["launch"].update(python="python3"), "launch.python", "absolute path"),
        (
            lambda d: (
                d["workload"].update(levels=[0, 64])
                if "workload" in d
                else d.update(workload={"levels": [0, 64]})
            ),
            "workload.levels",
            "concurrency levels must be >= 1",
        ),
        (
            lambda d: d.update(objective={"name": "goodput", "ttft_s": 0}),
            "objective.ttft_s",
            "greater than 0",
        ),
        (lambda d: d.update(objective={"name": "fastest"}), "objective.name", "'peak', 'single'"),
    ],
)
def test_invalid_files_name_file_and_field(tmp_path, mutate, field, fragment):
    doc = copy.deepcopy(small())
    mutate(doc)
    err = load_error(tmp_path, doc)
    assert field in [f for f, _ in err.problems], str(err)
    assert fragment in str(err)
    assert isinstance(err, UsageError)


def test_all_problems_are_reported_at_once(tmp_path):
    doc = small(engine="tgi", hardware="nope")
    doc["parameters"]["ep_size"]["choices"] = [1, 1]
    err = load_error(tmp_path, doc)
    assert {f for f, _ in err.problems} == {"engine", "hardware", "parameters.ep_size.choices[1]"}
    assert err.field == "parameters.ep_size.choices[1]"


def test_not_a_mapping_and_missing_file(tmp_path):
    err = load_error(tmp_path, "- just\n- a list\n")
    assert "a space file must be a mapping, not a list" in str(err)
    with pytest.raises(SpaceError, match=r"no such file or packaged space; packaged spaces: kimi-k2\.6"):
        load_space(tmp_path / "missing.yaml")
    with pytest.raises(SpaceError, match="no such file or packaged space"):
        load_space("no-such-space")


def test_space_error_exits_with_usage_code(tmp_path, monkeypatch, capsys):
    bad = write(tmp_path, small(engine="tgi"))

    def parser() -> argparse.ArgumentParser:
        p = argparse.ArgumentParser(prog="tuner")
        sub = p.add_subparsers(dest="command")
        sub.add_parser("search").set_defaults(handler=lambda args: load_space(bad))
        return p

    monkeypatch.setattr(cli, "build_parser", parser)
    assert cli.main(["search"]) == cli.EXIT_USAGE == 2
    assert f"tuner search: error: {bad}: engine: unknown engine 'tgi'" in capsys.readouterr().err


def test_profile_files_resolve_next_to_the_space(tmp_path):
    hw = yaml.safe_load((REPO / "tuner/data/hardware/rtx-pro-6000-pcie-x8.yaml").read_text())
    hw.update(id="box-4", gpu_count=4)
    (tmp_path / "box-4.yaml").write_text(yaml.safe_dump(hw))
    space = load_space(write(tmp_path, small(hardware="box-4.yaml")))
    assert space.gpu_count == 4
    got = space.check({"layout": "tp8", "ep_size": 1, "mem": None, "proto": None, "p2p": False, "mrr": 128})
    assert got[0].startswith("invalid-args: RuntimeError: CUDA error: invalid device ordinal")


# ----------------------------------------------------------------- sampling


def test_suggest_honours_when_in_file_order(space):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen = []
    for _ in range(60):
        trial = study.ask()
        params = space.suggest(trial)
        seen.append(params)
        assert ("enable_eplb" in params) == (params["ep_size"] > 1)
        assert ("deepep_mode" in params) == (params["moe_a2a_backend"] == "deepep")
        graphs = not params["disable_cuda_graph"] and params.get("deepep_mode") != "normal"
        assert ("cuda_graph_max_bs" in params) == graphs
        assert params["mem_fraction_static"] == round(params["mem_fraction_static"], 2)
        assert 0.80 <= params["mem_fraction_static"] <= 0.94
        assert set(params) <= set(space.parameters)
        study.tell(trial, 1.0)
    assert {p["layout"] for p in seen} == {"tp8", "pp8", "tp4pp2", "tp2pp4"}
    assert None in {p["nccl_proto"] for p in seen}


def test_suggest_with_a_fixed_trial_returns_those_values(space):
    params = {**BEST, "ep_size": 1}
    params.pop("enable_eplb")
    assert space.suggest(optuna.trial.FixedTrial(params)) == params


def test_distributions(space):
    dists = space.distributions()
    assert set(dists) == set(space.parameters)
    assert dists["layout"].choices == ("tp8", "pp8", "tp4pp2", "tp2pp4")
    assert dists["nccl_proto"].choices == (None, "LL", "Simple", "LL,Simple")
    assert dists["enable_eplb"].choices == (False, True)
    mem = dists["mem_fraction_static"]
    assert isinstance(mem, optuna.distributions.FloatDistribution)
    assert (mem.low, mem.high, mem.step) == (0.8, 0.94, 0.01)
    # Optuna accepts them as-is, e.g. for warm-start trials
    trial = optuna.trial.create_trial(params=BEST, distributions={k: dists[k] for k in BEST}, value=1.0)
    assert trial.params["layout"] == "tp8"


# ----------------------------------------------------------------- rendering


@pytest.fixture()
def small_space(tmp_path) -> Space:
    return load_space(write(tmp_path, small()))


BASE = {"layout": "tp8", "ep_size": 1, "mem": 0.9, "proto": "LL", "p2p": True, "mrr": 192}


def test_bundles_set_several_flags(small_space):
    spec = small_space.render({**BASE, "layout": "tp4pp2"})
    assert spec.argv[spec.argv.index("--tp-size") + 1] == "4"
    assert spec.argv[spec.argv.index("--pp-size") + 1] == "2"
    assert "--pp-size" not in small_space.render(BASE).argv


def test_tunables_override_fixed_flags_in_place_and_null_unsets(small_space):
    argv = small_space.render(BASE).argv
    assert argv[:7] == [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/m",
        "--mem-fraction-static",
        "0.9",
    ]
    assert argv.count("--mem-fraction-static") == 1
    # null = engine default: the fixed 0.88 is dropped too
    assert "--mem-fraction-static" not in small_space.render({**BASE, "mem": None}).argv


def test_bool_and_null_rendering(small_space):
    spec = small_space.render({**BASE, "ep_size": 8, "enable_eplb": True})
    assert "--enable-eplb" in spec.argv
    assert spec.argv[spec.argv.index("--enable-eplb") + 1].startswith("--")  # bare flag
    assert "--enable-eplb" not in small_space.render({**BASE, "ep_size": 8, "enable_eplb": False}).argv
    assert "--trust-remote-code" in spec.argv
    assert spec.env == {"NCCL_P2P_DISABLE": "1", "NCCL_PROTO": "LL"}
    off = small_space.render({**BASE, "p2p": False, "proto": None})
    assert off.env == {"NCCL_P2P_DISABLE": "0"}
    assert small_space.render({**BASE, "proto": "LL,Simple"}).env["NCCL_PROTO"] == "LL,Simple"


def test_values_render_as_typed(small_space):
    noisy = {**BASE, "mem": 0.9000000000000001}
    with pytest.raises(SpaceError, match=r"parameters\.mem: 0\.9000000000000001 is not one of"):
        small_space.render(noisy)  # categorical values must be exact choices
    assert format_value(0.8800000000000001) == "0.88"
    assert format_value(2.0) == "2.0"
    assert format_value(-3.0) == "-3.0"
    assert format_value(1e-7) == "1e-07"
    assert format_value(16777216) == "16777216"
    assert render_flags({"--a": True, "--b": False, "--c": None, "--d": [1, 2], "--e": ""}) == [
        "--a",
        "--d",
        "1",
        "2",
        "--e",
        "",
    ]


def test_key_is_the_rendered_identity(space, small_space):
    # a when-skipped parameter does not change the configuration
    with_skipped = {**BASE, "enable_eplb": True}
    assert small_space.key(with_skipped) == small_space.key(BASE)
    assert small_space.render(with_skipped) == small_space.render(BASE)
    # float noise from a stepped sampler renders, and so keys, the same
    assert space.key({**BEST, "mem_fraction_static": 0.8800000000000001}) == space.key(BEST)
    assert space.render({**BEST, "mem_fraction_static": 0.8800000000000001}).argv == space.render(BEST).argv
    # anything that renders differently is a different configuration
    assert space.key({**BEST, "nccl_proto": None}) != space.key(BEST)
    assert space.key({**BEST, "max_running_requests": 384}) != space.key(BEST)
    # insertion order does not matter
    assert space.key(dict(reversed(list(BEST.items())))) == space.key(BEST)


def test_render_refuses_unknown_missing_and_out_of_domain_values(space):
    with pytest.raises(SpaceError) as info:
        space.render({**BEST, "tp_size": 8, "ep_size": 3, "mem_fraction_static": 0.955})
    fields = {f for f, _ in info.value.problems}
    assert fields == {"parameters.tp_size", "parameters.ep_size", "parameters.mem_fraction_static"}
    missing = dict(BEST)
    del missing["layout"]
    with pytest.raises(SpaceError, match=r"parameters\.layout: no value given"):
        space.render(missing)
    with pytest.raises(SpaceError, match="not on the grid"):
        space.render({**BEST, "mem_fraction_static": 0.885})
    with pytest.raises(SpaceError, match="not one of"):
        space.render({**BEST, "disable_cuda_graph": 1})  # 1 is not a boolean choice


def test_differences(space):
    other = {**BEST, "ep_size": 1, "nccl_proto": None, "mem_fraction_static": 0.8800000000000001}
    other.pop("enable_eplb")
    assert space.differences(other, BEST) == {
        "ep_size": (1, 8),
        "enable_eplb": (None, False),
        "nccl_proto": (None, "LL"),
    }
    assert space.differences(BEST, BEST) == {}


def test_coerce_command_line_values(space):
    assert space.coerce(
        {
            "ep_size": "8",
            "nccl_proto": "null",
            "layout": "tp4pp2",
            "enable_eplb": "true",
            "mem_fraction_static": "0.9",
            "nccl_buffsize": "16777216",
        }
    ) == {
        "ep_size": 8,
        "nccl_proto": None,
        "layout": "tp4pp2",
        "enable_eplb": True,
        "mem_fraction_static": 0.9,
        "nccl_buffsize": 16777216,
    }
    with pytest.raises(SpaceError) as info:
        space.coerce({"ep_size": "3", "nope": "1", "mem_fraction_static": "0.99"})
    assert {f for f, _ in info.value.problems} == {
        "parameters.ep_size",
        "parameters.nope",
        "parameters.mem_fraction_static",
    }


# ----------------------------------------------------------------- feasibility (SGLang rules)


def reasons(space: Space, **changes) -> list[str]:
    params = {**BEST, **changes}
    if params["ep_size"] == 1:
        params.pop("enable_eplb", None)
    return space.check(params)


def test_moe_dense_tp_size_only_none_one_or_tp(space):
    assert reasons(space, moe_dense_tp_size=8) == []
    assert reasons(space, moe_dense_tp_size=1) == []
    assert reasons(space, layout="tp4pp2", ep_size=4, moe_dense_tp_size=1) == []
    assert reasons(space, layout="tp4pp2", ep_size=4, moe_dense_tp_size=8) == [
        "invalid-args: AssertionError: moe_dense_tp_size only supports None, 1, or tp_size currently"
    ]


def test_ep_larger_than_tp_crashes(space):
    assert reasons(space, layout="tp2pp4", ep_size=4) == [
        "crash: ZeroDivisionError: integer division or modulo by zero (moe_tp_size = tp_size // ep_size)"
    ]
    assert reasons(space, layout="pp8", ep_size=1) == []


def test_deepep_forces_ep_to_tp(space):
    # DeepEP overrides ep_size with tp_size, so ep 2 under tp8 (or ep 8 under tp4) launches
    for layout, ep, tp in (("tp8", 2, 8), ("tp4pp2", 8, 4)):
        params = {
            **BEST,
            "layout": layout,
            "ep_size": ep,
            "moe_a2a_backend": "deepep",
            "deepep_mode": "low_latency",
        }
        assert space.check(params) == []
        assert validate(SGLANG.parse(space.render(params).argv), 8).ep_size == tp


def test_eplb_needs_expert_parallelism(space):
    # under pp8 (tp 1) DeepEP forces ep back to 1, and EPLB then has nothing to balance
    got = reasons(
        space, layout="pp8", ep_size=8, enable_eplb=True, moe_a2a_backend="deepep", deepep_mode="low_latency"
    )
    assert len(got) == 1
    assert got[0].startswith("invalid-args: AssertionError") and "ep_size > 1" in got[0]


def test_ep_must_divide_tp_and_gpu_count(tmp_path):
    doc = small()
    doc["parameters"]["layout"]["choices"].update(
        {"tp6": {"flags": {"--tp-size": 6}}, "tp8pp2": {"flags": {"--tp-size": 8, "--pp-size": 2}}}
    )
    doc["parameters"]["ep_size"]["choices"] = [1, 4, 8]
    s = load_space(write(tmp_path, doc))
    assert s.check({**BASE, "layout": "tp6", "ep_size": 4, "enable_eplb": False}) == [
        "invalid-args: AssertionError: tp_size (6) must be divisible by ep_size (4)"
    ]
    got = s.check({**BASE, "layout": "tp8pp2"})
    assert got == [
        "invalid-args: RuntimeError: CUDA error: invalid device ordinal (the layout needs 16 "
        "GPUs: tp 8 x pp 2 x dp 1, this host has 8)"
    ]


def test_constraints_and_rules_are_reported_together(space):
    got = reasons(space, nccl_min_nchannels=16, nccl_max_nchannels=8, layout="tp2pp4", ep_size=4)
    assert got[0] == "constraint: NCCL_MIN_NCHANNELS above NCCL_MAX_NCHANNELS"
    assert got[1].startswith("crash: ZeroDivisionError")
    assert reasons(space, nccl_min_nchannels=16, nccl_max_nchannels=None) == []
    assert reasons(space, nccl_min_nchannels=16, nccl_max_nchannels=16) == []


def test_a_constraint_that_cannot_be_evaluated_is_a_space_error(tmp_path):
    s = load_space(write(tmp_path, small(constraints=[{"expr": "mem < 0.95", "reason": "headroom"}])))
    assert s.check(BASE) == []
    with pytest.raises(SpaceError, match=r"constraints\[0\]\.expr: cannot evaluate 'mem < 0.95': TypeError"):
        s.check({**BASE, "mem": None})


def test_constraint_reason_defaults_to_its_expression(tmp_path):
    s = load_space(write(tmp_path, small(constraints=[{"expr": "mrr <= 128"}])))
    assert s.check(BASE) == ["constraint: mrr <= 128"]


# ----------------------------------------------------------------- the whole grid


def test_all_configs_enumerates_the_grid_with_when(small_space):
    configs = list(small_space.all_configs())
    # layout 2 x (ep 1 + ep 8 x eplb 2) x mem 2 x proto 3 x p2p 2 x mrr 3
    assert len(configs) == 2 * 3 * 2 * 3 * 2 * 3 == small_space.grid_size() == 216
    assert all(("enable_eplb" in c) == (c["ep_size"] > 1) for c in configs)
    assert len({small_space.key(c) for c in configs}) == len(configs)  # all distinct launches
    assert {c["mrr"] for c in configs} == {128, 192, 256}


def test_reference_grid_size(space):
    # ep x eplb: 1 + 3*2; a2a x mode x graphs x graph-bs: none 2 graph settings (4 bs + off),
    # deepep auto/low_latency likewise, normal (graphs off either way) 2
    assert space.grid_size() == 4 * 7 * 3 * (5 + 5 + 5 + 2) * 5 * 5 * 15 * 4 * 4 * 4 * 3 * 3
    first = next(space.all_configs())
    assert first == {
        "layout": "tp8",
        "ep_size": 1,
        "moe_dense_tp_size": None,
        "moe_a2a_backend": "none",
        "disable_cuda_graph": False,
        "cuda_graph_max_bs": None,
        "max_running_requests": 128,
        "num_continuous_decode_steps": 1,
        "mem_fraction_static": 0.8,
        "nccl_proto": None,
        "nccl_min_nchannels": None,
        "nccl_max_nchannels": None,
        "nccl_nthreads": None,
        "nccl_buffsize": None,
    }
    assert space.check(first) == []


def test_floats_without_step_are_not_a_grid(tmp_path):
    doc = small()
    doc["parameters"]["frac"] = {"flag": "--frac", "type": "float", "low": 0.1, "high": 0.2}
    s = load_space(write(tmp_path, doc))
    assert not s.is_finite()
    with pytest.raises(ValueError, match="frac"):
        next(s.all_configs())
    with pytest.raises(ValueError, match="frac"):
        s.grid_size()
    assert s.suggest(optuna.trial.FixedTrial({**BASE, "frac": 0.123})) == {**BASE, "frac": 0.123}


# ----------------------------------------------------------------- packaged spaces


def test_packaged_space_is_found_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert DEFAULT_SPACE in packaged_spaces()
    path = resolve_space(DEFAULT_SPACE)
    assert path.read_text() == REFERENCE.read_text()
    assert resolve_space(f"{DEFAULT_SPACE}.yaml") == path
    assert load_space(DEFAULT_SPACE).name == DEFAULT_SPACE
    # a file in the current directory wins over a packaged name
    local = write(tmp_path, small(name="local"), name=DEFAULT_SPACE)
    assert resolve_space(DEFAULT_SPACE) == Path(DEFAULT_SPACE)
    assert load_space(DEFAULT_SPACE).name == "local"
    local.unlink()


def test_package_data_ships_the_repository_spaces():
    shipped = REPO / "tuner" / "data" / "spaces"
    if not shipped.is_dir():
        pytest.skip("not a source checkout")
    source = REPO / "search_spaces"
    assert sorted(p.name for p in shipped.iterdir()) == sorted(p.name for p in source.iterdir())
    for path in (REPO / "search_spaces").glob("*.yaml"):
        load_space(path)  # every shipped space is valid


# ----------------------------------------------------------------- engine adapter


def test_engine_registry_and_protocol():
    engine = engines.get("sglang")
    assert engine is SGLANG
    assert isinstance(engine, Engine)
    assert (engine.health_path, engine.default_port) == ("/health", 30000)
    assert re.search(engine.ready_pattern, "INFO: The server is fired up and ready to roll!")
    with pytest.raises(KeyError, match="unknown engine 'tgi'; known: sglang, vllm"):
        engines.get("tgi")
    spec = engine.render(
        ["python3", "-m", "sglang.launch_server"],
        {"--tp-size": 8, "--x": False},
        {"A": True, "B": None, "C": 0.5},
    )
    assert spec == LaunchSpec(
        argv=["python3", "-m", "sglang.launch_server", "--tp-size", "8"],
        env={"A": "1", "C": "0.5"},
        engine="sglang",
    )
    assert engine.parse(spec.argv) == parse_args(spec.argv)
    with pytest.raises(Exception, match="invalid int value"):
        engine.check([*spec.argv, "--ep-size", "two"], 8)


@pytest.mark.parametrize(
    ("log", "reason"),
    [
        (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: mem_fraction_static=0.8",
            "oom",
        ),
        (
            "Traceback (most recent call last):\nException: Capture cuda graph failed: CUDA out of memory. "
            "set --mem-fraction-static to a smaller value",
            "cuda-graph-oom",
        ),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "oom"),
        (
            "usage: launch_server.py [-h]\nlaunch_server.py: error: argument --tp-size: invalid int value: 'x'",
            "invalid-args",
        ),
        ('Traceback (most recent call last):\n  File "server_args.py"\nAssertionError', "invalid-args"),
        ("[2026-01-01 TP0] ValueError: mem_fraction_static must be in (0, 1)", "invalid-args"),
        ("Traceback (most recent call last):\nRuntimeError: NCCL error in: ...", "crash"),
        ("ERROR: [Errno 98] error while attempting to bind on address: address already in use", "port-busy"),
        ("INFO: loading weights\nINFO: done", None),
    ],
)
def test_failure_patterns_classify_sglang_logs(log, reason):
    got = SGLANG.classify(log)
    if reason is None:
        assert got is None
    else:
        assert got is not None and got[0] == reason
        assert got[1] in log.splitlines()  # the matched line, for the message
