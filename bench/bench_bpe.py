"""Encode speed of GPT-2 BPE tokenizers on a cold ~1 MB text, in one run, as MB/s and as a ratio to a
minGPT-style reference (OpenAI's/minGPT's algorithm, re-implemented below for comparison only).

    MINGPT_DATA_DIR=../shared/data python bench/bench_bpe.py [--text PATH] [--mb 1] [--repeats 5]

"Cold": every run gets a fresh tokenizer, so no per-word cache survives from one run to the next (construction
is not timed). MB means 10^6 bytes of UTF-8 input. Each figure is the median over --repeats runs.
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import regex

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mingpt.bpe import GPT2_PATTERN, Encoder, _read_vocab, bytes_to_unicode  # noqa: E402
from mingpt.data import fetch  # noqa: E402


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


def timed(make, text, repeats):
    times, ids = [], None
    for _ in range(repeats):
        encode = make()
        t0 = time.perf_counter()
        ids = encode(text)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), ids


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--text', default=None, help='text file (default: Moby Dick from $MINGPT_DATA_DIR)')
    ap.add_argument('--mb', type=float, default=1.0, help='use the first MB (10^6 bytes) of the text')
    ap.add_argument('--repeats', type=int, default=5)
    args = ap.parse_args()

    path = args.text or fetch('text/gutenberg/2701-0.txt')
    raw = Path(path).read_bytes()[:int(args.mb * 1e6)]
    text = raw.decode('utf-8', errors='ignore')
    nbytes = len(text.encode('utf-8'))
    enc_path, bpe_path = str(fetch('gpt2/encoder.json')), str(fetch('gpt2/vocab.bpe'))
    encoder, merges = _read_vocab(enc_path, bpe_path)

    contenders = {
        'minGPT-style reference': lambda: MinGPTStyleEncoder(encoder, merges).encode,
        'mingpt.bpe': lambda: Encoder(encoder, merges).encode,
    }
    try:
        import tiktoken
        import tiktoken.load
        from tiktoken_ext.openai_public import r50k_pat_str
        ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(bpe_path, enc_path)
        tk = tiktoken.Encoding('gpt2-local', pat_str=r50k_pat_str, mergeable_ranks=ranks,
                               special_tokens={'<|endoftext|>': 50256}, explicit_n_vocab=50257)
        contenders[f'tiktoken {tiktoken.__version__} (Rust)'] = lambda: tk.encode_ordinary
    except ImportError as e:
        print(f'skipping tiktoken: {e}')
    try:
        import transformers
        from transformers import GPT2Tokenizer
        from transformers.utils import logging as hf_logging
        hf_logging.set_verbosity_error()  # no "sequence longer than the model's maximum" warning

        def make_hf():
            try:  # transformers >= 5: backed by the Rust `tokenizers` library
                hf = GPT2Tokenizer(vocab=enc_path, merges=bpe_path)
            except TypeError:  # transformers 4: the pure Python tokenizer
                hf = GPT2Tokenizer(vocab_file=enc_path, merges_file=bpe_path)
            assert hf.encode('hello world') == [31373, 995], 'GPT2Tokenizer did not load the vocabulary'
            return hf.encode
        kind = 'Rust tokenizers' if int(transformers.__version__.split('.')[0]) >= 5 else 'Python'
        contenders[f'HF GPT2Tokenizer {transformers.__version__} ({kind})'] = make_hf
    except ImportError as e:
        print(f'skipping transformers: {e}')

    print(f'{nbytes / 1e6:.2f} MB of {Path(path).name}, cold (fresh tokenizer per run), median of {args.repeats}')
    results = {}
    reference_ids = None
    for name, make in contenders.items():
        sec, ids = timed(make, text, args.repeats)
        if reference_ids is None:
            reference_ids = ids
        results[name] = (nbytes / 1e6 / sec, ids == reference_ids)
    ref = results['minGPT-style reference'][0]
    print(f"{'tokenizer':<42} {'MB/s':>8} {'x ref':>7}  same ids")
    for name, (mbs, same) in results.items():
        print(f'{name:<42} {mbs:8.2f} {mbs / ref:7.2f}  {same}')
    print(json.dumps({name: round(mbs, 3) for name, (mbs, _) in results.items()}))


if __name__ == '__main__':
    main()
