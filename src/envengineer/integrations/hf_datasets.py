"""Instance sets as Hugging Face ``datasets`` / Parquet, and back again without loss.

One row per instance:

========================  ==============================================================================
column                    content
========================  ==============================================================================
``id``                    the instance id
``prompt``                the chat messages a model sees (``build_messages``: system + user)
``instance``              ``Instance.to_json()``: the whole instance; what the reward functions read
``num_agents``, ``size``  the board's shape
``hole_ratio``            share of holes of the grid
``optimal_soc``           exact optimal sum of costs
``optimal_makespan``      exact optimal makespan
``shortest_sum``          sum of the agents' individual shortest-path lengths
``needs_wait``            whether the optimum needs a wait or a detour
``split``                 ``train``, ``validation``, ``benchmark`` or a name of your choice
========================  ==============================================================================

The ``instance`` column is the source of truth: :func:`instances_from_dataset` rebuilds each
:class:`~envengineer.mapf.instance.Instance` from it alone, equal to the original (seed tuple and extra keys
such as the benchmark's ``subset`` included). The other columns are there to filter and group on.

Because the dataset has TRL's conversational ``prompt`` column and the ``instance`` column, it trains
as it is with ``trl.GRPOTrainer(reward_funcs=envengineer.mapf.rewards.mapf_reward, ...)``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError, InstanceFormatError
from envengineer.integrations import require
from envengineer.mapf.instance import Instance

__all__ = [
    "COLUMNS",
    "check_output",
    "instances_from_dataset",
    "load_dataset_file",
    "resolve_instances",
    "rows",
    "to_dataset",
    "write_dataset",
]

log = logging.getLogger(__name__)

#: The columns of an exported dataset, in order.
COLUMNS: tuple[str, ...] = (
    "id", "prompt", "instance", "num_agents", "size", "hole_ratio",
    "optimal_soc", "optimal_makespan", "shortest_sum", "needs_wait", "split",
)  # fmt: skip


def check_solved(instances: Sequence[Instance], where: str = "the instance set") -> None:
    """Raise when the set is empty, holds something other than instances, or one carries no optima.

    Raises:
        InstanceFormatError: Empty, not a sequence of :class:`Instance`, or an unsolved instance.
    """
    if isinstance(instances, (str, bytes, Instance)) or not isinstance(instances, Sequence):
        raise InstanceFormatError(
            f"{where} must be a list of Instance objects, got {type(instances).__name__}"
        )
    if not instances:
        raise InstanceFormatError(f"{where} holds no instances; nothing to export")
    strays = [i for i in instances if not isinstance(i, Instance)]
    if strays:
        raise InstanceFormatError(
            f"{where} must hold Instance objects only; got a {type(strays[0]).__name__}"
        )
    unsolved = [inst.id for inst in instances if not inst.solved]
    if unsolved:
        raise InstanceFormatError(
            f"{where}: {len(unsolved)} instance(s) carry no optima (first: {unsolved[0]!r}); "
            "run `envengineer solve FILE -o SOLVED.jsonl` first"
        )


def rows(instances: Sequence[Instance], *, split: str, system: bool = True) -> list[dict[str, Any]]:
    """The dataset rows as plain dicts (no ``datasets`` needed).

    Args:
        instances: Solved instances.
        split: The value of the ``split`` column.
        system: Whether the prompt starts with the testbed's system message.

    >>> inst = Instance("x", ("...", "...", "..."), ((1, 0), (1, 1)), ((1, 1), (1, 2)), 2, 1, 2)
    >>> r = rows([inst], split="custom")[0]
    >>> r["optimal_soc"], r["split"], r["prompt"][-1]["role"]
    (2, 'custom', 'user')
    """
    from envengineer.mapf.prompt import build_messages

    check_solved(instances)
    check_split(split)
    return [
        {
            "id": inst.id,
            "prompt": build_messages(inst, system=system),
            "instance": inst.to_json(),
            "num_agents": inst.num_agents,
            "size": inst.size,
            "hole_ratio": round(inst.hole_ratio, 6),
            "optimal_soc": inst.optimal_soc,
            "optimal_makespan": inst.optimal_makespan,
            "shortest_sum": inst.shortest_sum,
            "needs_wait": inst.needs_wait,
            "split": split,
        }
        for inst in instances
    ]


def check_split(split: Any) -> str:
    """The split name itself when it is a non-empty string.

    Raises:
        ConfigError: Not a non-empty string.
    """
    if not isinstance(split, str) or not split.strip():
        raise ConfigError(f"split must be a non-empty name such as 'train', got {split!r}")
    return split


def to_dataset(instances: Sequence[Instance], *, split: str, system: bool = True) -> Any:
    """A ``datasets.Dataset`` with the columns of :data:`COLUMNS`.

    Args:
        instances: Solved instances.
        split: The value of the ``split`` column (also the dataset's split name).
        system: Whether the prompt starts with the testbed's system message.
    """
    datasets = require("datasets", purpose="exporting a dataset")
    return datasets.Dataset.from_list(rows(instances, split=split, system=system), split=split)


def check_output(path: str | Path, *, overwrite: bool = False) -> bool:
    """Check that :func:`write_dataset` may write ``path``; returns whether something is there to replace.

    The rule (the same as ``policy init``'s): a new name, or an empty folder, is written; an existing
    Parquet file or ``save_to_disk`` folder (``dataset_info.json`` and ``state.json`` beside plain files) is
    replaced only with ``overwrite``; anything else (another file, another folder) is never replaced. A
    name ending in ``.parquet`` is one Parquet file: a folder of that name, even empty, is refused.

    Raises:
        InstanceFormatError: The path exists and may not be replaced.

    >>> check_output("/nonexistent-folder/out.parquet")
    False
    """
    path = _path(path)
    if path.suffix == ".parquet" and path.is_dir():  # the name says one file; a folder there is a mix-up
        raise InstanceFormatError(
            f"{path} is a folder, but a name ending in .parquet is written as one Parquet file; remove the "
            "folder, or name the output without .parquet to write a dataset folder"
        )
    if not path.exists() or (path.is_dir() and not any(path.iterdir())):
        return False
    if path.suffix == ".parquet" and path.is_file() and not path.is_symlink():
        if not overwrite:
            raise InstanceFormatError(
                f"{path} already exists; pass --overwrite to replace it or name a new file"
            )
        return True
    if path.is_dir() and _is_dataset_folder(path):
        if not overwrite:
            raise InstanceFormatError(
                f"{path} already holds a dataset; pass --overwrite to replace it or name a new folder"
            )
        return True
    raise InstanceFormatError(
        f"{path} already exists and is not an exported dataset; choose a new folder or a *.parquet file name"
    )


def _is_dataset_folder(path: Path) -> bool:
    entries = list(path.iterdir())
    names = {e.name for e in entries}
    return {"dataset_info.json", "state.json"} <= names and all(
        e.is_file() and not e.is_symlink() for e in entries
    )


def write_dataset(dataset: Any, path: str | Path, *, overwrite: bool = False) -> Path:
    """Write a dataset as one Parquet file (``*.parquet``) or a ``save_to_disk`` folder (any other name).

    Args:
        dataset: A ``datasets.Dataset``.
        path: ``OUT.parquet`` or a folder.
        overwrite: Replace an existing Parquet file or exported folder (:func:`check_output`).

    Raises:
        InstanceFormatError: The path exists and may not be replaced.
        ConfigError: ``dataset`` is not a ``datasets.Dataset`` or ``path`` not a path.
    """
    import shutil

    if not (hasattr(dataset, "to_parquet") and hasattr(dataset, "save_to_disk")):
        raise ConfigError(f"write_dataset writes a datasets.Dataset, got {type(dataset).__name__}")
    path = _path(path)
    replace = check_output(path, overwrite=overwrite)
    if path.suffix == ".parquet":  # a folder of that name was refused above
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            dataset.to_parquet(str(tmp))
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
        return path
    if replace:
        shutil.rmtree(path)
    dataset.save_to_disk(str(path))
    return path


def load_dataset_file(path: str | Path) -> Any:
    """Read what :func:`write_dataset` wrote (a Parquet file or a ``save_to_disk`` folder).

    Raises:
        InstanceFormatError: No such file or folder. ConfigError: ``path`` is not a path.
    """
    datasets = require("datasets", purpose="reading a dataset")
    path = _path(path)
    if not path.exists():
        raise InstanceFormatError(f"{path}: no such file or folder")
    if path.is_dir():
        return datasets.load_from_disk(str(path))
    return datasets.Dataset.from_parquet(str(path))


def instances_from_dataset(data: Any, *, column: str = "instance") -> list[Instance]:
    """Rebuild the instances from an exported dataset (``datasets.Dataset``, path, or iterable of rows).

    Args:
        data: A ``datasets.Dataset``, a path :func:`load_dataset_file` reads, or rows (mappings).
        column: The column holding ``Instance.to_json()`` (``instance``; verl files: ``extra_info``'s).

    Raises:
        InstanceFormatError: ``data`` is none of those, the column is missing or a value is not an instance.
        ConfigError: ``column`` is not a string.
    """
    if not isinstance(column, str):
        raise ConfigError(f"column must be a column name such as 'instance', got {column!r}")
    if isinstance(data, (str, Path)):
        data = load_dataset_file(data)
    names = getattr(data, "column_names", None)
    if names is None and (isinstance(data, (bytes, Mapping)) or not isinstance(data, Iterable)):
        raise InstanceFormatError(
            f"instances_from_dataset reads a Dataset, a path or rows, got {type(data).__name__}"
        )
    if names is not None and column not in names:
        raise InstanceFormatError(
            f"the dataset has no {column!r} column (columns: {', '.join(names)}); "
            "export it with `envengineer export`"
        )
    values: Iterable[Any] = data[column] if names is not None else (_get(row, column) for row in data)
    out = []
    for i, value in enumerate(values):
        where = f"row {i} of the dataset"
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise InstanceFormatError(f"{where}: {column!r} is not JSON ({exc.msg})") from None
        out.append(Instance.from_dict(value, where=where))
    return out


def _path(path: Any) -> Path:
    if not isinstance(path, (str, Path)) or not str(path):
        raise ConfigError(f"expected a file or folder path, got {path!r}")
    return Path(path)


def _get(row: Any, column: str) -> Any:
    if not isinstance(row, Mapping) or column not in row:
        raise InstanceFormatError(f"a row has no {column!r} field; export the set with `envengineer export`")
    return row[column]


def resolve_instances(source: str, *, seed: int = 0) -> tuple[list[Instance], str]:
    """The instance set a name or path stands for, and its default split name.

    Args:
        source: ``benchmark`` (the packaged 3,150 of v2; ``benchmark-v1`` for v1), ``validation`` (the
            default validation set), a round configuration (``*.yaml``, ``*.yml``, ``*.json``: its
            instances are generated with ``seed``, sharing no board with the benchmark) or an instance
            file (``*.jsonl``, ``*.jsonl.gz``).
        seed: The data seed of a round configuration.

    Returns:
        ``(instances, split)`` with ``split`` ``benchmark``, ``validation``, ``train`` or ``custom``.

    Raises:
        InstanceFormatError: ``source`` names no instance set, or its file is malformed.
        ConfigError: ``seed`` is not a non-negative integer, or a round configuration is malformed.
    """
    from envengineer.mapf import benchmark as bm

    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
    if not isinstance(source, (str, Path)):
        raise InstanceFormatError(f"source must be a name or a path, got {type(source).__name__}")
    source = str(source)

    version = bm.benchmark_name(source)
    if version is not None:
        return bm.load_benchmark(version), "benchmark"
    if source == "validation":
        return bm.build_validation_set(), "validation"
    path = Path(source)
    name = path.name.lower()
    if name.endswith((".yaml", ".yml", ".json")):
        from envengineer.mapf.config import RoundConfig
        from envengineer.mapf.generator import generate_round

        config = RoundConfig.load(path)
        exclude = frozenset(inst.board_hash() for inst in bm.load_benchmark())
        return generate_round(config, seed, split="train", exclude=exclude), "train"
    if name.endswith((".jsonl", ".jsonl.gz")):
        from envengineer.mapf.instance import load_instances

        return load_instances(path), "custom"
    raise InstanceFormatError(
        f"{source!r} is no instance set: give 'benchmark', 'validation', a round configuration "
        "(.yaml/.yml/.json) or an instance file (.jsonl/.jsonl.gz)"
    )
