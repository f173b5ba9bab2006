#!/usr/bin/env bash
# Builds Perfetto's trace_processor_shell from a Perfetto source tree with no network, for
# benches/perfetto_check.py (issue 19). Perfetto's own build fetches its toolchain and
# dependencies (tools/install-build-deps); this uses the system's instead:
#   apt-get install generate-ninja ninja-build g++ libprotobuf-dev libprotoc-dev \
#       protobuf-compiler zlib1g-dev
# (Debian 12's packages; checked with Perfetto v58.2), and a SQLite amalgamation of 3.41.2 or
# later (Perfetto refuses older ones; Debian 12's is 3.40.1): the folder holding sqlite3.c,
# sqlite3.h and sqlite3ext.h, e.g. the copy the libsqlite3-sys crate bundles (0.40.0 carries
# 3.54.1; `cargo fetch` of a project depending on it with feature "bundled" brings it into
# ~/.cargo/registry/src/*/libsqlite3-sys-*/sqlite3).
#
#   bash benches/build_trace_processor.sh PERFETTO_SRC SQLITE_DIR [OUT_DIR]
#
# PERFETTO_SRC: a Perfetto tree at a release tag, e.g. from a clone of
# github.com/google/perfetto: `git archive v58.2 | tar -x -C DIR`. It is edited in place: the
# release config's -O3 and -g become -O1 and -g0, to shorten the compile (about 38 minutes on
# two cores even so). The optimisation level changes how fast it imports, not what; no -O3
# build was made here to compare.
# Optional parts that need sources the system does not have (zstd, re2, LLVM's demangler, the
# ETM and Instruments importers, linenoise, the percentile extension, httpd) are switched off;
# JSON import (plain and gzip) stays on. The percentile extension's source (SQLite's own tree,
# not the amalgamation) is taken out of the sqlite target's sources, as it is switched off.
set -euo pipefail
src=${1:?Perfetto source tree}
sqlite=$(cd "${2:?folder of the SQLite amalgamation}" && pwd)
out=${3:-out/tp}
cd "$src"
mkdir -p buildtools/sqlite
cp "$sqlite/sqlite3.c" "$sqlite/sqlite3.h" "$sqlite/sqlite3ext.h" buildtools/sqlite/
sed -i '/"sqlite_src\/ext\/misc\/percentile.c",/d' buildtools/BUILD.gn
sed -i 's/^\(\s*\)"-g",$/\1"-g0",/' gn/standalone/BUILD.gn
sed -i 's/^\(\s*\)cflags = \[ "-O3" \]/\1cflags = [ "-O1" ]/' gn/standalone/BUILD.gn
mkdir -p "$out"
cat > "$out/args.gn" <<'EOF'
is_debug = false
is_clang = false
is_system_compiler = true
is_hermetic_clang = false
use_custom_libcxx = false
skip_buildtools_check = true
monolithic_binaries = true
enable_perfetto_stderr_crash_dump = false
perfetto_use_system_protobuf = true
perfetto_use_system_sqlite = false
perfetto_use_system_zlib = true
enable_perfetto_zstd = false
enable_perfetto_re2 = false
enable_perfetto_llvm_demangle = false
enable_perfetto_trace_processor_percentile = false
enable_perfetto_trace_processor_linenoise = false
enable_perfetto_trace_processor_mac_instruments = false
enable_perfetto_etm_importer = false
enable_perfetto_winscope = false
enable_perfetto_trace_processor_httpd = false
enable_perfetto_x64_cpu_opt = false
enable_perfetto_unittests = false
enable_perfetto_integration_tests = false
enable_perfetto_benchmarks = false
enable_perfetto_fuzzers = false
enable_perfetto_ui = false
enable_perfetto_heapprofd = false
enable_perfetto_traced_perf = false
EOF
gn gen "$out"
ninja -C "$out" trace_processor_shell
echo "$src/$out/trace_processor_shell"
