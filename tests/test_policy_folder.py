"""A damaged small-policy folder is one clear error that names the folder and the file, never an internal one.

Each damage of issue 41 (item 11) is made to a fresh tiny policy and fed to ``envengineer eval`` in-process:
a chat template that does not parse, another format's tokenizer files, a deleted ``tokenizer_config.json``,
``tokenizer.json`` or ``config.json``, a format record that is no format. ``sft``, ``train`` and
``teach`` run the same check (:func:`envengineer.models.policy_folder.check_model_folder`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from envengineer.cli import main
from envengineer.errors import ConfigError
from envengineer.mapf.instance import Instance
from envengineer.models.policy_folder import check_model_folder
from envengineer.models.small_policy import FORMAT_KEY, POLICY_FORMATS, init_policy

pytest.importorskip("transformers")

SOLVED = {
    "id": "a",
    "grid": ["...", "...", "..."],
    "starts": [[0, 0], [0, 2]],
    "goals": [[0, 2], [0, 0]],
    "optimal_soc": 6,
    "optimal_makespan": 4,
    "shortest_sum": 4,
}


@pytest.fixture(scope="module")
def intact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny policy of the default format; tests damage copies of it."""
    return init_policy(tmp_path_factory.mktemp("policy") / "p", size="tiny")


@pytest.fixture
def policy(intact: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(intact, tmp_path / "p"))


def _set_format(value: object) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        config[FORMAT_KEY] = value
        (folder / "config.json").write_text(json.dumps(config))

    return damage


def _set_config(key: str, value: object) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        config[key] = value
        (folder / "config.json").write_text(json.dumps(config))

    return damage


def _truncate_weights(folder: Path) -> None:
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


def _other_formats_tokenizer(folder: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (folder / name).unlink()
    POLICY_FORMATS["v1"].tokenizer().save_pretrained(folder)


#: name -> (damage, what the message must say besides the folder)
DAMAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "template": (
        lambda f: (f / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }"),
        "chat_template.jinja does not parse (line 1",
    ),
    "other-format-tokenizer": (
        _other_formats_tokenizer,
        "tokenizer.json has 859 pieces but config.json's vocab_size is 398",
    ),
    "no-tokenizer-config": (
        lambda f: (f / "tokenizer_config.json").unlink(),
        "tokenizer_config.json is missing",
    ),
    "no-tokenizer": (lambda f: (f / "tokenizer.json").unlink(), "tokenizer.json is missing"),
    "no-config": (lambda f: (f / "config.json").unlink(), "config.json is missing"),
    "no-weights": (
        lambda f: (f / "model.safetensors").unlink(),
        "the weights (model.safetensors) are missing",
    ),
    # the weights: what transformers read as SafetensorError / RuntimeError, or loaded silently mangled
    "truncated-weights": (_truncate_weights, "model.safetensors cannot be read as safetensors weights"),
    "empty-weights": (
        lambda f: (f / "model.safetensors").write_bytes(b""),
        "model.safetensors cannot be read as safetensors weights (Error while deserializing header",
    ),
    "bad-header": (
        lambda f: (f / "model.safetensors").write_bytes(b"\x10" + b"\x00" * 7 + b"{not json here..}"),
        "model.safetensors cannot be read as safetensors weights",
    ),
    "hidden-size": (
        _set_config("hidden_size", 64),
        "38 shapes differ (first model.embed_tokens.weight is [398, 128] in the file but [398, 64]",
    ),
    "fewer-layers": (
        _set_config("num_hidden_layers", 2),
        "18 tensors the config has no place for (first model.layers.2.input_layernorm.weight)",
    ),
    "more-layers": (
        _set_config("num_hidden_layers", 6),
        "18 parameters no tensor fills (first model.layers.4.input_layernorm.weight)",
    ),
    "format-nonsense": (_set_format("nonsense"), 'records envengineer_policy_format: "nonsense", not a'),
    "format-42": (_set_format(42), "records envengineer_policy_format: 42, not a policy format"),
    "format-null": (_set_format(None), "records envengineer_policy_format: null, not a policy format"),
    # a format whose tokenizer has as many pieces but spells moves otherwise: sft would train its target
    "format-of-another-folder": (
        _set_format("joint-moves"),
        "tokenizer.json is not the tokenizer of the recorded format 'joint-moves' (it lacks ' wait'",
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_eval_names_the_folder_and_the_file(
    damage: str, policy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, says = DAMAGES[damage]
    make(policy)
    (tmp_path / "one.jsonl").write_text(json.dumps(SOLVED) + "\n")
    code = main(
        ["eval", "--model", str(policy), "--set", str(tmp_path / "one.jsonl"), "--out", str(tmp_path / "o")]
    )
    err = capsys.readouterr().err
    lines = [x for x in err.replace("\r", "\n").splitlines() if x.startswith("envengineer: error: ")]
    assert code == 2 and "internal error" not in err and "Traceback" not in err, err[-800:]
    assert len(lines) == 1 and lines[0].startswith(f"envengineer: error: {policy}: "), err[-800:]
    assert says in lines[0]
    assert "point --model at a" in lines[0]  # and what else to do


def test_an_intact_folder_passes(intact: Path, tmp_path: Path) -> None:
    check_model_folder(intact)
    check_model_folder(str(intact))
    for name in ("v1", "split-moves", "timed-checks"):
        check_model_folder(init_policy(tmp_path / name, policy_format=name))
    config = json.loads((tmp_path / "v1" / "config.json").read_text())
    del config[FORMAT_KEY]  # a folder made before formats were recorded: v1
    (tmp_path / "v1" / "config.json").write_text(json.dumps(config))
    check_model_folder(tmp_path / "v1")


def test_what_is_not_a_small_policy_gets_only_the_folder_check(tmp_path: Path) -> None:
    check_model_folder("HuggingFaceTB/SmolLM2-135M-Instruct")  # a hub id: the loader's to find
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_config.json").write_text("{}")  # a PEFT adapter has no config.json
    check_model_folder(tmp_path / "adapter")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 9}))
    check_model_folder(tmp_path / "other")  # another model's files are transformers' to judge
    (tmp_path / "other" / "config.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"other: config.json holds list, not a JSON object"):
        check_model_folder(tmp_path / "other")
    (tmp_path / "other" / "config.json").unlink()
    with pytest.raises(ConfigError, match=r"other: config.json is missing"):
        check_model_folder(tmp_path / "other")


@pytest.mark.parametrize(
    "template",
    [
        "{% for m in messages %}{% generation %}{{ m['content'] }}{% endgeneration %}{% endfor %}",
        "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}{{ m['content'] }}{% endfor %}",
    ],
    ids=["generation-tag", "loop-controls"],
)
def test_templates_that_transformers_parses_pass(template: str, policy: Path) -> None:
    (policy / "chat_template.jinja").write_text(template)
    check_model_folder(policy)


def test_the_template_in_tokenizer_config_is_checked_when_there_is_no_jinja_file(policy: Path) -> None:
    (policy / "chat_template.jinja").unlink()
    with pytest.raises(ConfigError, match="there is no chat template"):
        check_model_folder(policy)
    config = json.loads((policy / "tokenizer_config.json").read_text())
    config["chat_template"] = "{{ messages[0]['content'] "
    (policy / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"tokenizer_config\.json's chat_template does not parse"):
        check_model_folder(policy)


def test_the_trainers_refuse_a_damaged_folder_before_transformers_reads_it(
    policy: Path, tmp_path: Path
) -> None:
    from envengineer.training.grpo import resolve_model_path
    from envengineer.training.teach import teach

    DAMAGES["template"][0](policy)
    with pytest.raises(ConfigError, match=r"chat_template\.jinja does not parse"):
        resolve_model_path(str(policy))  # sft, train and the loop's teach rounds resolve the model here
    board = Instance("swap", ("...", "...", "..."), ((0, 0), (0, 2)), ((0, 2), (0, 0)), 6, 4, 4)
    with pytest.raises(ConfigError, match=r"chat_template\.jinja does not parse"):
        teach(str(policy), [board], out_dir=tmp_path / "t")


def test_sft_and_teach_refuse_weights_the_config_does_not_fit(policy: Path, tmp_path: Path) -> None:
    """num_hidden_layers 4 -> 2: transformers only logs the unused weights; sft and teach would train the
    mangled model. Both refuse it before reading the weights."""
    from envengineer.training.grpo import resolve_model_path
    from envengineer.training.teach import teach

    DAMAGES["fewer-layers"][0](policy)
    says = r"config\.json does not fit the weights in model\.safetensors: 18 tensors the config has no place"
    with pytest.raises(ConfigError, match=says):
        resolve_model_path(str(policy))  # sft and train
    board = Instance("swap", ("...", "...", "..."), ((0, 0), (0, 2)), ((0, 2), (0, 0)), 6, 4, 4)
    with pytest.raises(ConfigError, match=says):
        teach(str(policy), [board], out_dir=tmp_path / "t")


def test_a_path_that_is_no_folder_is_refused_without_asking_the_hub(intact: Path, tmp_path: Path) -> None:
    for missing in ("missing_folder", str(tmp_path / "nope"), "runs/a/checkpoint", "~/nope"):
        with pytest.raises(ConfigError, match=r": no such folder; point --model at a checkpoint folder"):
            check_model_folder(missing)
    with pytest.raises(ConfigError, match=r"model\.safetensors: is a file, not a model folder"):
        check_model_folder(intact / "model.safetensors")
    check_model_folder("HuggingFaceTB/SmolLM2-135M-Instruct")  # owner/name: a hub id, the loader's to find


def test_a_base_model_s_weights_and_tied_heads_pass(tmp_path: Path) -> None:
    """Tensors saved without the causal LM's prefix (a base model's) and a tied head saved beside its
    embedding are what transformers loads: no refusal."""
    import torch
    from safetensors.torch import load_file, save_file

    folder = init_policy(tmp_path / "p", size="tiny")
    weights = load_file(str(folder / "model.safetensors"))
    plain = {k.removeprefix("model."): v for k, v in weights.items()}
    plain["lm_head.weight"] = torch.zeros_like(weights["model.embed_tokens.weight"])
    save_file(plain, str(folder / "model.safetensors"), metadata={"format": "pt"})
    check_model_folder(folder)
