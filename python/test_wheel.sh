#!/usr/bin/env bash
# Builds the steptrace wheel from this checkout, installs it into a fresh virtual environment
# (packages from the registry by name) and runs the pytest suite against the command it
# installs. CI runs it after the Rust tests, reusing their build (the dev profile):
#
#     bash python/test_wheel.sh [PROFILE]        # dev (default) or release
#
# The wheel holds the `steptrace._native` module and the `steptrace` command, both built from
# this tree; the folder it is written to is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${1:-dev}
target=${CARGO_TARGET_DIR:-target}
work="$target/python"
rm -rf "$work"
mkdir -p "$work"
python3 -m venv "$work/build-env"
"$work/build-env/bin/pip" install -q "maturin>=1.5,<2"
# The command, built beside the module and carried in the wheel's scripts.
cargo build -q --profile "$profile" -p steptrace
dir=$([ "$profile" = dev ] && echo debug || echo "$profile")
mkdir -p python/steptrace.data/scripts
cp "$target/$dir/steptrace" python/steptrace.data/scripts/steptrace
"$work/build-env/bin/maturin" build -q -m python/Cargo.toml --profile "$profile" -o "$work/wheels"
python3 -m venv "$work/env"
# nbclient, ipykernel and matplotlib run examples/analyze.ipynb (python/tests/test_notebook.py).
"$work/env/bin/pip" install -q "$work"/wheels/steptrace-*.whl pytest nbclient nbformat ipykernel matplotlib
# The suite runs the installed command: the environment's bin first on PATH.
PATH="$work/env/bin:$PATH" "$work/env/bin/python" -m pytest -q python/tests
echo "wheel: $(ls "$work"/wheels/steptrace-*.whl)"
