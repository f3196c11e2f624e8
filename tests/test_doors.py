"""The Doors env: hand-worked steps, the instruction, parsing, recurring anchor states, the planner."""
import numpy as np
import pytest

from toyrl.envs.core import VOID
from toyrl.envs.doors import COLOURS, DOORS, SYSTEM, DoorsCore, instruction
from toyrl.envs.experts import expert_actions, process_scores


def core_on(lights, **kw):
    c = DoorsCore(len(lights), **kw)
    c.reset(np.array(lights))
    return c


def test_instruction_states_the_rule_and_every_reply():
    assert instruction(2) == ("Each room has a coloured light. A red light opens the left door, a green light the "
                              "right door. Reply with one action: go[left] or go[right].")
    assert SYSTEM == instruction(3) and "a blue light the middle door" in SYSTEM and "go[middle]" in SYSTEM


def test_a_hand_worked_episode():
    c = core_on([[2, 0, 1]], rooms=3, max_turns=5)              # blue, red, green: middle, left, right
    assert c.render_text(0) == "Room 1 of 3: the light is blue."
    _, r, term, trunc, info = c.step(np.array([0]))             # left under blue: locked, stays
    assert (r[0], term[0], trunc[0], info["right"][0]) == (0.0, False, False, False)
    assert c.render_text(0) == "That door is locked. Room 1 of 3: the light is blue."
    c.step(np.array([2]))                                       # middle: room 2 (red)
    assert c.render_text(0) == "Room 2 of 3: the light is red."
    _, r, *_ = c.step(np.array([VOID]))
    assert c.render_text(0).startswith("No door opened. Room 2") and r[0] == 0.0
    c.step(np.array([0]))
    _, r, term, trunc, info = c.step(np.array([1]))             # green: right, out on turn 5
    assert (r[0], term[0], trunc[0], info["success"][0]) == (1.0, True, False, True)
    assert c.render_text(0) == "You are out."


def test_truncated_after_max_turns_and_done_copies_stand_still():
    c = core_on([[0, 0], [1, 1]], rooms=2, max_turns=2)
    c.step(np.array([0, 0]))                                    # copy 0 right, copy 1 wrong
    _, r, term, trunc, _ = c.step(np.array([0, 0]))
    assert list(r) == [1.0, 0.0] and list(term) == [True, False] and list(trunc) == [False, True]
    _, r, *_ = c.step(np.array([1, 1]))
    assert list(r) == [0.0, 0.0] and list(c.state["room"]) == [2, 0]


def test_parse_and_action_text_round_trip():
    c = DoorsCore(1, colours=3)
    for a in range(3):
        assert c.parse_action(c.action_text(a)) == a
    assert c.parse_action("I go[ Middle ] now") == 2
    assert c.parse_action("go[back]") is None                  # the fourth door needs colours=4
    assert DoorsCore(1, colours=4).parse_action("go[back]") == 3
    assert c.parse_action("pull[1]") is None and c.parse_action("left") is None


def test_states_recur_by_room_within_a_task():
    c = core_on([[1, 2, 0]] * 3, rooms=3, max_turns=6)
    k0 = c.state_keys()
    assert len(set(k0)) == 1
    c.step(np.array([1, 0, 1]))                                 # rows 0 and 2 pass, row 1 stays
    k1 = c.state_keys()
    assert k1[1] == k0[1] and k1[0] == k1[2] != k0[0]
    other = core_on([[1, 2, 1]])
    assert other.state_keys()[0] != k0[0]                      # another task: another anchor


def test_planner_and_progress():
    c = core_on([[2, 1], [0, 1]], rooms=2)
    assert list(expert_actions(c)) == [2, 0]
    assert c.oracle_actions(0) == [2, 1]
    c.step(expert_actions(c))
    assert list(expert_actions(c)) == [1, 1] and list(process_scores(c)) == [1.0, 1.0]


@pytest.mark.parametrize("kw, msg", [(dict(rooms=0), "rooms >= 1"), (dict(colours=5), "colours <= 4"),
                                     (dict(rooms=3, max_turns=2), "max_turns must be >= rooms")])
def test_bad_settings_fail_first(kw, msg):
    with pytest.raises(ValueError, match=msg):
        DoorsCore(2, **kw)


def test_tasks_are_checked():
    with pytest.raises(ValueError, match=r"colour must lie in \[0, 3\)"):
        core_on([[0, 3, 1]])
    assert len(COLOURS) == len(DOORS) == 4


def test_reply_tokens_caps_a_text_policy_and_is_refused_for_a_toy_one():
    from toyrl.train import TrainConfig, Trainer
    tr = Trainer(TrainConfig(env="doors", policy="tinylm", system=SYSTEM, reply_tokens=5, steps=1, progress=False,
                             prompts_per_step=1, group_size=2))
    assert tr.codec.max_new == 5
    with pytest.raises(ValueError, match="reply_tokens"):
        Trainer(TrainConfig(env="doors", policy="tiny", reply_tokens=5))
