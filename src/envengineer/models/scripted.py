"""The testbed's reference policies behind the chat interface, so every path can run without a model.

The backend is built with the instances it may be asked about. It recognises an instance by the last
user message of a conversation, which must be exactly the task prompt the testbed writes for it
(:func:`envengineer.mapf.prompt.build_prompt`), and answers with the policy's plan. A prompt it does not
know gets a :class:`~envengineer.models.base.Completion` with ``error`` set.

Each answer's random stream is derived from ``(params.seed, instance id)`` exactly as ``envengineer play``
derives it, so the answer to an instance does not depend on its batch, and ``eval --backend scripted``
writes the same responses as ``play`` with the same seed.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence

import numpy as np

from envengineer.mapf.instance import Instance
from envengineer.models.base import Completion, Conversation, ModelError, SamplingParams, last_user_message

log = logging.getLogger(__name__)


class ScriptedBackend:
    """Answers MAPF prompts with a scripted policy (``optimal``, ``greedy`` or ``random``).

    Args:
        policy: A key of :data:`envengineer.mapf.policies.POLICIES`.
        instances: The instances whose prompts this backend can answer.

    Raises:
        ModelError: Unknown policy.

    Example:
        >>> from envengineer.mapf.prompt import build_messages
        >>> inst = Instance("x", ("...", "...", "..."), ((1, 0), (1, 1)), ((1, 1), (1, 2)), 2, 1, 2)
        >>> backend = ScriptedBackend("optimal", instances=[inst])
        >>> backend.generate([build_messages(inst)], SamplingParams())[0].text.splitlines()[1]
        'A0: RIGHT'
    """

    def __init__(self, policy: str = "optimal", *, instances: Iterable[Instance] = ()) -> None:
        from envengineer.mapf.policies import POLICIES

        if policy not in POLICIES:
            raise ModelError(
                f"unknown scripted policy {policy!r}; with --backend scripted, --model is one of "
                f"{sorted(POLICIES)}"
            )
        self.policy = policy
        self.name = f"scripted:{policy}"
        self._by_prompt: dict[str, Instance] = {}
        self.add_instances(instances)

    def add_instances(self, instances: Iterable[Instance]) -> None:
        """Make the backend able to answer these instances' prompts too."""
        from envengineer.mapf.prompt import build_prompt

        for inst in instances:
            self._by_prompt.setdefault(build_prompt(inst), inst)

    def generate(self, conversations: Sequence[Conversation], params: SamplingParams) -> list[Completion]:
        """One scripted answer per conversation; unknown prompts get a Completion with ``error``."""
        from envengineer.mapf.policies import respond

        out: list[Completion] = []
        for conv in conversations:
            prompt = last_user_message(conv)
            inst = self._by_prompt.get(prompt) if prompt is not None else None
            if inst is None:
                out.append(Completion("", error="scripted backend: the prompt matches none of its instances"))
                continue
            rng = np.random.default_rng(np.random.SeedSequence((params.seed, *_id_entropy(inst.id))))
            try:
                text = respond(self.policy, inst, rng)
            except Exception as exc:  # e.g. the solver gives up on a huge board: a record, not a crash
                log.warning("scripted policy %s failed on %s: %s", self.policy, inst.id, exc)
                out.append(Completion("", error=f"{type(exc).__name__}: {exc}"))
                continue
            out.append(Completion(text, completion_tokens=None))
        return out

    def __repr__(self) -> str:
        return f"ScriptedBackend(policy={self.policy!r}, instances={len(self._by_prompt)})"


def _id_entropy(instance_id: str) -> tuple[int, int]:
    """Two stable 32-bit integers from an instance id: the same stream ``envengineer play`` uses."""
    digest = hashlib.sha256(instance_id.encode()).digest()
    return int.from_bytes(digest[0:4], "big"), int.from_bytes(digest[4:8], "big")
