#!/usr/bin/env bash
# One run of the whole benchmark, both open issues' rows (#44 snapshots, #46 compressed traces)
# with every load check (2026-11-30, 04:29-04:41 UTC): the 2-core machine of that session
# (lscpu: "AMD EPYC", CPU family 26, 2 cores, 23 GB), build 963ceb5 (the code of a27ab17).
# Third-party tools, none committed:
# - Perfetto's trace processor v58.2, built offline by benches/build_trace_processor.sh from
#   `git archive v58.2` of github.com/google/perfetto (docs/, ui/, infra/ and test/data/
#   left out: not in the mirror, not needed), with libsqlite3-sys 0.30.1's SQLite 3.46.0
#   amalgamation and Debian 12's gn, ninja, protobuf and zlib; about 14 minutes on the 2 cores.
# - HolisticTraceAnalysis 0.5.0 from PyPI in a venv under /tmp/steptrace-bench/venv.
# - torch 2.11.0+cu130's torch/cuda/_memory_viz.py, copied from the GPU machine into the
#   ignored .corpus/torch211/ (pure Python, run without torch).
# The traces are benches/gen_trace.py's, the snapshots benches/gen_snapshot.py's
# (--reuse-addresses), all made by the script or before it on the same machine.
python3 benches/bench.py --sizes 250 --runs 7 --hta --hta-runs 3 --big 2000 \
  --perfetto /tmp/perfetto/out/tp/trace_processor_shell \
  --snapshot 1000,10000 --snapshot-reuse --snapshot-baselines \
  --memory-viz .corpus/torch211/_memory_viz.py > out.txt 2>&1
