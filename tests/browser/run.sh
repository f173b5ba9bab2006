#!/usr/bin/env bash
# The interactive memory view in headless Chromium: report.html for the bundled resnet18
# snapshot, for the resnet18 run (trace and snapshot: the view is a section of its report),
# and for a generated snapshot of 1.1 M history entries (benches/gen_snapshot.py, its
# copies at the sample's own addresses) must draw within 2 s, show an allocation's stack on
# hover and pin it on click; the screenshots go to docs/images/ (docs/reports.md shows them).
#
#   bash tests/browser/run.sh            # needs node, npm and Chromium (CHROMIUM=/path)
# Also run by `cargo test -- --ignored` (tests/integration/memory_snapshot.rs).
set -euo pipefail
cd "$(dirname "$0")/../.."
CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
[ -n "$CHROMIUM" ] || { echo "no Chromium found (set CHROMIUM)" >&2; exit 2; }
ST=${STEPTRACE:-target/release/steptrace}
[ -x "$ST" ] || cargo build --release
(cd tests/browser && [ -d node_modules/puppeteer-core ] || npm ci --no-audit --no-fund)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
python3 benches/gen_snapshot.py sample_traces/resnet18/snapshot.pickle.gz "$W/gen.pickle" --mb 100 --reuse-addresses
"$ST" analyze sample_traces/resnet18/snapshot.pickle.gz --out "$W/r18" -q
"$ST" analyze "$W/gen.pickle" --out "$W/gen" -q
# A run with a trace and a snapshot: the view is a section of its report.html.
"$ST" analyze sample_traces/resnet18 --out "$W/run" -q
mkdir -p docs/images
node tests/browser/memory_view.mjs "$W/r18/report.html" docs/images/memory_view_resnet18.png "$CHROMIUM"
node tests/browser/memory_view.mjs "$W/gen/report.html" docs/images/memory_view_1m_entries.png "$CHROMIUM"
node tests/browser/memory_view.mjs "$W/run/report.html" "$W/run.png" "$CHROMIUM"
