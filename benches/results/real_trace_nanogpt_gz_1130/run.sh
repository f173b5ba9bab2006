#!/usr/bin/env bash
# #46 on a real trace, again (2026-11-30, 05:32 UTC): nanoGPT's train.py (github.com/karpathy/nanoGPT
# at 3adf61e1, `git archive` into the ignored .corpus/src/nanoGPT) run unchanged on the GPU
# machine under `steptrace capture` (release binary of 61218b0's reading code, xz'd into the
# ignored .corpus/bin/steptrace_cur.xz), by the script of 2026-11-29:
#   bash benches/results/real_trace_nanogpt_gz_1129/run.sh 20     # on the GPU machine, carry .corpus/src .corpus/bin
# It writes capture.txt, files.txt and times.txt (here gpu_host_times.txt: the GPU host's CPU,
# -j 2 and -j 16) and brings back capture's trace.json.gz. On the 2-core machine, from that file:
#   zcat members.capture.json.gz > plain.json; gzip -9 -c plain.json > one.pt.trace.json.gz
#   python3 benches/results/bench_1129paired/paired.py 15 default plain.json one.pt.trace.json.gz members.capture.json.gz
#   python3 benches/results/bench_1129paired/paired.py 15 lean plain.json one.pt.trace.json.gz members.capture.json.gz
# (2core_paired.txt). Outputs of the three inputs differ only where they name the input
# (graph_profile.json's "model", the activations plot's title) and in the annotated trace's
# form (.json against .json.gz).
