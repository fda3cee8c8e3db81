"""What reaches disk or a log: valid UTF-8 and no secret the process holds."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from envengineer.loop.rundir import RunDir, atomic_write_json, atomic_write_text, read_jsonl
from envengineer.sanitize import ScrubFilter, known_secrets, register_secret, replace_surrogates, scrub

SECRET = "tok-0123456789-abcdefghij"


def test_surrogates_replaced_and_counted() -> None:
    assert replace_surrogates("a\ud800b\udfffc") == ("a\ufffdb\ufffdc", 2)
    assert replace_surrogates("plain → 中文 😀") == ("plain → 中文 😀", 0)


def test_env_secrets_by_name_and_length(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_SERVICE_TOKEN", SECRET)
    monkeypatch.setenv("MY_API_KEY", "short")  # too short to be a secret
    monkeypatch.setenv("NOT_A_SECRET_NAME", "value-0123456789")
    assert SECRET in known_secrets()
    assert scrub(f"a {SECRET} b short value-0123456789") == "a *** b short value-0123456789"


def test_registered_secret_is_scrubbed() -> None:
    register_secret("reg-secret-9876543210")
    assert scrub("x reg-secret-9876543210 y") == "x *** y"


def test_run_directory_writes_are_utf8_and_scrubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVENGINEER_TEST_TOKEN", SECRET)
    atomic_write_text(tmp_path / "rationale.txt", f"because \ud800 {SECRET}\n")
    atomic_write_json(tmp_path / "decision.json", {"text": f"{SECRET} \ud800", SECRET: 1})
    for name in ("rationale.txt", "decision.json"):
        text = (tmp_path / name).read_bytes().decode("utf-8")
        assert SECRET not in text
    assert "\ufffd" in (tmp_path / "rationale.txt").read_text(encoding="utf-8")


def test_ledger_with_a_line_torn_inside_a_character(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)
    rd.record(0, "config", seconds=1.0, info={"note": "→"})
    with open(rd.ledger_path, "ab") as fh:
        fh.write('{"round": 0, "stage": "data", "info": "→'.encode()[:-1])
    assert [e.stage for e in rd.entries()] == ["config"]
    rd.record(0, "data", seconds=1.0)
    assert [r["stage"] for r in read_jsonl(rd.ledger_path, skip_torn=True)] == ["config", "data"]


def test_log_filter_scrubs_messages_and_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVENGINEER_TEST_TOKEN", SECRET)
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "got %s and %r", (SECRET, {"k": SECRET}), None)
    assert ScrubFilter().filter(record)
    assert SECRET not in record.getMessage() and "***" in record.getMessage()
