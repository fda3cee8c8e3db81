"""Policy formats: each format's tokenizer, its embedding initialisation, its SFT target and its record."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from envengineer.errors import ConfigError  # noqa: E402
from envengineer.mapf.benchmark import load_benchmark  # noqa: E402
from envengineer.mapf.instance import Instance  # noqa: E402
from envengineer.mapf.parser import parse_plan  # noqa: E402
from envengineer.mapf.policies import optimal_paths  # noqa: E402
from envengineer.mapf.prompt import build_messages  # noqa: E402
from envengineer.mapf.solver import paths_to_actions  # noqa: E402
from envengineer.mapf.validator import validate, validate_plan  # noqa: E402
from envengineer.models.small_policy import (  # noqa: E402
    DEFAULT_FORMAT,
    FORMAT_KEY,
    POLICY_FORMATS,
    build_tokenizer,
    init_policy,
    named_policy_path,
    policy_format_of,
)
from envengineer.training.dataset import SFT_TARGETS, target_response, wait_instead_of_detours  # noqa: E402
from envengineer.training.presets import SFTPreset, load_preset  # noqa: E402


def _sample(step: int = 13) -> list[Instance]:
    return load_benchmark()[::step]


@pytest.mark.parametrize(
    ("cells", "times", "free"),
    [
        ("atomic", False, False),
        ("split", False, False),
        ("split", True, False),
        ("split", False, True),
        ("split", True, True),
    ],
)
def test_every_prompt_and_every_target_round_trips(cells: str, times: bool, free: bool) -> None:
    tokenizer = build_tokenizer(cells=cells, times=times, free_moves=free, wait=free)
    for inst in _sample():
        texts = [m["content"] for style in ("full", "compact") for m in build_messages(inst, style=style)]
        texts += [target_response(inst, target) for target in SFT_TARGETS]
        for text in texts:
            ids = tokenizer.encode(text)
            assert tokenizer.unk_token_id not in ids, (inst.id, text[:40])
            assert tokenizer.decode(ids) == text, (inst.id, text[:40])


def test_a_cell_is_one_token_or_a_row_and_a_column() -> None:
    atomic, split = build_tokenizer(cells="atomic"), build_tokenizer(cells="split")
    assert atomic.convert_ids_to_tokens(atomic.encode("H (0,1) (15,15)")) == ["H", " (0,1)", " (15,15)"]
    assert split.convert_ids_to_tokens(split.encode("H (0,1) (15,15)")) == ["H", " (0", ",1)", " (15", ",15)"]
    assert split.convert_ids_to_tokens(split.encode("A0 (3,4) UP")) == ["A", "0", " (3", ",4)", " UP"]
    # out-of-range cells and stray pieces fall back to characters and still round-trip
    for text in ("(16,3) (2,20)", "(3, 4)", ",4) (5", "x(1,2)y"):
        assert split.decode(split.encode(text)) == text
    with pytest.raises(ConfigError, match="cell spelling"):
        build_tokenizer(cells="hex")


def test_a_time_is_one_token_and_adds_pieces_after_all_others() -> None:
    split, timed = build_tokenizer(cells="split"), build_tokenizer(cells="split", times=True)
    assert timed.convert_ids_to_tokens(timed.encode("A1 (2,0) t1 UP (1,0) t12 WAIT")) == [
        "A", "1", " (2", ",0)", " t1", " UP", " (1", ",0)", " t12", " WAIT",
    ]  # fmt: skip
    # beyond t63, and a time glued to a longer word, fall back to characters and still round-trip
    assert timed.convert_ids_to_tokens(timed.encode(" t64")) == [" ", "t", "6", "4"]
    for text in (" t64", " t1x", "at1", " t05"):
        assert timed.decode(timed.encode(text)) == text
    # the other pieces keep the ids they have without times, so the formats share them
    vocab, base = timed.get_vocab(), split.get_vocab()
    assert all(vocab[p] == i for p, i in base.items())
    assert sorted(set(vocab) - set(base)) == sorted(f" t{t}" for t in range(64))


def test_a_free_move_is_one_token_and_adds_pieces_after_all_others() -> None:
    split, free = build_tokenizer(cells="split"), POLICY_FORMATS["free-moves"].tokenizer()
    assert free.convert_ids_to_tokens(free.encode("A0 (2,0) up right RIGHT (2,1) left WAIT")) == [
        "A", "0", " (2", ",0)", " up", " right", " RIGHT", " (2", ",1)", " left", " WAIT",
    ]  # fmt: skip
    # without their space, or glued to a longer word, they stay letters and still round-trip
    assert free.convert_ids_to_tokens(free.encode("up")) == ["u", "p"]
    assert " up" not in free.convert_ids_to_tokens(free.encode(" upper"))
    for text in ("up", " upper", "xdown", " rights", "A0 up\nright"):
        assert free.decode(free.encode(text)) == text
    vocab, base = free.get_vocab(), split.get_vocab()
    assert all(vocab[p] == i for p, i in base.items())
    assert sorted(set(vocab) - set(base)) == [" down", " right", " up"]  # " left" is a prompt word


def test_the_joint_check_adds_wait_after_every_other_piece() -> None:
    free, joint = POLICY_FORMATS["free-moves"].tokenizer(), POLICY_FORMATS["joint-moves"].tokenizer()
    assert joint.convert_ids_to_tokens(joint.encode("A1 (0,1) up wait WAIT")) == [
        "A", "1", " (0", ",1)", " up", " wait", " WAIT",
    ]  # fmt: skip
    assert joint.decode(joint.encode(" waiting wait")) == " waiting wait"
    vocab, base = joint.get_vocab(), free.get_vocab()
    assert all(vocab[p] == i for p, i in base.items())
    assert sorted(set(vocab) - set(base)) == [" wait"]


def test_v1_tokenizer_is_the_one_older_policies_carry() -> None:
    # Older folders carry their own tokenizer.json; the v1 spelling must not drift from it: the ids of
    # the first pieces and of a few cells, as the first release wrote them.
    tok = build_tokenizer(cells="atomic")
    assert len(tok) == 859
    pieces = ["<|pad|>", "<|end|>", "<answer>", "(0,0)", " (0,0)", " (15,15)", "UP", " UP"]
    assert tok.convert_tokens_to_ids(pieces) == [0, 5, 6, 347, 348, 858, 323, 324]  # fixed numbers
    vocab = tok.get_vocab()
    assert vocab["(15,15)"] + 1 == vocab[" (15,15)"] == len(tok) - 1


def test_solver_moves_answer_copies_its_scratchpad_and_is_optimal() -> None:
    for inst in _sample(7):
        text = target_response(inst, "solver_moves")
        assert validate(inst, text).optimal, inst.id
        think = text.split("<think>\n")[1].split("\n</think>")[0].splitlines()
        plan = parse_plan(text, inst.num_agents).plan
        assert len(think) == inst.num_agents
        for i, line in enumerate(think):
            words = line.split()
            assert words[0] == f"A{i}"
            cells, moves = words[1::2], words[2::2]
            assert moves == list(plan[i]), (inst.id, line)
            assert cells[0] == f"({inst.starts[i][0]},{inst.starts[i][1]})"
            if moves:
                assert cells[-1] == f"({inst.goals[i][0]},{inst.goals[i][1]})"


def _scratchpad_lines_beside_solver_moves(target: str) -> Iterator[tuple[Instance, str, str]]:
    """Per sampled instance and agent: its ``solver_moves`` scratchpad line and its ``target`` line,
    once the two targets are checked to answer the same optimal plan."""
    for inst in _sample(7):
        moves, other = target_response(inst, "solver_moves"), target_response(inst, target)
        assert other.split("</think>")[1] == moves.split("</think>")[1]  # the same answer
        assert validate(inst, other).optimal, inst.id
        for line_m, line_o in zip(moves.splitlines()[1:], other.splitlines()[1:], strict=True):
            if not line_m.startswith("A"):
                break
            yield inst, line_m, line_o


def test_solver_timed_is_solver_moves_with_each_steps_time() -> None:
    for _, line_m, line_t in _scratchpad_lines_beside_solver_moves("solver_timed"):
        words = line_t.split()
        times = words[2::3]  # A0 cell [tT MOVE cell]...
        assert times == [f"t{t}" for t in range(1, len(times) + 1)], line_t
        assert [w for w in words if w not in times] == line_m.split()


def test_solver_free_lists_each_cells_free_moves_before_the_move() -> None:
    # by hand: 3x3, a hole at (1,1); A0 from (0,0) to (2,0) goes down the left column
    inst = Instance("x", ("...", ".H.", "..."), ((0, 0),), ((2, 0),), 2, 2, 2)
    think = target_response(inst, "solver_free").split("</think>")[0]
    assert think == "<think>\nA0 (0,0) down right DOWN (1,0) up down DOWN (2,0)\n"
    for inst, line_m, line_f in _scratchpad_lines_beside_solver_moves("solver_free"):
        words = line_f.split()
        assert [w for w in words if not w.islower()] == line_m.split()
        at = [k for k, w in enumerate(words) if w.startswith("(")]
        for here, there in pairwise(at):
            *listed, move = words[here + 1 : there]
            free = [
                m for m, cell in _options(_cell(words[here])).items() if m != "wait" and inst.is_free(cell)
            ]
            assert listed == free, (inst.id, line_f)
            assert move == "WAIT" or move.lower() in listed, (inst.id, line_f)


def test_solver_joint_leaves_out_what_clashes_with_the_agents_before() -> None:
    # by hand: a 3x3 board; A0 (1,0) -> (1,1), A1 (1,1) -> (1,2), one step each.
    inst = Instance("x", ("...", "...", "..."), ((1, 0), (1, 1)), ((1, 1), (1, 2)), 2, 1, 2)
    think = target_response(inst, "solver_joint").split("</think>")[0]
    # A0 has no one before it: its free moves and wait. A1 may not go left (a swap with A0) nor wait
    # (A0 arrives on its cell at t=1).
    assert think == "<think>\nA0 (1,0) up down right wait RIGHT (1,1)\nA1 (1,1) up down right RIGHT (1,2)\n"
    for _, line_m, line_j in _scratchpad_lines_beside_solver_moves("solver_joint"):
        assert [w for w in line_j.split() if not w.islower()] == line_m.split()
    # Against a simulation of the earlier agents on a sample: what is listed is exactly what keeps clear.
    for inst in _sample(17):
        walked: list[list[tuple[int, int]]] = []  # the cells of the agents written so far, from their lines
        for line in target_response(inst, "solver_joint").split("</think>")[0].splitlines()[1:]:
            words = line.split()[1:]
            at = [k for k, w in enumerate(words) if w.startswith("(")]
            cells = [_cell(words[k]) for k in at]
            for t, (here, there) in enumerate(pairwise(at)):
                *listed, move = words[here + 1 : there]
                options = _options(cells[t])
                expected = [
                    m
                    for m, cell in options.items()
                    if (m == "wait" or inst.is_free(cell)) and _keeps_clear(walked, t, cells[t], cell)
                ]
                assert listed == expected, (inst.id, line)
                assert move.lower() in listed and options[move.lower()] == cells[t + 1], (inst.id, line)
            walked.append(cells)


def test_solver_timed_joint_copies_the_cells_ahead_by_their_time() -> None:
    # by hand, the board above: A1 first copies where A0 stands at t=1, (1,1), then checks against it
    inst = Instance("x", ("...", "...", "..."), ((1, 0), (1, 1)), ((1, 1), (1, 2)), 2, 1, 2)
    think = target_response(inst, "solver_timed_joint").split("</think>")[0]
    assert think == (
        "<think>\nA0 t0 (1,0) up down right wait RIGHT t1 (1,1)\n"
        "A1 t0 (1,1) (1,1) up down right RIGHT t1 (1,2)\n"
    )
    # On a sample: without its times and copied cells each line is the solver_joint line, and each copied
    # cell is what the earlier agent's line holds at the next time (its goal once its line has ended).
    for inst in _sample(17):
        joint = target_response(inst, "solver_joint").split("</think>")[0].splitlines()[1:]
        timed = target_response(inst, "solver_timed_joint").split("</think>")[0].splitlines()[1:]
        earlier: list[list[tuple[int, int]]] = []  # each earlier line's cells, read by their time tokens
        for i, (line_j, line_t) in enumerate(zip(joint, timed, strict=True)):
            name, *words = line_t.split()
            at = [k for k, w in enumerate(words) if w[0] == "t" and w[1:].isdigit()]
            assert [words[k] for k in at] == [f"t{t}" for t in range(len(at))], line_t
            kept = [name, words[1]]
            for t, (here, there) in enumerate(pairwise(at)):
                ahead, rest = words[here + 2 : here + 2 + i], words[here + 2 + i : there]
                assert [_cell(w) for w in ahead] == [p[min(t + 1, len(p) - 1)] for p in earlier], line_t
                kept += [*rest, words[there + 1]]
            assert at[-1] == len(words) - 2 and " ".join(kept) == line_j, (inst.id, line_t)
            earlier.append([_cell(words[k + 1]) for k in at])


def test_solver_timed_checks_writes_the_free_moves_then_the_joint_check() -> None:
    inst = Instance("x", ("...", "...", "..."), ((1, 0), (1, 1)), ((1, 1), (1, 2)), 2, 1, 2)
    think = target_response(inst, "solver_timed_checks").split("</think>")[0]
    assert think == (
        "<think>\nA0 t0 (1,0) up down right RIGHT t1 (1,1)\n"
        "A1 t0 (1,1) up down left right (1,1) up down right RIGHT t1 (1,2)\n"
    )
    # On a sample: each step is its cell's free moves and then, after the first agent, timed-joint's step
    # On a sample: each step is its cell's free moves, then (after the first agent) timed-joint's check
    for inst in _sample(17):
        joint = target_response(inst, "solver_timed_joint").split("</think>")[0].splitlines()[1:]
        checks = target_response(inst, "solver_timed_checks").split("</think>")[0].splitlines()[1:]
        for i, (line_j, line_c) in enumerate(zip(joint, checks, strict=True)):
            steps_j, steps_c = (re.split(r" (?=t\d+ )", line) for line in (line_j, line_c))
            assert steps_j[0] == steps_c[0] == f"A{i}" and steps_j[-1] == steps_c[-1], line_c
            for step_j, step_c in zip(steps_j[1:-1], steps_c[1:-1], strict=True):
                (time, cell, *check_j, move), (*same, move_c) = step_j.split(), step_c.split()
                assert same[:2] == [time, cell] and move_c == move, line_c
                free = [m for m, c in _options(_cell(cell)).items() if m != "wait" and inst.is_free(c)]
                if i == 0:
                    assert same[2:] == free and check_j == [*free, "wait"], line_c
                else:
                    assert same[2:] == [*free, *check_j], line_c


def _cell(word: str) -> tuple[int, int]:
    r, c = (int(x) for x in word.strip("()").split(","))
    return r, c


def _options(here: tuple[int, int]) -> dict[str, tuple[int, int]]:
    r, c = here
    return {"up": (r - 1, c), "down": (r + 1, c), "left": (r, c - 1), "right": (r, c + 1), "wait": (r, c)}


def _keeps_clear(
    walked: list[list[tuple[int, int]]], t: int, here: tuple[int, int], there: tuple[int, int]
) -> bool:
    """No agent before is on ``there`` at t + 1 nor goes from ``there`` to ``here`` (it stays on its goal)."""

    def where(path: list[tuple[int, int]], time: int) -> tuple[int, int]:
        return path[min(time, len(path) - 1)]

    return all(
        where(p, t + 1) != there and not (where(p, t) == there and where(p, t + 1) == here) for p in walked
    )


def test_a_detour_becomes_waits_only_where_the_plan_stays_valid() -> None:
    # 3x3 board. A1 walks along row 0 from (0,0) through (0,1), A0's start: A0 must step aside.
    grid = ("...",) * 3
    inst = Instance("x", grid, ((0, 1), (0, 0)), ((0, 2), (1, 2)), 6, 3, 4)
    dodge = [(0, 1), (1, 1), (0, 1), (0, 2)]  # down and back up: waiting at (0,1) would collide at t=1
    a1 = [(0, 0), (0, 1), (0, 2), (1, 2)]
    assert validate_plan(inst, paths_to_actions([dodge, a1])).valid
    assert wait_instead_of_detours(inst, [dodge, a1]) == [dodge, a1]
    # A lone agent's detour costs what waiting costs: it becomes waits.
    alone = Instance("y", grid, ((0, 0),), ((0, 1),), 1, 1, 1)
    assert wait_instead_of_detours(alone, [[(0, 0), (1, 0), (0, 0), (0, 1)]]) == [
        [(0, 0), (0, 0), (0, 0), (0, 1)]
    ]
    # A detour that is not needed (A1 keeps to row 2) becomes waits beside another agent too.
    free = Instance("z", grid, ((0, 1), (2, 0)), ((0, 2), (2, 2)), 5, 3, 3)
    wander, row2 = [(0, 1), (0, 0), (0, 1), (0, 2)], [(2, 0), (2, 1), (2, 2)]
    assert validate_plan(free, paths_to_actions([wander, row2])).valid
    assert wait_instead_of_detours(free, [wander, row2]) == [[(0, 1)] * 3 + [(0, 2)], row2]


def test_wait_instead_of_detours_never_costs_more_nor_breaks_a_plan() -> None:
    for inst in _sample(5):
        paths = optimal_paths(inst)  # the shipped plan of a board beyond the solver's default budget
        fixed = wait_instead_of_detours(inst, paths)
        verdict = validate_plan(inst, paths_to_actions(fixed))
        assert verdict.valid and verdict.optimal, inst.id


@pytest.mark.parametrize("name", list(POLICY_FORMATS))
def test_every_format_is_recorded_and_read_back(name: str, tmp_path: Path) -> None:
    folder = init_policy(tmp_path / name, policy_format=name)
    assert json.loads((folder / "config.json").read_text())[FORMAT_KEY] == name
    assert policy_format_of(folder) == POLICY_FORMATS[name]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    assert tok.get_vocab() == POLICY_FORMATS[name].tokenizer().get_vocab()


def test_coordinate_embeddings_are_a_row_plus_a_column(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    def embeddings(name: str) -> tuple:
        folder = init_policy(tmp_path / name, policy_format=name)
        return load_file(folder / "model.safetensors")["model.embed_tokens.weight"], build_tokenizer(
            cells=POLICY_FORMATS[name].cells
        ).get_vocab()

    def corners(weight, vocab, space: str = "") -> torch.Tensor:
        e = {rc: weight[vocab[f"{space}({rc[0]},{rc[1]})"]] for rc in ((1, 2), (3, 4), (1, 4), (3, 2))}
        return e[(1, 2)] + e[(3, 4)] - e[(1, 4)] - e[(3, 2)]

    coordinates = [
        n for n, f in POLICY_FORMATS.items() if f.embeddings == "coordinates" and f.cells == "atomic"
    ]
    randoms = [n for n, f in POLICY_FORMATS.items() if f.embeddings == "random"]
    weight, vocab = embeddings(coordinates[0])
    assert torch.allclose(corners(weight, vocab), torch.zeros(weight.shape[1]), atol=1e-6)
    assert torch.allclose(corners(weight, vocab, " "), torch.zeros(weight.shape[1]), atol=1e-6)
    # neighbouring rows start closer than distant ones, and the spread is the initialiser's
    up = torch.dist(weight[vocab["(4,4)"]], weight[vocab["(3,4)"]])
    far = torch.dist(weight[vocab["(4,4)"]], weight[vocab["(12,4)"]])
    assert up < far
    cells = torch.stack([weight[vocab[f"({r},{c})"]] for r in range(16) for c in range(16)])
    assert 0.01 < float(cells.std()) < 0.04
    weight, vocab = embeddings(randoms[0])
    assert corners(weight, vocab).abs().max() > 1e-3


def test_sft_target_null_takes_the_policys_scratchpad(tmp_path: Path) -> None:
    preset = load_preset("sft-small", "sft")
    assert preset.target is None
    for name, spec in POLICY_FORMATS.items():
        folder = init_policy(tmp_path / name, policy_format=name)
        assert preset.resolve_target(str(folder)) == spec.scratchpad
    assert SFTPreset.model_validate({"target": "solver"}).resolve_target(str(folder)) == "solver"
    assert SFTPreset.model_validate({"target": None}).resolve_target("some/hub-id") == "solver"


def test_a_folder_made_before_formats_keeps_v1(tmp_path: Path) -> None:
    folder = init_policy(tmp_path / "old", policy_format="v1")
    config = json.loads((folder / "config.json").read_text())
    del config[FORMAT_KEY]  # what a policy made before formats were recorded holds
    (folder / "config.json").write_text(json.dumps(config))
    assert policy_format_of(folder) == POLICY_FORMATS["v1"]
    assert load_preset("sft-small", "sft").resolve_target(str(folder)) == "solver_path"
    from envengineer.models.hf import HFBackend

    assert HFBackend(str(folder)).prompt_style == "compact"


def test_unknown_format_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown policy format"):
        init_policy(tmp_path / "x", policy_format="v9")
    folder = init_policy(tmp_path / "p")
    config = json.loads((folder / "config.json").read_text())
    config[FORMAT_KEY] = "v9"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="unknown policy format"):
        policy_format_of(folder)


def test_the_cache_key_names_the_format(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVENGINEER_CACHE", str(tmp_path))
    old = tmp_path / "policies" / "tiny-seed0"  # where an older release cached policy:tiny
    init_policy(old, policy_format="v1")
    path = named_policy_path("policy:tiny")
    assert path == tmp_path / "policies" / f"tiny-{DEFAULT_FORMAT}-seed0" != old
    assert policy_format_of(path) == POLICY_FORMATS[DEFAULT_FORMAT]
    assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()
    assert policy_format_of(old) == POLICY_FORMATS["v1"]  # the older folder is left as it was


def test_the_small_presets_budgets_fit_the_default_formats_plans() -> None:
    # sft-small trains on the whole benchmark's shapes (5 agents on 10x10 at most); grpo-small's rounds on
    # up to 3 agents on 8x8; the demo's evaluation answers the benchmark's 3-agent row (up to 10x10)
    fmt = POLICY_FORMATS[DEFAULT_FORMAT]
    tokenizer = fmt.tokenizer()
    longest: dict[tuple[int, int], int] = {}
    for inst in load_benchmark():
        n = len(tokenizer.encode(target_response(inst, fmt.scratchpad))) + 1  # and the end token
        key = (inst.num_agents, inst.size)
        longest[key] = max(longest.get(key, 0), n)
    sft_budget = load_preset("sft-small", "sft").max_completion_length
    grpo_budget = load_preset("grpo-small", "grpo").max_completion_length
    assert max(longest.values()) <= sft_budget < max(longest.values()) + 64
    assert max(n for (agents, size), n in longest.items() if agents == 3 and size <= 8) <= grpo_budget
    # ... and on two agents up to 10x10, what grpo-small's rounds draw by default (the benchmark has none)
    from envengineer.mapf.generator import generate_cell

    two = [
        len(tokenizer.encode(target_response(inst, fmt.scratchpad))) + 1
        for size in (9, 10)
        for inst in generate_cell(num_agents=2, size=size, count=60, wait_count=30, seed=7, split="train")
    ]
    assert max(two) <= grpo_budget
    from envengineer.loop.demo import demo_experiment

    three = max(n for (agents, _), n in longest.items() if agents == 3)
    assert three <= demo_experiment().evaluation.max_new_tokens
