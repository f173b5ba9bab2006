#!/usr/bin/env bash
# A first run of the trace rows on the 2-core machine of 2026-11-30 (04:08-04:12 UTC; lscpu:
# "AMD EPYC", CPU family 26), build a27ab17, before the full run in ../bench_1130_full/.
python3 benches/bench.py --sizes 250 --runs 7 > out.txt 2>&1
