"""``benchmarks/bench_grpo.py transfer``: the paired gain's statistics (the package's
:func:`envengineer.loop.intervals.paired_seed_gain`), the board cycling, the arguments."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from envengineer.loop import intervals
from envengineer.machine import THREAD_VARIABLES
from envengineer.mapf.config import RoundConfig
from envengineer.mapf.generator import generate_round

sys.path.insert(
    0, str(Path(__file__).resolve().parents[1] / "benchmarks")
)  # the scripts' library beside them
bench = importlib.import_module("bench_grpo")
common = importlib.import_module("common")
runs = importlib.import_module("grpo_runs")
transfer = importlib.import_module("grpo_transfer")  # `bench_grpo.py transfer`


# -- statistics -------------------------------------------------------------------------------------------
def test_paired_gain_two_seeds_three_boards_by_hand() -> None:
    # seed 0 gains one board of three (+33.3 points), seed 1 two (+66.7): mean +50
    g = intervals.paired_seed_gain([[0, 0, 1], [0, 0, 1]], [[1, 0, 1], [1, 1, 1]], shared_boards=True)
    assert g["per_seed"] == [33.33, 66.67]
    assert g["mean"] == 50.0
    assert (g["warm_pct"], g["after_pct"]) == (33.33, 83.33)
    assert (g["seeds"], g["boards"]) == (2, [3, 3])
    assert 0.0 <= g["low"] < g["mean"] < g["high"] <= 100.0


def test_identical_flags_give_zero_gain_and_a_zero_width_interval() -> None:
    # an unpaired bootstrap (before and after resampled apart) would give a wide interval here
    flags = [[1, 0, 1, 0, 1], [0, 0, 1, 1, 1]]
    for shared in (True, False):
        g = intervals.paired_seed_gain(flags, flags, shared_boards=shared)
        assert (g["mean"], g["low"], g["high"]) == (0.0, 0.0, 0.0)
        assert g["per_seed"] == [0.0, 0.0]


def test_one_seed_has_a_mean_and_no_interval() -> None:
    g = intervals.paired_seed_gain([[0, 1, 0, 0]], [[1, 1, 1, 0]], shared_boards=True)
    assert (g["mean"], g["low"], g["high"]) == (50.0, None, None)
    assert common.ci_text(g) == "+50.0 [one seed]"


def test_own_boards_per_seed_are_resampled_within_each_seed() -> None:
    # seed A: 2 boards both gained (+100 whatever its boards' draw); seed B: 4 boards, none changed (0).
    # Seed draws AA, AB, BB give 100, 50, 0 (probabilities 1/4, 1/2, 1/4): the 95 % interval is [0, 100].
    g = intervals.paired_seed_gain([[0, 0], [1, 1, 1, 1]], [[1, 1], [1, 1, 1, 1]], shared_boards=False)
    assert (g["mean"], g["low"], g["high"]) == (50.0, 0.0, 100.0)
    assert g["boards"] == [2, 4]
    assert g["warm_pct"] == 50.0  # mean over seeds of each seed's warm rate


def test_shared_boards_keep_the_pairing_across_seeds() -> None:
    # opposite per-board gains in two seeds: with one board draw for both seeds every resampled mean is
    # (count A - count B) / 2 x 50 (b0 - b1), i.e. -100, 0 or 100; drawing each seed's boards on its own
    # also gives +-50 (seed A's board 0 twice, seed B's boards once each)
    diffs = [np.array([100.0, -100.0]), np.array([-100.0, 100.0])]
    shared = intervals._shared_resamples(diffs, 2000, np.random.default_rng(0))
    own = intervals._own_resamples(diffs, 2000, np.random.default_rng(0))
    assert set(np.round(shared, 6).tolist()) == {-100.0, 0.0, 100.0}
    assert {-50.0, 50.0} <= set(np.round(own, 6).tolist())
    g = intervals.paired_seed_gain([[0, 1], [1, 0]], [[1, 0], [0, 1]], shared_boards=True)
    assert (g["per_seed"], g["mean"], g["low"], g["high"]) == ([0.0, 0.0], 0.0, -100.0, 100.0)


def test_transfer_table_pairs_held_out_with_the_parents_warm_flags_and_trained_on_per_seed() -> None:
    warm = {n: {"valid": [0, 1, 0], "optimal": [0, 0, 0]} for n in transfer.SETS[1:]}
    runs = [
        {
            "seed": s,
            "warm_trained": {"valid": [0] * (2 + s), "optimal": [0] * (2 + s)},  # 2 and 3 boards
            "after": {
                transfer.TRAINED: {"valid": [1] * (2 + s), "optimal": [0] * (2 + s)},
                **{n: {"valid": [1, 1, 0], "optimal": [0, 0, 1]} for n in transfer.SETS[1:]},
            },
        }
        for s in (0, 1)
    ]
    table = transfer.transfer_table(warm, runs)
    assert list(table) == list(transfer.SETS)
    assert table[transfer.TRAINED]["valid"]["boards"] == [2, 3]
    assert table[transfer.TRAINED]["valid"]["mean"] == 100.0
    held = table["held-out 2 agents"]
    assert (held["valid"]["warm_pct"], held["valid"]["after_pct"], held["valid"]["mean"]) == (
        33.33,
        66.67,
        33.33,
    )
    assert held["optimal"]["mean"] == 33.33


# -- training boards --------------------------------------------------------------------------------------
def _train_args(boards: int, steps: int = 3, agents: str = "2") -> argparse.Namespace:
    return argparse.Namespace(
        steps=steps, boards=boards, sizes="3,4", hole_ratio=0.25, wait_ratio=0.5, agents=agents
    )


def test_boards_are_cycled_over_the_prompts_and_exclude_the_held_out_set() -> None:
    held = common.held_out(1, max_size=4)
    exclude = frozenset(i.board_hash() for i in held)
    preset = runs.variant_preset("preset", 3)
    per_step = runs.per_step(preset)
    prompts = runs.training_boards(_train_args(5), preset, seed=0, exclude=exclude)
    assert len(prompts) == 3 * per_step
    counts = Counter(i.id for i in prompts)
    assert len(counts) == 5
    full, rest = divmod(3 * per_step, 5)
    assert sorted(counts.values(), reverse=True) == [full + 1] * rest + [full] * (5 - rest)
    assert all(prompts[i] is prompts[i % 5] for i in range(len(prompts)))  # passes in the same order
    assert not exclude & {i.board_hash() for i in prompts}


def test_no_boards_option_draws_a_fresh_board_per_prompt() -> None:
    preset = runs.variant_preset("preset", 2)
    prompts = runs.training_boards(_train_args(0, steps=2), preset, seed=0, exclude=frozenset())
    assert len({i.id for i in prompts}) == len(prompts) == 2 * runs.per_step(preset)


def test_agent_counts_share_the_prompts_and_two_agents_alone_keep_the_earlier_boards() -> None:
    mixed = runs.train_data(10, [3, 4], 0.25, 0.5, 0, frozenset(), agents=[1, 2, 3])
    assert sorted(Counter(i.num_agents for i in mixed).items()) == [(1, 4), (2, 3), (3, 3)]
    assert not any(i.needs_wait for i in mixed if i.num_agents == 1)  # one agent has nothing to wait for
    assert [i.num_agents for i in mixed] != sorted(i.num_agents for i in mixed)  # shuffled together
    two = runs.train_data(6, [3, 4], 0.25, 0.5, 0, frozenset(), agents=[2])
    config = RoundConfig.model_validate(
        {
            "sizes": {n: {"data_ratio": 1.0, "hole_ratio": 0.25, "wait_ratio": 0.5} for n in (3, 4)},
            "num_agents": 2,
            "num_samples": 6,
        }
    )
    assert [i.id for i in two] == [i.id for i in generate_round(config, 1000, split="train")]


def test_trained_sample_is_distinct_seeded_and_capped() -> None:
    preset = runs.variant_preset("preset", 4)
    prompts = runs.training_boards(_train_args(6, steps=4), preset, seed=1, exclude=frozenset())
    distinct = {i.board_hash() for i in prompts}
    a = transfer.trained_sample(prompts, 4, seed=0)
    assert len(a) == min(4, len(distinct)) and len({i.board_hash() for i in a}) == len(a)
    assert [i.id for i in a] == [i.id for i in transfer.trained_sample(prompts, 4, seed=0)]
    assert {i.board_hash() for i in transfer.trained_sample(prompts, 100, seed=3)} == distinct


def test_one_agent_held_out_set_needs_no_wait() -> None:
    boards = common.held_out(1, agents=1, max_size=4)
    assert len(boards) == 2 * 3  # sizes 3 and 4, three boards each
    assert {(i.num_agents, i.needs_wait) for i in boards} == {(1, False)}
    assert sorted({i.size for i in boards}) == [3, 4]


# -- arguments --------------------------------------------------------------------------------------------
def test_transfer_arguments_and_defaults() -> None:
    args = bench.parse_args(["transfer", "--warm", "ck", "--boards", "300", "--seeds", "4"])
    assert (args.variant, args.boards, args.seeds, args.train_eval, args.per_cell) == (
        "preset",
        300,
        "4",
        288,
        16,
    )
    assert args.out == Path("runs/bench-grpo/transfer")  # apart from the sweep's folders of the same names
    with pytest.raises(SystemExit):
        bench.parse_args(["transfer", "--warm", "ck", "--variant", "no-such-variant"])
    with pytest.raises(SystemExit):
        bench.parse_args(["transfer"])  # --warm is required


def test_sweep_arguments_are_unchanged() -> None:
    args = bench.parse_args(["sweep", "--warm", "ck"])
    assert (args.variants, args.steps, args.boards, args.out) == (
        "old,sparse-drgrpo",
        150,
        0,
        Path("runs/bench-grpo"),
    )


# -- lanes ------------------------------------------------------------------------------------------------
def lane_env(args: argparse.Namespace, name: str) -> tuple[str, str | None]:
    """A lane's job: the thread variable ``name`` as the lane's process sees it."""
    return name, os.environ.get(name)


def test_lanes_get_their_threads_and_leave_this_process_environment_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": None, "OPENBLAS_NUM_THREADS": "5"}
    for name, value in before.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    args = argparse.Namespace(lanes=2, threads=1)
    rows = list(runs.finished_runs(args, lane_env, [(name,) for name in THREAD_VARIABLES]))
    assert rows == [(name, "1") for name in THREAD_VARIABLES]  # in the jobs' order, one thread each
    assert {name: os.environ.get(name) for name in THREAD_VARIABLES} == before


# -- end to end -------------------------------------------------------------------------------------------
@pytest.mark.slow  # about 20 s on one core, most of it greedy answers on 4 x 18 boards
def test_transfer_end_to_end_writes_all_four_sets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("trl")
    from envengineer.models.small_policy import init_policy

    policy = init_policy(tmp_path / "policy", size="tiny", seed=0)
    real = runs.variant_preset

    def tiny(name: str, steps: int, max_completion_length: int | None) -> dict:  # 2 prompts x 4, no probe
        preset = real(name, steps, max_completion_length)
        preset["grpo"].update(
            per_device_train_batch_size=8, num_generations=4, use_cpu=True, save_strategy="no"
        )
        preset["max_completion_length"] = 12
        preset["probe"] = {**preset["probe"], "every": 0}
        return preset

    monkeypatch.setattr(runs, "variant_preset", tiny)
    monkeypatch.setattr(transfer, "variant_preset", tiny)
    out = tmp_path / "transfer.json"
    argv = ["transfer", "--warm", str(policy), "--seeds", "0", "--steps", "1", "--per-cell", "1"]
    argv += ["--train-eval", "2", "--lanes", "1", "--out", str(tmp_path / "runs"), "--json", str(out)]
    argv += ["--max-completion-length", "16"]  # the untrained policy's answers run to the budget
    assert bench.main(argv) == 0
    record = json.loads(out.read_text())
    assert list(record["table"]) == list(transfer.SETS)
    assert [r["seed"] for r in record["runs"]] == [0]
    assert record["runs"][0]["prompts"] == 2
    assert record["table"][transfer.TRAINED]["valid"]["boards"] == [2]
    assert record["table"]["held-out 2 agents"]["valid"]["boards"] == [18]
    assert "| held-out 3 agents |" in capsys.readouterr().out


def test_a_longer_scratchpad_gets_its_completion_budget() -> None:
    assert runs.variant_preset("preset", 3)["max_completion_length"] == 352  # grpo-small's
    longer = runs.variant_preset("sparse-drgrpo-kl03", 3, 640)
    assert longer["max_completion_length"] == 640 and longer["grpo"]["beta"] == 0.3


def test_scored_answers_get_the_warm_starts_longest_target() -> None:
    # sft-small's budget: the free-moves plan of 5 agents on 10x10 (at most 625 tokens on benchmark v2) must
    # not be cut
    assert common.answer_tokens() == 640
    assert {tokens for _, tokens in transfer.transfer_sets(1).values()} == {640}
    assert {tokens for _, tokens in transfer.transfer_sets(1, 80).values()} == {80}


def test_the_supervised_control_learns_a_grpo_runs_boards_at_its_rate_batch_and_steps(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sft_module = importlib.import_module("envengineer.training.sft")  # the package's `sft` is the function
    calls = []
    monkeypatch.setattr(sft_module, "sft", lambda *a, **k: calls.append((a, k)) or "result")
    args = argparse.Namespace(
        **vars(_train_args(0, steps=3)), warm=tmp_path / "warm", out=tmp_path, max_completion_length=None
    )
    result, prompts, _ = runs.train_one(args, "sft-same-boards", seed=1, exclude=frozenset())
    assert result == "result"
    grpo = runs.variant_preset("preset", 3)
    assert [i.id for i in prompts] == [
        i.id for i in runs.training_boards(args, grpo, seed=1, exclude=frozenset())
    ]  # the boards a GRPO run of three steps is given, seed for seed
    (model, instances), kwargs = calls[0]
    assert model == str(tmp_path / "warm") and list(instances) == prompts
    assert kwargs["max_steps"] == 3 and kwargs["seed"] == 1
    preset = kwargs["preset"]
    assert preset["sft"]["per_device_train_batch_size"] == runs.per_step(grpo) == 8
    assert preset["sft"]["learning_rate"] == grpo["grpo"]["learning_rate"]
    assert preset["sft"]["lr_scheduler_type"] == "constant" and preset["length_group_batches"] is None
