"""What the benchmark scripts share: the held-out sets, greedy answers, scoring, and the warm-start's boards.

A library module (no ``__main__``): the scripts beside it import it by name (``from common import answer``,
with ``benchmarks/`` on ``sys.path``, as running ``python benchmarks/bench_x.py`` puts it), and it imports
none of them. The paired gains and their bootstrap intervals are the package's
(:mod:`envengineer.loop.intervals`); :func:`ci_text` prints them.

* :func:`held_out`, :func:`held_out_sets`: the fixed, benchmark-shaped held-out boards (seeds disjoint from
  the benchmark), the same for every script;
* :func:`answer` (:func:`answer_tokens`): a checkpoint's greedy answers in the compact prompt style;
* :func:`board_flags` (per-board valid/optimal flags and rates) and :func:`size_rates` (rates and failure
  categories per size and over the headline sizes);
* :func:`training_boards` (:func:`wait_ratio`, :func:`uniform_holes`): supervised training boards in equal
  agent shares, apart from the held-out sets by board hash;
* :func:`diagnostic`: the two causes of a two-agent failure apart (its own first line, coordination).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from envengineer.mapf.benchmark import build_validation_set
from envengineer.mapf.config import RoundConfig
from envengineer.mapf.generator import generate_cell, generate_round
from envengineer.mapf.instance import Instance
from envengineer.mapf.prompt import build_messages
from envengineer.mapf.validator import validate
from envengineer.training.dataset import target_response


# -- held-out sets ----------------------------------------------------------------------------------------
def held_out(per_cell: int, agents: int = 2, max_size: int = 8) -> list[Instance]:
    """The fixed held-out set: ``agents`` agents, sizes 3..``max_size``, ``per_cell`` boards per size and
    wait subset (25/50/75 % need a wait).

    One agent never needs a wait: ``3 * per_cell`` boards per size, none waiting, from one seed. Every
    script draws its held-out boards here, so that they all score the same boards.
    """
    if agents == 1:
        return [
            inst
            for n in range(3, max_size + 1)
            for inst in generate_cell(
                num_agents=1,
                size=n,
                count=3 * per_cell,
                wait_count=0,
                seed=20261205,
                split="validation",
                id_prefix=f"1agent_{n}x{n}",
            )
        ]
    return build_validation_set(per_cell, agents=(agents,), min_size=3, max_size=max_size, workers=1)


def held_out_sets(agents: list[int], per_cell: int, max_size: int) -> dict[int, list[Instance]]:
    """The held-out sets by agent count, sizes 3..max_size, disjoint from the benchmark (:func:`held_out`)."""
    return {k: held_out(per_cell, agents=k, max_size=max_size) for k in agents}


# -- answers ----------------------------------------------------------------------------------------------
def answer_tokens() -> int:
    """The scored answers' budget unless ``--max-completion-length``: ``sft-small``'s, the longest target a
    warm-start learns to write (an answer ends at its end token, so the budget only lets a long one end)."""
    from envengineer.training.presets import load_preset

    return load_preset("sft-small", "sft").max_completion_length


def answer(model: str, instances: list[Instance], max_new_tokens: int | None = None) -> list[str]:
    """Greedy answers of a checkpoint, in the compact prompt style the small policy records."""
    from envengineer.models import SamplingParams
    from envengineer.models.hf import HFBackend

    backend = HFBackend(model, device="cpu")
    params = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens or answer_tokens())
    texts: list[str] = []
    for lo in range(0, len(instances), 64):
        conversations = [build_messages(i, style="compact") for i in instances[lo : lo + 64]]
        texts += [c.text for c in backend.generate(conversations, params)]
    return texts


# -- scoring ----------------------------------------------------------------------------------------------
def board_flags(instances: list[Instance], texts: list[str]) -> dict[str, Any]:
    """Per-board valid/optimal flags (arrays of 0/1) and the rates: overall, and valid per size."""
    verdicts = [validate(i, t) for i, t in zip(instances, texts, strict=True)]
    valid = np.array([v.valid for v in verdicts], dtype=float)
    optimal = np.array([v.optimal for v in verdicts], dtype=float)
    sizes = np.array([i.size for i in instances])
    per_size = {int(n): round(100 * float(valid[sizes == n].mean()), 1) for n in sorted(set(sizes.tolist()))}
    return {
        "valid": valid,
        "optimal": optimal,
        "valid_pct": round(100 * float(valid.mean()), 2),
        "optimal_pct": round(100 * float(optimal.mean()), 2),
        "valid_by_size": per_size,
    }


def size_rates(instances: list[Instance], texts: list[str]) -> dict[str, Any]:
    """Valid / optimal rates and failure categories, per size and over the headline sizes 3-8."""
    by_size: dict[int, dict[str, Any]] = {}
    for n in sorted({i.size for i in instances}):
        verdicts = [validate(i, t) for i, t in zip(instances, texts, strict=True) if i.size == n]
        by_size[n] = {
            "boards": len(verdicts),
            "valid": round(100 * sum(v.valid for v in verdicts) / len(verdicts), 1),
            "optimal": round(100 * sum(v.optimal for v in verdicts) / len(verdicts), 1),
            "failures": dict(Counter(v.failure for v in verdicts if not v.valid).most_common()),
        }

    def pooled(sizes: range) -> dict[str, float]:
        rows = [by_size[n] for n in sizes if n in by_size]
        boards = sum(r["boards"] for r in rows)
        return {
            key: round(sum(r[key] * r["boards"] for r in rows) / boards, 1) if boards else float("nan")
            for key in ("valid", "optimal")
        }

    return {
        "sizes_3_8": pooled(range(3, 9)),
        "sizes_3_6": pooled(range(3, 7)),
        "sizes_7_8": pooled(range(7, 9)),
        "by_size": by_size,
    }


def ci_text(b: dict[str, Any]) -> str:
    """A bootstrap mean or paired gain as ``+m [low, high]`` (no interval from a single seed)."""
    if b["low"] is None:
        return f"{b['mean']:+.1f} [one seed]"
    return f"{b['mean']:+.1f} [{b['low']:+.1f}, {b['high']:+.1f}]"


def public(s: dict[str, Any]) -> dict[str, Any]:
    """A :func:`board_flags` score without its per-board arrays (for JSON and printing)."""
    return {k: v for k, v in s.items() if k not in ("valid", "optimal")}


# -- training boards --------------------------------------------------------------------------------------
def wait_ratio(agents: int) -> float:
    """The training boards' wait ratio for ``agents`` agents: one agent never needs to wait.

    >>> wait_ratio(1), wait_ratio(3)
    (0.0, 0.5)
    """
    return 0.5 if agents > 1 else 0.0


def training_boards(
    agents: list[int],
    sizes: list[int],
    samples: int,
    seed: int,
    exclude: frozenset[str],
    holes: float | None = 0.25,
) -> list[Instance]:
    """``samples`` boards, agent counts in equal shares; ``holes=None``: each board its own hole ratio."""
    train: list[Instance] = []
    for k, a in enumerate(agents):
        agent_seed = np.random.SeedSequence((seed, k)).generate_state(1)[0].item()
        hole = 0.25 if holes is None else holes  # with None, uniform_holes draws each board's instead
        config = RoundConfig.model_validate(
            {
                "sizes": {
                    n: {"data_ratio": 1.0, "hole_ratio": hole, "wait_ratio": wait_ratio(a)} for n in sizes
                },
                "num_agents": a,
                "num_samples": samples // len(agents),
            }
        )
        if holes is None:
            train += uniform_holes(config, agent_seed, exclude)
        else:
            train += generate_round(config, agent_seed, split="train", exclude=exclude)
    np.random.default_rng(seed).shuffle(train)  # mix agent counts within every batch
    return train


def uniform_holes(config: RoundConfig, seed: int, exclude: frozenset[str]) -> list[Instance]:
    """The boards :func:`generate_round` draws for ``config`` (its counts and waits per size), but each
    with its own hole ratio in [0, 0.5], the benchmark's rule (:func:`generate_cell` with no ratio)."""
    boards: list[Instance] = []
    for size, (count, wait_count) in config.allocation().items():
        boards += generate_cell(
            num_agents=config.num_agents,
            size=size,
            count=count,
            wait_count=wait_count,
            seed=seed,
            split="train",
            exclude=exclude,
            unique=False,
        )
    return boards


# -- the two-agent diagnostic -----------------------------------------------------------------------------
def diagnostic(checkpoint: str, instances: list[Instance], texts: list[str], budget: int) -> dict[str, Any]:
    """Free answers split by whether their first scratchpad line is the solver's, and the answers with the
    solver's first line written in (the policy continues from there, greedily)."""
    from envengineer.models.small_policy import policy_format_of

    fmt = policy_format_of(checkpoint)
    target = fmt.scratchpad if fmt is not None else "solver"
    solver_first = [_first_line(target_response(i, target)) for i in instances]
    own_first = [_first_line(t) for t in texts]
    same = [a == b for a, b in zip(own_first, solver_first, strict=True)]
    given = _continue(checkpoint, instances, solver_first, budget)

    def part(mask: list[bool], answers: list[str]) -> dict[str, Any]:
        chosen = [(i, t) for i, t, m in zip(instances, answers, mask, strict=True) if m]
        verdicts = [validate(i, t) for i, t in chosen]
        return {
            "boards": len(chosen),
            "valid": round(100 * float(np.mean([v.valid for v in verdicts])), 1) if chosen else None,
            "optimal": round(100 * float(np.mean([v.optimal for v in verdicts])), 1) if chosen else None,
            "failures": dict(Counter(v.failure for v in verdicts if not v.valid).most_common()),
        }

    everyone = [True] * len(instances)
    return {
        "free": part(everyone, texts),
        "first_line_given": part(everyone, given),
        "own_first_line_is_solver_s": part(same, texts),
        "own_first_line_differs": part([not s for s in same], texts),
    }


def _first_line(text: str) -> str:
    """The text up to and including the end of the first scratchpad line."""
    at = text.find("\nA1")
    return text[: at + 1] if at >= 0 else text


def _continue(checkpoint: str, instances: list[Instance], prefixes: list[str], budget: int) -> list[str]:
    """Greedy answers that begin with ``prefixes`` (written in after the prompt)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from envengineer.models.hf import HFBackend

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    backend = HFBackend.from_model(model, tokenizer)
    out: list[str] = []
    for lo in range(0, len(instances), 64):
        chunk = list(zip(instances[lo : lo + 64], prefixes[lo : lo + 64], strict=True))
        texts = [backend.render(build_messages(i, style="compact")) + p for i, p in chunk]
        enc = tokenizer(
            texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False
        )
        with torch.inference_mode():
            gen = model.generate(
                **enc, max_new_tokens=budget, do_sample=False, pad_token_id=tokenizer.pad_token_id
            )
        rows = gen[:, enc["input_ids"].shape[1] :]
        out += [
            p + tokenizer.decode(r, skip_special_tokens=True) for (_, p), r in zip(chunk, rows, strict=True)
        ]
    return out
