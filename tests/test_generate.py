"""projects/generate.py end to end (a subprocess, as a user runs it) on small checkpoints made here: a Hugging
Face GPT-2 directory with random weights, and a character-level mingpt checkpoint."""
import itertools
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from conftest import data_dir, load_project

from mingpt import bpe
from mingpt.bpe import Encoder, bytes_to_unicode, get_encoder
from mingpt.checkpoint import model_state, save_checkpoint
from mingpt.model import GPT
from mingpt.pretrained import load_model_and_tokenizer, tokenizer_record
from mingpt.sampling import beam_search

ROOT = Path(__file__).resolve().parents[1]
PROMPT = 'Hello, my name is'


def run(*args):
    env = {**os.environ, 'MINGPT_DATA_DIR': str(data_dir()), 'PYTHONPATH': str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / 'projects' / 'generate.py'), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def generate_module():
    return load_project('generate')


@pytest.fixture
def g(monkeypatch):
    """projects/generate.py imported, to call its main(): it finds GPT-2's tokenizer files in the test data."""
    monkeypatch.setenv('MINGPT_DATA_DIR', str(data_dir()))
    return generate_module()


@pytest.fixture(scope='module')
def enc():
    """GPT-2's tokenizer, from the test data."""
    return get_encoder(directory=data_dir('gpt2'))


@pytest.fixture(scope='module')
def hf_dir(tmp_path_factory):
    data_dir('gpt2', 'encoder.json')  # the GPT-2 tokenizer's files come from the test data
    transformers = pytest.importorskip('transformers')
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_head=2, n_embd=16, n_positions=64))
    with torch.no_grad():
        for p in hf.parameters():
            p.mul_(20)  # a random model with some opinions, so greedy and beam search differ
    folder = tmp_path_factory.mktemp('tiny-gpt2')
    hf.save_pretrained(folder)
    hf.generation_config.eos_token_id = None
    return folder, hf.eval()


def decode(ids):
    from mingpt.bpe import get_encoder
    return get_encoder().decode(ids)


def test_greedy_matches_hf_generate(hf_dir, tmp_path):
    folder, hf = hf_dir
    from mingpt.bpe import get_encoder
    ids = torch.tensor([get_encoder().encode(PROMPT)])
    want = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False, pad_token_id=0)
    (tmp_path / 'prompt.txt').write_text(PROMPT)
    r = run(f'--model={folder}', '--prompt_file', str(tmp_path / 'prompt.txt'), '--max_new_tokens=12', '--greedy',
            '--stop_at_eos=False')
    assert r.returncode == 0, r.stderr
    assert r.stdout == PROMPT + decode(want[0, ids.size(1):].tolist()) + '\n'
    assert 'tokens/s' in r.stderr.splitlines()[-1]


def test_dtype_is_given_to_from_pretrained_which_converts_as_it_loads(hf_dir, monkeypatch):
    """generate.py --system.dtype=bfloat16 loaded GPT-2's weights in float32 and converted the model after, so its peak
    held the float32 weights; from_pretrained(name, dtype) converts each tensor as it reads it."""
    folder, _ = hf_dir
    from mingpt import pretrained
    asked, read = [], pretrained.read_safetensors
    monkeypatch.setattr(pretrained, 'read_safetensors',
                        lambda path, dtype=None: asked.append(dtype) or read(path, dtype))
    model, _ = generate_module().load(str(folder), 'cpu', torch.bfloat16)
    assert asked == [torch.bfloat16] and {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_beam_search(hf_dir):
    folder, _ = hf_dir
    r = run(f'--model={folder}', '--prompt', PROMPT, '--max_new_tokens', '8', '--num_beams=3', '--stop_at_eos=False')
    assert r.returncode == 0, r.stderr
    from mingpt.bpe import get_encoder
    ids = torch.tensor([get_encoder().encode(PROMPT)])
    seqs, _ = beam_search(GPT.from_pretrained(folder), ids, 8, num_beams=3)
    assert r.stdout == PROMPT + decode(seqs[0, ids.size(1):].tolist()) + '\n'
    assert 'beam search with 3 beams' in r.stderr


def test_sampling_is_seeded(hf_dir):
    folder, _ = hf_dir
    args = (f'--model={folder}', '--prompt', PROMPT, '--max_new_tokens=10', '--num_samples=2', '--system.seed=7',
            '--temperature=0.8', '--top_k=40', '--top_p=0.95')
    first, second = run(*args), run(*args)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout and first.stdout.startswith(PROMPT)
    assert first.stderr.count('--- sample') == 2


def test_char_checkpoint(tmp_path):
    chars = sorted(set('abc \n'))
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=len(chars), block_size=16))
    model = GPT(C)
    save_checkpoint({'model': model.state_dict(), 'model_config': C.to_dict(), 'vocab': chars}, tmp_path / 'm.pt')
    r = run(f'--model={tmp_path / "m.pt"}', '--prompt=ab', '--max_new_tokens=30')  # past block_size too
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith('ab') and len(r.stdout) == 2 + 30 + 1 and set(r.stdout) <= set(chars)
    r = run(f'--model={tmp_path / "m.pt"}', '--prompt=abz')
    assert r.returncode == 2 and "'z'" in r.stderr and 'not in the vocabulary' in r.stderr
    r = run(f'--model={tmp_path}', '--prompt=ab')  # the run's folder, not the checkpoint in it
    assert r.returncode != 0 and f"a mingpt checkpoint is a file: pass {tmp_path / 'm.pt'}" in r.stderr


def test_show_next_is_one_decoding_step_by_hand(tmp_path, capsys):
    chars = sorted(set('abc \n'))
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=len(chars), block_size=16))
    torch.manual_seed(0)
    model = GPT(C).eval()
    save_checkpoint({**model_state(model), 'vocab': chars}, tmp_path / 'm.pt')
    capsys.readouterr()
    generate_module().main([f'--model={tmp_path / "m.pt"}', '--prompt=ab', '--show_next=4', '--temperature=0.5',
                            '--top_k=3'])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("after 'ab' (temperature 0.5, top_k 3, top_p None): sampling draws from 3 of the 5 tokens; "
                        "greedy decoding takes rank 1")
    with torch.no_grad():
        logits = model(torch.tensor([[chars.index('a'), chars.index('b')]]))[0][0, -1]
    p, at_t = logits.softmax(-1), (logits / 0.5).softmax(-1)
    order = p.argsort(descending=True)
    kept = at_t * (torch.arange(5)[:, None] == order[:3]).any(1)  # the 3 likeliest, scaled up to sum to 1
    drawn = kept / kept.sum()
    assert len(lines) == 2 + 4
    for rank, (line, i) in enumerate(zip(lines[2:], order.tolist()), 1):
        assert (line[:4].strip(), line[6:22].strip()) == (str(rank), repr(chars[i]))  # a token may be ' '
        assert line[22:].split() == [f'{p[i]:.4f}', f'{at_t[i]:.4f}', f'{drawn[i]:.4f}']
    assert lines[-1].split()[-1] == '0.0000'  # the 4th is cut by top_k
    generate_module().main([f'--model={tmp_path / "m.pt"}', '--prompt=ab', '--show_next=9'])  # more than there are
    lines = capsys.readouterr().out.splitlines()
    assert sorted(line[6:22].strip() for line in lines[2:]) == sorted(map(repr, chars))  # each of the 5 tokens once
    # a temperature near 0: greedy's distribution at T too, not NaN (logits / T alone overflows)
    generate_module().main([f'--model={tmp_path / "m.pt"}', '--prompt=ab', '--show_next=2', '--temperature=1e-40'])
    assert [line.split()[-2:] for line in capsys.readouterr().out.splitlines()[2:]] == [['1.0000', '1.0000'],
                                                                                        ['0.0000', '0.0000']]


def test_show_next_shows_the_small_probabilities_of_a_flat_model(tmp_path, capsys):
    """A model near uniform over a large vocabulary (GPT-2 newly fine-tuned from random weights) printed p = 0.0000
    for every token, as if sampling could never draw it. A zero token embedding makes every logit 0, so each of the
    30,000 tokens has p = 1/30,000 exactly, at any temperature."""
    chars = [chr(c) for c in range(32, 32 + 30000)]
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=len(chars), block_size=16))
    model = GPT(C)
    with torch.no_grad():
        model.transformer.wte.weight.zero_()  # tied to the head: every logit is 0
    save_checkpoint({**model_state(model), 'vocab': chars}, tmp_path / 'm.pt')
    capsys.readouterr()
    generate_module().main([f'--model={tmp_path / "m.pt"}', '--prompt=ab', '--show_next=3', '--temperature=0.5'])
    rows = [line[22:].split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert rows == [['3.3e-05', '3.3e-05', '3.3e-05']] * 3


def show_next_of_tied_logits(tmp_path, capsys, record, vocab_size, n):
    """The lines of --show_next=n (its header first) after 'ab', for a gpt-nano whose logits all tie (every token
    equally likely, so every one is shown) and the tokenizer in record (a checkpoint's)."""
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=vocab_size, block_size=16))
    model = GPT(C)
    with torch.no_grad():
        model.transformer.wte.weight.zero_()  # every logit 0
    save_checkpoint({**model_state(model), **record}, tmp_path / 'm.pt')
    capsys.readouterr()
    generate_module().main([f'--model={tmp_path / "m.pt"}', '--prompt=ab', f'--show_next={n}'])
    return capsys.readouterr().out.splitlines()[1:]


def test_show_next_keeps_its_columns_under_their_headers_for_long_tokens(tmp_path, capsys):
    """A token wider than the token column (GPT-2's ' irregularities') pushed its row's numbers right of the
    headers. The 257 tokens here (256 bytes and a long special token) all tie, so --show_next=257 shows every one."""
    long = '<|a special token longer than the column|>'
    tokenizer = Encoder({**{c: i for i, c in enumerate(bytes_to_unicode().values())}, long: 256}, [])
    lines = show_next_of_tied_logits(tmp_path, capsys, tokenizer_record(tokenizer), len(tokenizer), 257)
    assert len(lines) == 1 + 257 and any(repr(long) in line for line in lines)
    assert {len(line) for line in lines} == {len(lines[0])}  # every row as wide as the header: numbers under it


def test_show_next_keeps_its_columns_for_wide_characters_and_accents(tmp_path, capsys):
    """A Japanese character takes two columns on a terminal and a combining accent none, but the table padded
    each token by its count of characters: every row of a Japanese model's table pushed its numbers one column
    right of the headers, and a lone accent's row pulled them one left. The widths here are written by hand."""
    chars = ['a', '\u732b', '\u0301', 'b']
    lines = show_next_of_tied_logits(tmp_path, capsys, {'vocab': chars}, len(chars), 4)
    on_screen = [sum({'\u732b': 2, '\u0301': 0}.get(c, 1) for c in line) for line in lines]
    assert len(lines) == 1 + 4 and on_screen == [on_screen[0]] * 5  # every row as wide as the header


def test_show_next_names_a_token_that_is_part_of_a_character_by_its_bytes(tmp_path, capsys):
    """A byte-level token that is only part of a character (GPT-2 writes most of Japanese or Hindi so) was shown as
    '\ufffd', alike for every such token. A vocabulary of the 256 bytes, every logit 0: the table lists each byte
    once, the 128 ASCII ones as text and the others, which no text holds alone, as bytes."""
    tokenizer = Encoder({c: i for i, c in enumerate(bytes_to_unicode().values())}, [])
    lines = show_next_of_tied_logits(tmp_path, capsys, tokenizer_record(tokenizer), len(tokenizer), 256)
    tokens = [line[6:].rsplit(maxsplit=3)[0] for line in lines[1:]]
    byte = dict(zip(bytes_to_unicode().values(), bytes_to_unicode().keys()))  # the table's character -> its byte
    expected = [repr(chr(b)) if b < 128 else repr(bytes([b])) for b in map(byte.get, tokenizer.encoder)]
    assert sorted(tokens) == sorted(expected) and "b'\\xe3'" in tokens


def test_a_sentiment_lm_on_gpt2s_full_vocabulary_is_read_with_gpt2s_tokenizer(tmp_path, monkeypatch):
    """sentiment.py pretrain --system.init=gpt2 (GPT-2 fine-tuned as a language model on a text) records its
    vocabulary as kind 'gpt2', which is GPT-2's tokenizer unchanged: generate.py and attention.py read it."""
    monkeypatch.setenv('MINGPT_DATA_DIR', str(data_dir()))
    data_dir('gpt2', 'encoder.json')
    from mingpt.pretrained import load_model_and_tokenizer
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=50257, block_size=16))
    vocabulary = load_project('sentiment').Vocabulary('gpt2')
    save_checkpoint({**model_state(GPT(C)), 'tokenizer': vocabulary.state()}, tmp_path / 'lm.pt')
    model, tok = load_model_and_tokenizer(str(tmp_path / 'lm.pt'))
    assert tok.encode('Hello world') == vocabulary.encode('Hello world') == [15496, 995]
    assert model.config.vocab_size == len(tok)


def test_a_checkpoint_brings_its_tokenizer_or_needs_gpt2s(tmp_path, monkeypatch):
    from mingpt import pretrained
    from mingpt.bpe import train_bpe
    from mingpt.data import CharTokenizer
    from mingpt.pretrained import load_model_and_tokenizer, tokenizer_of, tokenizer_record
    chars, bpe = CharTokenizer(list('ab \n')), train_bpe('the cat sat on the mat ' * 20, 262)
    for tok in (chars, bpe):
        back = tokenizer_of(tokenizer_record(tok))
        assert type(back) is type(tok) and len(back) == len(tok) and back.encode('ab ba\n') == tok.encode('ab ba\n')
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=300, block_size=16))
    state = {'model': GPT(C).state_dict(), 'model_config': C.to_dict()}
    save_checkpoint({**state, **tokenizer_record(bpe)}, tmp_path / 'bpe.pt')
    model, tok = load_model_and_tokenizer(str(tmp_path / 'bpe.pt'))
    assert tok.encoder == bpe.encoder and not model.training
    save_checkpoint(state, tmp_path / 'bare.pt')  # no tokenizer recorded: GPT-2's 50257 tokens do not fit in 300
    with monkeypatch.context() as m:  # said before GPT-2's files are looked for (offline, a download error)
        m.setattr(pretrained, 'get_encoder', lambda *a: pytest.fail('fetched GPT-2 tokenizer'))
        with pytest.raises(ValueError, match="records no tokenizer and its vocabulary of 300 tokens is not GPT-2's "
                                             "50257"):
            load_model_and_tokenizer(str(tmp_path / 'bare.pt'))
    # other models' checkpoints: a classifier's weights, a translation model's config
    classifier = {f'gpt.{k}': v for k, v in state['model'].items()}
    save_checkpoint({**state, 'model': classifier}, tmp_path / 'classifier.pt')
    with pytest.raises(ValueError, match=r"does not hold a GPT \(its weights have no lm_head.weight matrix\)"):
        load_model_and_tokenizer(str(tmp_path / 'classifier.pt'))
    save_checkpoint({**state, 'model_config': {**C.to_dict(), 'model_type': 'transformer-micro'}}, tmp_path / 't.pt')
    with pytest.raises(ValueError, match=r"does not hold a GPT \(give either model_type \('transformer-micro'\)"):
        GPT.from_checkpoint(tmp_path / 't.pt')
    with pytest.raises(FileNotFoundError, match=r"no checkpoint at .*missing.pt: train one first"):
        load_model_and_tokenizer(str(tmp_path / 'missing.pt'))
    monkeypatch.chdir(tmp_path)  # a relative path, run from another folder than the one it was meant from
    with pytest.raises(FileNotFoundError, match=rf"no checkpoint at out/c1/model.pt \(a path from this folder, "
                                                rf"{re.escape(str(tmp_path))}\): train one first"):
        load_model_and_tokenizer('out/c1/model.pt')
    save_checkpoint({'model': state['model']}, tmp_path / 'weights-only.pt')
    with pytest.raises(ValueError, match=r"does not hold a GPT \(it has no model_config\)"):
        GPT.from_checkpoint(tmp_path / 'weights-only.pt')
    with pytest.raises(TypeError, match='give a CharTokenizer or a bpe.Encoder'):
        tokenizer_record(object())


@pytest.mark.parametrize('record, says', [
    ({'vocab': 5}, r"its 'vocab' should hold the model's characters, a list of strings, not 5"),
    ({'vocab': [1, [2]]}, r"its 'vocab' should hold the model's characters, a list of strings, not \[1, \[2\]\]"),
    ({'tokenizer': 5}, r"its 'tokenizer' should hold a dict \(a byte-level BPE's 'encoder' and 'merges'\), not 5"),
    ({'tokenizer': {'encoder': 5, 'merges': []}}, r"its 'tokenizer' is not a byte-level BPE vocabulary \(the encoder "
                                                  r"must map each token to its id"),
    ({'tokenizer': {'encoder': 'bpe', 'merges': 3}}, r"its 'tokenizer' is not a byte-level BPE vocabulary"),
    ({'tokenizer': {'merges': []}}, r"its 'tokenizer' \(with 'merges'\) is neither a byte-level BPE's \('encoder' "
                                    r"and 'merges'\) nor sentiment.py's \('kind' and 'tokens'\); the file is damaged"),
    ({'tokenizer': {'kind': 'char', 'tokens': 'abc'}}, r"its 'tokenizer' should hold the kind of vocabulary")])
def test_a_checkpoints_tokenizer_record_of_another_shape_is_refused_by_name(tmp_path, record, says):
    """A damaged or hostile record was a bare TypeError ('int' object is not iterable), which a project shows as a
    traceback."""
    from mingpt.pretrained import load_model_and_tokenizer
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=300, block_size=16))
    save_checkpoint({**model_state(GPT(C)), **record}, tmp_path / 'classmate.pt')
    with pytest.raises(ValueError, match=r"classmate.pt was not loaded: " + says):
        load_model_and_tokenizer(str(tmp_path / 'classmate.pt'))


def test_a_sentiment_lm_is_sampled_with_its_cut_vocabulary_from_and_to_endoftext(tmp_path, capsys):
    """A pretrain's model.pt (sentiment.py) was refused: its cut-down vocabulary was one only that project read.
    Each text it pretrains on follows an <|endoftext|>, so a sample starts from one and ends at the next."""
    from mingpt.pretrained import Vocabulary, load_model_and_tokenizer
    g = generate_module()
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=5, block_size=16))  # a, b, ' ', unknown, eot
    save_checkpoint({**model_state(GPT(C)), 'tokenizer': Vocabulary('char', list('ab ')).state()}, tmp_path / 'lm.pt')
    model, tok = load_model_and_tokenizer(str(tmp_path / 'lm.pt'))
    assert tok.encode('ab c<|endoftext|>') == [0, 1, 2, 3, 4]  # c: unknown
    assert tok.decode([0, 1, 2, 3, 4]) == 'ab \ufffd<|endoftext|>'
    assert g.start_and_ends('lm.pt', tok) == (4, [4]) and g.encode(tok, '', 4) == [4]
    capsys.readouterr()
    g.main([f'--model={tmp_path / "lm.pt"}', '--max_new_tokens=40', '--device=cpu', '--seed=1'])
    sample = capsys.readouterr().out
    assert set(sample) <= set('ab \ufffd\n') and len(sample) <= 41  # cut before an <|endoftext|>
    save_checkpoint({**model_state(GPT(C)), 'tokenizer': {'kind': 'bpe', 'tokens': [1, 2, 50257]}}, tmp_path / 'x.pt')
    with pytest.raises(ValueError, match=r"x.pt was not loaded: its 'tokenizer' should hold the kind of vocabulary "
                                         r"\(bpe, gpt2, char\) and its tokens \(a list of characters for char, of "
                                         r"GPT-2 ids for bpe"):  # 50257 is past GPT-2's ids
        load_model_and_tokenizer(str(tmp_path / 'x.pt'))


def test_a_checkpoint_names_the_model_class_that_wrote_it(tmp_path):
    """model_state records the model's class (the trainer, adder and translate save through it), so GPT and the
    encoder-decoder Transformer each name the other's checkpoint instead of failing on its config or weights."""
    from mingpt.seq2seq import Transformer
    C, T = GPT.get_default_config(), Transformer.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=20, block_size=16))
    T.merge_from_dict(dict(model_type='transformer-nano', vocab_size=20, block_size=16))
    gpt, seq2seq = GPT(C), Transformer(T)
    save_checkpoint(model_state(gpt), tmp_path / 'gpt.pt')
    save_checkpoint(model_state(seq2seq), tmp_path / 'seq2seq.pt')
    for model, path in ((gpt, 'gpt.pt'), (seq2seq, 'seq2seq.pt')):
        again, _ = type(model).from_checkpoint(tmp_path / path)
        assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    with pytest.raises(ValueError, match=r"gpt.pt holds a GPT, not a Transformer: a checkpoint is read by the project "
                                         "that wrote it"):
        Transformer.from_checkpoint(tmp_path / 'gpt.pt')
    with pytest.raises(ValueError, match=r"seq2seq.pt holds a Transformer, not a GPT"):
        GPT.from_checkpoint(tmp_path / 'seq2seq.pt')
    class MyGPT(GPT):  # a student's subclass with GPT's weights: its checkpoint reads as a GPT, said, as its own
        pass  # code (a parallel block, say) does not run; it ran silently
    save_checkpoint(model_state(MyGPT(C)), tmp_path / 'mine.pt')
    with pytest.warns(UserWarning, match=r"mine.pt holds a MyGPT, rebuilt here from its weights as a GPT, which runs "
                                         r"none of MyGPT's own code: MyGPT.from_checkpoint\(path\) rebuilds the "
                                         r"MyGPT") as caught:
        assert type(GPT.from_checkpoint(tmp_path / 'mine.pt')[0]) is GPT
    assert caught.pop(UserWarning).filename == __file__  # the caller's line, not model.py's
    assert type(MyGPT.from_checkpoint(tmp_path / 'mine.pt')[0]) is MyGPT
    with warnings.catch_warnings():  # GPT's weights into one's subclass, which runs GPT's code it inherits: no warning
        warnings.simplefilter('error')  # it said the MyGPT 'runs none of GPT's own code'
        assert type(MyGPT.from_checkpoint(tmp_path / 'gpt.pt')[0]) is MyGPT
    changed = {**model_state(gpt), 'model_config': {**C.to_dict(), 'pos_embd': 'rotary'}}  # a student's own GPT
    save_checkpoint(changed, tmp_path / 'changed.pt')
    with pytest.raises(ValueError, match=r"changed.pt holds a GPT that this code cannot rebuild \(model.pos_embd must "
                                         r"be one of 'learned', 'sinusoidal', not 'rotary'\): it was saved by another "
                                         r"version of the model's code"):
        GPT.from_checkpoint(tmp_path / 'changed.pt')


@pytest.mark.parametrize('weights', ['model.safetensors', 'pytorch_model.bin'])
def test_a_hugging_face_weights_file_is_sent_to_its_folder(weights, hf_dir, tmp_path):
    """--model names a Hugging Face directory's weights file: the message gives the folder to pass, not 'corrupt'."""
    from mingpt.pretrained import load_model_and_tokenizer
    folder, hf = hf_dir
    path = folder / weights
    if weights == 'pytorch_model.bin':
        path = tmp_path / weights
        torch.save(hf.state_dict(), path)
    with pytest.raises(ValueError, match=rf"{weights} is (a safetensors file, )?not a mingpt checkpoint.*; for Hugging "
                                         rf"Face GPT-2 weights give their folder, {re.escape(str(path.parent))}, "):
        load_model_and_tokenizer(str(path))


def test_endoftext_in_a_prompt_is_the_token_and_ends_the_text_it_writes(enc, capsys):
    g = generate_module()
    eot = enc.special_tokens['<|endoftext|>']
    assert g.encode(enc, 'Hi<|endoftext|>') == enc.encode('Hi') + [eot]
    assert g.text_of(enc, enc.encode('Hi there') + [eot] + enc.encode(' more'), [eot]) == 'Hi there'
    on_token, finish = g.streamed(enc, [eot])
    for token in enc.encode('Hi') + [eot]:
        on_token(token)
    finish()
    assert capsys.readouterr().out == 'Hi\n'


def test_greedy_prints_one_sample_and_beams_as_many_as_asked(g, hf_dir, capsys, tmp_path):
    folder, _ = hf_dir
    g.main([f'--model={folder}', f'--prompt={PROMPT}', '--max_new_tokens=3', '--greedy', '--num_samples=3'])
    out = capsys.readouterr()
    assert len(out.out.splitlines()) == 1 and 'one sample' in out.err
    g.main([f'--model={folder}', f'--prompt={PROMPT}', '--max_new_tokens=3', '--num_beams=3', '--num_samples=3'])
    out = capsys.readouterr()
    assert len(out.out.splitlines()) == 3 and out.err.count('--- beam') == 3
    # each completion of a prompt file under a header naming its prompt (and its beam, when several are shown)
    (tmp_path / 'prompts.txt').write_text(f'{PROMPT}\nHi\n')
    for samples, headers in ((2, ['prompt 1, beam 1', 'prompt 1, beam 2', 'prompt 2, beam 1', 'prompt 2, beam 2']),
                             (1, ['prompt 1', 'prompt 2'])):
        g.main([f'--model={folder}', f'--prompt_file={tmp_path / "prompts.txt"}', '--max_new_tokens=3',
                '--num_beams=2', f'--num_samples={samples}'])
        out = capsys.readouterr()
        assert re.findall(r'--- (.*?) \(log-prob -?[\d.]+\) ---', out.err) == headers
        assert [line.startswith(PROMPT) for line in out.out.splitlines()] == [True] * samples + [False] * samples


def test_a_vocabulary_padded_past_the_tokenizers_decodes_only_the_tokenizers_ids(g, capsys, tmp_path):
    """nanoGPT pads GPT-2's 50257 tokens to 50304; the ids past 50257 have no text. Here they are made the likeliest:
    greedy decoding takes the best of the tokenizer's ids (by hand, from the forward pass), and sampling, beam search
    and show_next print text instead of failing on an id the tokenizer cannot decode."""
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=50304, block_size=32))
    torch.manual_seed(0)
    model = GPT(C).eval()
    with torch.no_grad():
        model.transformer.wte.weight[50257:] *= 30
    model.save_pretrained(tmp_path)
    for ours, theirs in (('encoder.json', 'vocab.json'), ('vocab.bpe', 'merges.txt')):
        (tmp_path / theirs).write_bytes(data_dir('gpt2', ours).read_bytes())
    idx = torch.tensor([get_encoder().encode(PROMPT)])
    with torch.no_grad():
        assert model(idx)[0][0, -1].argmax() >= 50257  # what decoding from the whole vocabulary would take
        for _ in range(5):
            idx = torch.cat([idx, model(idx)[0][:, -1, :50257].argmax(-1, keepdim=True)], dim=1)
    capsys.readouterr()
    g.main([f'--model={tmp_path}', f'--prompt={PROMPT}', '--max_new_tokens=5', '--greedy'])
    out = capsys.readouterr()
    assert out.out == decode(idx[0].tolist()) + '\n' and 'padded past its tokenizer' in out.err
    for options in (['--max_new_tokens=20'], ['--max_new_tokens=5', '--num_beams=2'], ['--show_next=3']):
        g.main([f'--model={tmp_path}', f'--prompt={PROMPT}', *options])
        assert PROMPT in capsys.readouterr().out


def test_a_folder_transformers_5_saved_with_added_tokens_samples_hfs_greedy_tokens(g, capsys, tmp_path, monkeypatch):
    """transformers 5 saves a tokenizer as tokenizer.json alone: such a folder with tokens added (and the embedding
    resized to 50259) was refused for want of vocab.json; one of GPT-2's size would have read GPT-2's tokenizer."""
    transformers = pytest.importorskip('transformers')
    for ours, theirs in (('encoder.json', 'vocab.json'), ('vocab.bpe', 'merges.txt')):
        (tmp_path / theirs).write_bytes(data_dir('gpt2', ours).read_bytes())
    tok = transformers.GPT2Tokenizer.from_pretrained(tmp_path)
    tok.add_tokens(['<|user|>'])
    tok.add_special_tokens({'pad_token': '<|pad|>'})
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_head=2, n_embd=16, n_positions=64))
    hf.resize_token_embeddings(len(tok))
    with torch.no_grad():
        hf.transformer.wte.weight[50257:].normal_(std=2)  # so that greedy decoding writes the added tokens
    folder = tmp_path / 'tuned'
    hf.save_pretrained(folder)
    tok.save_pretrained(folder)
    assert not (folder / 'vocab.json').exists() and (folder / 'tokenizer.json').exists()
    prompt = 'Hello <|user|> my name is<|pad|>'
    ids = torch.tensor([tok(prompt)['input_ids']])
    want = hf.eval().generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False,
                              eos_token_id=None, pad_token_id=0)[0, ids.size(1):]
    assert set(want.tolist()) & {50257, 50258}
    capsys.readouterr()
    g.main([f'--model={folder}', f'--prompt={prompt}', '--max_new_tokens=12', '--greedy', '--stop_at_eos=False'])
    assert capsys.readouterr().out == prompt + tok.decode(want) + '\n'
    monkeypatch.chdir(tmp_path)  # a model folder named like the hub id: its own tokenizer, not GPT-2's (fetched)
    folder.rename(tmp_path / 'gpt2')
    monkeypatch.setattr(bpe, 'fetch', lambda *a, **kw: pytest.fail("GPT-2's vocabulary was fetched"))
    assert len(load_model_and_tokenizer('gpt2')[1]) == 50259
    (tmp_path / 'gpt2').rename(folder)
    config = json.loads((folder / 'tokenizer.json').read_text())
    config['pre_tokenizer']['add_prefix_space'] = True  # another pre-tokeniser than GPT-2's is refused by name
    (folder / 'tokenizer.json').write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"tokenizer.json as GPT-2's kind of tokenizer: it is not a byte-level BPE"):
        g.main([f'--model={folder}', f'--prompt={prompt}'])


def hf_with_a_token_of_its_own(tmp_path, role, text):
    """(transformers, GPT-2's tokenizer with `text` added as its special `role` token (id 50257), a tiny random
    GPT2LMHeadModel whose config names 50257 as its `role` token id, with some opinions)."""
    transformers = pytest.importorskip('transformers')
    for ours, theirs in (('encoder.json', 'vocab.json'), ('vocab.bpe', 'merges.txt')):
        (tmp_path / theirs).write_bytes(data_dir('gpt2', ours).read_bytes())
    tok = transformers.GPT2Tokenizer.from_pretrained(tmp_path)
    tok.add_special_tokens({f'{role}_token': text})
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_head=2, n_embd=16, n_positions=64,
                                                              vocab_size=50258, **{f'{role}_token_id': 50257}))
    with torch.no_grad():
        for p in hf.parameters():
            p.mul_(20)  # a random model with some opinions: greedy decoding varies its tokens
    return transformers, tok, hf


@pytest.mark.parametrize('where', ['generation_config.json', 'config.json', 'a list'])
def test_a_folder_whose_config_names_another_end_token_stops_where_hf_generate_stops(g, capsys, tmp_path, where):
    """A model fine-tuned with an end token of its own ('<|end|>', 50257, named eos_token_id in generation_config.json,
    or in config.json where there is no generation_config.json): transformers' generate stops there, and generate.py
    ran on past it to <|endoftext|> or max_new_tokens. In a list of end ids transformers stops at any of them, where
    generate.py stopped only at the first (<|endoftext|> here, which this model writes later if at all)."""
    transformers, tok, hf = hf_with_a_token_of_its_own(tmp_path, 'eos', '<|end|>')
    with torch.no_grad():
        # <|end|> a little likelier than a token greedy decoding writes: it ends the text there, a few tokens in
        hf.transformer.wte.weight[50257] = hf.transformer.wte.weight[22304] * 1.01
    folder = tmp_path / 'tuned'
    hf.save_pretrained(folder)
    tok.save_pretrained(folder)
    if where != 'generation_config.json':  # transformers then takes config.json's
        (folder / 'generation_config.json').unlink()
        config = json.loads((folder / 'config.json').read_text())
        config['eos_token_id'] = [50256, 50257] if where == 'a list' else 50257
        (folder / 'config.json').write_text(json.dumps(config))
    hf = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()
    ids = torch.tensor([tok(PROMPT)['input_ids']])
    out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=30, do_sample=False,
                      pad_token_id=0)[0, ids.size(1):].tolist()
    assert out[-1] == 50257 and 3 < len(out) < 30  # transformers stopped at <|end|>, after some text
    capsys.readouterr()
    g.main([f'--model={folder}', f'--prompt={PROMPT}', '--max_new_tokens=30', '--greedy'])
    assert capsys.readouterr().out == PROMPT + tok.decode(out[:-1]) + '\n'
    if where == 'a list':  # and beam search, as transformers' (its exact search, by the plain sum of log-probs)
        beams = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=30, num_beams=2,
                            num_return_sequences=2, length_penalty=0.0, early_stopping='never', pad_token_id=0,
                            output_scores=True, return_dict_in_generate=True)
        best = beams.sequences[0, ids.size(1):].tolist()
        assert 50257 in best  # it ended at the second of the two ids
        g.main([f'--model={folder}', f'--prompt={PROMPT}', '--num_beams=2', '--num_samples=2', '--max_new_tokens=30'])
        out, err = capsys.readouterr()
        assert out.startswith(PROMPT + tok.decode(best[:best.index(50257)]) + '\n')
        # both beams ranked as HF's: by log-probs up to their end, not of beams run on past <|end|>, cut when printed
        scores = re.findall(r"\(log-prob (-?[\d.]+)\)", err)
        assert scores == [f"{s:.2f}" for s in beams.sequences_scores.tolist()], err


def test_an_empty_prompt_starts_from_the_folders_bos_token_as_hf_generate_does(g, capsys, tmp_path):
    """Given no prompt, transformers' generate starts from the bos_token_id a folder's config names; generate.py
    started from <|endoftext|> whatever the folder said, so a model trained to begin its texts with a token of its
    own ('<|start|>' here) wrote another text than transformers does from the same folder."""
    transformers, tok, hf = hf_with_a_token_of_its_own(tmp_path, 'bos', '<|start|>')
    folder = tmp_path / 'tuned'
    hf.save_pretrained(folder)
    tok.save_pretrained(folder)
    hf = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()
    out = hf.generate(max_new_tokens=8, do_sample=False, pad_token_id=0)[0].tolist()
    from_endoftext = hf.generate(torch.tensor([[50256]]), max_new_tokens=8, do_sample=False, pad_token_id=0)[0]
    assert out[0] == 50257 and 50256 not in out and out[1:] != from_endoftext[1:].tolist()
    capsys.readouterr()
    g.main([f'--model={folder}', '--max_new_tokens=8', '--greedy'])
    assert capsys.readouterr().out == tok.decode(out[1:]) + '\n'


def test_an_end_token_past_the_models_vocabulary_is_left_for_the_tokenizers(g, capsys, tmp_path):
    """GPT2Config names 50256 as eos_token_id whatever its vocab_size: a model of 300 tokens saved by transformers has
    it in config.json, an id it can never write (transformers warns). generate.py stops at the tokenizer's
    <|endoftext|> instead, with transformers' greedy tokens, rather than refuse eos_token_id=50256 as out of range."""
    transformers = pytest.importorskip('transformers')
    text = data_dir('text', 'gutenberg', '2701-0.txt').read_text(encoding='utf-8')[:20_000]
    tok = bpe.BPETokenizer()
    tok.encoder = bpe.train_bpe(text, 300)
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_head=2, n_embd=16, n_positions=64,
                                                              vocab_size=300)).eval()
    hf.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    assert json.loads((tmp_path / 'config.json').read_text())['eos_token_id'] == 50256
    ids = torch.tensor([tok.encoder.encode(PROMPT)])
    out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False,
                      eos_token_id=tok.eot_token_id, pad_token_id=0)[0, ids.size(1):].tolist()
    capsys.readouterr()
    g.main([f'--model={tmp_path}', f'--prompt={PROMPT}', '--max_new_tokens=8', '--greedy'])
    assert capsys.readouterr().out == PROMPT + tok.decode([i for i in out if i != tok.eot_token_id]) + '\n'


def test_an_end_token_that_is_ordinary_text_in_the_folders_vocabulary_is_left_for_the_tokenizers(g, capsys, tmp_path):
    """save_pretrained names 50256 as eos_token_id for any vocabulary past 50256 tokens, though in one trained here
    <|endoftext|> may have another id and 50256 be text: generate.py then cut samples at that text. Here GPT-2's
    vocabulary with the ids of '<|endoftext|>' and '!' swapped: samples run past '!' (50256), as transformers'
    generate does when given the tokenizer's end token."""
    transformers = pytest.importorskip('transformers')
    gpt2 = get_encoder()
    vocab = {**gpt2.encoder, '<|endoftext|>': 0, '!': 50256}
    tok = bpe.BPETokenizer()
    tok.encoder = Encoder(vocab, gpt2.bpe_merges)
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type=None, n_layer=2, n_head=2, n_embd=16, vocab_size=50257, block_size=64))
    torch.manual_seed(0)
    model = GPT(C)
    with torch.no_grad():
        model.transformer.wte.weight.mul_(20)
        model.transformer.wte.weight[50256] = model.transformer.wte.weight[29604] * 1.01  # greedy writes '!'
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    assert json.loads((tmp_path / 'config.json').read_text())['eos_token_id'] == 50256
    ids = torch.tensor([tok.encoder.encode(PROMPT)])
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=20, do_sample=False,
                      eos_token_id=0, pad_token_id=0)[0, ids.size(1):].tolist()
    assert 50256 in out[:-1] and 0 not in out[:-1]  # '!' written, and more text after it
    capsys.readouterr()
    g.main([f'--model={tmp_path}', f'--prompt={PROMPT}', '--max_new_tokens=20', '--greedy'])
    assert capsys.readouterr().out == PROMPT + tok.decode(out[:-1] if out[-1] == 0 else out) + '\n'


def test_a_prompt_longer_than_the_context_keeps_its_last_tokens(g, hf_dir, capsys):
    folder, _ = hf_dir  # a context of 64 tokens
    long, last = ' '.join(map(str, range(70))), ''.join(f' {i}' for i in range(6, 70))  # 70 tokens; the last 64
    args = [f'--model={folder}', '--max_new_tokens=8', '--greedy']
    g.main(args + [f'--prompt={long}'])
    out = capsys.readouterr()
    assert 'keeps its last 64 tokens' in out.err
    g.main(args + [f'--prompt={last}'])
    assert out.out.removeprefix(long) == capsys.readouterr().out.removeprefix(last)


def test_errors_and_help():
    r = run('--model=no-such-model', '--prompt=x')
    assert r.returncode == 2 and 'unknown pretrained model' in r.stderr and 'Traceback' not in r.stderr
    r = run('--help')
    assert r.returncode == 0 and 'max_new_tokens' in r.stdout and 'num_beams' in r.stdout


def test_short_options():
    config = generate_module().get_config()
    config.merge_from_args(['--prompt', 'hi there', '--greedy', '--sample.top_k=5', '--model=gpt2-medium', '--seed',
                            '3'])
    S = config.sample
    assert (S.prompt, S.greedy, S.top_k, config.model, config.system.seed) == ('hi there', True, 5, 'gpt2-medium', 3)


def test_stream_holds_back_split_characters(capsys):
    data_dir('gpt2', 'encoder.json')
    g = generate_module()
    from mingpt.bpe import get_encoder
    tokenizer = get_encoder()
    text = 'ok 🙂 déjà vu 你好'
    on_token, finish = g.streamed(tokenizer, ends=[])
    pieces = []
    for i in tokenizer.encode(text) + [None]:
        on_token(i) if i is not None else finish()
        pieces.append(capsys.readouterr().out)
    assert ''.join(pieces) == text + '\n' and '\ufffd' not in ''.join(pieces)
    assert '' in pieces  # some token ended inside a character, and nothing was printed for it yet


def test_batches_print_each_completion_under_its_prompt(hf_dir, tmp_path):
    folder, hf = hf_dir
    from mingpt.bpe import get_encoder
    prompts = ['Hi', PROMPT, 'A much longer prompt, so that the batch holds rows of three lengths']
    (tmp_path / 'prompts.txt').write_text('\n'.join(prompts) + '\n\n')
    env = {**os.environ, 'MINGPT_DATA_DIR': str(data_dir()), 'PYTHONPATH': str(ROOT)}
    r = subprocess.run([sys.executable, str(ROOT / 'projects' / 'generate.py'), f'--model={folder}',
                        f'--prompt_file={tmp_path / "prompts.txt"}', '--batch_size=2', '--max_new_tokens=10',
                        '--greedy', '--stop_at_eos=False'], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    assert r.returncode == 0, r.stdout
    want = []
    for i, prompt in enumerate(prompts):
        ids = torch.tensor([get_encoder().encode(prompt)])
        alone = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False,
                            pad_token_id=0)
        want += [f'--- prompt {i + 1} ---', prompt + decode(alone[0, ids.size(1):].tolist())]
    lines = r.stdout.splitlines()
    start = lines.index('--- prompt 1 ---')
    assert lines[start:start + 6] == want
    assert '30 tokens in' in lines[-1] and 'first token after' in lines[-1] and 'median over batches' in lines[-1]


def test_compile_gives_the_eager_text(hf_dir, tmp_path, capsys, monkeypatch):
    folder, _ = hf_dir
    monkeypatch.setenv('MINGPT_DATA_DIR', str(data_dir()))
    torch._dynamo.reset()  # room under dynamo's limit of compiled versions, whatever compiled before
    g = generate_module()
    from mingpt.engine import Engine
    compiled, calls = [], []

    def engine(model, compile):
        compiled.append(compile)
        e = Engine(model, compile=dict(backend='aot_eager'))  # inductor's C++ compile is test_engine's to check
        for name in ('warm_up', 'generate_stream'):
            setattr(e, name, lambda *a, f=getattr(e, name), name=name, **k: calls.append(name) or f(*a, **k))
        return e
    monkeypatch.setattr(g, 'Engine', engine)
    (tmp_path / 'prompts.txt').write_text(f'{PROMPT}\nHi\n')
    args = [f'--model={folder}', f'--prompt_file={tmp_path / "prompts.txt"}', '--max_new_tokens=9', '--greedy']
    g.main(args)
    eager = capsys.readouterr()
    g.main(args + ['--compile'])
    fast = capsys.readouterr()
    assert compiled == [True] and fast.out == eager.out and PROMPT in fast.out
    assert calls[0] == 'warm_up' and calls[-1] == 'generate_stream'  # compiled before the clock starts
    assert 'compiled the decode step for 2 x 5' in fast.err


@pytest.mark.parametrize('option, message', [
    ('--num_beams=0', 'sample.num_beams=0 is out of range: it must be an integer >= 1'),
    ('--num_samples=0', 'sample.num_samples=0 is out of range: it must be an integer >= 1'),
    ('--batch_size=-2', 'sample.batch_size=-2 is out of range: it must be an integer >= 1'),
    ('--max_new_tokens=0', 'sample.max_new_tokens=0 is out of range'),
    ('--temperature=0', 'sample.temperature=0.0 is out of range: it must be a number > 0'),
    ('--top_k=0', 'sample.top_k=0 is out of range: it must be None or an integer >= 1'),
    ('--top_p=0', 'sample.top_p=0 is out of range: it must be None or a number > 0 and <= 1'),
    ('--dtype=float8', "system.dtype='float8' is not one of"),
    ('--num_beams=3 --compile', 'not beam search (sample.num_beams=3)'),
    ('--num_beams=3 --batch_size=4', 'sample.batch_size=4 would do nothing here: beam search (sample.num_beams=3) '
                                     'takes the prompts one at a time, its beams the rows of its batch: drop '
                                     '--batch_size, or drop --num_beams to sample or decode greedily in batches'),
    ('--num_beams=2 --num_samples=3', 'beam search keeps sample.num_beams=2 sequences, fewer than '
                                      'sample.num_samples=3: raise num_beams or lower num_samples'),
    ('--prompt_file=p.txt', 'give sample.prompt or sample.prompt_file, not both'),  # with --prompt=x
    ('--show_next=5 --num_beams=3', 'sample.show_next shows one step of sampling or greedy decoding, not of beam '
                                    'search (sample.num_beams=3): drop one of the two'),
    ('--show_next=-1', 'sample.show_next=-1 is out of range'),
    ('--show_next=5 --compile', 'system.compile=True compiles the decoding loop, and sample.show_next shows one '
                                'step of it without generating: drop one of the two'),
    # options that would be ignored: decoding without sampling has no use for the sampler's settings
    ('--greedy --num_beams=3', '--greedy and --num_beams > 1 are two ways of decoding: give one'),
    ('--greedy --top_k=5', '--greedy decodes without sampling, so --top_k would be ignored: drop it, or drop --greedy'),
    ('--num_beams=3 --top_p=0.9 --temperature=0.7', '--num_beams=3 decodes without sampling, so --top_p, '
                                                    '--temperature would be ignored: drop them, or drop --num_beams=3'),
    ('--device=foo', "device 'foo' is not a device name: choose 'auto', 'cpu', 'cuda', 'cuda:1' or 'mps'"),
])
def test_options_are_checked_before_loading_anything(option, message, capsys):
    g = generate_module()
    with pytest.raises(SystemExit) as exit:
        g.run_cli(g.main, ['--model=never-loaded', '--prompt=x', *option.split()])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err.startswith('error: ') and message in err, err


@pytest.mark.parametrize('content, message', [(b'\n  \n', 'holds no prompt'),
                                              ('caf\xe9'.encode('latin-1'), 'is not UTF-8'),
                                              (None, 'prompts.txt: there is no such file; give the path')])
def test_prompt_file_errors(content, message, tmp_path, capsys):
    """A missing file said only '[Errno 2] No such file or directory', without the option."""
    g = generate_module()
    if content is not None:
        (tmp_path / 'prompts.txt').write_bytes(content)
    with pytest.raises(SystemExit) as exit:
        g.run_cli(g.main, ['--model=never-loaded', f'--prompt_file={tmp_path / "prompts.txt"}'])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and message in err and 'prompts.txt' in err, err


def test_a_prompt_file_character_the_model_lacks_is_named_with_its_line(tmp_path, capsys):
    chars = sorted(set('abc \n\f'))
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=len(chars), block_size=16))
    save_checkpoint({**model_state(GPT(C)), 'vocab': chars}, tmp_path / 'm.pt')
    # line 2 is blank and skipped; line 3 holds a form feed, one line to an editor (str.splitlines splits there)
    (tmp_path / 'prompts.txt').write_text('ab\n\nc\fa\nbaz\nab\nzz\naz\n')
    g = generate_module()
    with pytest.raises(SystemExit) as exit:
        g.run_cli(g.main, [f'--model={tmp_path / "m.pt"}', f'--prompt_file={tmp_path / "prompts.txt"}'])
    err = capsys.readouterr().err
    assert exit.value.code == 2, err
    assert f"error: {tmp_path / 'prompts.txt'}, line 4: characters 'z' are not in the vocabulary" in err
    assert err.splitlines()[-2].endswith('remove or replace them (nor can it read lines 6, 7)')


@pytest.fixture(scope='module')
def eos_dir(hf_dir, enc, tmp_path_factory):
    """hf_dir's model made to write <|endoftext|> after any prompt: the final layer norm outputs a constant that
    points along the end-of-text embedding, which is made much longer than any other."""
    model = GPT.from_pretrained(hf_dir[0])
    eot = enc.special_tokens['<|endoftext|>']
    with torch.no_grad():
        wte = model.transformer.wte.weight
        wte[eot] = 10 * wte[eot] / wte[eot].norm()
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.copy_(wte[eot])
    folder = tmp_path_factory.mktemp('eos-gpt2')
    model.save_pretrained(folder)
    return folder


def test_generation_stops_at_endoftext_unless_told_not_to(g, eos_dir, capsys):
    args = [f'--model={eos_dir}', f'--prompt={PROMPT}', '--max_new_tokens=3', '--greedy']
    g.main(args)
    out = capsys.readouterr()
    assert out.out == PROMPT + '\n' and '(1 tokens in' in out.err
    g.main(args + ['--stop_at_eos=False'])
    out = capsys.readouterr()
    assert out.out == PROMPT + '<|endoftext|>' * 3 + '\n' and '(3 tokens in' in out.err
    g.main([a for a in args if a != '--greedy'] + ['--num_beams=2'])
    out = capsys.readouterr()
    assert out.out == PROMPT + '\n' and "(1 tokens (the best beams')" in out.err


def test_a_batch_keeps_each_rows_tokens_up_to_its_endoftext():
    g = generate_module()
    S = g.get_config().sample
    eos = 9

    def stream(idx, max_new_tokens, **kwargs):  # row 0 ends at the second step; the stream pads it with eos
        assert idx.tolist() == [[0, 1, 2], [3, 4, 5]] and kwargs['eos_token_id'] == [eos]
        yield from (torch.tensor(step) for step in ([[5], [6]], [[eos], [7]], [[eos], [eos]]))
    new, first, stopped = g.generate_batch(stream, [[1, 2], [3, 4, 5]], S, [eos], 'cpu')
    assert new == [[5, eos], [6, 7, eos]] and first >= 0 and stopped is None


def test_an_empty_prompt_starts_from_endoftext_or_a_newline(enc):
    from mingpt.data import CharTokenizer
    g = generate_module()
    chars = CharTokenizer(list('ab\n '))
    eot = enc.special_tokens['<|endoftext|>']
    assert g.start_and_ends('gpt2', enc) == (eot, [eot]) and g.start_and_ends('m.pt', chars) == (chars.stoi['\n'], [])
    assert g.encode(enc, '', eot) == [eot] and g.encode(chars, '', chars.stoi['\n']) == chars.encode('\n')
    with pytest.raises(g.ConfigError, match='needs a prompt'):
        g.encode(CharTokenizer(list('ab')), '', g.start_and_ends('m.pt', CharTokenizer(list('ab')))[0])


def test_top_k_one_samples_the_greedy_text(g, hf_dir, capsys):
    folder, _ = hf_dir
    args = [f'--model={folder}', f'--prompt={PROMPT}', '--max_new_tokens=12', '--stop_at_eos=False']
    texts = []
    for extra in (['--greedy'], ['--temperature=50', '--top_k=1'], ['--temperature=50']):
        g.main(args + extra)
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] != texts[2]  # at temperature 50 only top_k=1 keeps it from wandering


def test_a_stream_ending_inside_a_character_shows_a_replacement_mark(enc, capsys):
    g = generate_module()
    on_token, finish = g.streamed(enc, ends=[])
    on_token(enc.encode('🙂')[0])  # the first two of its four bytes
    assert capsys.readouterr().out == ''
    finish()
    assert capsys.readouterr().out == '\ufffd\n'


def test_one_row_prints_its_text_as_it_is_generated(g, hf_dir, capsys, monkeypatch):
    folder, _ = hf_dir
    seen, real = [], g.generate_batch

    def spy(stream, *args, **kwargs):
        def watched(*a, **k):
            for nxt in stream(*a, **k):
                seen.append(capsys.readouterr().out)  # what was printed before this token came
                yield nxt
        return real(watched, *args, **kwargs)
    monkeypatch.setattr(g, 'generate_batch', spy)
    g.main([f'--model={folder}', f'--prompt={PROMPT}', '--max_new_tokens=6', '--greedy', '--stop_at_eos=False'])
    seen.append(capsys.readouterr().out)
    assert seen[0] == PROMPT and all(seen[1:-1]) and ''.join(seen).count('\n') == 1


def test_the_model_runs_in_the_dtype_asked(hf_dir):
    model, _ = generate_module().load(str(hf_dir[0]), 'cpu', torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


class Clocked:
    """A model whose stream writes 'a' after a set delay on a fake clock: firsts[k] seconds to batch k's first token,
    then `step` seconds per token."""

    block_size = 16

    def __init__(self, firsts, step):
        self.firsts, self.step, self.now, self.batches = list(firsts), step, 0.0, []

    def clock(self):
        return self.now

    def generate_stream(self, idx, max_new_tokens, **kwargs):
        self.batches.append(idx.tolist())
        delay = self.firsts.pop(0)
        for _ in range(max_new_tokens):
            self.now += delay
            delay = self.step
            yield torch.zeros(len(idx), 1, dtype=torch.long)


def test_tokens_per_second_and_the_median_time_to_the_first_token_by_hand(tmp_path, capsys, monkeypatch):
    import types
    from mingpt.data import CharTokenizer
    g = generate_module()
    firsts, step = [1.0, 4.0, 1.5], 0.5
    model = Clocked(firsts, step)
    monkeypatch.setattr(g, 'load', lambda name, device, dtype: (model, CharTokenizer(list('abc\n'))))
    monkeypatch.setattr(g, 'time', types.SimpleNamespace(perf_counter=model.clock))
    (tmp_path / 'prompts.txt').write_text('a\nb\nc\n')
    g.main(['--model=fake', f'--prompt_file={tmp_path / "prompts.txt"}', '--batch_size=1', '--max_new_tokens=3',
            '--device=cpu'])
    n, seconds = 3 * 3, sum(firsts) + 3 * 2 * step  # 3 batches of one row, 3 tokens each
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"({n} tokens in {seconds:.2f} s: {n / seconds:.1f} tokens/s on cpu; first token after 1.500 s (median "
        "over batches))")  # the median of 1.0, 4.0 and 1.5: not the last token's time, not the slowest batch


def test_samples_of_a_prompt_are_batched_and_printed_together_prompt_by_prompt(tmp_path, capsys, monkeypatch):
    from mingpt.data import CharTokenizer
    g = generate_module()
    tokenizer = CharTokenizer(list('abc\n'))
    model = Clocked([0.1, 0.1], 0.1)
    monkeypatch.setattr(g, 'load', lambda name, device, dtype: (model, tokenizer))
    (tmp_path / 'prompts.txt').write_text('a\nbc\n')
    g.main(['--model=fake', f'--prompt_file={tmp_path / "prompts.txt"}', '--batch_size=2', '--num_samples=2',
            '--max_new_tokens=2', '--device=cpu'])
    a, bc = tokenizer.encode('a'), tokenizer.encode('bc')
    assert model.batches == [[a, a], [bc, bc]]  # one prompt's samples share a batch (and its length)
    out = capsys.readouterr()
    assert re.findall(r'--- (.*?) ---', out.err) == ['prompt 1, sample 1', 'prompt 1, sample 2', 'prompt 2, sample 1',
                                                     'prompt 2, sample 2']
    assert out.out.splitlines() == ['aaa', 'aaa', 'bcaa', 'bcaa']  # the model writes 'a'


class Interrupted(Clocked):
    """A model whose stream writes 'a' twice and is then stopped by Ctrl-C (or by SIGTERM, mingpt.utils.Terminated,
    a KeyboardInterrupt too)."""

    def __init__(self, stop):
        super().__init__([0.1], 0.1)
        self.stop = stop

    def generate_stream(self, idx, max_new_tokens, **kwargs):
        yield from itertools.islice(super().generate_stream(idx, max_new_tokens, **kwargs), 2)
        raise self.stop


@pytest.mark.parametrize('rows', [1, 2])
def test_ctrl_c_prints_the_text_its_batch_has_written_so_far(rows, tmp_path, capsys, monkeypatch):
    from mingpt.data import CharTokenizer
    from mingpt.utils import Terminated
    g = generate_module()
    model = Interrupted(KeyboardInterrupt() if rows == 1 else Terminated())
    monkeypatch.setattr(g, 'load', lambda name, device, dtype: (model, CharTokenizer(list('abc\n'))))
    (tmp_path / 'prompts.txt').write_text('ab\nc\n'[:3 * rows])
    with pytest.raises(SystemExit) as exit:
        g.run_cli(g.main, ['--model=fake', f'--prompt_file={tmp_path / "prompts.txt"}', '--max_new_tokens=9',
                           '--device=cpu'])
    out = capsys.readouterr()
    assert exit.value.code == (130 if rows == 1 else 143), out.err
    # each row's prompt and the two tokens written, and its newline: a lone row's streamed text is ended too
    assert out.out == ['abaa\n', 'abaa\ncaa\n'][rows - 1]
    assert out.err.count('(interrupted) ---') == (2 if rows == 2 else 0)  # a lone row streams, with no header


@pytest.mark.parametrize('samples, batch, says', [(1, 1, 'prompt 2 of 3'), (2, 1, 'prompt 1 of 3, sample 2 of 2'),
                                                   (2, 4, 'prompt 3 of 3, sample 1 of 2'), (1, 3, None)])
def test_ctrl_c_says_where_the_prompt_files_output_stops_short(samples, batch, says, tmp_path, capsys, monkeypatch):
    """Stopped in one batch of a prompt file, the output just ended, as if the later prompts had none to show."""
    from mingpt.data import CharTokenizer
    g = generate_module()
    monkeypatch.setattr(g, 'load', lambda name, device, dtype: (Interrupted(KeyboardInterrupt()),
                                                                CharTokenizer(list('abc\n'))))
    (tmp_path / 'prompts.txt').write_text('a\nb\nc\n')
    with pytest.raises(SystemExit):
        g.run_cli(g.main, ['--model=fake', f'--prompt_file={tmp_path / "prompts.txt"}', '--max_new_tokens=9',
                           f'--batch_size={batch}', f'--num_samples={samples}', '--device=cpu'])
    err = capsys.readouterr().err.splitlines()
    note = [f"(stopped before {says}: nothing from there on was generated)"] if says else []
    assert err[-1 - len(note):] == note + ['interrupted (every file written is whole)']  # none after the last batch


def test_ctrl_c_in_a_beam_search_names_its_prompt_and_keeps_the_beams_before(tmp_path, capsys, monkeypatch):
    """A beam search prints its beams only when it ends: stopped in prompt 2's, the output ended after prompt 1's
    beams with no word of the prompts left."""
    from mingpt.data import CharTokenizer
    g = generate_module()
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=4, block_size=16))
    torch.manual_seed(0)
    model = GPT(C).eval()
    # no newline in the vocabulary: a beam of newlines would read as more than one line of output
    monkeypatch.setattr(g, 'load', lambda name, device, dtype: (model, CharTokenizer(list('abcd'))))
    searched, real_beam_search = [], g.beam_search

    def beam_search(*args, **kwargs):
        searched.append(1)
        if len(searched) == 2:
            raise KeyboardInterrupt
        return real_beam_search(*args, **kwargs)
    monkeypatch.setattr(g, 'beam_search', beam_search)
    (tmp_path / 'prompts.txt').write_text('a\nb\nc\n')
    capsys.readouterr()
    with pytest.raises(SystemExit):
        g.run_cli(g.main, ['--model=fake', f'--prompt_file={tmp_path / "prompts.txt"}', '--max_new_tokens=3',
                           '--num_beams=2', '--device=cpu'])
    out = capsys.readouterr()
    assert len(out.out.splitlines()) == 1 and out.out.startswith('a')  # prompt 1's best beam, then nothing
    assert out.err.splitlines()[-2:] == ['(stopped during the beam search of prompt 2 of 3: nothing from there on was '
                                         'generated)', 'interrupted (every file written is whole)']


@pytest.mark.parametrize('signal_name, code, word', [('SIGINT', 130, 'interrupted'), ('SIGTERM', 143, 'terminated')])
def test_a_real_process_stopped_while_it_streams(signal_name, code, word, tmp_path):
    """python projects/generate.py streaming a prompt file's first prompt, stopped by Ctrl-C or SIGTERM: the text so
    far and its newline on stdout; on stderr where the output stops short and one line, no traceback."""
    import signal
    chars = sorted(set('abc \n'))
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=len(chars), block_size=16))
    save_checkpoint({**model_state(GPT(C)), 'vocab': chars}, tmp_path / 'm.pt')
    (tmp_path / 'prompts.txt').write_text('ab\nba\n')
    run = subprocess.Popen([sys.executable, str(ROOT / 'projects' / 'generate.py'), f'--model={tmp_path / "m.pt"}',
                            f'--prompt_file={tmp_path / "prompts.txt"}', '--batch_size=1',
                            '--max_new_tokens=1000000'], cwd=ROOT, env={**os.environ, 'PYTHONPATH': str(ROOT)},
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    streamed = run.stdout.read(20)  # the prompt and the first tokens, as they come
    run.send_signal(getattr(signal, signal_name))
    out, err = run.communicate(timeout=60)
    out, err = (streamed + out).decode(), err.decode()
    assert run.returncode == code, err
    assert out.startswith('ab') and out.endswith('\n') and set(out) <= set(chars) and len(out) > 20
    assert err.splitlines()[-2:] == ['(stopped before prompt 2 of 2: nothing from there on was generated)',
                                     f'{word} (every file written is whole)'] and 'Traceback' not in err


def test_after_ctrl_c_a_row_that_had_ended_at_eos_is_not_marked_interrupted(enc, capsys, monkeypatch):
    """Every row of a stopped batch was marked '(interrupted)', a row already complete (ended at eos) too."""
    g, tokenizer = generate_module(), enc
    eos, a = tokenizer.special_tokens['<|endoftext|>'], tokenizer.encode(' a')[0]

    class Stopped:
        block_size = 16

        def generate_stream(self, idx, max_new_tokens, **kwargs):
            yield torch.tensor([[eos], [a]])
            yield torch.tensor([[a], [a]])  # a row's tokens after its eos are dropped
            raise KeyboardInterrupt
    monkeypatch.setattr(g, 'load', lambda name, device, dtype: (Stopped(), tokenizer))
    with pytest.raises(SystemExit):
        g.run_cli(g.main, ['--model=fake', '--prompt=x', '--num_samples=2', '--max_new_tokens=9', '--device=cpu'])
    out = capsys.readouterr()
    assert [line for line in out.err.splitlines() if line.startswith('---')] == ['--- sample 1 ---',
                                                                               '--- sample 2 (interrupted) ---']
    assert out.out == 'x\nx a a\n'


def test_the_seed_chooses_the_samples(g, hf_dir, capsys):
    folder, _ = hf_dir
    texts = []
    for seed in (7, 8, 7):
        g.main([f'--model={folder}', f'--prompt={PROMPT}', '--max_new_tokens=10', '--stop_at_eos=False',
                f'--system.seed={seed}'])
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[2] != texts[1]


@pytest.mark.parametrize('options, device, dtype', [
    ([], 'cpu', torch.float32),  # auto: float32 off CUDA
    (['--system.device=cuda:1'], 'cuda:1', torch.bfloat16),  # auto: bfloat16 on an Ampere (8.0) GPU
    (['--system.device=cuda:0'], 'cuda:0', torch.float16),  # auto: float16 on a T4 (7.5), which emulates bfloat16
    (['--system.device=cuda:2'], 'cuda:2', torch.float32),  # auto: float32 on a GTX 1080 (6.1), slow in float16
    (['--system.device=cuda:1', '--system.dtype=float16'], 'cuda:1', torch.float16),
    (['--system.device=cpu', '--system.dtype=bfloat16'], 'cpu', torch.bfloat16),
])
def test_the_model_is_loaded_on_the_device_and_in_the_dtype_asked(g, options, device, dtype, monkeypatch):
    asked = []
    capability = {'cuda:0': (7, 5), 'cuda:1': (8, 0), 'cuda:2': (6, 1)}
    monkeypatch.setattr(torch.cuda, 'get_device_capability', lambda device: capability[device])
    monkeypatch.setattr(g, 'resolve_device', lambda name: asked.append(name) or ('cpu' if name == 'auto' else name))

    def load(name, device, dtype):
        asked.append((device, dtype))
        raise KeyboardInterrupt  # enough: nothing is loaded
    monkeypatch.setattr(g, 'load', load)
    with pytest.raises(KeyboardInterrupt):
        g.main(['--model=never-loaded', '--prompt=x', *options])
    assert asked == [options[0].split('=')[1] if options else 'auto', (device, dtype)]


def test_a_character_model_streams_characters_beyond_ascii(capsys):
    from mingpt.data import CharTokenizer
    tokenizer = CharTokenizer(list('aé€\n'))
    on_token, finish = generate_module().streamed(tokenizer, ends=[])
    pieces = []
    for c in 'aé€a':
        on_token(tokenizer.stoi[c])
        pieces.append(capsys.readouterr().out)
    finish()
    assert pieces == ['a', 'é', '€', 'a'] and capsys.readouterr().out == '\n'
    assert generate_module().text_of(tokenizer, [tokenizer.stoi[c] for c in 'é€'], []) == 'é€'


def test_a_trained_checkpoint_says_how_long_it_trained_in_chargpt_and_generate(tmp_path, g, capsys):
    """chargpt --sample.checkpoint and generate.py --model=model.pt sampled with no word of how far the model had
    trained (sentiment.py says 'after N iterations'). The note's numbers are read back from metrics.jsonl: model.pt
    holds the model of the best val loss, whose line is iter N - 1."""
    text = tmp_path / 'text.txt'
    text.write_text('to be or not to be, that is the question\n' * 20)
    chargpt = load_project('chargpt')
    chargpt.main([f'--data.path={text}', f'--system.work_dir={tmp_path}', '--model.model_type=gpt-nano',
                  '--data.block_size=8', '--trainer.max_iters=5', '--trainer.eval_interval=2', '--trainer.batch_size=2',
                  '--trainer.eval_iters=2', '--sample.length=0', '--trainer.quiet=True'])
    lines = [json.loads(line) for line in (tmp_path / 'metrics.jsonl').read_text().splitlines()]
    best = min((line for line in lines if 'val_loss' in line), key=lambda line: line['val_loss'])
    path = tmp_path / 'model.pt'
    note = f"({path}: trained for {best['iter'] + 1} iterations, val loss {best['val_loss']:.4f})"
    capsys.readouterr()
    chargpt.main([f'--sample.checkpoint={path}', '--sample.prompt=to be', '--sample.length=5'])
    out, err = capsys.readouterr()
    assert err.splitlines()[-1] == note and out.splitlines()[-1].startswith('to be')
    g.main([f'--model={path}', '--prompt=to be', '--max_new_tokens=5'])
    out, err = capsys.readouterr()
    assert note in err.splitlines() and out.startswith('to be')
    save_checkpoint(model_state(GPT.from_checkpoint(path)[0]) | {'vocab': torch.load(path)['vocab']}, path)
    g.main([f'--model={path}', '--prompt=to be', '--max_new_tokens=5'])  # saved by hand: no iteration to tell
    assert 'trained for' not in capsys.readouterr().err


def test_every_bidirectional_control_is_escaped_on_a_terminal():
    """Unicode's Bidi_Control characters, by Python's Unicode database: those of the explicit bidirectional classes
    (embeddings, overrides, isolates) and the three marks; and no letter around them."""
    import unicodedata
    g = generate_module()
    explicit = {'LRE', 'RLE', 'PDF', 'LRO', 'RLO', 'LRI', 'RLI', 'FSI', 'PDI'}
    reordering = [c for c in map(chr, range(0x110000)) if unicodedata.bidirectional(c) in explicit]
    marks = [unicodedata.lookup(f'{name} MARK') for name in ('LEFT-TO-RIGHT', 'RIGHT-TO-LEFT', 'ARABIC LETTER')]
    assert len(reordering) == 9 and all(g.CONTROLS.fullmatch(c) for c in reordering + marks)
    assert not g.CONTROLS.search('abc \u05d0\u0627 \u200d\u00ad\u00e9')  # Hebrew, Arabic, joiner, soft hyphen


class Writes(Clocked):
    """A model whose stream writes the ids `ids`, one a step, in every row."""

    def __init__(self, ids):
        super().__init__([0.1, 0.1], 0.1)
        self.ids = ids

    def generate_stream(self, idx, max_new_tokens, **kwargs):
        for i, _ in zip(self.ids, super().generate_stream(idx, max_new_tokens, **kwargs)):
            yield torch.full((len(idx), 1), i)


@pytest.mark.parametrize('tty', [True, False])
@pytest.mark.parametrize('how', ['streamed', 'batch', 'beams'])
def test_control_characters_are_escaped_on_a_terminal_and_kept_in_a_file(how, tty, tmp_path, capsys, monkeypatch):
    """A sample's control bytes went raw to the terminal: '\\x1b[2J' cleared it, '\\r' wrote over the line's start,
    U+202E (right-to-left override) showed the rest of the line backwards. On a terminal they are now shown as their
    escapes (tab and newline stay as they are, and the zero-width joiner of an emoji); piped, the text is kept."""
    from mingpt.data import CharTokenizer
    g = generate_module()
    text = 'a\x1b[2Jb\rc\x00\td\x7f\x85e\u202ef\u2067g\u200dh'
    tokenizer = CharTokenizer(sorted(set(text + '\n')))
    ids = tokenizer.encode(text)
    monkeypatch.setattr(g, 'load', lambda name, device, dtype: (Writes(ids), tokenizer))
    monkeypatch.setattr(g, 'beam_search', lambda model, idx, *a, **k: (
        torch.cat([idx, torch.tensor([ids])], dim=1), torch.zeros(1)))
    monkeypatch.setattr(sys.stdout, 'isatty', lambda: tty)
    (tmp_path / 'prompts.txt').write_text('a\na\n')
    options = {'streamed': ['--prompt=a'], 'batch': [f'--prompt_file={tmp_path / "prompts.txt"}'],
               'beams': ['--prompt=a', '--num_beams=2']}[how]
    g.main(['--model=fake', f'--max_new_tokens={len(ids)}', '--device=cpu', *options])
    shown = 'a' + ('a\\x1b[2Jb\\rc\\x00\td\\x7f\\x85e\\u202ef\\u2067g\u200dh' if tty else text) + '\n'
    assert capsys.readouterr().out == shown * (2 if how == 'batch' else 1)
