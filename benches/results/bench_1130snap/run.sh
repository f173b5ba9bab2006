#!/usr/bin/env bash
# One run of the benchmark for issue #44's snapshot rows after the history entries' grammar
# path (2026-11-30 session): this 2-core machine, build e35655c (the reader as 9b30474's,
# after the quick run below was built from it). The viewer is
# torch 2.11.0+cu130's torch/cuda/_memory_viz.py in the ignored .corpus/torch211/ (pure
# Python, third-party, not committed). The snapshots are benches/gen_snapshot.py's
# (--reuse-addresses), made before.
python3 benches/bench.py --sizes "" --snapshot 1000,10000 --snapshot-reuse --snapshot-baselines \
  --memory-viz .corpus/torch211/_memory_viz.py --runs 3 > out.txt 2>&1
# The run of 00:54 UTC (1 GB only, 5 runs, no viewer; build 9b30474) is quick.txt:
#   python3 benches/bench.py --sizes "" --snapshot 1000 --snapshot-reuse --snapshot-baselines --runs 5
