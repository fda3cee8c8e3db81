"""The reasoning-gym task: registration, determinism, scoring through reasoning-gym's tooling, the figures."""

from __future__ import annotations

import pytest

from envengineer.errors import ConfigError
from envengineer.mapf.instance import Instance
from envengineer.mapf.validator import validate
from integration_figures import POLICIES, benchmark, cli_table, responses, table_of

reasoning_gym = pytest.importorskip("reasoning_gym")

from reasoning_gym.utils import extract_answer  # noqa: E402

from envengineer.integrations import reasoning_gym as rg  # noqa: E402


def test_registered_and_created_by_name_deterministically():
    from reasoning_gym.factory import DATASETS

    assert DATASETS[rg.DATASET_NAME] == (rg.MapfFrozenLakeDataset, rg.MapfFrozenLakeConfig)
    a = reasoning_gym.create_dataset(rg.DATASET_NAME, size=6, seed=7, max_agents=3, max_size=5)
    b = reasoning_gym.create_dataset(rg.DATASET_NAME, size=6, seed=7, max_agents=3, max_size=5)
    c = reasoning_gym.create_dataset(rg.DATASET_NAME, size=6, seed=8, max_agents=3, max_size=5)
    items = list(a)
    assert len(items) == 6 and items == list(b) and items != list(c)
    for item in items:
        inst = Instance.from_dict(item["metadata"]["instance"])
        assert 2 <= inst.num_agents <= 3 and 3 <= inst.size <= 5 and inst.solved
        assert item["metadata"]["source_dataset"] == "mapf_frozenlake"
        assert "<answer>" in item["question"] and "A0" in item["question"]
        # the reference answer is the inside of an optimal block, and scores 1
        assert validate(inst, f"<answer>{item['answer']}</answer>").optimal
        assert a.score_answer(item["answer"], item) == 1.0


def test_generated_items_share_no_board_with_the_benchmark_and_follow_wait_ratio():
    hashes = {i.board_hash() for i in benchmark()}
    data = reasoning_gym.create_dataset(rg.DATASET_NAME, size=12, seed=0, wait_ratio=1.0, max_size=4)
    insts = [Instance.from_dict(x["metadata"]["instance"]) for x in data]
    assert all(i.needs_wait for i in insts) and not {i.board_hash() for i in insts} & hashes
    none = reasoning_gym.create_dataset(rg.DATASET_NAME, size=6, seed=0, wait_ratio=0.0, max_size=4)
    assert not any(x["metadata"]["needs_wait"] for x in none)


def test_score_answer_shapes_and_model_text_never_raises():
    data = reasoning_gym.create_dataset(rg.DATASET_NAME, size=2, seed=3, max_size=4, reward_shape="graded")
    entry = data[0]
    assert data.score_answer(None, entry) == 0.0 and data.score_answer("", entry) == 0.0
    assert data.score_answer("A0: UP", entry) == 0.0  # a missing agent
    assert data.score_answer("<answer>\nA0: JUMP\nA1:\n</answer>", entry) == 0.0
    assert data.score_answer("\x00\n<answer>", entry) == 0.0
    assert data.score_answer(f"<think>hm</think><answer>{entry['answer']}</answer>", entry) == 1.0
    with pytest.raises(IndexError):
        data[2]


def test_curriculum_ladders_reach_the_dataset():
    from reasoning_gym.factory import create_curriculum

    curriculum = create_curriculum(rg.DATASET_NAME)
    assert set(curriculum.attributes) == {"size", "hole_ratio", "wait_ratio"}
    low = curriculum.generate_configuration({"seed": 1, "size": 4})
    assert (low.min_size, low.max_size, low.max_hole_ratio, low.wait_ratio) == (3, 4, 0.0, 0.0)
    for attr in ("size", "size", "hole_ratio", "wait_ratio"):
        assert curriculum.increment_attr_level(attr)
    high = curriculum.generate_configuration({"seed": 1, "size": 4})
    assert (high.max_size, high.max_hole_ratio, high.wait_ratio) == (6, 0.1, 0.25)
    data = rg.MapfFrozenLakeDataset(high)
    sizes = {Instance.from_dict(x["metadata"]["instance"]).size for x in data}
    assert sizes <= set(range(3, 7))


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"source": "web"}, "source"),
        ({"source": "benchmark", "size": 4000}, "3150"),
        ({"min_agents": 3, "max_agents": 2}, "min_agents"),
        ({"min_size": 9, "max_size": 4}, "min_size"),
        ({"max_agents": 5, "min_size": 3}, "do not fit"),
        ({"max_hole_ratio": 0.9}, "0.5"),
        ({"wait_ratio": 2}, "wait_ratio"),
        ({"reward_shape": "shaped"}, "reward_shape"),
    ],
)
def test_bad_configs_name_the_fix(kwargs, needle):
    with pytest.raises(ConfigError, match=needle):
        reasoning_gym.create_dataset(rg.DATASET_NAME, **kwargs)


@pytest.mark.parametrize("policy", POLICIES)
def test_benchmark_scores_equal_envengineer_score(policy):
    """reasoning-gym's extract_answer + our score_answer over the benchmark give `envengineer score`."""
    data = reasoning_gym.create_dataset(rg.DATASET_NAME, source="benchmark", size=3150)
    answers = responses(policy)
    valid, optimal = {}, {}
    for idx, inst in enumerate(benchmark()):
        assert data._instance(idx) == inst  # item idx is the benchmark's instance idx
        entry = {"metadata": {"instance": inst.to_dict()}}  # what score_answer reads of the item
        s = data.score_answer(extract_answer(answers[inst.id]), entry)
        assert s == data.score_answer(answers[inst.id], entry)  # the whole response scores the same
        valid[inst.id], optimal[inst.id] = s >= 0.5, s == 1.0
    assert table_of(benchmark(), valid, optimal) == cli_table(policy)
    assert data[5]["metadata"]["instance"]["id"] == benchmark()[5].id
