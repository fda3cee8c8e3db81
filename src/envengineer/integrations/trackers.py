"""Experiment trackers: ``report_to`` passed through to TRL, and the loop's own per-round metrics.

* **Training.** ``report_to`` (an experiment's ``training.report_to``, ``envengineer run --report-to``,
  ``envengineer train --report-to``) replaces the preset's ``report_to`` option of ``trl.GRPOConfig`` /
  ``trl.SFTConfig``: ``tensorboard``, ``wandb``, ``trackio``, ``mlflow`` (or any other integration
  transformers knows, ``all``, ``none``). Offline by default: ``WANDB_MODE=offline`` unless set,
  TensorBoard and MLflow write local files, trackio logs locally unless a Space is configured. TRL's
  TensorBoard events of round ``r`` land in ``rounds/r/train/trainer/runs/``.
* **Loop.** When ``report_to`` includes ``tensorboard`` (or is ``all`` with tensorboard installed), each
  finished validation stage writes to ``RUN_DIR/tensorboard/`` at step = round index: the validation
  summary (``validation/valid``, ``validation/optimal``, ``validation/makespan_optimal``), the rates per
  cell (``validation/<k>agents/<n>x<n>/valid`` and ``/optimal``, ``validation/<k>agents/sum/...``), failure
  counts in total (``failures/<category>``) and per cell (``failures/<k>agents_<n>x<n>/<category>``), the
  round's configuration knobs (``config/<n>x<n>/<knob>``) and, as text, the configuration (``config``) and
  the engineer's rationale (``engineer/rationale``). Other trackers receive TRL's training metrics only.

``tensorboard --logdir RUN_DIR`` shows both the loop's and TRL's curves.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError
from envengineer.integrations import MissingDependency

__all__ = ["KNOWN", "log_round", "loop_trackers", "normalize_report_to", "preset_with_report_to"]

log = logging.getLogger(__name__)

#: The integrations transformers 5 accepts in ``report_to`` (plus ``all`` and ``none``).
KNOWN: tuple[str, ...] = (
    "azure_ml", "clearml", "codecarbon", "comet_ml", "dagshub", "dvclive", "flyte", "mlflow", "swanlab",
    "tensorboard", "trackio", "wandb",
)  # fmt: skip
_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio", "mlflow": "mlflow"}
LOOP_DIR = "tensorboard"


def normalize_report_to(value: str | Iterable[str] | None) -> list[str] | None:
    """Check and normalise a ``report_to`` value: ``None`` (keep the preset's), or a list of names.

    Accepts a name, a comma-separated string or a list. ``none`` and ``all`` stand alone.

    Raises:
        ConfigError: An unknown name, or ``none``/``all`` combined with other names.

    >>> normalize_report_to("tensorboard, wandb")
    ['tensorboard', 'wandb']
    >>> normalize_report_to(None) is None
    True
    """
    if value is None:
        return None
    if not isinstance(value, (str, Iterable)) or isinstance(value, (bytes, Mapping)):
        raise ConfigError(f"report_to must be a tracker name or a list of names, got {type(value).__name__}")
    items = value.split(",") if isinstance(value, str) else list(value)
    names = []
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(f"report_to holds {item!r}; give tracker names such as 'tensorboard'")
        name = item.strip().lower()
        if name and name not in names:
            names.append(name)
    unknown = [n for n in names if n not in (*KNOWN, "all", "none")]
    if unknown:
        raise ConfigError(
            f"unknown tracker {unknown[0]!r} in report_to; use none, all or any of {', '.join(KNOWN)}"
        )
    if not names:
        raise ConfigError("report_to is empty; give 'none' to log nowhere or a tracker such as 'tensorboard'")
    if len(names) > 1 and ({"none", "all"} & set(names)):
        raise ConfigError(f"report_to {names}: 'none' and 'all' stand alone; drop the other names")
    return names


def _require_installed(names: Sequence[str]) -> None:
    for name in names:
        package = _PACKAGES.get(name, name)
        if importlib.util.find_spec(package) is None:
            raise MissingDependency(
                f"report_to names {name!r} but the {package!r} package is not installed; "
                f"pip install {package} (tensorboard comes with the integrations extra)"
            )


def preset_with_report_to(preset: Any, report_to: str | Iterable[str] | None, kind: str = "grpo") -> Any:
    """The preset with its TRL ``report_to`` replaced; ``preset`` itself when ``report_to`` is ``None``.

    Args:
        preset: A preset name, path, mapping or object (as ``train_round`` / ``sft`` take it).
        report_to: Tracker names (see :func:`normalize_report_to`).
        kind: ``grpo`` or ``sft``.

    Returns:
        A preset object whose ``grpo:`` / ``sft:`` section has the new ``report_to``.

    Raises:
        ConfigError: A bad name or preset. MissingDependency: a named tracker is not installed.
    """
    names = normalize_report_to(report_to)
    if names is None:
        return preset
    from envengineer.training.presets import load_preset

    _require_installed([n for n in names if n not in ("all", "none")])
    if "wandb" in names and "WANDB_MODE" not in os.environ:
        os.environ["WANDB_MODE"] = "offline"
        log.info("wandb runs offline (WANDB_MODE=offline); set WANDB_MODE=online to sync")
    loaded = load_preset(preset, kind)  # type: ignore[arg-type]
    data = loaded.model_dump(mode="json")
    data[kind] = {**data.get(kind, {}), "report_to": names}
    return load_preset(data, kind)  # type: ignore[arg-type]


def loop_trackers(report_to: Sequence[str] | None) -> list[str]:
    """The trackers that receive the loop's own metrics (TensorBoard, when asked for and installed).

    Raises:
        ConfigError: A bad ``report_to``. MissingDependency: ``tensorboard`` named and not installed.
    """
    names = normalize_report_to(report_to) or []
    if "tensorboard" in names:
        _require_installed(["tensorboard"])
        return ["tensorboard"]
    if names == ["all"] and importlib.util.find_spec("tensorboard") is not None:
        return ["tensorboard"]
    return []


def log_round(
    report_to: Sequence[str] | None,
    run_dir: str | Path,
    round_index: int,
    validation: Mapping[str, Any] | None,
    config: Any = None,
    rationale: str | None = None,
) -> Path | None:
    """Write one round's loop metrics to the trackers of ``report_to``; returns the event folder, if any.

    Args:
        report_to: The experiment's ``training.report_to``.
        run_dir: The run directory (events go to ``run_dir/tensorboard``).
        round_index: The round (the events' step).
        validation: The validation ``ScoreReport.to_json()`` of the round.
        config: The round's ``RoundConfig`` (or its dict).
        rationale: The engineer's rationale for this round's configuration.

    Raises:
        ConfigError: A bad ``report_to``, ``round_index`` or ``validation``. MissingDependency: TensorBoard
            is asked for and not installed.
    """
    if isinstance(round_index, bool) or not isinstance(round_index, int) or round_index < 0:
        raise ConfigError(f"round_index must be a non-negative integer, got {round_index!r}")
    trackers = loop_trackers(report_to)
    if not trackers:
        return None
    from torch.utils.tensorboard import SummaryWriter

    folder = Path(run_dir) / LOOP_DIR
    writer = SummaryWriter(log_dir=str(folder))
    try:
        for tag, value in round_scalars(validation or {}, config).items():
            writer.add_scalar(tag, value, round_index)
        if config is not None:
            import yaml

            writer.add_text("config", "```\n" + yaml.safe_dump(_config_dict(config), sort_keys=False) + "```",
                            round_index)  # fmt: skip
        if rationale:
            writer.add_text("engineer/rationale", rationale, round_index)
    finally:
        writer.close()
    return folder


def round_scalars(validation: Mapping[str, Any], config: Any = None) -> dict[str, float]:
    """The scalar tags of one round (see the module docstring).

    Raises:
        ConfigError: ``validation`` (or ``config``) does not have the shape of ``ScoreReport.to_json()``
            (a ``RoundConfig``).

    >>> s = round_scalars({"summary": {"valid": 50.0}, "failures": {"2": {"3": {"hole": 2}}}})
    >>> s["validation/valid"], s["failures/hole"], s["failures/2agents_3x3/hole"]
    (50.0, 2.0, 2.0)
    """
    if not isinstance(validation, Mapping):
        raise ConfigError(
            f"validation must be a ScoreReport.to_json() mapping, got {type(validation).__name__}"
        )
    try:
        return _round_scalars(validation, config)
    except (AttributeError, TypeError, ValueError, KeyError, OverflowError):
        raise ConfigError(
            "validation (or config) does not have the shape of ScoreReport.to_json() (a RoundConfig)"
        ) from None


def _round_scalars(validation: Mapping[str, Any], config: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for key in ("valid", "optimal", "makespan_optimal"):
        if isinstance(validation.get("summary", {}).get(key), (int, float)):
            out[f"validation/{key}"] = float(validation["summary"][key])
    for agents, block in validation.get("table", {}).items():
        for size, row in block.get("sizes", {}).items():
            for key in ("valid", "optimal"):
                out[f"validation/{agents}agents/{size}x{size}/{key}"] = float(row[key])
        for key in ("valid", "optimal"):
            if key in block.get("sum", {}):
                out[f"validation/{agents}agents/sum/{key}"] = float(block["sum"][key])
    totals: dict[str, float] = {}
    for agents, sizes in validation.get("failures", {}).items():
        for size, counts in sizes.items():
            for category, count in counts.items():
                out[f"failures/{agents}agents_{size}x{size}/{category}"] = float(count)
                totals[category] = totals.get(category, 0.0) + float(count)
    out.update({f"failures/{c}": v for c, v in totals.items()})
    if config is not None:
        for size, knobs in _config_dict(config).get("sizes", {}).items():
            for knob, value in knobs.items():
                out[f"config/{size}x{size}/{knob}"] = float(value)
    return out


def _config_dict(config: Any) -> dict[str, Any]:
    if hasattr(config, "model_dump"):
        return config.model_dump(mode="json")
    return dict(config)
