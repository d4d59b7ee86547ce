"""No run is ever lost (issue 13): chargpt killed with SIGKILL at random moments, and during checkpoint writes, then
resumed, trains exactly the uninterrupted run; stopping and extending is the same run; evaluation and sampling
never change the training; and every bad input is refused with a message that names it, before any file in
work_dir changes. Tiny models on a made-up text, so offline and fast."""
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

from conftest import args_txt_words, load_project, started_as_script
from mingpt.data import read_text
from mingpt.utils import ConfigError, run_cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
chargpt = load_project('chargpt')
TINY = ['--model.model_type=None', '--model.n_layer=2', '--model.n_head=2', '--model.n_embd=16',
        '--data.block_size=16', '--trainer.batch_size=4', '--trainer.eval_iters=2', '--trainer.quiet=True',
        '--sample.prompt=o god']


@pytest.fixture(scope='module')
def text(tmp_path_factory):
    """27 KB of words drawn at random: 20 characters, lowercase, spaces and newlines."""
    rng = np.random.default_rng(0)
    words = 'the king shall not be moved and yet love is blind o god fair'.split()
    path = tmp_path_factory.mktemp('data') / 'text.txt'
    path.write_text('\n'.join(' '.join(rng.choice(words, size=8)) for _ in range(800)))
    return path


def metrics(work_dir):
    """metrics.jsonl without the timings, which differ from run to run."""
    with open(os.path.join(work_dir, 'metrics.jsonl')) as f:
        return [{k: v for k, v in json.loads(line).items() if k not in ('tokens_per_s', 'mfu')} for line in f]


def temp_files(work_dir):
    return [n for n in os.listdir(work_dir) if re.fullmatch(r'.+\.tmp\d+', n)] if work_dir.exists() else []


def progress(work_dir):
    """The last iteration in metrics.jsonl (-1 for none), read while a run may be writing it."""
    try:
        with open(work_dir / 'metrics.jsonl') as f:
            return max((json.loads(line)['iter'] for line in f if line.endswith('\n')), default=-1)
    except FileNotFoundError:
        return -1


# ----------------------------------------------------------------------------------------------------------------
# killed and resumed

# the victim's fsync waits a little, so that the test can see a checkpoint's temporary file and kill the run then
SLOW_FSYNC = ("import os, runpy, sys, time\n"
              "fsync = os.fsync\n"
              "os.fsync = lambda fd: (time.sleep(0.05), fsync(fd))[1]\n"
              "sys.argv = sys.argv[1:]\n"
              "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def test_sigkill_at_random_moments_and_during_writes_then_resume_equals_the_straight_run(tmp_path, text):
    args = [os.path.join(ROOT, 'projects', 'chargpt.py'), f'--data.path={text}', *TINY, '--trainer.max_iters=20',
            '--trainer.eval_interval=5', '--trainer.checkpoint_interval=2', '--sample.length=30']
    env = {**os.environ, 'OMP_NUM_THREADS': '1'}

    def start(work_dir, *extra):
        return subprocess.Popen([sys.executable, '-c', SLOW_FSYNC, *args, f'--system.work_dir={work_dir}', *extra],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    straight = start(tmp_path / 'straight')
    work_dir = tmp_path / 'killed'
    rng = random.Random(0)
    kills = 0
    for moment in ('write', 'random', 'write', 'random', None):
        go_on = '--trainer.resume=True' if (work_dir / 'ckpt.pt').exists() else '--trainer.overwrite=True'
        victim = start(work_dir, go_on)
        seen = progress(work_dir)
        deadline = time.time() + 60
        while moment and victim.poll() is None and time.time() < deadline:
            if moment == 'write' and temp_files(work_dir):
                break  # a checkpoint (or model.pt, metrics, args, config) is being written
            if moment == 'random' and progress(work_dir) > seen:
                time.sleep(rng.uniform(0, 0.3))  # somewhere in training, once this run has made progress
                break
            time.sleep(0.002)
        if moment and victim.poll() is None:
            os.kill(victim.pid, signal.SIGKILL)
            kills += 1
            if moment == 'write':
                assert temp_files(work_dir), 'the kill was meant to land during a write'
        _, err = victim.communicate(timeout=120)
        if moment is None:
            assert victim.returncode == 0, err
    _, err = straight.communicate(timeout=120)
    assert straight.returncode == 0, err
    assert kills >= 3
    expected = metrics(tmp_path / 'straight')
    assert [r['iter'] for r in expected] == list(range(20))
    assert metrics(work_dir) == expected  # every iteration once, the same losses, val losses and rates, bit for bit
    assert not temp_files(work_dir)
    a, b = (torch.load(d / 'ckpt.pt', weights_only=True) for d in (tmp_path / 'straight', work_dir))
    assert all(torch.equal(a['model'][k], b['model'][k]) for k in a['model'])


# ----------------------------------------------------------------------------------------------------------------
# evaluation and sampling never change the training

def train(work_dir, text, *extra):
    chargpt.main([f'--data.path={text}', f'--system.work_dir={work_dir}', *TINY, '--trainer.checkpoint_interval=3',
                  *extra])
    return metrics(work_dir)


def test_stop_at_n_then_extend_to_2n_equals_2n_straight_with_sampling_on(tmp_path, text):
    # chargpt's sampling after every evaluation is on (shortened from 500 characters to 40); the stop at 6 also
    # evaluates and samples
    every = ['--trainer.eval_interval=4', '--sample.length=40']
    straight = train(tmp_path / 'straight', text, '--trainer.max_iters=12', *every)
    train(tmp_path / 'extended', text, '--trainer.max_iters=6', *every)
    extended = train(tmp_path / 'extended', text, '--trainer.max_iters=12', '--trainer.resume=True', *every)
    def losses(records):
        return [(r['iter'], r['loss'], r['lr']) for r in records]
    assert losses(extended) == losses(straight)
    # the evaluations of the straight run give the same val losses; the stop at 6 added one of its own
    assert [r for r in straight if 'val_loss' in r] == [r for r in extended if 'val_loss' in r and r['iter'] != 5]
    # and evaluation on or off trains the same model
    quiet = train(tmp_path / 'no-eval', text, '--trainer.max_iters=12', '--trainer.eval_interval=0')
    assert losses(quiet) == losses(straight)


def test_args_txt_of_a_resumed_run_replays_the_whole_run(tmp_path, text, monkeypatch):
    """A resume that does not repeat the first command's options (its seed) and changes one (the batch size) keeps
    the first command in args.txt: pasted into a shell where the run is gone, args.txt trains the same run again."""
    monkeypatch.chdir(tmp_path)
    common = [f'--data.path={text}', '--system.work_dir=run', *TINY, '--trainer.checkpoint_interval=3']
    for args in ([*common, '--system.seed=5', '--trainer.max_iters=3'],
                 [*common, '--trainer.batch_size=8', '--trainer.resume=True', '--trainer.max_iters=6']):
        started_as_script(monkeypatch, ['chargpt.py', *args])
        chargpt.main(args)
    lines = (tmp_path / 'run' / 'args.txt').read_text().splitlines()
    assert lines[1] == '# resumed at iteration 3:'
    shutil.move(tmp_path / 'run', tmp_path / 'first')
    for line in lines[::2]:
        folder, _, (python, script, *args) = args_txt_words(line)
        assert (folder, python, script) == (str(tmp_path), 'python', 'chargpt.py')
        chargpt.main(args)
    assert metrics(tmp_path / 'run') == metrics(tmp_path / 'first')


# ----------------------------------------------------------------------------------------------------------------
# bad input: a message naming it, and no file in work_dir changed

@pytest.fixture(scope='module')
def run_dir(tmp_path_factory, text):
    """A finished chargpt run (ckpt.pt after 4 iterations) that every bad input below must leave as it is."""
    work_dir = tmp_path_factory.mktemp('run')
    train(work_dir, text, '--trainer.max_iters=4', '--trainer.eval_interval=2', '--sample.length=0')
    return work_dir


def snapshot(work_dir):
    """Every file's time and content, but .lock's: a run refused after it took the lock wrote there who held it."""
    return {p.name: (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest()) for p in work_dir.iterdir()
            if p.name != '.lock'}


def refused(run_dir, args, match, error=ValueError):
    """chargpt with args in run_dir raises error matching `match` and leaves every file of run_dir as it was."""
    before = snapshot(run_dir)
    with pytest.raises(error, match=match):
        chargpt.main([f'--system.work_dir={run_dir}', *TINY, *args])
    assert snapshot(run_dir) == before


def test_a_fresh_run_never_overwrites_a_run(run_dir, text, tmp_path):
    refused(run_dir, [f'--data.path={text}'],
            re.escape(f"{run_dir} holds an earlier run (ckpt.pt: 4 iterations done) that this fresh run would "
                      "overwrite; continue it with --trainer.resume=True, train in another work_dir "
                      "(--system.work_dir=DIR), or replace it with --trainer.overwrite=True"), ConfigError)
    broken = shutil.copytree(run_dir, tmp_path / 'run')
    (broken / 'ckpt.pt').write_bytes((broken / 'ckpt.pt').read_bytes()[:1000])  # no resume is offered from this
    refused(broken, [f'--data.path={text}'], re.escape("(ckpt.pt: unreadable) that this fresh run would overwrite; "
                                                       "train in another work_dir"), ConfigError)


def test_overwrite_replaces_the_run(tmp_path, text):
    train(tmp_path, text, '--trainer.max_iters=4', '--trainer.eval_interval=2', '--sample.length=0')
    (tmp_path / 'ckpt.pt.tmp99999').write_bytes(b'left by a killed write')
    train(tmp_path, text, '--trainer.max_iters=2', '--trainer.eval_interval=2', '--sample.length=0',
          '--trainer.overwrite=True')
    assert [r['iter'] for r in metrics(tmp_path)] == [0, 1]
    assert torch.load(tmp_path / 'ckpt.pt', weights_only=True)['iter_num'] == 2
    assert not temp_files(tmp_path)


@pytest.mark.parametrize('args, match', [
    # the trainer's options
    (['--trainer.batch_size=0'], r"trainer.batch_size=0 is out of range: it must be an integer >= 1"),
    (['--trainer.batch_size=-8'], r"trainer.batch_size=-8 is out of range: it must be an integer >= 1"),
    (['--trainer.eval_iters=0'], r"trainer.eval_iters=0 is out of range: it must be an integer >= 1"),
    (['--trainer.grad_accum_steps=0'], r"trainer.grad_accum_steps=0 is out of range: it must be an integer >= 1"),
    (['--trainer.learning_rate=-1'], r"trainer.learning_rate=-1.0 is out of range: it must be a number > 0"),
    (['--trainer.learning_rate=inf'], r"trainer.learning_rate=inf is not finite: it must be a number > 0"),
    (['--trainer.max_iters=0'], r"trainer.max_iters=0 is out of range: it must be None or an integer >= 1"),
    (['--trainer.max_iters=-5'], r"trainer.max_iters=-5 is out of range: it must be None or an integer >= 1"),
    (['--trainer.checkpoint_interval=-1'], r"trainer.checkpoint_interval=-1 is out of range: it must be None or "
                                           r"an integer >= 1"),
    (['--trainer.eval_interval=-3'], r"trainer.eval_interval=-3 is out of range"),
    (['--trainer.log_interval=0'], r"trainer.log_interval=0 is out of range"),
    (['--trainer.warmup_iters=-1'], r"trainer.warmup_iters=-1 is out of range"),
    (['--trainer.weight_decay=-0.1'], r"trainer.weight_decay=-0.1 is out of range: it must be a number >= 0"),
    (['--trainer.betas=(0.9, 1.5)'], r"trainer.betas=1.5 is out of range: it must be a number >= 0 and < 1"),
    (['--trainer.num_workers=-1'], r"trainer.num_workers=-1 is out of range"),
    (['--trainer.batch_size=None'], r"trainer.batch_size=None is not a number: it must be an integer >= 1"),
    (['--trainer.betas=(0.9,)'], r"trainer.betas=\(0.9,\) must be Adam's pair \(beta1, beta2\), e.g. \(0.9, 0.95\)"),
    (['--system.seed=-1'], r"seed=-1 is out of range: it must be an integer >= 0 and <= 4294967295"),
    (['--system.seed=None'], r"seed=None is not a number"),
    (['--trainer.batch_size=6', '--trainer.grad_accum_steps=4'], r"must be a multiple of grad_accum_steps"),
    (['--trainer.resume=True', '--trainer.overwrite=True'], r"give one of them"),
    # chargpt's own
    (['--data.val_fraction=-0.1'], r"data.val_fraction=-0.1 is out of range: it must be a number > 0 and < 1"),
    (['--data.val_fraction=0'], r"data.val_fraction=0.0 is out of range"),
    (['--data.val_fraction=1.5'], r"data.val_fraction=1.5 is out of range"),
    (['--data.val_fraction=0.0001'], r"splits the text's [\d,]+ tokens into [\d,]+ to train on and 2 to validate"),
    (['--data.block_size=0'], r"data.block_size=0 is out of range: it must be an integer >= 1"),
    (['--data.block_size=-4'], r"data.block_size=-4 is out of range"),
    (['--sample.length=-1'], r"sample.length=-1 is out of range"),
    (['--model.block_size=256'], r"model.block_size=256 cannot be chosen here: the data sets it \(to 16\); leave it "
                                 r"out, and give --data.block_size=256 instead$"),
    (['--model.vocab_size=100'], r"model.vocab_size=100 cannot be chosen here: the data sets it \(to 20\)"),
    (['--sample.prompt=' + 'o god ' * 3], r"sample.prompt is 18 tokens long; it must be 1 to 16 tokens, the "
                                          r"model's context \(block_size\): shorten it, or train with a larger "
                                          r"--data.block_size"),
    (['--sample.prompt=O God'], r"sample.prompt: characters 'GO' are not in the vocabulary"),
    (['--sample.prompt='], r"sample.prompt is 0 tokens long; .*: give some text, e.g. a newline"),
])
def test_bad_options_are_refused_by_name_value_and_range(run_dir, text, args, match):
    refused(run_dir, [f'--data.path={text}', *args], match)


def test_resume_refuses_a_checkpoint_of_other_text_model_or_tokenizer(run_dir, text, tmp_path):
    other = tmp_path / 'other.txt'  # as many characters, one of them another: 4 of the 20 ids change meaning
    other.write_text(text.read_text().replace('e', 'E'))
    resume = ['--trainer.resume=True', '--trainer.max_iters=8']
    refused(run_dir, [f'--data.path={other}', *resume],
            r"cannot resume from .*ckpt.pt: its vocab is not this run's \(4 of 20 entries differ\)")
    refused(run_dir, [f'--data.path={text}', *resume, '--model.n_layer=3'],
            r"its model was built with other settings \(n_layer=2 there, 3 here\); give the model the settings it was "
            r"trained with \(the command it last ran with is in .*args.txt\), or start a new run")
    refused(run_dir, [f'--data.path={text}', *resume, f'--data.tokenizer={bpe_dir(tmp_path)}'],
            r"its tokenizer is not this run's \(the checkpoint has none\), so the model was trained with other data, "
            r"tokenizer or options \(data options: tokenizer=None there, '.*bpe' here\)")
    refused(run_dir, [f'--data.path={text}', '--trainer.resume=True', '--trainer.max_iters=4'],
            r"has trained 4 iterations already and trainer.max_iters=4: nothing is left to train")


def test_unreadable_inputs_name_the_file(run_dir, text, tmp_path):
    latin1 = tmp_path / 'latin1.txt'
    latin1.write_bytes('caf\xe9 '.encode('latin-1') * 100)
    refused(run_dir, [f'--data.path={latin1}'], re.escape(f"{latin1} is not UTF-8 text (byte 3 cannot be decoded"))
    (tmp_path / 'no_text').mkdir()  # a folder is read as its .txt files, and this one has none
    refused(run_dir, [f'--data.path={tmp_path / "no_text"}'], re.escape(f"{tmp_path / 'no_text'} is a folder with no "
                                                                        ".txt file in it"), FileNotFoundError)
    with pytest.raises(IsADirectoryError, match=re.escape(f"{tmp_path} is a folder, not a text file; pass the path")):
        read_text(tmp_path)  # generate.py's prompt_file and translate.py's data.path come straight here
    evil = tmp_path / 'evil.pt'
    torch.save({'format': 'mingpt-checkpoint-1', 'x': Exploit()}, evil)
    # overwrite: a resume from another folder may replace run_dir's run, but not before its checkpoint is read whole
    refused(run_dir, [f'--data.path={text}', f'--trainer.resume={evil}', '--trainer.max_iters=8',
                      '--trainer.overwrite=True'],
            r"evil.pt was not loaded: it holds a Python object \((posix|nt).system\) besides the tensors and plain "
            r"data of a mingpt checkpoint, .* If you trust whoever made it, load it yourself: "
            r"torch.load\(path, weights_only=False\)$")


class Exploit:
    def __reduce__(self):
        return (os.system, ('echo pwned',))


def bpe_dir(tmp_path, name='bpe', merges=(('t', 'h'), ('th', 'e'), ('Ġ', 'the'), ('i', 'n'), ('o', 'v'))):
    """A tiny byte-level BPE vocabulary in GPT-2's format: the 256 bytes, then a few merges."""
    from mingpt.bpe import bytes_to_unicode
    alphabet = list(bytes_to_unicode().values())
    encoder = {s: i for i, s in enumerate(alphabet + [a + b for a, b in merges])}
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    (folder / 'encoder.json').write_text(json.dumps(encoder))
    (folder / 'vocab.bpe').write_text('#version: 0.2\n' + ''.join(f'{a} {b}\n' for a, b in merges))
    return folder


def test_an_empty_text_is_named(run_dir, tmp_path):
    empty = tmp_path / 'empty.txt'
    empty.write_text(' \n\n')
    refused(run_dir, [f'--data.path={empty}'], r"data.path=.*empty.txt holds no text to train on")


def test_a_work_dir_that_cannot_be_written_is_named_before_training(run_dir, text, tmp_path, monkeypatch, capsys):
    refused(run_dir, [f'--data.path={text}', '--system.work_dir='], r"--system.work_dir needs a value",
            ConfigError)
    refused(run_dir, [f'--data.path={text}', f'--system.work_dir={text}/run'],
            r"system.work_dir='.*run' cannot be a directory: .*text.txt is a file; give a folder", ConfigError)
    (tmp_path / 'gone').symlink_to(tmp_path / 'nowhere')
    refused(run_dir, [f'--data.path={text}', f'--system.work_dir={tmp_path}/gone/run'],
            r"cannot be made: .*gone is a broken link; give a folder", ConfigError)
    refused(run_dir, [f'--data.path={text}', f'--system.work_dir={tmp_path}/{"x" * 300}/run'],  # passes access()
            r"system.work_dir='.*/run' cannot be made \(File name too long\); give a folder", ConfigError)
    monkeypatch.setattr(os, 'access', lambda path, mode: str(path) != str(tmp_path))  # root may write anywhere
    refused(run_dir, [f'--data.path={text}', f'--system.work_dir={tmp_path}/new/run'],
            rf"cannot be written: this user may not write in {tmp_path}; give a folder", ConfigError)
    monkeypatch.undo()
    chargpt.main([f'--data.path={text}', *TINY, '--system.work_dir=None', '--trainer.checkpoint_interval=3',
                  '--trainer.max_iters=1', '--sample.length=0'])  # no files, deliberately: said, not refused
    assert "note: trainer.work_dir is None, so no file is written (checkpoint_interval=3 included)" in \
        capsys.readouterr().out


def test_a_resume_names_the_data_options_that_changed(tmp_path, text, capsys):
    """Other text with the same characters trains on (more text, on purpose), with a note; a model-setting that the
    data decides is refused with the data option that changed it."""
    train(tmp_path, text, '--trainer.max_iters=3', '--trainer.eval_interval=3', '--sample.length=0')
    shuffled = tmp_path / 'shuffled.txt'
    shuffled.write_text('\n'.join(reversed(text.read_text().splitlines())))
    capsys.readouterr()
    assert len(train(tmp_path, shuffled, '--trainer.max_iters=6', '--trainer.eval_interval=3', '--sample.length=0',
                     '--trainer.resume=True')) == 6
    assert re.search(r"note: .*ckpt.pt was trained on other data \(data options: path='.*text.txt' there, "
                     r"'.*shuffled.txt' here\); training goes on with this run's", capsys.readouterr().out)
    # one sentence: the two groups back to back, '(block_size=16 there, 8 here) (data options: ...)', read as a slip
    with pytest.raises(ConfigError, match=r"its model was built with other settings \(block_size=16 there, 8 here\) "
                                          r"and other data options \(block_size=16 there, 8 here\); give the model"):
        train(tmp_path, shuffled, '--trainer.max_iters=9', '--trainer.resume=True', '--data.block_size=8')


def test_bpe_tokenizer_trains_samples_and_guards_resume(tmp_path, text, capsys):
    folder = bpe_dir(tmp_path)
    work_dir = tmp_path / 'run'
    records = train(work_dir, text, f'--data.tokenizer={folder}', '--trainer.max_iters=3', '--trainer.eval_interval=2',
                    '--sample.length=10')
    assert [r['iter'] for r in records] == [0, 1, 2]
    from mingpt.bpe import get_encoder
    encoder = get_encoder(folder / 'encoder.json', folder / 'vocab.bpe')
    ckpt = torch.load(work_dir / 'model.pt', weights_only=True)
    assert ckpt['model_config']['vocab_size'] == 261 and ckpt['tokenizer']['encoder'] == encoder.encoder
    assert encoder.encode(' the') == [258]  # the merges apply: ' the' is one token
    capsys.readouterr()
    chargpt.main([f'--sample.checkpoint={work_dir / "model.pt"}', '--sample.prompt=the king', '--sample.length=12'])
    assert capsys.readouterr().out.splitlines()[-1].startswith('the king')
    # a resume with characters instead, or with another BPE vocabulary, is refused
    refused(work_dir, [f'--data.path={text}', '--trainer.resume=True', '--trainer.max_iters=6'],
            r"its vocab is not this run's \(the checkpoint has none\), so the model was trained with other data, "
            r"tokenizer or options \(data options: tokenizer='.*bpe' there, None here\)")
    other = bpe_dir(tmp_path, 'other', merges=(('t', 'h'), ('e', 'Ġ'), ('i', 'n'), ('o', 'v'), ('k', 'i')))
    refused(work_dir, [f'--data.path={text}', f'--data.tokenizer={other}', '--trainer.resume=True',
                       '--trainer.max_iters=6'],
            r"its tokenizer is not this run's \(encoder: 6 of 263 entries differ; merges: 4 of 5 entries differ\)")


@pytest.mark.parametrize('project, args, message', [
    ('chargpt', ['--data.val_fraction=2'], 'data.val_fraction=2.0 is out of range: it must be a number > 0 and < 1'),
    ('adder', ['--trainer.batch_size=0'], 'trainer.batch_size=0 is out of range: it must be an integer >= 1'),
    ('sentiment', ['finetune', '--data.train_limit=0'], 'data.train_limit=0 is out of range'),
    ('ablation', ['--trainer.work_dir=out/a'], 'the ablation puts each run in system.work_dir/<variant>'),
    ('adder', ['--system.work_dir=None'], 'system.work_dir=None, but the adder keeps its most accurate model in '
                                          'work_dir/best.pt: give a folder (--system.work_dir=DIR)'),
    ('translate', ['--system.work_dir=None', '--data.n_train=100'], 'system.work_dir=None, but the trained model'),
    ('ablation', ['--system.work_dir=None'], 'system.work_dir=None, but the ablation puts each run in'),
])
def test_every_project_prints_error_and_exits_2(project, args, message, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # their default work_dirs are relative: nothing may appear there
    main = load_project(project).main
    for debug in (False, True):
        with pytest.raises(SystemExit) as e:
            run_cli(main, args + (['--debug'] if debug else []))
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert f'error: {message}' in err
        assert ('Traceback' in err) == debug
    monkeypatch.setenv('MINGPT_DEBUG', '1')
    with pytest.raises(SystemExit):
        run_cli(main, args)
    assert 'Traceback' in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_sigterm_stops_training_as_ctrl_c_does(tmp_path, text):
    """A job scheduler's stop (SIGTERM) says which checkpoint to go on from and exits 143, without a traceback."""
    run = subprocess.Popen([sys.executable, os.path.join(ROOT, 'projects', 'chargpt.py'), f'--data.path={text}', *TINY,
                            '--trainer.max_iters=100000', '--trainer.checkpoint_interval=2',
                            f'--system.work_dir={tmp_path}'], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True, env={**os.environ, 'PYTHONPATH': ROOT})
    deadline = time.time() + 120
    while progress(tmp_path) < 3 and run.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 143, err
    assert re.search(r"stopped after \d+ iterations; .*ckpt.pt was saved after \d+ iterations: go on from there with "
                     r"--trainer.resume=True\nterminated \(every file written is whole\)", err), err
    assert 'Traceback' not in err


@pytest.mark.parametrize('ignored', [False, True])
def test_a_closed_terminal_stops_a_command_as_sigterm_does_and_nohup_keeps_it_running(tmp_path, ignored):
    """Closing the terminal (SIGHUP) killed a run where it stood: a file being written left its temporary behind
    (a token cache's, never removed). Under nohup (SIGHUP ignored) the command must run on."""
    code = ("import sys, time\nfrom pathlib import Path\nfrom mingpt.utils import atomic_write, run_cli\n"
            "def write(tmp):\n    Path(tmp).write_text('half')\n    print('writing', flush=True)\n"
            "    time.sleep(float(sys.argv[2]))\n"
            "run_cli(lambda argv: atomic_write(argv[0], write), sys.argv[1:2])\n")
    ignore = (lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN)) if ignored else None  # as nohup starts it
    run = subprocess.Popen([sys.executable, '-c', code, str(tmp_path / 'out.txt'), '3' if ignored else '60'],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=ignore,
                           env={**os.environ, 'PYTHONPATH': ROOT})
    assert run.stdout.readline() == 'writing\n'
    run.send_signal(signal.SIGHUP)
    _, err = run.communicate(timeout=60)
    if ignored:
        assert run.returncode == 0 and (tmp_path / 'out.txt').read_text() == 'half', err
    else:
        assert run.returncode == 129 and 'terminated (every file written is whole)' in err and 'Traceback' not in err
        assert list(tmp_path.iterdir()) == []  # no out.txt, and no temporary of it


def test_a_terminal_that_closes_under_a_command_ends_it_with_129_and_no_file_half_written(tmp_path):
    """A real terminal closing (its window, an ssh session) hangs up the tty, so every print after SIGHUP failed with
    '[Errno 5] Input/output error', our own notes too: the exit was 1 after a chain of tracebacks, not 129."""
    pty = pytest.importorskip('pty')
    code = ("import sys, time\nfrom pathlib import Path\nfrom mingpt.utils import atomic_write, run_cli\n"
            "def write(tmp):\n    Path(tmp).write_text('half')\n    print('writing', flush=True)\n    time.sleep(60)\n"
            "run_cli(lambda argv: atomic_write(argv[0], write), sys.argv[1:2])\n")
    pid, terminal = pty.fork()
    if pid == 0:  # the command, in a terminal of its own
        try:
            os.execve(sys.executable, [sys.executable, '-c', code, str(tmp_path / 'out.txt')],
                      {**os.environ, 'PYTHONPATH': ROOT})
        finally:
            os._exit(127)  # never back into pytest in the child
    seen = b''
    while b'writing' not in seen:
        seen += os.read(terminal, 100)
    os.close(terminal)  # the window closes: the kernel hangs up the tty and sends SIGHUP to the command
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 129
    assert list(tmp_path.iterdir()) == []  # no out.txt, and no temporary of it


def test_a_second_stop_signal_does_not_cut_the_first_ones_cleanup_short():
    """Under torchrun a closed terminal's SIGHUP reaches a worker twice (from the terminal and from the agent): the
    second raised again inside the cleanup that the first had started (2 runs in 20 left a temporary file)."""
    cleaned = []

    def main(argv):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this ends
        finally:  # e.g. atomic_write removing its temporary file
            os.kill(os.getpid(), signal.SIGTERM)
            cleaned.append(True)
    with pytest.raises(SystemExit) as stop:
        run_cli(main, [])
    assert stop.value.code == 143 and cleaned == [True]


def test_run_cli_leaves_sigterm_as_it_was_and_runs_outside_the_main_thread():
    before = signal.getsignal(signal.SIGTERM)
    assert run_cli(lambda argv: signal.getsignal(signal.SIGTERM), []) is not before  # its own handler, meanwhile
    assert signal.getsignal(signal.SIGTERM) == before
    results = []  # a thread may not set signal handlers: run_cli runs main there without one
    thread = threading.Thread(target=lambda: results.append(run_cli(lambda argv: 'ran', [])))
    thread.start()
    thread.join()
    assert results == ['ran']


def test_a_closed_pipe_ends_a_command_quietly():
    """`python projects/generate.py ... | head`: once the reader has gone, no error and no traceback."""
    code = ("from mingpt.utils import run_cli\n"
            "run_cli(lambda argv: [print('x' * 1000, flush=True) for _ in range(100000)])\n")
    run = subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env={**os.environ, 'PYTHONPATH': ROOT})
    run.stdout.read(3000)
    run.stdout.close()  # as head does after its lines
    _, err = run.communicate(timeout=60)
    assert run.returncode == 141 and err == b'', err


def test_ctrl_c_exits_130_without_a_traceback(capsys):
    def interrupted(argv):
        raise KeyboardInterrupt
    for debug in (False, True):
        with pytest.raises(SystemExit) as e:
            run_cli(interrupted, ['--debug'] if debug else [])
        assert e.value.code == 130
        err = capsys.readouterr().err
        assert 'interrupted (every file written is whole)' in err
        assert ('Traceback' in err) == debug


@pytest.mark.parametrize('variable', ['MINGPT_DATA_DIR', 'MINGPT_CACHE_DIR'])
def test_a_folder_variable_set_with_quotes_is_refused_before_anything_is_written(variable, text, tmp_path, capsys,
                                                                                monkeypatch):
    """Windows' cmd keeps the quotes of set MINGPT_CACHE_DIR="C:\\My Cache" in the value: the tokens went to a folder
    named '"' in the current folder (on Windows: an invalid file name), and a quoted data folder was never found."""
    folder = tmp_path / 'My Data'
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(variable, f'"{folder}"')
    with pytest.raises(SystemExit) as e:
        run_cli(chargpt.main, TINY + [f'--data.path={text}', '--trainer.max_iters=1', '--system.work_dir=run'])
    assert e.value.code == 2
    assert (f'error: {variable}="{folder}" has quotation marks around it, which cmd\'s set keeps as part of the '
            f'value: set it without them (set {variable}={folder})') in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
