"""The Python module against the `steptrace` command on every committed sample: the same
summary, the same tables, the same files; errors as exceptions; the GIL released."""

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import polars as pl
import pytest

import steptrace

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"
# One-rank run directories and a bare trace (a multi-rank run is analysed one rank at a time).
RUNS = [
    ("resnet18", {}),
    ("gpt_bf16", {}),
    ("gpt_bf16_ckpt", {}),
    ("libtorch_cnn", {}),
    ("ddp_mlp", {"rank": 1}),  # every rank at once: test_a_distributed_run_…
    ("resnet18/trace.json.gz", {}),
]


def cli():
    """The `steptrace` command: the wheel's, or the one named by STEPTRACE_BIN."""
    return os.environ.get("STEPTRACE_BIN") or shutil.which("steptrace") or "steptrace"


@pytest.fixture(scope="module", params=RUNS, ids=[r[0] for r in RUNS])
def run(request, tmp_path_factory):
    name, kw = request.param
    out = tmp_path_factory.mktemp("cli")
    cmd = [cli(), "analyze", "-q", "--out", str(out), str(SAMPLES / name)]
    if "rank" in kw:
        cmd[2:2] = ["--rank", str(kw["rank"])]
    subprocess.run(cmd, check=True)
    return SAMPLES / name, kw, out, steptrace.analyze(SAMPLES / name, **kw)


def test_summary_is_the_commands_summary_json(run):
    _, _, out, a = run
    assert a.summary == json.loads((out / "summary.json").read_text())


def test_tables_are_the_commands_parquet_files(run):
    _, _, out, a = run
    for name in steptrace.TABLES:
        df = getattr(a, name)
        assert isinstance(df, pl.DataFrame)
        want = pl.read_parquet(out / f"{name}.parquet")
        assert df.equals(want), name
        assert df.columns == pl.read_csv(out / f"{name}.csv", n_rows=1).columns, name


def test_write_writes_the_commands_files(run, tmp_path):
    _, _, out, a = run
    a.write(tmp_path / "py")
    ours = sorted(p.relative_to(tmp_path / "py") for p in (tmp_path / "py").rglob("*") if p.is_file())
    theirs = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert ours == theirs
    for rel in theirs:
        assert (tmp_path / "py" / rel).read_bytes() == (out / rel).read_bytes(), rel


def test_threads_do_not_change_the_result():
    one = steptrace.analyze(SAMPLES / "resnet18", threads=1)
    two = steptrace.analyze(SAMPLES / "resnet18", threads=2)
    assert one.summary == two.summary
    assert one.node_stats.equals(two.node_stats)


def test_a_bad_input_raises_the_commands_one_line():
    missing = SAMPLES / "no_such_run"
    with pytest.raises(steptrace.InputError) as e:
        steptrace.analyze(missing)
    assert isinstance(e.value, steptrace.Error)
    msg = str(e.value)
    assert "no_such_run" in msg and "\n" not in msg
    p = subprocess.run([cli(), "analyze", str(missing)], capture_output=True, text=True)
    assert p.returncode == 2
    assert msg in p.stderr


def test_not_a_trace_raises(tmp_path):
    bad = tmp_path / "trace.json"
    bad.write_text("{not json")
    with pytest.raises(steptrace.Error) as e:
        steptrace.analyze(bad)
    assert "trace.json" in str(e.value)


def test_an_unknown_table_is_a_key_error():
    a = steptrace.analyze(SAMPLES / "resnet18")
    with pytest.raises(KeyError):
        a.table("no_such_table")
    with pytest.raises(AttributeError):
        a.no_such_table


def test_the_gil_is_released_while_it_analyses():
    # A second Python thread counts while the analysis runs: with the GIL held it could not.
    ticks = []
    done = threading.Event()

    def count():
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    t0 = time.perf_counter()
    steptrace.analyze(SAMPLES / "gpt_bf16")
    t1 = time.perf_counter()
    done.set()
    t.join()
    inside = [x for x in ticks if t0 < x < t1]
    # The analysis takes tens of milliseconds at least; a held GIL would leave a gap over it.
    assert t1 - t0 > 0.01
    assert len(inside) >= 5, (len(inside), t1 - t0)


def test_to_pandas_through_polars():
    pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    a = steptrace.analyze(SAMPLES / "resnet18")
    assert len(a.node_stats.to_pandas()) == a.node_stats.height


def test_a_snapshot_alone_is_the_commands(tmp_path):
    snap = SAMPLES / "gpt_bf16" / "snapshot.pickle.gz"
    subprocess.run([cli(), "analyze", "-q", "--out", str(tmp_path / "cli"), str(snap)], check=True)
    a = steptrace.analyze(snap)
    assert isinstance(a, steptrace.SnapshotAnalysis)
    assert a.summary == json.loads((tmp_path / "cli" / "summary.json").read_text())
    for name in steptrace.SNAPSHOT_TABLES:
        assert getattr(a, name).equals(pl.read_parquet(tmp_path / "cli" / f"{name}.parquet")), name
    a.write(tmp_path / "py")
    for name in ("summary.json", "memory_timeline.csv", "top_sites.csv", "segments.csv"):
        assert (tmp_path / "py" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name


def test_a_plan_is_the_commands(tmp_path):
    run = SAMPLES / "gpt_bf16"
    subprocess.run(
        [cli(), "plan", "-q", "--budget", "80%", "--out", str(tmp_path / "cli"), str(run)], check=True
    )
    p = steptrace.plan(run, "80%")
    assert p.json == json.loads((tmp_path / "cli" / "plan.json").read_text())
    assert p.decisions.height == len(p.json["decisions"]) > 0
    p.write(tmp_path / "py", plots=False)
    for name in ("plan.json", "plan.csv"):
        assert (tmp_path / "py" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
    with pytest.raises(steptrace.PlanError):
        steptrace.plan(run, "1KiB")


def test_a_comparison_is_the_commands(tmp_path):
    runs = [SAMPLES / "gpt_bf16", SAMPLES / "gpt_bf16_ckpt"]
    r = subprocess.run(
        [cli(), "compare", "--out", str(tmp_path / "cli")] + [str(x) for x in runs],
        check=True,
        capture_output=True,
        text=True,
    )
    c = steptrace.compare(runs)
    assert c.table() in r.stdout
    assert [label for label, _ in c.runs] == ["gpt_bf16", "gpt_bf16_ckpt"]
    c.write(tmp_path / "py")
    assert (tmp_path / "py" / "compare.csv").read_bytes() == (tmp_path / "cli" / "compare.csv").read_bytes()
    assert c.frame.height == 2
    assert (tmp_path / "py" / "compare_ops.csv").read_bytes() == (tmp_path / "cli" / "compare_ops.csv").read_bytes()
    linear = c.ops.filter((c.ops["kind"] == "op") & (c.ops["name"] == "aten::linear")).row(0, named=True)
    assert (linear["gpt_bf16_count"], linear["gpt_bf16_ckpt_count"], linear["status"]) == (17, 33, "increased")


def test_a_distributed_run_gives_every_rank_as_the_command(tmp_path):
    run = SAMPLES / "ddp_mlp"
    subprocess.run([cli(), "analyze", "-q", "--out", str(tmp_path / "cli"), str(run)], check=True)
    r = steptrace.analyze(run)
    assert isinstance(r, steptrace.Ranks)
    assert r.summary == json.loads((tmp_path / "cli" / "ranks.json").read_text())
    assert r.ranks.equals(pl.read_parquet(tmp_path / "cli" / "ranks.parquet"))
    assert r.ranks.columns == pl.read_csv(tmp_path / "cli" / "ranks.csv", n_rows=1).columns
    assert r.ranks.height == 2
    assert r.rank(1).summary == json.loads((tmp_path / "cli" / "rank1" / "summary.json").read_text())
    r.write(tmp_path / "py")
    for name in ("ranks.csv", "ranks.json", "rank0/node_stats.csv", "rank1/summary.json"):
        assert (tmp_path / "py" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
