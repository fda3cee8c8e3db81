"""Which context modules an LLM engineer reads, as an experiment file writes it (SPEC §5).

A variant of the paper's cumulative ablation, refined switch by switch; :mod:`envengineer.engineer.context`
turns the switches into the :class:`~envengineer.engineer.context.ContextSpec` the prompt renders.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

TrainingDetails = Literal["none", "bookkeeping", "full"]

#: The paper's context ablation (SPEC §5), each variant adding one module to the previous one.
#: Keys: F failure breakdown, G guidelines, H history, H_default (history includes the round-0 default),
#: S previous self-summary, T training details; L (not in the paper: off in every variant) the policy's
#: sampled success and zero-variance share per size in the round's training. E (not in the paper either, and
#: absent from every variant, so their switches stay as they were) the effects: per pair of consecutive
#: validated rounds, the knob changes and the held-out valid-rate change per size.
CONTEXT_VARIANTS: dict[str, dict[str, Any]] = {
    "V1": {"F": True, "G": False, "H": False, "H_default": False, "S": False, "T": "none", "L": False},
    "V2": {"F": True, "G": True, "H": False, "H_default": False, "S": False, "T": "none", "L": False},
    "V3": {"F": True, "G": True, "H": True, "H_default": True, "S": False, "T": "none", "L": False},
    "V4": {"F": True, "G": True, "H": True, "H_default": False, "S": False, "T": "none", "L": False},
    "V5": {"F": True, "G": True, "H": True, "H_default": False, "S": True, "T": "none", "L": False},
    "V6": {"F": True, "G": True, "H": True, "H_default": False, "S": True, "T": "bookkeeping", "L": False},
}


class ContextSettings(BaseModel):
    """Which context modules the engineer reads (SPEC §5); a variant, optionally refined switch by switch."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    variant: Literal["V1", "V2", "V3", "V4", "V5", "V6"] = Field(
        default="V6",
        description="Starting point: the paper's cumulative ablation V1 (F) ... V6 (the method).",
    )
    F: bool | None = Field(default=None, description="Failure breakdown per map size (None: the variant's).")
    G: bool | None = Field(default=None, description="Curriculum-design guidelines (None: the variant's).")
    H: bool | None = Field(
        default=None, description="History of earlier configurations (None: the variant's)."
    )
    H_default: bool | None = Field(
        default=None, description="Whether the history includes the round-0 default (None: the variant's)."
    )
    S: bool | None = Field(
        default=None, description="The engineer's previous rationale (None: the variant's)."
    )
    T: TrainingDetails | None = Field(
        default=None, description="Training details: none, bookkeeping or full (None: the variant's)."
    )
    L: bool | None = Field(
        default=None,
        description="Learnability: the policy's sampled success and zero-variance share per size in the "
        "round's training (not a paper module; None: the variant's, which is off).",
    )
    E: bool | None = Field(
        default=None,
        description="Effects: per pair of consecutive validated rounds, the knob changes and the held-out "
        "valid-rate change per size (not a paper module; None or false: off).",
    )

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, v: Any) -> Any:
        return {"variant": v} if isinstance(v, str) else v

    def switches(self) -> dict[str, Any]:
        """The resolved switches: the variant's, overridden by every switch given explicitly.

        >>> ContextSettings.model_validate({"variant": "V6", "T": "full"}).switches()["T"]
        'full'
        """
        out = dict(CONTEXT_VARIANTS[self.variant])
        for key in out:
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.E:  # in no variant: named only where on, so every other context's switches are unchanged
            out["E"] = True
        return out
