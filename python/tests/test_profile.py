"""`steptrace.profile` without a GPU or torch: the run directory and manifest it writes, its
ranks, its deference to `steptrace capture`, and that it leaves the process as it found it.
(With torch, on the GPU, it is checked against `steptrace capture` of the same program by
capture/corpus/profile_proof.sh; results in capture/corpus/results/profile_proof.jsonl.)"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import steptrace

ROOT = Path(__file__).resolve().parents[2]


def python(code, env=None, check=True):
    """Runs `code` in a fresh interpreter (the profiler's state is per process)."""
    full = dict(os.environ)
    full.pop("RANK", None)
    full.pop("WORLD_SIZE", None)
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=full, check=check, capture_output=True, text=True
    )


def manifest(d):
    return json.loads((Path(d) / "manifest.json").read_text())


def test_the_block_writes_a_manifest_that_says_what_it_lacks(tmp_path):
    python(
        f"""
        import steptrace
        with steptrace.profile(output_dir={str(tmp_path)!r}) as p:
            for _ in range(6):
                p.step()
        """
    )
    m = manifest(tmp_path)
    assert m["mode"] == "python" and m["exit"]["code"] == 0
    assert not m["completed"]
    assert "rank 0: the program never imported torch" in m["incomplete_reasons"]
    assert any("in-process by steptrace.profile" in n for n in m["notes"])
    assert m["schedule"] == {"skip_first": 1, "wait": 1, "warmup": 1, "active": 3, "repeat": 1}
    assert (tmp_path / "shim.json").is_file()
    # analyze reads the folder and says there is no trace.
    with pytest.raises(steptrace.InputError):
        steptrace.analyze(tmp_path)


def test_the_decorator_returns_the_functions_value_and_records_each_call(tmp_path):
    out = python(
        f"""
        import sys, steptrace
        before = list(sys.meta_path)

        @steptrace.profile(output_dir={str(tmp_path)!r}, active=2, memory=False)
        def train(n):
            for _ in range(n):
                steptrace.step()
            return n * 2

        print(train(4), train(3), sys.meta_path == before)
        """
    ).stdout.split()
    assert out == ["8", "6", "True"]
    m = manifest(tmp_path)
    assert m["schedule"]["active"] == 2
    assert m["record"] == {"trace": True, "memory": False, "exec_trace": True, "nvtx": False}


def test_a_block_that_raises_still_writes_and_says_so(tmp_path):
    r = python(
        f"""
        import steptrace
        with steptrace.profile(output_dir={str(tmp_path)!r}):
            raise KeyError("boom")
        """,
        check=False,
    )
    assert r.returncode == 1 and "KeyError" in r.stderr
    m = manifest(tmp_path)
    assert m["exit"]["code"] == 1
    assert any("raised KeyError" in n for n in m["notes"])


def test_disabled_records_nothing(tmp_path):
    d = tmp_path / "never"
    python(
        f"""
        import steptrace
        with steptrace.profile(enabled=False, output_dir={str(d)!r}) as p:
            p.step()
        steptrace.step()
        """
    )
    assert not d.exists()


def test_under_capture_it_marks_the_launchers_steps(tmp_path):
    # The launcher's shim, as `steptrace capture` loads it: `steptrace_capture` with a state.
    d = tmp_path / "not_written"
    out = python(
        f"""
        import sys, types, steptrace
        marks = []
        fake = types.ModuleType("steptrace_capture")
        fake._S = object()
        fake.step = lambda: marks.append("step")
        fake.explicit_steps = lambda: marks.append("explicit")
        sys.modules["steptrace_capture"] = fake
        with steptrace.profile(output_dir={str(d)!r}) as p:
            p.step()
            steptrace.step()
        print(",".join(marks))
        """
    ).stdout.strip()
    assert out == "explicit,step,step"
    assert not d.exists()


def test_ranks_share_one_folder_and_rank_0_writes_the_manifest(tmp_path):
    code = f"""
        import time, steptrace
        with steptrace.profile(output_dir={str(tmp_path)!r}, rank_wait_s=60) as p:
            p.step()
            time.sleep(float(__import__("os").environ["DELAY"]))
        """
    env = {"WORLD_SIZE": "2", "MASTER_ADDR": "localhost"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)],
            env={**os.environ, **env, "RANK": str(r), "DELAY": str(d)},
        )
        for r, d in ((0, 0), (1, 1.5))
    ]
    assert [p.wait() for p in procs] == [0, 0]
    m = manifest(tmp_path)
    assert m["world_size"] == 2
    assert sorted(r["rank"] for r in m["ranks"]) == [0, 1]
    assert {"shim_rank0.json", "shim_rank1.json"} <= set(os.listdir(tmp_path))


def test_rank_0_waits_only_so_long_and_names_the_rank_it_lacks(tmp_path):
    python(
        f"""
        import steptrace
        with steptrace.profile(output_dir={str(tmp_path)!r}, rank_wait_s=0.5):
            pass
        """,
        env={"RANK": "0", "WORLD_SIZE": "2"},
    )
    m = manifest(tmp_path)
    assert any("rank(s) 1 had not finished" in n for n in m["notes"])


def test_a_second_run_leaves_nothing_of_the_first(tmp_path):
    (tmp_path / "trace.json.gz").write_bytes(b"stale")
    (tmp_path / "shim_rank3.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("the user's")
    python(
        f"""
        import steptrace
        with steptrace.profile(output_dir={str(tmp_path)!r}):
            pass
        """
    )
    names = set(os.listdir(tmp_path))
    assert "trace.json.gz" not in names and "shim_rank3.json" not in names
    assert "notes.txt" in names


def test_the_shim_it_runs_is_the_launchers():
    assert steptrace._native.capture_shim_source() == (ROOT / "capture/shim_py/sitecustomize.py").read_text()


def test_options_are_checked():
    with pytest.raises(ValueError):
        steptrace.profile(active=0)
    with pytest.raises(ValueError):
        steptrace.profile(wait=-1)
