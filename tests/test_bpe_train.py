"""Training a byte-level BPE (mingpt.bpe.train_bpe): merge for merge equal to a naive recount-per-merge
reference, the lecture's woodchuck walk-through, round trips, save/load, special tokens and the command line."""
import hashlib
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import regex
from conftest import data_dir

from mingpt import bpe
from mingpt.bpe import GPT2_PATTERN, BPETokenizer, BPETrainer, get_encoder, train_bpe
from mingpt.pretrained import tokenizer_of, tokenizer_record

ROOT = Path(__file__).resolve().parents[1]
EOT = '<|endoftext|>'


def naive_bpe(text, n_merges, pretokenize=True, specials=(EOT,)):
    """The slides' algorithm, as plainly as possible: symbols are bytes objects; before every merge, count every
    adjacent pair in every word of the text (each occurrence, nothing deduplicated), merge the most frequent one
    everywhere, left to right. Ties: a dict keeps insertion order and max() returns the first of equal maxima,
    so the pair met first when reading the text as it is segmented now wins. Returns [(first, second, count)]."""
    pieces = regex.split('|'.join(map(regex.escape, specials)), text) if specials else [text]
    words = [[bytes([b]) for b in w.encode('utf-8')]
             for piece in pieces for w in (regex.findall(GPT2_PATTERN, piece) if pretokenize else [piece]) if w]
    merges = []
    for _ in range(n_merges):
        counts = {}
        for w in words:
            for pair in zip(w, w[1:]):
                counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            break
        best = max(counts, key=counts.get)
        merges.append((*best, counts[best]))
        for w in words:
            i, out = 0, []
            while i < len(w):
                if (w[i], w[i + 1] if i + 1 < len(w) else None) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            w[:] = out
    return merges


def fast_bpe(text, n_merges, pretokenize=True, specials=(EOT,)):
    """BPETrainer's merges as (first bytes, second bytes, count), driven like train_bpe."""
    parts = bpe._cut(text, list(specials), pretokenize)
    words = {}
    for word in (w for part in parts[::2] for w in part):
        words[word] = words.get(word, 0) + 1
    trainer = BPETrainer((w.encode('utf-8'), c) for w, c in words.items())
    merges = []
    while len(merges) < n_merges and (step := trainer.merge()):
        merges.append((trainer.vocab[step[0]], trainer.vocab[step[1]], step[2]))
    return merges


def merge_bytes(encoder):
    """An Encoder's merges as pairs of bytes (vocab.bpe spells them in GPT-2's alphabet)."""
    return [tuple(bytes(map(encoder.byte_decoder.__getitem__, s)) for s in pair) for pair in encoder.bpe_merges]


def test_woodchuck_walkthrough():
    # "would a woodchuck chuck wood", counted by hand. 'wo' occurs 3 times (would, woodchuck, wood): merge 1.
    # Then ' wo', 'wo'+'o', 'o'+'d', 'c'+'h', 'h'+'u', 'u'+'c', 'c'+'k' all occur twice; the tie goes to the pair
    # that comes first in the text: ' wo' (the space before "woodchuck", position 7). Merging it leaves
    # ' wo'+'o' first among the pairs of count 2 (position 7 again), then ' woo'+'d'. Now ' wood' is followed by
    # 'chuck' once and ends the text once, so the next pair of count 2 is 'c'+'h' (position 12), then 'ch'+'u',
    # 'chu'+'c', 'chuc'+'k'. After 8 merges every pair occurs once and ties go left to right: 'wo'+'u', ...
    # The raw-byte algorithm gives the same 11 merges (spaces are ordinary bytes; 'k'+' ' occurs only once,
    # since the space before "wood" went into ' wo'), then continues across the space: 'would'+' '.
    text = 'would a woodchuck chuck wood'
    expected = [(b'w', b'o', 3), (b' ', b'wo', 2), (b' wo', b'o', 2), (b' woo', b'd', 2), (b'c', b'h', 2),
                (b'ch', b'u', 2), (b'chu', b'c', 2), (b'chuc', b'k', 2), (b'wo', b'u', 1), (b'wou', b'l', 1),
                (b'woul', b'd', 1)]
    for pretokenize in (True, False):
        assert fast_bpe(text, 11, pretokenize) == naive_bpe(text, 11, pretokenize) == expected
        encoder = train_bpe(text, 256 + 11 + 1, pretokenize=pretokenize)
        assert merge_bytes(encoder) == [m[:2] for m in expected]
    assert fast_bpe(text, 12, pretokenize=False)[11] == (b'would', b' ', 1)
    encoder = train_bpe(text, 256 + 8, pretokenize=False, special_tokens=())
    assert [encoder.decode([i]) for i in encoder.encode(text)] == ['wo', 'u', 'l', 'd', ' ', 'a', ' wood', 'chuck',
                                                                  ' ', 'chuck', ' wood']


def test_three_merges_by_hand_their_ids_files_and_encodings(tmp_path):
    # Wikipedia's example, 'aaabdaaabac' (one pre-token), counted by hand. Pairs, overlaps included: a+a 4 (aaa
    # twice holds two), a+b 2, b+d, d+a, b+a, a+c 1 each. Merge 1, a+a, left to right: aa|a|b|d|aa|a|b|a|c.
    # Now aa+a 2 and a+b 2 tie; the pair met first in the text wins, aa+a at position 0 (Wikipedia takes a+b
    # here: any fixed tie rule is a valid BPE). Merge 2: aaa|b|d|aaa|b|a|c. Merge 3, aaa+b 2: aaab|d|aaab|a|c.
    # Ids: the bytes by value (a=97, b=98, c=99, d=100, ' '=32), then the merges 256, 257, 258, then <|endoftext|>.
    text = 'aaabdaaabac'
    assert fast_bpe(text, 3) == naive_bpe(text, 3) == [(b'a', b'a', 4), (b'aa', b'a', 2), (b'aaa', b'b', 2)]
    encoder = train_bpe(text, 256 + 3 + 1)
    assert encoder.bpe_merges == [('a', 'a'), ('aa', 'a'), ('aaa', 'b')]  # their rank is their place in the list
    assert {s: i for s, i in encoder.encoder.items() if i >= 256} == {'aa': 256, 'aaa': 257, 'aaab': 258, EOT: 259}
    assert encoder.encode(text) == [258, 100, 258, 97, 99]  # aaab d aaab a c
    # a word never seen: the lowest rank present first, everywhere. 'aaaab' is aa|aa|b after a+a, and no pair of
    # those has a rank, so it is not aaab+... nor a|aaab. ' baaa': 'Ġ'+'b' has no rank, a+a then aa+a give b|aaa.
    assert encoder.encode('aaaab baaa') == [256, 256, 98, 32, 98, 257]
    assert encoder.decode([258, 32, 257, 259]) == 'aaab aaa<|endoftext|>'
    # vocab.bpe is the merges in rank order after its header line; encoder.json the tokens with their ids
    encoder.save(tmp_path)
    assert (tmp_path / 'vocab.bpe').read_text() == '#version: 0.2\na a\naa a\naaa b\n'
    assert get_encoder(directory=tmp_path).encode(text) == [258, 100, 258, 97, 99]


def random_corpus(seed, n):
    """Small texts that tie often: few letters, repeats and overlaps ('aaaa'), a special token, some UTF-8."""
    rng = random.Random(seed)
    alphabet = rng.choice(['ab ', 'aab c\n', 'abc  xy\t.', 'ab é🙂 '])
    pieces = [''.join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(n)]
    return ''.join(p + (EOT if rng.random() < 0.1 else '') for p in pieces)


CORPORA = ['would a woodchuck chuck wood', 'aaaa aaa aa a aaaaaaa', 'abababab bababa', 'x' * 37,
           'the cat sat on the mat. the mat sat on the cat!', 'é🙂é🙂🙂 éé 🙂🙂', '',
           f'{EOT}abab ab{EOT}{EOT}ba ba{EOT}']  # special tokens at the ends and side by side leave empty pieces
CORPORA += [random_corpus(seed, n) for seed, n in enumerate([5, 20, 40, 80, 160, 300])]


@pytest.mark.parametrize('pretokenize', [True, False])
@pytest.mark.parametrize('text', CORPORA, ids=range(len(CORPORA)))
def test_equals_naive_reference_merge_for_merge(text, pretokenize):
    expected = naive_bpe(text, 10_000, pretokenize)  # until no pair is left
    assert fast_bpe(text, 10_000, pretokenize) == expected
    encoder = train_bpe(text, 256 + len(expected) + 1, pretokenize=pretokenize)  # every merge: no early stop
    assert merge_bytes(encoder) == [m[:2] for m in expected]


def test_ties_go_to_the_first_occurrence_in_the_current_segmentation():
    # 'b'+'c' (4 times) merges first. That takes the first 'c'+'d' (in "bcd"), so 'c'+'d' (now 2) ties with
    # 'e'+'f' (2): in the text as first written 'c'+'d' came first, in the text as it is now 'e'+'f' does.
    text = EOT.join(['bcd', 'ef', 'bc', 'bc', 'bc', 'cd', 'ef', 'cd'])
    for pretokenize in (True, False):
        merges = naive_bpe(text, 4, pretokenize)
        assert merges == [(b'b', b'c', 4), (b'e', b'f', 2), (b'c', b'd', 2), (b'bc', b'd', 1)]
        assert fast_bpe(text, 4, pretokenize) == merges


def shakespeare_sample(n=60_000):
    return data_dir('tinyshakespeare', 'input.txt').read_text(encoding='utf-8')[:n]


def test_equals_naive_reference_on_real_text():
    text = shakespeare_sample(6_000)
    assert fast_bpe(text, 150) == naive_bpe(text, 150)
    assert fast_bpe(text[:2_000], 100, pretokenize=False) == naive_bpe(text[:2_000], 100, pretokenize=False)


UNICODE_SAMPLES = ['', 'hello world', 'naïve café', 'e\u0301\u0301 a\u0308', '日本語のテキスト、中文字符',
                   '👨\u200d👩\u200d👧 🏳️\u200d🌈 🙂🙂', 'Ελληνικά и кириллица', 'مرحبا بالعالم', '\x00\x01\x7f\t\n\r\n  ',
                   '\U0001d518\U0010fffd\ufffd', "it's 'll 're 123 4.5e-6 $$$", EOT + 'x' + EOT]


@pytest.mark.parametrize('pretokenize', [True, False])
def test_round_trip_any_unicode(pretokenize):
    text = 'would a woodchuck chuck wood? 日本語 naïve 🙂 ' * 20 + EOT + 'Ελληνικά'
    encoder = train_bpe(text, 300, pretokenize=pretokenize)
    rng = random.Random(0)
    randoms = [''.join(chr(rng.choice([rng.randint(0, 0xD7FF), rng.randint(0xE000, 0x10FFFF)]))
                       for _ in range(rng.randint(1, 30))) for _ in range(50)]
    for s in UNICODE_SAMPLES + randoms:
        for allowed in (False, True):
            assert encoder.decode(encoder.encode(s, allowed_special=allowed)) == s, repr(s)
    assert encoder.encode(EOT + 'x' + EOT, allowed_special=True) == [encoder.encoder[EOT], ord('x'),
                                                                     encoder.encoder[EOT]]


def test_training_reads_a_lone_surrogate_as_encode_does():
    """encode reads a lone surrogate (errors='surrogateescape', JSON's "\\udcff") as U+FFFD, as tiktoken does;
    train_bpe failed on it with UnicodeEncodeError. By hand, 'ab\\ufffd ' * 5 cuts into 'ab' 1, ' ab' 4, U+FFFD 5
    (bytes EF BF BD) and a last ' '. a+b, EF+BF and BF+BD occur 5 times: a+b comes first in the text, then EF+BF,
    then EFBF+BD; then ' '+ab 4 times, and no pair is left."""
    text, replaced = 'ab\udcff ' * 5, 'ab\ufffd ' * 5
    encoder = train_bpe(text, 256 + 4 + 1)
    assert merge_bytes(encoder) == [(b'a', b'b'), (b'\xef', b'\xbf'), (b'\xef\xbf', b'\xbd'), (b' ', b'ab')]
    assert encoder.encode(text) == encoder.encode(replaced) == [256, 258] + [259, 258] * 4 + [32]
    assert encoder.decode(encoder.encode(text)) == replaced
    raw = train_bpe(text, 265, pretokenize=False)
    assert raw.bpe_merges == train_bpe(replaced, 265, pretokenize=False).bpe_merges
    assert raw.encode(text) == raw.encode(replaced)


def test_raw_encoder_merges_a_long_text_like_the_lowest_rank_rule():
    # without pre-tokenising the whole text is one word: the heap-based merge must equal the plain rule
    # "merge the lowest-ranked adjacent pair, the leftmost of equals, until none has a rank"
    text = shakespeare_sample(1_500)
    encoder = train_bpe(text[:1_000], 500, pretokenize=False, special_tokens=())
    parts = list(text.encode('utf-8').decode('latin-1').translate(encoder.byte_encoder))
    while True:
        ranks = [encoder.bpe_ranks.get(pair, float('inf')) for pair in zip(parts, parts[1:])]
        if not ranks or min(ranks) == float('inf'):
            break
        i = ranks.index(min(ranks))
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    assert encoder.encode(text) == [encoder.encoder[p] for p in parts]


def test_special_tokens_never_split_or_merged():
    specials = (EOT, '<|pad|>', '<|endoftext|>!')  # one contains another: the longest wins
    text = ('<|endoftext|>hello<|endoftext|>! world<|pad|><|pad|>hello ' * 30)
    encoder = train_bpe(text, 265, special_tokens=specials)
    n = len(encoder.encoder)
    assert {encoder.encoder[s] for s in specials} == {n - 3, n - 2, n - 1}  # the last ids, in order
    assert [encoder.encoder[s] for s in specials] == [n - 3, n - 2, n - 1]
    for a, b in encoder.bpe_merges:  # no merge reaches into a special token
        assert '|' not in a + b and '<' not in a + b, (a, b)
    ids = encoder.encode(text, allowed_special='all')
    assert ids.count(n - 3) == 30 and ids.count(n - 1) == 30 and ids.count(n - 2) == 60
    assert encoder.decode(ids) == text
    assert n - 3 not in encoder.encode(text)  # not allowed: plain text
    assert encoder.encode('<|pad|>', allowed_special={'<|pad|>'}) == [n - 2]
    with pytest.raises(ValueError, match='does not have'):
        encoder.encode('x', allowed_special={'<|unknown|>'})
    # a special token is written as itself on decode, even with a space or a character outside the byte alphabet
    odd = ('<|end of text|>', '\u2039\u00e9>')
    encoder = train_bpe('hello world ' * 30, 262, special_tokens=odd)
    assert [encoder.decode([encoder.encoder[s]]) for s in odd] == list(odd)


def test_a_special_token_spelled_like_a_byte_is_refused():
    with pytest.raises(ValueError, match=r"the special token 'a' is spelled like a token of the vocabulary"):
        train_bpe('hello', 257, special_tokens=('a',))


@pytest.mark.parametrize('pretokenize', [True, False])
def test_text_spelled_like_a_special_token_is_text(pretokenize):
    # 'EOS' is a word the regex can cut out whole, and without pre-tokenising a text may be exactly '<|endoftext|>'
    encoder = train_bpe('hello world, hello there. ' * 20, 266, pretokenize, special_tokens=('EOS', EOT))
    for special in ('EOS', EOT):
        assert encoder.encode(special) == list(special.encode()) == encoder.encode_ordinary(special)
        assert encoder.encode(special, allowed_special='all') == [encoder.special_tokens[special]]


def test_vocab_size_accounting():
    text = shakespeare_sample(20_000)
    for specials in ((), (EOT,), (EOT, '<|pad|>')):
        for vocab_size in (256 + len(specials), 300, 1000):
            encoder = train_bpe(text, vocab_size, special_tokens=specials)
            assert len(encoder.encoder) == vocab_size == max(encoder.encoder.values()) + 1
            assert len(encoder.special_tokens) == len(specials)
    for bad in (255, 256, 0, np.int64(256)):
        with pytest.raises(ValueError, match=r'vocab_size.* the merges and the 1 special token, so it must be at '
                                             r'least 257$'):  # not '1 special tokens'
            train_bpe(text, bad)
    with pytest.raises(ValueError, match=r'the merges and the 2 special tokens, so it must be at least 258$'):
        train_bpe(text, 257, special_tokens=(EOT, '<|pad|>'))
    for bad in ('300', 300.0, True):  # 300.0 was said to be 'too small'
        with pytest.raises(TypeError, match=f'vocab_size must be an int, got {bad!r}'):
            train_bpe(text, bad)
    assert len(train_bpe(text, np.int64(300))) == 300  # as from np.arange, sweeping vocabulary sizes
    with pytest.raises(TypeError, match='train_bpe takes a str, got bytes; decode bytes to str first'):
        train_bpe(text.encode('utf-8'), 300)  # it was 'cannot use a string pattern on a bytes-like object'
    with pytest.raises(ValueError, match='distinct non-empty'):
        train_bpe(text, 300, special_tokens=(EOT, EOT))
    with pytest.warns(UserWarning, match='no pair of symbols is left after 3 merges') as caught:
        small = train_bpe('abcd', 400)
    assert caught.pop(UserWarning).filename == __file__  # the caller's line, not bpe.py's
    assert len(small.encoder) == 256 + 3 + 1
    with pytest.warns(UserWarning, match='left after 1 merge: '):  # not '1 merges'
        train_bpe('ab', 400)


def test_save_then_load(tmp_path):
    text = shakespeare_sample()
    encoder = train_bpe(text, 600)
    encoder.save(tmp_path / 'vocab')
    assert sorted(p.name for p in (tmp_path / 'vocab').iterdir()) == ['encoder.json', 'vocab.bpe']
    lines = (tmp_path / 'vocab' / 'vocab.bpe').read_text(encoding='utf-8').split('\n')
    assert lines[0] == '#version: 0.2' and lines[-1] == '' and len(lines) == 2 + 600 - 257
    loaded = get_encoder(directory=tmp_path / 'vocab')
    assert loaded.encoder == encoder.encoder and loaded.bpe_merges == encoder.bpe_merges
    assert loaded.special_tokens == {EOT: 599}
    sample = text[-5_000:] + EOT + ' 🙂 naïve'
    assert loaded.encode(sample, allowed_special=True) == encoder.encode(sample, allowed_special=True)
    tok = BPETokenizer(directory=tmp_path / 'vocab', allowed_special=True)
    assert tok.vocab_size == 600 and tok.eot_token_id == tok.pad_token_id == 599
    assert tok(sample)[0].tolist() == encoder.encode(sample, allowed_special=True)
    batch, lengths = tok(['hi', 'hello there'], return_lengths=True)
    assert tok.decode(batch[0, :lengths[0]]) == 'hi' and batch[0, lengths[0]:].eq(599).all()
    encoder2 = train_bpe(text, 400)  # saved again to the same place: read again, not from a cache
    encoder2.save(tmp_path / 'vocab')
    assert len(get_encoder(directory=tmp_path / 'vocab').encoder) == 400
    with pytest.raises(FileNotFoundError, match='python -m mingpt.bpe train'):
        get_encoder(directory=tmp_path / 'nothing here')


def test_changing_an_encoders_dict_does_not_change_the_next_load(tmp_path):
    """get_encoder's dict of tokens was the one cached from the files: a token added to tok.encoder.encoder in a
    notebook was in every later load of that folder (any other change made those loads fail as 'not a BPE
    vocabulary', blaming the files)."""
    train_bpe('the cat sat on the mat ' * 20, 265).save(tmp_path)
    first = get_encoder(directory=tmp_path)
    first.encoder['<|pad|>'] = len(first.encoder)
    again = get_encoder(directory=tmp_path)
    assert '<|pad|>' not in again.encoder and len(again) == 265


@pytest.mark.parametrize('hugging_face', [False, True])
def test_a_save_stopped_part_way_leaves_half_a_tokenizer_not_two_of_them(tmp_path, monkeypatch, hugging_face):
    """A vocabulary trained again into the same folder and stopped (Ctrl-C) between its two files left the new
    tokens beside the old merges, which loaded without a word."""
    old, new = train_bpe('the cat sat on the mat ' * 20, 265), train_bpe('a dog ran in the fog ' * 30, 268)
    old.save(tmp_path, hugging_face=hugging_face)
    written = []

    def stop_after_one_file(path, text):
        if written:
            raise KeyboardInterrupt
        written.append(Path(path).name)
        return real(path, text)
    real = bpe.write_text_atomically
    monkeypatch.setattr(bpe, 'write_text_atomically', stop_after_one_file)
    with pytest.raises(KeyboardInterrupt):
        new.save(tmp_path, hugging_face=hugging_face)
    monkeypatch.undo()
    with pytest.raises(FileNotFoundError, match=r"has (vocab.bpe|merges.txt) but not (encoder|vocab).json: a BPE "
                                                r"tokenizer needs both"):
        get_encoder(directory=tmp_path)
    new.save(tmp_path, hugging_face=hugging_face)  # saved again whole: the new vocabulary
    assert get_encoder(directory=tmp_path).encoder == new.encoder


def test_a_vocabulary_without_pre_tokeniser_saves_and_loads_as_one(tmp_path):
    text = 'the cat sat on the mat. ' * 50
    with pytest.warns(UserWarning, match='no pair of symbols is left'):
        encoder = train_bpe(text, 300, pretokenize=False)
    assert len(encoder.encode(text)) == 1  # the whole text merged into one token
    encoder.save(tmp_path / 'raw')
    assert (tmp_path / 'raw' / 'vocab.bpe').read_text().startswith('#version: 0.2 no pre-tokeniser')
    for loaded in (get_encoder(directory=tmp_path / 'raw'), tokenizer_of(tokenizer_record(encoder))):
        assert loaded.pat is None and loaded.encode(text) == encoder.encode(text)
    assert tokenizer_record(train_bpe(text, 265))['tokenizer'].keys() == {'kind', 'encoder', 'merges'}  # as before


def test_pretokenize_must_be_a_bool():
    """train_bpe(text, n, pretokenize='no') pre-tokenised: a non-empty string is true."""
    for given in ('no', 'False', 0, None):
        with pytest.raises(TypeError, match=f"pretokenize must be True or False, got {given!r}"):
            train_bpe('the cat sat on the mat ' * 20, 265, pretokenize=given)
    assert train_bpe('a b a b', 258, pretokenize=np.bool_(False)).bpe_merges == [('a', 'Ġ')]  # a merge across words


@pytest.mark.parametrize('hugging_face', [False, True])
def test_a_vocabulary_with_its_own_pattern_is_refused_by_save(tmp_path, hugging_face):
    """An Encoder built with pattern=r'\\S+|\\s+' saved and read back split with GPT-2's regex without a word (here
    'cat' ' sat' instead of 'cat' ' ' 'sat'). save refuses it before writing anything; GPT-2's pattern given as
    itself still saves."""
    trained = train_bpe('the cat sat on the mat ' * 20, 265)
    own = bpe.Encoder(trained.encoder, trained.bpe_merges, pattern=r'\S+|\s+')
    assert own.pre_tokens('cat sat') == ['cat', ' ', 'sat'] != trained.pre_tokens('cat sat')
    with pytest.raises(ValueError, match=r"its own pattern '.*', which encoder.json and vocab.bpe cannot record: "
                                         r"read back, it would split with GPT-2's regex"):
        own.save(tmp_path, hugging_face=hugging_face)
    assert list(tmp_path.iterdir()) == []
    bpe.Encoder(trained.encoder, trained.bpe_merges, pattern=GPT2_PATTERN).save(tmp_path)
    assert get_encoder(directory=tmp_path).encoder == trained.encoder


def test_a_vocabulary_with_its_own_pattern_is_refused_by_a_checkpoints_record():
    r"""A checkpoint records a BPE vocabulary's tokens and merges, not its pattern: a model trained with
    Encoder(pattern=r'\S+|\s+') came back from its checkpoint splitting 'cat sat' as GPT-2 does, other ids."""
    trained = train_bpe('the cat sat on the mat ' * 20, 265)
    own = bpe.Encoder(trained.encoder, trained.bpe_merges, pattern=r'\S+|\s+')
    with pytest.raises(ValueError, match=r"its own pattern '.*', which a checkpoint cannot record"):
        tokenizer_record(own)
    same = bpe.Encoder(trained.encoder, trained.bpe_merges, pattern=GPT2_PATTERN)
    assert tokenizer_of(tokenizer_record(same)).encode('cat sat') == trained.encode('cat sat')


def test_no_endoftext_means_padding_must_be_given(tmp_path):
    train_bpe('hello world ' * 10, 265, special_tokens=()).save(tmp_path)
    tok = BPETokenizer(directory=tmp_path)
    assert tok.eot_token_id is None and tok('hello').shape[0] == 1
    with pytest.raises(ValueError, match='pad_token_id'):
        tok(['hello', 'hello world'])
    assert BPETokenizer(directory=tmp_path, pad_token_id=0)(['hello', 'hello world'])[0, -1].item() == 0


def test_saving_gpt2_gives_back_its_files(tmp_path):
    gpt2 = get_encoder(data_dir('gpt2', 'encoder.json'), data_dir('gpt2', 'vocab.bpe'))
    assert gpt2.special_tokens == {EOT: 50256}
    gpt2.save(tmp_path)
    for name, sha in (('encoder.json', bpe.ENCODER_JSON_SHA256), ('vocab.bpe', bpe.VOCAB_BPE_SHA256)):
        assert hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() == sha, name


def test_command_line_names_the_encoding_of_a_file_that_is_not_utf8(tmp_path, capsys):
    (tmp_path / 'notepad.txt').write_text('would a woodchuck chuck wood', encoding='utf-16')
    with pytest.raises(SystemExit) as exit:
        bpe.main(['train', str(tmp_path / 'notepad.txt'), '--vocab-size', '300', '--out', str(tmp_path / 'tok')])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and 'notepad.txt is UTF-16 text' in err and 'iconv -f utf-16 -t utf-8' in err, err
    assert not (tmp_path / 'tok').exists()


def test_command_line_refuses_a_curve_format_matplotlib_cannot_write_before_training(tmp_path, capsys):
    """--curve vocab.jpeg2 trained the vocabulary and wrote it, then failed in matplotlib at the picture."""
    pytest.importorskip('matplotlib')
    (tmp_path / 'c.txt').write_text('would a woodchuck chuck wood ' * 3, encoding='utf-8')
    with pytest.raises(SystemExit) as exit:
        bpe.main(['train', str(tmp_path / 'c.txt'), '--vocab-size', '270', '--out', str(tmp_path / 'tok'),
                  '--curve', str(tmp_path / 'vocab.jpeg2')])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and 'does not write .jpeg2 files; name a .png, .pdf or .svg' in err, err
    assert not (tmp_path / 'tok').exists()  # refused before training


def test_the_command_reads_only_the_arguments_it_is_given(monkeypatch):
    """bpe.main() in a notebook parsed the kernel's sys.argv ('-f kernel.json'). Like every main, it takes a list."""
    monkeypatch.setattr(sys, 'argv', ['ipykernel_launcher.py', '-f', '/root/.local/share/jupyter/runtime/k.json'])
    with pytest.raises(TypeError, match='argv'):
        bpe.main()


def test_command_line_trains_shows_and_saves(tmp_path):
    corpus = tmp_path / 'woodchuck.txt'
    corpus.write_bytes(b'would a woodchuck chuck wood\r\n' * 3)  # CRLF: read as bytes, not translated
    # GPT-2's files come from $MINGPT_DATA_DIR when it is set; a dead proxy makes sure nothing is downloaded
    env = dict(os.environ, PYTHONPATH=str(ROOT), MINGPT_CACHE_DIR=str(tmp_path / 'cache'),
               HTTPS_PROXY='http://127.0.0.1:9', HTTP_PROXY='http://127.0.0.1:9')
    # 272 = 256 bytes + 15 merges (after them every word is one token) + '<|endoftext|>'
    out = subprocess.run([sys.executable, '-m', 'mingpt.bpe', 'train', str(corpus), '--vocab-size', '272',
                          '--out', str(tmp_path / 'tok'), '--show'], capture_output=True, text=True, env=env,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "merge 1: 'w' + 'o' -> 'wo' (count 9)" in out.stdout
    assert "merge 2: ' ' + 'wo' -> ' wo' (count 6)" in out.stdout
    assert 'this vocabulary (272 tokens)' in out.stdout and 'bytes per token' in out.stdout
    gpt2_line = "GPT-2's vocabulary (50257 tokens)" if os.environ.get('MINGPT_DATA_DIR') else 'skipping the comparison'
    assert gpt2_line in out.stdout
    encoder = get_encoder(directory=tmp_path / 'tok')
    text = corpus.read_bytes().decode('utf-8')
    assert len(encoder.encoder) == 272 and encoder.decode(encoder.encode(text)) == text
    assert 'čĊ' in encoder.encoder  # '\r\n' in GPT-2's byte alphabet
    out = subprocess.run([sys.executable, '-m', 'mingpt.bpe', 'train', str(corpus), '--vocab-size', '100', '--out',
                          str(tmp_path / 'small')], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.startswith('error: ') and 'Traceback' not in out.stderr
    # a warning prints as a command's, 'warning: ...', where it was '.../bpe.py:935: UserWarning: ...' and a line of
    # bpe.py's source; --debug shows Python's form, which names the line of the module run as the script, not runpy's
    # (warn_caller stopped at the first frame outside mingpt: '<frozen runpy>:88: UserWarning: no pair...')
    (tmp_path / 'ab.txt').write_text('ab')
    for debug in (['--debug'], []):
        out = subprocess.run([sys.executable, '-m', 'mingpt.bpe', 'train', 'ab.txt', '--vocab-size', '300', '--out',
                              str(tmp_path / 'ab'), *debug], capture_output=True, text=True, env=env, timeout=120,
                             cwd=tmp_path)
        assert out.returncode == 0 and bool(debug) == bool(re.search(r'bpe\.py:\d+: UserWarning: no pair', out.stderr))
    assert '\nwarning: no pair of symbols is left' in out.stderr and 'warn_caller(' not in out.stderr, out.stderr
    # on a line of its own once the bar has drawn its last merge, not written into the bar's line (with the bar
    # drawn again after it)
    lines = out.stderr.split('\n')
    at = next(i for i, line in enumerate(lines) if 'warning: ' in line)
    assert 'BPE merges' not in lines[at] and re.search(r'BPE merges: .* 1/43 \[[^\r]*$', lines[at - 1])
    assert not any('BPE merges' in line for line in lines[at:])


def test_the_readmes_python_trains_what_the_command_trains(tmp_path, monkeypatch):
    """On a CRLF file (Project Gutenberg's) the README's open('input.txt').read() turned '\\r\\n' into '\\n', so
    its merges were not the command's."""
    readme = (ROOT / 'README.md').read_text(encoding='utf-8')
    block = next(b for b in readme.split('```python\n')[1:] if 'train_bpe(' in b)
    monkeypatch.chdir(tmp_path)
    Path('input.txt').write_bytes('would a “woodchuck” chuck wood\r\n\r\n'.encode('utf-8') * 20)
    exec(block.split('tok = ')[0].replace('vocab_size=5000', 'vocab_size=266'), {})  # up to the tokenizer's line
    bpe.main(['train', 'input.txt', '--vocab-size', '266', '--out', 'by_command'])
    assert get_encoder(directory='my_tokenizer').bpe_merges == get_encoder(directory='by_command').bpe_merges


def test_command_line_expands_a_tilde_after_the_equals_sign(tmp_path, monkeypatch):
    """The shell leaves --out=~/tok as typed: the vocabulary was saved into ./~/tok, then read back from $HOME/tok,
    which failed ('~/tok/encoder.json does not exist')."""
    (tmp_path / 'c.txt').write_text(shakespeare_sample(2_000), encoding='utf-8')
    monkeypatch.setenv('HOME', str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bpe, 'get_encoder', lambda directory=None: get_encoder(directory=directory or 'tok'))
    bpe.main(['train', '~/c.txt', '--vocab-size=270', '--out=~/tok', '--curve=~/curve.png'])
    assert (tmp_path / 'tok' / 'vocab.bpe').exists() and (tmp_path / 'curve.png').exists()
    assert not (tmp_path / '~').exists()
    bpe.main(['encode', 'hello', '--vocab=~/tok'])


def test_command_line_without_gpt2_files_skips_the_comparison(tmp_path, monkeypatch, capsys):
    corpus = tmp_path / 'c.txt'
    corpus.write_text(shakespeare_sample(5_000), encoding='utf-8')

    def offline(directory=None):  # the saved vocabulary reads back; GPT-2's cannot be downloaded
        if directory is None:
            raise RuntimeError('could not download encoder.json')
        return get_encoder(directory=directory)
    monkeypatch.setattr(bpe, 'get_encoder', offline)
    bpe.main(['train', str(corpus), '--vocab-size', '300', '--out', str(tmp_path / 'tok')])
    out = capsys.readouterr().out
    assert "GPT-2's vocabulary is not available" in out and 'skipping' in out
    assert 'this vocabulary (300 tokens)' in out
    corpus.write_text(f'{EOT}hello{EOT}' * 40, encoding='utf-8')  # each <|endoftext|> counts as one token
    bpe.main(['train', str(corpus), '--vocab-size', '261', '--out', str(tmp_path / 'tok'), '--show'])
    out, err = capsys.readouterr()
    assert 'BPE merges' not in err  # the merges shown are the progress: no bar redrawn between them
    assert 'this vocabulary (261 tokens): 120 tokens for 1,240 bytes, 10.33 bytes per token' in out
    items, size = [], 0  # the text's first words and special tokens, until they hold 400 characters
    for item in [EOT, 'hello', EOT] * 40:
        if size >= 400:
            break
        items.append(item)
        size += len(item)
    tokens = [t for item in items for t in ([item] if item == EOT else item)]  # 'hello' is h|e|l|l|o at the start
    assert f"start: {'|'.join(tokens)}|…" in out.splitlines()


def test_command_line_refuses_a_file_for_out_before_training(tmp_path, capsys):
    corpus = tmp_path / 'c.txt'
    corpus.write_text('would a woodchuck chuck wood', encoding='utf-8')
    with pytest.raises(SystemExit) as exit:  # it trained, then failed with '[Errno 17] File exists'
        bpe.main(['train', str(corpus), '--vocab-size', '270', '--out', str(corpus), '--show'])
    captured = capsys.readouterr()
    assert exit.value.code == 2 and f'error: --out {corpus} is a file; give a folder for encoder.json' in captured.err
    assert 'merge 1' not in captured.out and corpus.read_text(encoding='utf-8') == 'would a woodchuck chuck wood'


def test_show_writes_control_characters_escaped(capsys):
    train_bpe('a\tb\r\nc ' * 3, 258, show=True)
    shown = ['a', r'\t', 'b', r'\r', r'\n', 'c', ' '] * 3  # each byte a token still, its control characters written out
    assert capsys.readouterr().out.splitlines()[0] == 'start: ' + '|'.join(shown)


def test_show_writes_a_piece_of_a_utf8_character_as_its_bytes(capsys):
    train_bpe('’’’ ’’', 260, show=True)  # ’ is e2 80 99: e2+80 and 80+99 occur 5 times each, the first wins
    lines = capsys.readouterr().out.splitlines()  # each piece was '�', so merges 1 and 2 read '�' + '�' -> '�'
    assert lines[0] == r'start: \xe2|\x80|\x99|\xe2|\x80|\x99|\xe2|\x80|\x99| |\xe2|\x80|\x99|\xe2|\x80|\x99'
    assert lines[1] == r"merge 1: b'\xe2' + b'\x80' -> b'\xe2\x80' (count 5)"
    assert lines[3] == r"merge 2: b'\xe2\x80' + b'\x99' -> '’' (count 5)"
    assert lines[4] == '  ’|’|’| |’|’'


def test_show_writes_about_400_characters_of_the_text_in_any_script(capsys):
    """--show writes the start of the text, about 400 characters of it, after each merge. It counted the text's
    characters, so Hindi, each of whose characters is written as three bytes (\\xe0\\xa4\\xa8), took about 4,900."""
    for text in ('To be, or not to be, that is the question. ' * 20, 'नमस्ते दुनिया, यह एक परीक्षा है। ' * 20):
        train_bpe(text, 258, show=True)
        start = capsys.readouterr().out.splitlines()[0]
        assert 400 <= len(start.removeprefix('start: ').replace('|', '')) < 440 and start.endswith('…')


def test_vocabulary_curve_png(tmp_path, capsys):
    pytest.importorskip('matplotlib')
    corpus = tmp_path / 'c.txt'
    corpus.write_text(shakespeare_sample(), encoding='utf-8')
    bpe.main(['train', str(corpus), '--vocab-size', '400', '--out', str(tmp_path / 'tok'),
              '--curve', str(tmp_path / 'curve.png')])
    png = (tmp_path / 'curve.png').read_bytes()
    assert png[:8] == b'\x89PNG\r\n\x1a\n' and len(png) > 10_000
    assert 'Heaps' in capsys.readouterr().out
    corpus.write_text('would a woodchuck chuck wood', encoding='utf-8')  # too short to leave out the first words
    bpe.main(['train', str(corpus), '--vocab-size', '270', '--out', str(tmp_path / 'tok'),
              '--curve', str(tmp_path / 'curve.png')])
    assert "Heaps' law fit V = 1.0 n^1.00 on 5 words" in capsys.readouterr().out
    # three words for str.split, one for the curve: it trained, then failed with 'SVD did not converge'
    for text, n in (('one two', 2), ('一\u3000二\u3000三', 1)):
        corpus.write_text(text, encoding='utf-8')
        with pytest.raises(SystemExit):
            bpe.main(['train', str(corpus), '--vocab-size', '270', '--out', str(tmp_path / 'tok'), '--curve',
                      str(tmp_path / 'c.png')])
        assert ('error: --curve needs a text of at least 3 words (cut at ASCII white space) to draw a curve; '
                f'{corpus} has {n}') in capsys.readouterr().err


def test_command_line_trains_on_a_folders_txt_files_as_a_projects_data_path_reads_them(tmp_path, capsys):
    """train took one file, where a project's data.path takes a folder of .txt files too: the README cat'ed the
    books into one file first. A folder's .txt files (as corpus_files lists them: in the order of their names, not
    its subfolders', hidden ones or other kinds) are read as a file is, byte for byte, a blank line between two."""
    books = tmp_path / 'books'
    (books / 'sub').mkdir(parents=True)
    (books / 'b.txt').write_bytes(b'chuck wood\r\n')  # CRLF kept, as in a file
    (books / 'A.TXT').write_bytes('would a “woodchuck”'.encode('utf-8'))
    for skipped in ('.hidden.txt', 'notes.md', 'sub/c.txt'):
        (books / skipped).write_text('zzzz zzzz zzzz', encoding='utf-8')
    bpe.main(['train', str(books), '--vocab-size', '270', '--out', str(tmp_path / 'tok')])
    assert f'learning from 2 .txt files of {books}, one after another' in capsys.readouterr().out
    text = 'would a “woodchuck”\n\nchuck wood\r\n'
    assert get_encoder(directory=tmp_path / 'tok').bpe_merges == train_bpe(text, 270).bpe_merges
    (books / 'b.txt').write_text('chuck wood', encoding='utf-16')  # the file that is not UTF-8 is named
    with pytest.raises(SystemExit):
        bpe.main(['train', str(books), '--vocab-size', '270', '--out', str(tmp_path / 'tok')])
    assert f'{books / "b.txt"} is UTF-16 text' in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit:
        bpe.main(['train', str(tmp_path / 'tok'), '--vocab-size', '270', '--out', str(tmp_path / 'tok2')])
    err = capsys.readouterr().err  # a folder without .txt files (a vocabulary's): corpus_files' message
    assert exit.value.code == 2 and 'is a folder with no .txt file in it' in err, err
