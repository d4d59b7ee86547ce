"""GPT-2 BPE: exact ids (tiktoken built from the same vocabulary files is the reference), round trips, the
minGPT-style tokenizer interface, and where the vocabulary files come from."""
import argparse
import errno
import hashlib
import io
import json
import os
import random
import re
import threading
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import requests
import torch
import urllib3
from conftest import data_dir, load_project

from mingpt import bpe, data
from mingpt.bpe import BPETokenizer, Encoder, bytes_to_unicode, get_encoder, train_bpe


@pytest.fixture(scope='module')
def encoder():
    data_dir('gpt2', 'encoder.json')  # vocabulary from the test data, never downloaded here
    return get_encoder()


@pytest.fixture(scope='module')
def tiktoken_gpt2():
    """tiktoken's gpt2 encoding, built from the same local files as ours."""
    tiktoken = pytest.importorskip('tiktoken')
    import tiktoken.load
    from tiktoken_ext.openai_public import r50k_pat_str
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv('TIKTOKEN_CACHE_DIR', '')  # read the files directly, do not copy them to /tmp
        ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(str(data_dir('gpt2', 'vocab.bpe')),
                                                              str(data_dir('gpt2', 'encoder.json')))
    return tiktoken.Encoding('gpt2-local', pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={'<|endoftext|>': 50256}, explicit_n_vocab=50257)


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def test_bytes_to_unicode():
    table = bytes_to_unicode()
    assert sorted(table) == list(range(256))
    assert len(set(table.values())) == 256
    assert all(c.isprintable() and not c.isspace() for c in table.values())
    assert table[ord(' ')] == 'Ġ' and table[ord('\n')] == 'Ċ' and table[ord('a')] == 'a'


def test_every_data_file_matches_tiktoken(encoder, tiktoken_gpt2):
    root = data_dir()
    files = sorted(p for ext in ('*.txt', '*.tsv') for p in root.rglob(ext))
    assert len(files) >= 7, f'expected the shared text files under {root}, found {files}'
    for path in files:
        text = path.read_text(encoding='utf-8')
        ours, theirs = encoder.encode(text), tiktoken_gpt2.encode_ordinary(text)
        i = first_difference(ours, theirs)
        assert ours == theirs, f'{path}: ids differ at token {i}: {ours[i:i + 5]} vs {theirs[i:i + 5]}'
        assert encoder.decode(ours) == text, f'{path}: decode(encode(text)) != text'


def random_text(rng, n):
    """Text built to stress the pre-tokeniser and the byte fallback. Random code points are drawn among those
    Python's unicodedata knows (Unicode 14 to 16, depending on the Python): characters added later (Unicode 17,
    2025: CJK Extension J, ...) are letters to the `regex` package but not yet to tiktoken's Rust engine, so the
    two split them differently (see mingpt/bpe.py). Surrogates cannot be UTF-8 encoded."""
    pools = [
        'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ',
        '0123456789',
        ' \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2005\u200a\u2028\u2029\u202f\u205f\u3000',
        '.,;:!?-_()[]{}"\'`~@#$%^&*+=<>/\\|',
        "'s 's 't 're 've 'm 'll 'd 'S 'LL 'x".split(' '),
        [chr(c) for c in range(0x300, 0x370)],  # combining marks
        [chr(c) for c in range(0x4e00, 0x4e80)],  # CJK
        [chr(c) for c in range(0x1f600, 0x1f650)] + ['\u200d', '\ufe0f', '👨‍👩‍👧', '🏳️‍🌈'],  # emoji, ZWJ
        'αβγδεζηθικλμνξοπρστυφχψωπριν' + 'абвгдежзийклмнопрстуфхцчшщъыьэюя' + 'أبتثجحخدذرزسشصضطظعغفقكلمنهوي',
        'éèêëàâäôöûüçñßøåæœ' + 'ँंःअआइईउऊऋएऐओऔकखगघ' + '٠١٢٣٤٥٦٧٨٩' + '²³¹¼½¾Ⅳ①',
        '<|endoftext|>',
    ]
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.75:
            pool = rng.choice(pools)
            piece = ''.join(rng.choice(pool) for _ in range(rng.randint(1, 8)))
        elif r < 0.9:
            piece = ' ' * rng.randint(1, 6) if rng.random() < 0.5 else rng.choice(' \n\t') * rng.randint(1, 4)
        else:  # any assigned code point, BMP or astral (see below)
            piece = chr(rng.randint(0, 0x10FFFF if rng.random() < 0.3 else 0xFFFF))
            while unicodedata.category(piece) in ('Cn', 'Cs'):
                piece = chr(rng.randint(0, 0x10FFFF))
        out.append(piece)
    return ''.join(out)


def test_random_unicode_matches_tiktoken(encoder, tiktoken_gpt2):
    rng = random.Random(0)
    for k in range(400):
        text = random_text(rng, rng.randint(0, 60))
        ours = encoder.encode(text)
        assert ours == tiktoken_gpt2.encode_ordinary(text), f'string #{k}: {text!r}'
        assert encoder.decode(ours) == text, f'string #{k}: {text!r}'
    assert encoder.encode('') == [] and encoder.decode([]) == ''


def test_long_pretoken_matches_tiktoken(encoder, tiktoken_gpt2):
    # one pre-token of 5,000 letters: the heap-based merge loop costs n log n (the list-based loop it replaced was
    # quadratic) and must still give tiktoken's ids
    rng = random.Random(1)
    word = ''.join(rng.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(5000))
    assert encoder.encode(word) == tiktoken_gpt2.encode_ordinary(word)


def test_endoftext(encoder, tiktoken_gpt2):
    text = 'Hello<|endoftext|> world<|endoftext|><|endoftext|>'
    assert encoder.encode(text) == tiktoken_gpt2.encode_ordinary(text)  # plain text by default
    special = encoder.encode(text, allowed_special=True)
    assert special == tiktoken_gpt2.encode(text, allowed_special='all')
    assert special.count(50256) == 3 and 50256 not in encoder.encode(text)
    assert encoder.encode(text, allowed_special={'<|endoftext|>'}) == special
    assert encoder.encode(text, allowed_special='all') == special
    assert encoder.decode(special) == text
    with pytest.raises(ValueError, match='allowed_special'):
        encoder.encode(text, allowed_special='yes')


def test_the_encode_command_counts_one_in_the_singular(encoder, capsys):
    """It printed '1 pre-tokens' and '1 tokens for 1 bytes'."""
    bpe.main(['encode', 'a'])
    out = capsys.readouterr().out
    assert out.startswith('1 pre-token, in the byte alphabet') and out.endswith('\n1 token for 1 byte\n'), out


def test_lone_surrogates_are_encoded_as_tiktoken_encodes_them(encoder, tiktoken_gpt2, capsys):
    """A str may hold half of a UTF-16 pair (read with errors='surrogateescape', as the shell's argv is; JSON's
    "\\udcff"), which UTF-8 cannot encode: encode failed with UnicodeEncodeError. tiktoken makes it U+FFFD before
    pre-tokenising, and a whole pair its character (two letters here)."""
    texts = ['a\udcffb', '\ud800', ' \ud83d\ude00!', 'x\ud83d<|endoftext|>\ude00 y', ' \ud835\udd18\ud835\udd2b']
    for text in texts:
        assert encoder.encode(text) == tiktoken_gpt2.encode_ordinary(text), text
        assert encoder.encode(text, allowed_special='all') == tiktoken_gpt2.encode(text, allowed_special='all')
        assert encoder.encode_and_show_work(text)['bpe_idx'] == encoder.encode(text)
    raw = bpe.train_bpe('ab\ufffd' * 5, 260, pretokenize=False)
    assert raw.encode('ab\udcff' * 5) == raw.encode('ab\ufffd' * 5)
    bpe.main(['encode', 'ab\udcffc'])  # how `python -m mingpt.bpe encode $'ab\xffc'` receives its text
    assert capsys.readouterr().out.endswith("\n'c': c\n  ids [66]\n\n3 tokens for 6 bytes\n")


def test_cold_and_warm_encoders_agree(encoder):
    text = data_dir('tinyshakespeare', 'input.txt').read_text()[:20000]
    fresh = get_encoder()
    assert fresh.cache == {}
    assert fresh.encode(text) == encoder.encode(text) == fresh.encode(text)
    tiny = Encoder(encoder.encoder, [tuple(m) for m in _merges()], cache_size=50)  # cache overflow path
    assert tiny.encode(text) == fresh.encode(text) and len(tiny.cache) <= 50 + len(set(tiny.pat.findall(text)))
    assert tiny.encode(text[:3000]) == fresh.encode(text[:3000])  # a full cache is cleared and filled again


def _merges():
    return bpe._read_vocab(str(data_dir('gpt2', 'encoder.json')), str(data_dir('gpt2', 'vocab.bpe')))[1]


def bytes_only_encoder(**kw):
    """An Encoder with no merges: each UTF-8 byte is one token, whose id is the byte's value."""
    return Encoder({c: b for b, c in bytes_to_unicode().items()}, [], **kw)


def test_the_cache_is_cleared_when_a_call_would_overflow_it():
    enc = bytes_only_encoder(cache_size=3)
    assert enc.encode('a b c') == [97, 32, 98, 32, 99]
    assert set(enc.cache) == {'a', ' b', ' c'}
    assert enc.encode('d e') == [100, 32, 101]
    assert set(enc.cache) == {'d', ' e'}  # 3 cached + 2 new words exceed cache_size=3: cleared, then this call's


def test_a_call_that_overflows_the_cache_encodes_its_words_cached_before_too():
    """A text read line by line with a small cache: a line that repeats a cached word and brings enough new ones to
    overflow the cache still encodes every word (the cleared cache is refilled with all of this call's words, not
    only the new ones), whether the cache is cleared or the call has more words than it holds."""
    enc = bytes_only_encoder(cache_size=3)
    enc.encode('a b c')
    assert enc.encode('a d e') == [97, 32, 100, 32, 101]  # 'a' cached, ' d' ' e' new: 3 + 2 > 3
    assert set(enc.cache) == {'a', ' d', ' e'}
    assert enc.encode('a f g h') == [97, 32, 102, 32, 103, 32, 104]  # 4 words: more than the cache holds


def test_the_cache_never_holds_more_than_cache_size_words():
    """Encoder(cache_size=0) kept every call's words (a call that overflowed the cache filled it with all of its own
    words, however many): it remembers none now, and a call with more words than the cache holds leaves it alone."""
    off = bytes_only_encoder(cache_size=0)
    assert off.encode('a b a') == [97, 32, 98, 32, 97] and off.cache == {}
    enc = bytes_only_encoder(cache_size=3)
    enc.encode('a b')
    assert enc.encode('c d e f c') == [99, 32, 100, 32, 101, 32, 102, 32, 99]  # 4 distinct words: more than 3
    assert set(enc.cache) == {'a', ' b'}
    for size in (-1, None, 2.5, True):
        with pytest.raises(ValueError, match=rf"cache_size is how many words' ids to remember, an int >= 0 .*got "
                                             rf"{re.escape(repr(size))}"):
            bytes_only_encoder(cache_size=size)


def test_a_special_tokens_spelling_is_text_without_a_pre_tokeniser_too():
    """Without a pre-tokeniser the whole text is one word, so '<|endoftext|>' written as text reaches the merge loop
    whole: it must still be its 13 bytes (ids = byte values here), the special id 256 only when allowed."""
    enc = Encoder({**{c: b for b, c in bytes_to_unicode().items()}, '<|endoftext|>': 256}, [], pattern=None)
    assert enc.encode('<|endoftext|>') == list(b'<|endoftext|>')
    assert enc.encode_and_show_work('<|endoftext|>')['bpe_idx'] == list(b'<|endoftext|>')
    assert enc.encode('a<|endoftext|>', allowed_special=True) == [97, 256]


def test_of_two_special_tokens_where_one_begins_the_other_the_longer_wins():
    """'<|end|>\\n' begins with '<|end|>': where the text holds the longer one it is one token, by hand
    h i <|end|>\\n o k = 104 105 257 111 107; elsewhere the shorter is. Decoding gives back their text."""
    enc = Encoder({**{c: b for b, c in bytes_to_unicode().items()}, '<|end|>': 256, '<|end|>\n': 257}, [])
    assert enc.encode('hi<|end|>\nok', allowed_special='all') == [104, 105, 257, 111, 107]
    assert enc.encode('<|end|>ok', allowed_special='all') == [256, 111, 107]
    assert enc.decode([104, 257, 256]) == 'h<|end|>\n<|end|>'  # a special token decodes as its own text, newline too


def test_encode_refuses_bytes_with_or_without_a_pre_tokeniser():
    for enc in (bytes_only_encoder(), bytes_only_encoder(pattern=None)):
        for allowed_special in (False, True):
            with pytest.raises(TypeError, match='encode takes a str, got bytes; decode bytes to str first'):
                enc.encode(b'hello', allowed_special=allowed_special)


def test_the_other_ways_in_refuse_what_is_not_text():
    """encode_ordinary, encode_and_show_work, pre_tokens and merge_steps, called on bytes or None, failed deep inside
    ('cannot use a string pattern on a bytes-like object', 'expected string or buffer', 'NoneType' ... 'encode')."""
    enc = bytes_only_encoder()
    for method in (enc.encode_ordinary, enc.encode_and_show_work, enc.pre_tokens, enc.merge_steps):
        for text in (b'hello', None):
            with pytest.raises(TypeError, match=rf'the text must be a str \(decode bytes to str first\), got '
                                                rf'{type(text).__name__}'):
                method(text)


def test_mingpt_bpe_method(encoder):
    assert encoder.bpe('Ġhello') == 'Ġhello'
    assert encoder.bpe('Ġunsullied') == ' '.join(encoder.decoder[i] for i in encoder.encode(' unsullied'))


def test_encode_and_show_work_as_minGPT_shows_it(encoder, tiktoken_gpt2):
    text = "Hello world, naïve unsullied 🙂"
    work = encoder.encode_and_show_work(text)
    assert work['bpe_idx'] == tiktoken_gpt2.encode_ordinary(text)
    assert work['tokens'] == ['Hello', ' world', ',', ' naïve', ' unsullied', ' 🙂']
    naive = work['parts'][3]  # ï is two UTF-8 bytes, each one printable character of the byte alphabet
    assert naive['token_bytes'] == b' na\xc3\xafve' and naive['token_translated'] == 'ĠnaÃ¯ve'
    for part in work['parts']:
        assert ''.join(part['token_merged']) == part['token_translated']
        assert part['token_ix'] == [encoder.encoder[m] for m in part['token_merged']]
        assert part['token_ix'] == tiktoken_gpt2.encode_ordinary(part['token'])
    assert work['parts'][1]['token_merged'] == ['Ġworld'] and work['parts'][1]['token_ix'] == [995]


def test_merge_steps_by_hand():
    """The lowest-ranked pair present merges first, at every place it occurs, leftmost first where they overlap."""
    alphabet = list(bytes_to_unicode().values())
    merges = [('a', 'a'), ('a', 'b'), ('aa', 'ab')]
    enc = Encoder({s: i for i, s in enumerate(alphabet + ['aa', 'ab', 'aaab'])}, merges)
    assert enc.merge_steps('aaab') == [(None, ['a', 'a', 'a', 'b']),
                                       (('a', 'a'), ['aa', 'a', 'b']),  # a a a: the left pair, not the right
                                       (('a', 'b'), ['aa', 'ab']),
                                       (('aa', 'ab'), ['aaab'])]
    assert enc.merge_steps('aaaa') == [(None, ['a'] * 4), (('a', 'a'), ['aa', 'aa'])]  # both places in one step
    assert enc.merge_steps('ba') == [(None, ['b', 'a'])]  # no pair has a rank: the bytes stay


def test_merge_steps_end_in_the_ids_of_tiktoken(encoder, tiktoken_gpt2):
    text = data_dir('tinyshakespeare', 'input.txt').read_text()[:50_000] + random_text(random.Random(0), 300)
    for word in set(encoder.pat.findall(text)):
        steps = encoder.merge_steps(word)
        assert [encoder.encoder[s] for s in steps[-1][1]] == tiktoken_gpt2.encode_ordinary(word), word
        ranks = [encoder.bpe_ranks[pair] for pair, _ in steps[1:]]
        assert ranks == sorted(ranks)  # a merge never makes a pair of lower rank than its own


def test_merge_steps_read_a_lone_surrogate_as_encode_does(encoder, tiktoken_gpt2):
    """merge_steps('a\\udcff') raised UnicodeEncodeError, where encode reads the lone surrogate as U+FFFD (and a whole
    pair as its character), as tiktoken does."""
    for word in ['\udcff', ' \ud800', ' \ud83d\ude00']:
        steps = encoder.merge_steps(word)
        assert [encoder.encoder[s] for s in steps[-1][1]] == tiktoken_gpt2.encode_ordinary(word), ascii(word)
    assert encoder.merge_steps('a\udcff') == encoder.merge_steps('a\ufffd')


def test_bench_bpe_builds_every_contender_and_they_give_the_same_ids(tmp_path, monkeypatch):
    data_dir('gpt2', 'encoder.json')  # the bench reads GPT-2's vocabulary from $MINGPT_DATA_DIR
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / 'bench'))  # for its `import workers`
    bench = load_project('bench_bpe', folder='bench')
    (tmp_path / 'text.txt').write_text("Hello world, naïve unsullied 🙂\n  It's 2026.")
    _, text, found = bench.inputs(argparse.Namespace(text=str(tmp_path / 'text.txt'), mb=1.0))
    ids = {name: make()(text) for name, make in found.items()}
    assert len(ids) == 4 and all(v == ids['minGPT-style reference'] for v in ids.values()), ids
    assert ids['mingpt.bpe'][:3] == [15496, 995, 11]  # 'Hello', ' world', ','


def test_the_encode_command_shows_each_words_merges_and_ids(encoder, tiktoken_gpt2, capsys, monkeypatch):
    monkeypatch.setenv('MINGPT_DATA_DIR', str(data_dir()))
    bpe.main(['encode', 'Would a woodchuck'])
    out = capsys.readouterr().out
    woodchuck = out.split("\n' woodchuck': ")[1].split('\n\n')[0].splitlines()
    assert woodchuck[0] == 'Ġ w o o d c h u c k' and woodchuck[-1] == '  ids [4898, 354, 1347]'
    assert woodchuck[1].split() == ['merge', str(encoder.bpe_ranks[('Ġ', 'w')] + 1), 'Ġ+w', 'Ġw', 'o', 'o', 'd', 'c',
                                    'h', 'u', 'c', 'k']
    assert woodchuck[-2].split()[2:] == ['Ġw+ood', 'Ġwood', 'ch', 'uck']
    assert out.endswith(f"\n{len(tiktoken_gpt2.encode_ordinary('Would a woodchuck'))} tokens for 17 bytes\n")


def test_decode_partial_utf8(encoder):
    ids = encoder.encode('🙂')  # an emoji is several byte-level tokens
    assert len(ids) > 1
    assert '\ufffd' in encoder.decode(ids[:1])
    assert encoder.decode_bytes(ids).decode('utf-8') == '🙂'
    with pytest.raises(ValueError, match='0..50256'):
        encoder.decode([50257])
    with pytest.raises(ValueError, match='0..50256'):
        encoder.decode([-1])


def test_decode_reads_ids_from_a_tensor_an_array_or_a_generator(encoder):
    """Encoder.decode of a generator gave '' (the check for negative ids used it up first), and of a tensor or array
    of more than one id failed with 'Boolean value of Tensor with more than one value is ambiguous'."""
    ids = [15496, 995]  # 'Hello', ' world' in GPT-2
    for given in (torch.tensor(ids), np.array(ids), (i for i in ids), tuple(ids)):
        assert encoder.decode(given) == 'Hello world'
    assert encoder.decode(i for i in [15496, 50256, 995] if i != 50256) == 'Hello world'  # padding dropped
    for one in (torch.tensor(15496), np.int64(15496), 15496):  # one id, e.g. a sampled token: 'int' not iterable
        assert encoder.decode(one) == 'Hello'
    with pytest.raises(ValueError, match=r'cannot decode ids \[-1\]'):
        encoder.decode(torch.tensor([15496, -1]))


def test_decode_stream_joins_to_decode_of_the_whole_sequence(encoder):
    """Decoding a stream token by token (decode([t])) printed U+FFFD for each piece of a character split across
    tokens; decode_stream's pieces join to decode(all the ids), for valid text and for any ids at all."""
    text = 'Hi 🙂 你好, 日本語のテキスト 🦜🦜 ü\n'
    ids = encoder.encode(text)
    assert '\ufffd' in ''.join(encoder.decode([t]) for t in ids)  # the old way
    pieces = list(encoder.decode_stream(ids))
    assert ''.join(pieces) == text and '\ufffd' not in ''.join(pieces)
    rng = random.Random(0)
    byte_tokens = [encoder.ordinary[c] for c in bytes_to_unicode().values()]  # each byte alone: most are no text
    for _ in range(200):
        ids = [rng.choice(byte_tokens) if rng.random() < 0.7 else rng.randrange(len(encoder))
               for _ in range(rng.randrange(12))]
        assert ''.join(encoder.decode_stream(iter(ids))) == encoder.decode(ids)


def test_decode_stream_yields_each_character_once_its_last_token_has_come(encoder):
    ids = encoder.encode('你好')
    assert len(ids) > 2
    seen = []
    stream = encoder.decode_stream(seen.append(i) or torch.tensor([[i]]) for i in ids)  # generate_stream's (1, 1)
    assert next(stream) == '你' and len(seen) < len(ids)  # printed before the next character's tokens were drawn
    assert list(stream) == ['好']
    assert list(encoder.decode_stream(encoder.encode('你')[:-1])) == ['\ufffd']  # cut short: as decode reads it


def test_decode_stream_of_a_model_follows_one_row():
    from mingpt.model import GPT
    tok = BPETokenizer()
    config = GPT.get_default_config()
    config.merge_from_dict({'model_type': 'gpt-nano', 'vocab_size': tok.vocab_size, 'block_size': 16})
    model = GPT(config).eval()
    idx = tok('你好')
    steps = list(model.generate_stream(idx, 8))
    assert ''.join(tok.decode_stream(steps)) == tok.decode(torch.cat(steps, dim=1)[0])
    with pytest.raises(ValueError, match=r'2 ids in one.*step\[i\] for step in stream'):
        list(tok.decode_stream(model.generate_stream(idx.repeat(2, 1), 2)))
    with pytest.raises(TypeError, match='bools are a mask'):
        list(tok.decode_stream([torch.tensor([True])]))


def test_tokenizer_interface(encoder):
    tok = BPETokenizer()
    x = tok('hello world')
    assert x.dtype == torch.long and x.tolist() == [[31373, 995]]
    assert tok.decode(x[0]) == 'hello world'
    assert tok.decode(x) == ['hello world']  # 2-D in, one string per row out
    assert tok.decode([31373, 995]) == 'hello world' and tok.decode([[31373], [995]]) == ['hello', ' world']
    assert tok.decode(torch.tensor(995)) == ' world'
    assert tok('').shape == (1, 0)
    batch, lengths = tok(['hi', 'hello there world', ''], return_lengths=True)
    assert batch.shape == (3, 3) and lengths.tolist() == [1, 3, 0]
    assert batch[0].tolist() == [5303, 50256, 50256]  # right-padded with pad_token_id (50256 by default)
    assert tok(['hi', 'hello there world', '']).equal(batch)
    assert [tok.decode(row[:n]) for row, n in zip(batch, lengths)] == ['hi', 'hello there world', '']
    assert BPETokenizer(pad_token_id=0)(['a b', 'c'])[1].tolist() == [66, 0]
    assert BPETokenizer(allowed_special=True)('a<|endoftext|>').tolist() == [[64, 50256]]
    with pytest.raises(TypeError, match='str'):
        tok(123)
    with pytest.raises(TypeError, match='str'):
        tok([])
    with pytest.raises(ValueError, match='return_tensors'):
        tok('x', return_tensors='np')


def test_tokenizer_refuses_a_pad_token_id_that_is_not_an_int():
    """BPETokenizer(pad_token_id=2.5) padded with 2 (the tensor cut the float) and pad_token_id=True with 1, silently.
    numpy's ints and a 0-d integer tensor are ids too; the id kept is a plain int."""
    for pad in (2.5, 2.0, True, np.bool_(False), '2', torch.tensor(2.0), torch.tensor(True)):
        with pytest.raises(TypeError, match=r"pad_token_id must be an int, the id that pads short rows, got "):
            BPETokenizer(pad_token_id=pad)
    for pad in (np.int64(2), torch.tensor(2)):
        tok = BPETokenizer(pad_token_id=pad)
        assert tok(['a b', 'c'])[1].tolist() == [66, 2] and type(tok.pad_token_id) is int


def test_tokenizer_refuses_a_bad_allowed_special_when_built():
    """BPETokenizer(allowed_special='yes') was built and failed only at its first call, far from the mistake."""
    for allowed, message in (('yes', r"allowed_special must be False, True, 'all' or a set of special tokens"),
                             ({'<|foo|>'}, r"allowed_special names \['<\|foo\|>'\], which this vocabulary does not")):
        with pytest.raises(ValueError, match=message):
            BPETokenizer(allowed_special=allowed)
    assert BPETokenizer(allowed_special={'<|endoftext|>'})('a<|endoftext|>').tolist() == [[64, 50256]]


def test_decode_refuses_a_list_of_bools_and_bytes_naming_them(encoder):
    """decode([True, False]) read a mask as the ids 1 and 0 ('"!'), and decode(b'hello') the bytes as the ids 104,
    101, ... (five U+FFFD: GPT-2's first ids are not the bytes in order); a tuple, a row of a 2-D list or a generator
    of bools no better. Refused, as a bool tensor is; a str was refused as 'ids' that are not ints."""
    tok = BPETokenizer()
    for decode in (encoder.decode, encoder.decode_bytes, tok.decode):
        for mask in ([True, False], (False,), [15496, True], (i > 0 for i in [1, 0])):
            with pytest.raises(TypeError, match=r"cannot decode .*: token ids are integers; .* bools are a mask, not "
                                                r"ids: decode the ids it selects"):
                decode(mask)
        for text in (b'hello', bytearray(b'\x00'), memoryview(b'hi'), 'hello'):
            with pytest.raises(TypeError, match=r"cannot decode .*: it is text already, not token ids; decode takes "
                                                r"the ids that encode gives \(bytes become a str with .decode"):
                decode(text)
    with pytest.raises(TypeError, match=r"bools are a mask, not ids"):
        tok.decode([[15496], [True, False]])
    ids = torch.tensor([15496, 995])
    assert tok.decode(ids[torch.tensor([True, False])]) == encoder.decode([np.int64(15496)]) == 'Hello'


def test_decode_takes_a_list_of_tensors_as_rows():
    """Rows of different lengths, each cut to its length, are a list of 1-D tensors (what Hugging Face's batch_decode
    takes): decode raised 'Boolean value of Tensor with more than one value is ambiguous'."""
    tok = BPETokenizer()
    batch, lengths = tok(['hi', 'hello there world', ''], return_lengths=True)
    rows = [row[:n] for row, n in zip(batch, lengths)]
    assert tok.decode(rows) == ['hi', 'hello there world', ''] == [tok.decode(row.tolist()) for row in rows]
    assert tok.decode(list(batch[1])) == 'hello there world'  # a list of 0-d tensors is one row of ids


def test_decode_refuses_bools_and_floats_naming_them(encoder):
    """decode(True) read id 1 ('"') and a mask tensor decoded to text; a float tensor or number (or None) failed with
    "'float' object is not iterable". Each is refused by Encoder.decode and BPETokenizer.decode, naming integer ids."""
    tok = BPETokenizer()
    given = [True, 97.0, np.float32(97), torch.tensor(97.), torch.tensor([97., 98.]), torch.tensor([1, 0]).bool(),
             np.array([97.5]), torch.tensor([[97., 98.]]), None]
    calls = [(decode, ids) for ids in given for decode in (encoder.decode, tok.decode)]
    for decode, ids in calls + [(tok.decode, [torch.tensor([97.])])]:  # rows as a list of tensors: tok.decode's
        with pytest.raises(TypeError, match=r'cannot decode .*: token ids are integers; if it holds ids, convert'):
            decode(ids)
    assert encoder.decode(torch.tensor([64, 65], dtype=torch.uint8)) == tok.decode(np.array([64, 65])) == 'ab'


class FakeResponse:
    """Enough of requests.Response for mingpt.data.download."""
    history = []  # no redirects

    def __init__(self, body, status=200, size=None):
        self.body, self.status_code, self.headers = body, status, {'content-length': str(len(body))}
        if status == 416:  # a range past the end: the file's size
            self.headers['content-range'] = f'bytes */{size}'

    def raise_for_status(self):
        if self.status_code >= 400:
            raise requests.HTTPError(f'{self.status_code} error')

    def iter_content(self, chunk_size):
        for i in range(0, len(self.body), chunk_size):
            yield self.body[i:i + chunk_size]

    def close(self):
        pass


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.delenv('MINGPT_DATA_DIR', raising=False)
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path))
    return tmp_path


def files_in(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob('*') if p.is_file())


def test_offline_error_is_clear(empty_cache, no_network, monkeypatch):
    with pytest.raises(data.DownloadError, match='could not download') as e:
        get_encoder()
    assert bpe.ENCODER_JSON_URL in str(e.value) and 'MINGPT_DATA_DIR' in str(e.value)
    # both files named, and the ways on: first the folder a project's user puts them in, then Python's paths
    assert f"found no copy in {empty_cache / 'gpt2'} (the download cache). Check the network, or get encoder.json " \
        f"and vocab.bpe elsewhere and put both in {empty_cache / 'gpt2'}/ (or gpt2/ in a folder that MINGPT_DATA_DIR " \
        "names), or anywhere, their paths passed in Python to get_encoder(encoder_path, vocab_path)." in str(e.value)
    assert 'partial download' not in str(e.value)  # none was made
    assert list(empty_cache.rglob('*')) == []  # not even an empty folder
    assert 'does not exist' not in str(e.value)
    monkeypatch.setenv('MINGPT_DATA_DIR', str(empty_cache / 'dta'))  # a typo of the data folder's name
    # said of the variable, where '.../dta/gpt2 ($MINGPT_DATA_DIR, which does not exist)' read as of gpt2/, and not
    # offered as a place to put the files: a folder under the misspelt name
    with pytest.raises(RuntimeError) as e:
        get_encoder()
    cache = re.escape(str(empty_cache / 'gpt2'))
    assert re.search(rf"found no copy in {cache} \(the download cache\); MINGPT_DATA_DIR names .*dta, which does "
                     rf"not exist: correct it \(misspelt\?\) or unset it\. Check the network, or get encoder.json "
                     rf"and vocab.bpe elsewhere and put both in {cache}/ \(or gpt2/ in a folder that MINGPT_DATA_DIR "
                     r"names\)", str(e.value))
    assert 'dta/' not in str(e.value)
    with pytest.raises(RuntimeError, match=r"set MINGPT_DATA_DIR to a folder that holds it as text/f.txt \(it is "
                                           r".*dta, which does not exist\)\."):  # any other file's wording
        data.fetch('text/f.txt', url='https://example.org/f.txt')
    (empty_cache / 'encoder.json').write_text('{}')  # the data file itself, not its folder: it said 'does not exist'
    monkeypatch.setenv('MINGPT_DATA_DIR', str(empty_cache / 'encoder.json'))
    with pytest.raises(RuntimeError, match=r"MINGPT_DATA_DIR names [^ ]*encoder.json, a file, not a folder: "
                                           r"correct it .* put both in [^ ]*/gpt2/ \(or "):  # not in a file's folder
        get_encoder()
    with pytest.raises(RuntimeError, match=r"holds it as text/f.txt \(it is .*encoder.json, a file, not a folder\)\."):
        data.fetch('text/f.txt', url='https://example.org/f.txt')


def test_offline_with_one_of_the_two_paths_given_names_only_the_other_file(empty_cache, no_network):
    """get_encoder(encoder_path=X) offline said to get 'encoder.json and vocab.bpe' though X was given."""
    mine = empty_cache / 'mine'
    mine.mkdir()
    for arg, name, missing, other in (('encoder_path', 'encoder.json', 'vocab.bpe', 'vocab_path'),
                                      ('vocab_path', 'vocab.bpe', 'encoder.json', 'encoder_path')):
        (mine / name).write_text('')  # not read: the other file is looked for first
        with pytest.raises(data.DownloadError) as e:
            get_encoder(**{arg: mine / name})
        assert f"get {missing} elsewhere and put it in {empty_cache / 'gpt2'}/ (or gpt2/ in a folder that " \
            f"MINGPT_DATA_DIR names), or anywhere, its path passed in Python as get_encoder's {other} too." \
            in str(e.value)


def test_a_broken_download_is_kept_and_resumed(tmp_path, monkeypatch):
    body = bytes(range(256)) * 20

    class Breaks(FakeResponse):
        def iter_content(self, chunk_size):
            yield self.body[:1000]
            raise requests.ConnectionError('connection reset by peer')

    monkeypatch.setattr(data.requests, 'get', lambda url, **kw: Breaks(body))
    dest, part = tmp_path / 'f.bin', tmp_path / 'f.bin.part'
    with pytest.raises(RuntimeError, match=r"reset by peer.*partial download is kept at .*f.bin.part and resumed"):
        data.download('https://example.org/f.bin', dest, quiet=True)
    assert not dest.exists() and part.read_bytes() == body[:1000]
    asked = []
    monkeypatch.setattr(data.requests, 'get', lambda url, headers, **kw: asked.append(headers) or
                        FakeResponse(body[1000:], status=206))
    data.download('https://example.org/f.bin', dest, sha256=hashlib.sha256(body).hexdigest(), quiet=True)
    assert asked == [{'Range': 'bytes=1000-'}] and dest.read_bytes() == body and not part.exists()


def test_a_cache_that_cannot_hold_the_download_says_so_and_how_to_go_on(tmp_path, monkeypatch):
    """A full disk (or a read-only cache) said only '[Errno 28] No space left on device', naming no file."""
    body = bytes(range(256)) * 20

    class FullDisk(FakeResponse):
        def iter_content(self, chunk_size):
            yield self.body[:1000]
            raise OSError(errno.ENOSPC, 'No space left on device')

    monkeypatch.setattr(data.requests, 'get', lambda url, **kw: FullDisk(body))
    dest = tmp_path / 'cache' / 'f.bin'
    with pytest.raises(OSError, match=rf"cannot save the download of https://example.org/f.bin in "
                                      rf"{re.escape(str(dest.parent))} \(\[Errno 28\] No space left on device\); set "
                                      r"MINGPT_CACHE_DIR to a folder that can be written and has room for it, or get "
                                      r"the file elsewhere and pass its path\. The partial download is kept at "
                                      r".*f.bin.part and resumed next time\.$"):
        data.download('https://example.org/f.bin', dest, quiet=True)
    (tmp_path / 'file').write_text('a file where the cache folder should be')
    with pytest.raises(OSError, match=r"cannot save the download .* \(cannot make the folder .*: .*file is a file, not "
                                      r"a folder\); set MINGPT_CACHE_DIR"):
        data.download('https://example.org/f.bin', tmp_path / 'file' / 'f.bin', quiet=True)


def test_no_home_folder_says_to_set_mingpt_cache_dir(monkeypatch):
    """Without HOME and a user entry (a container's arbitrary user id) every data file's search, an offline one from
    $MINGPT_DATA_DIR too, stopped with Python's 'Could not determine home directory.', naming no way on."""
    monkeypatch.delenv('HOME', raising=False)
    monkeypatch.delenv('MINGPT_CACHE_DIR', raising=False)
    pwd = pytest.importorskip('pwd')  # POSIX's user entries (Windows falls back on USERPROFILE)

    def no_user(uid):
        raise KeyError(uid)
    monkeypatch.setattr(pwd, 'getpwuid', no_user)
    with pytest.raises(RuntimeError, match=r"cannot find the home folder.*: set MINGPT_CACHE_DIR"):
        data.data_roots()


def test_a_resumed_download_when_the_part_is_complete_or_the_server_ignores_the_range(tmp_path, monkeypatch):
    body = bytes(range(256)) * 4
    dest, part = tmp_path / 'f.bin', tmp_path / 'f.bin.part'
    part.write_bytes(body)
    monkeypatch.setattr(data.requests, 'get', lambda url, **kw: FakeResponse(b'', status=416, size=len(body)))
    data.download('https://example.org/f.bin', dest, sha256=hashlib.sha256(body).hexdigest(), quiet=True)
    assert dest.read_bytes() == body and not part.exists()  # nothing was left to download
    dest.unlink()
    part.write_bytes(b'stale bytes')
    monkeypatch.setattr(data.requests, 'get', lambda url, **kw: FakeResponse(body))  # 200: the whole file again
    data.download('https://example.org/f.bin', dest, quiet=True)
    assert dest.read_bytes() == body and not part.exists()


def test_a_part_longer_than_the_file_is_downloaded_again_not_taken_as_complete(tmp_path, monkeypatch):
    """The server answers 416 (nothing past the end) to a .part longer than its file, which changed since, or which
    two downloads appended to: the .part was renamed into place as the download, its extra bytes and all."""
    body = bytes(range(256)) * 4
    dest, part = tmp_path / 'f.bin', tmp_path / 'f.bin.part'
    part.write_bytes(body + b'extra bytes')
    asked = []

    def serve(url, headers, **kw):
        asked.append(headers)
        return FakeResponse(b'', status=416, size=len(body)) if headers else FakeResponse(body)
    monkeypatch.setattr(data.requests, 'get', serve)
    data.download('https://example.org/f.bin', dest, quiet=True)
    assert dest.read_bytes() == body and not part.exists()
    assert asked == [{'Range': f'bytes={len(body) + 11}-'}, {}]


def test_a_416_to_a_fresh_download_is_the_servers_error(tmp_path, monkeypatch):
    """No .part, so no range asked for: the code for 'nothing past the .part's end' made a missing .part be
    deleted (FileNotFoundError), and would have asked again for ever."""
    monkeypatch.setattr(data.requests, 'get', lambda url, **kw: FakeResponse(b'', status=416, size=5))
    with pytest.raises(RuntimeError, match=r"could not download https://example.org/f.bin \(HTTPError: 416 error\)"):
        data.download('https://example.org/f.bin', tmp_path / 'f.bin', quiet=True)
    assert files_in(tmp_path) == []


def serve(monkeypatch, routes):
    """A network for requests' own redirect handling: routes maps a URL to its answer, (status, headers, body)."""
    def send(adapter, request, **kw):
        status, headers, body = routes[request.url]
        raw = urllib3.HTTPResponse(body=io.BytesIO(body), headers=headers, status=status, preload_content=False)
        return adapter.build_response(request, raw)
    monkeypatch.setattr(requests.adapters.HTTPAdapter, 'send', send)


@pytest.mark.parametrize('hops', [['http://example.org/f.bin'],
                                  ['http://example.org/f.bin', 'https://elsewhere.org/f.bin']])
def test_an_https_download_redirected_to_plain_http_is_refused_and_leaves_nothing(tmp_path, monkeypatch, hops):
    """A proxy or a mirror that sends an https download on over http, where anyone on the way could change the file
    (and Hugging Face's files have no published checksum here): requests followed it silently."""
    chain = ['https://example.org/f.bin', *hops]
    serve(monkeypatch, {**{a: (302, {'Location': b}, b'') for a, b in zip(chain, chain[1:])},
                        chain[-1]: (200, {}, b'changed on the way')})
    with pytest.raises(RuntimeError, match=r"could not download https://example.org/f.bin \(RequestException: "
                                           r"redirected to http://example.org/f.bin, plain http, where anyone on the "
                                           r"way could change the file: refused\)"):
        data.download('https://example.org/f.bin', tmp_path / 'cache' / 'f.bin', quiet=True)
    assert files_in(tmp_path) == []
    # https to https (the hub's files are served from a CDN) is followed, and an http address is the caller's choice
    serve(monkeypatch, {'https://example.org/f.bin': (302, {'Location': 'https://cdn.example.org/f.bin'}, b''),
                        'https://cdn.example.org/f.bin': (200, {}, b'body'),
                        'http://example.org/g.bin': (200, {}, b'plain')})
    assert data.download('https://example.org/f.bin', tmp_path / 'f.bin', quiet=True).read_bytes() == b'body'
    assert data.download('http://example.org/g.bin', tmp_path / 'g.bin', quiet=True).read_bytes() == b'plain'


def test_a_hugging_face_download_is_checked_against_the_sha256_the_hub_publishes(tmp_path, monkeypatch):
    """The hub answers a large (LFS) file's address with a redirect to its storage whose X-Linked-Etag is the file's
    sha256: a download changed or damaged on the way was kept as the weights. A small file's is git's sha1 of it,
    which is no sha256 and is not checked."""
    body = b'the weights'
    for etag, kept in ((hashlib.sha256(body).hexdigest(), True), (hashlib.sha1(b'git blob').hexdigest(), True),
                       (hashlib.sha256(b'other weights').hexdigest(), False)):
        serve(monkeypatch, {'https://example.org/f.bin': (302, {'Location': 'https://cdn.example.org/f.bin',
                                                                'X-Linked-Etag': f'"{etag}"'}, b''),
                            'https://cdn.example.org/f.bin': (200, {}, body)})
        if kept:
            assert data.download('https://example.org/f.bin', tmp_path / 'f.bin', quiet=True).read_bytes() == body
        else:
            with pytest.raises(RuntimeError, match=rf"download of https://example.org/f.bin is corrupt: sha256 "
                                                   rf"{hashlib.sha256(body).hexdigest()}, expected {etag}; it was "
                                                   "deleted"):
                data.download('https://example.org/f.bin', tmp_path / 'g.bin', quiet=True)
    assert files_in(tmp_path) == ['f.bin']


def test_a_content_length_that_is_not_a_number_only_leaves_the_bar_without_a_total(tmp_path, monkeypatch):
    """It was a bare ValueError (invalid literal for int()) that named neither the download nor the header."""
    serve(monkeypatch, {'https://example.org/f.bin': (200, {'Content-Length': 'abc'}, b'body')})
    assert data.download('https://example.org/f.bin', tmp_path / 'f.bin', quiet=True).read_bytes() == b'body'


def test_under_torchrun_the_first_process_of_a_machine_downloads_and_the_others_wait(tmp_path, monkeypatch):
    """All at once, the processes appended to one .part (a file too long, kept in the cache) or crashed finding it
    renamed away."""
    monkeypatch.setenv('WORLD_SIZE', '2')
    monkeypatch.setenv('LOCAL_RANK', '1')
    monkeypatch.setattr(data.requests, 'get', None)  # this process downloads nothing
    dest = tmp_path / 'f.bin'
    threading.Timer(0.5, dest.write_bytes, [b'body']).start()  # local rank 0 renames its download into place
    assert data.download('https://example.org/f.bin', dest, quiet=True) == dest
    assert files_in(tmp_path) == ['f.bin'] and dest.read_bytes() == b'body'


def test_under_torchrun_a_process_stops_waiting_when_the_first_one_downloads_nothing(tmp_path, monkeypatch):
    """The first process failed offline and went on without the file (sentiment, with no test.tsv, falls back to
    dev.tsv): the others waited for ever, and it for them in the process group."""
    monkeypatch.setenv('WORLD_SIZE', '2')
    monkeypatch.setenv('LOCAL_RANK', '1')
    monkeypatch.setattr(data, 'WAIT_FOR_DOWNLOAD_S', 0)
    monkeypatch.setattr(data.requests, 'get', None)  # this process downloads nothing
    dest = tmp_path / 'f.bin'
    with pytest.raises(RuntimeError, match=r"could not download https://example.org/f.bin: the first process of this "
                                           r"machine \(LOCAL_RANK 0\) downloads it for the others, but .*f.bin has "
                                           r"not appeared and nothing has been downloaded for 0 s"):
        data.download('https://example.org/f.bin', dest, quiet=True)
    assert files_in(tmp_path) == []


def test_local_rank_without_world_size_downloads_itself(tmp_path, monkeypatch):
    """LOCAL_RANK set by some other launcher for a single process (no WORLD_SIZE, as the trainer reads it): it
    waited 120 s for a first process that did not exist, then failed."""
    monkeypatch.setenv('LOCAL_RANK', '1')
    monkeypatch.delenv('WORLD_SIZE', raising=False)
    monkeypatch.setattr(data, 'WAIT_FOR_DOWNLOAD_S', 0)
    monkeypatch.setattr(data.requests, 'get', lambda url, **kw: FakeResponse(b'body'))
    dest = tmp_path / 'f.bin'
    assert data.download('https://example.org/f.bin', dest, quiet=True) == dest and dest.read_bytes() == b'body'


def test_fetch_looks_in_the_path_then_the_data_dir_then_the_cache(tmp_path, monkeypatch):
    for folder in ('data', 'cache'):
        (tmp_path / folder / 'set').mkdir(parents=True)
        (tmp_path / folder / 'set' / 'f.txt').write_text(folder)
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path / 'cache'))
    monkeypatch.setenv('MINGPT_DATA_DIR', str(tmp_path / 'data'))
    monkeypatch.setattr(data.requests, 'get', None)  # nothing is downloaded
    assert data.fetch('set/f.txt', url='https://example.org/f.txt').read_text() == 'data'
    assert data.fetch('set/f.txt', path=tmp_path / 'cache' / 'set' / 'f.txt').read_text() == 'cache'
    with pytest.raises(FileNotFoundError, match=r"nowhere.txt does not exist; pass the path of an existing file"):
        data.fetch('set/f.txt', path=tmp_path / 'nowhere.txt')  # absolute: looked for only there
    with pytest.raises(FileNotFoundError, match=r"^set/nowhere.txt does not exist \(nor under .*data or .*cache\); "
                                                 r"pass the path of an existing file"):
        data.fetch('set/f.txt', path='set/nowhere.txt')
    monkeypatch.chdir(tmp_path / 'data')  # a relative path: from here, then under the data dir, then the cache
    (tmp_path / 'data' / 'set' / 'f.txt').rename(tmp_path / 'data' / 'f.txt')
    assert data.fetch('other.txt', path='f.txt').read_text() == 'data'
    assert data.fetch('other.txt', path='set/f.txt').read_text() == 'cache'
    (tmp_path / 'data' / 'tok').mkdir()  # a tokenizer's directory too, e.g. --data.tokenizer=gpt2
    encoder = bpe.train_bpe('a cat sat on a mat ' * 9, 260)
    encoder.save(tmp_path / 'data' / 'tok')
    monkeypatch.chdir(tmp_path)
    assert get_encoder(directory='tok').encoder == encoder.encoder
    monkeypatch.delenv('MINGPT_DATA_DIR')
    assert data.fetch('set/f.txt', url='https://example.org/f.txt').read_text() == 'cache'
    with pytest.raises(FileNotFoundError, match=r"set/g.txt not found \(looked in: .*cache/set/g.txt\) and there is "
                                                r"no known download address"):
        data.fetch('set/g.txt')


def test_a_relative_path_that_exists_here_wins_over_the_same_path_under_the_data_dir(tmp_path, monkeypatch):
    for folder in ('here', 'data', 'cache'):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / 'f.txt').write_text(folder)
    monkeypatch.setenv('MINGPT_DATA_DIR', str(tmp_path / 'data'))
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path / 'cache'))
    monkeypatch.chdir(tmp_path / 'here')
    assert data.fetch('other.txt', path='f.txt').read_text() == 'here'
    monkeypatch.chdir(tmp_path)
    assert data.fetch('other.txt', path='f.txt').read_text() == 'data'  # not here: the data dir, before the cache


def test_read_text_drops_a_byte_order_mark_and_names_a_file_that_is_not_utf8(tmp_path):
    (tmp_path / 'bom.txt').write_bytes('\ufeffFirst Citizen:\nBefore'.encode('utf-8'))
    assert data.read_text(tmp_path / 'bom.txt') == 'First Citizen:\nBefore'  # no '\ufeff' in a vocabulary
    (tmp_path / 'latin1.txt').write_bytes('naïve'.encode('latin-1'))
    with pytest.raises(ValueError, match=r"latin1.txt is not UTF-8 text \(byte 2 cannot be decoded"):
        data.read_text(tmp_path / 'latin1.txt')


def test_a_file_that_is_not_utf8_gets_a_conversion_that_works(tmp_path):
    """Notepad's 'Unicode' and Windows PowerShell's > write UTF-16, Windows' 'ANSI' is cp1252: the error says which
    encoding to convert from (a bare 'iconv -t utf-8' assumes the locale's, UTF-8, and fails on both)."""
    (tmp_path / 'notepad.txt').write_text('caf\xe9\r\n', encoding='utf-16')
    with pytest.raises(ValueError, match=r"notepad.txt is UTF-16 text .* iconv -f utf-16 -t utf-8 FILE > NEW.txt"):
        data.read_text(tmp_path / 'notepad.txt')
    (tmp_path / 'ansi.txt').write_bytes('caf\xe9 \u2019'.encode('cp1252'))
    with pytest.raises(ValueError, match=r"ansi.txt is not UTF-8 text \(byte 3 .* iconv -f cp1252 -t utf-8 FILE"):
        data.read_text(tmp_path / 'ansi.txt')
    torch.save({'w': torch.ones(3)}, tmp_path / 'model.pt')  # --data.path=model.pt was given the cp1252 advice
    with pytest.raises(ValueError, match=r"model.pt is not a text file \(it holds NUL bytes, as a checkpoint"):
        data.read_text(tmp_path / 'model.pt')


def test_corrupt_download_leaves_nothing(empty_cache, monkeypatch):
    monkeypatch.setattr(data.requests, 'get', lambda url, **kw: FakeResponse(b'{"not": "the vocabulary"}'))
    with pytest.raises(RuntimeError, match='sha256'):
        get_encoder()
    assert files_in(empty_cache) == []


def test_a_download_matches_a_sha256_written_in_capitals(empty_cache, monkeypatch):
    monkeypatch.setattr(data.requests, 'get', lambda url, **kw: FakeResponse(b'poems'))
    digest = hashlib.sha256(b'poems').hexdigest().upper()  # as Get-FileHash prints it; a match was deleted as corrupt
    assert data.fetch('poems.txt', 'https://example.com/poems.txt', sha256=digest).read_bytes() == b'poems'


@pytest.fixture(scope='module')
def vocab_bodies():
    return {bpe.ENCODER_JSON_URL: data_dir('gpt2', 'encoder.json').read_bytes(),
            bpe.VOCAB_BPE_URL: data_dir('gpt2', 'vocab.bpe').read_bytes()}


def test_download_into_cache_then_reuse(encoder, vocab_bodies, empty_cache, monkeypatch):
    bodies = vocab_bodies
    calls = []
    monkeypatch.setattr(data.requests, 'get', lambda url, headers, **kw: calls.append((url, headers)) or
                        FakeResponse(bodies[url]))
    assert get_encoder().encode('hello world') == [31373, 995]
    assert files_in(empty_cache) == ['gpt2/encoder.json', 'gpt2/vocab.bpe'] and len(calls) == 2
    assert all(headers == {} for _, headers in calls)  # a fresh download asks for no range
    assert get_encoder().encode(' again!') == encoder.encode(' again!')
    assert len(calls) == 2  # the second time from the cache


def test_the_directory_gpt2_is_gpt2s_vocabulary_downloaded_when_no_folder_holds_it(vocab_bodies, empty_cache,
                                                                                    monkeypatch):
    """--data.tokenizer=gpt2, as the README advises, on a fresh machine: it was refused with advice to train a
    vocabulary into ./gpt2."""
    monkeypatch.setattr(data.requests, 'get', lambda url, **kw: FakeResponse(vocab_bodies[url]))
    monkeypatch.chdir(empty_cache)
    assert get_encoder(directory='gpt2').encode('hello world') == [31373, 995]
    assert files_in(empty_cache) == ['gpt2/encoder.json', 'gpt2/vocab.bpe']
    with pytest.raises(FileNotFoundError, match=r"no tokenizer folder gpt-2 here, in \$MINGPT_DATA_DIR or in the "
                                                r"cache: give 'gpt2' for GPT-2's vocabulary"):  # was: train one into it
        get_encoder(directory='gpt-2')
    (empty_cache / 'gpt3').mkdir()
    with pytest.raises(FileNotFoundError, match=r"gpt3/encoder.json does not exist; train a vocabulary into gpt3"):
        get_encoder(directory='gpt3')


def test_the_directory_gpt2_is_gpt2s_vocabulary_beside_a_gpt2_folder_of_something_else(vocab_bodies, empty_cache,
                                                                                      monkeypatch, tmp_path_factory):
    """A ./gpt2 folder holding a model (Hugging Face's gpt2 cloned: vocab.json, merges.txt), or a cache that holds one
    of the two files: --data.tokenizer=gpt2 advised training a vocabulary into that folder (or into the cache)."""
    monkeypatch.setattr(data.requests, 'get', lambda url, **kw: FakeResponse(vocab_bodies[url]))
    here = tmp_path_factory.mktemp('here')
    monkeypatch.chdir(here)
    (here / 'gpt2').mkdir()
    for name in ('config.json', 'vocab.json', 'merges.txt'):
        (here / 'gpt2' / name).write_text('{}')
    (empty_cache / 'gpt2').mkdir()
    (empty_cache / 'gpt2' / 'encoder.json').write_bytes(vocab_bodies[bpe.ENCODER_JSON_URL])  # vocab.bpe not yet
    assert get_encoder(directory='gpt2').encode('hello world') == [31373, 995]
    assert files_in(empty_cache) == ['gpt2/encoder.json', 'gpt2/vocab.bpe']
    bpe.train_bpe('a cat sat on a mat ' * 9, 260).save(here / 'gpt2')  # a vocabulary of one's own in ./gpt2 is read
    assert len(get_encoder(directory='gpt2')) == 260


def test_a_hugging_face_folders_vocab_json_and_merges_txt_give_tiktokens_ids(tmp_path, tiktoken_gpt2):
    """HF names GPT-2's two files vocab.json and merges.txt: BPETokenizer(directory=) of such a folder advised
    training a vocabulary into it."""
    for ours, theirs in (('encoder.json', 'vocab.json'), ('vocab.bpe', 'merges.txt')):
        (tmp_path / theirs).write_bytes(data_dir('gpt2', ours).read_bytes())
    text = data_dir('text', 'gutenberg', '2600-0.txt').read_text(encoding='utf-8')[:100_000] + '<|endoftext|>!'
    tok = BPETokenizer(directory=tmp_path, allowed_special=True)
    assert tok(text)[0].tolist() == tiktoken_gpt2.encode(text, allowed_special='all')
    (tmp_path / 'merges.txt').unlink()
    with pytest.raises(FileNotFoundError, match=r"has vocab.json but not merges.txt: a BPE tokenizer needs both"):
        get_encoder(directory=tmp_path)


def test_a_tokenizer_json_without_an_entry_names_the_entry_it_lacks(tmp_path):
    """A tokenizer.json written by hand or cut short was refused as 'cannot read ... tokenizer: 'merges'', the bare
    text of a KeyError."""
    vocab = json.loads(data_dir('gpt2', 'encoder.json').read_text(encoding='utf-8'))
    merges = data_dir('gpt2', 'vocab.bpe').read_text(encoding='utf-8').splitlines()[1:]
    hf = {'normalizer': None, 'pre_tokenizer': {'type': 'ByteLevel', 'add_prefix_space': False}, 'added_tokens': [],
          'model': {'type': 'BPE', 'vocab': vocab, 'merges': merges}}
    (tmp_path / 'tokenizer.json').write_text(json.dumps(hf), encoding='utf-8')
    assert get_encoder(directory=tmp_path).encode('Hello world') == [15496, 995]
    del hf['model']['merges']
    (tmp_path / 'tokenizer.json').write_text(json.dumps(hf), encoding='utf-8')
    with pytest.raises(ValueError, match=r"tokenizer.json as GPT-2's kind of tokenizer: it has no 'merges' entry$"):
        get_encoder(directory=tmp_path)


@pytest.mark.parametrize('added', ['<l>', '<r>', 'hello'])
def test_added_tokens_that_hugging_face_matches_otherwise_are_refused_not_read_as_other_ids(tmp_path, added):
    """transformers strips the spaces before an lstrip token ('a <l> b' is [64, 50257, 275]) and after an rstrip
    one, and finds 'hello' added again (it is in GPT-2's vocabulary) within words too ('say hello' gives 220, 31373):
    read as special tokens, tokenizer.json gave other ids, [64, 220, 50257, 275] and 23748, with no word."""
    transformers = pytest.importorskip('transformers')
    for ours, theirs in (('encoder.json', 'vocab.json'), ('vocab.bpe', 'merges.txt')):
        (tmp_path / theirs).write_bytes(data_dir('gpt2', ours).read_bytes())
    hf = transformers.GPT2Tokenizer.from_pretrained(tmp_path)
    hf.add_tokens(['<plain>'])  # found where it stands, as a special token is: read
    hf.save_pretrained(tmp_path / 'plain')
    text = 'a <plain> b, say hello'
    assert get_encoder(directory=tmp_path / 'plain').encode(text, allowed_special=True) == hf.encode(text)
    hf.add_tokens([transformers.AddedToken(added, lstrip=added == '<l>', rstrip=added == '<r>')])
    hf.save_pretrained(tmp_path / 'plain')
    with pytest.raises(ValueError, match=rf"its added tokens \['{added}'\] are matched in text in ways mingpt does "
                                         r"not follow \(lstrip, rstrip, single_word, or an ordinary token added"):
        get_encoder(directory=tmp_path / 'plain')


@pytest.mark.parametrize('option', ['add_bos_token', 'add_eos_token'])
def test_a_tokenizer_json_that_adds_endoftext_around_text_is_refused_not_read_without_it(tmp_path, option):
    """transformers saves add_bos_token (add_eos_token) as a post-processor that puts <|endoftext|> before (after)
    every text: GPT2Tokenizer gives [50256, 15496, 995] for 'Hello world', and get_encoder read the folder as
    GPT-2's plain [15496, 995]. Without the option the same folder is read, with transformers' ids."""
    transformers = pytest.importorskip('transformers')
    BPETokenizer().save_pretrained(tmp_path)
    for added in (False, True):
        hf = transformers.GPT2Tokenizer.from_pretrained(tmp_path, **{option: added})
        hf.save_pretrained(tmp_path / option)
        if not added:
            assert get_encoder(directory=tmp_path / option).encode('Hello world') == hf.encode('Hello world')
    assert 50256 in hf.encode('Hello world')  # what the option does in transformers
    if not (tmp_path / option / 'tokenizer.json').exists():  # transformers 4's GPT2Tokenizer writes none
        pytest.skip("this transformers saves no tokenizer.json (the vocab.json folder's own check applies)")
    with pytest.raises(ValueError, match=r"its post-processor adds <\|endoftext\|> around every text \(add_bos_token "
                                         r"or add_eos_token\), which mingpt's tokenizer does not"):
        get_encoder(directory=tmp_path / option)


def test_add_prefix_space_beside_a_tokenizer_json_is_refused(tmp_path):
    """transformers reads tokenizer_config.json's add_prefix_space beside a tokenizer.json too ('Hello world' is
    [18435, 995]); get_encoder read the tokenizer.json alone, as [15496, 995]."""
    transformers = pytest.importorskip('transformers')
    BPETokenizer().save_pretrained(tmp_path)
    transformers.GPT2Tokenizer.from_pretrained(tmp_path).save_pretrained(tmp_path / 'hf')
    if not (tmp_path / 'hf' / 'tokenizer.json').exists():  # transformers 4's GPT2Tokenizer writes none
        pytest.skip("this transformers saves no tokenizer.json")
    config = json.loads((tmp_path / 'hf' / 'tokenizer_config.json').read_text())
    (tmp_path / 'hf' / 'tokenizer_config.json').write_text(json.dumps({**config, 'add_prefix_space': True}))
    assert transformers.AutoTokenizer.from_pretrained(tmp_path / 'hf').encode('Hello world') == [18435, 995]
    with pytest.raises(ValueError, match=r"tokenizer_config.json sets add_prefix_space, which transformers follows"):
        get_encoder(directory=tmp_path / 'hf')


@pytest.mark.parametrize('config, refused', [
    ({'add_prefix_space': True}, r"add_prefix_space set"),  # transformers: 'Hello world' is [18435, 995]
    ({'add_bos_token': True}, r"add_bos_token set"),  # [50256, 15496, 995]
    ({'added_tokens_decoder': {'50257': {'content': '[PAD]', 'special': True}}, 'pad_token': '[PAD]'},
     r"the tokens \['\[PAD\]'\] added past vocab.json"),  # 'Hello [PAD]' ends in 50257
])
def test_options_beside_vocab_json_that_change_the_ids_are_refused_not_ignored(tmp_path, config, refused):
    """An older transformers saved GPT-2's tokenizer as vocab.json and merges.txt with its options in
    tokenizer_config.json; transformers follows them, and get_encoder read the two files alone, as GPT-2's
    ([15496, 995] for 'Hello world', [15496, 685, 47, 2885, 60] for 'Hello [PAD]'). mingpt's own save_pretrained
    writes a tokenizer_config.json too, which is read."""
    transformers = pytest.importorskip('transformers')
    BPETokenizer().save_pretrained(tmp_path)
    text = 'Hello world [PAD]'
    theirs = transformers.GPT2Tokenizer.from_pretrained(tmp_path)
    assert get_encoder(directory=tmp_path).encode(text) == theirs.encode(text)
    (tmp_path / 'tokenizer_config.json').write_text(json.dumps({'tokenizer_class': 'GPT2Tokenizer', **config}))
    assert transformers.AutoTokenizer.from_pretrained(tmp_path).encode(text) != get_encoder().encode(text)
    with pytest.raises(ValueError, match=rf"{tmp_path.name}'s tokenizer has {refused}, which mingpt does not follow"):
        get_encoder(directory=tmp_path)


def test_save_pretrained_writes_what_autotokenizer_reads_beside_the_models_config(tmp_path, tiktoken_gpt2):
    """GPT.save_pretrained writes config.json and the weights only: AutoTokenizer read that folder as a tokenizer of
    no tokens ('Hello' gave []). BPETokenizer.save_pretrained adds the vocabulary, special tokens included: GPT-2's
    (tiktoken's ids) and one trained here with a special token of its own."""
    transformers = pytest.importorskip('transformers')
    from mingpt.model import GPT
    text = data_dir('text', 'gutenberg', '2701-0.txt').read_text(encoding='utf-8')[:100_000]
    own = bpe.train_bpe(text[:50_000], 400, special_tokens=('<|endoftext|>', '<|sep|>'))
    for name, vocabulary in (('gpt2', None), ('own', own)):
        folder = tmp_path / name
        C = GPT.get_default_config()
        C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=50257 if vocabulary is None else 400, block_size=8))
        GPT(C).save_pretrained(folder)
        tok = BPETokenizer()
        if vocabulary is not None:
            tok.encoder = vocabulary
        tok.save_pretrained(folder)
        theirs = transformers.AutoTokenizer.from_pretrained(folder)
        sample = text[60_000:] + '<|endoftext|>x<|sep|>'
        want = tok.encoder.encode(sample, allowed_special=True)
        assert theirs(sample)['input_ids'] == want and theirs.decode(want) == sample and len(theirs) == len(tok.encoder)
        assert get_encoder(directory=folder).encode(sample, allowed_special=True) == want
        if vocabulary is None:
            assert want == tiktoken_gpt2.encode(sample, allowed_special='all')
    assert want[-3:] == [398, ord('x'), 399]
    with pytest.raises(ValueError, match="trained without a pre-tokeniser"):
        bpe.train_bpe(text[:5000], 300, pretokenize=False).save(tmp_path / 'raw', hugging_face=True)


def test_autotokenizer_reads_save_pretrained_without_a_model_beside_it(tmp_path):
    """tok.save_pretrained(folder) alone (no model's config.json) failed in AutoTokenizer.from_pretrained(folder):
    "Couldn't instantiate the backend tokenizer". It reads it now, with the same ids, special tokens included."""
    transformers = pytest.importorskip('transformers')
    text = data_dir('text', 'gutenberg', '2701-0.txt').read_text(encoding='utf-8')[:60_000]
    tok = BPETokenizer()
    tok.encoder = bpe.train_bpe(text[:50_000], 300, special_tokens=('<|endoftext|>', '<|sep|>'))
    tok.save_pretrained(tmp_path)
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path)
    sample = text[50_000:] + '<|endoftext|>x<|sep|>'
    assert theirs(sample)['input_ids'] == tok.encoder.encode(sample, allowed_special=True)


def test_save_pretrained_keeps_pad_token_id_and_allowed_special(tmp_path, tiktoken_gpt2):
    """save_pretrained wrote the vocabulary only: BPETokenizer(directory=folder) padded with 50256 where the tokenizer
    saved padded with 0 or -1, and read '<|endoftext|>' as 7 tokens of text where it was allowed the one id. The
    folder keeps both now and arguments given win. AutoTokenizer reads it with the same ids and, as for GPT-2's own
    tokenizer, no pad token: not <|endoftext|> (HF's collators would mask every real one out of the labels), nor an
    ordinary token, which it would also find inside text ('!!', one token, would be two '!', id 0)."""
    transformers = pytest.importorskip('transformers')
    texts = ['a<|endoftext|>', 'a b c !!']

    def padded(allowed, pad):  # tiktoken's ids, right-padded
        rows = [tiktoken_gpt2.encode(t, allowed_special='all') if allowed else tiktoken_gpt2.encode_ordinary(t)
                for t in texts]
        return [r + [pad] * (max(map(len, rows)) - len(r)) for r in rows]
    for k, (allowed, pad) in enumerate([(True, 0), ({'<|endoftext|>'}, -1), (None, np.int64(5)), ('all', None)]):
        tok = BPETokenizer(allowed_special=allowed, pad_token_id=pad)
        tok.save_pretrained(tmp_path / str(k))
        back = BPETokenizer(directory=tmp_path / str(k))
        want = padded(allowed, 50256 if pad is None else pad)
        assert back(texts).tolist() == tok(texts).tolist() == want
        given = BPETokenizer(directory=tmp_path / str(k), allowed_special=False, pad_token_id=7)
        assert given(texts).tolist() == padded(False, 7)
        theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / str(k))
        assert theirs(texts[1])['input_ids'] == want[1][:4] and theirs.pad_token_id is None
    config = tmp_path / '0' / 'tokenizer_config.json'
    config.write_text(json.dumps({**json.loads(config.read_text()), 'pad_token_id': 2.5}))
    with pytest.raises(ValueError, match=r"cannot read .*tokenizer_config.json: pad_token_id must be an int, the id "
                                         r"that pads short rows, got 2.5; .* Save the tokenizer there again"):
        BPETokenizer(directory=tmp_path / '0')
    assert BPETokenizer(directory=tmp_path / '0', pad_token_id=7)(texts)[1].tolist() == padded(True, 7)[1]


def test_save_pretrained_pads_with_a_special_pad_token_in_autotokenizer_too(tmp_path):
    """A vocabulary with a <|pad|> token that pads: BPETokenizer(directory=...) and AutoTokenizer both pad with it."""
    transformers = pytest.importorskip('transformers')
    text = data_dir('text', 'gutenberg', '2701-0.txt').read_text(encoding='utf-8')[:20_000]
    bpe.train_bpe(text, 300, special_tokens=('<|pad|>',)).save(tmp_path / 'vocab')
    pad = BPETokenizer(directory=tmp_path / 'vocab').encoder.special_tokens['<|pad|>']
    BPETokenizer(directory=tmp_path / 'vocab', pad_token_id=pad).save_pretrained(tmp_path / 'hf')
    texts = ['the whale', 'a']
    ours = BPETokenizer(directory=tmp_path / 'hf')(texts).tolist()
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / 'hf')
    assert ours[1][-1] == pad and theirs(texts, padding=True)['input_ids'] == ours


def test_a_folder_transformers_saved_with_a_pad_token_pads_with_it_as_transformers_does(tmp_path):
    """tokenizer.add_special_tokens({'pad_token': '<pad>'}) then save_pretrained: transformers writes "pad_token":
    "<pad>" into tokenizer_config.json and pads with its id, 50257; BPETokenizer(directory=...) read pad_token_id only
    where mingpt wrote it, so it padded with <|endoftext|>, 50256. The idiom pad_token = eos_token pads with 50256 in
    both; a pad_token_id given wins."""
    transformers = pytest.importorskip('transformers')
    for ours, theirs in (('encoder.json', 'vocab.json'), ('vocab.bpe', 'merges.txt')):
        (tmp_path / theirs).write_bytes(data_dir('gpt2', ours).read_bytes())
    texts = ['Hello world, once more', 'a b']
    for name, pad in (('new', '<pad>'), ('eos', '<|endoftext|>')):
        hf = transformers.GPT2Tokenizer.from_pretrained(tmp_path)  # read from vocab.json: no option of mingpt's
        hf.add_special_tokens({'pad_token': pad})
        hf.save_pretrained(tmp_path / name)
        theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / name)
        theirs.padding_side = 'right'  # as BPETokenizer pads
        ours = BPETokenizer(directory=tmp_path / name)
        assert ours(texts).tolist() == theirs(texts, padding=True)['input_ids']
        assert ours.pad_token_id == theirs.pad_token_id == {'<pad>': 50257, '<|endoftext|>': 50256}[pad]
    assert BPETokenizer(directory=tmp_path / 'new', pad_token_id=0)(texts)[1, -1] == 0
    config = tmp_path / 'new' / 'tokenizer_config.json'
    config.write_text(json.dumps({**json.loads(config.read_text()), 'pad_token': '<nothing>'}))
    with pytest.raises(ValueError, match=r"tokenizer_config.json: its pad_token '<nothing>' is not a token of the "
                                         r"vocabulary; save the tokenizer there again"):
        BPETokenizer(directory=tmp_path / 'new')


def test_save_pretrained_over_a_hugging_face_tokenizer_keeps_its_settings_and_takes_the_models_context(tmp_path):
    """tokenizer_config.json was written whole: a folder transformers saved with model_max_length=1024 and
    padding_side='left', read and saved back by BPETokenizer, lost both (AutoTokenizer then read 1e30 and 'right'),
    and one saved beside GPT.save_pretrained's config.json had no model_max_length at all: AutoTokenizer took any
    text as short enough for the model, where n_positions is its context."""
    transformers = pytest.importorskip('transformers')
    from mingpt.model import GPT
    BPETokenizer().save_pretrained(tmp_path / 'gpt2')
    hf = transformers.GPT2Tokenizer.from_pretrained(tmp_path / 'gpt2', model_max_length=1024, padding_side='left')
    hf.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    hf.save_pretrained(tmp_path / 'hf')
    BPETokenizer(directory=tmp_path / 'hf').save_pretrained(tmp_path / 'hf')
    assert not (tmp_path / 'hf' / 'tokenizer.json').exists()  # mingpt's vocab.json and merges.txt are read now
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / 'hf')
    assert (theirs.model_max_length, theirs.padding_side, theirs.chat_template) == \
        (1024, 'left', hf.chat_template)
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=50257, block_size=8))
    GPT(C).save_pretrained(tmp_path / 'model')
    BPETokenizer().save_pretrained(tmp_path / 'model')
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / 'model')
    assert theirs.model_max_length == 8
    assert len(theirs('a ' * 20, truncation=True)['input_ids']) == 8


def test_a_vocabulary_saved_over_a_saved_tokenizer_is_read_without_the_older_ones_options(tmp_path):
    """save_pretrained's tokenizer_config.json was read beside whatever vocabulary the folder held: a vocabulary saved
    there since by Encoder.save (encoder.json, read first) padded with the older tokenizer's 0 and allowed its
    specials, and one without a special token the older options named could not be read at all."""
    BPETokenizer(allowed_special='all', pad_token_id=0).save_pretrained(tmp_path)
    text = data_dir('text', 'gutenberg', '2701-0.txt').read_text(encoding='utf-8')[:20_000]
    bpe.train_bpe(text, 300).save(tmp_path)
    tok = BPETokenizer(directory=tmp_path)
    assert len(tok.encoder) == 300 and tok.pad_token_id == tok.eot_token_id == 299 and tok.allowed_special is False


def test_save_pretrained_of_a_vocabulary_without_endoftext_adds_no_token_in_autotokenizer(tmp_path):
    """GPT2Tokenizer takes <|endoftext|> as its bos, eos and unk token by default: for a vocabulary of 300 tokens
    without it, AutoTokenizer added it as token 300 (a model of 300 tokens has no such id) and encoded the text
    '<|endoftext|>' as that one id."""
    transformers = pytest.importorskip('transformers')
    from mingpt.model import GPT
    text = data_dir('text', 'gutenberg', '2701-0.txt').read_text(encoding='utf-8')[:60_000]
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=300, block_size=8))
    GPT(C).save_pretrained(tmp_path)
    own = bpe.train_bpe(text[:50_000], 300, special_tokens=('<|sep|>',))
    own.save(tmp_path, hugging_face=True)
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path)
    sample = text[50_000:] + '<|endoftext|><|sep|>'
    assert len(theirs) == 300 and theirs(sample)['input_ids'] == own.encode(sample, allowed_special=True)


def test_save_pretrained_over_an_older_tokenizer_is_what_both_readers_then_read(tmp_path):
    """A folder holding transformers' tokenizer.json of GPT-2 (and mingpt's encoder.json of another vocabulary):
    save_pretrained of a new vocabulary wrote vocab.json and merges.txt beside them, and AutoTokenizer and get_encoder
    still read the older tokenizer.json (GPT-2's ids), so a model of 300 tokens got a tokenizer of 50257."""
    transformers = pytest.importorskip('transformers')
    from mingpt.model import GPT
    for ours, theirs in (('encoder.json', 'vocab.json'), ('vocab.bpe', 'merges.txt')):
        (tmp_path / theirs).write_bytes(data_dir('gpt2', ours).read_bytes())
    folder = tmp_path / 'model'
    transformers.GPT2Tokenizer.from_pretrained(tmp_path).save_pretrained(folder)
    text = data_dir('text', 'gutenberg', '2701-0.txt').read_text(encoding='utf-8')[:60_000]
    bpe.train_bpe(text[:5000], 280).save(folder)
    assert (folder / 'tokenizer.json').exists() and (folder / 'encoder.json').exists()
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=300, block_size=8))
    GPT(C).save_pretrained(folder)
    tok = BPETokenizer()
    tok.encoder = bpe.train_bpe(text[:50_000], 300)
    tok.save_pretrained(folder)
    sample = text[50_000:]
    want = tok.encoder.encode(sample)
    assert get_encoder(directory=folder).encode(sample) == want
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    assert theirs(sample)['input_ids'] == want and len(theirs) == 300


def test_save_to_an_empty_path_is_refused_not_written_into_the_current_folder(tmp_path, monkeypatch):
    """enc.save('') wrote encoder.json and vocab.bpe into the folder the program ran in (Path('') is '.'), over
    whatever vocabulary was there; save_pretrained('') wrote vocab.json and merges.txt there."""
    monkeypatch.chdir(tmp_path)
    enc = bpe.train_bpe('a cat sat on a mat ' * 9, 260)
    tok = BPETokenizer()
    tok.encoder = enc
    for save in (enc.save, tok.save_pretrained):
        with pytest.raises(ValueError, match=r"save needs a folder to write the vocabulary into, got ''; give one"):
            save('')
    assert list(tmp_path.iterdir()) == []
    assert enc.save('.') == Path('.') and sorted(p.name for p in tmp_path.iterdir()) == ['encoder.json', 'vocab.bpe']


def test_a_vocabularys_file_given_for_its_folder_is_named_as_such(tmp_path):
    bpe.train_bpe('a cat sat on a mat ' * 9, 260).save(tmp_path)
    with pytest.raises(NotADirectoryError, match=r"encoder.json is a file; pass the folder that holds encoder.json "
                                                 r"and vocab.bpe"):  # it said: train a vocabulary into .../encoder.json
        get_encoder(directory=tmp_path / 'encoder.json')


def test_the_encode_command_reads_the_vocabulary_asked_and_counts_utf8_bytes(tmp_path, capsys):
    """--vocab DIR: a hand-made vocabulary (byte b is id b, then 'h'+'i' is 256 and 'hi'+'!' is 257), read with GPT-2's
    pre-tokeniser or, as vocab.bpe's header says, without one (the whole text one word)."""
    alphabet = bytes_to_unicode()
    for name, header, words in (('words', '#version: 0.2', [('hi', [256]), ('!', [33]), (' é', [32, 195, 169])]),
                                ('whole', bpe.NO_PRETOKENIZER, [('hi! é', [257, 32, 195, 169])])):
        folder = tmp_path / name
        folder.mkdir()
        (folder / 'encoder.json').write_text(json.dumps({**{alphabet[b]: b for b in range(256)}, 'hi': 256,
                                                         'hi!': 257}))
        (folder / 'vocab.bpe').write_text(f'{header}\nh i\nhi !\n')
        bpe.main(['encode', 'hi! é', '--vocab', str(folder)])
        out = capsys.readouterr().out
        for word, ids in words:
            assert f"\n{word!r}: {' '.join(alphabet[b] for b in word.encode('utf-8'))}\n" in out
            assert f"\n  ids {ids}\n" in out
        assert out.endswith(f"\n{sum(len(ids) for _, ids in words)} tokens for 6 bytes\n")  # é is 2 bytes
    assert out.split('\n\n')[1].splitlines()[1:3] == ['  merge      1 h+i              hi ! Ġ Ã ©',
                                                       '  merge      2 hi+!             hi! Ġ Ã ©']


BYTES = list(bytes_to_unicode().values())
IDS, EOT = {c: i for i, c in enumerate(BYTES)}, '<|endoftext|>'


@pytest.mark.parametrize('tokens, merges, message', [
    ([1, 2], '', r"the encoder must map each token to its id \(a JSON object\), not be a list"),
    ({**IDS, EOT: 10 ** 12}, '',
     r"the ids of the encoder's 257 tokens must be 0..256, each once; they include 1000000000000"),
    ({**IDS, EOT: -5}, '', r"the ids of .* must be 0..256, each once; they include -5"),
    ({**IDS, EOT: 3}, '', r"the ids of .* must be 0..256, each once; 1 of them are repeats"),
    ({c: str(i) for i, c in enumerate(BYTES)}, '',
     r"token 'Ā' has the id '0': tokens must be strings and ids integers"),
    ({c: i for i, c in enumerate(BYTES[:100])}, '', r"156 of the 256 bytes are not tokens of the encoder"),
    ({}, '', r"the vocabulary is empty: .* BPETokenizer\(\).save_pretrained\(folder\)"),  # was: 256 of the 256 bytes
    (IDS, 'a b c\n', r"merge 1, \('a', 'b', 'c'\), is not two symbols whose join is a token of the encoder"),
    (IDS, 'a b\n', r"merge 1, \('a', 'b'\), is not two symbols whose join is a token of the encoder"),
])
def test_a_malformed_vocabulary_is_refused_naming_its_files(tmp_path, tokens, merges, message):
    """Each of these failed later, deep inside and naming no file (an AttributeError, a TypeError, a KeyError while
    encoding, a ValueError of unpacking), decoded id 251 as the token of id -5, or asked for a list of 10**12
    entries."""
    (tmp_path / 'encoder.json').write_text(json.dumps(tokens))
    (tmp_path / 'vocab.bpe').write_text('#version: 0.2\n' + merges)
    with pytest.raises(ValueError, match=r"encoder.json and .*vocab.bpe are not a BPE vocabulary: " + message):
        get_encoder(directory=tmp_path)


@pytest.mark.parametrize('kept', ['vocab.json', 'merges.txt', 'encoder.json', 'vocab.bpe'])
def test_half_a_saved_tokenizer_is_named_as_such(tmp_path, kept):
    """A folder with one file of the pair was told to train a vocabulary into it: wrong for a model's own folder."""
    (tmp_path / kept).write_text('{}')
    other = {'vocab.json': 'merges.txt', 'merges.txt': 'vocab.json', 'encoder.json': 'vocab.bpe',
             'vocab.bpe': 'encoder.json'}[kept]
    with pytest.raises(FileNotFoundError, match=rf"{tmp_path} has {kept} but not {other}: a BPE tokenizer needs both"):
        get_encoder(directory=tmp_path)


def test_a_vocabulary_saved_by_notepad_is_read(tmp_path):
    """Notepad saves UTF-8 with a byte-order mark (and CRLF): the files were refused as damaged, with advice to delete
    them, a vocabulary the user had trained."""
    train_bpe('the cat sat on the mat. ' * 20, vocab_size=265).save(tmp_path / 'plain')
    (tmp_path / 'notepad').mkdir()
    for name in ('encoder.json', 'vocab.bpe'):
        text = (tmp_path / 'plain' / name).read_text(encoding='utf-8')
        (tmp_path / 'notepad' / name).write_bytes(b'\xef\xbb\xbf' + text.replace('\n', '\r\n').encode('utf-8'))
    plain, notepad = get_encoder(directory=tmp_path / 'plain'), get_encoder(directory=tmp_path / 'notepad')
    assert notepad.encoder == plain.encoder and notepad.bpe_merges == plain.bpe_merges
    assert notepad.encode(' the cat sat') == plain.encode(' the cat sat')


def test_a_vocabulary_nested_too_deep_for_json_is_named(tmp_path):
    (tmp_path / 'encoder.json').write_text('[' * 10 ** 5 + ']' * 10 ** 5)
    (tmp_path / 'vocab.bpe').write_text('#version: 0.2\n')
    with pytest.raises(ValueError, match=r"cannot read the BPE vocabulary \(.*encoder.json, .*vocab.bpe\): maximum "
                                         "recursion depth exceeded"):
        get_encoder(directory=tmp_path)


@pytest.mark.parametrize('merges', ['', 'a b\n'])
def test_a_vocab_bpe_without_its_header_line_is_refused(tmp_path, merges):
    """An empty vocab.bpe (a cut file) loaded as no merges, so every merged token became a 'special token'; a file of
    merges without the '#version' line lost its first merge, as in every GPT-2 reader."""
    (tmp_path / 'encoder.json').write_text(json.dumps({**IDS, 'ab': 256}))
    (tmp_path / 'vocab.bpe').write_text(merges)
    with pytest.raises(ValueError, match=r"cannot read the BPE vocabulary \(.*encoder.json, .*vocab.bpe\): vocab.bpe's "
                                         r"first line is '(a b)?', not its header '#version: 0.2'"):
        get_encoder(directory=tmp_path)
    (tmp_path / 'vocab.bpe').write_text('#version: 0.2\n' + merges)
    assert get_encoder(directory=tmp_path).special_tokens == ({} if merges else {'ab': 256})


@pytest.mark.parametrize('hugging_face', [False, True])
@pytest.mark.parametrize('failing', ['tokens', 'merges'])
def test_a_save_over_an_older_tokenizer_that_fails_part_way_leaves_half_a_tokenizer_not_a_mix(tmp_path, monkeypatch,
                                                                                              hugging_face, failing):
    """A save stopped between its two files (a full disk, Ctrl-C) must not leave the new tokens beside the old
    merges, or the old tokens beside the new ones: such a pair loads (or fails deep inside) as a vocabulary neither
    save wrote. The older tokens file goes first, so what is left is half a tokenizer, which get_encoder names."""
    text = data_dir('text', 'gutenberg', '2701-0.txt').read_text(encoding='utf-8')[:20_000]
    train_bpe(text[:5000], 280).save(tmp_path, hugging_face=hugging_face)
    tokens, merges = bpe.VOCAB_FILES[-1] if hugging_face else bpe.VOCAB_FILES[0]
    broken = {'tokens': tokens, 'merges': merges}[failing]
    write_text_atomically = bpe.write_text_atomically

    def full_at(path, text):
        if Path(path).name == broken:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write_text_atomically(path, text)
    monkeypatch.setattr(bpe, 'write_text_atomically', full_at)
    with pytest.raises(OSError, match='No space left'):
        train_bpe(text, 300).save(tmp_path, hugging_face=hugging_face)
    with pytest.raises(FileNotFoundError, match=rf"has {merges} but not {tokens}: a BPE tokenizer needs both"):
        get_encoder(directory=tmp_path)
