#!/usr/bin/env bash
# Screenshots of report.html as a user first sees it, in headless Chromium: the bundled sample
# (trace, snapshot and Execution Trace), a framework capture with gradient accumulation (HF
# BertForMaskedLM under the Trainer, sample_traces/corpus/hf_bert_accum) and a snapshot alone.
# Each page's top (the summary, its warnings and the figures they qualify) goes to
# docs/images/report_<name>.png, which docs/reports.md shows.
#
#   bash tests/browser/report_screens.sh     # needs Chromium (CHROMIUM=/path) and a build
set -euo pipefail
cd "$(dirname "$0")/../.."
CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
[ -n "$CHROMIUM" ] || { echo "no Chromium found (set CHROMIUM)" >&2; exit 2; }
ST=${STEPTRACE:-target/debug/steptrace}
[ -x "$ST" ] || cargo build
W=$(cd "$(mktemp -d)" && pwd)
trap 'rm -rf "$W"' EXIT
shot() {
  local name=$1 input=$2 height=$3
  "$ST" analyze "$input" --out "$W/$name" -q
  "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,"$height" \
    --screenshot="$W/$name.png" "file://$W/$name/report.html" 2>/dev/null
  mkdir -p docs/images
  cp "$W/$name.png" "docs/images/report_$name.png"
  echo "docs/images/report_$name.png"
}
shot resnet18 sample_traces/resnet18 1100
shot hf_bert_accum sample_traces/corpus/hf_bert_accum 1100
shot snapshot_alone sample_traces/resnet18/snapshot.pickle.gz 1000
"$CHROMIUM" --version
