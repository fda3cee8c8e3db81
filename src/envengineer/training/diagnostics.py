"""What a GRPO round samples and how the policy moves while it trains, logged as it happens.

Two pieces, both wired in by :func:`envengineer.training.grpo.train_round`:

- :class:`SampledStats` wraps the round's reward function. Every generation batch it records, per map
  size, the sampled reward, the sampled valid and optimal rates and the share of GRPO groups whose
  completions all scored the same (a zero-variance group gives no gradient). The figures go to TRL's
  logs (``sampled/size_N/...`` in ``log_history`` and every ``report_to`` tracker) and, summed over the
  round, to ``metrics.json["sampled"]``: the learnability signal the engineers read.
- :class:`Probe` is a ``TrainerCallback`` that, every ``every`` optimizer steps (and before the first),
  answers a small fixed set of held-out boards greedily with the model being trained and logs
  ``probe/valid`` and ``probe/optimal``; with ``kl`` it also estimates the KL divergence of the policy from
  the round's starting weights on its own samples of the same prompts (``probe/kl``), so erosion is seen
  when it happens, not a round later. TRL itself logs ``entropy``, ``completions/mean_length``,
  ``completions/clipped_ratio`` and ``frac_reward_zero_std``.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from typing import Any

from envengineer.mapf.instance import Instance

log = logging.getLogger(__name__)


class SampledStats:
    """A TRL reward function that scores like ``reward`` and records what the round sampled.

    Args:
        reward: A :class:`envengineer.mapf.rewards.RewardFunction` (it must offer ``judge``).
        group_size: Completions per prompt (``num_generations``); consecutive completions form a group.
        skip: The indexes of the batch's completions the policy did not sample (solver guidance's plans):
            scored, but left out of what the round records as sampled.
    """

    def __init__(
        self, reward: Any, group_size: int, skip: Callable[[], Collection[int]] | None = None
    ) -> None:
        self.reward = reward
        self.group_size = max(int(group_size), 1)
        self.skip = skip or (lambda: ())
        self.__name__ = reward.__name__  # TRL logs rewards/<name>/mean
        # per size: completions, valid, optimal, reward sum, groups, zero-variance groups
        self.totals: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))

    def __call__(self, completions: Sequence[Any], instance: Any = None, **kwargs: Any) -> list[float]:
        judged = self.reward.judge(completions, instance)
        rewards = [self.reward.score(v, inst.num_agents) for inst, v in judged]
        batch = self._count(judged, rewards, set(self.skip()))
        log_metric: Callable[[str, float], None] | None = kwargs.get("log_metric")
        if log_metric is not None:
            for size, c in sorted(batch.items()):
                n = c["completions"]
                log_metric(f"sampled/size_{size}/reward", c["reward"] / n)
                log_metric(f"sampled/size_{size}/valid", c["valid"] / n)
                if c["groups"]:
                    log_metric(f"sampled/size_{size}/zero_std", c["zero_std_groups"] / c["groups"])
        return rewards

    def _count(
        self, judged: list[tuple[Instance, Any]], rewards: list[float], skip: set[int]
    ) -> dict[int, dict[str, float]]:
        batch: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for i, ((inst, verdict), r) in enumerate(zip(judged, rewards, strict=True)):
            if i in skip:
                continue
            c = batch[inst.size]
            c["completions"] += 1
            c["valid"] += verdict.valid
            c["optimal"] += verdict.optimal
            c["reward"] += r
        g = self.group_size
        if len(rewards) % g == 0:  # whole groups (always, in a single process)
            for lo in range(0, len(rewards), g):
                c = batch[judged[lo][0].size]
                c["groups"] += 1
                sampled = {rewards[i] for i in range(lo, lo + g) if i not in skip}
                c["zero_std_groups"] += len(sampled) == 1
        for size, c in batch.items():
            for key, value in c.items():
                self.totals[size][key] += value
        return batch

    def summary(self) -> dict[str, dict[str, float | int]]:
        """Per map size over the whole round: completions, sampled valid/optimal rates, mean reward,
        groups and the share of them with zero reward variance."""
        out: dict[str, dict[str, float | int]] = {}
        for size, c in sorted(self.totals.items()):
            n = c["completions"] or 1
            out[str(size)] = {
                "completions": int(c["completions"]),
                "valid": round(c["valid"] / n, 4),
                "optimal": round(c["optimal"] / n, 4),
                "reward": round(c["reward"] / n, 4),
                "groups": int(c["groups"]),
                "zero_std": round(c["zero_std_groups"] / c["groups"], 4) if c["groups"] else None,
            }
        return out


def probe_callback(
    instances: Sequence[Instance],
    *,
    every: int,
    style: str,
    max_new_tokens: int,
    kl: bool,
    temperature: float,
    seed: int,
) -> Any:
    """A ``TrainerCallback`` that probes the policy on ``instances`` every ``every`` steps (see the module
    docstring). Attach the trainer with ``callback.attach(trainer)`` before training."""
    from transformers import TrainerCallback

    class Probe(TrainerCallback):
        def __init__(self) -> None:
            self.trainer: Any = None
            self.rows: list[dict[str, float | int]] = []
            self._start: Any = None

        def attach(self, trainer: Any) -> None:
            self.trainer = trainer

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            if kl and model is not None:  # the starting weights (not a model copy: TRL patches forward)
                self._start = {k: v.detach().clone() for k, v in model.named_parameters()}
            self._probe(0, model, log_now=False)

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            if state.global_step % every == 0 or state.global_step == state.max_steps:
                self._probe(state.global_step, model, log_now=True)

        def _probe(self, step: int, model: Any, *, log_now: bool) -> None:
            if model is None or self.trainer is None:
                return
            row = probe(
                model,
                self.trainer.processing_class,
                instances,
                style=style,
                max_new_tokens=max_new_tokens,
                start_weights=self._start,
                temperature=temperature,
                seed=seed + step,
            )
            row = {"step": step, **row}
            self.rows.append(row)
            log.info("probe at step %d: %s", step, row)
            metrics = getattr(self.trainer, "_metrics", None)
            if log_now and metrics is not None:  # logged with the next regular log line
                for key, value in row.items():
                    if key != "step":
                        metrics["train"][f"probe/{key}"].append(value)

    return Probe()


def probe(
    model: Any,
    tokenizer: Any,
    instances: Sequence[Instance],
    *,
    style: str,
    max_new_tokens: int,
    start_weights: dict[str, Any] | None = None,
    temperature: float = 1.0,
    seed: int = 0,
) -> dict[str, float]:
    """Greedy valid/optimal rates of ``model`` on ``instances`` and, with ``start_weights`` (a state dict
    of the same model), the KL of the policy from the policy those weights give.

    The KL estimate is the k3 estimator (Schulman) on one sample per prompt at ``temperature``:
    mean over completion tokens of ``r - 1 - log r`` with ``r = p_start / p_model``; it is ``>= 0`` and
    exactly 0 when the weights have not moved.
    """
    import torch

    from envengineer.mapf.prompt import build_messages
    from envengineer.mapf.validator import validate
    from envengineer.models import SamplingParams
    from envengineer.models.hf import HFBackend

    was_training = model.training
    model.eval()
    try:
        backend = HFBackend.from_model(model, tokenizer, name="probe")
        conversations = [build_messages(i, style=style) for i in instances]
        greedy = backend.generate(
            conversations, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
        )
        verdicts = [validate(i, c.text) for i, c in zip(instances, greedy, strict=True)]
        row = {
            "valid": round(sum(v.valid for v in verdicts) / len(verdicts), 4),
            "optimal": round(sum(v.optimal for v in verdicts) / len(verdicts), 4),
        }
        if start_weights is not None:
            with torch.random.fork_rng():
                torch.manual_seed(seed)
                row["kl"] = round(
                    _kl_k3(backend, start_weights, conversations, temperature, max_new_tokens), 6
                )
        return row
    finally:
        model.train(was_training)


def _kl_k3(
    backend: Any, start: dict[str, Any], conversations: list[Any], temperature: float, limit: int
) -> float:
    import torch
    from torch.func import functional_call

    tok = backend.tokenizer
    prompts = [backend.render(c) for c in conversations]
    enc = tok(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    model = backend.model
    with torch.no_grad():
        out = model.generate(
            **enc.to(model.device),
            do_sample=True,
            temperature=max(temperature, 1e-3),
            max_new_tokens=limit,
            pad_token_id=backend._pad_id,
        )
        completion = out[:, enc["input_ids"].shape[1] :]
        mask = torch.ones_like(completion, dtype=torch.bool)
        for row in range(completion.shape[0]):  # tokens after the first end-of-sequence are padding
            ends = [i for i, t in enumerate(completion[row].tolist()) if t in backend._eos_ids]
            if ends:
                mask[row, ends[0] + 1 :] = False
        attention = torch.cat([enc["attention_mask"].to(model.device), mask.long()], dim=1)
        logp = functools.partial(_token_logps, ids=out, attention=attention, n=completion.shape[1])
        lp_model = logp(model, temperature=temperature)
        lp_start = logp(lambda **inputs: functional_call(model, start, (), inputs), temperature=temperature)
        log_ratio = (lp_start - lp_model)[mask]
        if log_ratio.numel() == 0:
            return 0.0
        return float((torch.exp(log_ratio) - 1 - log_ratio).mean())


def _token_logps(model: Any, *, ids: Any, attention: Any, n: int, temperature: float) -> Any:
    import torch

    logits = model(input_ids=ids, attention_mask=attention).logits[:, -n - 1 : -1, :]
    logits = logits / max(temperature, 1e-3)
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, -n:].unsqueeze(-1)).squeeze(-1)
