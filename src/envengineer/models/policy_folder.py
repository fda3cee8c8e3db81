"""The check every loader of a local model folder runs before transformers reads it.

A damaged folder otherwise fails deep inside transformers or torch, with a message that does not say what
is wrong (an ``IndexError`` from the embedding, "Asking to pad but the tokenizer does not have a padding
token", "Couldn't instantiate the backend tokenizer from one of: "), or not at all (an unknown format
record). :func:`check_model_folder` turns each such folder into one :class:`~envengineer.errors.ConfigError`
that names the folder, the file and what to do:

* any local folder: ``config.json`` present (or ``adapter_config.json``, a PEFT adapter) and a JSON object;
* a path that is no folder: a file, or a name that is neither an existing folder nor a hub id
  (``owner/name``), is refused ("no such folder") before any loader asks the hub for it;
* the weights: ``model.safetensors`` (or the shards of ``model.safetensors.index.json``) read with
  safetensors' own header reader (a truncated, empty or damaged file is refused), and their tensor names and
  shapes compared with the model ``config.json`` describes, built on the meta device (no memory, no
  weights read): every tensor of the file must be a parameter of that model, every parameter must be in
  the file (tied weights count once) and every shape must match, so an edited ``hidden_size`` or
  ``num_hidden_layers`` is refused instead of loaded into a mangled model. Skipped where transformers
  cannot judge it either: no safetensors weights (``pytorch_model.bin``), a quantized checkpoint
  (``quantization_config``), a model of remote code (``auto_map``), or torch/transformers not installed;
* a small policy (its ``config.json`` records ``envengineer_prompt_style`` or ``envengineer_policy_format``,
  :mod:`envengineer.models.small_policy`): the tokenizer files and the weights present, the format record
  absent (``v1``) or one of :data:`~envengineer.models.small_policy.POLICY_FORMATS`, a tokenizer with
  ``vocab_size`` pieces and the pieces of the recorded format (not another format's tokenizer files), and
  a chat template that parses.

Hub ids are left to the loader, which says what is wrong with them.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError
from envengineer.mapf.prompt import check_prompt_style
from envengineer.models.small_policy import FORMAT_KEY, POLICY_FORMATS, PROMPT_STYLE_KEY

__all__ = ["check_model_folder", "check_weights"]

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
_WEIGHTS = ("*.safetensors", "pytorch_model*.bin")


def check_model_folder(model: str | Path) -> None:
    """Raise a :class:`ConfigError` when the local model folder ``model`` is damaged; see the module doc.

    >>> check_model_folder("HuggingFaceTB/SmolLM2-135M-Instruct")  # a hub id: nothing to check here
    """
    folder = Path(model).expanduser()
    if not folder.is_dir():
        _check_not_a_folder(str(model), folder)
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
    check_weights(folder, config)


#: What the hub accepts as a model id: ``owner/name`` (huggingface_hub's characters; no ``--`` or ``..``).
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}")


def _check_not_a_folder(name: str, folder: Path) -> None:
    """A file, or a name that is neither a folder nor a hub id, is one clear error (no hub lookup)."""
    if folder.exists():
        raise ConfigError(
            f"{folder}: is a file, not a model folder; point --model at a checkpoint folder (config.json, "
            "weights, tokenizer files)"
        )
    if _HUB_ID.fullmatch(name) and "--" not in name and ".." not in name:
        return  # a hub id: the loader looks in the local cache, then on the hub
    raise ConfigError(
        f"{name}: no such folder; point --model at a checkpoint folder (config.json, weights, tokenizer "
        "files), a hub id (owner/name), policy:SIZE, policy:trainee or embedded (the embedded "
        "SmolLM2-135M)"
    )


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


# -- the weights against the configuration ----------------------------------------------------------------
def check_weights(folder: Path, config: dict[str, Any]) -> None:
    """The safetensors weights of ``folder`` are readable and are exactly the parameters of the model that
    ``config`` describes: names and shapes (module docstring). Raises a :class:`ConfigError` naming the
    file, the first tensor of each kind of disagreement and what to do."""
    if "quantization_config" in config or "auto_map" in config or "model_type" not in config:
        return  # quantized tensors, remote code, no known architecture: the loader's to judge
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError:
        return
    found = _weight_shapes(folder)
    if found is None:
        return
    fix = (
        "restore config.json and the weights from where the folder came from, or point --model at a "
        "complete checkpoint"
    )
    try:
        built = AutoConfig.from_pretrained(folder, local_files_only=True)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(built)
    except (ValueError, KeyError, TypeError, AttributeError, OSError, RuntimeError) as exc:
        raise ConfigError(
            f"{folder}: config.json describes no model transformers can build ({_first_line(exc)}); {fix}"
        ) from None
    problems = _disagreements(model, found)
    if problems:
        files = " and ".join(sorted({file for file, _ in found.values()}))
        raise ConfigError(
            f"{folder}: config.json does not fit the weights in {files}: {'; '.join(problems)} (an edited "
            f"hidden_size or num_hidden_layers?); {fix}"
        )


def _weight_shapes(folder: Path) -> dict[str, tuple[str, tuple[int, ...]]] | None:
    """Each tensor of the folder's safetensors weights: its file and shape, read from the files' headers
    (safetensors checks that each header is whole and covers the file); ``None`` without such weights."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = _read_object(folder, index.name).get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ConfigError(f"{folder}: {index.name} holds no weight_map of file names; restore it")
        files = sorted(set(weight_map.values()))
    elif (folder / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        return None
    from safetensors import SafetensorError, safe_open

    shapes: dict[str, tuple[str, tuple[int, ...]]] = {}
    for file in files:
        try:
            with safe_open(str(folder / file), framework="pt") as f:
                for key in f.keys():
                    shapes[key] = (file, tuple(f.get_slice(key).get_shape()))
        except (SafetensorError, OSError) as exc:
            raise ConfigError(
                f"{folder}: {file} cannot be read as safetensors weights ({_first_line(exc)}): the file is "
                "truncated, empty or damaged; copy it back from where the folder came from, or point "
                "--model at a complete checkpoint"
            ) from None
    return shapes


def _disagreements(model: Any, found: dict[str, tuple[str, tuple[int, ...]]]) -> list[str]:
    """What differs between ``model``'s parameters and the tensors ``found``: tensors no parameter takes,
    parameters no tensor fills (one of a tied group is enough), shapes; the first of each and a count."""
    expected = {name: tuple(t.shape) for name, t in model.state_dict(keep_vars=True).items()}
    prefix = f"{model.base_model_prefix}." if getattr(model, "base_model_prefix", "") else ""

    def own(key: str) -> str | None:  # the model's name of a file's tensor (a base model's lacks the prefix)
        for name in (key, prefix + key, key.removeprefix(prefix) if prefix else key):
            if name in expected:
                return name
        return None

    ignored = [re.compile(p) for p in getattr(model, "_keys_to_ignore_on_load_unexpected", None) or ()]
    unused = sorted(k for k in found if own(k) is None and not any(p.search(k) for p in ignored))
    loaded = {own(k) for k in found} - {None}
    groups: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    missing_ok = [re.compile(p) for p in getattr(model, "_keys_to_ignore_on_load_missing", None) or ()]
    missing = sorted(
        names[0]
        for names in groups.values()
        if not loaded.intersection(names) and not any(p.search(names[0]) for p in missing_ok)
    )
    shapes = [
        f"{k} is {list(shape)} in the file but {list(expected[name])} by config.json"
        for k, (_, shape) in sorted(found.items())
        if (name := own(k)) is not None and expected[name] != shape
    ]
    problems = []
    if unused:
        problems.append(f"{len(unused)} tensors the config has no place for (first {unused[0]})")
    if missing:
        problems.append(f"{len(missing)} parameters no tensor fills (first {missing[0]})")
    if shapes:
        problems.append(f"{len(shapes)} shapes differ (first {shapes[0]})")
    return problems


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__
