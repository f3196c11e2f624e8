"""Where stored runs replay (toyrl.viz.replay): this machine's build, the comparison with a stamp, and the line a
lesson prints when the replay check cannot run here."""
from toyrl.viz import replay


def test_build_names_the_cpu_the_kernels_and_torch():
    import torch
    here = replay.build()
    assert set(here) == set(replay.KEYS) and here["torch"] == torch.__version__ and here["cpu"]
    assert replay.same_build(here) and replay.same_build({**here, "other": "ignored"})


def test_another_build_skips_the_replay_check_and_says_why():
    here = replay.build()
    elsewhere = {**here, "cpu": "Some Other CPU"}
    assert not replay.same_build(elsewhere) and not replay.same_build({})
    note = replay.replay_note(elsewhere)
    assert "Some Other CPU" in note and here["cpu"] in note and "skipped" in note and "population" in note
    assert "checked" in replay.replay_note(here) and "skipped" not in replay.replay_note(here)
    assert set(replay.SHIPPED) == set(replay.KEYS)
