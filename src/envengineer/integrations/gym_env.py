"""MAPF-FrozenLake step by step: a Gymnasium environment and a PettingZoo parallel / AEC environment.

The single-shot task of the testbed (SPEC §2) played one joint step at a time over the same instances
and rules: the multi-turn mode the specification calls a welcome extension. Both environments share
:class:`MapfEpisode`, so they judge every move the same way, and the episode's verdict is the testbed's
own :func:`~envengineer.mapf.validator.validate_plan` of the actions taken so far.

* :class:`MapfFrozenLakeEnv` — ``gymnasium.Env``, one ``MultiDiscrete`` joint action per step; registered
  as ``envengineer/MapfFrozenLake-v0`` (``gymnasium.make("envengineer/MapfFrozenLake-v0", ...)``).
* :mod:`envengineer.integrations.pettingzoo_env` — the PettingZoo parallel and AEC forms, over the same
  :class:`MapfEpisode`.

This module imports gymnasium: install the ``integrations`` extra.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium import spaces

from envengineer.errors import ConfigError
from envengineer.mapf.instance import ACTIONS, HOLE, MOVES, Instance
from envengineer.mapf.rewards import make_reward
from envengineer.mapf.validator import Verdict, validate_plan

__all__ = [
    "ENV_ID",
    "MapfEpisode",
    "MapfFrozenLakeEnv",
    "benchmark_cell",
    "play_plan",
]

ENV_ID = "envengineer/MapfFrozenLake-v0"
RENDER_MODES = ("ansi", "rgb_array")
CELL_PX = 24

_ICE = (205, 232, 250)
_HOLE = (24, 44, 96)
_PALETTE = np.array(
    [(230, 57, 70), (42, 157, 143), (244, 162, 97), (106, 76, 147), (38, 70, 83), (255, 183, 3),
     (131, 56, 236), (6, 214, 160)],
    dtype=np.uint8,
)  # fmt: skip


def benchmark_cell(num_agents: int, size: int, subset: str | None = None) -> list[Instance]:
    """The packaged benchmark's instances of one (agents, size) cell, optionally of one ``wr_XXX`` subset.

    Raises:
        ConfigError: The benchmark has no such cell or subset (or an argument of the wrong type).
    """
    from envengineer.mapf.benchmark import load_benchmark

    for name, value in (("num_agents", num_agents), ("size", size)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ConfigError(f"{name} must be an integer, got {value!r}")
    if subset is not None and not isinstance(subset, str):
        raise ConfigError(f"subset must be None or a name such as 'wr_050', got {subset!r}")

    out = [
        i
        for i in load_benchmark()
        if i.num_agents == num_agents and i.size == size and subset in (None, i.meta.get("subset"))
    ]
    if not out:
        raise ConfigError(
            f"the benchmark has no cell with {num_agents} agents on {size}x{size}"
            + (f" in subset {subset!r}" if subset else "")
            + "; it has 3-5 agents on sizes k..10 and subsets wr_025, wr_050, wr_075"
        )
    return out


def _check_dim(name: str, value: Any) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1
    ):
        raise ConfigError(f"{name} must be a positive integer or None, got {value!r}")


def _instance_set(
    instances: Sequence[Instance] | None, num_agents: int | None, size: int | None
) -> tuple[Instance, ...]:
    _check_dim("num_agents", num_agents)
    _check_dim("size", size)
    if instances is None:
        return tuple(benchmark_cell(3 if num_agents is None else num_agents, 5 if size is None else size))
    if isinstance(instances, (str, bytes, Instance)) or not isinstance(instances, Iterable):
        raise ConfigError(
            f"instances must be a sequence of Instance objects (e.g. benchmark_cell(3, 5)), got "
            f"{type(instances).__name__}"
        )
    instances = tuple(instances)
    strays = [i for i in instances if not isinstance(i, Instance)]
    if strays:
        raise ConfigError(f"instances must all be Instance objects; got a {type(strays[0]).__name__}")
    if not instances:
        raise ConfigError("the environment needs at least one instance")
    shapes = {(i.num_agents, i.size) for i in instances}
    if len(shapes) > 1:
        raise ConfigError(
            f"the instances have {len(shapes)} (agents, size) shapes {sorted(shapes)}; the spaces of one "
            "environment are fixed, so give instances of one shape (e.g. benchmark_cell(3, 5))"
        )
    k, n = shapes.pop()
    if (num_agents, size) != (None, None) and (num_agents or k, size or n) != (k, n):
        raise ConfigError(
            f"num_agents={num_agents}, size={size} do not match the instances ({k} agents, {n}x{n})"
        )
    unsolved = [i.id for i in instances if not i.solved]
    if unsolved:
        raise ConfigError(
            f"{len(unsolved)} instance(s) carry no optima (first: {unsolved[0]!r}); "
            "run `envengineer solve` on the file first"
        )
    return instances


class MapfEpisode:
    """The state of one episode on one instance: positions, the actions taken and the outcome.

    Args:
        instance: A solved instance.
        max_steps: Joint steps before the episode is truncated.
        reward_shape: The testbed reward shape of the final reward (``sparse``, ``graded``, ``dense``).

    Raises:
        ConfigError: Not an :class:`Instance`, a bad ``max_steps`` or an unknown reward shape; ``step`` on a
            finished episode or with a bad joint action.
    """

    def __init__(self, instance: Instance, *, max_steps: int, reward_shape: str = "sparse") -> None:
        if not isinstance(instance, Instance):
            raise ConfigError(f"an episode plays an Instance, got {type(instance).__name__}")
        self.instance = instance
        self.max_steps = _max_steps(max_steps, instance.size)
        self.reward = make_reward(reward_shape)  # type: ignore[arg-type]
        self.positions: list[tuple[int, int]] = list(instance.starts)
        self.plan: list[list[str]] = [[] for _ in instance.starts]
        self.t = 0
        self.verdict: Verdict | None = None
        self.truncated = False

    @property
    def done(self) -> bool:
        return self.verdict is not None

    def step(self, actions: Sequence[int]) -> tuple[float, bool, bool]:
        """Apply one joint action (indices into ``ACTIONS``); returns ``(reward, terminated, truncated)``.

        A move that leaves the grid, enters a hole, or makes two agents share a cell or swap cells ends the
        episode; the positions stay those before the move. Otherwise the agents move simultaneously; the
        episode ends when every agent stands on its goal, or is truncated after ``max_steps``.
        """
        inst = self.instance
        if self.done:
            raise ConfigError("the episode is over; call reset() before step()")
        if len(actions) != inst.num_agents:
            raise ConfigError(f"expected {inst.num_agents} actions (one per agent), got {len(actions)}")
        names = []
        for i, a in enumerate(actions):
            if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)) or not 0 <= a < 5:
                raise ConfigError(
                    f"agent {i}'s action {a!r} is not an integer in 0..4 ({', '.join(ACTIONS)})"
                )
            names.append(ACTIONS[int(a)])
        for plan, name in zip(self.plan, names, strict=True):
            plan.append(name)
        self.t += 1
        moved = [(r + MOVES[a][0], c + MOVES[a][1]) for (r, c), a in zip(self.positions, names, strict=True)]
        if _fails(inst, self.positions, moved):
            return self._finish(truncated=False)
        self.positions = moved
        if all(p == g for p, g in zip(moved, inst.goals, strict=True)):
            return self._finish(truncated=False)
        if self.t >= self.max_steps:
            return self._finish(truncated=True)
        return 0.0, False, False

    def _finish(self, *, truncated: bool) -> tuple[float, bool, bool]:
        self.verdict = validate_plan(self.instance, self.plan)
        self.truncated = truncated
        return self.reward.score(self.verdict, self.instance.num_agents), not truncated, truncated

    def info(self) -> dict[str, Any]:
        """``instance_id`` and ``step``; once the episode is over also ``valid``, ``optimal``, ``failure``,
        ``soc``, ``makespan`` and the whole ``verdict`` (as :meth:`Verdict.to_dict`)."""
        out: dict[str, Any] = {"instance_id": self.instance.id, "step": self.t}
        if self.verdict is not None:
            v = self.verdict
            out.update(valid=v.valid, optimal=v.optimal, failure=v.failure, soc=v.soc, makespan=v.makespan)
            out["verdict"] = v.to_dict()
        return out

    # -- views --------------------------------------------------------------------------------------------
    def observation(self) -> dict[str, np.ndarray]:
        inst = self.instance
        return {
            "holes": np.array([[ch == HOLE for ch in row] for row in inst.grid], dtype=np.int8),
            "positions": np.array(self.positions, dtype=np.int64),
            "goals": np.array(inst.goals, dtype=np.int64),
        }

    def ansi(self) -> str:
        """The board as text: ``.`` ice, ``H`` hole, ``A<i>`` agent i, ``g<i>`` its goal (agents on top)."""
        inst = self.instance
        n = inst.size
        cells = [[f"{ch:<3}" if ch == HOLE else ".  " for ch in row] for row in inst.grid]
        for i, (r, c) in enumerate(inst.goals):
            cells[r][c] = f"g{i:<2}"
        for i, (r, c) in enumerate(self.positions):
            cells[r][c] = f"A{i:<2}"
        head = f"t={self.t} {inst.id} ({inst.num_agents} agents, {n}x{n})"
        status = "" if self.verdict is None else f"\n{self.verdict.failure or 'optimal'}"
        return head + "\n" + "\n".join("".join(row).rstrip() for row in cells) + status + "\n"

    def rgb(self) -> np.ndarray:
        """The board as an ``(n * 24, n * 24, 3)`` ``uint8`` image: ice, holes, goal rings, agent squares."""
        inst = self.instance
        n, s = inst.size, CELL_PX
        img = np.empty((n * s, n * s, 3), dtype=np.uint8)
        img[:] = _ICE
        for r, row in enumerate(inst.grid):
            for c, ch in enumerate(row):
                if ch == HOLE:
                    img[r * s : (r + 1) * s, c * s : (c + 1) * s] = _HOLE
        img[::s, :] = img[:, ::s] = (150, 170, 190)  # grid lines
        for i, (r, c) in enumerate(inst.goals):
            color = _PALETTE[i % len(_PALETTE)]
            box = img[r * s + 2 : (r + 1) * s - 2, c * s + 2 : (c + 1) * s - 2]
            box[:3], box[-3:], box[:, :3], box[:, -3:] = color, color, color, color
        for i, (r, c) in enumerate(self.positions):
            img[r * s + 7 : (r + 1) * s - 7, c * s + 7 : (c + 1) * s - 7] = _PALETTE[i % len(_PALETTE)]
        return img


def _fails(inst: Instance, before: list[tuple[int, int]], after: list[tuple[int, int]]) -> bool:
    """True when the joint move leaves the grid, enters a hole, or makes a vertex or swap conflict."""
    if not all(inst.is_free(p) for p in after) or len(set(after)) < len(after):
        return True
    where = {p: i for i, p in enumerate(before)}
    return any(
        (j := where.get(after[i])) is not None and j != i and after[j] == before[i] for i in range(len(after))
    )


class MapfFrozenLakeEnv(gymnasium.Env):
    """Multi-agent path finding on a frozen lake, one joint move per step.

    ## Description
    ``k`` agents on an ``n x n`` grid of ice and holes must each reach their own goal. Every step each agent
    moves ``UP``, ``DOWN``, ``LEFT``, ``RIGHT`` or waits, all at the same time. The rules are the testbed's
    (SPEC §2.1): no leaving the grid, no holes, no two agents on one cell (vertex conflict) and no two
    agents exchanging cells (swap conflict); following an agent into the cell it leaves is allowed. Each
    episode plays one instance drawn from a fixed set of one shape (by default a cell of the packaged
    benchmark), so the optimum of every episode is known.

    ## Action Space
    ``MultiDiscrete([5] * k)``: one action per agent, ``0 UP, 1 DOWN, 2 LEFT, 3 RIGHT, 4 WAIT``
    (``envengineer.mapf.instance.ACTIONS``).

    ## Observation Space
    ``Dict`` of ``holes``: ``MultiBinary([n, n])`` (1 = hole), ``positions``: ``MultiDiscrete`` of shape
    ``(k, 2)`` (each agent's ``(row, col)``, row 0 at the top) and ``goals``: the same for the goals.

    ## Rewards
    0 on every step but the last. The last step's reward is the testbed's reward (``reward_shape``) of the
    verdict of the actions taken, :func:`~envengineer.mapf.validator.validate_plan`: with the default
    ``sparse`` shape 1.0 when every agent is on its goal with the optimal sum of costs, 0.5 when they all
    arrived with a larger sum of costs, 0 after a failure or truncation. ``graded`` and ``dense`` are the
    shapes of docs/testbed-answers.md (``dense`` gives partial credit for a failed episode).

    ## Starting State
    The agents on the instance's start cells. ``reset(options={"instance": ...})`` picks an instance (an
    :class:`Instance`, an id or an index into the set); otherwise one is drawn with the seeded generator.

    ## Episode End
    *Termination* at the first step at which every agent stands on its goal (success; the agents'
    costs are their last arrival times, so SoC is judged as in the single-shot task), or at a step whose
    joint move breaks a rule (failure; the move is not applied and ``info["failure"]`` names it:
    ``out_of_bounds``, ``hole``, ``vertex_conflict`` or ``swap_conflict``, in the validator's check order
    when one move breaks several). *Truncation* after ``max_steps`` steps (``goal_not_reached``).
    A single-shot plan whose agents all stand on their goals at some step and then move away is judged on
    its whole length by ``envengineer score``; here the episode has already ended at that step.

    ## Information
    ``info``: ``instance_id`` and ``step``; at the end also ``valid``, ``optimal``, ``failure`` (``None``
    when optimal, ``suboptimal`` when valid but not SoC-optimal), ``soc``, ``makespan`` and ``verdict``.

    ## Arguments
    * ``instances``: the instance set (one (agents, size) shape, solved); default: the benchmark cell
      ``num_agents`` x ``size``.
    * ``num_agents`` (default 3), ``size`` (default 5): the benchmark cell when no instances are given.
    * ``max_steps``: truncation (default ``4 * n * n``).
    * ``reward_shape``: ``sparse`` (default), ``graded`` or ``dense``.
    * ``render_mode``: ``None``, ``"ansi"`` (text) or ``"rgb_array"`` (a numpy image; no pygame needed).

    ## Errors
    Bad arguments raise :class:`~envengineer.errors.ConfigError` (a ``ValueError``): in the constructor
    (instances that are not one solved shape, ``num_agents`` / ``size`` that are not positive integers or
    name no benchmark cell, a bad ``max_steps``, ``reward_shape`` or ``render_mode``), in ``reset`` (an
    ``options`` that is not a dict, an unknown ``options["instance"]``) and in ``step`` (before ``reset``,
    after the episode ended, or an action that is not one integer in 0..4 per agent). A bad ``seed`` raises
    Gymnasium's own ``gymnasium.error.Error``, as every Gymnasium environment does.

    ## Version History
    * v0: first version.

    >>> env = MapfFrozenLakeEnv(num_agents=3, size=3)
    >>> obs, info = env.reset(seed=0)
    >>> obs["positions"].shape, env.action_space
    ((3, 2), MultiDiscrete([5 5 5]))
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": list(RENDER_MODES), "render_fps": 4}

    def __init__(
        self,
        instances: Sequence[Instance] | None = None,
        *,
        num_agents: int | None = None,
        size: int | None = None,
        max_steps: int | None = None,
        reward_shape: str = "sparse",
        render_mode: str | None = None,
    ) -> None:
        self.instances = _instance_set(instances, num_agents, size)
        k, n = self.instances[0].num_agents, self.instances[0].size
        self.num_agents, self.size = k, n
        self.max_steps = _max_steps(max_steps, n)
        make_reward(reward_shape)  # type: ignore[arg-type]  # fail early on a bad shape
        self.reward_shape = reward_shape
        self.render_mode = _render_mode(render_mode)
        self.action_space = spaces.MultiDiscrete([len(ACTIONS)] * k)
        self.observation_space = _observation_space(k, n)
        self._by_id = {inst.id: inst for inst in self.instances}
        self.episode: MapfEpisode | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        inst = _pick(self.instances, self._by_id, options, self.np_random)
        self.episode = MapfEpisode(inst, max_steps=self.max_steps, reward_shape=self.reward_shape)
        return self.episode.observation(), self.episode.info()

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if self.episode is None:
            raise ConfigError("call reset() before step()")
        try:
            joint = list(np.asarray(action).reshape(-1))
        except (TypeError, ValueError):  # ragged or otherwise not array-like
            raise ConfigError(f"the joint action must be {self.num_agents} integers in 0..4") from None
        reward, terminated, truncated = self.episode.step(joint)
        return self.episode.observation(), reward, terminated, truncated, self.episode.info()

    def render(self) -> str | np.ndarray | None:
        return _render(self.render_mode, self.episode)


def _max_steps(max_steps: int | None, n: int) -> int:
    if max_steps is None:
        return 4 * n * n
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ConfigError(f"max_steps must be a positive integer, got {max_steps!r}")
    return max_steps


def _render_mode(mode: str | None) -> str | None:
    if mode is not None and mode not in RENDER_MODES:
        raise ConfigError(f"render_mode {mode!r} is not supported; use None, 'ansi' or 'rgb_array'")
    return mode


def _observation_space(k: int, n: int) -> spaces.Dict:
    cells = spaces.MultiDiscrete(np.full((k, 2), n, dtype=np.int64))
    return spaces.Dict(
        {"holes": spaces.MultiBinary([n, n]), "positions": cells, "goals": cells},
    )


def _pick(
    instances: tuple[Instance, ...],
    by_id: dict[str, Instance],
    options: dict[str, Any] | None,
    rng: np.random.Generator,
) -> Instance:
    if options is not None and not isinstance(options, Mapping):
        raise ConfigError(
            f"options must be a dict such as {{'instance': 0}} or None, got {type(options).__name__}"
        )
    choice = (options or {}).get("instance")
    if choice is None:
        return instances[int(rng.integers(len(instances)))]
    if isinstance(choice, Instance):
        if (choice.num_agents, choice.size) != (instances[0].num_agents, instances[0].size):
            raise ConfigError(
                f"instance {choice.id!r} has {choice.num_agents} agents on {choice.size}x{choice.size}; "
                f"this environment plays {instances[0].num_agents} agents on "
                f"{instances[0].size}x{instances[0].size}"
            )
        return _instance_set([choice], None, None)[0]
    if isinstance(choice, str):
        if choice not in by_id:
            raise ConfigError(f"no instance with id {choice!r} in the environment's set")
        return by_id[choice]
    if (
        isinstance(choice, (int, np.integer))
        and not isinstance(choice, bool)
        and 0 <= choice < len(instances)
    ):
        return instances[int(choice)]
    raise ConfigError(
        f"options['instance'] must be an Instance, an id or an index in 0..{len(instances) - 1}, "
        f"got {choice!r}"
    )


def _render(mode: str | None, episode: MapfEpisode | None) -> str | np.ndarray | None:
    if mode is None:
        gymnasium.logger.warn(
            "render() was called without a render_mode; pass render_mode='ansi' or 'rgb_array'"
        )
        return None
    if episode is None:
        raise ConfigError("call reset() before render()")
    return episode.ansi() if mode == "ansi" else episode.rgb()


def play_plan(env: MapfFrozenLakeEnv, plan: Sequence[Sequence[str]], **reset_options: Any) -> dict[str, Any]:
    """Play a single-shot plan (one action list per agent, padded with ``WAIT``) step by step in ``env``.

    Returns the final ``info`` (``valid``, ``optimal``, ``failure``, ...). A plan that ends before the
    episode does is judged ``goal_not_reached``, as the validator judges it.

    Raises:
        ConfigError: ``env`` is not a :class:`MapfFrozenLakeEnv`, or the plan is not one list of action
            names per agent.

    >>> inst = Instance("x", ("...", "...", "..."), ((1, 0), (1, 1)), ((1, 1), (1, 2)), 2, 1, 2)
    >>> play_plan(MapfFrozenLakeEnv([inst]), [["RIGHT"], ["RIGHT"]])["optimal"]
    True
    """
    if not isinstance(env.unwrapped if isinstance(env, gymnasium.Env) else env, MapfFrozenLakeEnv):
        raise ConfigError(f"play_plan plays in a MapfFrozenLakeEnv, got {type(env).__name__}")
    if (
        isinstance(plan, (str, bytes))
        or not isinstance(plan, Sequence)
        or any(isinstance(p, (str, bytes)) or not isinstance(p, Sequence) for p in plan)
    ):
        raise ConfigError("the plan must be one list of action names per agent, e.g. [['RIGHT'], ['WAIT']]")
    _, info = env.reset(options=reset_options or None)
    index = {a: i for i, a in enumerate(ACTIONS)}
    horizon = max((len(p) for p in plan), default=0)
    for t in range(horizon):
        joint = [index.get(str(p[t]).upper(), -1) if t < len(p) else index["WAIT"] for p in plan]
        if min(joint) < 0:
            raise ConfigError(f"the plan has an unknown action at step {t + 1}; use {', '.join(ACTIONS)}")
        _, _, terminated, truncated, info = env.step(np.array(joint))
        if terminated or truncated:
            return info
    if not info.get("failure"):
        info = {**info, "valid": False, "optimal": False, "failure": "goal_not_reached"}
    return info


if ENV_ID not in gymnasium.registry:
    gymnasium.register(id=ENV_ID, entry_point=f"{__name__}:MapfFrozenLakeEnv")
