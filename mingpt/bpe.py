r"""GPT-2's byte-level BPE tokenizer, exact to OpenAI's ids (tested against tiktoken), written to be read, and
training a new vocabulary of the same kind (train_bpe, or `python -m mingpt.bpe train FILE --vocab-size N --out DIR`).
`python -m mingpt.bpe encode TEXT` shows each word's merges step by step (Encoder.merge_steps).

How GPT-2 turns text into ids:
1. The text's UTF-8 bytes are the alphabet, so any string can be encoded. Each of the 256 byte values is shown
   as a printable unicode character (bytes_to_unicode), because the vocabulary files are text.
2. A regex (GPT2_PATTERN, applied by pre_tokenize) cuts the text into pre-tokens ("words"): contractions,
   letters, digits, other symbols, whitespace, each optionally with one leading space. Merges never cross a
   pre-token boundary.
3. Inside a pre-token, the adjacent pair of symbols with the lowest merge rank (its line in vocab.bpe) is
   merged, again and again, until no pair in the word has a rank (Encoder.merge_steps as the lecture does it,
   Encoder._merge fast). Each final symbol is one id (encoder.json). Special tokens ('<|endoftext|>') are cut
   out before step 2 when encode is allowed them; decode joins each id's bytes and reads them as UTF-8.

The file in order: the three steps and the Encoder; reading vocabulary files (get_encoder); minGPT's
BPETokenizer; training (BPETrainer, train_bpe); the command line.

Speed: most pre-tokens are a single vocabulary entry, so we look the whole word up before running the merge
loop, and we remember every word's ids, so a text costs one regex pass, one dict look-up per word and one merge
loop per distinct word.

Training (train_bpe), the slides' algorithm: start from the 256 bytes, count every adjacent pair of symbols in
the text, merge the most frequent pair into a new symbol, repeat until the vocabulary is full. The merges in order
are vocab.bpe, the symbols encoder.json. BPETrainer keeps the counts up to date merge by merge instead of
recounting: a merge touches only the words that contain its pair.

Unicode versions: \p{L}, \p{N} and \s come from the `regex` package's Unicode tables. For characters assigned
after GPT-2 was trained that is a choice, not a fact: e.g. regex 2026.x knows Unicode 17 (CJK Extension J,
U+323B0..U+33479, is letters) while tiktoken 0.14's Rust engine knows Unicode 16 (the same code points are
symbols), so text containing them splits differently. On every other character the ids are tiktoken's.
"""
import argparse
import codecs
import functools
import heapq
import json
import numbers
import operator
import os
from collections import Counter, defaultdict
from itertools import chain, repeat
from pathlib import Path

import numpy as np
import regex
import torch
from tqdm.auto import tqdm

from mingpt.data import DownloadError, corpus_files, fetch, find_local, not_utf8, offline_error
from mingpt.utils import json_object, plural, run_cli, warn_caller, write_text_atomically

# OpenAI's published vocabulary files and their sha256 (the same pair tiktoken pins for 'gpt2')
ENCODER_JSON_URL = 'https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json'
VOCAB_BPE_URL = 'https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe'
ENCODER_JSON_SHA256 = '196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783'
VOCAB_BPE_SHA256 = '1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5'

# GPT-2's pre-tokenisation pattern, as in OpenAI's encoder.py: contractions, an optional space then letters,
# or digits, or other symbols; whitespace runs (all but the last space, which goes with the next word)
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# vocab.bpe's header line for a vocabulary trained without pre-tokenising (train_bpe(..., pretokenize=False))
NO_PRETOKENIZER = '#version: 0.2 no pre-tokeniser: the whole text is one word'
ENDOFTEXT = '<|endoftext|>'
ENDOFTEXT_ID = 50256
# a folder's vocabulary, in the order read: OpenAI's two files (as Encoder.save writes them), Hugging Face's
# tokenizer.json (transformers 5 writes only it; it holds the tokens added to GPT-2's), HF's two files
VOCAB_FILES = (('encoder.json', 'vocab.bpe'), ('tokenizer.json',), ('vocab.json', 'merges.txt'))
# tokenizer_config.json's settings that leave the ids alone: a vocabulary saved over a tokenizer keeps them
HF_KEPT = ('model_max_length', 'chat_template', 'padding_side', 'truncation_side', 'model_input_names')
_SURROGATE = regex.compile('[\ud800-\udfff]')  # half of a UTF-16 pair: a str may hold one, UTF-8 cannot


def bytes_to_unicode():
    """Step 1's alphabet: map each byte 0..255 to a printable unicode character. Printable latin-1 bytes map to
    themselves; the rest (control characters, space, ...) are shifted to 256, 257, ... in order. So b' ' shows as
    'Ġ' (chr(288))."""
    keep = list(range(ord('!'), ord('~') + 1)) + list(range(ord('¡'), ord('¬') + 1)) + list(range(ord('®'), 256))
    table, shift = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shift)
            shift += 1
    return table


def _without_lone_surrogates(text):
    """A lone surrogate (from errors='surrogateescape', or JSON's "\\ud800") has no UTF-8 bytes: it becomes U+FFFD,
    as in tiktoken; a whole pair becomes its character."""
    if not isinstance(text, str):  # every way of cutting text passes here
        raise TypeError(f"the text must be a str (decode bytes to str first), got {type(text).__name__}")
    if _SURROGATE.search(text):
        text = text.encode('utf-16', 'surrogatepass').decode('utf-16', 'replace')
    return text


def pre_tokenize(text, pat):
    """Step 2, the words that merges never cross: the compiled regex `pat` (GPT-2's) cuts them, or with pat None the
    whole text is one. Training and encoding both cut text here, lone surrogates read as U+FFFD first."""
    text = _without_lone_surrogates(text)
    if pat is None:
        return [text] if text else []
    return pat.findall(text)


# Special tokens ('<|endoftext|>'): encode cuts them out of the text before step 2, where it is allowed them


def _allowed_specials(allowed_special, special_tokens):
    """The special tokens that encode() should honour, from its allowed_special argument."""
    if allowed_special is True or allowed_special == 'all':
        return frozenset(special_tokens)
    if allowed_special is False or allowed_special is None:
        return frozenset()
    if isinstance(allowed_special, (set, frozenset, list, tuple)):
        unknown = set(allowed_special).difference(special_tokens)
        if unknown:
            raise ValueError(f"allowed_special names {sorted(unknown)}, which this vocabulary does not have; its "
                             f"special tokens are {sorted(special_tokens)}")
        return frozenset(allowed_special)
    raise ValueError(f"allowed_special must be False, True, 'all' or a set of special tokens, got {allowed_special!r}")


@functools.lru_cache(maxsize=16)
def _special_splitter(specials):
    """A regex that splits text around the given special tokens and keeps them (at odd indices of its split); the
    longest is tried first, so a special token that contains another one wins."""
    alternatives = sorted(specials, key=len, reverse=True)
    return regex.compile('(' + '|'.join(map(regex.escape, alternatives)) + ')')


class Encoder:
    """Text <-> ids. `encoder` maps token strings (in the bytes_to_unicode alphabet) to ids; `bpe_merges` is the
    list of merges (first, second) in rank order, as read from vocab.bpe. The special tokens ('<|endoftext|>' in
    GPT-2) are the entries of `encoder` that are neither a byte nor made by a merge; their key is their own text.
    `pattern` is the pre-tokeniser: GPT-2's regex, or None to merge the whole text as one word (the vocabulary of
    train_bpe(..., pretokenize=False)). `cache_size`: how many words' ids encode remembers between calls (0: none);
    a call that would pass it clears the cache first, or leaves it alone if its own words are more than that."""

    def __init__(self, encoder, bpe_merges, cache_size=1_000_000, pattern=GPT2_PATTERN):
        _check_vocabulary(encoder, bpe_merges)
        if isinstance(cache_size, bool) or not isinstance(cache_size, numbers.Integral) or cache_size < 0:
            raise ValueError(f"cache_size is how many words' ids to remember, an int >= 0 (0: none), got "
                             f"{cache_size!r}")
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {v: k for k, v in self.byte_encoder.items()}
        self.encoder = dict(encoder)  # a copy: the dict read from files is cached, and changing it changed later reads
        self.decoder = {v: k for k, v in encoder.items()}
        self.bpe_merges = [tuple(pair) for pair in bpe_merges]
        self.bpe_ranks = {pair: rank for rank, pair in enumerate(self.bpe_merges)}
        made = set(self.byte_decoder).union(a + b for a, b in self.bpe_merges)
        self.special_tokens = {s: i for s, i in encoder.items() if s not in made}
        self.ordinary = {s: i for s, i in encoder.items() if s in made}  # text spelled like a special token is text
        self.pat = regex.compile(pattern) if pattern else None
        self.cache = {}  # pre-token (plain text) -> tuple of ids
        self.cache_size = cache_size
        # id -> its bytes, for decode (a special token is written as itself, not in the byte alphabet)
        self._id_bytes = [b''] * (max(self.decoder) + 1)
        for i, s in self.decoder.items():
            special = s in self.special_tokens
            self._id_bytes[i] = s.encode('utf-8') if special else bytes(map(self.byte_decoder.__getitem__, s))

    def __len__(self):
        return len(self.encoder)  # the vocabulary size, special tokens included

    def _to_alphabet(self, word):
        """Step 1, a word's UTF-8 bytes as the printable characters of bytes_to_unicode, one per byte, in one C call:
        latin-1 gives one character per byte and translate maps its ordinal through the table."""
        return word.encode('utf-8').decode('latin-1').translate(self.byte_encoder)

    def pre_tokens(self, text):
        """Step 2, the words that merges never cross (see pre_tokenize)."""
        return pre_tokenize(text, self.pat)

    def merge_steps(self, word):
        """Step 3 for one word as the lecture does it, for showing: the word's bytes (in the printable alphabet) as
        symbols, then at each step the adjacent pair of lowest rank (the merge learned first) joined wherever it
        occurs. Returns [(pair, symbols)]: the first pair None, each symbols list the word after that step. The
        last list is what encode uses (it gets it faster, in _merge); a lone surrogate is U+FFFD, as there."""
        symbols = list(self._to_alphabet(_without_lone_surrogates(word)))
        steps = [(None, symbols)]
        while True:
            ranked = [pair for pair in zip(symbols, symbols[1:]) if pair in self.bpe_ranks]
            if not ranked:
                return steps
            best = min(ranked, key=self.bpe_ranks.get)
            merged = []
            for s in symbols:  # left to right: each occurrence of best becomes one symbol
                if merged and (merged[-1], s) == best:
                    merged[-1] += s
                else:
                    merged.append(s)
            symbols = merged
            steps.append((best, symbols))

    def _merge(self, token):
        """Step 3, fast: the symbols of one pre-token. The adjacent pair with the lowest rank merges first (the
        leftmost of two equal ones), again and again. A heap of (rank, position) finds that pair; an entry whose pair
        has changed since it was pushed is skipped when popped. So a long word (a whole text, without
        pre-tokenising) costs n log n, not n^2."""
        if token in self.ordinary:
            return [token]
        parts = list(token)
        # a linked list over the positions: the next and the previous symbol still alive, -1 past either end
        right = list(range(1, len(parts))) + [-1]
        left = list(range(-1, len(parts) - 1))
        rank = self.bpe_ranks.get
        heap = [(r, i) for i, r in enumerate(map(rank, zip(parts, parts[1:]))) if r is not None]
        heapq.heapify(heap)
        while heap:
            r, i = heapq.heappop(heap)
            j = right[i]
            if parts[i] is None or j < 0 or rank((parts[i], parts[j])) != r:
                continue  # stale: this position's pair was merged or changed
            parts[i], parts[j] = parts[i] + parts[j], None
            k = right[i] = right[j]
            for h, m in ((left[i], i), (i, k)):  # the two pairs around the new symbol
                if h >= 0 and m >= 0 and (r := rank((parts[h], parts[m]))) is not None:
                    heapq.heappush(heap, (r, h))
            if k >= 0:
                left[k] = i
        return [p for p in parts if p is not None]

    def bpe(self, token):
        """Merge a pre-token (already in the bytes_to_unicode alphabet) into vocabulary symbols; returns them
        joined by spaces, as minGPT's Encoder.bpe does."""
        return ' '.join(self._merge(token))

    def _encode_word(self, word):
        """The ids of one pre-token (plain text): steps 1 and 3."""
        token = self._to_alphabet(word)
        i = self.ordinary.get(token)
        if i is not None:  # most words are one token: no merge loop
            return (i,)
        return tuple(self.ordinary[s] for s in self._merge(token))

    def encode_ordinary(self, text):
        """Ids of `text`, with every character treated as text (so '<|endoftext|>' is 7 ordinary tokens)."""
        words = self.pre_tokens(text)
        if self.pat is None:  # the one word is the whole text: not one to keep in the cache
            return [i for word in words for i in self._encode_word(word)]
        cache, distinct = self.cache, set(words)
        new = distinct.difference(cache)
        if len(cache) + len(new) > self.cache_size:
            if len(distinct) <= self.cache_size:
                cache.clear()  # start again from this call's words
            else:  # more than the cache holds: remember them for this call only
                cache = {}
            new = distinct
        for w in new:
            cache[w] = self._encode_word(w)
        return list(chain.from_iterable(map(cache.__getitem__, words)))

    def encode(self, text, allowed_special=False):
        """Ids of `text`. By default special tokens are plain text, like tiktoken's encode_ordinary; with
        allowed_special=True (or 'all') each special token becomes its single id (50256 for '<|endoftext|>' in
        GPT-2); a set allows only the special tokens it names."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, got {type(text).__name__}; decode bytes to str first")
        allowed = _allowed_specials(allowed_special, self.special_tokens)
        if not allowed:
            return self.encode_ordinary(text)
        ids = []
        for k, piece in enumerate(_special_splitter(allowed).split(text)):
            if k % 2:
                ids.append(self.special_tokens[piece])
            else:
                ids.extend(self.encode_ordinary(piece))
        return ids

    def encode_and_show_work(self, text):
        """encode(text) with its stages shown, as minGPT's Encoder has it: 'tokens', the pre-tokeniser's words;
        'bpe_idx', the ids; and per word a part with its UTF-8 bytes ('token_bytes'), those bytes in the printable
        alphabet of bytes_to_unicode ('token_translated'), the symbols the merges leave ('token_merged') and their
        ids ('token_ix'). Special tokens are plain text here, as in encode_ordinary."""
        tokens = self.pre_tokens(text)
        parts = []
        for token in tokens:
            translated = self._to_alphabet(token)
            merged = self._merge(translated)
            parts.append({'token': token, 'token_bytes': token.encode('utf-8'), 'token_translated': translated,
                          'token_merged': merged, 'token_ix': [self.ordinary[m] for m in merged]})
        return {'bpe_idx': [i for part in parts for i in part['token_ix']], 'tokens': tokens, 'parts': parts}

    def decode_bytes(self, ids):
        """The raw bytes of a list of ids (ints), of a 1-D tensor, array or any iterable of them, or of one id (a
        token may end in the middle of a UTF-8 character: when streaming, decode the bytes once a character is
        complete)."""
        return token_bytes(ids, self._id_bytes)

    def decode(self, ids):
        """Text of a list of ids (or as decode_bytes takes them); bytes that are not valid UTF-8 become U+FFFD, as in
        GPT-2."""
        return self.decode_bytes(ids).decode('utf-8', errors='replace')

    def decode_stream(self, ids):
        """Yield the text of ids as they come, one id at a time (an int, or a tensor of one id such as
        model.generate_stream's (1, 1) step), e.g. in a notebook:

            for text in tok.decode_stream(model.generate_stream(idx, 50)):
                print(text, end='', flush=True)

        decode([t]) of each token alone prints U+FFFD for each piece of a character whose UTF-8 bytes are split across
        tokens (most CJK, some emoji); here such bytes wait for the rest. The pieces join to decode(all the ids)."""
        decoder = codecs.getincrementaldecoder('utf-8')(errors='replace')
        for step in ids:
            text = decoder.decode(self.decode_bytes(_one_id(step)))
            if text:
                yield text
        text = decoder.decode(b'', final=True)  # bytes of a character that never completed, as U+FFFD
        if text:
            yield text

    def check_recordable(self, where):
        """Refuse a pre-tokeniser other than GPT-2's regex or None, which `where` (a saved vocabulary, a checkpoint)
        cannot record: read back, the vocabulary would split text with GPT-2's regex and give other ids."""
        if self.pat and self.pat.pattern != GPT2_PATTERN:
            raise ValueError(f"this Encoder splits words with its own pattern {self.pat.pattern!r:.60}, which {where} "
                             "cannot record: read back, it would split with GPT-2's regex and give other ids. Use a "
                             "vocabulary built with GPT-2's pattern (the default) or pattern=None, or keep this "
                             "Encoder in memory")

    def save(self, directory, hugging_face=False, config=None):
        """Write encoder.json and vocab.bpe into `directory` in GPT-2's format (get_encoder(directory=...) and
        BPETokenizer(directory=...) read them back). A vocabulary without a pre-tokeniser says so in vocab.bpe's
        header line, which other GPT-2 readers skip; one with a pattern other than GPT-2's is refused, as the files
        cannot record it. hugging_face=True writes what transformers' GPT2Tokenizer and AutoTokenizer read (alone or
        beside GPT.save_pretrained's config.json): the two files as vocab.json and merges.txt, and the tokenizer's
        class and special tokens in tokenizer_config.json; an older tokenizer's tokenizer.json (and encoder.json and
        vocab.bpe) there are removed, as readers take them first. `config`: more of tokenizer_config.json
        (hugging_face only; BPETokenizer.save_pretrained's options). The older tokenizer_config.json's settings that
        leave the ids alone (HF_KEPT: model_max_length, chat_template...) are kept, as transformers keeps them through a
        read and a save (an Encoder does not hold them); beside a model's config.json, model_max_length is its
        n_positions."""
        if os.fspath(directory) == '':  # Path('') is '.': the files would land wherever the program runs
            raise ValueError("save needs a folder to write the vocabulary into, got ''; give one, e.g. 'my_tokenizer' "
                             "(or '.' for the current folder)")
        self.check_recordable('encoder.json and vocab.bpe')  # before anything is written
        if config and not hugging_face:
            raise ValueError("config is written into Hugging Face's tokenizer_config.json: pass hugging_face=True")
        if hugging_face and not self.pat:
            raise ValueError("Hugging Face's GPT-2 tokenizer always splits words with GPT-2's regex: a vocabulary "
                             "trained without a pre-tokeniser would give other ids there")
        directory = Path(directory)
        header = '#version: 0.2' if self.pat else NO_PRETOKENIZER
        merges = '\n'.join([header] + [f'{a} {b}' for a, b in self.bpe_merges]) + '\n'
        tokens, merges_file = VOCAB_FILES[-1] if hugging_face else VOCAB_FILES[0]
        files = {merges_file: merges}
        if hugging_face:  # else HF reads a special token other than <|endoftext|> as text
            specials = {str(i): {'content': s, 'special': True} for s, i in self.special_tokens.items()}
            # the class tells AutoTokenizer what reads the files in a folder without a model's config.json
            config = {**_kept_hf_settings(directory), 'tokenizer_class': 'GPT2Tokenizer',
                      'added_tokens_decoder': specials, **(config or {})}
            if ENDOFTEXT not in self.special_tokens:  # else HF adds it to the vocabulary, as GPT-2's bos/eos/unk
                config.update(bos_token=None, eos_token=None, unk_token=None)
            files['tokenizer_config.json'] = json.dumps(config)
        files[tokens] = json.dumps(self.encoder)
        # one vocabulary is two files, each written whole: the older tokens go first and the new ones are written
        # last, so a save stopped part way leaves half a tokenizer, which readers name, not new tokens beside old merges
        (directory / tokens).unlink(missing_ok=True)
        for name, body in files.items():
            write_text_atomically(directory / name, body)
        if hugging_face:  # else AutoTokenizer and get_encoder would still read the older tokenizer
            for name in VOCAB_FILES[0] + VOCAB_FILES[1]:
                (directory / name).unlink(missing_ok=True)
        return directory


def _kept_hf_settings(directory):
    """The settings of directory's tokenizer_config.json that a vocabulary saved over it keeps (HF_KEPT), and the
    context length of the model saved beside it (its config.json's n_positions) as model_max_length: without one,
    transformers takes any text as short enough (model_max_length 1e30). An unreadable file keeps nothing."""
    def read(name):
        try:
            return json_object(Path(directory, name), 'the tokenizer')
        except ValueError:  # a damaged file is about to be written over, or belongs to the model
            return {}
    kept = {k: v for k, v in read('tokenizer_config.json').items() if k in HF_KEPT}
    n_positions = read('config.json').get('n_positions')
    if isinstance(n_positions, int):
        kept['model_max_length'] = n_positions
    return kept


def token_bytes(ids, table):
    """The bytes of ids (as _plain_ids reads them: a list, a 1-D tensor or array, one id) joined, table[i] the bytes
    of id i: Encoder's decode_bytes, and that of sentiment's cut vocabularies (pretrained.Vocabulary)."""
    ids = _plain_ids(ids)
    ids = [ids] if isinstance(ids, int) else ids
    try:
        if ids and min(ids) < 0:  # a list takes -1 as its last item; here it is no id
            raise IndexError
        return b''.join(map(table.__getitem__, ids))
    except (IndexError, TypeError):
        bad = [i for i in ids if not isinstance(i, int) or not 0 <= i < len(table)]
        raise ValueError(f"cannot decode ids {bad[:5]}: this vocabulary's ids are ints in "
                         f"0..{len(table) - 1}") from None


def _plain_ids(ids):
    """A tensor or array of ids as (nested) lists of ints, one id (0-d) as an int, any other iterable as a list (a
    generator is read once, here). Bools, floats and bytes are refused, not read as ids: an index takes True as 1, so
    a mask would decode to text, and bytes iterate as ints, b'hi' as the ids 104 and 105."""
    if isinstance(ids, (bytes, bytearray, memoryview, str)):
        raise TypeError(f"cannot decode {ids!r:.60}: it is text already, not token ids; decode takes the ids that "
                        "encode gives (bytes become a str with .decode('utf-8'))")
    dtype = str(getattr(ids, 'dtype', ''))
    plain = ids.tolist() if hasattr(ids, 'tolist') else ids
    if isinstance(plain, int) and not isinstance(plain, bool):
        return plain
    plain = list(plain) if hasattr(plain, '__iter__') else None
    # type() of each id costs about what the look-up of its bytes in decode does: one more C call per id
    if plain is None or any(kind in dtype for kind in ('float', 'complex', 'bool')) or bool in map(type, plain):
        what = f"a {type(ids).__name__} of {dtype}" if getattr(ids, 'ndim', 0) else f"{ids!r:.60}"
        raise TypeError(f"cannot decode {what}: token ids are integers; if it holds ids, convert it (.long() for a "
                        "tensor, int() for a number); bools are a mask, not ids: decode the ids it selects")
    return plain


def _one_id(step):
    """A stream's step as one id: an int, or a tensor, array or list holding one (generate_stream's (1, 1))."""
    plain = _plain_ids(step)
    while isinstance(plain, list) and len(plain) == 1:
        plain = plain[0]
    if isinstance(plain, list):
        raise ValueError(f"decode_stream takes one id per step and got {len(plain)} ids in one: to follow one row of a "
                         "batch, pass (step[i] for step in stream); to decode a whole (1, T) tensor, use decode(ids)")
    return plain


# ----------------------------------------------------------------------------------------------------------------
# Reading a vocabulary: OpenAI's encoder.json and vocab.bpe, or Hugging Face's files; get_encoder picks and checks


def _check_vocabulary(encoder, merges):
    """Refuse a vocabulary that encode or decode would fail on later, deep inside (or, with an id of 10**12, run out
    of memory for): the ids must be the ints 0..N-1, each once; every byte and every merge's result a token."""
    if not isinstance(encoder, dict):
        raise ValueError(f"the encoder must map each token to its id (a JSON object), not be a "
                         f"{type(encoder).__name__}")
    bad = next(((s, i) for s, i in encoder.items() if type(s) is not str or type(i) is not int), None)
    if bad:
        raise ValueError(f"token {bad[0]!r} has the id {bad[1]!r}: tokens must be strings and ids integers")
    ids, n = set(encoder.values()), len(encoder)
    if ids != set(range(n)):
        outside = sorted(ids - set(range(n)))
        why = f"they include {outside[0]}" if outside else f"{n - len(ids)} of them are repeats"
        raise ValueError(f"the ids of the encoder's {n} tokens must be 0..{n - 1}, each once; {why}")
    if not encoder:  # e.g. a tokenizer.json written by a tokenizer built with arguments transformers ignored
        raise ValueError("the vocabulary is empty: a byte-level BPE holds at least the 256 bytes; save the tokenizer "
                         "again (for GPT-2's: BPETokenizer().save_pretrained(folder))")
    missing = [c for c in bytes_to_unicode().values() if c not in encoder]
    if missing:
        raise ValueError(f"{len(missing)} of the 256 bytes are not tokens of the encoder (e.g. {missing[:3]}): a "
                         "text with one of them could not be encoded")
    for k, pair in enumerate(merges, 1):
        if tuple(map(type, pair)) != (str, str) or pair[0] + pair[1] not in encoder:
            raise ValueError(f"merge {k}, {pair!r}, is not two symbols whose join is a token of the encoder")


def _read_vocab(encoder_path, vocab_path):
    """(encoder, merges, pre-tokeniser pattern) from encoder.json and vocab.bpe. Cached; the key holds each file's
    size and modification time, so a vocabulary saved again to the same place is read again."""
    stamps = tuple((st.st_size, st.st_mtime_ns) for st in map(os.stat, (encoder_path, vocab_path)))
    return _read_vocab_files(encoder_path, vocab_path, stamps)


@functools.lru_cache(maxsize=4)
def _read_vocab_files(encoder_path, vocab_path, stamps):
    try:
        with open(encoder_path, encoding='utf-8-sig') as f:  # -sig: a file Notepad saved starts with a BOM
            encoder = json.load(f)
        with open(vocab_path, encoding='utf-8-sig') as f:
            lines = f.read().split('\n')
        # every reader skips the header line unread: an empty file passed as no merges, a headerless one lost one
        if not lines[0].startswith('#version'):
            raise ValueError(f"vocab.bpe's first line is {lines[0][:40]!r}, not its header '#version: 0.2'")
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError included; RecursionError: JSON nested too deep
        raise ValueError(f"cannot read the BPE vocabulary ({encoder_path}, {vocab_path}): {e}. Delete the "
                         "damaged file so that it is fetched (or trained) again") from None
    merges = [tuple(line.split()) for line in lines[1:] if line]
    return encoder, merges, None if lines[0] == NO_PRETOKENIZER else GPT2_PATTERN


def find_vocabulary(directory):
    """The names of the vocabulary files in directory that get_encoder(directory=) reads (see VOCAB_FILES), or None."""
    return next((names for names in VOCAB_FILES if Path(directory, names[0]).is_file()), None)


def _tokens_added_around_text(processor):
    """What a tokenizer.json's post-processor adds to the ids of a text: nothing in GPT-2's own (ByteLevel, which
    changes only offsets); <|endoftext|> first in a tokenizer saved with add_bos_token (a TemplateProcessing)."""
    kind = (processor or {}).get('type')
    if kind in (None, 'ByteLevel'):
        return []
    if kind == 'Sequence':
        return [t for p in processor['processors'] for t in _tokens_added_around_text(p)]
    if kind == 'TemplateProcessing':  # 'single': the template of one text, its Sequence and the tokens around it
        return [piece['SpecialToken']['id'] for piece in processor['single'] if 'SpecialToken' in piece]
    return [f"the tokens of a {kind}"]  # e.g. RobertaProcessing: <s> and </s>


def read_tokenizer_json(path):
    """An Encoder from a Hugging Face tokenizer.json of GPT-2's kind: a byte-level BPE with GPT-2's regex. The tokens
    added after the vocabulary (tokenizer.add_tokens, before model.resize_token_embeddings) are special tokens here;
    those that HF finds in text otherwise (lstrip...) are refused."""
    try:
        hf = json.loads(Path(path).read_text(encoding='utf-8'))
        model, pre = hf['model'], hf['pre_tokenizer'] or {}
        regex_on = pre.get('use_regex', True)  # older files have no use_regex: it defaults to True
        if (model['type'], hf['normalizer'], pre.get('type'), regex_on, pre.get('add_prefix_space')) != \
                ('BPE', None, 'ByteLevel', True, False):
            raise ValueError(f"it is not a byte-level BPE with GPT-2's pre-tokeniser (model {model['type']!r}, "
                             f"normalizer {hf['normalizer']!r}, pre_tokenizer {hf['pre_tokenizer']!r})")
        added = _tokens_added_around_text(hf.get('post_processor'))
        if added:  # add_bos_token / add_eos_token: transformers' ids would start or end with them, ours not
            raise ValueError(f"its post-processor adds {', '.join(added)} around every text (add_bos_token or "
                             "add_eos_token), which mingpt's tokenizer does not, so its ids would differ from "
                             "transformers'; save the tokenizer without those options and put the ids before or "
                             "after a text's ids yourself")
        encoder = {**model['vocab'], **{t['content']: t['id'] for t in hf['added_tokens']}}
        merges = [m.split(' ') if isinstance(m, str) else m for m in model['merges']]  # 'a b' in older files
        encoder = Encoder(encoder, merges)
        # HF finds an added token where its text stands, as mingpt finds a special token, except for these
        odd = [t['content'] for t in hf['added_tokens'] if t['content'] in encoder.ordinary
               or any(t.get(flag) for flag in ('lstrip', 'rstrip', 'single_word'))]
        if odd:
            raise ValueError(f"its added tokens {odd[:5]} are matched in text in ways mingpt does not follow (lstrip, "
                             "rstrip, single_word, or an ordinary token added again), so its ids would differ from "
                             "transformers'; save the tokenizer without them, or use transformers' tokenizer")
        return encoder
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        reason = f"it has no {e} entry" if isinstance(e, KeyError) else e  # a KeyError says only the key
        raise ValueError(f"cannot read {path} as GPT-2's kind of tokenizer: {reason}") from None


def _refuse_hf_tokenizer_options(directory, encoder):
    """Refuse what transformers reads beside vocab.json and merges.txt and mingpt would not follow, each of which
    gives other ids: a space put before the text, <|endoftext|> around it (tokenizer_config.json's add_prefix_space,
    add_bos_token, add_eos_token), or tokens added past vocab.json (its added_tokens_decoder or named tokens, and
    older transformers' added_tokens.json). Such a folder re-saved by transformers holds a tokenizer.json, read
    with its added tokens."""
    config = json_object(directory / 'tokenizer_config.json', 'the tokenizer')
    added = json_object(directory / 'added_tokens.json', 'the tokenizer')
    options = [k for k in ('add_prefix_space', 'add_bos_token', 'add_eos_token') if config.get(k)]
    named = [config.get(k) for k in ('bos_token', 'eos_token', 'unk_token', 'pad_token')]
    tokens = [*added, *(t.get('content') for t in config.get('added_tokens_decoder', {}).values()),
              *(t.get('content') if isinstance(t, dict) else t for t in named if t)]
    new = sorted({t for t in tokens if t not in encoder})
    why = []
    if options:
        why.append(f"{', '.join(options)} set")
    if new:
        why.append(f"the tokens {new[:5]} added past vocab.json")
    if why:
        raise ValueError(f"{directory}'s tokenizer has {' and '.join(why)}, which mingpt does not follow from "
                         "vocab.json and merges.txt, so its ids would differ from transformers'; save it with "
                         "transformers (AutoTokenizer.from_pretrained(folder).save_pretrained(folder) writes "
                         "tokenizer.json, read with its added tokens), without add_prefix_space, add_bos_token and "
                         "add_eos_token")


def get_encoder(encoder_path=None, vocab_path=None, directory=None):
    """A new Encoder. With `directory`: the encoder.json and vocab.bpe in it (as Encoder.save writes them), or a
    Hugging Face folder's tokenizer.json, or its vocab.json and merges.txt (a relative directory not found here is
    looked for under $MINGPT_DATA_DIR and the cache; 'gpt2' is GPT-2's vocabulary unless ./gpt2 holds an
    encoder.json). Else GPT-2's vocabulary: files from the given paths, else $MINGPT_DATA_DIR/gpt2/, else the cache,
    else OpenAI's site (downloaded once, sha256-checked)."""
    if directory is None:
        return _read_encoder(encoder_path, vocab_path)
    if encoder_path or vocab_path:
        raise ValueError("pass either directory or encoder_path/vocab_path, not both")
    return _encoder_in_folder(directory)


def _tokenizer_folder(directory):
    """The folder get_encoder(directory=...) reads, found here, under $MINGPT_DATA_DIR or in the cache; None for
    GPT-2's own vocabulary ('gpt2', unless ./gpt2 holds an encoder.json)."""
    # a ./gpt2 folder may be something else, such as a clone of Hugging Face's gpt2 (vocab.json, merges.txt)
    if Path(directory) == Path('gpt2') and not Path(directory, 'encoder.json').is_file():
        return None
    directory = find_local(directory) or directory  # e.g. under $MINGPT_DATA_DIR
    if Path(directory).is_file():  # e.g. its encoder.json
        raise NotADirectoryError(f"{directory} is a file; pass the folder that holds encoder.json and vocab.bpe")
    if not Path(directory).is_dir():  # nowhere: perhaps a misspelt name, such as gpt-2
        raise FileNotFoundError(f"no tokenizer folder {directory} here, in $MINGPT_DATA_DIR or in the cache: give "
                                "'gpt2' for GPT-2's vocabulary, a folder that holds one, or train one with "
                                f"`python -m mingpt.bpe train FILE --vocab-size N --out {directory}`")
    return directory


def _encoder_in_folder(directory):
    """get_encoder(directory=...): find the folder, read the vocabulary files it holds, or name what is missing."""
    directory = _tokenizer_folder(directory)
    if directory is None:
        return _read_encoder()
    # else the pair whose merges are there (half a tokenizer, named below), else GPT-2's names
    names = find_vocabulary(directory) or next(
        (names for names in VOCAB_FILES if Path(directory, names[-1]).is_file()), VOCAB_FILES[0])
    if names == ('tokenizer.json',):
        if json_object(Path(directory, 'tokenizer_config.json'), 'the tokenizer').get('add_prefix_space'):
            raise ValueError(f"{directory}'s tokenizer_config.json sets add_prefix_space, which transformers "
                             "follows (a space before every text) and mingpt does not, so its ids would differ; "
                             "save the tokenizer without it")
        return read_tokenizer_json(Path(directory, names[0]))
    encoder_path, vocab_path = (Path(directory) / name for name in names)
    for path, other in ((encoder_path, vocab_path), (vocab_path, encoder_path)):
        if not path.is_file() and other.is_file():  # half of a saved tokenizer
            raise FileNotFoundError(f"{directory} has {other.name} but not {path.name}: a BPE tokenizer needs "
                                    "both, the tokens and the merges; save it there again whole "
                                    "(tok.save_pretrained(folder), or tok.encoder.save(folder) for GPT-2's "
                                    "names, encoder.json and vocab.bpe)")
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist; train a vocabulary into {directory} with "
                                    f"`python -m mingpt.bpe train FILE --vocab-size N --out {directory}` (a "
                                    "Hugging Face folder holds the same files as vocab.json and merges.txt)")
    encoder = _read_encoder(encoder_path, vocab_path)
    if names == VOCAB_FILES[-1]:
        _refuse_hf_tokenizer_options(Path(directory), encoder.encoder)
    return encoder


def _read_encoder(encoder_path=None, vocab_path=None):
    """An Encoder from an encoder.json and a vocab.bpe: the paths given, else GPT-2's (found or downloaded)."""
    try:
        enc = fetch('gpt2/encoder.json', url=ENCODER_JSON_URL, path=encoder_path, sha256=ENCODER_JSON_SHA256,
                    local_copy="put it with vocab.bpe in gpt2/ of a folder that MINGPT_DATA_DIR names")
        bpe = fetch('gpt2/vocab.bpe', url=VOCAB_BPE_URL, path=vocab_path, sha256=VOCAB_BPE_SHA256,
                    local_copy="put it with encoder.json in gpt2/ of a folder that MINGPT_DATA_DIR names")
    except DownloadError as e:  # offline: the files whose paths were not given are needed (a path given was found)
        missing = [(name, arg) for name, arg, given in [('encoder.json', 'encoder_path', encoder_path),
                                                        ('vocab.bpe', 'vocab_path', vocab_path)] if not given]
        # only Python takes their paths (the projects have no option for them)
        their = ("their paths passed in Python to get_encoder(encoder_path, vocab_path)" if len(missing) == 2 else
                 f"its path passed in Python as get_encoder's {missing[0][1]} too")
        raise offline_error(e, [name for name, _ in missing], 'gpt2', f"anywhere, {their}") from None
    encoder, merges, pattern = _read_vocab(str(enc), str(bpe))
    try:
        return Encoder(encoder, merges, pattern=pattern)
    except ValueError as e:
        raise ValueError(f"{enc} and {bpe} are not a BPE vocabulary: {e}") from None


# ----------------------------------------------------------------------------------------------------------------
# minGPT's tokenizer: text to a tensor of ids and back


def _check_pad_token_id(pad_token_id):
    """pad_token_id as a plain int, or None. The tensor would cut a float to an int (2.5 pads with 2) and read a bool
    as 0 or 1; numpy's ints and a 0-d integer tensor are fine."""
    if pad_token_id is None:
        return None
    try:
        if 'bool' in str(getattr(pad_token_id, 'dtype', type(pad_token_id))):
            raise TypeError
        return operator.index(pad_token_id)  # an integer of any kind, never a float
    except TypeError:
        raise TypeError(f"pad_token_id must be an int, the id that pads short rows, got {pad_token_id!r}; "
                        "give int(...) of it, or None for the id of '<|endoftext|>'") from None


def _saved_options(directory, encoder, given):
    """The pad_token_id and allowed_special saved in directory's tokenizer_config.json beside its Hugging Face
    vocabulary (vocab.json and merges.txt, or tokenizer.json), checked, but not those `given` (the arguments, which
    win); {} for GPT-2's own vocabulary or a folder without them. A pad_token (Hugging Face's name for the token it
    pads with, written by transformers' save_pretrained) gives pad_token_id: transformers pads with it."""
    folder = None if directory is None else _tokenizer_folder(directory)
    # a vocabulary saved there since as encoder.json (Encoder.save) is read instead: the options were not its
    if folder is None or find_vocabulary(folder) in (None, VOCAB_FILES[0]):
        return {}
    path = Path(folder, 'tokenizer_config.json')
    config = json_object(path, 'the tokenizer')
    pad = config.get('pad_token')
    pad = pad.get('content') if isinstance(pad, dict) else pad  # older transformers wrote an AddedToken's fields
    if pad is not None and 'pad_token_id' not in given:
        if pad not in encoder.encoder:
            raise ValueError(f"cannot read {path}: its pad_token {pad!r} is not a token of the vocabulary; save the "
                             "tokenizer there again (tok.save_pretrained(folder))")
        config['pad_token_id'] = encoder.encoder[pad]
    saved = {k: config[k] for k in ('pad_token_id', 'allowed_special') if k not in given and config.get(k) is not None}
    try:
        _allowed_specials(saved.get('allowed_special'), encoder.special_tokens)
        _check_pad_token_id(saved.get('pad_token_id'))
    except (TypeError, ValueError) as e:
        raise ValueError(f"cannot read {path}: {e}. Save the tokenizer there again (tok.save_pretrained(folder))") \
            from None
    return saved


class BPETokenizer:
    """minGPT's tokenizer interface: tok("text") -> (1, T) LongTensor; tok.decode(ids) -> str.

    GPT-2's vocabulary by default; `directory` loads one saved by Encoder.save (e.g. trained with train_bpe), or by
    save_pretrained, whose pad_token_id and allowed_special it takes unless they are given, or by transformers'
    save_pretrained, whose pad_token it pads with (as transformers does) unless pad_token_id is given.
    A list of strings gives a (B, T) LongTensor, where T is the longest row: shorter rows are right-padded with
    `pad_token_id` (default: the id of '<|endoftext|>', 50256 in GPT-2, which has no pad token). Pass
    return_lengths=True to get (ids, lengths) as well, lengths a (B,) LongTensor of the real row lengths (the mask
    is `torch.arange(T) < lengths[:, None]`). Decoding a padded row gives back the padding as text; cut rows to
    their lengths first.
    """

    def __init__(self, allowed_special=None, pad_token_id=None, encoder_path=None, vocab_path=None,
                 directory=None):
        self.encoder = get_encoder(encoder_path, vocab_path, directory)
        given = {k for k, v in (('allowed_special', allowed_special), ('pad_token_id', pad_token_id)) if v is not None}
        saved = _saved_options(directory, self.encoder, given)  # the arguments given win over these
        self.allowed_special = saved.get('allowed_special', False) if allowed_special is None else allowed_special
        _allowed_specials(self.allowed_special, self.encoder.special_tokens)  # refused now, not at the first call
        self.eot_token_id = self.encoder.special_tokens.get(ENDOFTEXT)
        pad_token_id = _check_pad_token_id(saved.get('pad_token_id') if pad_token_id is None else pad_token_id)
        self.pad_token_id = self.eot_token_id if pad_token_id is None else pad_token_id
        self.vocab_size = len(self.encoder)

    def __call__(self, text, return_tensors='pt', return_lengths=False):
        if return_tensors != 'pt':
            raise ValueError(f"return_tensors={return_tensors!r} is not supported; only 'pt' (a torch tensor)")
        if isinstance(text, str):
            rows = [self.encoder.encode(text, self.allowed_special)]
        elif isinstance(text, (list, tuple)) and text and all(isinstance(t, str) for t in text):
            rows = [self.encoder.encode(t, self.allowed_special) for t in text]
        else:
            raise TypeError("BPETokenizer takes a str or a non-empty list of str, "
                            f"got {type(text).__name__}{'' if isinstance(text, str) else ': ' + repr(text)[:60]}")
        lengths = [len(r) for r in rows]
        width = max(lengths)
        if self.pad_token_id is None and min(lengths) < width:
            raise ValueError(f"rows of different lengths need padding and this vocabulary has no {ENDOFTEXT}; "
                             "pass pad_token_id= to BPETokenizer")
        out = torch.tensor([r + [self.pad_token_id] * (width - len(r)) for r in rows], dtype=torch.long)
        out = out.view(len(rows), width)  # (1, 0) for an empty string
        if return_lengths:
            return out, torch.tensor(lengths, dtype=torch.long)
        return out

    def save_pretrained(self, directory):
        """Write the vocabulary into `directory` as Hugging Face names it (vocab.json and merges.txt): beside a
        model's GPT.save_pretrained, transformers' AutoTokenizer and generate.py --model read it from there
        (AutoTokenizer reads it alone too). tokenizer_config.json keeps pad_token_id and allowed_special, which
        BPETokenizer(directory=...) reads back, and a special token that pads as Hugging Face's pad_token, so
        AutoTokenizer pads with it too (an ordinary one, such as '!', it would also find inside text: '!!', one
        token here, would become two)."""
        allowed = self.allowed_special
        config = {'pad_token_id': self.pad_token_id,
                  'allowed_special': sorted(allowed) if isinstance(allowed, (set, frozenset, list, tuple)) else allowed}
        pad = self.encoder.decoder.get(self.pad_token_id)
        # GPT-2's tokenizer has no pad token in Hugging Face: padding with <|endoftext|> (ours) is not written as one,
        # where HF's collators would then mask every real <|endoftext|> out of the labels
        if pad in self.encoder.special_tokens and self.pad_token_id != self.eot_token_id:
            config['pad_token'] = pad
        return self.encoder.save(directory, hugging_face=True, config=config)

    def decode(self, ids):
        """ids: a 1-D tensor or list of ints -> str; a 2-D tensor or list of lists (or of 1-D tensors, e.g. rows cut
        to their lengths) -> list of str."""
        ids = _plain_ids(ids)
        if isinstance(ids, int):
            ids = [ids]
        ids = [_plain_ids(i) if hasattr(i, 'tolist') else i for i in ids]  # a list of tensors as a list of lists
        if ids and isinstance(ids[0], (list, tuple)):
            return [self.encoder.decode(row) for row in ids]
        return self.encoder.decode(ids)

    def decode_stream(self, ids):
        """The text of a stream of ids, yielded as each character completes (see Encoder.decode_stream)."""
        return self.encoder.decode_stream(ids)


# ----------------------------------------------------------------------------------------------------------------
# Training a vocabulary: the slides' algorithm, made fast by updating the pair counts instead of recounting them


class BPETrainer:
    """Byte-pair encoding training, one merge at a time (train_bpe drives it).

    The distinct words of the text, each with how often it occurs, lie end to end: position p holds a symbol id,
    `next`/`prev` link the symbols of one word (-1 at its ends), and a symbol merged into its left neighbour becomes
    -1. `counts[pair]` is how often the pair of adjacent symbols occurs in the text, `where[pair]` the positions of
    its left symbol. So a merge visits only the words that hold the pair and updates only the pairs beside each
    occurrence. A heap of (-count, first position, pair) gives the next pair; entries go stale when a count
    changes and are skipped when popped (lazy deletion).

    Ties: among pairs of equal count, the one whose earliest occurrence in the text, as segmented now, comes first
    (the text position of its left symbol). Words are laid out in the order of their first occurrence and a word's
    first occurrence ends before the next new word begins, so the smallest position in `where[pair]` is that
    earliest occurrence. `first[pair]` keeps a lower bound of it, checked when the pair reaches the top of the heap:
    a merge only removes occurrences of the pairs that existed before it (their earliest can only move right) and
    adds occurrences only to pairs holding the new symbol.
    """

    def __init__(self, words):
        """words: (bytes, count) for each distinct word, in the order of their first occurrence in the text."""
        self.vocab = [bytes([b]) for b in range(256)]  # id -> bytes
        self.symbols, self.next, self.prev, self.weight, self.starts = [], [], [], [], []
        for word, count in words:
            start = len(self.symbols)
            self.starts.append(start)
            self.symbols.extend(word)
            self.weight.extend(repeat(count, len(word)))
            self.next.extend([*range(start + 1, start + len(word)), -1])
            self.prev.extend([-1, *range(start, start + len(word) - 1)])
        self.counts, self.where, self.first, self.changed = {}, defaultdict(set), {}, set()
        for i, j in enumerate(self.next):
            if j >= 0:
                self._add((self.symbols[i], self.symbols[j]), i, self.weight[i])
        self.heap = [(-count, self.first[pair], pair) for pair, count in self.counts.items()]
        heapq.heapify(self.heap)

    def merge(self):
        """Merge the most frequent pair everywhere into a new symbol, id len(vocab). Returns (first id, second id,
        count), or None when no pair is left."""
        best = self._pop_best()
        if best is None:
            return None
        (a, b), count = best
        self.vocab.append(self.vocab[a] + self.vocab[b])
        self._replace((a, b), len(self.vocab) - 1)
        return a, b, count

    def word_symbols(self, w):
        """The ids of distinct word number w as it is segmented now."""
        i, out = self.starts[w], []
        while i >= 0:
            out.append(self.symbols[i])
            i = self.next[i]
        return out

    def _pop_best(self):
        """(pair, count) of the most frequent pair, the first in the text of equals, or None when no pair is left."""
        heap, counts, first = self.heap, self.counts, self.first
        while heap:
            negative_count, position, pair = heapq.heappop(heap)
            if counts.get(pair) != -negative_count or first[pair] != position:
                continue  # stale: the pair's count or position changed after this entry was pushed
            earliest = min(self.where[pair])
            if earliest != position:  # its first occurrence was merged away: queue it again where it is now
                first[pair] = earliest
                heapq.heappush(heap, (negative_count, earliest, pair))
                continue
            return pair, -negative_count
        return None

    def _replace(self, pair, new):
        """Rewrite each occurrence of pair as the symbol `new`, left to right (so 'aaa' becomes 'aa' 'a'), and update
        the counts of the pairs beside it."""
        a, b = pair
        symbols, next_, prev = self.symbols, self.next, self.prev
        for i in sorted(self.where.pop(pair)):
            j = next_[i]
            if symbols[i] != a or j < 0 or symbols[j] != b:
                continue  # an overlapping occurrence just to the left took one of these symbols
            w, h, k = self.weight[i], prev[i], next_[j]
            if h >= 0:
                self._remove((symbols[h], a), h, w)
                self._add((symbols[h], new), h, w)
            if k >= 0:
                self._remove((b, symbols[k]), j, w)
                self._add((new, symbols[k]), i, w)
                prev[k] = i
            symbols[i], symbols[j], next_[i] = new, -1, k
        for p in (self.counts, self.first, self.where):
            p.pop(pair, None)
        for p in self.changed:
            if p in self.counts:
                heapq.heappush(self.heap, (-self.counts[p], self.first[p], p))
        self.changed.clear()

    def _add(self, pair, i, weight):
        self.counts[pair] = self.counts.get(pair, 0) + weight
        self.where[pair].add(i)
        if i < self.first.get(pair, i + 1):
            self.first[pair] = i
        self.changed.add(pair)

    def _remove(self, pair, i, weight):
        self.counts[pair] -= weight
        self.where[pair].discard(i)
        self.changed.add(pair)
        if not self.counts[pair]:
            del self.counts[pair], self.where[pair], self.first[pair]


def _check_training_arguments(special_tokens, vocab_size):
    """train_bpe's special tokens as a list (one str is one token), once vocab_size is known to have room for them."""
    specials = [special_tokens] if isinstance(special_tokens, str) else list(special_tokens or ())
    if not all(isinstance(s, str) and s for s in specials) or len(set(specials)) < len(specials):
        raise ValueError(f"special_tokens must be distinct non-empty strings, got {specials!r}")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, numbers.Integral):  # numpy's ints are Integral
        raise TypeError(f"vocab_size must be an int, got {vocab_size!r}")
    if vocab_size < 256 + len(specials):
        raise ValueError(f"vocab_size={vocab_size!r} is too small: it counts the 256 byte tokens, the merges and the "
                         f"{len(specials)} special {plural(len(specials), 'token')}, so it must be at least "
                         f"{256 + len(specials)}")
    return specials


def _cut(text, specials, pretokenize):
    """The text as training sees it: a list whose even items are lists of words (str) and odd items the special
    tokens between them. Special tokens are cut out first; then GPT-2's regex cuts words, or (pretokenize=False)
    each piece between special tokens is one word."""
    pieces = _special_splitter(frozenset(specials)).split(text) if specials else [text]
    pat = regex.compile(GPT2_PATTERN) if pretokenize else None
    return [piece if k % 2 else pre_tokenize(piece, pat) for k, piece in enumerate(pieces)]


def train_bpe(text, vocab_size, pretokenize=True, special_tokens=(ENDOFTEXT,), progress=False, show=False):
    """Learn a byte-level BPE vocabulary of `vocab_size` tokens from `text`; returns an Encoder (write it with
    .save(directory)). The slides' algorithm: start from the 256 bytes, count adjacent pairs, merge the most
    frequent pair, repeat.

    - vocab_size counts the 256 byte tokens, the merges and the special tokens. Ids: the bytes by value (0..255),
      then the merges in order, then the special tokens.
    - pretokenize=True: GPT-2's regex cuts the text first and pairs never cross a cut. False: the plain algorithm on
      the raw bytes (spaces merge too), and the Encoder it returns does not pre-tokenise either.
    - Ties go to the pair that occurs first in the text as it is segmented at that step (see BPETrainer).
    - Special tokens are cut out of the text first, so they are never split or merged; they get the last ids.
    - If no pair is left, training stops early with a warning and the vocabulary is smaller.
    progress: a tqdm bar over merges. show: print each merge, its count and the start of the text after it.
    """
    if not isinstance(text, str):
        raise TypeError(f"train_bpe takes a str, got {type(text).__name__}; decode bytes to str first (it learns "
                        "from the text's UTF-8 bytes)")
    if not isinstance(pretokenize, (bool, np.bool_)):  # 'no' or 'False' would be true
        raise TypeError(f"pretokenize must be True or False, got {pretokenize!r}")
    specials = _check_training_arguments(special_tokens, vocab_size)
    parts = _cut(text, specials, pretokenize)
    words = Counter(chain.from_iterable(parts[::2]))  # in the order of first occurrence
    trainer = BPETrainer((word.encode('utf-8'), count) for word, count in words.items())
    layout = _show_layout(parts, words) if show else None
    merges, n_tokens = [], vocab_size - len(specials)
    with tqdm(total=n_tokens - 256, desc='BPE merges', unit='merge', disable=not progress) as bar:
        if show:
            tqdm.write(f'start: {_render(trainer, layout)}')
        while len(trainer.vocab) < n_tokens:
            step = trainer.merge()
            if step is None:  # no pair left: said below, once the bar is closed, not inside its line
                break
            merges.append(step[:2])
            bar.update()
            if show:
                a, b, ab = (token_repr(trainer.vocab[i]) for i in (step[0], step[1], -1))
                tqdm.write(f'merge {len(merges)}: {a} + {b} -> {ab} (count {step[2]})\n'
                           f'  {_render(trainer, layout)}')
    if len(trainer.vocab) < n_tokens:
        warn_caller(f"no pair of symbols is left after {len(merges)} {plural(len(merges), 'merge')}: the vocabulary "
                    f"has {len(trainer.vocab) + len(specials)} tokens, not {vocab_size}; train on more text")
    return _encoder_from(trainer.vocab, merges, specials, GPT2_PATTERN if pretokenize else None)


def _show_layout(parts, words, limit=400):
    """The start of the text (about `limit` characters as --show first writes it, each byte of a character beyond
    ASCII as \\xNN) as a list of distinct-word numbers and special tokens."""
    index = {word: k for k, word in enumerate(words)}
    layout, size = [], 0
    for k, part in enumerate(parts):
        for item in (part if k % 2 == 0 else [part]):
            if size >= limit:
                return layout + ['…']
            layout.append(index[item] if k % 2 == 0 else item)
            size += len(repr(item.encode('utf-8'))) - 3  # as written: Hindi's \xe0\xa4\xa8 for one letter
    return layout


def token_repr(token):
    """A token (bytes) as --show and generate.py's --show_next name it: its text, quoted, or its bytes where they are
    not whole UTF-8 characters (as '\ufffd' they would all look alike): b'\\xe0\\xa4'."""
    try:
        return repr(token.decode('utf-8'))
    except UnicodeDecodeError:
        return repr(token)


def _render(trainer, layout):
    """The text as segmented now, tokens separated by '|'; a piece of a UTF-8 character as its bytes, '\\xe2'."""
    tokens = []
    for item in layout:
        tokens += [trainer.vocab[i].decode('utf-8', 'backslashreplace') for i in trainer.word_symbols(item)] \
            if isinstance(item, int) else [item]
    return '|'.join(tokens).replace('\n', '\\n').replace('\r', '\\r').replace('\t', '\\t')


def _encoder_from(vocab, merges, specials, pattern):
    """An Encoder from the trainer's tokens (bytes, by id) and merges (id pairs): strings in GPT-2's alphabet."""
    alphabet = bytes_to_unicode()

    def spell(token):
        return token.decode('latin-1').translate(alphabet)
    encoder = {spell(token): i for i, token in enumerate(vocab)}
    for s in specials:
        if s in encoder:
            raise ValueError(f"the special token {s!r} is spelled like a token of the vocabulary (a byte or a "
                             "merge), so a saved vocabulary could not tell the two apart; rename it")
        encoder[s] = len(encoder)
    return Encoder(encoder, [(spell(vocab[a]), spell(vocab[b])) for a, b in merges], pattern=pattern)


# ----------------------------------------------------------------------------------------------------------------
# The command line: python -m mingpt.bpe train FILE --vocab-size N --out DIR


def _report_bytes_per_token(text, encoder):
    """Print bytes per token on `text` for this vocabulary and, when its files can be had, for GPT-2's."""
    contenders = [('this vocabulary', encoder)]
    try:
        contenders.append(("GPT-2's vocabulary", get_encoder()))
    except (OSError, RuntimeError, ValueError) as e:
        print(f"GPT-2's vocabulary is not available ({str(e)[:150]}...): skipping the comparison with it")
    nbytes = len(text.encode('utf-8'))
    for name, enc in contenders:
        n = len(enc.encode(text, allowed_special='all'))
        print(f"{name} ({len(enc)} tokens): {n:,} {plural(n, 'token')} for {nbytes:,} bytes, "
              f"{nbytes / max(n, 1):.2f} bytes per token")


# a word of the --curve: bytes between ASCII white space (unlike str.split, U+00A0 and U+3000 do not cut one)
CURVE_WORD = regex.compile(rb'\S+')


def _first_seen_counts(items, ends, at):
    """How many distinct items occur among those that end at or before each offset in `at` (ends ascending)."""
    first = {}
    for k, item in enumerate(items):
        first.setdefault(item, k)
    return np.searchsorted(np.sort(ends[list(first.values())]), at, side='right')


def _plot_vocabulary_curve(text, encoder, path, fig, points=40):
    """Vocabulary size against corpus length (Heaps' law), log-log: distinct words (whitespace-split types) keep
    growing roughly as K * n^beta, while the BPE tokens in use level off below the vocabulary size."""
    data = text.encode('utf-8')
    matches = list(CURVE_WORD.finditer(data))
    words, word_ends = [m.group() for m in matches], np.array([m.end() for m in matches])
    ids = encoder.encode(text, allowed_special='all')
    token_ends = np.cumsum([len(encoder._id_bytes[i]) for i in ids])
    n = np.unique(np.geomspace(1, len(words), points).astype(int))  # corpus lengths, in words
    at = word_ends[n - 1]
    types, tokens = _first_seen_counts(words, word_ends, at), _first_seen_counts(ids, token_ends, at)
    fit = n >= max(100, n[-1] // 100)  # fit the law away from the first few words
    if fit.sum() < 3:  # a short text: fit all of it
        fit[:] = True
    beta, log_k = np.polyfit(np.log(n[fit]), np.log(types[fit]), 1)
    ax = fig.subplots()
    ax.loglog(n, types, 'o-', ms=3, label='distinct words (whitespace-split types)')
    law = f"${np.exp(log_k):.1f}\\,n^{{{beta:.2f}}}$"
    ax.loglog(n, np.exp(log_k) * n ** beta, ':', color='gray', label=f"Heaps' law fit: {law}")
    ax.loglog(n, tokens, 's-', ms=3, label='distinct BPE tokens used')
    ax.axhline(len(encoder), ls='--', color='C1', lw=1, label=f'BPE vocabulary size ({len(encoder)})')
    ax.set(xlabel='corpus length n (words)', ylabel='vocabulary size (distinct types)',
           title='Vocabulary size against corpus length')
    ax.grid(True, which='both', alpha=0.3)
    ax.legend(fontsize=8)
    from mingpt.plot import save
    save(fig, path, dpi=120)
    print(f"wrote {path}: Heaps' law fit V = {np.exp(log_k):.1f} n^{beta:.2f} on {len(words):,} words; "
          f"{types[-1]:,} distinct words, {tokens[-1]:,} distinct BPE tokens")


def _show_encoding(encoder, text):
    """Print how encode turns text into ids, step by step: the pre-tokens, each one's merges in order, its ids."""
    words = encoder.pre_tokens(text)
    print(f"{len(words)} {plural(len(words), 'pre-token')}, in the byte alphabet of vocab.bpe (a space is "
          f"{encoder.byte_encoder[32]}); merge N is vocab.bpe's N-th, the N-th learned: in a word, the lowest N "
          "present goes first")
    for word in words:
        steps = encoder.merge_steps(word)
        print(f"\n{word!r}: {' '.join(steps[0][1])}")
        for pair, symbols in steps[1:]:
            print(f"  merge {encoder.bpe_ranks[pair] + 1:>6} {pair[0] + '+' + pair[1]:<16} {' '.join(symbols)}")
        print(f"  ids {[encoder.ordinary[s] for s in steps[-1][1]]}")
    n = len(encoder.encode_ordinary(text))
    nbytes = len(''.join(words).encode('utf-8'))
    print(f"\n{n} {plural(n, 'token')} for {nbytes} {plural(nbytes, 'byte')}")


TRAIN_HELP = """Learn a byte-level BPE vocabulary from FILE (or a folder's .txt files, one after another): start from
the 256 bytes, count adjacent pairs, merge the most frequent pair, repeat until --vocab-size tokens (bytes + merges +
special tokens). Writes OUT/encoder.json and OUT/vocab.bpe in GPT-2's format (load them with
mingpt.bpe.get_encoder(directory=OUT) or BPETokenizer(directory=OUT)), then prints bytes per token on FILE for this
vocabulary and for GPT-2's.

example: python -m mingpt.bpe train input.txt --vocab-size 5000 --out my_tokenizer --curve vocab.png"""


def main(argv):  # no default of sys.argv: in a notebook that is the kernel's (-f kernel.json)
    parser = argparse.ArgumentParser(prog='python -m mingpt.bpe', description='Byte-level BPE vocabularies.')
    commands = parser.add_subparsers(dest='command', required=True)
    train = commands.add_parser('train', help='learn a vocabulary from a text file (or a folder of them), save it in '
                                'GPT-2 format',
                                description=TRAIN_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    path = os.path.expanduser  # the shell leaves the ~ of --out=~/tok as it is, after the '='
    train.add_argument('file', type=path, help='UTF-8 text to learn from: a file, or a folder whose .txt files '
                       '(not those of its subfolders) are read in the order of their names')
    train.add_argument('--vocab-size', type=int, required=True, help='256 bytes + merges + special tokens')
    train.add_argument('--out', type=path, required=True, help='directory for encoder.json and vocab.bpe')
    train.add_argument('--no-pretokenize', action='store_true',
                       help="merge across GPT-2's word boundaries too: the plain algorithm on the raw bytes")
    train.add_argument('--special-tokens', nargs='*', default=[ENDOFTEXT], metavar='TOKEN',
                       help=f'(default: {ENDOFTEXT}; give the option alone for none)')
    train.add_argument('--show', action='store_true', help='print each merge, its count and the text after it')
    train.add_argument('--curve', type=path, metavar='PNG',
                       help='draw vocabulary size against corpus length into PNG (or .pdf, .svg)')
    show = commands.add_parser('encode', help="show how a text is encoded: each word's merges in order, its ids")
    show.add_argument('text')
    show.add_argument('--vocab', type=path, metavar='DIR', help="a vocabulary's directory (default: GPT-2's)")
    args = parser.parse_args(argv)
    if args.command == 'encode':
        return _show_encoding(get_encoder(directory=args.vocab) if args.vocab else get_encoder(), args.text)
    from mingpt.plot import image_format, new_figure  # the command line's pictures; the tokenizer needs no plotting
    fig = new_figure(7, 4.5) if args.curve else None  # fail before training if matplotlib is missing
    if args.curve:
        try:
            image_format(fig, args.curve)  # and if it cannot write the picture's format
        except ValueError as e:
            parser.error(f'--curve: {e}')
    try:  # a folder's .txt files, in the order of their names, as a project's data.path reads them
        files = corpus_files(args.file)
    except OSError as e:  # a folder with no .txt file in it: its message says what to give
        parser.error(str(e))
    texts = []
    for file in files:
        try:
            texts.append(file.read_bytes().decode('utf-8'))  # every byte as it is: no newline translation
        except OSError as e:
            parser.error(f'cannot read {file}: {e}')
        except UnicodeDecodeError as e:
            parser.error(str(not_utf8(file, e)))
    if Path(args.file).is_dir():
        print(f"learning from {len(files)} .txt {plural(len(files), 'file')} of {args.file}, one after another in "
              "the order of their names")
    text = '\n\n'.join(texts)  # at least one blank line between two files, as read_corpus puts
    if Path(args.out).is_file():  # said now, not after the training, as makedirs' '[Errno 17] File exists'
        parser.error(f'--out {args.out} is a file; give a folder for encoder.json and vocab.bpe')
    if args.curve and (n := len(CURVE_WORD.findall(text.encode('utf-8')))) < 3:
        parser.error(f'--curve needs a text of at least 3 words (cut at ASCII white space) to draw a curve; '
                     f'{args.file} has {n}')
    # --show's lines are the progress; a bar between them would be redrawn after each, in a log or a pipe
    encoder = train_bpe(text, args.vocab_size, not args.no_pretokenize, args.special_tokens, progress=not args.show,
                        show=args.show)
    encoder = get_encoder(directory=encoder.save(args.out))  # report on what the files hold
    print(f"wrote {Path(args.out) / 'encoder.json'} and vocab.bpe: {len(encoder)} tokens, "
          f"{len(encoder.bpe_merges)} merges")
    _report_bytes_per_token(text, encoder)
    if args.curve:
        _plot_vocabulary_curve(text, encoder, args.curve, fig)


if __name__ == '__main__':
    run_cli(main)
