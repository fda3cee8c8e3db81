"""Package a warm-start run as the trainee that ships with envengineer (``policy:trainee``).

Reads a ``benchmarks/bench_warm_start.py`` run (its ``--out`` folder and ``--json`` record), copies the
checkpoint's weights and tokenizer into ``src/envengineer/data/trainee/`` and writes ``manifest.json``:
the commands that rebuild it, its seed, data and steps, the held-out rates the run measured, and a few
boards with the greedy answers the copied weights give them (``tests/test_trainee.py`` checks that the
shipped weights still give them), the SHA-256 of every packaged file and the parameter count.

Every fact of the build comes from the training run's own record: the commit and the versions the run
recorded when it trained, its data (agent counts, sizes, hole and wait ratios) and its steps. A record
that lacks one is refused (a one-line error, nothing copied) rather than filled in from the packaging
checkout; a checkpoint whose ``metrics.json`` counts other steps than the record is refused too. The
build, as measured (docs/models.md, "The packaged trainee")::

    python benchmarks/bench_warm_start.py --format free-moves --agents 1,2,3 --seed 0 --minutes 75 \\
        --max-completion-length 640 --samples 192000 --steps 6000 --length-groups 2 --save-every 750 \\
        --out runs/trainee --json runs/trainee/record.json
    python scripts/package_trainee.py runs/trainee
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError, describe_error

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

#: The checkpoint's files that make a loadable policy (the trainer's state stays behind).
POLICY_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)
#: Held-out boards per agent count whose answers the manifest records.
CHECKS_PER_COUNT = 2
#: What the manifest takes from the training record, by path; a record without one is refused.
RECORD_FIELDS = (
    "args.seed",
    "args.samples",
    "args.minutes",
    "args.max_completion_length",
    "args.steps",
    "args.length_groups",
    "args.save_every",
    "args.preset",
    "commit",
    "versions.torch",
    "versions.transformers",
    "data.agents",
    "data.sizes",
    "data.samples",
    "data.hole_ratio",
    "data.wait_ratio",
    "format",
    "steps",
    "train_minutes",
    "final_loss",
    "sets",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="the bench_warm_start.py --out folder")
    p.add_argument("--record", type=Path, default=None, help="its --json record (default RUN/record.json)")
    p.add_argument("--checkpoint", type=Path, default=None, help="default RUN/sft/checkpoint")
    p.add_argument(
        "--out", type=Path, default=ROOT / "src" / "envengineer" / "data" / "trainee", help="package folder"
    )
    return p.parse_args(argv)


def held_out_rates(sets: dict[str, Any]) -> dict[str, Any]:
    """The record's headline per agent count: the policy's and greedy's valid / optimal %, sizes 3-8."""
    rates: dict[str, Any] = {}
    for k, s in sets.items():
        rates[str(k)] = {
            "boards": sum(row["boards"] for row in s["policy"]["by_size"].values()),
            "valid": s["policy"]["sizes_3_8"]["valid"],
            "optimal": s["policy"]["sizes_3_8"]["optimal"],
            "greedy_valid": s["greedy"]["sizes_3_8"]["valid"],
        }
    return rates


def answer_checks(folder: Path) -> list[dict[str, Any]]:
    """A few held-out boards of each agent count, with the packaged weights' greedy answers."""
    from common import answer, held_out
    from envengineer.mapf.validator import validate

    boards = [b for k in (1, 2, 3) for b in held_out(1, agents=k, max_size=5)[:CHECKS_PER_COUNT]]
    texts = answer(str(folder), boards, 640)
    checks = []
    for board, text in zip(boards, texts, strict=True):
        verdict = validate(board, text)
        checks.append(
            {"instance": board.to_dict(), "answer": text, "valid": verdict.valid, "optimal": verdict.optimal}
        )
    return checks


def field(record: dict[str, Any], path: str, source: str) -> Any:
    """``record``'s value at the dotted ``path``.

    Raises:
        ConfigError: the record lacks it (it is never filled in from the packaging checkout).
    """
    value: Any = record
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise ConfigError(
                f"the training record {source} lacks {path}; package a run of the current "
                "benchmarks/bench_warm_start.py (which records it) instead of filling it in"
            )
        value = value[key]
    return value


def build_facts(record: dict[str, Any], source: str) -> dict[str, Any]:
    """The manifest's facts of the build, every one read from the training run's record.

    Raises:
        ConfigError: a field of :data:`RECORD_FIELDS` is missing.
    """
    get = {path: field(record, path, source) for path in RECORD_FIELDS}
    args = record["args"]
    data = record["data"]
    return {
        "rebuild": [
            "python benchmarks/bench_warm_start.py --format {format} --agents {agents} --seed {seed} "
            "--minutes {minutes} --max-completion-length {max_completion_length} --samples {samples} "
            "--steps {steps} --length-groups {length_groups} --save-every {save_every} --out runs/trainee "
            "--json runs/trainee/record.json".format(
                **{**args, "format": get["format"], "agents": ",".join(map(str, data["agents"]))}
            ),
            "python scripts/package_trainee.py runs/trainee",
        ],
        "format": get["format"],
        "seed": int(get["args.seed"]),
        "data": {key: data[key] for key in ("agents", "sizes", "samples", "hole_ratio", "wait_ratio")},
        "preset": get["args.preset"],
        "steps": get["steps"],
        "train_minutes": get["train_minutes"],
        "final_loss": get["final_loss"],
        "commit": get["commit"],  # the training run's, as it recorded it
        "versions": dict(record["versions"]),  # what trained, recorded before training
        "held_out": held_out_rates(get["sets"]),
    }


def check_checkpoint(checkpoint: Path, record: dict[str, Any], source: str) -> None:
    """Refuse a checkpoint whose run (``metrics.json`` beside it) counted other steps than the record."""
    metrics = checkpoint.parent / "metrics.json"
    if not metrics.is_file():
        return
    steps = json.loads(metrics.read_text(encoding="utf-8")).get("steps")
    if steps != record["steps"]:
        raise ConfigError(
            f"{metrics} counts {steps} steps but the training record {source} {record['steps']}; "
            "give the record and the checkpoint of the same run (--record, --checkpoint)"
        )


def file_facts(folder: Path) -> dict[str, Any]:
    """The SHA-256 and size of every packaged file (the manifest aside) and the weights' parameter count."""
    files = {
        f.name: {"sha256": hashlib.sha256(f.read_bytes()).hexdigest(), "bytes": f.stat().st_size}
        for f in sorted(folder.iterdir())
        if f.is_file() and f.name != "manifest.json"
    }
    return {"files": files, "parameters": parameter_count(folder / "model.safetensors")}


def parameter_count(weights: Path) -> int:
    """The number of parameters in a ``.safetensors`` file, read from its header (no tensor is loaded)."""
    with weights.open("rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    count = 0
    for name, entry in header.items():
        if name != "__metadata__":
            n = 1
            for dim in entry["shape"]:
                n *= dim
            count += n
    return count


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    record_path = args.record or args.run / "record.json"
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
        checkpoint = args.checkpoint or args.run / "sft" / "checkpoint"
        facts = build_facts(record, str(record_path))  # refused before anything is copied
        check_checkpoint(checkpoint, record, str(record_path))
    except (OSError, ValueError, ConfigError) as exc:
        print(f"error: {describe_error(exc)[0]}", file=sys.stderr)
        return 2
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    for name in POLICY_FILES:
        if (checkpoint / name).is_file():
            shutil.copy2(checkpoint / name, args.out / name)
    manifest = {
        "name": "policy:trainee",
        "about": "the tiny free-moves small policy, supervised on the exact solver's optimal plans of "
        "one-, two- and three-agent boards until more training no longer moved its held-out rates",
        **facts,
        "held_out_note": "greedy answers on benchmarks/bench_warm_start.py's held-out sets (288 boards per "
        "agent count, sizes 3-8, disjoint from the training boards and the benchmark)",
        "checks": answer_checks(args.out),
        **file_facts(args.out),
    }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    size = sum(f.stat().st_size for f in args.out.iterdir())
    print(f"packaged {checkpoint} into {args.out} ({size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
