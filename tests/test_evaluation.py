"""evaluate(): responses on disk, resume without re-asking, scores identical to the testbed's `score`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from envengineer.cli import main
from envengineer.errors import InstanceFormatError
from envengineer.evaluation import EvaluationError, evaluate, read_records, stratified_subset
from envengineer.mapf.generator import generate_cell
from envengineer.mapf.instance import Instance, save_instances
from envengineer.mapf.scoring import load_responses, score
from envengineer.models import Completion, SamplingParams, load_backend


@pytest.fixture(scope="module")
def instances() -> list[Instance]:
    """18 small solved instances in 3 cells, with benchmark-style subsets."""
    out: list[Instance] = []
    for k, n, subset in ((2, 3, "wr_050"), (2, 4, "wr_025"), (3, 4, "wr_075")):
        out += generate_cell(
            num_agents=k,
            size=n,
            count=6,
            wait_count=3,
            seed=11,
            split="custom",
            hole_ratio=0.1,
            id_prefix=f"{k}a{n}{subset}",
            meta={"subset": subset},
        )
    return out


class Counting:
    """Wraps a backend and records which prompts it was asked (and can die after some batches)."""

    def __init__(
        self,
        inner: object,
        die_after: int | None = None,
        fail_ids: Sequence[str] = (),
        instances: Sequence[Instance] = (),
    ) -> None:
        from envengineer.mapf.prompt import build_prompt

        self.inner = inner
        self.name = "counting"
        self.asked: list[str] = []
        self.batches = 0
        self.die_after = die_after
        self._fail_prompts = {build_prompt(i) for i in instances if i.id in set(fail_ids)}
        self._id_of = {build_prompt(i): i.id for i in instances}

    def generate(
        self, conversations: Sequence[list[dict[str, str]]], params: SamplingParams
    ) -> list[Completion]:
        if self.die_after is not None and self.batches >= self.die_after:
            raise KeyboardInterrupt  # the evaluation is killed between two batches
        self.batches += 1
        prompts = [c[-1]["content"] for c in conversations]
        self.asked += [self._id_of.get(p, "?") for p in prompts]
        out = self.inner.generate(conversations, params)  # type: ignore[attr-defined]
        return [
            Completion("", error="HTTP 503 (simulated)") if p in self._fail_prompts else c
            for p, c in zip(prompts, out, strict=True)
        ]


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.mark.parametrize("policy", ["optimal", "greedy", "random"])
def test_scripted_eval_matches_score_exactly(instances: list[Instance], tmp_path: Path, policy: str) -> None:
    backend = load_backend("scripted", policy, instances=instances)
    report = evaluate(
        backend, instances, out_dir=tmp_path, params=SamplingParams(seed=3), batch_size=5, progress=False
    )
    responses, tokens = load_responses(tmp_path / "responses.jsonl")
    expected = score(instances, responses, tokens).to_json()
    assert json.loads((tmp_path / "scores.json").read_text()) == expected == report.to_json()
    if policy == "optimal":
        assert report.summary()["optimal"] == 100.0
    records = _lines(tmp_path / "responses.jsonl")
    assert sorted(r["id"] for r in records) == sorted(i.id for i in instances)
    assert set(records[0]) == {"id", "response", "completion_tokens", "error", "board_hash"}
    info = json.loads((tmp_path / "eval_info.json").read_text())
    assert info["backend"] == f"scripted:{policy}" and info["errors"] == 0 and info["asked_this_run"] == 18


def test_cli_eval_writes_what_score_json_writes(
    instances: list[Instance], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`eval --backend scripted` and `play` + `score --json` give the same bytes."""
    data = tmp_path / "set.jsonl"
    save_instances(instances, data)
    out = tmp_path / "eval"
    assert (
        main(
            [
                "eval",
                "--backend",
                "scripted",
                "--model",
                "random",
                "--set",
                str(data),
                "--out",
                str(out),
                "--seed",
                "4",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "| agents |" in printed and "scores.json" in printed
    assert (
        main(["play", str(data), "--policy", "random", "--seed", "4", "-o", str(tmp_path / "play.jsonl")])
        == 0
    )
    assert (
        main(["score", str(data), str(tmp_path / "play.jsonl"), "--json", str(tmp_path / "score.json")]) == 0
    )
    assert (out / "scores.json").read_bytes() == (tmp_path / "score.json").read_bytes()


def test_resume_after_kill_asks_only_the_rest(instances: list[Instance], tmp_path: Path) -> None:
    scripted = load_backend("scripted", "greedy", instances=instances)
    dying = Counting(scripted, die_after=2, instances=instances)
    with pytest.raises(KeyboardInterrupt):
        evaluate(dying, instances, out_dir=tmp_path, batch_size=4, progress=False)
    done = [r["id"] for r in _lines(tmp_path / "responses.jsonl")]
    assert len(done) == len(set(done)) == 8  # two whole batches were saved

    again = Counting(scripted, instances=instances)
    report = evaluate(again, instances, out_dir=tmp_path, batch_size=4, progress=False)
    assert sorted(again.asked) == sorted(i.id for i in instances if i.id not in done)  # nothing asked twice
    ids = [r["id"] for r in _lines(tmp_path / "responses.jsonl")]
    assert sorted(ids) == sorted(i.id for i in instances) and len(ids) == len(set(ids))

    fresh = evaluate(scripted, instances, out_dir=tmp_path / "fresh", batch_size=7, progress=False)
    assert report.to_json() == fresh.to_json()

    third = Counting(scripted, instances=instances)
    evaluate(third, instances, out_dir=tmp_path, batch_size=4, progress=False)
    assert third.asked == []


def test_torn_last_line_is_dropped_and_asked_again(instances: list[Instance], tmp_path: Path) -> None:
    scripted = load_backend("scripted", "optimal", instances=instances)
    evaluate(scripted, instances[:5], out_dir=tmp_path, progress=False)
    path = tmp_path / "responses.jsonl"
    text = path.read_text().splitlines()
    path.write_text("\n".join(text[:4]) + "\n" + text[4][: len(text[4]) // 2])  # died mid-write
    again = Counting(scripted, instances=instances)
    report = evaluate(again, instances[:5], out_dir=tmp_path, progress=False)
    assert again.asked == [json.loads(text[4])["id"]]
    assert sorted(r["id"] for r in _lines(path)) == sorted(i.id for i in instances[:5])
    assert report.summary()["optimal"] == 100.0

    path.write_text(path.read_text().rstrip("\n"))  # a whole last record, but no newline after it
    evaluate(scripted, instances[:6], out_dir=tmp_path, progress=False)
    assert sorted(r["id"] for r in _lines(path)) == sorted(i.id for i in instances[:6])


def test_batches_group_prompts_of_similar_length(instances: list[Instance], tmp_path: Path) -> None:
    scripted = load_backend("scripted", "optimal", instances=instances)
    counting = Counting(scripted, instances=instances)
    evaluate(counting, instances, out_dir=tmp_path, batch_size=6, progress=False)
    sizes = {i.id: (i.num_agents, i.size) for i in instances}
    assert [sizes[i] for i in counting.asked[:6]] == [(3, 4)] * 6  # the longest prompts come first
    unsorted = Counting(scripted, instances=instances)
    evaluate(unsorted, instances, out_dir=tmp_path / "u", sort_by_length=False, progress=False)
    assert unsorted.asked == [i.id for i in instances]


def test_failed_requests_are_recorded_then_asked_again(instances: list[Instance], tmp_path: Path) -> None:
    scripted = load_backend("scripted", "optimal", instances=instances)
    failing = [instances[1].id, instances[7].id]
    flaky = Counting(scripted, fail_ids=failing, instances=instances)
    report = evaluate(flaky, instances, out_dir=tmp_path, batch_size=6, progress=False)
    records, _ = read_records(tmp_path / "responses.jsonl")
    assert sorted(i for i, r in records.items() if r.error) == sorted(failing)
    assert report.verdicts[failing[0]].failure == "parse_error"  # scored as an empty response
    assert json.loads((tmp_path / "eval_info.json").read_text())["errors"] == 2

    keep = Counting(scripted, instances=instances)
    evaluate(keep, instances, out_dir=tmp_path, retry_errors=False, progress=False)
    assert keep.asked == []

    healed = Counting(scripted, instances=instances)
    report = evaluate(healed, instances, out_dir=tmp_path, progress=False)
    assert sorted(healed.asked) == sorted(failing)
    ids = [r["id"] for r in _lines(tmp_path / "responses.jsonl")]
    assert len(ids) == len(set(ids)) == len(instances)
    assert report.summary()["optimal"] == 100.0


def test_no_resume_starts_afresh(instances: list[Instance], tmp_path: Path) -> None:
    scripted = load_backend("scripted", "optimal", instances=instances)
    evaluate(scripted, instances[:4], out_dir=tmp_path, progress=False)
    counting = Counting(scripted, instances=instances)
    evaluate(counting, instances[:4], out_dir=tmp_path, resume=False, progress=False)
    assert len(counting.asked) == 4 and len(_lines(tmp_path / "responses.jsonl")) == 4


def test_ids_outside_the_set_are_kept_but_not_scored(instances: list[Instance], tmp_path: Path) -> None:
    scripted = load_backend("scripted", "optimal", instances=instances)
    evaluate(scripted, instances[:6], out_dir=tmp_path, progress=False)
    report = evaluate(scripted, instances[:3], out_dir=tmp_path, progress=False)
    assert report.summary()["n"] == 3 and len(_lines(tmp_path / "responses.jsonl")) == 6


def test_backend_contract_violations(instances: list[Instance], tmp_path: Path) -> None:
    class Short:
        name = "short"

        def generate(self, conversations: Sequence[object], params: SamplingParams) -> list[Completion]:
            return [Completion("x")] * (len(conversations) - 1)

    with pytest.raises(EvaluationError, match="1 completions for 2"):
        evaluate(Short(), instances[:2], out_dir=tmp_path, progress=False)
    with pytest.raises(InstanceFormatError, match="twice"):
        evaluate(Short(), [instances[0], instances[0]], out_dir=tmp_path, progress=False)
    with pytest.raises(EvaluationError, match="batch_size"):
        evaluate(Short(), instances[:2], out_dir=tmp_path, batch_size=0, progress=False)


def test_stratified_subset_covers_every_cell(instances: list[Instance]) -> None:
    cells = {(i.num_agents, i.size, i.meta["subset"]) for i in instances}
    for n in (3, 5, 10):
        subset = stratified_subset(instances, n)
        assert len(subset) == n
        if n >= len(cells):
            assert {(i.num_agents, i.size, i.meta["subset"]) for i in subset} == cells
    assert stratified_subset(instances, 5) == stratified_subset(instances, 5)  # seeded: the same draw
    assert stratified_subset(instances, None) == instances
    assert stratified_subset(instances, 100) == instances


def test_cli_eval_limit_and_errors(
    instances: list[Instance], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "set.jsonl"
    save_instances(instances, data)
    assert (
        main(
            [
                "eval",
                "--backend",
                "scripted",
                "--set",
                str(data),
                "--limit",
                "4",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 0
    )
    assert len(_lines(tmp_path / "o" / "responses.jsonl")) == 4
    assert "4 instances" in capsys.readouterr().out
    assert main(["eval", "--backend", "hf", "--base-url", "http://x", "--set", str(data)]) == 2
    assert "--base-url applies to --backend openai" in capsys.readouterr().err
    assert main(["eval", "--backend", "scripted", "--set", str(tmp_path / "missing.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert (
        main(
            [
                "eval",
                "--backend",
                "scripted",
                "--model",
                "clever",
                "--set",
                str(data),
                "--out",
                str(tmp_path / "p"),
            ]
        )
        == 2
    )
    assert "greedy" in capsys.readouterr().err


class Fixed:
    """A backend that answers every conversation with the same text."""

    name = "fixed"

    def __init__(self, text: str) -> None:
        self.text = text

    def generate(
        self, conversations: Sequence[list[dict[str, str]]], params: SamplingParams
    ) -> list[Completion]:
        return [Completion(self.text, completion_tokens=3) for _ in conversations]


def test_lone_surrogate_answers_are_written_as_utf8_and_counted(
    instances: list[Instance], tmp_path: Path
) -> None:
    evaluate(Fixed("A0: \ud800 RIGHT \udfff"), instances[:3], out_dir=tmp_path, progress=False)
    raw = (tmp_path / "responses.jsonl").read_bytes()
    raw.decode("utf-8")  # strict: valid UTF-8
    rows = _lines(tmp_path / "responses.jsonl")
    assert [r["response"] for r in rows] == ["A0: \ufffd RIGHT \ufffd"] * 3
    info = json.loads((tmp_path / "eval_info.json").read_text())
    assert info["surrogates_replaced_this_run"] == 6
    # the file resumes and rescoring gives the same report
    again = Counting(Fixed("x"), instances=instances)
    evaluate(again, instances[:3], out_dir=tmp_path, progress=False)
    assert again.asked == []


@pytest.mark.parametrize("cut", [1, 2])
def test_last_line_torn_inside_a_multibyte_character_is_asked_again(
    instances: list[Instance], tmp_path: Path, cut: int, caplog: pytest.LogCaptureFixture
) -> None:
    evaluate(Fixed("→ 中文 A0: RIGHT"), instances[:3], out_dir=tmp_path, progress=False)
    path = tmp_path / "responses.jsonl"
    data = path.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    arrow = data.index("→".encode(), last)  # 3 bytes: cut after 1 or 2 of them
    path.write_bytes(data[: arrow + cut])
    with pytest.raises(UnicodeDecodeError):
        path.read_text(encoding="utf-8")
    torn_id = json.loads(data[last:].decode())["id"]
    again = Counting(Fixed("→ again"), instances=instances)
    with caplog.at_level("WARNING"):
        evaluate(again, instances[:3], out_dir=tmp_path, progress=False)
    assert again.asked == [torn_id]
    assert "unfinished last record" in caplog.text
    rows = _lines(path)
    assert sorted(r["id"] for r in rows) == sorted(i.id for i in instances[:3])
    assert {r["id"]: r["response"] for r in rows}[torn_id] == "→ again"


def test_invalid_utf8_mid_file_is_dropped_not_fatal(instances: list[Instance], tmp_path: Path) -> None:
    evaluate(Fixed("ok"), instances[:3], out_dir=tmp_path, progress=False)
    path = tmp_path / "responses.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines[1] = b'{"id": "\xff\xfe", "response": "x"}'
    path.write_bytes(b"\n".join(lines))
    records, dirty = read_records(path)
    assert dirty and len(records) == 2


def test_score_reader_names_a_torn_utf8_line(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"id": "a", "response": "ok"}\n{"id": "b", "response": "\xe2\x86')
    with pytest.raises(InstanceFormatError, match=r"r.jsonl:2: not valid UTF-8"):
        load_responses(path)


def test_eval_gives_a_small_policy_the_budget_its_longest_answers_need(tmp_path):
    import argparse

    from envengineer.cli.eval import answer_budget
    from envengineer.models.small_policy import init_policy
    from envengineer.training.presets import load_preset

    policy = init_policy(tmp_path / "p", size="tiny", seed=0)
    args = argparse.Namespace(max_new_tokens=None, backend="hf", model=str(policy))
    longest = load_preset("sft-small", "sft").max_completion_length
    assert answer_budget(args) == longest > 569  # 5 agents on 10x10 in free-moves: 569 tokens
    assert answer_budget(argparse.Namespace(max_new_tokens=None, backend="hf", model=None)) == 512
    assert answer_budget(argparse.Namespace(max_new_tokens=64, backend="hf", model=str(policy))) == 64
