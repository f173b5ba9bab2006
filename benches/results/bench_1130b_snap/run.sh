#!/usr/bin/env bash
# One run of the benchmark for issue #44's snapshot rows (2026-11-30, 04:02-04:11 UTC), the
# 2-core machine of that session (lscpu: "AMD EPYC", CPU family 26, 2 cores, 23 GB), build
# a27ab17 (the reader as the 00:54 and 01:29 runs in ../bench_1130snap/ measured it, on the
# machine of that session). The viewer is torch 2.11.0+cu130's torch/cuda/_memory_viz.py,
# copied from the GPU machine into the ignored .corpus/torch211/ (pure Python, third-party,
# not committed). The snapshots are benches/gen_snapshot.py's (--reuse-addresses), made
# before the run (1 GB) and by it (10 GB).
python3 benches/bench.py --sizes "" --snapshot 1000,10000 --snapshot-reuse --snapshot-baselines \
  --memory-viz .corpus/torch211/_memory_viz.py --runs 3 > out.txt 2>&1
