#!/usr/bin/env bash
# The benchmark's trace rows with every load check (#46 and issue 19's targets), with the gzip
# writers' CRC-32 by crc32fast (d990594) and the heap's huge pages retried until glibc takes them
# (since 22a0b8d), 07:00-07:05 UTC (2026-11-30, the 2-core machine of
# that session: lscpu "AMD EPYC", CPU family 26, 2 cores, 23 GB). Third-party tools as in
# ../bench_1130_full/run.sh (Perfetto's trace processor v58.2 built offline, HolisticTraceAnalysis
# 0.5.0 in a venv). The snapshot rows (#44, resolved) were not run: the reading of snapshots does
# not put the heap on huge pages, so the change does not touch them.
python3 benches/bench.py --sizes 250 --runs 7 --hta --hta-runs 3 --big 2000 \
  --perfetto /tmp/perfetto/out/tp/trace_processor_shell > out.txt 2>&1
