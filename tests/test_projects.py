"""The chargpt and adder projects end to end, on tiny settings."""
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from conftest import data_dir, load_project
from mingpt import data
from mingpt.checkpoint import save_checkpoint
from mingpt.model import GPT
from mingpt.utils import ConfigError


def test_adder_encoding_by_hand():
    adder = load_project('adder')
    C = adder.AdditionDataset.get_default_config()
    ds = adder.AdditionDataset(C, 'train')
    assert ds.encode(85, 50) == [8, 5, 5, 0, 5, 3, 1]  # 85 + 50 = 135, the sum reversed: 531
    assert ds.encode(3, 4) == [0, 3, 0, 4, 7, 0, 0]  # 007 reversed
    assert ds.get_block_size() == 6 and ds.get_vocab_size() == 10
    i = next(i for i in range(len(ds)) if ds.ixes[i].item() == 8550)
    x, y = ds[i]
    assert x.tolist() == [8, 5, 5, 0, 5, 3] and y.tolist() == [-1, -1, -1, 5, 3, 1]
    test = adder.AdditionDataset(C, 'test')
    assert len(test) == 500 and len(ds) == 9500
    assert not set(test.ixes.tolist()) & set(ds.ixes.tolist())  # held-out problems are never trained on
    # the 500 held-out problems in memory of their own: a view of the whole permutation would hold 10^8 at 4 digits
    assert test.ixes.untyped_storage().nbytes() == 500 * test.ixes.element_size()


def test_adder_eval_scores_a_perfect_and_a_wrong_model():
    adder = load_project('adder')
    ds = adder.AdditionDataset(adder.AdditionDataset.get_default_config(), 'test')

    class Oracle(torch.nn.Module):  # writes the right reversed sum, or one off in the last digit when `wrong`
        def __init__(self, wrong):
            super().__init__()
            self.wrong = wrong

        def generate(self, idx, n, do_sample=False):
            a = idx[:, 0] * 10 + idx[:, 1]
            b = idx[:, 2] * 10 + idx[:, 3]
            c = a + b + self.wrong
            digits = torch.stack([c % 10, c // 10 % 10, c // 100], dim=1)
            return torch.cat([idx, digits], dim=1)

    assert adder.eval_split(Oracle(0), ds, 'cpu') == (1.0, [])
    assert adder.eval_split(Oracle(1), ds, 'cpu')[0] == 0.0


def test_adder_counts_a_sum_right_only_when_every_digit_is():
    """A sum wrong in its tens or hundreds digit only (the carries) is wrong: the units digit alone proves nothing."""
    adder = load_project('adder')
    ds = adder.AdditionDataset(adder.AdditionDataset.get_default_config(), 'test')

    class CarryOff(torch.nn.Module):  # right when a is even; else off by `off` (10: the tens digit, 100: hundreds)
        def __init__(self, off):
            super().__init__()
            self.off = off

        def generate(self, idx, n, do_sample=False):
            a = idx[:, 0] * 10 + idx[:, 1]
            c = a + idx[:, 2] * 10 + idx[:, 3] + self.off * (a % 2)
            return torch.cat([idx, torch.stack([c % 10, c // 10 % 10, c // 100 % 10], dim=1)], dim=1)
    even = sum(divmod(i, 100)[0] % 2 == 0 for i in ds.ixes.tolist()) / len(ds)  # the problems it gets right
    assert 0.3 < even < 0.7
    for off in (10, 100):
        assert adder.eval_split(CarryOff(off), ds, 'cpu')[0] == pytest.approx(even)


def test_adder_eval_lists_the_mistakes_and_decodes_in_eval_mode_in_batches():
    adder = load_project('adder')
    ds = adder.AdditionDataset(adder.AdditionDataset.get_default_config(), 'test')

    class OneOff(torch.nn.Module):  # the right sum plus one, in the reversed digits; notes how it was called
        calls = []

        def generate(self, idx, n, do_sample=False):
            self.calls.append((len(idx), self.training, do_sample))
            c = idx[:, 0] * 10 + idx[:, 1] + idx[:, 2] * 10 + idx[:, 3] + 1
            return torch.cat([idx, torch.stack([c % 10, c // 10 % 10, c // 100], dim=1)], dim=1)
    model = OneOff()
    accuracy, mistakes = adder.eval_split(model, ds, 'cpu', batch_size=200)
    assert accuracy == 0.0 and model.calls == [(200, False, False), (200, False, False), (100, False, False)]
    assert model.training
    assert mistakes == [(a, b, a + b + 1) for a, b in (divmod(i, 100) for i in ds.ixes.tolist())]


def test_adder_eval_and_chargpt_sample_leave_the_model_in_its_mode_even_when_interrupted(capsys):
    """eval_split ended with model.train(): a model loaded to be evaluated (eval mode) had its dropout turned on for
    whatever a notebook did next with it; a Ctrl-C while it (or chargpt's sample) decoded left a model in training in
    eval mode."""
    adder, chargpt = load_project('adder'), load_project('chargpt')
    ds = adder.AdditionDataset(adder.AdditionDataset.get_default_config(), 'test')
    config = GPT.get_default_config()
    config.merge_from_dict(dict(model_type='gpt-nano', vocab_size=10, block_size=6))
    model = GPT(config).eval()
    adder.eval_split(model, ds, 'cpu')
    chargpt.sample(model, data.CharTokenizer('0123456789'), [1, 2], 3, 'cpu')
    assert not model.training
    model.train()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    model.generate = model.generate_stream = interrupted
    for evaluate in (lambda: adder.eval_split(model, ds, 'cpu'),
                     lambda: chargpt.sample(model, data.CharTokenizer('0123456789'), [1], 3, 'cpu')):
        with pytest.raises(KeyboardInterrupt):
            evaluate()
        assert model.training
    capsys.readouterr()


def test_chargpt_samples_as_the_model_does_and_a_ctrl_c_prints_the_text_so_far(capsys):
    """A Ctrl-C while chargpt sampled (500 tokens; GPT-2's take a while on a CPU) printed nothing of the text the
    model had written: the sample of a checkpoint, or the one at an evaluation, was lost."""
    chargpt, tok = load_project('chargpt'), data.CharTokenizer('abcdefghij')
    config = GPT.get_default_config()
    config.merge_from_dict(dict(model_type='gpt-nano', vocab_size=10, block_size=8))
    model = GPT(config).eval()
    capsys.readouterr()  # the model's size
    torch.manual_seed(0)
    reference = tok.decode(model.generate(torch.tensor([[0, 1]]), 12, do_sample=True, top_k=10)[0].tolist())
    model.train()
    torch.manual_seed(0)
    chargpt.sample(model, tok, [0, 1], 12, 'cpu')
    assert capsys.readouterr().out == reference + '\n' and len(reference) == 14
    stream = model.generate_stream

    def stopped_after_five(*args, **kwargs):
        for i, step in enumerate(stream(*args, **kwargs)):
            if i == 5:
                raise KeyboardInterrupt
            yield step
    model.generate_stream = stopped_after_five
    torch.manual_seed(0)
    with pytest.raises(KeyboardInterrupt):
        chargpt.sample(model, tok, [0, 1], 12, 'cpu')
    assert capsys.readouterr().out == reference[:2 + 5] + '\n' and model.training


def test_ctrl_c_in_chargpts_sample_of_a_checkpoint_in_a_real_process(tmp_path):
    """python projects/chargpt.py --sample.checkpoint=... stopped by Ctrl-C while it samples: the text so far on
    stdout, then one line on stderr, exit status 130, no traceback."""
    text = tmp_path / 'text.txt'
    text.write_text('to be or not to be, that is the question\n' * 20)
    chargpt = load_project('chargpt')
    chargpt.main([f'--data.path={text}', f'--system.work_dir={tmp_path / "run"}', '--model.model_type=gpt-nano',
                  '--data.block_size=8', '--trainer.max_iters=1', '--trainer.batch_size=2', '--sample.length=0',
                  '--trainer.quiet=True'])
    command = [sys.executable, str(Path(chargpt.__file__)), f'--sample.checkpoint={tmp_path / "run" / "model.pt"}',
               '--sample.prompt=to be', '--sample.length=1000000']  # hours: it is stopped long before
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, 'PYTHONPATH': str(Path(__file__).parents[1])})
    line = run.stdout.readline()  # 'number of parameters', as the checkpoint's model is built: then it samples
    time.sleep(3)
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 130 and 'number of parameters' in line, line + err
    assert out.startswith('to be') and len(out) > len('to be\n') and set(out) <= set('to be or not, that is question\n')
    assert err.strip() == 'interrupted (every file written is whole)'


def test_adder_prints_each_checks_mistakes_under_its_own_line(tmp_path, capsys):
    """The mistakes of the model of iteration i follow the line 'iter i: ...', not the line of the check before."""
    load_project('adder').main([f'--system.work_dir={tmp_path}', '--trainer.max_iters=2', '--eval.interval=1',
                                '--trainer.quiet=True', '--trainer.batch_size=8', '--eval.mistakes=2'])
    out = [line for line in capsys.readouterr().out.splitlines() if line.startswith(('iter', '  mistake'))]
    assert [line.split(':')[0] for line in out] == ['iter 0', '  mistake', '  mistake', 'iter 1', '  mistake',
                                                    '  mistake']  # an untrained model gets most sums wrong
    assert out[0].startswith('iter 0: train loss ')  # the batch's loss, beside the held-out accuracy


def test_adder_evaluates_every_interval_and_at_the_end_and_keeps_the_first_best(tmp_path, capsys, monkeypatch):
    adder = load_project('adder')
    seen = []
    monkeypatch.setattr(adder, 'eval_split', lambda model, dataset, device: (seen.append(len(dataset)) or 0.5, []))
    adder.main([f'--system.work_dir={tmp_path}', '--trainer.max_iters=4', '--eval.interval=2', '--trainer.quiet=True',
                '--trainer.batch_size=8'])
    out = capsys.readouterr().out
    assert seen == [500] * 3 and [line.split(':')[0] for line in out.splitlines() if 'held-out' in line] == \
        ['iter 0', 'iter 2', 'iter 3']  # the last iteration too
    assert torch.load(tmp_path / 'best.pt', weights_only=True)['iter_num'] == 1  # a tie is no better
    monkeypatch.setattr(adder, 'eval_split', lambda model, dataset, device: (0.0, []))
    adder.main([f'--system.work_dir={tmp_path / "none"}', '--trainer.max_iters=1', '--trainer.quiet=True',
                '--trainer.batch_size=8'])
    assert torch.load(tmp_path / 'none' / 'best.pt', weights_only=True)['test_accuracy'] == 0.0  # none right: saved
    for option, message in (('--data.ndigit=5', r'data.ndigit=5 is out of range: it must be an integer <= 4, because '
                                                r'the dataset lists every one of the \(10\^ndigit\)\^2 problems'),
                            ('--eval.mistakes=-1', 'eval.mistakes=-1 is out of range: it must be an integer >= 0')):
        with pytest.raises(ConfigError, match=message):
            adder.main([f'--system.work_dir={tmp_path / "other"}', option])


def test_adder_trains_and_saves_best(tmp_path, capsys):
    adder = load_project('adder')
    adder.main([f'--system.work_dir={tmp_path}', '--trainer.max_iters=3', '--eval.interval=2',
                '--trainer.quiet=True', '--trainer.batch_size=8'])
    assert 'held-out accuracy' in capsys.readouterr().out
    model, ckpt = GPT.from_checkpoint(tmp_path / 'best.pt')
    assert ckpt['model_config']['n_layer'] == 3  # gpt-nano
    assert ckpt['iter_num'] in (1, 3)  # iterations done, as the trainer counts: evaluated after iteration 0 or 2
    save_checkpoint({**ckpt, 'test_accuracy': 2.0}, tmp_path / 'best.pt')  # better than any model can be
    before = (tmp_path / 'best.pt').read_bytes()
    adder.main([f'--system.work_dir={tmp_path}', '--trainer.max_iters=5', '--eval.interval=1', '--trainer.quiet=True',
                '--trainer.batch_size=8', '--trainer.resume=True', '--trainer.checkpoint_interval=1'])
    assert 'held-out accuracy' in capsys.readouterr().out
    assert (tmp_path / 'best.pt').read_bytes() == before  # a resumed run keeps the best so far
    # a resume of another folder's checkpoint that replaces this run (overwrite) is not held to the replaced run's
    # best: best.pt kept that run's model, better than any of the continuation's
    adder.main([f'--system.work_dir={tmp_path / "from"}', '--trainer.max_iters=2', '--trainer.quiet=True',
                '--trainer.batch_size=8'])
    adder.main([f'--system.work_dir={tmp_path}', '--trainer.max_iters=3', '--trainer.quiet=True',
                '--trainer.batch_size=8', f'--trainer.resume={tmp_path / "from" / "ckpt.pt"}',
                '--trainer.overwrite=True'])
    assert torch.load(tmp_path / 'best.pt', weights_only=True)['iter_num'] == 3
    # the sequence length follows data.ndigit: a model.block_size of its own is refused, not silently replaced
    with pytest.raises(ConfigError, match=r"model.block_size=20 cannot be chosen here: the data sets it \(to 6\)"):
        adder.main([f'--system.work_dir={tmp_path / "other"}', '--model.block_size=20'])


@pytest.mark.parametrize('option, says', [
    ('--model.model_type=gpt-nanoo', r"unknown model_type 'gpt-nanoo'; presets are: "),
    ('--model.resid_pdrop=-0.1', r"model.resid_pdrop=-0.1 is out of range"),
    ('--trainer.dtype=bfloat', r"trainer.dtype must be one of"),  # the trainer's options too
])
def test_adder_refuses_a_model_option_before_listing_the_problems(option, says, tmp_path, monkeypatch):
    """At 4 digits the dataset lists 10^8 problems: a typo is told first."""
    adder = load_project('adder')
    monkeypatch.setattr(adder.AdditionDataset, '__init__', lambda *args, **kwargs: pytest.fail("listed first"))
    with pytest.raises(ConfigError, match=says):
        adder.main([f'--system.work_dir={tmp_path}', '--data.ndigit=4', option])


def test_chargpt_trains_samples_and_resamples_from_checkpoint(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv('MINGPT_DATA_DIR', str(data_dir()))
    data_dir('tinyshakespeare', 'input.txt')
    chargpt = load_project('chargpt')
    tiny = ['--model.model_type=gpt-nano', '--data.block_size=16', '--trainer.batch_size=4',
            '--sample.length=20', '--trainer.eval_iters=2', '--trainer.quiet=True']
    chargpt.main([f'--system.work_dir={tmp_path}', '--trainer.max_iters=3', '--trainer.eval_interval=2'] + tiny)
    out = capsys.readouterr().out
    assert 'val loss' in out and 'O God, O God!' in out
    model, ckpt = GPT.from_checkpoint(tmp_path / 'model.pt')
    assert len(ckpt['vocab']) == 65 and model.config.vocab_size == 65  # Tiny Shakespeare's 65 characters
    capsys.readouterr()
    chargpt.main([f'--sample.checkpoint={tmp_path / "model.pt"}', '--sample.prompt=ROMEO:', '--sample.length=30'])
    out = capsys.readouterr().out
    assert out.startswith('number of parameters') and out.splitlines()[1].startswith('ROMEO:')
    with pytest.raises(ValueError, match=r"characters '\{' are not in the vocabulary"):
        chargpt.main([f'--sample.checkpoint={tmp_path / "model.pt"}', '--sample.prompt={ROMEO'])
    with pytest.raises(ConfigError, match=r"sample.prompt is 17 tokens long; it must be 1 to 16 tokens"):
        chargpt.main([f'--sample.checkpoint={tmp_path / "model.pt"}', '--sample.prompt=' + 'a' * 17])


def test_chargpt_on_a_text_without_the_default_prompts_characters_says_it_is_the_default(tmp_path, monkeypatch):
    """A model of Japanese text refused ' ,!GOdo' at start-up, characters the student never typed: the default
    prompt is Shakespeare's. Said before the text is tokenized, which it was first."""
    text = tmp_path / 'haiku.txt'
    text.write_text('ふるいけや かわずとびこむ みずのおと\n' * 500, encoding='utf-8')
    chargpt = load_project('chargpt')
    monkeypatch.setattr(chargpt, 'encode_text', lambda *args: pytest.fail("the text was tokenized first"))
    with pytest.raises(ConfigError, match=r"sample.prompt \(the default prompt, Shakespeare's: give one in your "
                                          r"text's characters with --sample.prompt=...\): characters"):
        chargpt.main([f'--data.path={text}', f'--system.work_dir={tmp_path / "run"}'])
    assert not (tmp_path / 'run').exists()  # refused before any file
    with pytest.raises(ConfigError, match=r"sample.prompt: characters 'x' are not"):  # one given: no word of it
        chargpt.main([f'--data.path={text}', f'--system.work_dir={tmp_path / "run"}', '--sample.prompt=x'])


def test_offline_chargpt_names_the_option_for_a_local_copy(tmp_path, no_network, monkeypatch):
    monkeypatch.delenv('MINGPT_DATA_DIR', raising=False)
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path / 'cache'))
    with pytest.raises(RuntimeError, match=r'could not download .*input\.txt .* get the file elsewhere and pass its '
                                           r'path with --data\.path=FILE, or place it at'):
        load_project('chargpt').main([f'--system.work_dir={tmp_path / "run"}'])


def test_chargpt_checks_the_downloaded_text_against_its_published_sha256(tmp_path, monkeypatch):
    """A server that sends something else (a captive portal's page, a changed file) is refused and leaves nothing in
    the cache: chargpt trained on whatever came. The pinned hash is the test data's."""
    assert data.sha256_of(data_dir('tinyshakespeare', 'input.txt')) == data.TINY_SHAKESPEARE_SHA256
    monkeypatch.delenv('MINGPT_DATA_DIR', raising=False)
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path / 'cache'))
    page = SimpleNamespace(status_code=200, headers={}, history=[], raise_for_status=lambda: None,
                           iter_content=lambda chunk_size: [b'<html>Sign in to this network</html>'])
    monkeypatch.setattr(data.requests, 'get', lambda url, **kw: page)
    with pytest.raises(RuntimeError, match=r"download of .*input\.txt is corrupt: sha256 .*, expected 86c4e6aa.*; it "
                                           r"was deleted"):
        load_project('chargpt').main([f'--system.work_dir={tmp_path / "run"}', '--trainer.max_iters=1'])
    assert not [p for p in (tmp_path / 'cache').rglob('*') if p.is_file()]


@pytest.mark.parametrize('project', ['adder', 'translate'])
@pytest.mark.parametrize('option', ['--trainer.eval_interval=10', '--trainer.eval_iters=5'])
def test_a_project_without_a_val_set_refuses_the_trainers_eval_options_and_names_its_own(project, option, tmp_path):
    """adder and translate have no val set, so the trainer never evaluates there: --trainer.eval_interval (which
    chargpt and sentiment read) would be ignored; it is refused, with the project's own option, eval.interval."""
    with pytest.raises(ConfigError, match=rf"{option[2:]} would do nothing here: .* give --eval.interval=N instead"):
        load_project(project).main([f'--system.work_dir={tmp_path}', option])
    assert not any(tmp_path.iterdir())  # refused before anything was trained or written


@pytest.mark.parametrize('project', ['chargpt', 'translate'])
def test_sampling_from_a_checkpoint_refuses_model_options(project, tmp_path):
    with pytest.raises(ConfigError, match=r"model.n_layer=2 would do nothing here: sample.checkpoint brings its own "
                                          r"model; leave them out"):
        load_project(project).main([f'--sample.checkpoint={tmp_path / "model.pt"}', '--model.n_layer=2'])


@pytest.mark.parametrize('args, refused', [(['--trainer.resume=True', '--trainer.max_iters=100'], 'trainer.resume'),
                                            (['--data.path=more.txt'], 'data.path')])
def test_chargpt_sampling_from_a_checkpoint_refuses_training_and_data_options(args, refused, tmp_path):
    """--sample.checkpoint with --trainer.max_iters (to train it on) printed a sample, trained nothing and exited 0."""
    says = r"would do nothing here: sample.checkpoint samples, on the CPU, and trains nothing; to train on, leave it "
    with pytest.raises(ConfigError, match=rf"{refused}=.* {says}out and give --system.init=CHECKPOINT"):
        load_project('chargpt').main([f'--sample.checkpoint={tmp_path / "model.pt"}', *args])


def test_sampling_from_a_checkpoint_refuses_system_init(tmp_path):
    """--system.init starts training from a model; with --sample.checkpoint there is no training, and it was ignored."""
    with pytest.raises(ConfigError, match=r"system.init='gpt2' would do nothing here: sample.checkpoint is the model "
                                          r"sampled from"):
        load_project('chargpt').main([f'--sample.checkpoint={tmp_path / "model.pt"}', '--system.init=gpt2'])


@pytest.mark.parametrize('project, args, first_line', [
    ('chargpt', ['--help'], 'Trains a character-level language model'),
    ('adder', ['-h'], 'Trains a GPT to add n-digit numbers'),
    ('sentiment', ['pretrain', '--help'], 'Sentiment classification with a GPT'),
])
def test_help_shows_the_projects_usage_then_its_options(project, args, first_line, capsys):
    with pytest.raises(SystemExit) as e:
        load_project(project).main(args)
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(first_line) and 'trainer:\n' in out and 'overwrite: False' in out


def test_chargpt_holds_out_the_end_and_needs_a_window_in_each_part():
    split = load_project('chargpt').split
    assert split('abcdefghij', 0.3, 2) == ('abcdefg', 'hij')
    assert split(list(range(10)), 0.3, 2) == (list(range(7)), [7, 8, 9])  # token ids alike
    for fraction, block_size in ((0.3, 3), (0.8, 2)):  # 3 held out for block 3; 2 to train on for block 2
        with pytest.raises(ConfigError, match=rf"data.val_fraction={fraction} splits the text's 10 tokens"):
            split('abcdefghij', fraction, block_size)


def test_the_character_dataset_reads_as_minGPTs():
    from mingpt.data import CharDataset
    data = CharDataset('hello world', block_size=4)
    tok = data.tokenizer
    assert data.get_vocab_size() == 8 and data.get_block_size() == 4 and len(data) == 7
    x, y = data[1]
    assert ''.join(tok.itos[int(i)] for i in x) == 'ello' and ''.join(tok.itos[int(i)] for i in y) == 'llo '
    assert [tok.stoi[c] for c in 'hello'] == tok.encode('hello') and tok.decode(x) == 'ello'


def test_the_character_dataset_holds_a_large_text_in_a_byte_a_character_and_reads_its_windows_as_int64():
    """CharDataset made a list of the whole text's ids, then an int64 tensor: 16 bytes a character at its peak (a
    100 MB corpus took 1.6 GB), where the ids of up to 256 characters fit in one byte."""
    from mingpt.data import CharDataset
    text = 'First Citizen:\nBefore we proceed any further, hear me speak.\n' * 20_000  # 1.24 MB
    tracemalloc.start()  # it sees Python's lists and ints, not torch's tensors
    try:
        data = CharDataset(text, block_size=8)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * len(text), f"{peak:,} bytes of Python objects for a text of {len(text):,} characters"
    assert data.data.element_size() == 1 and data.data.tolist() == data.tokenizer.encode(text)
    x, y = data[len(data) - 1]
    assert x.dtype == y.dtype == torch.long and data.tokenizer.decode(torch.cat([x, y[-1:]])) == text[-9:]
    cyrillic = text + ''.join(map(chr, range(0x400, 0x500)))  # 256 characters more
    wide = CharDataset(cyrillic, block_size=8)
    assert wide.data.element_size() == 4 and wide.tokenizer.decode(wide[len(wide) - 1][1]) == cyrillic[-8:]


@pytest.mark.parametrize('n_chars, size', [(256, 1), (257, 4)])
def test_the_character_dataset_holds_ids_in_one_byte_up_to_256_characters_and_none_wraps_past_them(n_chars, size):
    """Ids 0 to 255 fit in a byte; a text of 257 characters has id 256, which a byte would hold as 0, training on
    another character with no error. An empty text (its pieces: none) is refused by name."""
    from mingpt.data import CharDataset
    text = ''.join(map(chr, range(0x100, 0x100 + n_chars))) * 2
    data = CharDataset(text, block_size=4)
    assert data.data.element_size() == size and data.data.tolist() == data.tokenizer.encode(text)
    with pytest.raises(ValueError, match=r"^the text has 0 characters, too few for one window of block_size 4"):
        CharDataset('', block_size=4, tokenizer=data.tokenizer)  # an empty file: named, not torch.cat's error


@pytest.mark.parametrize('tokenizer', [None, 'gpt2'])
def test_chargpt_trains_on_the_start_and_validates_on_the_end(tokenizer, tmp_path, monkeypatch, capsys):
    chargpt = load_project('chargpt')
    text = tmp_path / 'text.txt'
    start, end = 'the cat sat on the mat. ' * 5, 'a dog ran in the fog! ' * 2
    text.write_text(start + end)
    seen = {}

    class Spy(chargpt.Trainer):
        def run(self):
            seen.update(train=self.train_dataset, val=self.val_dataset)
    monkeypatch.setattr(chargpt, 'Trainer', Spy)
    args = [f'--data.path={text}', '--data.val_fraction=0.25', '--data.block_size=4', f'--system.work_dir={tmp_path}',
            '--model.model_type=gpt-nano', '--sample.length=0']
    chargpt.main(args + ([f'--data.tokenizer={data_dir("gpt2")}'] if tokenizer else []))
    decode = (chargpt.get_encoder(directory=data_dir('gpt2')) if tokenizer else
              chargpt.CharTokenizer.from_text(text.read_text())).decode
    first = {part: decode(ds[0][0].tolist()) for part, ds in seen.items()}
    assert first['train'] in start and first['val'] in end and first['val'] not in start, first
    # 5 x 24 + 2 x 22 = 164 characters of 17 kinds, the last 41 (25%) held out; GPT-2's tokens (as tiktoken's): 7 per
    # sentence, the spaces joined to the next word, and the last space alone: 7 x 7 + 1 = 50, the last 12 held out
    counts = ("38 tokens, validating on 12; vocabulary 50,257" if tokenizer
              else "123 tokens, validating on 41; vocabulary 17")
    assert f"training on {counts}\n" in capsys.readouterr().out


def test_chargpt_trains_on_a_gutenberg_book_without_its_header_and_licence(tmp_path, monkeypatch, capsys):
    """A Project Gutenberg file was trained on whole: its header, and its licence, which is the end of the file and so
    of the val split (a quarter of Pride and Prejudice's last 10%), with characters the book has not ('#', '@')."""
    chargpt = load_project('chargpt')
    book = 'It is a truth universally acknowledged.\n\n' * 10
    header = '\ufeffThe Project Gutenberg EBook #1342\r\n\r\n*** START OF THIS PROJECT GUTENBERG EBOOK X ***\r\n'
    licence = '*** END OF THIS PROJECT GUTENBERG EBOOK X ***\r\n\r\n1.E.1. #@ licence terms ' * 20
    (tmp_path / 'pg.txt').write_bytes((header + book.replace('\n', '\r\n') + licence).encode('utf-8'))
    seen = {}

    class Spy(chargpt.Trainer):
        def run(self):
            seen.update(train=self.train_dataset, val=self.val_dataset)
    monkeypatch.setattr(chargpt, 'Trainer', Spy)
    chargpt.main([f'--data.path={tmp_path / "pg.txt"}', '--data.val_fraction=0.25', '--data.block_size=4',
                  f'--system.work_dir={tmp_path}', '--model.model_type=gpt-nano', '--sample.length=0'])
    decode = chargpt.CharTokenizer.from_text(book).decode  # the book's characters only
    assert decode(seen['train'].tokens) + decode(seen['val'].tokens) == book
    out = capsys.readouterr().out
    assert f"pg.txt is a Project Gutenberg book: training on its text, {len(book):,} of the file's " in out
    assert data.book_body(book) == book and data.book_body(header + licence) == ''  # a book with no text in it
    (tmp_path / 'plain.txt').write_text(book)  # any other text: trained on whole, with no word of Gutenberg
    chargpt.main([f'--data.path={tmp_path / "plain.txt"}', '--data.val_fraction=0.25', '--data.block_size=4',
                  f'--system.work_dir={tmp_path / "plain"}', '--model.model_type=gpt-nano', '--sample.length=0'])
    assert decode(seen['train'].tokens) + decode(seen['val'].tokens) == book
    assert 'Gutenberg' not in capsys.readouterr().out


def gpt2_shaped(tmp_path, dropout=0.1):
    """A small GPT on GPT-2's vocabulary in Hugging Face's layout, as GPT-2's weights are (none here offline)."""
    C = GPT.get_default_config()
    C.merge_from_dict(dict(n_layer=1, n_head=2, n_embd=16, vocab_size=50257, block_size=64, embd_pdrop=dropout,
                           resid_pdrop=dropout, attn_pdrop=dropout))
    GPT(C).save_pretrained(tmp_path / 'small-gpt2')
    return tmp_path / 'small-gpt2'


def test_chargpt_fine_tunes_gpt2_weights_with_gpt2s_tokenizer(tmp_path, monkeypatch):
    monkeypatch.setenv('MINGPT_DATA_DIR', str(data_dir()))
    data_dir('gpt2', 'encoder.json')
    init = gpt2_shaped(tmp_path)
    start = GPT.from_pretrained(init)
    chargpt = load_project('chargpt')
    chargpt.main([f'--system.init={init}', f'--system.work_dir={tmp_path / "run"}', '--data.block_size=32',
                  '--trainer.max_iters=2', '--trainer.learning_rate=1e-4', '--trainer.batch_size=2',
                  '--trainer.eval_interval=1', '--trainer.eval_iters=1', '--sample.length=5', '--trainer.quiet=True',
                  '--model.embd_pdrop=0.0'])  # a dropout option applies
    model, ckpt = GPT.from_checkpoint(tmp_path / 'run' / 'model.pt')
    assert model.config.n_embd == 16 and model.block_size == 64 and model.config.embd_pdrop == 0.0
    assert ckpt['tokenizer']['encoder'] == chargpt.get_encoder().encoder  # GPT-2's own tokenizer
    # fine-tuned from the weights given: close to them after two small steps (a new model would be far)
    moved = max((p - q).abs().max().item() for p, q in zip(model.state_dict().values(),
                                                           start.state_dict().values()))
    assert 0 < moved < 1e-2


def test_chargpt_fine_tunes_a_padded_vocabulary_on_its_tokenizers_ids(tmp_path, capsys, monkeypatch):
    """A Hugging Face folder with its tokenizer and nanoGPT's padded 50304 tokens: chargpt's samples drew the padded
    ids (made the likeliest here) and stopped the run with 'cannot decode'; the head now keeps the tokenizer's ids."""
    monkeypatch.setenv('MINGPT_DATA_DIR', str(data_dir()))
    C = GPT.get_default_config()
    C.merge_from_dict(dict(n_layer=1, n_head=2, n_embd=16, vocab_size=50304, block_size=64))
    model = GPT(C)
    with torch.no_grad():
        model.transformer.wte.weight[50257:] *= 300
    folder = model.save_pretrained(tmp_path / 'padded')
    for ours, theirs in (('encoder.json', 'vocab.json'), ('vocab.bpe', 'merges.txt')):
        (folder / theirs).write_bytes(data_dir('gpt2', ours).read_bytes())
    load_project('chargpt').main([f'--system.init={folder}', f'--system.work_dir={tmp_path / "run"}',
                                  '--data.block_size=32', '--trainer.max_iters=1', '--trainer.batch_size=2',
                                  '--trainer.eval_interval=1', '--trainer.eval_iters=1', '--sample.length=5',
                                  '--trainer.quiet=True'])
    assert "(the model's 50304 tokens are padded past its tokenizer's 50257: keeping the first 50257)" in \
        capsys.readouterr().out
    assert GPT.from_checkpoint(tmp_path / 'run' / 'model.pt')[0].config.vocab_size == 50257


def test_chargpt_goes_on_from_its_own_checkpoint_on_another_text(tmp_path, capsys):
    chargpt = load_project('chargpt')
    small, large = tmp_path / 'small.txt', tmp_path / 'large.txt'
    small.write_text('the cat sat on the mat. ' * 20)
    large.write_text('the mat sat on the cat; ' * 36 + 'the mat sat on the cat! ' * 4)  # '!' only in the val part
    tiny = ['--model.model_type=gpt-nano', '--data.block_size=8', '--trainer.batch_size=2', '--trainer.max_iters=2',
            '--trainer.eval_interval=1', '--trainer.eval_iters=1', '--sample.length=0', '--trainer.quiet=True']
    chargpt.main([f'--data.path={small}', f'--system.work_dir={tmp_path / "a"}'] + tiny)
    first, first_checkpoint = GPT.from_checkpoint(tmp_path / 'a' / 'model.pt')
    capsys.readouterr()
    # the checkpoint's characters; the way on with such a text is a BPE vocabulary for both runs
    with pytest.raises(ConfigError, match=r"characters '!;' are not in the vocabulary.*train both runs on a "
                                          r"byte-level BPE vocabulary.*--data.tokenizer=gpt2"):
        chargpt.main([f'--data.path={large}', f'--system.init={tmp_path / "a" / "model.pt"}',
                      f'--system.work_dir={tmp_path / "b"}'] + tiny[1:])
    large.write_text('the mat sat on the cat. ' * 40)
    chargpt.main([f'--data.path={large}', f'--system.init={tmp_path / "a" / "model.pt"}',
                  f'--system.work_dir={tmp_path / "b"}', '--model.attn_pdrop=0.0'] + tiny[1:])
    second, ckpt = GPT.from_checkpoint(tmp_path / 'b' / 'model.pt')
    assert chargpt.CharTokenizer(ckpt['vocab']).stoi == chargpt.CharTokenizer.from_text(small.read_text()).stoi
    # a resume without --system.init would build chargpt's default model: refused, pointing at how the run started
    with pytest.raises(ConfigError, match=r"its model was built with other settings .* \(the command it last ran "
                                          r"with is in .*b/args.txt\)"):
        chargpt.main([f'--data.path={large}', f'--system.work_dir={tmp_path / "b"}', '--data.block_size=8',
                      '--sample.length=0', '--trainer.resume=True', '--trainer.max_iters=4'])
    assert second.config.n_layer == first.config.n_layer == 3 and second.config.attn_pdrop == 0.0
    out = capsys.readouterr().out
    # how long the model started from trained, as generate.py and sentiment say it
    n = first_checkpoint['iter_num']
    assert (f"starting from {tmp_path / 'a' / 'model.pt'}: 3 layers" in out and
            f"({tmp_path / 'a' / 'model.pt'}: trained for {n} iteration{'s' * (n != 1)}, val loss " in out)


def test_chargpt_tokenizes_a_text_once_and_a_resume_reads_the_tokens_back(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path / 'cache'))
    chargpt = load_project('chargpt')
    text = tmp_path / 'text.txt'
    text.write_text('the cat sat on the mat. ' * 20)
    args = [f'--data.path={text}', f'--system.work_dir={tmp_path / "run"}', '--model.model_type=gpt-nano',
            '--data.block_size=8', '--trainer.batch_size=2', '--trainer.eval_interval=1', '--trainer.eval_iters=1',
            '--sample.length=0', '--trainer.quiet=True', '--trainer.checkpoint_interval=1']
    chargpt.main(args + ['--trainer.max_iters=2'])
    [saved] = (tmp_path / 'cache' / 'tokens').iterdir()  # 2 bytes a character
    assert saved.name.startswith('text.txt.') and saved.stat().st_size == 2 * len(text.read_text())
    assert f"tokenizing text.txt into {saved}" in capsys.readouterr().out
    monkeypatch.setattr(chargpt.CharTokenizer, 'encode', None)  # not encoded again
    chargpt.main(args + ['--trainer.max_iters=3', '--trainer.resume=True'])
    assert f"reading the tokens of text.txt saved in {saved}" in capsys.readouterr().out
    assert torch.load(tmp_path / 'run' / 'ckpt.pt', weights_only=True)['iter_num'] == 3


@pytest.mark.parametrize('option, says', [
    ('--data.tokenizer=gpt2', r"system.init=.* brings its own tokenizer: leave out data.tokenizer"),
    ('--model.model_type=gpt-micro', r"model.model_type='gpt-micro' would do nothing here: system.init=.* brings "
                                     r"its own model"),
    ('--model.n_layer=2', r"model.n_layer=2 would do nothing here"),
    ('--data.block_size=65', r"data.block_size=65 is longer than the context of .* \(64 tokens\): give "
                             r"--data.block_size=64 or less"),
])
def test_chargpt_init_refuses_what_the_model_it_starts_from_decides(option, says, tmp_path):
    if option.startswith('--data.block_size'):  # checked once the model is loaded, with GPT-2's vocabulary
        data_dir('gpt2', 'encoder.json')
    text = tmp_path / 'input.txt'  # block_size is checked once the text is read: a short one of ours
    text.write_text('the cat sat on the mat. ' * 40)
    with pytest.raises(ConfigError, match=says):
        load_project('chargpt').main([f'--system.init={gpt2_shaped(tmp_path)}', f'--system.work_dir={tmp_path / "r"}',
                                      f'--data.path={text}', option])
    assert not (tmp_path / 'r').exists()


@pytest.mark.parametrize('options, says', [
    (['--model.model_type=gpt-nanoo'], r"unknown model_type 'gpt-nanoo'; presets are: "),
    (['--model.model_type=None', '--model.n_layer=2', '--model.n_head=5', '--model.n_embd=32'],
     r"model.n_embd=32 must be a multiple of model.n_head=5"),
    (['--model.norm=postt'], r"model.norm must be one of 'pre', 'post', not 'postt'"),
    (['--system.init=gpt2', '--model.attn_pdrop=1.5'], r"model.attn_pdrop=1.5 is out of range"),
    (['--system.init=gpt2', '--model.n_layer=2'], r"model.n_layer=2 would do nothing here"),
    (['--trainer.max_iters=0'], r"trainer.max_iters=0 is out of range"),  # the trainer's options too
])
def test_chargpt_refuses_a_model_option_before_reading_the_text(options, says, tmp_path, monkeypatch):
    """A typo is told at once, not after Tiny Shakespeare is read and tokenized (and GPT-2 is never loaded)."""
    chargpt = load_project('chargpt')
    monkeypatch.setattr(chargpt, 'fetch', lambda *args, **kwargs: pytest.fail("the text was read first"))
    monkeypatch.setattr(chargpt, 'load_model_and_tokenizer', lambda *args, **kwargs: pytest.fail("loaded first"))
    with pytest.raises(ConfigError, match=says):
        chargpt.main([f'--system.work_dir={tmp_path / "r"}', *options])


def test_chargpt_samples_in_eval_mode_among_the_ten_likeliest(capsys):
    chargpt = load_project('chargpt')
    tokenizer = chargpt.CharTokenizer(list('abcdefghijklmnopqrstuvwxyz .\n'))
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=len(tokenizer), block_size=16, embd_pdrop=0.5,
                           resid_pdrop=0.5, attn_pdrop=0.5))
    model = GPT(C)  # in training mode, with dropout that would change every sample
    capsys.readouterr()
    torch.manual_seed(1)
    chargpt.sample(model, tokenizer, tokenizer.encode('the '), 40, 'cpu')
    printed = capsys.readouterr().out
    torch.manual_seed(1)
    want = model.eval().generate(torch.tensor([tokenizer.encode('the ')]), 40, do_sample=True, top_k=10)
    assert printed == tokenizer.decode(want[0].tolist()) + '\n'


def test_a_resumed_ablation_refuses_runs_trained_with_other_settings_than_its_table_would_name(tmp_path):
    """A finished run is read back, not trained: resumed with another block_size (or fewer iterations), the table
    said 'block 8' over val losses trained at 16. Refused before anything is written; a resume that changes only how
    the runs go on (the device) reads them back."""
    ablation = load_project('ablation')
    (tmp_path / 'text.txt').write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n\n" * 40)
    args = [f'--system.work_dir={tmp_path / "ab"}', f'--data.path={tmp_path / "text.txt"}', "--variants=('gpt2',)",
            '--data.block_size=16', '--trainer.batch_size=4', '--trainer.max_iters=2', '--trainer.eval_interval=2',
            '--trainer.eval_iters=1', '--trainer.quiet=True']
    ablation.main(args)
    table = (tmp_path / 'ab' / 'results.md').read_text()
    for change, says in [('--data.block_size=8', r"gpt2 was trained with other settings \(data.block_size=16 there, "
                                                 r"8 here\); resume with the options it was trained with"),
                         ('--trainer.learning_rate=0.001', r"trainer.learning_rate=0.0005 there, 0.001 here"),
                         ('--trainer.max_iters=1', r"gpt2 has trained 2 iterations, more than trainer.max_iters=1; "
                                                   r"give --trainer.max_iters=2 or more")]:
        with pytest.raises(ConfigError, match=says):
            ablation.main(args + ['--trainer.resume=True', change])
        assert (tmp_path / 'ab' / 'results.md').read_text() == table
    # another text was read back as if trained on it (data.path counted as where a text lies, not which one)
    (tmp_path / 'other.txt').write_text("Second Citizen:\nWe are accounted poor citizens.\n\n" * 40)
    with pytest.raises(ConfigError, match=r"\(data.path='[^']*text.txt' there, '[^']*other.txt' here: another text\)"):
        ablation.main(args + ['--trainer.resume=True', f'--data.path={tmp_path / "other.txt"}'])
    assert (tmp_path / 'ab' / 'results.md').read_text() == table
    # a mistyped path is one that does not exist, as chargpt says, not 'another text'
    with pytest.raises(FileNotFoundError, match=r"txet.txt does not exist; pass the path of an existing file"):
        ablation.main(args + ['--trainer.resume=True', f'--data.path={tmp_path / "txet.txt"}'])
    # both at once were taken as a resume: the finished run read back, though the user asked to replace it
    with pytest.raises(ConfigError, match=r"trainer.resume=True continues the ablation's runs and "
                                          r"trainer.overwrite=True replaces them: give one of them"):
        ablation.main(args + ['--trainer.resume=True', '--trainer.overwrite=True'])
    assert (tmp_path / 'ab' / 'results.md').read_text() == table
    ablation.main(args + ['--trainer.resume=True', '--trainer.device=cpu', '--sample.length=50'])  # was refused
    (tmp_path / 'moved').mkdir()  # the same text elsewhere, as a file and in a folder of .txt files: read back
    (tmp_path / 'moved' / 'a.txt').write_bytes((tmp_path / 'text.txt').read_bytes())
    for moved in ('moved', 'moved/a.txt'):
        ablation.main(args + ['--trainer.resume=True', f'--data.path={tmp_path / moved}'])

    def row(text):  # the gpt2 row's variant, options, parameters and val loss (read back: its time is '-')
        return next(line for line in text.splitlines() if line.startswith('| gpt2 ')).split(' | ')[:4]
    assert row((tmp_path / 'ab' / 'results.md').read_text()) == row(table)


def test_ablation_table_prints_a_negligible_difference_as_zero_not_minus_zero():
    """A variant 1e-6 below GPT-2 printed -0.0000, which reads as a lower loss; the signs that remain mean one."""
    ablation = load_project('ablation')
    config = ablation.get_config()
    config.ablation.variants = ('gpt2', 'relu', 'post-norm', 'sinusoidal')

    def rows(val_loss):
        return [{'val_loss': val_loss, 'params': 1, 'seconds': None}]
    text = ablation.table(config, {'gpt2': rows(1.5), 'relu': rows(1.5 - 1e-6), 'post-norm': rows(1.5 + 1e-6),
                                   'sinusoidal': rows(1.4)})
    deltas = {line.split(' | ')[0][2:]: line.split(' | ')[4] for line in text.splitlines()[4:]}
    assert deltas == {'gpt2': '', 'relu': '0.0000', 'post-norm': '0.0000', 'sinusoidal': '-0.1000'}


@pytest.mark.parametrize('arg, says', [
    ('--variants=gpt2,postnorm', r"ablation.variants has no variant 'postnorm': name some of gpt2, post-norm, relu, "
                                 r"sinusoidal, e.g. --variants=gpt2,relu"),
    ('--variants=()', r"ablation.variants is empty: name some of gpt2, post-norm"),
    ('--seeds=()', r"ablation.seeds is empty: give at least one seed, e.g. --seeds=3407")])
def test_ablation_names_the_misspelt_variant_or_the_empty_option(arg, says, tmp_path):
    """One message for both options said, of a misspelt variant, that the seeds must hold one seed too."""
    with pytest.raises(ConfigError, match=says):
        load_project('ablation').main([f'--system.work_dir={tmp_path}', arg])
    assert not any(tmp_path.iterdir())


def test_attention_with_positions_refuses_the_options_of_an_attention_map(tmp_path):
    """--positions --layer=1 drew every position's encoding, silently: the layer (and head, prompt) are attention's."""
    with pytest.raises(ConfigError, match=r"plot.prompt='ROMEO', plot.layer=1 would do nothing here: plot.positions "
                                          r"draws the positional encodings, not the attention of a prompt"):
        load_project('attention').main([f'--model={tmp_path / "model.pt"}', '--positions', '--layer=1',
                                        '--prompt=ROMEO', f'--plot.out={tmp_path / "p.png"}'])
    assert not any(tmp_path.iterdir())
