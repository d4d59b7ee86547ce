r"""GPT-2's byte-level BPE tokenizer, exact to OpenAI's ids (tested against tiktoken), written to be read.

How GPT-2 turns text into ids:
1. The text's UTF-8 bytes are the alphabet, so any string can be encoded. Each of the 256 byte values is shown
   as a printable unicode character (bytes_to_unicode), because the vocabulary files are text.
2. A regex cuts the text into pre-tokens ("words"): contractions, letters, digits, other symbols, whitespace,
   each optionally with one leading space. Merges never cross a pre-token boundary.
3. Inside a pre-token, the adjacent pair of symbols with the lowest merge rank (its line in vocab.bpe) is
   merged, again and again, until no pair in the word has a rank. Each final symbol is one id (encoder.json).

Speed: most pre-tokens are a single vocabulary entry, so we look the whole word up before running the merge
loop, and we remember every word's ids, so a text costs one regex pass, one dict look-up per word and one merge
loop per distinct word.

Unicode versions: \p{L}, \p{N} and \s come from the `regex` package's Unicode tables. For characters assigned
after GPT-2 was trained that is a choice, not a fact: e.g. regex 2026.x knows Unicode 17 (CJK Extension J,
U+323B0..U+3347F, is letters) while tiktoken 0.14's Rust engine knows Unicode 16 (the same code points are
symbols), so text containing them splits differently. On every other character the ids are tiktoken's.
"""
import functools
import json
from itertools import chain, repeat

import regex
import torch

from mingpt.data import fetch

# OpenAI's published vocabulary files and their sha256 (the same pair tiktoken pins for 'gpt2')
ENCODER_JSON_URL = 'https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json'
VOCAB_BPE_URL = 'https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe'
ENCODER_JSON_SHA256 = '196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783'
VOCAB_BPE_SHA256 = '1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5'

# GPT-2's pre-tokenisation pattern, as in OpenAI's encoder.py: contractions, an optional space then letters,
# or digits, or other symbols; whitespace runs (all but the last space, which goes with the next word)
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
ENDOFTEXT = '<|endoftext|>'
ENDOFTEXT_ID = 50256
NO_MERGE = 1 << 62  # the rank of a pair that vocab.bpe does not list


def bytes_to_unicode():
    """Map each byte 0..255 to a printable unicode character. Printable latin-1 bytes map to themselves; the rest
    (control characters, space, ...) are shifted to 256, 257, ... in order. So b' ' shows as 'Ġ' (chr(288))."""
    keep = list(range(ord('!'), ord('~') + 1)) + list(range(ord('¡'), ord('¬') + 1)) + list(range(ord('®'), 256))
    table, shift = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shift)
            shift += 1
    return table


def _allows_endoftext(allowed_special):
    if allowed_special is True or allowed_special == 'all':
        return True
    if allowed_special is False or allowed_special is None:
        return False
    if isinstance(allowed_special, (set, frozenset, list, tuple)):
        return ENDOFTEXT in allowed_special
    raise ValueError(f"allowed_special must be False, True, 'all' or a set of special tokens, got {allowed_special!r}")


class Encoder:
    """Text <-> GPT-2 ids. `encoder` maps token strings (in the bytes_to_unicode alphabet) to ids; `bpe_merges`
    is the list of merges (first, second) in rank order, as read from vocab.bpe."""

    def __init__(self, encoder, bpe_merges, cache_size=1_000_000):
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {v: k for k, v in self.byte_encoder.items()}
        self.encoder = encoder
        self.decoder = {v: k for k, v in encoder.items()}
        self.bpe_ranks = {tuple(pair): rank for rank, pair in enumerate(bpe_merges)}
        self.pat = regex.compile(GPT2_PATTERN)
        self.cache = {}  # pre-token (plain text) -> tuple of ids
        self.cache_size = cache_size
        # id -> its bytes, for decode
        self._id_bytes = [b''] * (max(self.decoder) + 1)
        for i, s in self.decoder.items():
            self._id_bytes[i] = bytes(self.byte_decoder[c] for c in s)

    def bpe(self, token):
        """Merge a pre-token (already in the bytes_to_unicode alphabet) into vocabulary symbols; returns them
        joined by spaces, as minGPT's Encoder.bpe does."""
        return ' '.join(self._merge(token))

    def _merge(self, token):
        if token in self.encoder:
            return [token]
        parts = list(token)
        rank = self.bpe_ranks.get
        # ranks[i]: the merge rank of the pair (parts[i], parts[i + 1]), NO_MERGE if vocab.bpe does not list it
        ranks = list(map(rank, zip(parts, parts[1:]), repeat(NO_MERGE)))
        while ranks:
            best = min(ranks)
            if best == NO_MERGE:
                break
            i = ranks.index(best)  # the lowest-ranked pair merges first (the leftmost one if it occurs twice)
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
            del ranks[i]  # only the two pairs around the new symbol change
            if i > 0:
                ranks[i - 1] = rank((parts[i - 1], parts[i]), NO_MERGE)
            if i < len(ranks):
                ranks[i] = rank((parts[i], parts[i + 1]), NO_MERGE)
        return parts

    def _encode_word(self, word):
        # bytes -> alphabet in one C call: latin-1 gives one char per byte, translate maps its ordinal to the table
        token = word.encode('utf-8').decode('latin-1').translate(self.byte_encoder)
        i = self.encoder.get(token)
        if i is not None:  # most words are one token: no merge loop
            return (i,)
        return tuple(self.encoder[s] for s in self._merge(token))

    def encode_ordinary(self, text):
        """Ids of `text`, with every character treated as text (so '<|endoftext|>' is 7 ordinary tokens)."""
        words = self.pat.findall(text)
        cache = self.cache
        new = set(words).difference(cache)
        if len(cache) + len(new) > self.cache_size:
            cache.clear()
            new = set(words)
        for w in new:
            cache[w] = self._encode_word(w)
        return list(chain.from_iterable(map(cache.__getitem__, words)))

    def encode(self, text, allowed_special=False):
        """Ids of `text`. By default '<|endoftext|>' is plain text, like tiktoken's encode_ordinary; with
        allowed_special=True (or 'all', or a set containing '<|endoftext|>') it becomes the single id 50256."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, got {type(text).__name__}; decode bytes to str first")
        if _allows_endoftext(allowed_special):
            ids = []
            for k, piece in enumerate(text.split(ENDOFTEXT)):
                if k:
                    ids.append(self.encoder[ENDOFTEXT])
                ids.extend(self.encode_ordinary(piece))
            return ids
        return self.encode_ordinary(text)

    def decode_bytes(self, ids):
        """The raw bytes of a list of ids (a token may end in the middle of a UTF-8 character: when streaming,
        decode the bytes once a character is complete)."""
        try:
            if ids and min(ids) < 0:
                raise IndexError
            return b''.join(map(self._id_bytes.__getitem__, ids))
        except (IndexError, TypeError):
            bad = [i for i in ids if not isinstance(i, int) or not 0 <= i < len(self._id_bytes)]
            raise ValueError(f"cannot decode ids {bad[:5]}: GPT-2 ids are ints in 0..{len(self._id_bytes) - 1}"
                             ) from None

    def decode(self, ids):
        """Text of a list of ids; bytes that are not valid UTF-8 become U+FFFD, as in GPT-2."""
        return self.decode_bytes(ids).decode('utf-8', errors='replace')


@functools.lru_cache(maxsize=4)
def _read_vocab(encoder_path, vocab_path):
    try:
        with open(encoder_path, encoding='utf-8') as f:
            encoder = json.load(f)
        with open(vocab_path, encoding='utf-8') as f:
            lines = f.read().split('\n')
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read the GPT-2 vocabulary ({encoder_path}, {vocab_path}): {e}. Delete the "
                         "damaged file so that it is fetched again") from None
    merges = [tuple(line.split()) for line in lines[1:] if line]
    return encoder, merges


def get_encoder(encoder_path=None, vocab_path=None):
    """A new Encoder for GPT-2's vocabulary. Files come from the given paths, else $MINGPT_DATA_DIR/gpt2/, else
    the cache, else OpenAI's site (downloaded once, sha256-checked)."""
    enc = fetch('gpt2/encoder.json', url=ENCODER_JSON_URL, path=encoder_path, sha256=ENCODER_JSON_SHA256)
    bpe = fetch('gpt2/vocab.bpe', url=VOCAB_BPE_URL, path=vocab_path, sha256=VOCAB_BPE_SHA256)
    encoder, merges = _read_vocab(str(enc), str(bpe))
    return Encoder(encoder, merges)


class BPETokenizer:
    """minGPT's tokenizer interface: tok("text") -> (1, T) LongTensor; tok.decode(ids) -> str.

    A list of strings gives a (B, T) LongTensor, where T is the longest row: shorter rows are right-padded with
    `pad_token_id` (default 50256, '<|endoftext|>': GPT-2 has no pad token). Pass return_lengths=True to get
    (ids, lengths) as well, lengths a (B,) LongTensor of the real row lengths (the mask is
    `torch.arange(T) < lengths[:, None]`). Decoding a padded row gives back the padding as text; cut rows to
    their lengths first.
    """

    def __init__(self, allowed_special=False, pad_token_id=ENDOFTEXT_ID, encoder_path=None, vocab_path=None):
        self.encoder = get_encoder(encoder_path, vocab_path)
        self.allowed_special = allowed_special
        self.pad_token_id = pad_token_id
        self.eot_token_id = ENDOFTEXT_ID
        self.vocab_size = len(self.encoder.encoder)

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
        out = torch.tensor([r + [self.pad_token_id] * (width - len(r)) for r in rows], dtype=torch.long)
        out = out.view(len(rows), width)  # (1, 0) for an empty string
        if return_lengths:
            return out, torch.tensor(lengths, dtype=torch.long)
        return out

    def decode(self, ids):
        """ids: a 1-D tensor or list of ints -> str; a 2-D tensor or list of lists -> list of str."""
        if hasattr(ids, 'tolist'):
            ids = ids.tolist()
        if isinstance(ids, int):
            ids = [ids]
        if ids and isinstance(ids[0], (list, tuple)):
            return [self.encoder.decode(list(row)) for row in ids]
        return self.encoder.decode(list(ids))
