"""toyrl plot / toyrl compare: grouping seeds, what is drawn (lines, bands, legend, labels), the summary table."""

import json

import numpy as np
import pytest
from matplotlib.collections import PolyCollection

from toyrl.cli import main
from toyrl.cli.args import UsageError
from toyrl.train.runlog import RunLog
from toyrl.cli.runplot import curves, format_table, group_runs, plot_runs, read_runs, summary_table

BASE = {"env": "gridworld", "estimator": "grpo", "clip": "ppo", "lr": 0.003, "steps": 4, "seed": 0, "progress": False}
GRPO = {0: [0.0, 0.2, 0.4, 0.6], 1: [0.2, 0.4, 0.6, 0.8], 2: [0.1, 0.3, 0.8, 1.0]}      # seed -> reward_mean
GIGPO = [0.5, 0.5, 1.0, 1.0]


def write(path, rewards, **config):
    log = RunLog(path, {**BASE, **config})
    for step, r in enumerate(rewards):
        log.append({"step": step, "reward_mean": r, "reward_std": r / 2, "success_rate": r})
    log.close()
    return path


@pytest.fixture
def runs(tmp_path):
    paths = [write(tmp_path / f"grpo_s{s}.jsonl", r, seed=s) for s, r in GRPO.items()]
    return paths + [write(tmp_path / "gigpo_s0.jsonl", GIGPO, estimator="gigpo")]


def test_runs_equal_but_for_the_seed_are_one_group(runs):
    groups = group_runs(read_runs(runs))
    assert [g.label for g in groups] == ["estimator=grpo", "estimator=gigpo"]
    assert [g.seeds for g in groups] == [[0, 1, 2], [0]]
    assert "seed" not in groups[0].config and groups[0].config["estimator"] == "grpo"


def test_labels_name_every_field_that_differs(tmp_path):
    logs = read_runs([write(tmp_path / "a.jsonl", GIGPO), write(tmp_path / "b.jsonl", GIGPO, lr=0.01, clip="cispo"),
                      write(tmp_path / "c.jsonl", GIGPO, seed=5)])
    assert [g.label for g in group_runs(logs)] == ["clip=ppo, lr=0.003", "clip=cispo, lr=0.01"]
    assert [g.label for g in group_runs(logs[:1])] == ["grpo"]          # one setting: its estimator


def test_dict_fields_read_as_key_value_pairs(tmp_path):
    logs = read_runs([write(tmp_path / "a.jsonl", GIGPO, env_kwargs={"map_name": "4x4"}),
                      write(tmp_path / "b.jsonl", GIGPO, env_kwargs={"map_name": "8x8", "slip": 0.1})])
    assert [g.label for g in group_runs(logs)] == ["env_kwargs={map_name=4x4}", "env_kwargs={map_name=8x8, slip=0.1}"]
    fig = plot_runs(logs[:1], ["reward_mean"])
    assert fig._suptitle.get_text() == "env=gridworld, env_kwargs={map_name=4x4}, estimator=grpo, clip=ppo, steps=4"


def test_a_headerless_log_is_labelled_by_its_file(tmp_path, runs):
    old = tmp_path / "old_run.jsonl"
    old.write_text("".join(json.dumps({"step": i, "reward_mean": 0.1 * i}) + "\n" for i in range(4)))
    groups = group_runs(read_runs([runs[3], old]))
    assert [g.label for g in groups] == ["gigpo", "old_run.jsonl"]


def test_curves_align_seeds_on_common_steps_and_smooth(runs, tmp_path):
    short = write(tmp_path / "grpo_s3.jsonl", [0.9, 0.9], seed=3)          # a killed run: 2 steps
    g, = group_runs(read_runs(runs[:3] + [short]))
    x, ys = curves(g, "reward_mean", smooth=2)
    np.testing.assert_array_equal(x, [0, 1])
    np.testing.assert_allclose(ys, [[0.0, 0.1], [0.2, 0.3], [0.1, 0.2], [0.9, 0.9]])     # trailing mean of 2


def test_plot_draws_means_bands_legend_and_labels(runs):
    fig = plot_runs(read_runs(runs), ["reward_mean", "success_rate"])
    ax, ax2 = fig.axes
    grpo, gigpo = ax.get_lines()
    np.testing.assert_allclose(grpo.get_ydata(), np.mean(list(GRPO.values()), axis=0))
    np.testing.assert_allclose(gigpo.get_ydata(), GIGPO)
    np.testing.assert_array_equal(grpo.get_xdata(), [0, 1, 2, 3])
    band, = [c for c in ax.collections if isinstance(c, PolyCollection)]
    ys = band.get_paths()[0].vertices[:, 1]
    np.testing.assert_allclose([ys.min(), ys.max()], [0.0, 1.0])             # min-max across the seeds
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "estimator=grpo (mean of 3 seeds)", "estimator=grpo (band: min-max)", "estimator=gigpo"]
    assert ax.get_xlabel() == "step" and ax.get_ylabel() == "mean reward (reward_mean)"
    assert ax2.get_ylabel() == "success rate (success_rate)"
    assert fig._suptitle.get_text() == "env=gridworld, clip=ppo, steps=4"


def test_std_band_and_smoothing_in_the_title(runs):
    fig = plot_runs(read_runs(runs[:3]), ["reward_mean"], band="std", smooth=3)
    ax, = fig.axes
    band, = [c for c in ax.collections if isinstance(c, PolyCollection)]
    last = np.array([np.mean(GRPO[s][1:]) for s in GRPO])                    # trailing mean of 3 at step 3
    assert np.isclose(band.get_paths()[0].vertices[:, 1].max(), last.mean() + last.std())
    assert "(band: ±1 std)" in ax.get_legend().get_texts()[1].get_text()
    assert fig._suptitle.get_text() == "env=gridworld, estimator=grpo, clip=ppo, steps=4  (smoothed over 3 steps)"


def test_plot_saves_a_png(runs, tmp_path):
    out = tmp_path / "fig" / "plot.png"
    plot_runs(read_runs(runs), ["reward_mean"], out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summary_table_final_auc_peak(runs):
    rows = summary_table(group_runs(read_runs(runs)), ["reward_mean"], last=2)
    grpo, gigpo = rows
    assert gigpo == {"label": "estimator=gigpo", "runs": 1, "reward_mean.final": 1.0, "reward_mean.auc": 0.75,
                     "reward_mean.peak": 1.0}
    finals = [np.mean(r[-2:]) for r in GRPO.values()]
    assert grpo["runs"] == 3 and np.isclose(grpo["reward_mean.final"], np.mean(finals))
    assert np.isclose(grpo["reward_mean.auc"], np.mean([np.mean(r) for r in GRPO.values()]))
    assert np.isclose(grpo["reward_mean.peak"], np.mean([0.6, 0.8, 1.0]))
    text = format_table(rows, ["reward_mean"]).splitlines()
    assert text[0].split() == ["reward_mean"] and text[1].split() == ["run", "runs", "final", "auc", "peak"]
    assert text[3].split() == ["estimator=gigpo", "1", "1.000", "0.750", "1.000"]


def test_missing_file_and_missing_metric_are_usage_errors(runs, tmp_path):
    with pytest.raises(UsageError, match="nope.jsonl: no such run log"):
        read_runs([tmp_path / "nope.jsonl"])
    with pytest.raises(UsageError, match="no metric 'reward_mena'; metrics: step, reward_mean"):
        plot_runs(read_runs(runs), ["reward_mena"])


def test_cli_plot_and_compare(runs, tmp_path, capsys):
    out = tmp_path / "p.png"
    assert main(["plot", *map(str, runs), "--metrics", "reward_mean,success_rate", "--out", str(out)]) == 0
    assert out.exists() and "4 run(s) in 2 group(s) (estimator=grpo; estimator=gigpo)" in capsys.readouterr().out
    assert main(["compare", *map(str, runs), "--last", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["reward_mean", "reward_std"]
    assert lines[3].split()[:5] == ["estimator=gigpo", "1", "1.000", "0.750", "1.000"]


def test_cli_plot_and_compare_warn_of_a_torn_log(runs, tmp_path, capsys):
    """A run cut off while writing its last row: that line is skipped, and each command says so in one line."""
    torn = tmp_path / "torn.jsonl"
    torn.write_text(runs[0].read_text() + '{"step": 4, "reward_me')               # no newline: the run died here
    assert main(["compare", str(torn), str(runs[1])]) == 0
    out, err = capsys.readouterr()
    assert err == f'toyrl: warning: {torn}:6: skipped a torn final line (the run was cut off): \'{{"step": 4, "reward_me\'\n'
    assert out.splitlines()[2].split()[:3] == ["grpo", "2", "0.400"]             # the 4 whole rows of each run
    assert main(["plot", str(torn), "--out", str(tmp_path / "t.png")]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("toyrl: warning: ") and "torn final line" in err
    assert main(["compare", *map(str, runs)]) == 0 and capsys.readouterr().err == ""   # whole logs: no warning


@pytest.mark.parametrize("argv,message", [
    (["plot", "missing.jsonl"], "missing.jsonl: no such run log"),
    (["compare", "RUN", "--metrics", "reward_mena"], "no metric 'reward_mena'"),
    (["plot", "RUN", "--smooth", "0"], "--smooth must be >= 1")])
def test_cli_bad_input_is_one_line_exit_2(argv, message, runs, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([str(runs[0]) if a == "RUN" else a for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and message in err and "Traceback" not in err
