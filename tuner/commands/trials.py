"""``tuner trials``: one row per trial of a study."""

from __future__ import annotations

import argparse

from tuner.commands._common import add_study_args
from tuner.errors import UsageError
from tuner.study import MODEL_PICK, REPEAT_OF, TrialRecord, load_study


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trials", help="list a study's trials: params, per-level numbers, state, reason")
    add_study_args(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        study = load_study(args.study, args.storage)
    except LookupError as exc:
        raise UsageError(str(exc)) from exc
    print(f"study {study.study_name}")
    for t in study.get_trials(deepcopy=False):
        rec = TrialRecord.of(t)
        value = "-" if not rec.values else "/".join(f"{v:.1f}" for v in rec.values)
        levels = " ".join(
            f"C{lv['concurrency']}:{lv['output_tok_s']:.0f}" for lv in rec.attrs.get("levels", [])
        )
        reason = rec.attrs.get("reason", "")
        if rec.outcome == "reused":
            reason = f"reused trial #{rec.attrs.get('reused_from')}"
        if REPEAT_OF in rec.attrs:
            reason = (f"launched again: same configuration as #{rec.attrs[REPEAT_OF]} " + reason).strip()
        if MODEL_PICK in rec.attrs:
            pick = f"the additive model's pick: #{rec.attrs[MODEL_PICK]} with the changes the study favours"
            reason = f"{pick} {reason}".strip()
        if rec.attrs.get("rewrites"):  # the engine starts another server than the flags say
            changed = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in rec.attrs["rewrites"].items())
            reason = f"{reason} (SGLang resolves {changed})".strip()
        if "retry_history" in t.system_attrs or "failed_trial" in t.system_attrs:
            reason = (reason + f" (retry of #{t.system_attrs.get('failed_trial')})").strip()
        params = " ".join(f"{k}={v}" for k, v in rec.params.items())
        print(f"#{rec.number:<3d} {rec.outcome:<10s} value={value:<10s} {levels:<40s} {reason}")
        print(f"     {params}")
    return 0
