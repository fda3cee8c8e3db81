"""Solver guidance: a GRPO group that found no optimal plan gets the solver's plan as one of its members.

Under the sparse reward a group whose samples all fail has zero advantage and teaches nothing, and on the
boards a policy cannot yet solve every group fails. With guidance on, the last completion of such a group is
replaced by the solver's plan, written in the scratchpad the policy was warm-started on, before the group
is scored: the plan scores 1, its advantage is positive, the failures' negative, and the same policy-
gradient step that sharpens the solved boards imitates the solver on the unsolved ones (off-policy
guidance in the group, as LUFFY: Yan et al. 2025, "Learning to Reason under Off-Policy Guidance").
``when: always`` guides every group. The plan's tokens are the chat template's rendering of the
assistant turn up to its end-of-turn token, the tokens SFT trains on.

The step is TRL's, so the plan's weight is its advantage; with one optimizer step per generation batch
the importance ratio is 1 and the plan's term is an advantage-weighted SFT term.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from envengineer.errors import ConfigError
from envengineer.mapf.rewards import instance_of
from envengineer.mapf.validator import validate

log = logging.getLogger(__name__)


class SolverGuide:
    """Replaces the last completion of each unsolved group by the solver's plan (module docstring).

    Args:
        tokenizer: The policy's tokenizer (it renders the plan as the assistant turn).
        target: The :data:`SFTTarget` the plan is written in.
        when: ``"failed"``: groups with no optimal completion; ``"always"``: every group.
        max_tokens: Plans longer than this are not put in (a group keeps its own samples).
        eos_token_ids: The tokens a completion ends with.
        chat_template_kwargs: Passed to the chat template, as the trainer passes them (e.g. thinking off).
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        target: str,
        when: str = "failed",
        max_tokens: int,
        eos_token_ids: Sequence[int],
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.target = target
        self.when = when
        self.max_tokens = max_tokens
        self.eos = set(eos_token_ids)
        self.template_kwargs = dict(chat_template_kwargs or {})
        self._plans: dict[str, list[int]] = {}
        self.last_replaced: frozenset[int] = frozenset()  # of the latest batch: what the policy did not write
        self.guided = 0
        self.groups = 0
        self.too_long = 0  # groups that needed the plan but whose plan is longer than max_tokens
        self.last_too_long = 0  # of the latest batch

    def plan_ids(self, row: dict[str, Any]) -> list[int]:
        """The solver's plan for the row's board as completion tokens, ending with the end of the turn."""
        key = row["instance"]
        if key not in self._plans:
            from envengineer.training.dataset import target_response

            instance = instance_of(key)
            turn = [{"role": "assistant", "content": target_response(instance, self.target)}]
            render = self.tokenizer.apply_chat_template
            prompt = render(row["prompt"], tokenize=False, add_generation_prompt=True, **self.template_kwargs)
            full = render(row["prompt"] + turn, tokenize=False, **self.template_kwargs)
            if not full.startswith(prompt):
                raise ConfigError(
                    "solver guidance needs a chat template that renders a prompt the same with and without "
                    "the assistant's turn after it; this model's template does not: turn guidance off"
                )
            ids = self.tokenizer(full[len(prompt) :], add_special_tokens=False)["input_ids"]
            end = next((i for i, t in enumerate(ids) if t in self.eos), len(ids) - 1)
            self._plans[key] = list(ids[: end + 1])
        return self._plans[key]

    def apply(self, rows: Sequence[dict[str, Any]], completion_ids: list[list[int]], group: int) -> list[int]:
        """Put the plan in place of the last member of each group that needs it; the indexes replaced."""
        replaced = []
        too_long = 0
        for start in range(0, len(rows), group):
            self.groups += 1
            if self.when == "failed" and self._solved(rows[start], completion_ids[start : start + group]):
                continue
            plan = self.plan_ids(rows[start])
            if len(plan) > self.max_tokens:
                if not self.too_long:
                    log.warning(
                        "solver guidance: a plan of %d tokens is longer than the completion budget "
                        "(%d) and is left out; raise max_completion_length to guide such boards "
                        "(counted in guidance/groups_too_long)",
                        len(plan),
                        self.max_tokens,
                    )
                self.too_long += 1
                too_long += 1
                continue
            completion_ids[start + group - 1] = list(plan)
            replaced.append(start + group - 1)
        self.guided += len(replaced)
        self.last_replaced = frozenset(replaced)
        self.last_too_long = too_long
        return replaced

    def _solved(self, row: dict[str, Any], completions: Sequence[list[int]]) -> bool:
        instance = instance_of(row["instance"])
        texts = self.tokenizer.batch_decode(completions, skip_special_tokens=True)
        return any(validate(instance, text).optimal for text in texts)
