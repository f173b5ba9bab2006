#!/usr/bin/env bash
# One run of the benchmark for issue #44's snapshot rows, with torch's own viewer: this 2-core
# machine, 2026-11-29 22:20-22:34 UTC, build 4f3cb47 (the reader's code as 2e4917e's).
# .corpus/torch211/_memory_viz.py is torch 2.11.0+cu130's torch/cuda/_memory_viz.py, copied
# from the GPU machine (pure Python; not committed: third-party code), run with this machine's
# Python 3.11.7. The snapshots are benches/gen_snapshot.py's (--reuse-addresses), made before.
python3 benches/bench.py --sizes "" --snapshot 1000,10000 --snapshot-reuse --snapshot-baselines \
  --memory-viz .corpus/torch211/_memory_viz.py --runs 3 > bench.txt 2>&1
