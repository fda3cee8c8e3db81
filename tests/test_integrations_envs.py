"""The step-by-step environments: each library's own API checker, the rules, rendering, and the figures."""

from __future__ import annotations

import warnings
from collections import defaultdict

import numpy as np
import pytest

from envengineer.errors import ConfigError
from envengineer.mapf.instance import Instance
from envengineer.mapf.parser import parse_plan
from integration_figures import POLICIES, benchmark, cli_table, responses, table_of

gymnasium = pytest.importorskip("gymnasium")
pytest.importorskip("pettingzoo")

from gymnasium.utils.env_checker import check_env  # noqa: E402
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test  # noqa: E402

from envengineer.integrations import gym_env  # noqa: E402
from envengineer.integrations.gym_env import ENV_ID, MapfFrozenLakeEnv, benchmark_cell, play_plan  # noqa: E402
from envengineer.integrations.pettingzoo_env import MapfParallelEnv, aec_env  # noqa: E402

UP, DOWN, LEFT, RIGHT, WAIT = range(5)
# SPEC §2.3: A0 (0,0) -> (0,2), A1 (0,2) -> (0,0) on an open 3x3 board; optimum SoC 6, makespan 4.
SWAP = Instance("swap", ("...",) * 3, ((0, 0), (0, 2)), ((0, 2), (0, 0)), 6, 4, 4)
FOLLOW = Instance("follow", ("...",) * 3, ((1, 0), (1, 1)), ((1, 1), (1, 2)), 2, 1, 2)
HOLES = Instance("holes", ("...", ".H.", "..."), ((0, 1), (2, 2)), ((2, 1), (0, 2)), 6, 4, 6)
EXCHANGE = Instance("exchange", ("...",) * 3, ((1, 0), (1, 1)), ((1, 1), (1, 0)), 4, 3, 2)


def _episode(inst: Instance, *steps: list[int], **kw):
    env = MapfFrozenLakeEnv([inst], **kw)
    env.reset(seed=0)
    out = None
    for joint in steps:
        out = env.step(np.array(joint))
    return env, out


@pytest.mark.parametrize("mode", ["ansi", "rgb_array"])
def test_gymnasium_env_checker_passes(mode):
    env = gymnasium.make(ENV_ID, num_agents=3, size=4, render_mode=mode)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the checker's warnings are failures too
        check_env(env.unwrapped, skip_render_check=False)
    frame = env.unwrapped.render() if env.unwrapped.episode else (env.reset(seed=0), env.render())[1]
    if mode == "ansi":
        assert isinstance(frame, str) and "A0" in frame
    else:
        assert frame.dtype == np.uint8 and frame.shape == (4 * 24, 4 * 24, 3)


def test_pettingzoo_api_tests_pass():
    parallel_api_test(MapfParallelEnv(num_agents=3, size=4), num_cycles=300)
    api_test(aec_env(num_agents=3, size=4), num_cycles=300, verbose_progress=False)
    parallel_seed_test(lambda: MapfParallelEnv(num_agents=3, size=5), num_cycles=50)
    seed_test(lambda: aec_env(num_agents=3, size=5), num_cycles=50)


def test_pettingzoo_render_modes():
    env = MapfParallelEnv([SWAP], render_mode="rgb_array")
    env.reset(seed=0)
    assert env.render().shape == (72, 72, 3)
    env = MapfParallelEnv([SWAP], render_mode="ansi")
    env.reset(seed=0)
    assert env.render().splitlines()[1:] == ["A0 .  A1", ".  .  .", ".  .  ."]


def test_optimal_detour_terminates_with_reward_one():
    _, (obs, reward, term, trunc, info) = _episode(
        SWAP, [RIGHT, DOWN], [RIGHT, LEFT], [WAIT, LEFT], [WAIT, UP]
    )
    assert (reward, term, trunc) == (1.0, True, False)
    assert info["valid"] and info["optimal"] and info["soc"] == 6 and info["makespan"] == 4
    assert obs["positions"].tolist() == [[0, 2], [0, 0]]


def test_suboptimal_plan_gets_the_valid_reward_of_the_shape():
    steps = ([WAIT, DOWN], [RIGHT, LEFT], [RIGHT, LEFT], [WAIT, UP])
    _, (_, reward, term, _, info) = _episode(SWAP, *steps)
    assert (reward, term, info["failure"], info["soc"]) == (0.5, True, "suboptimal", 7)
    _, (_, reward, *_) = _episode(SWAP, *steps, reward_shape="graded")
    assert reward == 0.6


@pytest.mark.parametrize(
    ("inst", "joint", "failure"),
    [
        (SWAP, [RIGHT, LEFT], "vertex_conflict"),  # both on (0,1) at t=1
        (EXCHANGE, [RIGHT, LEFT], "swap_conflict"),
        (SWAP, [UP, WAIT], "out_of_bounds"),
        (HOLES, [DOWN, WAIT], "hole"),
    ],
)
def test_rule_breaks_end_the_episode(inst, joint, failure):
    env, (obs, reward, term, trunc, info) = _episode(inst, joint)
    assert (term, trunc, reward, info["failure"], info["valid"]) == (True, False, 0.0, failure, False)
    assert obs["positions"].tolist() == [list(p) for p in inst.starts]  # the breaking move is not applied
    with pytest.raises(ConfigError, match="reset"):
        env.step(np.array([WAIT, WAIT]))


def test_following_is_allowed_and_several_breaks_report_the_check_order():
    _, (_, reward, term, _, info) = _episode(FOLLOW, [RIGHT, RIGHT])
    assert (reward, term, info["optimal"]) == (1.0, True, True)
    # A0 leaves the grid and A1 walks into the hole in the same step: out_of_bounds is check 4, hole check 5
    inst = Instance("two", ("...", ".H.", "..."), ((0, 0), (0, 1)), ((2, 0), (2, 2)), 6, 4, 6)
    _, (*_, info) = _episode(inst, [UP, DOWN])
    assert info["failure"] == "out_of_bounds"


def test_truncation_dense_partial_credit_and_bad_arguments():
    _, (_, reward, term, trunc, info) = _episode(SWAP, [WAIT, WAIT], [WAIT, WAIT], max_steps=2)
    assert (reward, term, trunc, info["failure"]) == (0.0, False, True, "goal_not_reached")
    _, (_, reward, *_) = _episode(SWAP, [RIGHT, LEFT], reward_shape="dense")
    assert 0.0 < reward < 1.0
    env = MapfFrozenLakeEnv([SWAP])
    env.reset()
    for bad in ([9, 0], [0], [0.5, 0]):
        with pytest.raises(ConfigError, match="action"):
            env.step(np.array(bad))
    with pytest.raises(ConfigError, match="shapes"):
        MapfFrozenLakeEnv([SWAP, benchmark_cell(3, 3)[0]])
    with pytest.raises(ConfigError, match="no cell"):
        MapfFrozenLakeEnv(num_agents=6, size=4)
    with pytest.raises(ConfigError, match="render_mode"):
        MapfFrozenLakeEnv([SWAP], render_mode="human")
    with pytest.raises(ConfigError, match="unknown reward shape"):
        MapfFrozenLakeEnv([SWAP], reward_shape="shaped")
    with pytest.raises(ConfigError, match="max_steps"):
        MapfFrozenLakeEnv([SWAP], max_steps=0)
    with pytest.raises(ConfigError, match="no optima"):
        MapfFrozenLakeEnv([Instance("u", ("...",) * 3, ((0, 0),), ((2, 2),))])
    with pytest.raises(ConfigError, match="no instance with id"):
        env.reset(options={"instance": "nope"})
    with pytest.raises(ConfigError, match="every agent needs an action"):
        pz = MapfParallelEnv([SWAP])
        pz.reset()
        pz.step({"A0": WAIT})


def test_reset_picks_instances_by_option_or_seed():
    cell = benchmark_cell(3, 4)
    env = MapfFrozenLakeEnv(cell)
    assert env.reset(options={"instance": cell[7].id})[1]["instance_id"] == cell[7].id
    assert env.reset(options={"instance": 3})[1]["instance_id"] == cell[3].id
    assert env.reset(options={"instance": cell[5]})[1]["instance_id"] == cell[5].id
    drawn = {env.reset(seed=s)[1]["instance_id"] for s in range(20)}
    assert len(drawn) > 5 and env.reset(seed=4)[1] == env.reset(seed=4)[1]
    assert len(benchmark_cell(3, 4, "wr_075")) == 50


def test_play_plan_short_plans_and_unknown_actions():
    env = MapfFrozenLakeEnv([SWAP])
    assert play_plan(env, [["RIGHT"], ["DOWN"]])["failure"] == "goal_not_reached"
    assert play_plan(env, [[], []])["failure"] == "goal_not_reached"
    with pytest.raises(ConfigError, match="unknown action"):
        play_plan(env, [["JUMP"], ["DOWN"]])


@pytest.mark.parametrize("policy", POLICIES)
def test_env_scores_on_the_benchmark_equal_envengineer_score(policy):
    """Every reference policy's plan played step by step gives `envengineer score`'s table exactly."""
    answers = responses(policy)
    by_cell: dict[tuple[int, int], list[Instance]] = defaultdict(list)
    for inst in benchmark():
        by_cell[(inst.num_agents, inst.size)].append(inst)
    valid, optimal = {}, {}
    for cell in by_cell.values():
        env = MapfFrozenLakeEnv(cell)
        for inst in cell:
            plan = parse_plan(answers[inst.id], inst.num_agents).plan
            info = play_plan(env, plan, instance=inst.id)
            valid[inst.id], optimal[inst.id] = info["valid"], info["optimal"]
    assert table_of(benchmark(), valid, optimal) == cli_table(policy)


def test_the_module_registers_a_versioned_id():
    assert gym_env.ENV_ID.endswith("-v0") and ENV_ID in gymnasium.registry
