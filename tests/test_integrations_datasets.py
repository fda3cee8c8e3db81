"""HF datasets export and verl's layout: round trips, the CLI, bad input, and the benchmark figures."""

from __future__ import annotations

import json

import pytest

from envengineer.cli import main
from envengineer.errors import InstanceFormatError
from envengineer.integrations import MissingDependency, require, verl
from envengineer.integrations import hf_datasets as hfd
from envengineer.mapf.instance import Instance, save_instances
from envengineer.mapf.prompt import build_messages
from integration_figures import POLICIES, benchmark, cli_table, responses, table_of

datasets = pytest.importorskip("datasets")


def _small() -> list[Instance]:
    return [i for i in benchmark() if i.size <= 4][:30]


def test_rows_carry_prompt_instance_optima_and_split():
    insts = _small()
    ds = hfd.to_dataset(insts, split="benchmark")
    assert tuple(ds.column_names) == hfd.COLUMNS
    row = ds[0]
    assert row["prompt"] == build_messages(insts[0])
    assert (row["optimal_soc"], row["optimal_makespan"], row["shortest_sum"]) == (
        insts[0].optimal_soc,
        insts[0].optimal_makespan,
        insts[0].shortest_sum,
    )
    assert row["split"] == "benchmark" and row["needs_wait"] == insts[0].needs_wait
    assert hfd.to_dataset(insts, split="x", system=False)[0]["prompt"][0]["role"] == "user"


@pytest.mark.parametrize("name", ["set.parquet", "folder"])
def test_parquet_and_folder_load_back_losslessly(tmp_path, name):
    insts = _small()
    path = hfd.write_dataset(hfd.to_dataset(insts, split="benchmark"), tmp_path / name)
    back = hfd.instances_from_dataset(path)
    assert back == insts  # seed tuples and the benchmark's `subset` key included
    assert [b.meta for b in back] == [i.meta for i in insts] and back[0].meta == {"subset": "wr_025"}


def test_instances_from_rows_and_bad_datasets():
    insts = _small()[:3]
    assert hfd.instances_from_dataset(hfd.rows(insts, split="s")) == insts
    with pytest.raises(InstanceFormatError, match="no 'instance' column"):
        hfd.instances_from_dataset(datasets.Dataset.from_list([{"x": 1}]))
    with pytest.raises(InstanceFormatError, match="not JSON"):
        hfd.instances_from_dataset([{"instance": "{oops"}])
    with pytest.raises(InstanceFormatError, match="no 'instance' field"):
        hfd.instances_from_dataset([{"id": "a"}])
    unsolved = Instance("u", ("...",) * 3, ((0, 0),), ((2, 2),))
    with pytest.raises(InstanceFormatError, match="envengineer solve"):
        hfd.rows([unsolved], split="s")
    with pytest.raises(InstanceFormatError, match="no instances"):
        hfd.to_dataset([], split="s")


def test_require_names_the_extra():
    with pytest.raises(MissingDependency, match=r"\.\[integrations\]"):
        require("no_such_library_xyz", purpose="a test")


def test_verl_rows_follow_verls_documented_columns():
    insts = _small()[:4]
    ds = verl.to_verl_dataset(insts, split="test")
    assert tuple(ds.column_names) == verl.VERL_COLUMNS
    row = ds[2]
    assert row["data_source"] == verl.DATA_SOURCE and isinstance(row["ability"], str)
    assert row["reward_model"]["style"] == "rule"
    assert Instance.from_dict(json.loads(row["reward_model"]["ground_truth"])) == insts[2]
    assert row["extra_info"]["index"] == 2 and row["extra_info"]["split"] == "test"
    assert row["prompt"] == build_messages(insts[2])
    assert hfd.instances_from_dataset(ds["extra_info"], column="instance") == insts


def test_compute_score_signature_shapes_and_errors():
    import inspect

    params = list(inspect.signature(verl.compute_score).parameters)
    assert params[:4] == ["data_source", "solution_str", "ground_truth", "extra_info"]
    inst = Instance("ex", ("...",) * 3, ((0, 0), (0, 2)), ((0, 2), (0, 0)), 6, 4, 4)
    sub = "<answer>\nA0: WAIT RIGHT RIGHT\nA1: DOWN LEFT LEFT UP\n</answer>"
    gt = inst.to_json()
    assert verl.compute_score(verl.DATA_SOURCE, sub, gt) == 0.6
    assert verl.compute_score(verl.DATA_SOURCE, sub, gt, {"index": 0}, shape="sparse") == 0.5
    assert verl.compute_score(verl.DATA_SOURCE, sub, gt, shape="sparse", valid=0.3) == 0.3
    assert verl.compute_score(verl.DATA_SOURCE, "\x00 garbage", inst.to_dict()) == 0.0
    with pytest.raises(InstanceFormatError, match="data_source"):
        verl.compute_score("openai/gsm8k", sub, gt)
    with pytest.raises(InstanceFormatError, match="not JSON"):
        verl.compute_score(verl.DATA_SOURCE, sub, "{not json")


def test_cli_export_benchmark_verl_config_and_file(tmp_path, capsys):
    assert main(["export", "benchmark", "-o", str(tmp_path / "b.parquet")]) == 0
    assert "wrote 3150 instances" in capsys.readouterr().out
    assert hfd.instances_from_dataset(tmp_path / "b.parquet") == list(benchmark())

    out = str(tmp_path / "v.parquet")
    assert main(["export", "benchmark", "--format", "verl", "--split", "test", "-o", out]) == 0
    v = datasets.Dataset.from_parquet(str(tmp_path / "v.parquet"))
    assert len(v) == 3150 and v[0]["extra_info"]["split"] == "test"

    assert main(["export", "validation", "--no-system", "-o", str(tmp_path / "val.parquet")]) == 0
    val = hfd.instances_from_dataset(tmp_path / "val.parquet")
    assert len(val) == 252 and not {i.board_hash() for i in val} & {i.board_hash() for i in benchmark()}
    val_ds = datasets.Dataset.from_parquet(str(tmp_path / "val.parquet"))
    assert set(val_ds["split"]) == {"validation"} and val_ds[0]["prompt"][0]["role"] == "user"

    cfg = tmp_path / "round.yaml"
    cfg.write_text(
        "num_agents: 2\nnum_samples: 6\nsizes:\n  3: {data_ratio: 1, hole_ratio: 0.2, wait_ratio: 0.5}"
    )
    assert main(["export", str(cfg), "--seed", "3", "-o", str(tmp_path / "r.parquet")]) == 0
    r = datasets.Dataset.from_parquet(str(tmp_path / "r.parquet"))
    assert len(r) == 6 and set(r["split"]) == {"train"} and set(r["size"]) == {3}

    save_instances(_small()[:5], tmp_path / "mine.jsonl")
    assert main(["export", str(tmp_path / "mine.jsonl"), "-o", str(tmp_path / "mine")]) == 0
    assert hfd.instances_from_dataset(tmp_path / "mine") == _small()[:5]
    assert datasets.load_from_disk(str(tmp_path / "mine"))["split"][0] == "custom"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["export", "notes.txt", "-o", "x.parquet"], "is no instance set"),
        (["export", "missing.jsonl", "-o", "x.parquet"], "no such file"),
    ],
)
def test_cli_export_bad_input_is_one_line(tmp_path, capsys, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_cli_export_refuses_a_non_empty_folder(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("x")
    save_instances(_small()[:2], tmp_path / "a.jsonl")
    assert main(["export", str(tmp_path / "a.jsonl"), "-o", str(tmp_path / "out")]) == 2
    assert "already exists" in capsys.readouterr().err


@pytest.mark.parametrize("policy", POLICIES)
def test_verl_scores_on_the_benchmark_equal_envengineer_score(tmp_path, policy):
    """compute_score over verl's exported rows gives the `envengineer score` table exactly."""
    insts = benchmark()
    answers = responses(policy)
    ds = verl.to_verl_dataset(list(insts), split="test")
    valid, optimal = {}, {}
    for row in ds:
        iid = row["extra_info"]["id"]
        s = verl.compute_score(row["data_source"], answers[iid], row["reward_model"]["ground_truth"],
                               row["extra_info"], shape="sparse")  # fmt: skip
        valid[iid], optimal[iid] = s >= 0.5, s == 1.0
    assert table_of(insts, valid, optimal) == cli_table(policy)


def test_cli_export_refuses_an_existing_parquet_file_without_overwrite(tmp_path, capsys):
    save_instances(_small()[:2], tmp_path / "a.jsonl")
    out = tmp_path / "old.parquet"
    out.write_bytes(b"precious")
    assert main(["export", str(tmp_path / "a.jsonl"), "-o", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err and out.read_bytes() == b"precious"
    assert main(["export", str(tmp_path / "a.jsonl"), "-o", str(out), "--overwrite"]) == 0
    assert hfd.instances_from_dataset(out) == _small()[:2]


def test_cli_export_overwrite_replaces_only_an_exported_folder(tmp_path, capsys):
    save_instances(_small()[:3], tmp_path / "a.jsonl")
    save_instances(_small()[:2], tmp_path / "b.jsonl")
    out = tmp_path / "ds"
    assert main(["export", str(tmp_path / "a.jsonl"), "-o", str(out)]) == 0
    assert main(["export", str(tmp_path / "b.jsonl"), "-o", str(out)]) == 2  # no --overwrite
    assert main(["export", str(tmp_path / "b.jsonl"), "-o", str(out), "--overwrite"]) == 0
    assert hfd.instances_from_dataset(out) == _small()[:2]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("x")
    capsys.readouterr()
    assert main(["export", str(tmp_path / "b.jsonl"), "-o", str(tmp_path / "other"), "--overwrite"]) == 2
    assert "not an exported dataset" in capsys.readouterr().err
    assert (tmp_path / "other" / "keep.txt").read_text() == "x"
