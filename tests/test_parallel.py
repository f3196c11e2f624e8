"""toyrl.lab.parallel.run_tasks: job order, the in-process and process-pool paths, errors, and (where Ray
is installed) identical sweep results and logs on a local Ray instance and on the process pool."""
import importlib.util
import json

import pytest

from toyrl.cli import main
from toyrl.lab.parallel import BACKENDS, iter_tasks, run_tasks

HAS_RAY = importlib.util.find_spec("ray") is not None


def test_in_process_keeps_job_order_and_reports_each_result():
    seen = []
    out = run_tasks(abs, [-3, 1, -2], workers=1, progress=False, on_result=lambda i, r: seen.append((i, r)))
    assert out == [3, 1, 2]
    assert seen == [(0, 3), (1, 1), (2, 2)]


def test_process_pool_returns_results_in_job_order():
    jobs = list(range(-6, 0))
    seen = {}
    out = run_tasks(abs, jobs, workers=2, progress=False, on_result=seen.__setitem__)
    assert out == [6, 5, 4, 3, 2, 1]
    assert seen == dict(enumerate(out))


def test_empty_jobs_and_bad_arguments():
    assert run_tasks(abs, [], workers=2, progress=False) == []
    with pytest.raises(ValueError, match="unknown backend 'dask'"):
        run_tasks(abs, [1], backend="dask")
    with pytest.raises(ValueError, match="needs backend='ray'"):
        run_tasks(abs, [1], address="auto")
    assert BACKENDS == ("process", "ray")


def test_cli_rejects_an_unknown_backend(capsys):
    with pytest.raises(SystemExit) as e:
        main(["sweep", "--steps", "1", "--backend", "dask"])
    assert e.value.code == 2 and "invalid choice: 'dask'" in capsys.readouterr().err


def _logs(d):
    """Every run log of a sweep directory (header first), timing fields and the header's start time dropped (they
    are the only ones allowed to differ)."""
    out = {}
    for p in sorted(d.glob("*.jsonl")):
        rows = [json.loads(line) for line in p.read_text().splitlines()]
        out[p.name] = [{k: v for k, v in r.items() if not k.startswith("time_") and k != "started"} for r in rows]
    return out


NO_RAY = "Ray is not installed (optional extra: pip install 'toyrl[ray]')"


@pytest.mark.skipif(not HAS_RAY, reason=NO_RAY)
def test_ray_stopped_early_shuts_down_the_instance_it_started_without_waiting_for_its_tasks():
    """Runs before the module's shared instance exists: the runner starts a local one, and leaving the loop early
    shuts the instance down, its two 60 s tasks cancelled rather than waited for."""
    import time
    import ray
    assert not ray.is_initialized()
    tasks = iter_tasks(time.sleep, [0.0, 60.0, 60.0], workers=2, backend="ray", progress=False)
    assert next(tasks) == (0, None)
    t0 = time.monotonic()
    tasks.close()
    assert not ray.is_initialized() and time.monotonic() - t0 < 30


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance (2 CPUs) for the Ray tests; run_tasks joins it instead of starting its own."""
    import ray
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.skipif(not HAS_RAY, reason=NO_RAY)
def test_ray_sweep_matches_the_process_pool(tmp_path, capsys, local_ray):
    args = ["sweep", "--env", "bandit_chain", "--env-kw", "layout_seed=0", "--estimator", "grpo", "rloo",
            "--seeds", "3", "--steps", "3", "--workers", "2"]
    assert main(args + ["--out-dir", str(tmp_path / "process")]) == 0
    assert main(args + ["--backend", "ray", "--out-dir", str(tmp_path / "ray")]) == 0
    printed = capsys.readouterr().out
    assert "backend ray" in printed and "backend process" in printed
    a, b = _logs(tmp_path / "process"), _logs(tmp_path / "ray")
    assert len(a) == 2 and all(len(rows) == 1 + 3 for rows in a.values())         # the header, 3 rows
    assert a == b                                       # same jobs, same seeds: the same logs, row for row
    assert a["bandit_chain__grpo__ppo__seed3.jsonl"] != a["bandit_chain__rloo__ppo__seed3.jsonl"]


@pytest.mark.skipif(not HAS_RAY, reason=NO_RAY)
def test_ray_run_tasks_keeps_job_order(local_ray):
    seen = []
    assert run_tasks(abs, [-2, -1, 5], workers=2, backend="ray", progress=False,
                     on_result=lambda i, r: seen.append(i)) == [2, 1, 5]
    assert sorted(seen) == [0, 1, 2]
    assert local_ray.is_initialized()                   # a running instance is joined, not shut down


@pytest.mark.skipif(not HAS_RAY, reason=NO_RAY)
def test_ray_scorecard_slice_matches_the_process_pool(local_ray):
    from toyrl.lab.scorecard import run_scorecard
    kw = dict(seeds=2, cells=1, steps=2, diag_every=2, workers=2, progress=False)
    a, b = run_scorecard(**kw), run_scorecard(backend="ray", **kw)
    assert a["cells"] == b["cells"] and b["meta"]["backend"] == "ray"
    assert a["cells"][0]["final_success"]["n"] == 2
