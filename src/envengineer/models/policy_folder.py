"""The check every loader of a local model folder runs before transformers reads it.

A damaged folder otherwise fails deep inside transformers or torch, with a message that does not say what
is wrong (an ``IndexError`` from the embedding, "Asking to pad but the tokenizer does not have a padding
token", "Couldn't instantiate the backend tokenizer from one of: "), or not at all (an unknown format
record). :func:`check_model_folder` turns each such folder into one :class:`~envengineer.errors.ConfigError`
that names the folder, the file and what to do:

* any local folder: ``config.json`` present (or ``adapter_config.json``, a PEFT adapter) and a JSON object;
* a small policy (its ``config.json`` records ``envengineer_prompt_style`` or ``envengineer_policy_format``,
  :mod:`envengineer.models.small_policy`): the tokenizer files and the weights present, the format record
  absent (``v1``) or one of :data:`~envengineer.models.small_policy.POLICY_FORMATS`, a tokenizer with
  ``vocab_size`` pieces and the pieces of the recorded format (not another format's tokenizer files), and
  a chat template that parses.

Hub ids and paths that are not folders are left to the loader, which says what is wrong with them.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError
from envengineer.mapf.prompt import check_prompt_style
from envengineer.models.small_policy import FORMAT_KEY, POLICY_FORMATS, PROMPT_STYLE_KEY

__all__ = ["check_model_folder"]

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
_WEIGHTS = ("*.safetensors", "pytorch_model*.bin")


def check_model_folder(model: str | Path) -> None:
    """Raise a :class:`ConfigError` when the local model folder ``model`` is damaged; see the module doc.

    >>> check_model_folder("HuggingFaceTB/SmolLM2-135M-Instruct")  # a hub id: nothing to check here
    """
    folder = Path(model).expanduser()
    if not folder.is_dir():
        return
    if not (folder / "config.json").is_file():
        if (folder / "adapter_config.json").is_file():
            return  # a PEFT adapter: transformers reads its base model's folder
        raise ConfigError(
            f"{folder}: config.json is missing, so this is no complete model folder; point --model at a "
            "checkpoint that save_pretrained wrote (config.json, weights, tokenizer files), or create a "
            "new policy with `envengineer policy init --out NEW_FOLDER`"
        )
    config = _read_object(folder, "config.json")
    if PROMPT_STYLE_KEY in config or FORMAT_KEY in config:
        _check_small_policy(folder, config)


def _check_small_policy(folder: Path, config: dict[str, Any]) -> None:
    """The small-policy part of :func:`check_model_folder`."""
    name = config.get(FORMAT_KEY, "v1")  # a folder that records no format predates them: v1
    if not isinstance(name, str) or name not in POLICY_FORMATS:
        raise ConfigError(
            f"{folder}: config.json records {FORMAT_KEY}: {json.dumps(name)}, not a policy format "
            f"({', '.join(POLICY_FORMATS)}); write the format the policy was made with (a folder that "
            "records none is v1), or point --model at a complete checkpoint"
        )
    fix = _fix(folder, name)
    style = config.get(PROMPT_STYLE_KEY)
    if style is not None:
        try:
            check_prompt_style(str(style))
        except ConfigError as exc:
            raise ConfigError(f"{folder}: config.json: {exc}") from None
    for file in _TOKENIZER_FILES:
        if not (folder / file).is_file():
            raise ConfigError(f"{folder}: {file} is missing; {fix}")
    if not any(any(folder.glob(pattern)) for pattern in _WEIGHTS):
        raise ConfigError(f"{folder}: the weights (model.safetensors) are missing; {fix}")
    tokenizer = _read_object(folder, "tokenizer.json")
    _check_vocabulary(folder, config, tokenizer, name, fix)
    _check_chat_template(folder, _read_object(folder, "tokenizer_config.json"), fix)


def _check_vocabulary(
    folder: Path, config: dict[str, Any], tokenizer: dict[str, Any], name: str, fix: str
) -> None:
    """The tokenizer fits the weights (``vocab_size``) and spells cells, times and moves as ``name`` does."""
    model = tokenizer.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    ids = [i for i in vocab.values() if isinstance(i, int)] if isinstance(vocab, dict) else []
    if not ids:
        raise ConfigError(f"{folder}: tokenizer.json holds no vocabulary (model.vocab); {fix}")
    added = tokenizer.get("added_tokens")
    ids += (
        [t["id"] for t in added if isinstance(t, dict) and isinstance(t.get("id"), int)]
        if isinstance(added, list)
        else []
    )
    size, expected = max(ids) + 1, config.get("vocab_size")
    if size != expected:
        raise ConfigError(
            f"{folder}: tokenizer.json has {size} pieces but config.json's vocab_size is {expected}: the "
            f"tokenizer files are not the ones the weights were made with; {fix}"
        )
    distinguishing, of_format = _format_pieces()
    found = distinguishing & set(vocab)
    if found != of_format[name]:
        extra = sorted(found - of_format[name])
        lacking = sorted(of_format[name] - found)
        what = f"has {extra[0]!r}" if extra else f"lacks {lacking[0]!r}"
        raise ConfigError(
            f"{folder}: tokenizer.json is not the tokenizer of the recorded format {name!r} (it {what}; "
            f"another format's tokenizer files?); {fix}"
        )


@lru_cache(maxsize=1)
def _format_pieces() -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    """The pieces some format's tokenizer has and another's lacks, and each format's share of them.

    Only these are compared: the prompts' words (the same in every format) change with the prompts, so a
    folder made before a prompt change holds other words but the same cells, times and moves.
    """
    vocabs = {name: frozenset(spec.tokenizer().get_vocab()) for name, spec in POLICY_FORMATS.items()}
    distinguishing = frozenset.union(*vocabs.values()) - frozenset.intersection(*vocabs.values())
    return distinguishing, {name: vocab & distinguishing for name, vocab in vocabs.items()}


def _check_chat_template(folder: Path, tokenizer_config: dict[str, Any], fix: str) -> None:
    """A chat template is there (``chat_template.jinja`` or ``tokenizer_config.json``) and parses."""
    path = folder / "chat_template.jinja"
    if path.is_file():
        where, templates = path.name, [path.read_text(encoding="utf-8")]
    else:
        where, found = "tokenizer_config.json's chat_template", tokenizer_config.get("chat_template")
        if isinstance(found, list):  # named templates: [{"name": ..., "template": ...}]
            found = [t.get("template") for t in found if isinstance(t, dict)]
        templates = found if isinstance(found, list) else [found]
        if not templates or not all(isinstance(t, str) and t for t in templates):
            raise ConfigError(f"{folder}: there is no chat template (chat_template.jinja); {fix}")
    import jinja2

    env = _template_environment()
    for text in templates:
        try:
            env.parse(text)
        except jinja2.TemplateSyntaxError as exc:
            raise ConfigError(
                f"{folder}: {where} does not parse (line {exc.lineno}: {exc.message}); {fix}"
            ) from None


def _template_environment() -> Any:
    """A jinja2 environment that parses what transformers' chat templates may use (``{% generation %}``,
    ``{% break %}``), as transformers compiles them."""
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationTag(Extension):
        """Parses transformers' ``{% generation %}...{% endgeneration %}`` block (assistant masks)."""

        tags = frozenset({"generation"})

        def parse(self, parser: Any) -> Any:
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    return ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, "jinja2.ext.loopcontrols"]
    )


def _read_object(folder: Path, file: str) -> dict[str, Any]:
    """The JSON object in ``folder/file``, or a ConfigError naming the file."""
    try:
        value = json.loads((folder / file).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ConfigError(
            f"{folder}: {file} cannot be read as JSON ({exc}); restore it or point --model at a complete "
            "checkpoint"
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(f"{folder}: {file} holds {type(value).__name__}, not a JSON object; restore it")
    return value


def _fix(folder: Path, name: str) -> str:
    """What to do about a damaged small-policy folder of format ``name``."""
    return (
        "copy the file back from where the folder came from, recreate the folder with `envengineer policy "
        f"init --out {folder} --overwrite --format {name}` (an untrained policy) or point --model at a "
        "complete checkpoint"
    )
