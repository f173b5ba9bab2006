"""Stand-in data for the corpus programs, written where each program looks for its data (the
GPU machine has no network, so nothing can be downloaded):

- MNIST in its own IDX format (random pixels and labels), for pytorch/examples mnist (Python,
  through torchvision, which skips the download when the raw files exist) and cpp/mnist and
  cpp/dcgan (torch::data::datasets::MNIST);
- token files for nanoGPT (uint16, as data/openwebtext/prepare.py writes them);
- wikitext-2 train.txt for word_language_model (absent from the stored snapshot): the
  repository's own valid.txt and test.txt, concatenated; the same text as Lightning's demo
  WikiText2 (`fw/data/wikitext-2.txt`, the file its download would write);
- Penn Treebank's train.txt for pytorch-cpp's language_model (wikitext-2's valid.txt);
- CIFAR-10 in its binary format (random pixels and labels) for prabhuomkar/pytorch-cpp's
  deep_residual_network, which reads ../../../../data/cifar10/ from where it runs;
- time_sequence_prediction's traindata.pt as its generate_sine_wave.py writes it (the same
  formula and seed), with 40 time steps instead of 1,000 so that a step's trace stays small.

    python3 make_data.py WORKDIR
"""

import os
import struct
import sys

import numpy as np


def idx_images(path, n, rng):
    with open(path, "wb") as f:
        f.write(struct.pack(">IIII", 2051, n, 28, 28))
        f.write(rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8).tobytes())


def idx_labels(path, n, rng):
    with open(path, "wb") as f:
        f.write(struct.pack(">II", 2049, n))
        f.write(rng.integers(0, 10, size=n, dtype=np.uint8).tobytes())


def mnist(folder, n_train, n_test, rng):
    os.makedirs(folder, exist_ok=True)
    idx_images(os.path.join(folder, "train-images-idx3-ubyte"), n_train, rng)
    idx_labels(os.path.join(folder, "train-labels-idx1-ubyte"), n_train, rng)
    idx_images(os.path.join(folder, "t10k-images-idx3-ubyte"), n_test, rng)
    idx_labels(os.path.join(folder, "t10k-labels-idx1-ubyte"), n_test, rng)


def main():
    work = sys.argv[1]
    rng = np.random.default_rng(0)
    # Python mnist reads ../data/MNIST/raw relative to its folder.
    mnist(os.path.join(work, "examples", "data", "MNIST", "raw"), 12800, 2000, rng)
    # cpp/mnist reads ./data, cpp/dcgan ./mnist (relative to where they run); libtorch's
    # reader insists on MNIST's own sizes.
    mnist(os.path.join(work, "cppdata", "data"), 60000, 10000, rng)
    os.symlink("data", os.path.join(work, "cppdata", "mnist"))
    tok = os.path.join(work, "nanoGPT", "data", "openwebtext")
    os.makedirs(tok, exist_ok=True)
    for name, n in (("train.bin", 4_000_000), ("val.bin", 400_000)):
        rng.integers(0, 50257, size=n, dtype=np.uint16).tofile(os.path.join(tok, name))
    wt = os.path.join(work, "examples", "word_language_model", "data", "wikitext-2")
    with open(os.path.join(wt, "train.txt"), "w") as out:
        for part in ("valid.txt", "test.txt"):
            with open(os.path.join(wt, part)) as f:
                out.write(f.read())
    fw = os.path.join(work, "fw", "data")
    os.makedirs(fw, exist_ok=True)
    with open(os.path.join(fw, "wikitext-2.txt"), "w") as out, open(os.path.join(wt, "train.txt")) as f:
        out.write(f.read())
    # pytorch-cpp's language_model reads ../../../../data/penntreebank/train.txt: the same
    # wikitext text stands in for Penn Treebank.
    ptb = os.path.join(work, "cppdrn", "data", "penntreebank")
    os.makedirs(ptb, exist_ok=True)
    with open(os.path.join(ptb, "train.txt"), "w") as out, open(os.path.join(wt, "valid.txt")) as f:
        out.write(f.read())
    cifar = os.path.join(work, "cppdrn", "data", "cifar10")
    os.makedirs(cifar, exist_ok=True)
    os.makedirs(os.path.join(work, "cppdrn", "a", "b", "c", "d"), exist_ok=True)
    for name in ["data_batch_%d.bin" % i for i in range(1, 6)] + ["test_batch.bin"]:
        rows = np.empty((10000, 3073), dtype=np.uint8)
        rows[:, 0] = rng.integers(0, 10, size=10000, dtype=np.uint8)
        rows[:, 1:] = rng.integers(0, 256, size=(10000, 3072), dtype=np.uint8)
        rows.tofile(os.path.join(cifar, name))
    # generate_sine_wave.py: T=20, L=1000, N=100, np.random.seed(2); here L=40.
    np.random.seed(2)
    T, L, N = 20, 40, 100
    x = np.empty((N, L), "int64")
    x[:] = np.array(range(L)) + np.random.randint(-4 * T, 4 * T, N).reshape(N, 1)
    data = np.sin(x / 1.0 / T).astype("float64")
    import torch
    torch.save(data, open(os.path.join(work, "examples", "time_sequence_prediction", "traindata.pt"), "wb"))


if __name__ == "__main__":
    main()
