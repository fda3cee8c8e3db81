"""The instance type and its JSON Lines format."""

from __future__ import annotations

import json

import pytest

from envengineer.errors import InstanceFormatError
from envengineer.mapf.instance import Instance, board_hash, load_instances, save_instances

GRID = ("...", ".H.", "...")


def make(**kw) -> Instance:
    base = {"id": "x", "grid": GRID, "starts": ((0, 0), (0, 2)), "goals": ((0, 2), (0, 0))}
    return Instance(**{**base, **kw})


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"grid": ("...", "..", "...")}, "square"),
        ({"grid": ("...", ".X.", "...")}, "may hold only"),
        ({"starts": ((0, 0), (0, 0))}, "share a start"),
        ({"goals": ((0, 2), (0, 2))}, "share a goal"),
        ({"starts": ((1, 1), (0, 2))}, "on a hole"),
        ({"goals": ((3, 0), (0, 0))}, "outside"),
        ({"goals": ((0, 0), (0, 1))}, "starts on its own goal"),
        ({"goals": ((0, 2),)}, "1 goals"),
    ],
)
def test_bad_boards_are_refused_with_a_reason(kw, needle):
    with pytest.raises(InstanceFormatError, match=needle):
        make(**kw)


def test_round_trip_and_derived_fields(tmp_path):
    inst = make(optimal_soc=6, optimal_makespan=4, shortest_sum=4, seed=(1, 2), meta={"subset": "wr_050"})
    assert inst.needs_wait is True and inst.hole_ratio == pytest.approx(1 / 9)
    d = inst.to_dict()
    assert d["size"] == 3 and d["num_agents"] == 2 and d["subset"] == "wr_050" and d["needs_wait"] is True
    for name in ("a.jsonl", "a.jsonl.gz"):
        save_instances([inst], tmp_path / name)
        back = load_instances(tmp_path / name)
        assert back == [inst] and back[0].meta == {"subset": "wr_050"}


def test_board_hash_ignores_id_and_seed_but_not_agents():
    a = make(id="a", seed=(1,))
    assert a.board_hash() == make(id="b", seed=(2,)).board_hash()
    assert a.board_hash() != make(goals=((0, 1), (0, 0))).board_hash()
    assert a.board_hash() == board_hash(GRID, a.starts, a.goals)


def test_file_errors_name_the_line(tmp_path):
    f = tmp_path / "bad.jsonl"
    good = make().to_json()
    f.write_text(good + "\n{not json\n")
    with pytest.raises(InstanceFormatError, match=r"bad.jsonl:2"):
        load_instances(f)
    f.write_text(good + "\n" + good + "\n")
    with pytest.raises(InstanceFormatError, match="twice"):
        load_instances(f)
    f.write_text(json.dumps({**make().to_dict(), "size": 4}) + "\n")
    with pytest.raises(InstanceFormatError, match="'size' is 4"):
        load_instances(f)
    f.write_text(json.dumps({"id": 1, "grid": ["..", ".."], "starts": [[0, 0.5]], "goals": [[1, 1]]}) + "\n")
    with pytest.raises(InstanceFormatError, match="integer pairs"):
        load_instances(f)
    with pytest.raises(InstanceFormatError, match="no such file"):
        load_instances(tmp_path / "missing.jsonl")


def test_user_boards_need_no_optima(tmp_path):
    f = tmp_path / "mine.jsonl"
    f.write_text(
        json.dumps({"id": "my board", "grid": ["...", "...", "..."], "starts": [[0, 0]], "goals": [[2, 2]]})
    )
    (inst,) = load_instances(f)
    assert not inst.solved and inst.needs_wait is None
