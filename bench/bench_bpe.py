"""Encode speed of GPT-2 BPE tokenizers on a cold ~1 MB text, in one run, as MB/s and as a ratio to a
minGPT-style reference (OpenAI's/minGPT's algorithm, re-implemented below for comparison only).

    MINGPT_DATA_DIR=../shared/data python bench/bench_bpe.py [--text PATH] [--mb 1] [--rounds 5]

"Cold": each measurement is a fresh process with a fresh tokenizer, so no per-word cache survives from one run to
the next (construction is not timed). The contenders take turns, the first one rotating from round to round. MB
means 10^6 bytes of UTF-8 input. Each figure is the median over --rounds runs, with the spread (min-max).
"""
import argparse
import hashlib
import json
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path

import regex

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mingpt.bpe import GPT2_PATTERN, Encoder, _read_vocab, bytes_to_unicode  # noqa: E402
from mingpt.data import fetch  # noqa: E402
from workers import run_worker  # noqa: E402


class MinGPTStyleEncoder:
    """The reference: per-word BPE with a memo cache, as in OpenAI's encoder.py and minGPT's bpe.py. For each
    pre-token: map its bytes through the table one by one, then (unless cached) repeatedly take the min-rank pair
    over the set of adjacent pairs and rebuild the word; finally split the merged string and look each part up."""

    def __init__(self, encoder, merges):
        self.encoder = encoder
        self.byte_encoder = bytes_to_unicode()
        self.bpe_ranks = dict(zip(merges, range(len(merges))))
        self.pat = regex.compile(GPT2_PATTERN)
        self.cache = {}

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        pairs = set(zip(word, word[1:]))
        if not pairs:
            return token
        while True:
            bigram = min(pairs, key=lambda p: self.bpe_ranks.get(p, float('inf')))
            if bigram not in self.bpe_ranks:
                break
            first, second = bigram
            new_word, i = [], 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                except ValueError:
                    new_word.extend(word[i:])
                    break
                new_word.extend(word[i:j])
                i = j
                if i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            if len(word) == 1:
                break
            pairs = set(zip(word, word[1:]))
        word = ' '.join(word)
        self.cache[token] = word
        return word

    def encode(self, text):
        ids = []
        for token in regex.findall(self.pat, text):
            translated = ''.join(self.byte_encoder[b] for b in token.encode('utf-8'))
            ids.extend(self.encoder[t] for t in self.bpe(translated).split(' '))
        return ids


def contenders(enc_path, bpe_path, encoder, merges):
    """name -> a function that builds a fresh tokenizer and returns its encode; the optional ones if installed."""
    found = {
        'minGPT-style reference': lambda: MinGPTStyleEncoder(encoder, merges).encode,
        'mingpt.bpe': lambda: Encoder(encoder, merges).encode,
    }

    def make_tiktoken():
        import tiktoken
        import tiktoken.load
        from tiktoken_ext.openai_public import r50k_pat_str
        ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(bpe_path, enc_path)
        return tiktoken.Encoding('gpt2-local', pat_str=r50k_pat_str, mergeable_ranks=ranks,
                                 special_tokens={'<|endoftext|>': 50256}, explicit_n_vocab=50257).encode_ordinary

    def make_hf():
        from transformers import GPT2Tokenizer
        from transformers.utils import logging as hf_logging
        hf_logging.set_verbosity_error()  # no "sequence longer than the model's maximum" warning
        try:  # transformers >= 5: backed by the Rust `tokenizers` library
            hf = GPT2Tokenizer(vocab=enc_path, merges=bpe_path)
        except TypeError:  # transformers 4: the pure Python tokenizer
            hf = GPT2Tokenizer(vocab_file=enc_path, merges_file=bpe_path)
        assert hf.encode('hello world') == [31373, 995], 'GPT2Tokenizer did not load the vocabulary'
        return hf.encode

    for package, make in (('tiktoken', make_tiktoken), ('transformers', make_hf)):
        try:
            __import__(package)
            version = metadata.version(package)
        except ImportError as e:  # PackageNotFoundError is an ImportError too
            print(f'skipping {package}: {e}')
            continue
        kind = ('Rust' if package == 'tiktoken' else
                'Rust tokenizers' if int(version.split('.')[0]) >= 5 else 'Python')
        found[f"{'tiktoken' if package == 'tiktoken' else 'HF GPT2Tokenizer'} {version} ({kind})"] = make
    return found


def inputs(args):
    path = args.text or fetch('text/gutenberg/2701-0.txt')
    text = Path(path).read_bytes()[:int(args.mb * 1e6)].decode('utf-8', errors='ignore')
    enc_path, bpe_path = str(fetch('gpt2/encoder.json')), str(fetch('gpt2/vocab.bpe'))
    encoder, merges, _ = _read_vocab(enc_path, bpe_path)  # (and GPT-2's regex, which each contender has)
    return path, text, contenders(enc_path, bpe_path, encoder, merges)


def worker(name, args):
    """Runs in its own process: one cold encode; prints MB/s and a digest of the ids, as JSON."""
    _, text, found = inputs(args)
    encode = found[name]()
    t0 = time.perf_counter()
    ids = encode(text)
    sec = time.perf_counter() - t0
    digest = hashlib.sha256(json.dumps(list(ids)).encode()).hexdigest()
    print(json.dumps([len(text.encode('utf-8')) / 1e6 / sec, digest]))


def measure(name, args):
    cmd = [sys.executable, __file__, '--worker', name, f'--mb={args.mb}']
    if args.text:
        cmd.append(f'--text={args.text}')
    return run_worker(cmd, name)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--text', default=None, help='text file (default: Moby Dick from $MINGPT_DATA_DIR)')
    ap.add_argument('--mb', type=float, default=1.0, help='use the first MB (10^6 bytes) of the text')
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--worker', default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker, args)

    path, text, found = inputs(args)
    names = list(found)
    print(f'{len(text.encode("utf-8")) / 1e6:.2f} MB of {Path(path).name}, cold (a fresh process and tokenizer '
          f'per run), {args.rounds} rounds, in turns')
    runs, digests = {n: [] for n in names}, {n: set() for n in names}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            mbs, digest = measure(name, args)
            runs[name].append(mbs)
            digests[name].add(digest)
    ref = statistics.median(runs['minGPT-style reference'])
    print(f"{'tokenizer':<42} {'MB/s (median, spread)':>22} {'x ref':>7}  same ids")
    for name in names:
        mbs, same = statistics.median(runs[name]), digests[name] == digests['minGPT-style reference']
        spread = f'{min(runs[name]):.2f}-{max(runs[name]):.2f}'
        print(f'{name:<42} {mbs:8.2f} ({spread:>11}) {mbs / ref:7.2f}  {same}')
    print(json.dumps({name: round(statistics.median(runs[name]), 3) for name in names}))


if __name__ == '__main__':
    main()
