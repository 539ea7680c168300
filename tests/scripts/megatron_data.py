"""tests/scripts/megatron_data.py: paralab's samples against megatron-core's own, token for token.

Writes small indexed datasets with megatron-core's IndexedDatasetBuilder (documents of several
sequences, every dtype code), builds GPTDataset / BlendedDataset / MockGPTDataset splits with
megatron-core's BlendedMegatronDatasetBuilder for a set of Megatron data flags, and compares
every training sample of the run (train_iters x G) and every validation sample of one
evaluation (eval_iters x G) with what build/megatron_samples (paralab's data loader, the
trainer's flags) prints for the same flags. Also NumPy's streams paralab reimplements.

usage: python megatron_data.py build/megatron_samples      (needs megatron-core and torch)
Prints one line per case and "N passed, M failed"; exits 1 on a failure.
"""
import os
import subprocess
import sys
import tempfile

import numpy
import torch
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig, MockGPTDataset
from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder
from megatron.core.datasets.utils import get_blend_from_list

tool = os.path.abspath(sys.argv[1])
work = tempfile.mkdtemp()
passed = failed = 0


class Tokenizer:
    """What GPTDatasetConfig reads of a tokenizer: the vocabulary, the end-of-document id."""

    def __init__(self, vocab_size, eod):
        self.vocab_size, self.eod = vocab_size, eod
        self.unique_identifiers = {"class": "Tokenizer", "vocab_size": vocab_size}


def write_dataset(name, dtype, documents, vocab, seed):
    """documents x (1 to 3 sequences of 1 to 40 tokens), ids in [0, vocab), as preprocess_data
    writes them: add_document(tokens, lengths)."""
    rng = numpy.random.default_rng(seed)
    prefix = os.path.join(work, name)
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
    for _ in range(documents):
        lengths = rng.integers(1, 41, size=rng.integers(1, 4)).tolist()
        tokens = rng.integers(0, vocab, size=sum(lengths))
        builder.add_document(torch.from_numpy(tokens.astype(numpy.int64)), lengths)
    builder.finalize(prefix + ".idx")
    assert len(IndexedDataset(prefix)) > 0
    return prefix


def megatron_samples(words, split, per_split, seq, G, train_iters, eval_interval, eval_iters,
                     seed, tokenizer, mock=False):
    config = GPTDatasetConfig(
        random_seed=seed, sequence_length=seq, tokenizer=tokenizer,
        blend=get_blend_from_list(words) if words else None,
        blend_per_split=[get_blend_from_list(w) if w else None for w in per_split]
        if per_split else None,
        split=split, path_to_cache=os.path.join(work, "megatron_cache"),
        reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
        mid_level_dataset_surplus=0.005)
    valid = (train_iters // eval_interval + 1) * eval_iters * G if eval_interval else 0
    sizes = [train_iters * G, valid, eval_iters * G]
    cls = MockGPTDataset if mock else GPTDataset
    train, valid_ds, _ = BlendedMegatronDatasetBuilder(cls, sizes, lambda: True, config).build()

    def rows(ds, n):
        out = []
        for k in range(n):
            s = ds[k]
            out.append(s["tokens"].tolist() + [int(s["labels"][-1])])
        return out
    return rows(train, train_iters * G), rows(valid_ds, eval_iters * G) if eval_interval else []


def paralab_samples(flags):
    run = subprocess.run([tool] + flags, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(run.stderr.strip())
    train, valid, part = [], [], None
    for line in run.stdout.splitlines():
        if line in ("train", "valid"):
            part = train if line == "train" else valid
        else:
            part.append([int(t) for t in line.split()])
    return train, valid


def case(name, words=None, split=None, per_split=None, seq=16, B=2, G=8, train_iters=30,
         eval_interval=10, eval_iters=2, seed=1234, vocab=1000, mock=False, tokenizer=None,
         extra=(), reference=None):
    global passed, failed
    flags = ["--seq-length", str(seq), "--micro-batch-size", str(B), "--global-batch-size",
             str(G), "--train-iters", str(train_iters), "--seed", str(seed),
             "--eval-iters", str(eval_iters), "--eval-interval", str(eval_interval),
             "--vocab-size", str(vocab)] + list(extra)
    if words:
        flags += ["--data-path"] + words
    if split:
        flags += ["--split", split]
    if per_split:
        for flag, w in zip(("--train-data-path", "--valid-data-path", "--test-data-path"),
                           per_split):
            if w:
                flags += [flag] + w
    if mock:
        flags += ["--mock-data"]
    try:
        want = megatron_samples(reference or words, split, per_split, seq, G, train_iters, eval_interval,
                                eval_iters, seed, tokenizer or Tokenizer(vocab, vocab - 1), mock)
        got = paralab_samples(flags)
        for part, w, g in (("train", want[0], got[0]), ("valid", want[1], got[1])):
            assert len(w) == len(g), f"{part}: {len(g)} samples, megatron-core {len(w)}"
            for k, (a, b) in enumerate(zip(w, g)):
                assert a == b, f"{part} sample {k}: {b[:6]}... megatron-core {a[:6]}..."
        passed += 1
        print(f"ok    {name}: {len(want[0])} training and {len(want[1])} validation samples "
              f"of {seq + 1} tokens equal megatron-core's")
    except Exception as e:  # noqa: BLE001 (one line a case)
        failed += 1
        print(f"FAIL  {name}: {e}")


torch.distributed.init_process_group(  # BlendedDataset asks for the rank
    "gloo", init_method="tcp://127.0.0.1:" + str(29500 + os.getpid() % 1000), rank=0, world_size=1)

# NumPy's streams (model/numpy_random.h) are held by every case below; the dtypes first.
# megatron-core's GPTDataset refuses float tokens (it concatenates them as int64 'same_kind'),
# so a float file is held to megatron-core's samples of the same documents written as int64.
for code, dtype in enumerate([numpy.uint8, numpy.int8, numpy.int16, numpy.int32, numpy.int64,
                              numpy.float64, numpy.float32, numpy.uint16], start=1):
    p = write_dataset(f"dtype{code}", dtype, 60, 100, seed=code)
    floating = numpy.issubdtype(dtype, numpy.floating)
    reference = write_dataset(f"dtype{code}_int", numpy.int64, 60, 100, seed=code) if floating else p
    case(f"dtype code {code} ({numpy.dtype(dtype).name})", [p], "90,10,0", vocab=100,
         train_iters=4, reference=[reference])

A = write_dataset("a", numpy.uint16, 400, 1000, seed=1)
B = write_dataset("b", numpy.int32, 120, 1000, seed=2)
case("one prefix, --split 969,30,1 (the default), validation over 2 epochs", [A], "969,30,1")
case("one prefix, 2 epochs, the last shuffled apart (it gives < 80% of an epoch)", [B],
     "100,0,0", train_iters=60, eval_interval=0, seed=7)
case("one prefix, 2 epochs shuffled together", [B], "100,0,0", train_iters=75, eval_interval=0,
     seed=7)
case("a blend, 0.3 A 0.7 B, --split 90,8,2", ["0.3", A, "0.7", B], "90,8,2")
case("a blend without weights, A B, --split 80,20,0", [A, B], "80,20,0")
case("one prefix with a weight, 1 A", ["1", A], "98,2,0", seed=3)
case("per split: --train-data-path 2 A 1 B --valid-data-path B --test-data-path A",
     per_split=[["2", A, "1", B], [B], [A]], seq=32)
case("--mock-data, NullTokenizer --vocab-size 1000", mock=True, seq=64, train_iters=5,
     eval_interval=5, eval_iters=1, tokenizer=Tokenizer(1001, 1000),
     extra=["--tokenizer-type", "NullTokenizer"])
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
