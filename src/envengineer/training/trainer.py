"""TRL's ``GRPOTrainer`` with DAPO's dynamic sampling and, apart or together, solver guidance.

Dynamic sampling: groups without reward variance are replaced.

A GRPO group whose completions all score the same has zero advantage and moves nothing, yet it takes a
slot of the batch (and, under the token-normalised losses, dilutes the others). With dynamic sampling on,
every generation batch keeps its informative groups and refills the others from fresh prompts of the
round's dataset, generating up to ``max_refills`` more batches; when the refills run out, the batch is
topped up with the original uninformative groups so its size never changes (Yu et al. 2025, DAPO, §3.2).

Single process only: refilling draws a different number of batches in each process, which the
collective operations of a multi-process run cannot follow.

Solver guidance (:mod:`envengineer.training.guidance`): an unsolved group gets the solver's plan as its
last member before it is scored. A refill batch is guided too: guidance sits under dynamic sampling.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envengineer.training.guidance import SolverGuide

_LEFT_PADDED = ("prompt_ids", "prompt_mask")


def make_trainer_class(
    *, dynamic: bool, max_refills: int = 4, seed: int = 0, guide: SolverGuide | None = None
) -> type:
    """``trl.GRPOTrainer`` itself, or its subclass with solver guidance, dynamic sampling or both (see
    the module docstring)."""
    from trl import GRPOTrainer

    base = GRPOTrainer if guide is None else _guided(GRPOTrainer, guide)
    if not dynamic:
        return base

    class DynamicSamplingGRPOTrainer(base):
        _refill_rng = np.random.default_rng(seed)

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            out = super()._generate_and_score_completions(inputs)
            if not self.model.training:
                return out
            g = self.num_generations
            groups = len(inputs) // g
            informative = _informative(out["advantages"], g)
            kept = [(out, i) for i in informative]
            refills = 0
            while len(kept) < groups and refills < max_refills:
                extra = super()._generate_and_score_completions(self._refill_rows(groups, g))
                kept += [(extra, i) for i in _informative(extra["advantages"], g)]
                refills += 1
            filled = min(len(kept), groups)
            rest = [(out, i) for i in range(groups) if i not in set(informative)]
            chosen = (kept[:groups] + rest)[:groups]
            metrics = self._metrics["train"]
            metrics["dynamic/refills"].append(float(refills))
            metrics["dynamic/informative_share"].append(filled / groups)
            return _gather_groups(chosen, g, pad_id=self._pad_token_id())

        def _refill_rows(self, groups: int, g: int) -> list[dict[str, Any]]:
            data = self.train_dataset
            picks = self._refill_rng.choice(len(data), size=groups, replace=len(data) < groups)
            return [dict(data[int(p)]) for p in picks for _ in range(g)]

        def _pad_token_id(self) -> int:
            tok = getattr(self.processing_class, "tokenizer", self.processing_class)
            pad = tok.pad_token_id
            return int(pad if pad is not None else tok.eos_token_id or 0)

    return DynamicSamplingGRPOTrainer


def _guided(base: type, guide: SolverGuide) -> type:
    """``base`` whose training generations pass through ``guide`` before they are decoded and scored."""

    class GuidedGRPOTrainer(base):
        solver_guide = guide
        _guide_rows: list[dict[str, Any]] | None = None

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            self._guide_rows = inputs if self.model.training else None
            try:
                return super()._generate_and_score_completions(inputs)
            finally:
                self._guide_rows = None

        def _generate_single_turn(self, prompt_ids: Any, *args: Any, **kwargs: Any) -> Any:
            completion_ids, logprobs = super()._generate_single_turn(prompt_ids, *args, **kwargs)
            rows = self._guide_rows
            if rows is None:
                return completion_ids, logprobs
            if len(rows) != len(completion_ids):
                raise RuntimeError("solver guidance needs one completion per prompt row")
            replaced = guide.apply(rows, completion_ids, self.num_generations)
            for i in replaced if logprobs is not None else ():
                # no sampler log-prob for the plan: TRL leaves NaN positions out of its sampling correction
                logprobs[i] = [float("nan")] * len(completion_ids[i])
            self._metrics["train"]["guidance/groups_guided"].append(
                len(replaced) * self.num_generations / len(rows)
            )
            self._metrics["train"]["guidance/groups_too_long"].append(
                guide.last_too_long * self.num_generations / len(rows)
            )
            return completion_ids, logprobs

    return GuidedGRPOTrainer


def _informative(advantages: Any, g: int) -> list[int]:
    """Indexes of the groups of ``g`` consecutive completions with at least one non-zero advantage."""
    adv = advantages.reshape(-1, g)  # 1e-3: far below any real advantage, above float round-off of a tie
    return [int(i) for i in (adv.abs() > 1e-3).any(dim=1).nonzero().flatten().tolist()]


def _gather_groups(chosen: list[tuple[dict[str, Any], int]], g: int, *, pad_id: int) -> dict[str, Any]:
    """One batch made of the chosen groups (``(batch, group index)`` pairs), padded to common lengths."""
    import torch

    first = chosen[0][0]
    merged: dict[str, Any] = {}
    for key, value in first.items():
        if key == "num_items_in_batch" or not isinstance(value, torch.Tensor) or value.ndim == 0:
            continue
        parts = [batch[key][i * g : (i + 1) * g] for batch, i in chosen]
        merged[key] = _pad_cat(parts, left=key in _LEFT_PADDED, value=pad_id if key.endswith("_ids") else 0)
    mask = merged["completion_mask"]
    merged["num_items_in_batch"] = mask.sum()
    for key, value in first.items():
        merged.setdefault(key, value)
    return merged


def _pad_cat(parts: list[Any], *, left: bool, value: float) -> Any:
    import torch
    import torch.nn.functional as F

    if parts[0].ndim == 1:
        return torch.cat(parts, dim=0)
    width = max(p.shape[1] for p in parts)
    padded = []
    for p in parts:
        extra = width - p.shape[1]
        pad = (extra, 0) if left else (0, extra)
        padded.append(F.pad(p, (0, 0) * (p.ndim - 2) + pad, value=value) if extra else p)
    return torch.cat(padded, dim=0)
