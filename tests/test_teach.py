"""The learner on the policy's own answers: reading a written plan, the teacher's labels, a real step."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envengineer.mapf.instance import Instance
from envengineer.mapf.prompt import build_messages
from envengineer.training.dataset import plan_response, target_response
from envengineer.training.teach import TeachSettings, teach, teach_row, written_plan

# SPEC §2.3: A0 (0,0) -> (0,2), A1 (0,2) -> (0,0) on an open 3x3; optimal SoC 6, makespan 4
SWAP = Instance("swap", ("...", "...", "..."), ((0, 0), (0, 2)), ((0, 2), (0, 0)), 6, 4, 4)


def _cells(start, moves):
    steps = {"UP": (-1, 0), "DOWN": (1, 0), "LEFT": (0, -1), "RIGHT": (0, 1), "WAIT": (0, 0)}
    out = [start]
    for m in moves:
        out.append((out[-1][0] + steps[m][0], out[-1][1] + steps[m][1]))
    return out


def test_written_plan_reads_scratchpad_moves_and_stops_at_a_misnamed_line():
    text = "<think>\nA0 (0,0) down right RIGHT (0,1) down left right RIGHT (0,2)\nA2 (0,2) LEFT\n</think>"
    assert written_plan(text, scratchpad=True) == ([["RIGHT", "RIGHT"]], False)
    assert written_plan("no think block", scratchpad=True) == ([], False)
    assert written_plan("<think>\nA0 (0,0) down DOWN", scratchpad=True) == ([["DOWN"]], True)
    assert written_plan("<think>\nA0 (0,0) down DOWN\n", scratchpad=True) == ([["DOWN"]], False)


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("A01 :\n<>/thinkanswerUPDOWNLEFTRIGHTWAIT()")), max_size=120),
    st.lists(
        st.lists(st.sampled_from(["UP", "DOWN", "LEFT", "RIGHT", "WAIT"]), max_size=5), min_size=2, max_size=2
    ),
    st.floats(0, 1),
)
def test_written_plan_reads_back_what_was_written_and_the_teacher_completes_it(text, plan, cut):
    """Any text reads as action lines; an answer reads back as written, cut off as a prefix of it; where
    the teacher keeps the whole prefix, its completion begins with it and the validator finds it optimal."""
    from envengineer.mapf.instance import ACTIONS
    from envengineer.mapf.solver.teacher import label_instance
    from envengineer.mapf.validator import format_answer, validate_plan

    for scratchpad in (True, False):
        lines, open_last = written_plan(text, scratchpad=scratchpad)
        assert all(w in ACTIONS for line in lines for w in line) and not (open_last and not lines)
    answer = format_answer(plan)
    assert written_plan(answer, scratchpad=False) == (plan, False)
    lines, open_last = written_plan(answer[: round(cut * len(answer))], scratchpad=False)
    assert len(lines) <= len(plan)
    for x, line in enumerate(lines):  # whole lines as written; the one being written, a prefix of it
        assert line == (plan[x][: len(line)] if open_last and x == len(lines) - 1 else plan[x])
    lab = label_instance(SWAP, lines, open_last=open_last)
    completion = [list(a) for a in lab.completion.plan]
    assert validate_plan(SWAP, completion).optimal  # the teacher's plan is always valid and optimal
    if lab.fatal is None:  # the whole prefix kept: the completion begins with it
        assert lab.kept == lab.total
        for x, line in enumerate(lines):
            padded = completion[x] + ["WAIT"] * len(line)
            assert padded[: len(line)] == line


def test_the_label_keeps_the_policy_s_own_first_line_and_corrects_the_collision():
    own = [_cells((0, 0), ["RIGHT", "RIGHT"]), _cells((0, 2), ["LEFT", "LEFT"])]  # collide at t = 1
    response = plan_response(SWAP, own, "solver_free")
    row = teach_row(SWAP, response, target="solver_free", ended=True)
    first_line = response.split("\n")[1]
    assert row.target.split("\n")[1] == first_line  # the policy's A0 line stands
    # the first difference is A1's first move: the teacher's detour DOWN instead of LEFT
    a1 = response.index("\nA1") + 1
    assert a1 < row.start < response.index("\n", a1)
    assert response[row.start :].startswith("LEFT") and row.target[row.start :].startswith("DOWN")
    assert (row.kept, row.fatal, row.done) == (3, True, False)
    from envengineer.mapf.validator import validate

    assert validate(SWAP, row.target).optimal


def test_an_optimal_answer_that_ended_teaches_nothing_and_one_cut_off_teaches_its_end():
    response = target_response(SWAP, "solver_free")
    row = teach_row(SWAP, response, target="solver_free", ended=True)
    assert row.done and row.start == len(row.target) and row.fatal is None
    cut = teach_row(SWAP, response[:40], target="solver_free", ended=False)
    assert not cut.done and cut.start == 40 and cut.target == response


def test_a_suboptimal_first_move_is_corrected_at_that_move():
    own = [_cells((0, 0), ["WAIT", "RIGHT", "RIGHT"]), _cells((0, 2), ["DOWN", "LEFT", "LEFT", "UP"])]
    response = plan_response(SWAP, own, "solver_moves")
    row = teach_row(SWAP, response, target="solver_moves", ended=True)
    assert (row.kept, row.fatal) == (0, False)
    assert response[row.start :].startswith("WAIT") and row.target[row.start :].startswith("RIGHT")


@pytest.mark.slow
def test_teach_runs_real_steps_on_a_tiny_policy(tmp_path):
    import torch
    from safetensors.torch import load_file

    from envengineer.mapf.generator import generate_cell
    from envengineer.models.small_policy import init_policy

    policy = init_policy(tmp_path / "policy", size="tiny", seed=0)
    boards = generate_cell(num_agents=2, size=3, count=8, wait_count=4, seed=7, split="train", id_prefix="t")
    cfg = TeachSettings(
        minutes=5, max_steps=2, rollout_batch=4, steps_per_rollout=1, batch_size=4, max_new_tokens=24
    )
    metrics = teach(str(policy), boards, out_dir=tmp_path / "out", settings=cfg)
    assert metrics["steps"] == 2 and metrics["rollins"] == 2
    assert all(r["loss"] is not None and r["already_right"] == 0.0 for r in metrics["history"])
    before = load_file(str(policy / "model.safetensors"))
    after = load_file(str(tmp_path / "out" / "checkpoint" / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["kind"] == "teach"


def test_a_loop_round_with_the_teach_learner_calls_the_teacher(tmp_path):
    from pathlib import Path

    from envengineer.loop.components import Components
    from envengineer.loop.experiment import load_experiment
    from envengineer.loop.launch import check_launch
    from envengineer.loop.rundir import read_json
    from envengineer.loop.runner import run_experiment
    from small_sets import small_overrides, write_small_sets

    sets = write_small_sets(tmp_path / "sets", 41)
    path = Path(__file__).resolve().parents[1] / "experiments" / "cpu" / "policy-main-fixed.yaml"
    small = {
        **small_overrides(sets),
        "rounds": 1,
        "warm_start.enabled": False,
        "training.learner": "teach",
        "training.teach": {"minutes": 2.0, "rollout_batch": 8},
        "training.max_steps": 7,
    }
    exp = load_experiment(path, small)
    assert check_launch(exp) == []
    calls = []

    def teacher(model, instances, *, out_dir, settings, seed, max_steps):
        calls.append((len(instances), settings.minutes, settings.rollout_batch, max_steps))
        return {"checkpoint": str(out_dir / "checkpoint"), "steps": 7, "seconds": 0.0, "metrics": {}}

    def must_not_train(*a, **k):
        raise AssertionError("the GRPO trainer ran under learner: teach")

    def evaluator(model, instances, *, out_dir, **_):
        from envengineer.evaluation import evaluate
        from envengineer.models import load_backend

        return evaluate(load_backend("scripted", "greedy", instances=instances), instances, out_dir=out_dir)

    run = tmp_path / "run"
    run.mkdir()
    (run / "validation_set.jsonl").write_bytes(sets["validation"].read_bytes())
    comps = Components(trainer=must_not_train, teacher=teacher, evaluator=evaluator)
    run_experiment(exp, run, components=comps)
    assert calls == [(8, 2.0, 8, 7)]
    record = read_json(run / "round_00" / "train" / "metrics.json")
    assert record["preset"] == "teach" and record["steps"] == 7 and record["planned_steps"] == 7
    launched = load_experiment(path, {**small, "launch.stages": "subprocess"})
    assert any("learner 'teach'" in p for p in check_launch(launched))


def test_an_expert_row_puts_the_loss_on_the_whole_answer(tmp_path):
    from transformers import AutoTokenizer

    from envengineer.models.hf import HFBackend
    from envengineer.models.small_policy import init_policy
    from envengineer.training.teach import _expert_row

    policy = init_policy(tmp_path / "policy", size="tiny", seed=0)
    tokenizer = AutoTokenizer.from_pretrained(policy)
    backend = HFBackend.from_model(object(), tokenizer)
    ids, first = _expert_row(backend, SWAP, "solver_free", "compact")
    prompt = tokenizer(backend.render(build_messages(SWAP, style="compact")), add_special_tokens=False)
    assert first == len(prompt["input_ids"]) and ids[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(ids[first:], skip_special_tokens=True) == target_response(SWAP, "solver_free")


def test_labels_spell_plans_as_the_warm_start_does_wherever_the_kept_steps_allow():
    canonical = target_response(SWAP, "solver_free")
    # the policy's own first line is the warm-start's: the label is the warm-start's target itself
    own = [_cells((0, 0), ["RIGHT", "RIGHT"]), _cells((0, 2), ["LEFT", "LEFT"])]
    assert written_plan(canonical, scratchpad=True)[0][0] == ["RIGHT", "RIGHT"]
    row = teach_row(SWAP, plan_response(SWAP, own, "solver_free"), target="solver_free", ended=True)
    assert row.target == canonical
    # another optimal first line (A0 around, A1 straight): kept as written, the rest the teacher's
    other = [_cells((0, 0), ["DOWN", "RIGHT", "RIGHT", "UP"]), _cells((0, 2), ["LEFT", "UP"])]
    row = teach_row(SWAP, plan_response(SWAP, other, "solver_free"), target="solver_free", ended=True)
    lines, _ = written_plan(row.target, scratchpad=True)
    assert lines[0] == ["DOWN", "RIGHT", "RIGHT", "UP"] and lines[1] == ["LEFT", "LEFT"]
    assert row.target != canonical and (row.kept, row.fatal) == (6, True)
