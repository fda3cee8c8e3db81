"""Stage ``train``: one training round from the previous checkpoint, by ``training.learner``: ``grpo`` (a
GRPO round through TRL, the default), ``sft`` (supervised fine-tuning on the exact solver's optimal plans of
the round's boards, the warm-start's learner) or ``teach`` (the solver teaching the policy on its own
answers); skipped for a scripted policy."""

from __future__ import annotations

from typing import Any

from envengineer.integrations.trackers import preset_with_report_to
from envengineer.loop.components import release_shared_backend
from envengineer.loop.records import train_record
from envengineer.loop.rundir import atomic_write_json
from envengineer.loop.seeds import round_seed
from envengineer.loop.stages.data import instances
from envengineer.loop.state import Loop, RoundState


def run(loop: Loop, state: RoundState) -> tuple[dict[str, Any], dict[str, Any], str]:
    r = state.index
    d = loop.rd.round_dir(r) / "train"
    exp = loop.exp
    if not exp.trains:
        reason = (
            "scripted policy: nothing to train" if exp.scripted else "training disabled in the experiment"
        )
        state.checkpoint = state.model_in
        atomic_write_json(
            d / "metrics.json",
            {
                "skipped": reason,
                "checkpoint": state.checkpoint,
                "model_in": state.model_in,
                "metrics": {},
                "steps": 0,
                "seconds": 0.0,
            },
        )
        return (
            {"metrics": d / "metrics.json"},
            {"skipped": reason, "checkpoint": state.checkpoint},
            "skipped",
        )
    seed = round_seed(exp.seeds.training, "training", r)
    release_shared_backend()
    if exp.training.learner == "teach":
        result = loop.comps.teacher(
            state.model_in,
            instances(loop, r),
            out_dir=d,
            settings=exp.training.teach,
            seed=seed,
            max_steps=exp.training.max_steps,
        )
    else:
        learn = loop.comps.sft_trainer if exp.training.learner == "sft" else loop.comps.trainer
        result = learn(
            state.model_in,
            instances(loop, r),
            out_dir=d,
            preset=preset_with_report_to(
                exp.training.preset, exp.training.report_to, exp.training.preset_kind
            ),
            epochs=exp.epochs_per_round,
            seed=seed,
            max_steps=exp.training.max_steps,
        )
    record = train_record(
        result,
        model_in=state.model_in,
        seed=seed,
        preset="teach" if exp.training.learner == "teach" else exp.training.preset,
        epochs=exp.epochs_per_round,
    )
    checkpoint = record["checkpoint"]
    atomic_write_json(d / "metrics.json", record)
    state.checkpoint = checkpoint
    return (
        {"metrics": d / "metrics.json", "checkpoint": checkpoint},
        {"checkpoint": checkpoint, "steps": record["steps"]},
        "done",
    )


def load(loop: Loop, state: RoundState, entry: Any) -> None:
    state.checkpoint = entry.info.get("checkpoint", state.model_in)
