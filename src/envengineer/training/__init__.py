"""Training: one GRPO round through TRL's ``GRPOTrainer``, the supervised warm-start, and presets.

Importing this package is cheap: torch, transformers and TRL are imported inside the functions that train.

>>> from envengineer.training import load_preset
>>> load_preset("grpo-cpu").reward_shape
'dense'
"""

from __future__ import annotations

from envengineer.training.dataset import prompt_dataset, sft_dataset, target_response, write_manifest
from envengineer.training.grpo import TrainResult, train_round, train_round_from_config
from envengineer.training.presets import GRPOPreset, LoraSettings, SFTPreset, load_preset, packaged_presets
from envengineer.training.sft import sft, sft_from_config

__all__ = [
    "GRPOPreset",
    "LoraSettings",
    "SFTPreset",
    "TrainResult",
    "load_preset",
    "packaged_presets",
    "prompt_dataset",
    "sft",
    "sft_dataset",
    "sft_from_config",
    "target_response",
    "train_round",
    "train_round_from_config",
    "write_manifest",
]
