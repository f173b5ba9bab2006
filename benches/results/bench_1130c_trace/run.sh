#!/usr/bin/env bash
# The benchmark's trace rows with every load check (#46 and issue 19's targets), after the
# heap's huge pages were made to take on glibc 2.36 (22a0b8d; 2026-11-30, the 2-core machine of
# that session: lscpu "AMD EPYC", CPU family 26, 2 cores, 23 GB). Third-party tools as in
# ../bench_1130_full/run.sh (Perfetto's trace processor v58.2 built offline, HolisticTraceAnalysis
# 0.5.0 in a venv). The snapshot rows (#44, resolved) were not run: the reading of snapshots does
# not put the heap on huge pages, so the change does not touch them. Run at 06:27-06:32 UTC
# (out.txt) and again, by the same command, at 06:33-06:38 UTC (second_run/out.txt).
python3 benches/bench.py --sizes 250 --runs 7 --hta --hta-runs 3 --big 2000 \
  --perfetto /tmp/perfetto/out/tp/trace_processor_shell > out.txt 2>&1
