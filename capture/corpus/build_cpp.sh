#!/usr/bin/env bash
# Builds the three C++ examples of the corpus with their own CMakeLists.txt, as their READMEs
# say, against the libtorch of the machine's Python torch, into W/build/NAME. MNIST is not
# downloaded (no network on the GPU machine; make_data.py writes stand-in data). cpp/dcgan
# includes <argparse/argparse.hpp>, taken from p-ranav/argparse by fetch.sh.
#
#   bash capture/corpus/build_cpp.sh W        # from the repository root, after fetch.sh
set -euo pipefail
W=${1:?work directory}
SRC=$(pwd)/.corpus/src
PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
ABI=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
for name in mnist dcgan regression; do
  cmake -S "$SRC/examples/cpp/$name" -B "$W/build/$name" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$PREFIX" -DDOWNLOAD_MNIST=OFF \
    -DCMAKE_CXX_FLAGS="-I$SRC/include -D_GLIBCXX_USE_CXX11_ABI=$ABI" >"$W/build_$name.log" 2>&1 \
    && ninja -C "$W/build/$name" >>"$W/build_$name.log" 2>&1 \
    || { echo "== build of $name failed:"; tail -n 30 "$W/build_$name.log"; exit 1; }
done
