"""Training speed of a byte-level BPE vocabulary: mingpt.bpe.train_bpe against Hugging Face `tokenizers`' BPE
trainer (ByteLevel pre-tokenizer, GPT-2's regex, the same vocabulary size and special token) on the same text.

    MINGPT_DATA_DIR=../shared/data python bench/bench_bpe_train.py [--text PATH] [--mb 5] [--merges 10000]
                                                                    [--rounds 3]

The default text is the three Project Gutenberg books of the shared data (about 5.4 MB), cut to --mb MB. Each
training runs in its own fresh process (so neither side warms the other's caches), the contenders in turns, the
order swapped every round; a figure is the median over --rounds, with the range. A time includes reading the file,
pre-tokenising and counting. `tokenizers` uses all cores (Rust threads); mingpt is pure Python, one core.
`tokenizers` is needed only here, not by mingpt.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mingpt.bpe import ENDOFTEXT, train_bpe  # noqa: E402
from mingpt.data import fetch  # noqa: E402
from workers import run_worker  # noqa: E402

BOOKS = ['text/gutenberg/2600-0.txt', 'text/gutenberg/2701-0.txt', 'text/gutenberg/1342-0.txt']


def train_mingpt(path, vocab_size):
    text = Path(path).read_bytes().decode('utf-8')  # as tokenizers reads it: no newline translation
    return list(train_bpe(text, vocab_size, special_tokens=(ENDOFTEXT,)).encoder)


def train_hf(path, vocab_size):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[ENDOFTEXT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train([str(path)], trainer)
    return list(tokenizer.get_vocab())


CONTENDERS = {'mingpt.bpe.train_bpe': train_mingpt, 'HF tokenizers BpeTrainer': train_hf}


def worker(name, path, vocab_size):
    """Runs in its own process: time one training, print the seconds and the vocabulary as JSON."""
    t0 = time.perf_counter()
    tokens = CONTENDERS[name](path, vocab_size)
    print(json.dumps({'seconds': time.perf_counter() - t0, 'tokens': tokens}))


def run_in_process(name, path, vocab_size):
    cmd = [sys.executable, __file__, '--worker', name, '--text', str(path), '--vocab-size', str(vocab_size)]
    return run_worker(cmd, name)


def corpus(args):
    """The text to train on, cut to --mb MB (10^6 bytes, at a character boundary), in a temporary file."""
    paths = [args.text] if args.text else [fetch(book) for book in BOOKS]
    data = b''.join(Path(p).read_bytes() for p in paths)[:int(args.mb * 1e6)]
    data = data.decode('utf-8', errors='ignore').encode('utf-8')  # drop a character cut in half at the end
    with tempfile.NamedTemporaryFile('wb', suffix='.txt', delete=False) as f:
        f.write(data)
    return Path(f.name), len(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--text', help='a UTF-8 text file (default: the Gutenberg books from $MINGPT_DATA_DIR)')
    ap.add_argument('--mb', type=float, default=5.0, help='train on the first MB (10^6 bytes) of the text')
    ap.add_argument('--merges', type=int, default=10_000, help='vocabulary = 256 bytes + merges + 1 special')
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--worker', choices=CONTENDERS, help=argparse.SUPPRESS)
    ap.add_argument('--vocab-size', type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker, args.text, args.vocab_size)

    path, nbytes = corpus(args)
    vocab_size = 256 + args.merges + 1
    times, vocabs = {name: [] for name in CONTENDERS}, {}
    print(f'{nbytes / 1e6:.2f} MB, {args.merges} merges (vocab_size {vocab_size}), {os.cpu_count()} cores, '
          f'{args.rounds} rounds, one process per training, in turns')
    try:
        for r in range(args.rounds):
            for name in (list(CONTENDERS) if r % 2 == 0 else list(CONTENDERS)[::-1]):
                result = run_in_process(name, path, vocab_size)
                times[name].append(result['seconds'])
                vocabs[name] = set(result['tokens'])
                print(f'  round {r + 1}: {name:<26} {result["seconds"]:7.2f} s', flush=True)
    finally:
        path.unlink()
    print(f"{'trainer':<26} {'median s':>9} {'min':>7} {'max':>7} {'tokens':>7}")
    medians = {}
    for name, ts in times.items():
        medians[name] = statistics.median(ts)
        print(f'{name:<26} {medians[name]:9.2f} {min(ts):7.2f} {max(ts):7.2f} {len(vocabs[name]):7}')
    ours, hf = medians.values()
    shared = len(set.intersection(*vocabs.values())) / vocab_size
    print(f'ratio mingpt / HF time: {ours / hf:.2f}x; tokens in both vocabularies: {shared:.1%} '
          f'(ties are broken differently, so the vocabularies differ a little); '
          f'mingpt {"meets" if ours <= 60 else "misses"} the 60 s target')
    print(json.dumps({'mb': round(nbytes / 1e6, 3), 'merges': args.merges, 'seconds': times,
                      'ratio': round(ours / hf, 3), 'shared_tokens': round(shared, 4)}))


if __name__ == '__main__':
    main()
