#!/usr/bin/env bash
# Builds the three C++ examples of the corpus with their own CMakeLists.txt, as their READMEs
# say, against the libtorch of the machine's Python torch, into W/build/NAME. MNIST is not
# downloaded (no network on the GPU machine; make_data.py writes stand-in data). cpp/dcgan
# includes <argparse/argparse.hpp>, taken from p-ranav/argparse by fetch.sh.
#
#   bash capture/corpus/build_cpp.sh W        # from the repository root, after fetch.sh
set -euo pipefail
W=${1:?work directory}
SRC=${CORPUS_SRC:-$(pwd)/.corpus/src}
PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
ABI=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
# BUILD_ONLY: a space-separated subset of "mnist dcgan regression drn lm" (all by default).
want_build() { [ -z "${BUILD_ONLY:-}" ] || [[ " $BUILD_ONLY " == *" $1 "* ]]; }
for name in mnist dcgan regression; do
  want_build $name || continue
  cmake -S "$SRC/examples/cpp/$name" -B "$W/build/$name" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$PREFIX" -DDOWNLOAD_MNIST=OFF \
    -DCMAKE_CXX_FLAGS="-I$SRC/include -D_GLIBCXX_USE_CXX11_ABI=$ABI" >"$W/build_$name.log" 2>&1 \
    && ninja -C "$W/build/$name" >>"$W/build_$name.log" 2>&1 \
    || { echo "== build of $name failed:"; tail -n 30 "$W/build_$name.log"; exit 1; }
done
# prabhuomkar/pytorch-cpp's tutorials are sub-projects of its top-level CMakeLists.txt, which
# finds Torch (or downloads libtorch) and sets TORCH_CXX_FLAGS: the same two things here, with
# the tutorial's own CMakeLists.txt added as the sub-project, as the top level does.
# pytorch_cpp NAME TUTORIAL: one tutorial built that way into W/build/NAME.
pytorch_cpp() {
  mkdir -p "$W/build/$1_top"
  cat >"$W/build/$1_top/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.28.6 FATAL_ERROR)
project(pytorch-cpp VERSION 1.0.0 LANGUAGES CXX)
find_package(Torch REQUIRED)
set(CMAKE_CXX_FLAGS "\${CMAKE_CXX_FLAGS} \${TORCH_CXX_FLAGS} -pthread")
add_subdirectory("$SRC/pytorch-cpp/tutorials/$2" $1)
CM
  cmake -S "$W/build/$1_top" -B "$W/build/$1" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$PREFIX" -DDOWNLOAD_DATASETS=OFF >"$W/build_$1.log" 2>&1 \
    && ninja -C "$W/build/$1" >>"$W/build_$1.log" 2>&1 \
    || { echo "== build of $2 failed:"; tail -n 30 "$W/build_$1.log"; exit 1; }
}
if want_build drn; then pytorch_cpp drn intermediate/deep_residual_network; fi
if want_build lm; then pytorch_cpp lm intermediate/language_model; fi
