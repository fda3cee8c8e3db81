"""MAPF-FrozenLake as a reasoning-gym procedural dataset, registered as ``mapf_frozenlake``.

reasoning-gym's task shape: a config dataclass with ``validate()``, a ``ProceduralDataset`` whose
``__getitem__(idx)`` returns ``{"question", "answer", "metadata"}`` deterministically from ``(seed, idx)``,
and ``score_answer(answer, entry) -> float``. Importing this module registers the task, after which
reasoning-gym's own tooling draws items by name::

    import reasoning_gym
    import envengineer.integrations.reasoning_gym  # registers "mapf_frozenlake"

    data = reasoning_gym.create_dataset("mapf_frozenlake", size=100, seed=0, max_size=6)

* ``question`` is the testbed's prompt (``build_prompt``), which asks for an ``<answer>`` block;
* ``answer`` is a reference answer: the solver's SoC-optimal plan, the lines inside the block;
* ``metadata`` holds ``source_dataset``, ``source_index``, the whole ``instance`` (``Instance.to_dict()``),
  its optima and ``difficulty``.

``score_answer`` accepts the inside of the block (what ``reasoning_gym.utils.extract_answer`` returns) or
the whole response, validates it with the testbed's validator and returns the reward of
``reward_shape`` (``sparse`` by default: 1.0 optimal, 0.5 valid, else 0).

:class:`MapfFrozenLakeCurriculum` (registered with the task) has difficulty ladders over the testbed's
three knobs: grid size, hole ratio and wait ratio.

With ``source="benchmark"`` the items are the packaged benchmark's 3,150 instances in file order, so
reasoning-gym evaluations report on the same boards as ``envengineer score``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from reasoning_gym.coaching import BaseCurriculum, RangeAttributeDefinition, ScalarAttributeDefinition
from reasoning_gym.factory import DATASETS, ProceduralDataset, register_dataset

from envengineer.errors import ConfigError, InstanceFormatError
from envengineer.mapf.instance import Instance

__all__ = ["DATASET_NAME", "MapfFrozenLakeConfig", "MapfFrozenLakeCurriculum", "MapfFrozenLakeDataset"]

DATASET_NAME = "mapf_frozenlake"
_STREAM = 0x7267  # the seed-tuple stream of reasoning-gym items, apart from every other generator stream
_ANSWER_TAG = re.compile(r"<\s*/?\s*answer\s*>", re.IGNORECASE)


@dataclass
class MapfFrozenLakeConfig:
    """What items to draw.

    Attributes:
        source: ``generate`` (fresh solved boards from the knobs below) or ``benchmark`` (the packaged
            3,150, in file order; the knobs below are then unused).
        min_agents, max_agents: Agents per board, drawn uniformly in the range.
        min_size, max_size: Grid side ``n``, drawn uniformly in the range.
        min_hole_ratio, max_hole_ratio: Share of holes, drawn uniformly in the range (within [0, 0.5]).
        wait_ratio: Probability that an item's optimum needs a wait or a detour.
        reward_shape: ``sparse`` (default), ``graded`` or ``dense`` (docs/testbed-answers.md).
        seed: Base seed; item ``idx`` comes from ``SeedSequence((seed, 3, 0x7267, idx))``.
        size: Number of items (at most 3,150 for the benchmark).
    """

    source: str = "generate"
    min_agents: int = 2
    max_agents: int = 2
    min_size: int = 3
    max_size: int = 6
    min_hole_ratio: float = 0.0
    max_hole_ratio: float = 0.3
    wait_ratio: float = 0.5
    reward_shape: str = "sparse"
    seed: int | None = None
    size: int = 500

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the bad value and the fix (wrong types included)."""
        from envengineer.mapf.rewards import SHAPES

        for name in ("min_agents", "max_agents", "min_size", "max_size", "size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name} must be an integer, got {value!r}")
        for name in ("min_hole_ratio", "max_hole_ratio", "wait_ratio"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                raise ConfigError(f"{name} must be a number, got {value!r}")
        seed = self.seed
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63
        ):
            raise ConfigError(f"seed must be None or an integer in [0, 2**63), got {seed!r}")
        if not isinstance(self.source, str) or not isinstance(self.reward_shape, str):
            raise ConfigError("source and reward_shape must be names (strings)")

        if self.source not in ("generate", "benchmark"):
            raise ConfigError(f"source {self.source!r} is unknown; use 'generate' or 'benchmark'")
        if not 1 <= self.size <= (3150 if self.source == "benchmark" else 10_000_000):
            raise ConfigError(
                f"size {self.size} is out of range; use 1..3150 for the benchmark, 1..10,000,000 otherwise"
            )
        if not 1 <= self.min_agents <= self.max_agents <= 16:
            raise ConfigError(
                f"agents {self.min_agents}..{self.max_agents}: need 1 <= min_agents <= max_agents <= 16"
            )
        if not 2 <= self.min_size <= self.max_size <= 64:
            raise ConfigError(f"sizes {self.min_size}..{self.max_size}: need 2 <= min_size <= max_size <= 64")
        if 2 * self.max_agents > self.min_size**2:
            raise ConfigError(
                f"{self.max_agents} agents do not fit on a {self.min_size}x{self.min_size} grid; "
                "raise min_size or lower max_agents"
            )
        if not 0.0 <= self.min_hole_ratio <= self.max_hole_ratio <= 0.5:
            raise ConfigError(
                f"hole ratios {self.min_hole_ratio}..{self.max_hole_ratio}: need 0 <= min <= max <= 0.5"
            )
        if not 0.0 <= self.wait_ratio <= 1.0:
            raise ConfigError(f"wait_ratio {self.wait_ratio} must lie in [0, 1]")
        if self.reward_shape not in SHAPES:
            raise ConfigError(
                f"reward_shape {self.reward_shape!r} is unknown; use one of {', '.join(SHAPES)}"
            )


class MapfFrozenLakeDataset(ProceduralDataset):
    """Solved MAPF-FrozenLake boards as reasoning-gym items (see the module docstring).

    Raises:
        ConfigError: ``config`` is not a valid :class:`MapfFrozenLakeConfig` (checked here, not at the
            first item); ``dataset[idx]`` with an ``idx`` that is not an integer.
        IndexError: ``dataset[idx]`` outside ``0..size-1`` (Python's sequence protocol).
        InstanceFormatError: ``score_answer`` with an entry that is not one of this dataset's items.
    """

    def __init__(self, config: MapfFrozenLakeConfig) -> None:
        if not isinstance(config, MapfFrozenLakeConfig):
            raise ConfigError(f"the dataset needs a MapfFrozenLakeConfig, got {type(config).__name__}")
        config.validate()
        super().__init__(config=config, seed=config.seed, size=config.size)
        self._benchmark: list[Instance] | None = None
        self._exclude: frozenset[str] | None = None
        self._cache: dict[int, dict[str, Any]] = {}

    def __getitem__(self, idx: int) -> dict[str, Any]:
        if isinstance(idx, bool) or not isinstance(idx, (int, np.integer)):
            raise ConfigError(f"items are indexed by integers 0..{self.size - 1}, got {idx!r}")
        if not 0 <= idx < self.size:
            raise IndexError(f"item {idx} is out of range for a dataset of {self.size}")
        if idx not in self._cache:
            self._cache[idx] = self._item(idx, self._instance(idx))
        return self._cache[idx]

    def _instance(self, idx: int) -> Instance:
        from envengineer.mapf.benchmark import load_benchmark

        if self._benchmark is None:
            self._benchmark = load_benchmark()
        if self.config.source == "benchmark":
            return self._benchmark[idx]
        from envengineer.mapf.generator import SPLITS, Target, generate_instance

        if self._exclude is None:
            self._exclude = frozenset(inst.board_hash() for inst in self._benchmark)
        cfg = self.config
        seed = (int(self.seed), SPLITS["custom"], _STREAM, idx)
        rng = np.random.default_rng(np.random.SeedSequence(seed))
        k = int(rng.integers(cfg.min_agents, cfg.max_agents + 1))
        n = int(rng.integers(cfg.min_size, cfg.max_size + 1))
        target = Target(
            num_agents=k,
            size=n,
            hole_ratio=float(rng.uniform(cfg.min_hole_ratio, cfg.max_hole_ratio)),
            needs_wait=bool(rng.random() < cfg.wait_ratio),
        )
        return generate_instance(
            target, seed, instance_id=f"rg_{k}agents_{n}x{n}_{idx:06d}", exclude=self._exclude
        )

    def _item(self, idx: int, inst: Instance) -> dict[str, Any]:
        from envengineer.mapf.policies import optimal_plan
        from envengineer.mapf.prompt import build_prompt
        from envengineer.mapf.validator import format_answer

        cfg = self.config
        block = format_answer(optimal_plan(inst, np.random.default_rng(0)))
        return {
            "question": build_prompt(inst),
            "answer": _ANSWER_TAG.sub("", block).strip(),
            "metadata": {
                "source_dataset": DATASET_NAME,
                "source_index": idx,
                "instance": inst.to_dict(),
                "optimal_soc": inst.optimal_soc,
                "optimal_makespan": inst.optimal_makespan,
                "needs_wait": inst.needs_wait,
                "difficulty": {
                    "num_agents": (cfg.min_agents, cfg.max_agents),
                    "size": (cfg.min_size, cfg.max_size),
                    "hole_ratio": (cfg.min_hole_ratio, cfg.max_hole_ratio),
                },
            },
        }

    def score_answer(self, answer: str | None, entry: dict[str, Any]) -> float:
        """The testbed's reward of an answer: the inside of the ``<answer>`` block or a whole response.

        Never raises on what a model writes (``None`` and empty text score 0).

        Raises:
            InstanceFormatError: ``entry`` is not an item of this dataset (no ``metadata.instance``).
        """
        from envengineer.mapf.rewards import make_reward

        metadata = entry.get("metadata") if isinstance(entry, dict) else None
        instance = metadata.get("instance") if isinstance(metadata, dict) else None
        if instance is None:
            raise InstanceFormatError(
                "score_answer needs one of this dataset's items (a dict with metadata.instance), "
                f"got {type(entry).__name__}"
            )
        if not isinstance(answer, str) or not answer.strip():
            return 0.0
        text = answer if _ANSWER_TAG.search(answer) else f"<answer>\n{answer}\n</answer>"
        return make_reward(self.config.reward_shape)([text], instance=[instance])[0]  # type: ignore[arg-type]


class MapfFrozenLakeCurriculum(BaseCurriculum):
    """Difficulty ladders over the testbed's three knobs (SPEC §3), for reasoning-gym's curricula.

    * ``size`` — the grid side range, levels 3..10 (``min_size`` / ``max_size``, an interval);
    * ``hole_ratio`` — the largest hole ratio, levels 0, 0.1, ..., 0.5 (``max_hole_ratio``);
    * ``wait_ratio`` — the share of items that need a wait, levels 0, 0.25, ..., 1 (``wait_ratio``).

    Agent counts are left to the dataset's defaults (``min_agents`` / ``max_agents``).
    """

    def __init__(self) -> None:
        super().__init__(MapfFrozenLakeCurriculum.__name__, MapfFrozenLakeConfig)
        self._define_attributes(
            RangeAttributeDefinition(
                name="size",
                levels=list(range(3, 11)),
                description="Grid side n of an n x n board",
                lower_field_name="min_size",
                upper_field_name="max_size",
                ensure_interval=True,
            ),
            ScalarAttributeDefinition(
                name="hole_ratio",
                levels=[0.0, 0.1, 0.2, 0.3, 0.4, 0.5],
                description="Largest share of holes",
                field_name="max_hole_ratio",
            ),
            ScalarAttributeDefinition(
                name="wait_ratio",
                levels=[0.0, 0.25, 0.5, 0.75, 1.0],
                description="Share of items whose optimum needs a wait or a detour",
                field_name="wait_ratio",
            ),
        )


if DATASET_NAME not in DATASETS:
    register_dataset(DATASET_NAME, MapfFrozenLakeDataset, MapfFrozenLakeConfig, MapfFrozenLakeCurriculum)
