"""Solver guidance: unsolved GRPO groups get the solver's plan, in the policy's format, as a member."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")

from envengineer.mapf.config import RoundConfig
from envengineer.mapf.generator import generate_round
from envengineer.mapf.validator import validate
from envengineer.models.small_policy import init_policy
from envengineer.training.dataset import prompt_rows, target_response
from envengineer.training.grpo import load_tokenizer
from envengineer.training.guidance import SolverGuide


def _boards(n: int, seed: int = 0) -> list:
    config = RoundConfig.model_validate(
        {
            "sizes": {3: {"data_ratio": 1.0, "hole_ratio": 0.2, "wait_ratio": 0.5}},
            "num_agents": 2,
            "num_samples": n,
        }
    )
    return generate_round(config, seed)


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_policy(tmp_path_factory.mktemp("policy") / "tiny", size="tiny", seed=0)


def _guide(policy: Path, when: str = "failed", max_tokens: int = 512) -> SolverGuide:
    tokenizer = load_tokenizer(str(policy))
    return SolverGuide(
        tokenizer,
        target="solver_free",
        when=when,
        max_tokens=max_tokens,
        eos_token_ids=[tokenizer.eos_token_id],
        chat_template_kwargs={"enable_thinking": False},
    )


def test_the_plan_is_the_sft_target_in_the_policys_tokens_ending_with_its_end_of_turn(policy: Path) -> None:
    guide = _guide(policy)
    board = _boards(1)[0]
    row = prompt_rows([board], style="compact")[0]
    ids = guide.plan_ids(row)
    assert ids[-1] == guide.tokenizer.eos_token_id and guide.tokenizer.eos_token_id not in ids[:-1]
    text = guide.tokenizer.decode(ids, skip_special_tokens=True)
    assert text.replace(" ", "") == target_response(board, "solver_free").replace(" ", "")
    assert validate(board, text).optimal


def test_only_groups_without_an_optimal_member_are_guided_and_long_plans_stay_out(policy: Path) -> None:
    guide = _guide(policy)
    boards = _boards(2)
    rows = [r for r in prompt_rows(boards, style="compact") for _ in range(3)]  # groups of 3
    junk = guide.tokenizer("<answer> A0: UP </answer>", add_special_tokens=False)["input_ids"]
    solved = guide.plan_ids(rows[0])
    completions = [list(junk), list(solved), list(junk), list(junk), list(junk), list(junk)]
    assert guide.apply(rows, completions, group=3) == [5]  # the first group found the optimum itself
    assert completions[:3] == [junk, solved, junk]
    assert completions[5] == guide.plan_ids(rows[3]) and completions[3] == junk
    assert (guide.guided, guide.groups) == (1, 2)

    always = _guide(policy, when="always")
    completions = [list(junk) for _ in rows]
    assert always.apply(rows, completions, group=3) == [2, 5]

    short = _guide(policy, when="always", max_tokens=len(solved) - 1)
    completions = [list(junk) for _ in rows]
    assert short.apply(rows, completions[:3], group=3) == []


def test_a_guided_grpo_round_scores_the_solvers_plan_in_every_unsolved_group(
    policy: Path, tmp_path: Path
) -> None:
    from envengineer.training.grpo import train_round
    from envengineer.training.presets import load_preset

    seen: list[tuple[str, str]] = []

    def record(completions: list, instance: list, **kwargs: object) -> list[float]:
        seen.extend(
            (c[-1]["content"] if isinstance(c, list) else c, i)
            for c, i in zip(completions, instance, strict=True)
        )
        return [0.0] * len(completions)

    preset = load_preset("grpo-small", "grpo").model_dump(mode="json")
    preset["grpo"].update(
        use_cpu=True, logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True,
        max_steps=2, per_device_train_batch_size=8, num_generations=4,
    )  # fmt: skip
    preset.update(max_completion_length=160, probe={"every": 0}, guidance={"enabled": True})
    result = train_round(str(policy), _boards(16), out_dir=tmp_path, preset=preset, reward_funcs=[record])
    assert result.steps == 2 and len(seen) == 16
    from envengineer.mapf.instance import Instance

    verdicts = [validate(Instance.from_dict(json.loads(i)), text) for text, i in seen]
    # an untrained policy solves nothing: each group's last member is the plan, and only it is optimal
    assert [v.optimal for v in verdicts] == [False, False, False, True] * 4
    logged = [
        e["guidance/groups_guided"] for e in result.metrics["log_history"] if "guidance/groups_guided" in e
    ]
    assert logged == [1.0, 1.0]  # the share of groups guided
    sampled = result.metrics["sampled"]["3"]  # what the policy wrote: the plans are left out
    assert (sampled["completions"], sampled["optimal"], sampled["groups"]) == (12, 0.0, 4)
