"""The command line: listing, benchmarks in quick mode, one-line errors with exit code 2."""
import subprocess
import sys


from toyrl.cli import main


def run(*args):
    return subprocess.run([sys.executable, "-m", "toyrl", *args], capture_output=True, text=True, timeout=300)


def test_envs_lists_every_env():
    out = run("envs")
    assert out.returncode == 0
    from toyrl.envs import ENVS
    for name, (gym_id, _) in ENVS.items():
        assert name in out.stdout and gym_id in out.stdout


def test_unknown_benchmark_is_one_line_exit_2():
    out = run("bench", "nope")
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "valid benchmarks: envs" in out.stderr
    assert "Traceback" not in out.stderr


def test_bench_envs_quick(capsys):
    assert main(["bench", "envs", "--quick", "--num-envs", "64"]) == 0
    out = capsys.readouterr().out
    assert "speed-up:" in out and "GridCore" in out


def test_bench_credit_quick_prints_every_row():
    out = run("bench", "credit", "--quick", "--reps", "1", "--rounds", "1", "--only", "gigpo", "gigpo:dense", "grpo", "gae")
    assert out.returncode == 0, out.stderr
    assert "torch threads 1" in out.stdout and "malloc" in out.stdout
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()[2:]}
    assert set(rows) == {"gigpo", "gigpo:dense", "grpo", "gae"}
    for r in rows.values():
        assert float(r[2]) > 0 and float(r[-1].rstrip("x")) > 0          # vectorized ms and speed-up
    bad = run("bench", "credit", "--only", "nope")
    assert bad.returncode == 2 and "unknown estimator 'nope'" in bad.stderr and "Traceback" not in bad.stderr
