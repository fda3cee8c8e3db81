"""The GRPO round's diagnostics (sampled stats per size, in-round probe, KL), DAPO's dynamic sampling and
solver guidance (unsolved groups get the solver's plan, in the policy's format, as their last member)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from envengineer.mapf.config import RoundConfig  # noqa: E402
from envengineer.mapf.generator import generate_round  # noqa: E402
from envengineer.mapf.instance import Instance  # noqa: E402
from envengineer.mapf.policies import respond  # noqa: E402
from envengineer.mapf.rewards import make_reward  # noqa: E402
from envengineer.mapf.validator import validate  # noqa: E402
from envengineer.models.small_policy import init_policy  # noqa: E402
from envengineer.training.dataset import prompt_rows, target_response  # noqa: E402
from envengineer.training.diagnostics import SampledStats  # noqa: E402
from envengineer.training.grpo import load_tokenizer  # noqa: E402
from envengineer.training.guidance import SolverGuide  # noqa: E402
from envengineer.training.trainer import _gather_groups, _informative  # noqa: E402

_CPU = {"use_cpu": True, "logging_steps": 1, "disable_tqdm": True, "report_to": "none", "save_strategy": "no"}


def _boards(n: int, sizes: tuple[int, ...] = (3, 4), seed: int = 0) -> list:
    config = RoundConfig.model_validate(
        {
            "sizes": {s: {"data_ratio": 1.0, "hole_ratio": 0.2, "wait_ratio": 0.5} for s in sizes},
            "num_agents": 2,
            "num_samples": n,
        }
    )
    return generate_round(config, seed)


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_policy(tmp_path_factory.mktemp("policy") / "tiny", size="tiny", seed=0)


def test_sampled_stats_count_rates_and_zero_variance_groups_per_size() -> None:
    small, big = _boards(2, sizes=(3,))[0], _boards(2, sizes=(5,))[0]
    optimal = lambda inst: respond("optimal", inst, np.random.default_rng(0))  # noqa: E731
    # group 1 (size 3): two optimal answers -> zero variance; group 2 (size 5): optimal and garbage
    completions = [optimal(small), optimal(small), optimal(big), "no plan"]
    instances = [small.to_json()] * 2 + [big.to_json()] * 2
    logged: list[tuple[str, float]] = []
    stats = SampledStats(make_reward("sparse"), group_size=2)
    rewards = stats(completions, instance=instances, log_metric=lambda k, v: logged.append((k, v)))
    assert rewards == [1.0, 1.0, 1.0, 0.0]
    assert stats.__name__ == "mapf_sparse"
    summary = stats.summary()
    assert summary["3"] == {"completions": 2, "valid": 1.0, "optimal": 1.0, "reward": 1.0, "groups": 1,
                            "zero_std": 1.0}  # fmt: skip
    assert summary["5"] == {"completions": 2, "valid": 0.5, "optimal": 0.5, "reward": 0.5, "groups": 1,
                            "zero_std": 0.0}  # fmt: skip
    assert ("sampled/size_3/zero_std", 1.0) in logged and ("sampled/size_5/valid", 0.5) in logged
    stats(completions[:2], instance=instances[:2])  # a second batch adds up
    assert stats.summary()["3"]["completions"] == 4 and stats.summary()["3"]["groups"] == 2


def test_informative_groups_and_merging_keeps_padding_sides() -> None:
    adv = torch.tensor([0.0, 0.0, 0.5, -0.5, 1e-6, -1e-6])
    assert _informative(adv, 2) == [1]  # a tie's float round-off is not a signal
    a = {
        "prompt_ids": torch.tensor([[7, 1, 2], [7, 1, 2]]),  # left padded with 7
        "prompt_mask": torch.tensor([[0, 1, 1], [0, 1, 1]]),
        "completion_ids": torch.tensor([[3], [4]]),
        "completion_mask": torch.tensor([[1], [1]]),
        "advantages": torch.tensor([1.0, -1.0]),
        "num_items_in_batch": torch.tensor(2),
    }
    b = {
        "prompt_ids": torch.tensor([[1, 2, 3, 4], [1, 2, 3, 4]]),
        "prompt_mask": torch.ones(2, 4, dtype=torch.long),
        "completion_ids": torch.tensor([[5, 6], [5, 7]]),
        "completion_mask": torch.tensor([[1, 1], [1, 0]]),
        "advantages": torch.tensor([0.5, -0.5]),
        "num_items_in_batch": torch.tensor(3),
    }
    merged = _gather_groups([(b, 0), (a, 0)], 2, pad_id=7)
    assert merged["prompt_ids"].tolist() == [[1, 2, 3, 4], [1, 2, 3, 4], [7, 7, 1, 2], [7, 7, 1, 2]]
    assert merged["prompt_mask"].tolist()[2] == [0, 0, 1, 1]
    assert merged["completion_ids"].tolist() == [[5, 6], [5, 7], [3, 7], [4, 7]]
    assert merged["completion_mask"].tolist() == [[1, 1], [1, 0], [1, 0], [1, 0]]
    assert merged["advantages"].tolist() == [0.5, -0.5, 1.0, -1.0]
    assert int(merged["num_items_in_batch"]) == 5


def _grpo(
    policy: Path, tmp_path: Path, instances: list, reward_funcs: list, lr: float = 1e-4, **preset_keys: object
) -> dict:
    from envengineer.training.grpo import train_round
    from envengineer.training.presets import load_preset

    preset = load_preset("grpo-small", "grpo").model_dump(mode="json")
    preset["grpo"].update(
        _CPU, max_steps=2, per_device_train_batch_size=8, num_generations=4, learning_rate=lr
    )
    preset["max_completion_length"] = 12
    preset.update(preset_keys)
    result = train_round(
        str(policy), instances, out_dir=tmp_path, preset=preset, reward_funcs=reward_funcs, seed=0
    )
    assert result.steps == 2
    return json.loads((tmp_path / "metrics.json").read_text())


def test_a_grpo_step_with_dynamic_sampling_refills_zero_variance_groups(policy: Path, tmp_path: Path) -> None:
    def length_on_3x3(completions: list, instance: list, **kwargs: object) -> list[float]:
        # varies on 3x3 boards (sampled lengths differ), constant elsewhere: 4x4 groups carry no signal
        sizes = [
            json.loads(i)["size"] if "size" in json.loads(i) else len(json.loads(i)["grid"]) for i in instance
        ]
        text = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [float(len(t)) if s == 3 else 0.0 for t, s in zip(text, sizes, strict=True)]

    metrics = _grpo(
        policy, tmp_path, _boards(40), [length_on_3x3],
        dynamic_sampling={"enabled": True, "max_refills": 8}, probe={"every": 0},
    )  # fmt: skip
    logged = [e for e in metrics["log_history"] if "dynamic/informative_share" in e]
    assert len(logged) == 2
    assert all(e["dynamic/informative_share"] == 1.0 for e in logged)  # every group has a signal
    assert any(e["dynamic/refills"] > 0 for e in logged)
    assert metrics["probe"] == {"boards": 0, "rows": []}


def test_round_metrics_hold_sampled_stats_and_the_probe_with_kl(policy: Path, tmp_path: Path) -> None:
    def length_reward(completions: list, **kwargs: object) -> list[float]:
        return [float(len(c[-1]["content"] if isinstance(c, list) else c)) for c in completions]

    metrics = _grpo(
        policy, tmp_path, _boards(16), [length_reward], lr=0.02, probe={"every": 1, "per_cell": 1}
    )
    assert set(metrics["sampled"]) == {"3", "4"}
    assert sum(s["completions"] for s in metrics["sampled"].values()) == 16  # 2 steps x 8 completions
    rows = metrics["probe"]["rows"]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert metrics["probe"]["boards"] == 2 * 3  # sizes 3 and 4, three wait subsets, one board each
    assert rows[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # the starting weights: no divergence
    assert rows[-1]["kl"] > 0.0 and all(0.0 <= r["valid"] <= 1.0 for r in rows)
    probe_logged = [e for e in metrics["log_history"] if "probe/kl" in e]
    assert probe_logged, "the probe reaches TRL's log history (and so every report_to tracker)"
    assert any(k.startswith("sampled/size_3/") for e in metrics["log_history"] for k in e)
    assert any("entropy" in e for e in metrics["log_history"])


def test_the_probe_set_is_shaped_like_the_round_and_skipped_in_multi_process_rounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from envengineer.training.grpo import _probe_set
    from envengineer.training.presets import load_preset

    preset = load_preset("grpo-small", "grpo")
    boards = _probe_set(preset, _boards(8, sizes=(3, 5)), None)
    assert {(b.num_agents, b.size) for b in boards} == {(2, 3), (2, 4), (2, 5)}  # sizes 3..5 of the round
    assert len(boards) == 3 * 3 * preset.probe.per_cell  # three sizes, three wait subsets
    # a round with one-agent boards probes one-agent boards too: none of them waits, in any subset
    single = RoundConfig.model_validate(
        {
            "sizes": {3: {"data_ratio": 1.0, "hole_ratio": 0.2, "wait_ratio": 0.0}},
            "num_agents": 1,
            "num_samples": 4,
        }
    )
    mixed = _probe_set(preset, [*generate_round(single, 0), *_boards(4, sizes=(3,))], None)
    assert sorted({(b.num_agents, b.size) for b in mixed}) == [(1, 3), (2, 3)]
    assert not any(b.needs_wait for b in mixed if b.num_agents == 1)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert _probe_set(preset, _boards(8), None) == []


# -- solver guidance --------------------------------------------------------------------------------------


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
    board = _boards(1, (3,))[0]
    row = prompt_rows([board], style="compact")[0]
    ids = guide.plan_ids(row)
    assert ids[-1] == guide.tokenizer.eos_token_id and guide.tokenizer.eos_token_id not in ids[:-1]
    text = guide.tokenizer.decode(ids, skip_special_tokens=True)
    target = target_response(board, "solver_free")
    assert text == target  # spaces included: a leading-space token that drifted would show here
    assert ids[:-1] == guide.tokenizer(target, add_special_tokens=False)["input_ids"]
    assert validate(board, text).optimal


def test_only_groups_without_an_optimal_member_are_guided_and_long_plans_stay_out(policy: Path) -> None:
    guide = _guide(policy)
    rows = [r for r in prompt_rows(_boards(2, (3,)), style="compact") for _ in range(3)]  # groups of 3
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
    completions = [list(junk) for _ in rows[:3]]
    assert short.apply(rows[:3], completions, group=3) == []
    assert (short.too_long, short.last_too_long, short.guided) == (1, 1, 0)  # counted, not silently lost


def test_a_guided_grpo_round_scores_the_solvers_plan_in_every_unsolved_group(
    policy: Path, tmp_path: Path
) -> None:
    seen: list[tuple[str, str]] = []

    def record(completions: list, instance: list, **kwargs: object) -> list[float]:
        seen.extend(
            (c[-1]["content"] if isinstance(c, list) else c, i)
            for c, i in zip(completions, instance, strict=True)
        )
        return [0.0] * len(completions)

    metrics = _grpo(
        policy, tmp_path, _boards(16, (3,)), [record],
        max_completion_length=160, probe={"every": 0}, guidance={"enabled": True},
    )  # fmt: skip
    assert len(seen) == 16
    verdicts = [validate(Instance.from_dict(json.loads(i)), text) for text, i in seen]
    # an untrained policy solves nothing: each group's last member is the plan, and only it is optimal
    assert [v.optimal for v in verdicts] == [False, False, False, True] * 4
    logged = [e["guidance/groups_guided"] for e in metrics["log_history"] if "guidance/groups_guided" in e]
    assert logged == [1.0, 1.0]  # the share of groups guided
    sampled = metrics["sampled"]["3"]  # what the policy wrote: the plans are left out
    assert (sampled["completions"], sampled["optimal"], sampled["groups"]) == (12, 0.0, 4)
