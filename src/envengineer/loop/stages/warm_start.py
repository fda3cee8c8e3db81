"""Stage ``warm_start``: supervised fine-tuning on optimal plans before round 0, cached between runs."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from envengineer.integrations.trackers import preset_with_report_to
from envengineer.loop.components import release_shared_backend
from envengineer.loop.experiment import Experiment, WarmStartSettings
from envengineer.loop.records import manifest_row, train_record
from envengineer.loop.rundir import (
    atomic_write_json,
    atomic_write_jsonl,
    atomic_write_text,
    read_json,
    update_digest,
)
from envengineer.loop.rundir import file_digest as _file_digest
from envengineer.loop.seeds import round_seed
from envengineer.loop.state import Loop
from envengineer.mapf.config import RoundConfig
from envengineer.mapf.instance import Instance
from envengineer.models.cache import exclusive_lock

log = logging.getLogger(__name__)


def run(loop: Loop) -> tuple[dict[str, Any], dict[str, Any]]:
    ws = loop.exp.warm_start
    d = loop.rd.root / "warm_start"
    instances = data(loop, d)
    cache = cache_dir(loop.exp, instances) if ws.cache else None

    def train() -> dict[str, Any]:
        release_shared_backend()
        train_seed = loop.exp.seeds.training if ws.seed is None else ws.seed
        result = loop.comps.warm_starter(
            loop.exp.model,
            instances,
            out_dir=d,
            preset=preset_with_report_to(ws.preset, loop.exp.training.report_to, "sft"),
            seed=round_seed(train_seed, "warm_start", 0),
            max_steps=ws.max_steps,
        )
        seed = round_seed(loop.exp.seeds.data if ws.seed is None else ws.seed, "warm_start", 0)
        return train_record(result, model_in=loop.exp.model, seed=seed, preset=ws.preset, epochs=None)

    record = cached(cache, train)
    atomic_write_json(d / "metrics.json", record)
    loop.warm_checkpoint = record["checkpoint"]
    return {"metrics": d / "metrics.json", "checkpoint": record["checkpoint"]}, {
        "checkpoint": record["checkpoint"],
        "steps": record["steps"],
        "instances": len(instances),
    }


def data(loop: Loop, d: Path) -> list[Instance]:
    """The warm-start's boards: equal shares of each agent count (shuffled together, so every batch mixes
    them), recorded in ``config.yaml`` (one configuration per agent count after the first:
    ``config.aN.yaml``) and ``manifest.jsonl``."""
    ws = loop.exp.warm_start
    data_seed = loop.exp.seeds.data if ws.seed is None else ws.seed
    configs = round_configs(ws, loop.space.sizes, loop.exp.num_agents)
    instances: list[Instance] = []
    for k, config in enumerate(configs):
        instances += loop.comps.generator(
            config, round_seed(data_seed, "warm_start", k), split="train", exclude=loop.exclude,
            progress=loop.progress,
        )  # fmt: skip
        name = "config.yaml" if k == 0 else f"config.a{config.num_agents}.yaml"
        atomic_write_text(d / name, config.to_yaml())
    if len(configs) > 1:
        import numpy as np

        order = np.random.default_rng(round_seed(data_seed, "warm_start", len(configs))).permutation(
            len(instances)
        )
        instances = [instances[i] for i in order]
    atomic_write_jsonl(d / "manifest.jsonl", (manifest_row(i) for i in instances))
    return instances


def round_configs(ws: WarmStartSettings, sizes: Sequence[int], num_agents: int) -> list[RoundConfig]:
    """The warm-start's round per agent count (``ws.agents``, else the experiment's ``num_agents``):
    equal shares of ``ws.samples``, every size of ``ws.sizes`` (else ``sizes``) that fits the count."""
    agents = ws.agents or (num_agents,)
    knobs = {"data_ratio": 1.0, "hole_ratio": ws.hole_ratio, "wait_ratio": ws.wait_ratio}
    configs = []
    for k, count in enumerate(agents):
        share = ws.samples // len(agents) + (k < ws.samples % len(agents))
        fitting = [n for n in (ws.sizes or sizes) if n >= count]  # the benchmark's rule
        configs.append(
            RoundConfig.model_validate(
                {"sizes": {n: knobs for n in fitting}, "num_agents": count, "num_samples": share}
            )
        )
    return configs


def cache_dir(exp: Experiment, instances: Sequence[Instance]) -> Path:
    """Where a warm-start with exactly these settings, seeds and data is kept between runs
    (:func:`cache_key`)."""
    import hashlib

    from envengineer.models.embedded import cache_root

    key = cache_key(exp, instances)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / "warm_start" / digest


def cache_key(exp: Experiment, instances: Sequence[Instance]) -> dict[str, Any]:
    """What a cached warm-start must have been trained from: the package version, the model (its name,
    the digest of its files and its policy format, :func:`model_identity`), the warm-start settings, the
    SFT preset as resolved, the seed and the data."""
    import hashlib

    from envengineer import __version__

    try:
        from envengineer.training.presets import load_preset

        preset = load_preset(exp.warm_start.preset, "sft").model_dump(mode="json")
    except Exception:  # the preset's name stands in when it cannot be read here
        preset = exp.warm_start.preset
    files, policy_format = model_identity(exp.model)
    return {
        "version": __version__,
        "model": exp.model,
        # by what it holds: a policy initialised again at the same path, or the packaged trainee
        # repackaged at the same version, is another model
        "model_files": files,
        # the format the model's own config.json records (policy:trainee's is its own, not the default)
        "policy_format": policy_format,
        "warm_start": exp.warm_start.model_dump(mode="json", exclude={"enabled", "cache"}),
        "preset": preset,
        "seed": exp.seeds.training if exp.warm_start.seed is None else exp.warm_start.seed,
        "data": hashlib.sha256("".join(i.to_json() for i in instances).encode()).hexdigest(),
    }


def model_identity(model: str | None) -> tuple[str | None, str | None]:
    """``(digest of its files, policy format)`` of the model a warm-start starts from.

    Names are resolved to the folders they stand for: ``policy:trainee`` the packaged trainee's,
    ``policy:SIZE`` the cached policy's (created as training would create it), the embedded model's names
    its packaged GGUF file (what its converted folder is made from); a local folder is read as is. The
    format is the one the folder's ``config.json`` records (small policies only). A hub id has no files
    here: ``(None, None)``, the name alone keys it.
    """
    from envengineer.models.base import ModelError
    from envengineer.models.embedded import gguf_path, is_embedded_name
    from envengineer.models.small_policy import is_policy_name, named_policy_path
    from envengineer.models.trainee import is_trainee_name, trainee_path

    if model is None or is_embedded_name(model):
        try:
            return _file_digest(gguf_path()), None
        except ModelError:  # not installed: the warm-start's training says so
            return None, None
    if is_trainee_name(model):
        folder = trainee_path()
    elif is_policy_name(model):
        folder = named_policy_path(model)
    else:
        folder = Path(model)
    if not folder.is_dir():
        return None, None
    return folder_digest(folder), _recorded_format(folder)


def _recorded_format(folder: Path) -> str | None:
    from envengineer.models.small_policy import FORMAT_KEY, prompt_style_of

    if prompt_style_of(folder) is None:  # not a small policy
        return None
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    return str(config.get(FORMAT_KEY, "v1"))  # a folder that records none is v1


def folder_digest(folder: Path) -> str:
    """A digest of every file in ``folder`` (names and bytes, in name order)."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        update_digest(digest, path)
    return digest.hexdigest()


def cached(cache: Path | None, train: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The record kept in ``cache``, else ``train()``'s, stored there. One process at a time per key (a
    lock beside the entry): runs that start together in lanes train the warm-start once, the others wait
    and reuse it."""
    if cache is None:
        return train()
    with exclusive_lock(cache.parent / f"{cache.name}.lock"):
        if (cache / "record.json").exists():
            record = read_json(cache / "record.json")
            record["cached_from"] = str(cache)
            log.info("warm-start: reusing %s (same model and its files, settings, seeds and data)", cache)
            return record
        return store(cache, train())


def store(cache: Path, record: dict[str, Any]) -> dict[str, Any]:
    """Copy the warm-start checkpoint into the cache (atomically) and return the record pointing there."""
    import shutil

    source = Path(record["checkpoint"])
    if not source.is_dir():
        return record
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / f".checkpoint.{time.time_ns()}.tmp"
    shutil.copytree(source, tmp)
    target = cache / "checkpoint"
    if target.exists():
        shutil.rmtree(target)
    tmp.replace(target)
    cached = {**record, "checkpoint": str(target), "trained_in": str(source)}
    atomic_write_json(cache / "record.json", cached)
    log.info("warm-start checkpoint kept in %s for runs with the same settings", target)
    return record
