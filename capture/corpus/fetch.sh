#!/usr/bin/env bash
# Copies the corpus programs, unchanged, from local git mirrors of their public repositories
# into .corpus/src (ignored by git; carried to the GPU machine). Each line names the
# repository, the commit and the paths taken. Nothing of theirs is committed here.
#
#   bash capture/corpus/fetch.sh EXAMPLES.git NANOGPT.git ARGPARSE.git PYTORCH_CPP.git
set -euo pipefail
EXAMPLES_GIT=${1:?git dir of github.com/pytorch/examples}
NANOGPT_GIT=${2:?git dir of github.com/karpathy/nanoGPT}
ARGPARSE_GIT=${3:?git dir of github.com/p-ranav/argparse (a header cpp/dcgan includes)}
PYTORCH_CPP_GIT=${4:?git dir of github.com/prabhuomkar/pytorch-cpp}
PYTORCH_CPP_COMMIT=4c4d060f94f4b06cf2ce8cf43fa48b320e319507
EXAMPLES_COMMIT=77f55b912142e11fcfdf5b530231fb9c52f181e8
ARGPARSE_COMMIT=d924b84eba1f0f0adf38b20b7b4829f6f65b6570
NANOGPT_COMMIT=3adf61e154c3fe3fca428ad6bc3818b27a3b8291
# word_language_model/data/wikitext-2/train.txt is absent from the stored snapshot: make_data.py
# writes a stand-in from valid.txt and test.txt.
DST=.corpus/src
rm -rf "$DST" && mkdir -p "$DST"
take() { # git dir, commit, path in repo, destination
  mkdir -p "$(dirname "$DST/$4")"
  git --git-dir="$1" show "$2:$3" >"$DST/$4"
}
for f in cpp/mnist/mnist.cpp cpp/mnist/CMakeLists.txt cpp/dcgan/dcgan.cpp cpp/dcgan/CMakeLists.txt \
         cpp/regression/regression.cpp cpp/regression/CMakeLists.txt \
         mnist/main.py dcgan/main.py \
         word_language_model/main.py word_language_model/model.py word_language_model/data.py \
         word_language_model/data/wikitext-2/valid.txt \
         word_language_model/data/wikitext-2/test.txt \
         distributed/ddp-tutorial-series/multigpu_torchrun.py distributed/ddp-tutorial-series/datautils.py \
         distributed/FSDP2/example.py distributed/FSDP2/model.py distributed/FSDP2/utils.py \
         distributed/FSDP2/checkpoint.py time_sequence_prediction/train.py imagenet/main.py; do
  take "$EXAMPLES_GIT" $EXAMPLES_COMMIT "$f" "examples/$f"
done
for f in bench.py train.py model.py configurator.py; do
  take "$NANOGPT_GIT" $NANOGPT_COMMIT "$f" "nanoGPT/$f"
done
# The libtorch ResNet on CIFAR-10 whose DataLoader runs in the main thread.
D=tutorials/intermediate/deep_residual_network
for f in CMakeLists.txt src/main.cpp src/cifar10.cpp src/residual_block.cpp src/transform.cpp \
         include/residual_block.h include/resnet.h include/cifar10.h include/transform.h; do
  take "$PYTORCH_CPP_GIT" $PYTORCH_CPP_COMMIT "$D/$f" "pytorch-cpp/$D/$f"
done
# The libtorch LSTM language model (its window can end inside a step: issue 74).
D=tutorials/intermediate/language_model
for f in CMakeLists.txt src/main.cpp src/rnn_lm.cpp src/corpus.cpp src/dictionary.cpp \
         include/rnn_lm.h include/corpus.h include/dictionary.h; do
  take "$PYTORCH_CPP_GIT" $PYTORCH_CPP_COMMIT "$D/$f" "pytorch-cpp/$D/$f"
done
take "$ARGPARSE_GIT" $ARGPARSE_COMMIT include/argparse/argparse.hpp include/argparse/argparse.hpp
echo "copied into $DST: $(find "$DST" -type f | wc -l) files"
