#!/usr/bin/env bash
# Perfetto's trace processor (v58.2, built on the 2-core machine by
# benches/build_trace_processor.sh from a v58.2 tree of github.com/google/perfetto, SQLite 3.46.0
# from the libsqlite3-sys 0.30.1 crate) on capture's form of the 255 MB benchmark trace (2 MiB
# members, written by capture's writer in bench.py's run of 2026-11-29 18:40 UTC) and on the
# annotated trace `analyze` wrote for it, each against the plain trace. 2026-11-29, 18:58 UTC.
TP=/tmp/pf/out/tp/trace_processor_shell
W=/tmp/steptrace-bench
python3 benches/perfetto_check.py $TP $W/trace_250mb.json $W/trace_250mb.capture.json.gz --same --json capture_form.json
python3 benches/perfetto_check.py $TP $W/trace_250mb.json $W/out_cgz/annotated.pt.trace.json.gz --json capture_form_annotated.json
