"""Stage ``config``: round 0's random default, or the engineer's projected proposal for a later round."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError
from envengineer.loop.records import field_of, read_scores, to_jsonable
from envengineer.loop.rundir import atomic_write_json, atomic_write_text
from envengineer.loop.stages.screen import Proposal, choose
from envengineer.loop.stages.screen import paths as screen_paths
from envengineer.loop.state import Loop, RoundState
from envengineer.mapf.config import RoundConfig

log = logging.getLogger(__name__)

#: How each reward shape scores a plan (for the T=full context).
_REWARD_TEXT: dict[str, str] = {
    "sparse": "1 for a valid plan and a bonus for an optimal one, 0 otherwise (as in the paper)",
    "graded": "credit for a parseable, valid and optimal plan, graded between them",
    "dense": "credit for each validity check passed in order and for each agent that ends on its goal",
}

#: What each ``training.learner`` does (for the T=full context): its algorithm and its objective.
_LEARNER_TEXT: dict[str, tuple[str, str]] = {
    "grpo": (
        "GRPO (group relative policy optimisation, TRL GRPOTrainer)",
        "maximise the mean reward of sampled plans relative to their group "
        "(advantage = reward minus the group mean, divided by the group's standard deviation)",
    ),
    "sft": (
        "supervised fine-tuning on the exact solver's optimal plans (TRL SFTTrainer)",
        "minimise the cross-entropy of the solver's optimal plan given the board (loss on the answer only)",
    ),
    "teach": (
        "the exact solver teaches the policy on its own answers (DAgger): the policy answers the round's "
        "boards, the solver keeps the longest start of each answer that an optimal plan begins with and "
        "writes an optimal rest",
        "minimise the cross-entropy of the solver's corrected plan from the policy's first mistake to the "
        "end of the answer",
    ),
}

#: The teach learner's settings shown as its hyper-parameters (max_steps: the steps a loop round runs,
#: :func:`envengineer.training.teach.round_steps`).
_TEACH_KEYS = (
    "learning_rate",
    "batch_size",
    "rollout_batch",
    "steps_per_rollout",
    "temperature",
    "max_steps",
)

_HYPER_KEYS = (
    "learning_rate",
    "num_generations",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "temperature",
    "beta",
    "epsilon",
    "loss_type",
    "lr_scheduler_type",
    "max_grad_norm",
)


def run(loop: Loop, state: RoundState) -> tuple[dict[str, Any], dict[str, Any]]:
    r = state.index
    d = loop.rd.round_dir(r)
    if r == 0:
        config = loop.round0
        raw: Any = {"source": "round0 random default", "seed": loop.exp.seeds.round0}
        projection: dict[str, Any] = {
            "source": "round0",
            "raw": raw,
            "changes": [],
            "errors": [],
            "fell_back": False,
            "config": config.model_dump(mode="json"),
        }
        state.source = "round0"
        info: dict[str, Any] = {"source": "round0"}
    else:
        from envengineer.engineer.proposal import repeats_one_setting

        proposal, screened = propose_round(loop, r)
        record, config, bounded = proposal.record, proposal.config, proposal.bounded
        raw = record.get("raw_proposal")
        state.source = f"engineer:{loop.exp.engineer.kind}"
        projection = {
            "source": state.source,
            "raw": raw,
            "changes": list(record.get("changes") or []),
            "errors": list(record.get("errors") or []),
            "issues": list((record.get("details") or {}).get("issues") or []),
            "fell_back": bool(record.get("fell_back")),
            "fallback_reason": record.get("fallback_reason"),
            "attempts": len(record.get("attempts") or []),
            "repeats_one_setting": repeats_one_setting(raw),  # degenerate: one setting for every size
            "config": config.model_dump(mode="json"),
        }
        if bounded is not None:
            projection["trust_region"] = bounded
        if screened is not None:
            projection["screened"] = screened
        write_engineer(d / "engineer", record)
        state.rationale = record.get("rationale")
        info = {
            "source": state.source,
            "fell_back": projection["fell_back"],
            "attempts": projection["attempts"],
            "changes": len(projection["changes"]),
            "seconds": record.get("seconds"),
        }
        if screened is not None:
            info["screen_chosen"] = screened["chosen"]
    atomic_write_json(d / "proposal.raw.json", raw)
    atomic_write_json(d / "projection.json", projection)
    atomic_write_text(d / "config.applied.yaml", config.to_yaml())
    state.config = config
    paths: dict[str, Any] = {"config": d / "config.applied.yaml", "projection": d / "projection.json"}
    if (d / "engineer" / "rationale.txt").exists():  # read back on resume (the S module): hashed too
        paths["rationale"] = d / "engineer" / "rationale.txt"
    if r > 0:
        paths.update(screen_paths(loop, r))  # hashed by the ledger: a resume reuses only what it recorded
    return paths, info


def propose_round(loop: Loop, r: int) -> tuple[Proposal, dict[str, Any] | None]:
    """Round ``r``'s proposal: the engineer asked once, or with ``engineer.screen`` several times and the
    candidate the probe finds most learnable kept (:mod:`envengineer.loop.stages.screen`), with
    ``projection.json``'s ``screened`` entry (None without a screen)."""
    if loop.exp.engineer.screen is None:
        return propose(loop, r), None
    return choose(loop, r, lambda seed: propose(loop, r, seed))


def propose(loop: Loop, r: int, seed: int | None = None) -> Proposal:
    """One answer of the engineer for round ``r`` (``seed``: a screen's sampling seed), projected and within
    the trust region."""
    decision = ask_engineer(loop, r, seed)
    record = decision.to_dict() if hasattr(decision, "to_dict") else to_jsonable(decision)
    config = field_of(decision, "config")
    if not isinstance(config, RoundConfig):
        config = RoundConfig.model_validate(config)
    if (config.num_agents, config.num_samples) != (loop.exp.num_agents, loop.exp.samples_per_round):
        raise ConfigError(
            f"round {r}: the engineer changed num_agents/num_samples, which the experiment "
            "sets; fix the engineer (projection keeps them)"
        )
    config, bounded = bound_move(loop, r, config)
    return Proposal(record, config, bounded)


def bound_move(loop: Loop, r: int, config: RoundConfig) -> tuple[RoundConfig, dict[str, Any] | None]:
    """``config`` within the experiment's trust region around round ``r - 1``'s, and what was pulled back."""
    region = loop.exp.engineer.trust_region
    if region is None:
        return config, None
    from envengineer.engineer.trust_region import apply_trust_region

    bounded, changes = apply_trust_region(loop.rounds[r - 1].config, config, region)
    if changes:
        log.info("round %d: the trust region pulled back %d value(s) of the proposal", r, len(changes))
    return bounded, {
        "bounds": region.model_dump(mode="json"),
        "proposed": config.model_dump(mode="json"),
        "changes": changes,
    }


def sampled_stats(loop: Loop, r: int) -> dict[str, Any] | None:
    """What round ``r``'s training sampled per map size (``metrics.json["sampled"]``), or None."""
    path = loop.rd.round_dir(r) / "train" / "metrics.json"
    try:
        sampled = json.loads(path.read_text(encoding="utf-8"))["metrics"]["sampled"]
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no training this round (scripted policy), or a run from before it was recorded
    return sampled if isinstance(sampled, dict) and sampled else None


def load(loop: Loop, state: RoundState, entry: Any) -> None:
    d = loop.rd.round_dir(state.index)
    state.config = RoundConfig.load(d / "config.applied.yaml")
    state.source = str(entry.info.get("source", ""))
    rationale = d / "engineer" / "rationale.txt"
    state.rationale = rationale.read_text(encoding="utf-8").strip() if rationale.exists() else None


def ask_engineer(loop: Loop, r: int, seed: int | None = None) -> Any:
    prev = loop.rounds[r - 1]
    current_model = prev.checkpoint
    kw = {} if seed is None else {"seed": seed}  # without a screen, the factory's own seed, as always
    engineer = loop.comps.engineer_factory(loop.exp, model=current_model, round=r, round0=loop.round0, **kw)
    request = build_request(loop, r)
    decision = engineer.propose(request)
    if field_of(decision, "config", None) is None:
        raise ConfigError(f"the {loop.exp.engineer.kind} engineer returned no configuration for round {r}")
    return decision


def build_request(loop: Loop, r: int) -> Any:
    """The engineer's input for proposing round ``r``: everything known once round ``r - 1`` finished."""
    from envengineer.engineer.context import HistoryEntry, context_spec
    from envengineer.engineer.engineers import EngineerRequest

    prev = loop.rounds[r - 1]
    history = [
        HistoryEntry.from_report(s.index, s.config, s.validation, is_default=s.source == "round0")
        for s in loop.rounds[: r - 1]
    ]
    report = {k: v for k, v in (prev.validation or {}).items() if k != "verdicts"} or None
    context = context_spec(loop.exp.engineer.context.switches())
    return EngineerRequest(
        round_index=r - 1,
        config=prev.config,
        report=report,
        space=loop.space,
        history=history,
        previous_rationale=prev.rationale,
        training=training_details(loop, r - 1),
        context=context,
        sampled=sampled_stats(loop, r - 1),
        agents=tuple(loop.exp.training.agents or ()),  # the round's real mix, named in the prompt
        start_report=start_report(loop) if context.effects else None,  # read by E alone
    )


def start_report(loop: Loop) -> dict[str, Any] | None:
    """The starting model's validation (``start/validation/scores.json``) without its verdicts, or None
    where the experiment does not validate the start or the file is not there."""
    path = loop.rd.root / "start" / "validation" / "scores.json"
    if not loop.exp.validation.start or not path.is_file():
        return None
    return {k: v for k, v in read_scores(path).items() if k != "verdicts"}


def training_details(loop: Loop, r: int) -> dict[str, Any]:
    """Facts for the T module: bookkeeping keys always, the training details (read only by ``T=full``) after.

    Bookkeeping: ``total_rounds``, ``epochs``, ``num_samples``, ``num_agents``. Full adds ``algorithm`` and
    ``objective`` (by ``training.learner``), ``hyperparameters`` (from the training preset when it is
    readable; the teach learner's from its settings) and, for GRPO, ``reward``.
    """
    exp = loop.exp
    learner = exp.training.learner
    algorithm, objective = _LEARNER_TEXT[learner]
    details: dict[str, Any] = {
        "total_rounds": exp.rounds,
        "epochs": exp.epochs_per_round,
        "num_samples": exp.samples_per_round,
        "num_agents": exp.num_agents,
        "algorithm": algorithm,
        "objective": objective,
    }
    if learner == "teach":
        from envengineer.training.teach import round_steps

        del details["epochs"]  # teach runs by steps, never by passes over the boards
        teach = exp.training.teach.model_dump()
        teach["max_steps"] = round_steps(exp.training.teach, exp.training.max_steps or None)
        details["hyperparameters"] = {k: teach[k] for k in _TEACH_KEYS}
        return details
    kind = exp.training.preset_kind
    try:
        from envengineer.training.presets import load_preset

        preset = load_preset(exp.training.preset, kind)
    except Exception as exc:  # no training extra or an unreadable preset: bookkeeping works
        log.debug("training preset not readable for the full training details: %s", exc)
        return details
    if kind == "grpo":
        shape = getattr(preset, "reward_shape", None)
        details["reward"] = f"{shape}: " + _REWARD_TEXT.get(
            str(shape), "the testbed's reward on validated plans"
        )
    hyper = {k: v for k, v in dict(getattr(preset, kind, {}) or {}).items() if k in _HYPER_KEYS}
    hyper["max_completion_length"] = getattr(preset, "max_completion_length", None)
    lora = getattr(preset, "lora", None)
    if lora is not None and getattr(lora, "enabled", False):
        hyper["lora_rank"] = lora.r
    if exp.training.max_steps:
        hyper["max_steps"] = exp.training.max_steps
    details["hyperparameters"] = hyper
    return details


def write_engineer(d: Path, record: dict[str, Any]) -> None:
    """The engineer's notebook: prompt (messages and readable text), responses, rationale, attempts."""
    prompt = record.get("prompt")
    if prompt:
        atomic_write_json(d / "prompt.json", prompt)
        atomic_write_text(
            d / "prompt.md",
            "\n\n".join(f"## {m.get('role', '?')}\n\n{m.get('content', '')}" for m in prompt) + "\n",
        )
    if record.get("responses"):
        atomic_write_json(d / "responses.json", record["responses"])
    if record.get("rationale"):
        atomic_write_text(d / "rationale.txt", str(record["rationale"]) + "\n")
    atomic_write_json(d / "attempts.json", record.get("attempts") or [])
    atomic_write_json(d / "decision.json", record)
