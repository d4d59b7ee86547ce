import errno
import json
import math
import os
import random
import re
import subprocess
import sys
import tracemalloc
import unicodedata
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import args_txt_words, data_dir, full_disk_at, load_project, started_as_script
from mingpt.checkpoint import load_checkpoint, save_checkpoint
from mingpt.data import CharDataset
from mingpt.utils import (RECORDED_VARIABLES, CfgNode as CN, ConfigError, args_of, atomic_write,
                          check_dataset_for_workers, check_range, lock_folder, make_folder, remove_stale_temps,
                          resolve_device, run_cli, set_from_data, set_seed, setup_logging, started_as)


def make():
    C = CN()
    C.trainer = CN(batch_size=64, learning_rate=3e-4, betas=(0.9, 0.95), compile=False, device='auto')
    C.model = CN(model_type='gpt-mini', n_layer=None)
    return C


def test_merge_from_args_parses_literals_and_keeps_strings():
    C = make()
    C.merge_from_args(['--trainer.batch_size=32', '--trainer.learning_rate=1e-3', '--trainer.betas=(0.8, 0.9)',
                       '--trainer.compile=True', '--trainer.device=cuda:1', '--model.n_layer=4',
                       '--model.model_type=None'])
    assert C.trainer.batch_size == 32 and C.trainer.learning_rate == 1e-3
    assert C.trainer.betas == (0.8, 0.9) and C.trainer.compile is True
    assert C.trainer.device == 'cuda:1' and C.model.n_layer == 4 and C.model.model_type is None


def test_a_config_shows_its_tree_as_a_notebook_cell_value():
    """A cell ending with `config` (or `config.trainer`) showed '<mingpt.utils.CfgNode object at 0x...>': IPython
    shows an object's repr."""
    C = make()
    assert repr(C) == str(C) and repr(C.trainer).startswith('batch_size: 64\nlearning_rate: 0.0003\n')
    assert repr(CN()) == 'CfgNode()'  # not an empty output


def test_a_list_of_names_may_be_written_with_commas():
    C = CN(ablation=CN(variants=('gpt2', 'relu'), seeds=(1, 2)))
    C.merge_from_args(['--ablation.variants=gpt2', '--ablation.seeds=5'])
    assert C.ablation.variants == ('gpt2',) and C.ablation.seeds == (5,)
    C.merge_from_args(['--ablation.seeds=3,4'])
    assert C.ablation.seeds == (3, 4)
    C.merge_from_args(['--ablation.variants=post-norm, relu'])
    assert C.ablation.variants == ('post-norm', 'relu')
    C.merge_from_args(["--ablation.variants=('gpt2', 'sinusoidal')"])  # a Python literal, as before
    assert C.ablation.variants == ('gpt2', 'sinusoidal')


def test_a_list_option_empty_by_default_takes_one_item_or_several():
    C = CN(data=CN(files=[], skip=()))
    C.merge_from_args(['--data.files=a.txt,b.txt', '--data.skip=3'])
    assert C.data.files == ['a.txt', 'b.txt'] and C.data.skip == (3,)
    C.merge_from_args(['--data.files=c.txt', '--data.skip=1,2'])
    assert C.data.files == ['c.txt'] and C.data.skip == (1, 2)
    for wrong in (None, True):
        with pytest.raises(ConfigError, match=r"config key 'data.files' expects a value of type list"):
            C.merge_from_dict({'data': {'files': wrong}})


def test_a_list_for_a_tuple_option_becomes_a_tuple_and_a_value_may_hold_equals_signs():
    C = make()
    C.model.model_type = 'x'
    C.merge_from_args(['--trainer.betas=[0.8, 0.9]', '--model.model_type=a=b'])
    assert C.trainer.betas == (0.8, 0.9) and isinstance(C.trainer.betas, tuple) and C.model.model_type == 'a=b'


def test_int_is_fine_for_float_and_string_default_keeps_digits():
    C = make()
    C.merge_from_args(['--trainer.learning_rate=1', '--trainer.device=123'])
    assert C.trainer.learning_rate == 1.0 and isinstance(C.trainer.learning_rate, float)
    assert C.trainer.device == '123'


def test_unknown_key_names_key_and_lists_valid_keys():
    with pytest.raises(ConfigError) as e:
        make().merge_from_args(['--trainer.bach_size=32'])
    msg = str(e.value)
    assert "trainer.bach_size" in msg and "batch_size" in msg and "learning_rate" in msg
    with pytest.raises(ConfigError, match="key 'trainr'; valid keys here are: model, trainer"):
        make().merge_from_args(['--trainr.batch_size=32'])
    with pytest.raises(ConfigError, match="config key 'trainer.batch_size' is a value, not a section"):
        make().merge_from_args(['--trainer.batch_size.x=32'])


@pytest.mark.parametrize('arg, fragment', [
    ('--trainer.batch_size=big', "'trainer.batch_size' expects a value of type int"),
    ('--trainer.batch_size=2.5', "got 2.5"),
    ('--trainer.compile=1', "expects a value of type bool"),
    ('--trainer.betas=high', "expects a value of type tuple"),
])
def test_wrong_type_names_key_type_and_value(arg, fragment):
    with pytest.raises(ConfigError, match=fragment):
        make().merge_from_args([arg])


def test_space_separated_values_flags_and_unique_short_keys():
    C = make()
    C.merge_from_args(['--trainer.batch_size', '32', '--compile', '--learning_rate', '0.01', '--model_type=gpt2'])
    assert C.trainer.batch_size == 32 and C.trainer.compile is True and C.trainer.learning_rate == 0.01
    assert C.model.model_type == 'gpt2'
    C.model.batch_size = 1  # now 'batch_size' is ambiguous: the short form names both
    with pytest.raises(ConfigError, match="'--batch_size' could be any of --model.batch_size, --trainer.batch_size: "
                                          "give the one you mean"):
        C.merge_from_args(['--batch_size=3'])
    C.merge_from_args(['--trainer.learning_rate=None'])  # a number may be None ('off'); range checks say where not
    assert C.trainer.learning_rate is None


def test_malformed_argument_and_section_assignment():
    with pytest.raises(ConfigError, match="--section.key=value"):
        make().merge_from_args(['trainer.batch_size=32'])
    with pytest.raises(ConfigError, match="is a section"):
        make().merge_from_args(['--trainer=3'])


def test_a_stray_argument_is_shown_the_form_with_an_option_of_this_config():
    """generate.py and attention.py have no trainer section: the example names an option they have, where it said
    --trainer.batch_size=32 to every project."""
    for name in ('generate', 'attention'):
        config = load_project(name).get_config()
        with pytest.raises(ConfigError, match="cannot read argument 'hello': expected the form") as e:
            config.merge_from_args(['hello'])
        option = re.search(r'e\.g\. (--[\w.]+)=', str(e.value))[1]
        config.merge_from_args([f'{option}=2'])  # an option of this config: it parses


def test_help_prints_config_and_exits(capsys):
    with pytest.raises(SystemExit) as e:
        make().merge_from_args(['--help'])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "batch_size: 64" in out and "model_type: 'gpt-mini'" in out


def test_options_given_as_one_string_or_with_a_number_are_refused_by_name():
    """From a notebook, main('--trainer.max_iters=50') was read a character at a time ("cannot read argument '-'"),
    and main(['--trainer.max_iters', 50]) failed with an AttributeError on the int."""
    for args in ('--trainer.batch_size=50', ['--trainer.batch_size', 50]):
        with pytest.raises(ConfigError, match=r"options are a list of strings, such as \['--trainer.max_iters=50'\], "
                                              r"not .*shlex.split"):
            make().merge_from_args(args)
    config = make()
    config.merge_from_args(('--trainer.batch_size', '50'))  # a tuple of strings is fine
    assert config.trainer.batch_size == 50


def test_a_bare_double_dash_is_not_an_option():
    with pytest.raises(ConfigError, match=r"cannot read argument '--': options are --section.key=value"):
        make().merge_from_args(['--', 'x'])


def test_help_wins_wherever_it_stands(capsys):
    for args in (['--trainr.batch_size=3', '--help'], ['--model.model_type', '-h']):  # not read as the value
        with pytest.raises(SystemExit) as e:
            make().merge_from_args(args)
        assert e.value.code == 0 and 'batch_size: 64' in capsys.readouterr().out


def test_a_path_or_text_option_keeps_what_was_typed(monkeypatch):
    """A file named 1984 is not the number 1984; ~ is the home directory, which the shell does not expand after
    '--key='; a bare path option has no value to use. Numeric options with a None default still read numbers."""
    monkeypatch.setenv('HOME', '/home/me')
    C = make()
    C.data = CN(path=None, text=None, top_k=None)
    C.system = CN(work_dir='./out')
    C.merge_from_args(['--data.path=1984', '--data.text=42', '--data.top_k=5', '--system.work_dir=~/runs/a',
                       '--model.model_type=7'])
    assert (C.data.path, C.data.text, C.data.top_k) == ('1984', '42', 5)
    assert C.system.work_dir == '/home/me/runs/a' and C.model.model_type == '7'
    C.merge_from_args(['--data.path=None', '--data.text=~/x'])  # None: not given; ~ only in paths
    assert C.data.path is None and C.data.text == '~/x'
    C.merge_from_args(['--data.text="to be"'])  # a quoted string literal: its text, without the quotes
    assert C.data.text == 'to be'
    for bare in ('--data.path', '--trainer.batch_size', '--data.path='):  # a flag only where the option is one
        with pytest.raises(ConfigError, match=rf"{bare.rstrip('=')} needs a value: {bare.rstrip('=')}=\.\.\."):
            C.merge_from_args([bare])  # (or None: resume); an empty path, e.g. an unset $FILE, is none either


def test_none_for_a_text_option_with_text_by_default_is_no_text():
    """--sample.prompt=None crashed chargpt (a TypeError in the tokenizer); as no text, the project says what it
    needs. A text option whose default is None (sentiment's data.text: 'the SST-2 sentences') keeps None."""
    C = make()
    C.sample = CN(prompt='O God, O God!', text='the 3rd of March, 2021')
    C.data = CN(text=None)
    C.merge_from_args(['--sample.prompt=None', '--sample.text=None', '--data.text=None'])
    assert (C.sample.prompt, C.sample.text, C.data.text) == ('', '', None)


def test_chargpt_refuses_no_prompt_with_a_message():
    chargpt = load_project('chargpt')
    config = chargpt.get_config()
    config.merge_from_args(['--sample.prompt=None'])
    with pytest.raises(ConfigError, match=r"sample.prompt is 0 tokens long.*give some text"):
        chargpt.prompt_ids(chargpt.CharTokenizer(list('ab\n')), config.sample.prompt, 8)


def test_merge_from_dict_nested_and_checked():
    C = make()
    C.merge_from_dict({'trainer': {'batch_size': 8}})
    assert C.trainer.batch_size == 8
    with pytest.raises(ConfigError, match="trainer.nope"):
        C.merge_from_dict({'trainer': {'nope': 1}})


def test_merge_from_dict_takes_numpy_and_torch_scalars_as_python_numbers():
    # np.int64 is an int to minGPT's merge_from_dict and to torch; it was refused as "expects int, got int64"
    C = make()
    C.merge_from_dict({'trainer': {'batch_size': np.int64(8), 'learning_rate': np.float32(0.5)}})
    assert (C.trainer.batch_size, C.trainer.learning_rate) == (8, 0.5)
    assert type(C.trainer.batch_size) is int and type(C.trainer.learning_rate) is float
    C.merge_from_dict({'trainer': {'batch_size': torch.tensor(4)}})
    assert type(C.trainer.batch_size) is int and json.loads(json.dumps(C.to_dict()))['trainer']['batch_size'] == 4


def test_str_and_to_dict():
    C = make()
    assert C.to_dict()['trainer']['batch_size'] == 64
    assert "trainer:\n    batch_size: 64" in str(C)


def test_set_seed_takes_a_whole_float_and_names_a_bad_seed():
    set_seed(3.0)
    a = torch.rand(2)
    set_seed(3)
    assert torch.equal(a, torch.rand(2))
    with pytest.raises(ConfigError, match=r"seed=-1 is out of range: it must be an integer >= 0 and <= 4294967295"):
        set_seed(-1)


def test_set_seed_seeds_python_numpy_and_torch_as_their_own_seeding_does():
    set_seed(7)
    drawn = random.random(), np.random.rand(), torch.rand(1).item()
    assert drawn == (random.Random(7).random(), np.random.RandomState(7).rand(),
                     torch.rand(1, generator=torch.Generator().manual_seed(7)).item())


def test_minGPTs_sample_continues_as_its_loop_did_cropping_a_long_context():
    """minGPT's scripts and notebooks of 2020-2022 (adder, chargpt, generate.ipynb, play_char) import sample from
    mingpt.utils; here it is checked against minGPT's loop written out: crop to block_size, forward, argmax."""
    from mingpt.model import GPT
    from mingpt.utils import sample
    C = GPT.get_default_config()
    C.model_type, C.vocab_size, C.block_size = 'gpt-nano', 65, 8
    set_seed(0)
    model = GPT(C)  # in train mode: sample puts it in eval mode, as minGPT's did
    for prompt in (torch.randint(65, (2, 5)), torch.randint(65, (2, 20))):  # the second is longer than block_size
        model.eval()
        expected = prompt
        for _ in range(12):  # past block_size: the window slides
            logits, _ = model(expected[:, -8:])
            expected = torch.cat([expected, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        model.train()
        got = sample(model=model, x=prompt, steps=12, sample=False)  # the keywords of minGPT's HF import test
        assert not model.training and torch.equal(got, expected)
        # sampling and top_k reach the draw: one candidate is the greedy choice, 65 almost never are
        assert torch.equal(sample(model, prompt, 12, temperature=1.0, sample=True, top_k=1), expected)
        set_seed(0)
        assert not torch.equal(sample(model, prompt, 12, sample=True), expected)


def test_setup_logging(tmp_path, monkeypatch):
    C = CN(system=CN(work_dir=str(tmp_path / 'run')), x=CN(a=1))
    monkeypatch.setenv('RANK', '1')  # under torchrun only rank 0 writes
    setup_logging(C)
    assert not (tmp_path / 'run').exists()
    monkeypatch.delenv('RANK')
    started_as_script(monkeypatch, ['projects/chargpt.py', '--system.work_dir=my runs/é', "--sample.prompt=it's"])
    monkeypatch.chdir(tmp_path)
    setup_logging(C)
    assert json.load(open(tmp_path / 'run' / 'config.json'))['x'] == {'a': 1}
    command = (tmp_path / 'run' / 'args.txt').read_text()  # quoted, so that a shell reads the same arguments back
    assert args_txt_words(command)[::2] == (str(tmp_path), ['python', *sys.argv])
    setup_logging(C, tmp_path / 'elsewhere')
    assert sorted(p.name for p in (tmp_path / 'elsewhere').iterdir()) == ['args.txt', 'config.json']


@pytest.fixture
def no_recorded_variables(monkeypatch):
    """A shell without the variables args.txt records (CI sets MINGPT_DATA_DIR), for tests that read its text whole."""
    for name in RECORDED_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_setup_logging_called_by_a_script_over_a_held_run_keeps_its_commands(tmp_path, monkeypatch,
                                                                               no_recorded_variables):
    """minGPT's scripts call setup_logging(config) first: over a run that work_dir holds, it replaced that run's
    args.txt (its whole history of commands) before the Trainer refused the fresh run or resumed it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'args.txt').write_text('cd /there && python chargpt.py\n# resumed at iteration 500:\ncd /there && x\n')
    save_checkpoint({'iter_num': 1000}, tmp_path / 'ckpt.pt')
    started_as_script(monkeypatch, ['chargpt.py', '--trainer.resume=True'])
    setup_logging(CN(system=CN(work_dir=str(tmp_path))))
    assert (tmp_path / 'args.txt').read_text() == (
        'cd /there && python chargpt.py\n# resumed at iteration 500:\ncd /there && x\n# then, with the run above held '
        f'here:\ncd {tmp_path} && python chargpt.py --trainer.resume=True\n')
    (tmp_path / 'ckpt.pt').unlink()  # no run held (or the Trainer of an overwrite removed it): a record of its own
    setup_logging(CN(system=CN(work_dir=str(tmp_path))))
    assert (tmp_path / 'args.txt').read_text() == f'cd {tmp_path} && python chargpt.py --trainer.resume=True\n'


def test_a_resume_over_an_args_txt_of_older_mingpt_puts_its_note_on_a_line_of_its_own(tmp_path, monkeypatch,
                                                                                        no_recorded_variables):
    """mingpt's first versions wrote args.txt as the script and its options, without a final newline: a resume with
    today's code glued '# resumed at iteration 6:' onto the old command, which a shell then read as more options."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'args.txt').write_text('projects/chargpt.py --trainer.max_iters=6')  # as 4b47e87's chargpt wrote it
    started_as_script(monkeypatch, ['chargpt.py', '--trainer.resume=True'])
    setup_logging(CN(system=CN(work_dir=str(tmp_path))), resumed_at=6)
    assert (tmp_path / 'args.txt').read_text().splitlines() == [
        'projects/chargpt.py --trainer.max_iters=6', '# resumed at iteration 6:',
        f'cd {tmp_path} && python chargpt.py --trainer.resume=True']


def test_setup_logging_called_by_a_script_before_an_overwrite_starts_the_record_anew(tmp_path, monkeypatch,
                                                                                     no_recorded_variables):
    """The run held is replaced, so its commands are not this run's history: they were kept above the overwrite's
    command, marked 'then, with the run above held here', of a run the Trainer then removed."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'args.txt').write_text('cd /there && python chargpt.py\n')
    save_checkpoint({'iter_num': 1000}, tmp_path / 'ckpt.pt')
    started_as_script(monkeypatch, ['chargpt.py', '--trainer.overwrite=True'])
    setup_logging(CN(system=CN(work_dir=str(tmp_path)), trainer=CN(overwrite=True)))
    assert (tmp_path / 'args.txt').read_text() == f'cd {tmp_path} && python chargpt.py --trainer.overwrite=True\n'
    # so does a resume from another folder's checkpoint that replaces the run: its args.txt said the replaced run's
    # command, then '# resumed at iteration 4:', as if that run had been resumed
    (tmp_path / 'args.txt').write_text('cd /there && python chargpt.py\n')
    started_as_script(monkeypatch, ['chargpt.py', '--trainer.resume=a/ckpt.pt', '--trainer.overwrite=True'])
    setup_logging(CN(system=CN(work_dir=str(tmp_path)), trainer=CN(overwrite=True)), resumed_at=4)
    assert (tmp_path / 'args.txt').read_text() == (f'cd {tmp_path} && python chargpt.py --trainer.resume=a/ckpt.pt '
                                                   '--trainer.overwrite=True\n')


def test_config_json_and_checkpoints_hold_a_configs_paths_and_numpy_numbers_as_plain_values(tmp_path):
    # json.dumps refused both (a TypeError traceback at the run's start), and a checkpoint could not have been read
    C = CN(system=CN(work_dir=str(tmp_path)),
           data=CN(folder=Path('poems'), files=[Path('a.txt')], vocab_size=np.int64(61), frac=np.float32(0.5)))
    plain = {'folder': 'poems', 'files': ['a.txt'], 'vocab_size': 61, 'frac': 0.5}
    setup_logging(C)
    assert json.loads((tmp_path / 'config.json').read_text())['data'] == plain
    save_checkpoint({'config': C.to_dict()}, tmp_path / 'ckpt.pt')  # as the Trainer keeps its run_config
    assert load_checkpoint(tmp_path / 'ckpt.pt')['config']['data'] == plain
    assert C.data.folder == Path('poems')  # the config itself is left as it is


def test_a_resume_never_copies_what_a_linked_args_txt_points_to_into_the_run(tmp_path, monkeypatch):
    """A run folder from elsewhere, with args.txt a link to a private file: resumed, the run's args.txt (to be shared
    with the run) held that file's contents above the resume's command."""
    secret, run = tmp_path / 'id_rsa', tmp_path / 'run'
    secret.write_text('PRIVATE KEY\n')
    run.mkdir()
    (run / 'args.txt').symlink_to(secret)
    started_as_script(monkeypatch, ['projects/chargpt.py', '--trainer.resume=True'])
    setup_logging(CN(system=CN(work_dir=str(run))), resumed_at=500)
    assert 'PRIVATE' not in (run / 'args.txt').read_text() and secret.read_text() == 'PRIVATE KEY\n'
    assert not (run / 'args.txt').is_symlink()


def test_args_txt_of_a_run_started_in_a_notebook_says_so(tmp_path, monkeypatch):
    """chargpt.main([...]) in a notebook cell wrote the kernel's command line (python .../ipykernel_launcher.py -f
    /tmp/tmp....json) as the command to paste back, and a refused resume pointed at it. The note's line, pasted into
    a cell of the notebook (whose folder is not the run's), opened 'config.json' there: it names the run's."""
    monkeypatch.setattr('sys.argv', ['/usr/lib/python3/site-packages/ipykernel_launcher.py', '-f', '/tmp/k.json'])
    monkeypatch.delattr(sys.modules['__main__'], '__file__', raising=False)  # a notebook's __main__ has no file
    monkeypatch.chdir(tmp_path)
    setup_logging(CN(system=CN(work_dir='out/run')))
    assert (tmp_path / 'out/run/args.txt').read_text() == (
        "# started from Python (a notebook, python -c or -), not by a command: config.json holds its options; "
        f"main(mingpt.utils.args_of(json.load(open({str(tmp_path / 'out/run/config.json')!r}))) + "
        "['--system.work_dir=DIR']) redoes it\n")


def test_args_txt_of_a_run_piped_to_python_says_it_was_started_from_python(tmp_path, monkeypatch):
    """A run piped in (python - <<EOF ... chargpt.main([...]) ... EOF: __main__.__file__ is '<stdin>') wrote `cd ... &&
    python -` as the command to paste back, which waits for a script on stdin: it has no command, as a notebook."""
    monkeypatch.setattr('sys.argv', ['-'])
    monkeypatch.setattr(sys.modules['__main__'], '__file__', '<stdin>', raising=False)
    setup_logging(CN(system=CN(work_dir=str(tmp_path))))
    text = (tmp_path / 'args.txt').read_text()
    assert text.startswith("# started from Python") and ' && ' not in text, text


def test_a_run_started_as_another_script_records_its_command_also_from_a_notebook(tmp_path, monkeypatch):
    """started_as (the ablation runs chargpt's main with it) records the run as `python chargpt.py ARGS`, also in a
    notebook, whose runs otherwise hold only a note: pasted into a shell, that command redoes the run alone. Leaving
    it, however the run ended, gives back the caller's sys.argv and its own record (a notebook's note again)."""
    kernel = ['/usr/lib/python3/site-packages/ipykernel_launcher.py', '-f', '/tmp/k.json']
    monkeypatch.setattr('sys.argv', list(kernel))
    monkeypatch.delattr(sys.modules['__main__'], '__file__', raising=False)  # a notebook's __main__ has no file
    with pytest.raises(KeyboardInterrupt):
        with started_as('projects/chargpt.py', ['--model.activation=relu', "--data.path=it's.txt"]):
            setup_logging(CN(system=CN(work_dir=str(tmp_path / 'relu'))))
            raise KeyboardInterrupt  # the run stopped part way
    assert sys.argv == kernel
    folder, _, words = args_txt_words((tmp_path / 'relu' / 'args.txt').read_text())
    assert (folder, words) == (os.getcwd(), ['python', 'projects/chargpt.py', '--model.activation=relu',
                                             "--data.path=it's.txt"])
    setup_logging(CN(system=CN(work_dir=str(tmp_path / 'after'))))  # the notebook's own next run
    assert (tmp_path / 'after' / 'args.txt').read_text().startswith('# started from Python')


def test_args_of_a_config_are_read_back_as_the_config_itself():
    """args_of gives main(argv) a run's config.json: each value comes back with its type (text that reads as a
    number or a bool, a path with a quote, None over a default, a tuple written as JSON's list, a nested section)."""
    C = make()
    C.sample = CN(prompt='1984', text='True', path="it's ~here", length=0)
    C.trainer.merge_from_dict(dict(batch_size=8, learning_rate=1e-3, betas=[0.8, 0.99], compile=True, device='cpu'))
    C.model.n_layer = 3
    saved = json.loads(json.dumps(C.to_dict()))  # config.json
    for given in (C, saved):
        again = make()
        again.sample = CN(prompt='O God', text='', path=None, length=500)
        again.merge_from_args(args_of(given))
        assert again.to_dict() == C.to_dict()
    assert args_of(C)[-4:] == ["--sample.prompt='1984'", "--sample.text='True'", "--sample.path=it's ~here",
                               '--sample.length=0']


def test_args_of_reads_back_infinity_nan_and_a_dict_valued_option():
    """grad_norm_clip=float('inf') set in Python (the norm logged, never clipped) came back as the text 'inf', which
    main refused ('expects a value of type float ... got 'inf''), and so did nan; a dict-valued option was written as
    a section (--trainer.extra.a=1), refused as 'is a value, not a section'. Both read back now, from the config and
    from its config.json (whose dicts look like sections: their keys are set one by one in the option's dict)."""
    default = {'warmup': 2}

    def config():
        C = make()
        C.trainer.grad_norm_clip, C.trainer.label_smoothing, C.trainer.floor = 1.0, 0.1, 0.0
        C.trainer.extra = default
        return C
    C = config()
    C.trainer.merge_from_dict(dict(grad_norm_clip=math.inf, label_smoothing=math.nan, floor=-math.inf,
                                   extra={'warmup': '5', 'decay': {'to': 0.1}, 'on': True}))
    saved = json.loads(json.dumps(C.to_dict()))  # config.json (which writes inf as Infinity, nan as NaN)
    for given in (C, saved):
        again = config()
        again.merge_from_args(args_of(given))
        assert repr(again.to_dict()) == repr(C.to_dict())  # repr: nan != nan
    assert "--trainer.extra={'warmup': '5', 'decay': {'to': 0.1}, 'on': True}" in args_of(C)
    assert default == {'warmup': 2}  # set key by key in a copy: the default's dict, which others hold, is unchanged
    assert args_of(CN(x=CN(device='inf'))) == ["--x.device='inf'"]  # the text stays text
    C.trainer.betas = (0.9, math.inf)  # a literal cannot hold inf: refused by name, not read back as text
    with pytest.raises(ConfigError, match=r"trainer.betas=\(0.9, inf\) cannot be written as an option that reads "
                                          r"back as it is"):
        args_of(C)


def test_one_key_of_a_dict_valued_option_is_set_and_its_other_keys_kept_at_every_depth():
    """--trainer.extra.decay.to=0.2 on a dict-valued option sets that one key: the option's other keys stay, also
    those beside it in a nested dict, and the default's dicts, which every config made from it holds, are unchanged."""
    default = {'warmup': 2, 'decay': {'to': 0.1, 'kind': 'cos'}}
    C = make()
    C.trainer.extra = default
    C.merge_from_args(['--trainer.extra.decay.to=0.2', '--trainer.extra.decay.steps=inf'])
    assert C.trainer.extra == {'warmup': 2, 'decay': {'to': 0.2, 'kind': 'cos', 'steps': math.inf}}
    assert default == {'warmup': 2, 'decay': {'to': 0.1, 'kind': 'cos'}}


def test_args_of_a_projects_config_redoes_it_in_another_work_dir():
    """sentiment reads its stage as typed: args_of's --system.stage='pretrain' was 'unknown stage "'pretrain'"'. And
    the trainer's work_dir (taken from system.work_dir and recorded in config.json) pinned the old folder where
    --system.work_dir named another."""
    sentiment = load_project('sentiment')
    config = sentiment.parse_args(['pretrain', '--system.work_dir=out/first'])[0]
    config.trainer.work_dir = config.system.work_dir  # as the trainer records it
    again = sentiment.parse_args(args_of(json.loads(json.dumps(config.to_dict()))) + ['--system.work_dir=out/again'])[0]
    assert again.system.stage == 'pretrain' and again.system.work_dir == 'out/again'
    assert again.trainer.work_dir in (None, 'out/again')


def test_args_of_a_resumed_run_redoes_it_from_its_start_in_another_work_dir(tmp_path, monkeypatch):
    """A resumed run's config.json holds trainer.resume=True: args.txt's note, main(args_of(config.json) +
    ['--system.work_dir=DIR']), stopped with 'no such folder' in DIR. It is left out, so the redo trains anew; a
    resume from a checkpoint's path is where the run started, and is kept."""
    chargpt = load_project('chargpt')
    monkeypatch.chdir(tmp_path)
    run = ['--data.path=' + str(data_dir('tinyshakespeare', 'input.txt')), '--model.model_type=gpt-nano',
           '--data.block_size=8', '--trainer.batch_size=2', '--sample.length=0', '--trainer.eval_interval=0',
           '--trainer.checkpoint_interval=1', '--system.work_dir=out/run']
    chargpt.main(run + ['--trainer.max_iters=1'])
    chargpt.main(run + ['--trainer.max_iters=2', '--trainer.resume=True'])
    config = json.loads((tmp_path / 'out/run/config.json').read_text())
    assert config['trainer']['resume'] is True
    chargpt.main(args_of(config) + ['--system.work_dir=out/again'])  # refused before: no out/again to resume
    assert [json.loads(line)['iter'] for line in (tmp_path / 'out/again/metrics.jsonl').open()] == [0, 1]
    config['trainer']['resume'] = 'out/run/ckpt.pt'
    assert '--trainer.resume=out/run/ckpt.pt' in args_of(config)  # text as typed


def test_args_txt_pasted_into_a_shell_sets_the_data_folder_and_threads_the_run_had(tmp_path, monkeypatch):
    """The command was a bare `python ...`: pasted into another shell, a run whose data came from $MINGPT_DATA_DIR
    looked for it elsewhere (or downloaded it), and one on OMP_NUM_THREADS=1 got other last digits."""
    (tmp_path / 'show.py').write_text("import os, sys\n"
                                      "print([os.environ.get('MINGPT_DATA_DIR'), os.environ.get('OMP_NUM_THREADS')])\n"
                                      "print(sys.argv[1:])\n")
    monkeypatch.chdir(tmp_path)
    started_as_script(monkeypatch, ['show.py', "--data.path=it's.txt"])
    monkeypatch.setenv('MINGPT_DATA_DIR', str(tmp_path / "my data's folder"))
    monkeypatch.setenv('OMP_NUM_THREADS', '3')
    setup_logging(CN(system=CN(work_dir=str(tmp_path / 'run'))))
    (tmp_path / 'bin').mkdir()  # `python` as the shell finds it: this interpreter
    (tmp_path / 'bin' / 'python').symlink_to(sys.executable)
    env = {name: value for name, value in os.environ.items() if name not in ('MINGPT_DATA_DIR', 'OMP_NUM_THREADS')}
    env['PATH'] = f"{tmp_path / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    out = subprocess.run(['bash', '-c', (tmp_path / 'run' / 'args.txt').read_text()], cwd='/', env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [repr([str(tmp_path / "my data's folder"), '3']), repr(["--data.path=it's.txt"])]


def test_args_txt_is_utf8_whatever_the_locale(tmp_path):
    """Windows writes a text file in its 'ANSI' code page (cp1252) unless told which encoding, and a folder or option
    with a character outside it (\u0141, \u2192) refused the run at start. Here the locale's encoding is ASCII."""
    code = ("import sys; from mingpt.utils import CfgNode as CN, setup_logging; "
            "sys.argv = ['chargpt.py', '--sample.prompt=\\u0141\\u00f3d\\u017a \\u2192']; "
            "sys.modules['__main__'].__file__ = 'chargpt.py'; "  # as a script, not python -c
            f"setup_logging(CN(system=CN(work_dir={str(tmp_path)!r})))")
    (tmp_path / 'chargpt.py').write_text('')  # the script, there
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]), LC_ALL='C', PYTHONUTF8='0',
               PYTHONCOERCECLOCALE='0')
    out = subprocess.run([sys.executable, '-c', code], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    args = (tmp_path / 'args.txt').read_text(encoding='utf-8')
    assert args.endswith("'--sample.prompt=\u0141\u00f3d\u017a \u2192'\n")


@pytest.mark.parametrize('nodes, procs, launch', [('1', '2', ['torchrun', '--standalone', '--nproc_per_node=2']),
                                                   ('2', '8', ['torchrun', '--nnodes=2', '--nproc_per_node=8'])])
def test_args_txt_of_a_torchrun_run_is_a_torchrun_command(tmp_path, monkeypatch, nodes, procs, launch):
    """Pasted back, it starts as many processes (as 'python ...' it trained in one, and a resume went on so)."""
    for key, value in {'RANK': '0', 'WORLD_SIZE': str(int(nodes) * int(procs)), 'LOCAL_WORLD_SIZE': procs,
                       'GROUP_WORLD_SIZE': nodes}.items():
        monkeypatch.setenv(key, value)
    started_as_script(monkeypatch, ['projects/chargpt.py', '--trainer.max_iters=9'])
    setup_logging(CN(system=CN(work_dir=str(tmp_path))))
    command, *rest = (tmp_path / 'args.txt').read_text().splitlines()
    assert args_txt_words(command)[2] == [*launch, *sys.argv]
    assert rest == ([] if nodes == '1' else ['# on each machine, with the rendezvous options it was started with '
                                             '(--rdzv_id, --rdzv_endpoint)'])


@pytest.mark.parametrize('value, kwargs, message', [
    (0, dict(low=1, integer=True), "x=0 is out of range: it must be an integer >= 1"),
    (2.5, dict(low=1, integer=True), "x=2.5 is not a whole number: it must be an integer >= 1"),
    (1.0, dict(low=0, high=1, high_open=True), "x=1.0 is out of range: it must be a number >= 0 and < 1"),
    (float('nan'), dict(low=0), "x=nan is not a number: it must be a number >= 0"),
    (None, dict(low=1), "x=None is not a number: it must be a number >= 1"),
    ('1e-3', dict(low=0, low_open=True), "x='1e-3' is a string, not a number: it must be a number > 0"),
    (-1, dict(low=1, none_ok=True), "x=-1 is out of range: it must be None or a number >= 1"),
    (True, dict(low=0), "x=True is not a number"),
    # an unbounded side holds the finite numbers: inf is refused unless a bound says inf
    (math.inf, dict(low=0, low_open=True), "x=inf is not finite: it must be a number > 0"),
    (-math.inf, dict(), "x=-inf is not finite: it must be a number"),
    (math.inf, dict(low=1, integer=True, none_ok=True), "x=inf is not finite: it must be None or an integer >= 1"),
    (math.inf, dict(low=0, high=1), "x=inf is out of range: it must be a number >= 0 and <= 1"),
])
def test_check_range_names_option_value_and_range(value, kwargs, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_range('x', value, **kwargs)


def test_check_range_accepts_the_range():
    assert check_range('x', 0, low=0) == 0 and check_range('x', None, low=1, none_ok=True) is None
    assert check_range('x', 0.5, 0, 1, True, True) == 0.5
    assert check_range('x', 4.0, low=1, integer=True) == 4 and type(check_range('x', 4.0, integer=True)) is int
    assert check_range('x', math.inf, low=0, high=math.inf) == math.inf  # where inf is said to mean something


def test_check_range_bounds_are_closed_unless_open():
    assert check_range('x', 1.0, 0, 1) == 1.0 and check_range('x', 0, 0, 1) == 0
    for value, kwargs in ((1.0, dict(high_open=True)), (0, dict(low_open=True))):
        with pytest.raises(ConfigError, match='out of range'):
            check_range('x', value, 0, 1, **kwargs)


def test_set_from_data_accepts_the_value_the_data_sets():
    C = CN(vocab_size=65, block_size=None)
    set_from_data(C, 'model', vocab_size=65, block_size=128)  # given on the command line as the data has it
    assert (C.vocab_size, C.block_size) == (65, 128)
    with pytest.raises(ConfigError, match=r"model.vocab_size=65 cannot be chosen here: the data sets it \(to 50\)"):
        set_from_data(C, 'model', vocab_size=50)


def test_set_from_data_names_the_datas_option_of_the_same_name():
    """chargpt --model.block_size=64 was told to 'use the data's options (--data.*)': the one that sets it is named."""
    C, data = CN(vocab_size=None, block_size=64), CN(block_size=128)
    with pytest.raises(ConfigError, match=r"model.block_size=64 cannot be chosen here: the data sets it \(to 128\); "
                                          r"leave it out, and give --data.block_size=64 instead$"):
        set_from_data(C, 'model', data=data, vocab_size=65, block_size=128)
    C.vocab_size = 50  # the data has no vocab_size: its options in general
    with pytest.raises(ConfigError, match=r"model.vocab_size=50 .* use the data's options \(--data.\*, listed by "):
        set_from_data(C, 'model', data=data, vocab_size=65, block_size=64)


def test_atomic_write_leaves_no_temporary_file_when_the_write_fails(tmp_path):
    def fails(tmp):
        Path(tmp).write_text('half')
        raise OSError('disk full')
    (tmp_path / 'f.txt').write_text('old')
    with pytest.raises(OSError, match='disk full'):
        atomic_write(tmp_path / 'f.txt', fails)
    assert [p.name for p in tmp_path.iterdir()] == ['f.txt'] and (tmp_path / 'f.txt').read_text() == 'old'


def test_a_checkpoint_that_fills_the_disk_keeps_the_old_one_and_says_which_file_failed(tmp_path, monkeypatch):
    """torch.save reports a full disk in its zip writer's words ('unexpected pos 540736 vs 540624'), which said
    neither the file nor the cause."""
    path = tmp_path / 'ckpt.pt'
    save_checkpoint({'iter_num': 10}, path)

    def full(obj, f, *args, **kwargs):  # half a file written, then the disk is full
        Path(f).write_bytes(b'x' * 1000)
        raise RuntimeError('[enforce fail at inline_container.cc:672] . unexpected pos 540736 vs 540624')
    monkeypatch.setattr(torch, 'save', full)
    with pytest.raises(OSError, match=rf"could not write the checkpoint {re.escape(str(path))} \(.*unexpected pos.*; "
                                      r"[\d,]+ bytes are free there\); the one there before is unchanged\. If the disk "
                                      "is full, free some space"):
        save_checkpoint({'iter_num': 20}, path)
    assert load_checkpoint(path)['iter_num'] == 10 and [p.name for p in tmp_path.iterdir()] == ['ckpt.pt']


@pytest.mark.parametrize('name', ['out', 'out/sub'])
def test_atomic_write_under_a_file_names_the_file_in_the_way(tmp_path, name):
    """makedirs said '[Errno 17] File exists: .../out' of a file named out, which reads as nothing wrong."""
    (tmp_path / 'out').write_text('a file')
    with pytest.raises(NotADirectoryError, match=f"cannot make the folder {re.escape(str(tmp_path / name))}: "
                                                 f"{re.escape(str(tmp_path / 'out'))} is a file, not a folder"):
        atomic_write(tmp_path / name / 'a b.png', lambda tmp: Path(tmp).write_text('x'))
    (tmp_path / 'out').unlink()
    (tmp_path / 'out').symlink_to(tmp_path / 'gone')
    with pytest.raises(NotADirectoryError, match=f"{re.escape(str(tmp_path / 'out'))} is a broken link, not a folder"):
        atomic_write(tmp_path / name / 'a b.png', lambda tmp: Path(tmp).write_text('x'))


def test_atomic_write_to_a_folder_names_it(tmp_path):
    """--plot.out=out/existing_folder said "[Errno 21] Is a directory: 'out/nodir.tmp20116' -> 'out/nodir'", and
    out/new/ "[Errno 2] ... 'out/new/.tmp6623'", both naming a temporary file the user never gave."""
    for folder in (str(tmp_path), f"{tmp_path / 'new'}/"):
        example = re.escape(os.path.join(folder, 'NAME'))
        with pytest.raises(IsADirectoryError, match=f"{re.escape(folder)} is a folder, not a file: give the path of "
                                                    f"the file to write, e.g. {example}"):
            atomic_write(folder, lambda tmp: Path(tmp).write_text('x'))
    assert list(tmp_path.iterdir()) == []  # nothing made, not even the new folder


def test_atomic_write_never_writes_through_a_link_planted_at_its_temporary_name(tmp_path):
    """A run folder from elsewhere may hold eval.json.tmp<pid> linking to another file (a container's pids are
    few): the write went through the link, replacing that file's contents."""
    victim, run = tmp_path / 'victim.txt', tmp_path / 'run'
    victim.write_text('precious')
    run.mkdir()
    (run / f'eval.json.tmp{os.getpid()}').symlink_to(victim)
    atomic_write(run / 'eval.json', lambda tmp: Path(tmp).write_text('{}'))
    assert victim.read_text() == 'precious' and (run / 'eval.json').read_text() == '{}'
    assert [p.name for p in run.iterdir()] == ['eval.json'] and not (run / 'eval.json').is_symlink()


def test_resolve_device(monkeypatch):
    assert resolve_device('cpu') == 'cpu'
    expected = 'cuda' if torch.cuda.is_available() else 'mps' if torch.backends.mps.is_available() else 'cpu'
    assert resolve_device('auto') == expected
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    with pytest.raises(ConfigError, match=r"device 'cuda:1' is not available to this torch .*: choose 'auto'"):
        resolve_device('cuda:1')
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 2)
    assert resolve_device('cuda:1') == 'cuda:1' and resolve_device('auto') == 'cuda'
    with pytest.raises(ConfigError, match=r"device 'cuda:2' is not one of this machine's 2 GPUs \(cuda:0 to cuda:1"):
        resolve_device('cuda:2')
    monkeypatch.setattr(torch.backends.mps, 'is_available', lambda: True)
    assert resolve_device('auto') == 'cuda'  # cuda first, then mps
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    assert resolve_device('auto') == 'mps'


@pytest.mark.parametrize('device', [None, 1.5])
def test_a_device_that_is_not_a_name_is_refused_by_name(device):
    # --trainer.device=None: torch's TypeError, a traceback of its overloads, under run_cli
    with pytest.raises(ConfigError, match=rf"device {device} is not a device name: choose 'auto', 'cpu'"):
        resolve_device(device)


def test_remove_stale_temps_keeps_everything_else(tmp_path):
    for name in ('ckpt.pt', 'ckpt.pt.tmp123', 'metrics.jsonl.tmp9', 'notes.tmp', 'data.tmp12x'):
        (tmp_path / name).write_text('x')
    assert sorted(remove_stale_temps(tmp_path)) == ['ckpt.pt.tmp123', 'metrics.jsonl.tmp9']
    assert sorted(p.name for p in tmp_path.iterdir()) == ['ckpt.pt', 'data.tmp12x', 'notes.tmp']
    assert remove_stale_temps(tmp_path / 'missing') == []


def test_run_cli_turns_user_errors_into_exit_2(capsys, monkeypatch):
    monkeypatch.delenv('MINGPT_DEBUG', raising=False)

    def main(argv):
        assert '--debug' not in argv  # run_cli takes its own flag away
        raise FileNotFoundError(f"no file {argv[0]}")
    with pytest.raises(SystemExit) as e:
        run_cli(main, ['a.txt'])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith('error: no file a.txt\n') and 'Traceback' not in err and '--debug' in err
    with pytest.raises(SystemExit):
        run_cli(main, ['a.txt', '--debug'])
    assert 'Traceback' in capsys.readouterr().err
    assert run_cli(lambda argv: argv, ['--x=1']) == ['--x=1']  # success: main's result, no exit

    def offline(argv):
        raise RuntimeError('could not download https://example.org/f.txt')
    with pytest.raises(SystemExit) as e:  # a failed download is the user's to fix too
        run_cli(offline, [])
    assert e.value.code == 2 and capsys.readouterr().err.startswith('error: could not download')

    def bug(argv):
        raise KeyError('a bug, not a user error')
    with pytest.raises(KeyError):  # a programming error keeps its traceback
        run_cli(bug, [])


def test_run_cli_exit_does_not_chain_the_error(capsys):
    """In a notebook, `%run projects/chargpt.py --trainer.max_iter=20` showed IPython 8's own AttributeError
    ('tuple' object has no attribute 'tb_frame', ipython/ipython#13796) instead of 'SystemExit: 2': IPython fails on
    an exit that chains the exception being handled. The exit carries no context, so IPython shows just the code."""
    for error, code in ((ConfigError('a bad option'), 2), (KeyboardInterrupt(), 130)):
        def main(argv):
            raise error
        with pytest.raises(SystemExit) as e:
            run_cli(main, [])
        assert e.value.code == code and e.value.__cause__ is None and e.value.__suppress_context__
    capsys.readouterr()


def test_run_cli_prints_what_stdout_cannot_encode_as_escapes(tmp_path):
    """On Windows a file or pipe (python projects/generate.py > out.txt) takes only the code page's characters
    (cp1252): a sample with another one stopped the run, training included, with a 'charmap' codec error."""
    code = "from mingpt.utils import run_cli; run_cli(lambda argv: print('caf\\xe9 \\u2192 \\u0141'), [])"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]), PYTHONIOENCODING='cp1252')
    out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [b'caf\xe9 \\u2192 \\u0141']  # what cp1252 has, and escapes as on stderr


def test_help_prints_usage_first(capsys):
    with pytest.raises(SystemExit):
        make().merge_from_args(['-h'], usage='Trains a thing.\n')
    out = capsys.readouterr().out
    assert out.startswith('Trains a thing.\n') and 'batch_size: 64' in out


def test_mingpt_debug_0_is_off_and_the_hint_comes_only_without_the_traceback(capsys, monkeypatch):
    def main(argv):
        raise ValueError('a bad option')
    for value, debug in (('0', False), ('', False), ('1', True), ('yes', True)):
        monkeypatch.setenv('MINGPT_DEBUG', value)
        with pytest.raises(SystemExit) as e:
            run_cli(main, [])
        err = capsys.readouterr().err
        assert e.value.code == 2 and 'error: a bad option\n' in err
        assert ('Traceback' in err, 'run with --debug' in err) == (debug, not debug), value


def test_a_commands_warning_prints_as_its_errors_do(tmp_path):
    """A command's warning showed Python's '.../bpe.py:935: UserWarning: ...' and a line of mingpt's source, for a
    user who runs it and changes none of it; it is 'warning: ...', as an error is 'error: ...'. --debug keeps Python's
    form, and formatwarning is given back after the command."""
    code = ("import sys, warnings\nfrom mingpt.utils import run_cli, warn_caller\n"
            "run_cli(lambda argv: warn_caller('the vocabulary is smaller'))\n"
            "warnings.warn('after the command')\n")
    env = {k: v for k, v in os.environ.items() if k != 'MINGPT_DEBUG'}
    env['PYTHONPATH'] = str(Path(__file__).resolve().parents[1])
    for debug in ([], ['--debug']):
        out = subprocess.run([sys.executable, '-c', code, *debug], capture_output=True, text=True, env=env,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        first, *rest = out.stderr.splitlines()
        assert (first == 'warning: the vocabulary is smaller') == (not debug), out.stderr
        assert 'UserWarning: after the command' in rest[-1], out.stderr


def test_a_commands_warning_from_another_package_names_its_file_and_line(tmp_path):
    """Another package's warning (torch's, numpy's) printed as 'warning: <message>' alone, as mingpt's do, where it
    often makes no sense without the place it names; it keeps its file and line, mingpt's still go without."""
    module = "import warnings\n\n\ndef old():\n    warnings.warn('old() is deprecated')\n"
    (tmp_path / 'thirdparty.py').write_text(module)
    code = ("from mingpt.utils import run_cli, warn_caller\nimport thirdparty\n"
            "run_cli(lambda argv: (thirdparty.old(), warn_caller('the vocabulary is smaller')))\n")
    env = {k: v for k, v in os.environ.items() if k != 'MINGPT_DEBUG'}
    env['PYTHONPATH'] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), str(tmp_path)])
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines() == [f"warning: old() is deprecated ({tmp_path / 'thirdparty.py'}:5)",
                                       'warning: the vocabulary is smaller'], out.stderr


def test_under_torchrun_only_rank_0_prints_and_every_rank_reports_errors_and_warnings(capsys, monkeypatch):
    """Every process of a torchrun runs the whole script: 8 GPUs showed each line ('number of parameters', samples)
    8 times. Ranks other than 0 keep stdout quiet; what goes wrong on them still shows; --debug shows it all."""
    monkeypatch.delenv('MINGPT_DEBUG', raising=False)

    def main(argv):
        print('number of parameters: 0.09M')
        warnings.warn('a warning')
        raise ValueError('a bad option')
    for rank, debug, shown in (('0', [], True), ('1', [], False), ('1', ['--debug'], True)):
        monkeypatch.setenv('RANK', rank)
        with pytest.warns(UserWarning, match='a warning'), pytest.raises(SystemExit) as e:
            run_cli(main, debug)
        out, err = capsys.readouterr()
        assert ('number of parameters' in out) == shown and e.value.code == 2 and 'error: a bad option\n' in err


def test_eval_mode_gives_each_module_its_own_mode_back_a_frozen_probe_too():
    """eval_mode (adder's and chargpt's samples, translate's checks, attention maps) ended with model.train(), which
    woke a submodule kept in eval on purpose; each module is now back in its own mode, after an error too."""
    from mingpt.utils import eval_mode
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5), torch.nn.Dropout(0.5))
    model[2].eval()  # the frozen probe
    with pytest.raises(KeyboardInterrupt), eval_mode(model):
        assert not any(m.training for m in model.modules())
        raise KeyboardInterrupt
    assert [m.training for m in model.modules()] == [True, True, True, False]
    with eval_mode(model.eval()):
        pass
    assert not any(m.training for m in model.modules())


def test_plural_counts_as_english_does():
    from mingpt.utils import plural
    assert [f"{n} {plural(n, 'iteration')}" for n in (0, 1, 2)] == ['0 iterations', '1 iteration', '2 iterations']


def test_masking_a_windows_targets_in_place_changes_no_other_window(tmp_path):
    """x and y were views of one chunk of the text (CharDataset: of the dataset's own tensor), so minGPT-style
    masking, y[:k] = -1, also changed x and every later window over those tokens."""
    from mingpt.data import CharDataset, TokenDataset
    np.arange(20, dtype=np.uint16).tofile(tmp_path / 'train.bin')
    for data in (CharDataset('hello world', block_size=4), TokenDataset(tmp_path / 'train.bin', 4, 20)):
        before = [tuple(t.tolist() for t in data[i]) for i in range(3)]
        x, y = data[0]
        y[:2] = -1
        assert x.tolist() == before[0][0]
        assert [tuple(t.tolist() for t in data[i]) for i in range(3)] == before


NOTEBOOK_DATASET = """
import multiprocessing, torch
from mingpt.utils import check_dataset_for_workers
class Windows(torch.utils.data.Dataset):  # defined where a notebook defines it: in a __main__ without a file
    def __len__(self):
        return 4
    def __getitem__(self, i):
        return torch.tensor([i])
if __name__ == '__main__':
    multiprocessing.set_start_method('spawn')  # macOS's and Windows' default
    try:
        check_dataset_for_workers(Windows(), 1)
    except ValueError as e:
        print('refused:', e)
    check_dataset_for_workers(Windows(), 0)  # batches cut in this process: nothing to refuse
    try:
        next(iter(torch.utils.data.DataLoader(Windows(), num_workers=1)))
    except RuntimeError as e:  # what a Trainer met without the check
        print('the workers:', e)
"""


@pytest.mark.parametrize('args, stdin', [(['-c', NOTEBOOK_DATASET], None), (['-'], NOTEBOOK_DATASET)],
                         ids=['python -c', 'python - (stdin)'])
def test_a_dataset_class_of_a_notebook_is_refused_where_spawned_workers_could_not_import_it(args, stdin):
    """On macOS and Windows a dataset class defined in a notebook (or python -c, or a script piped to python -)
    stopped training with 'DataLoader worker (pid 123) exited unexpectedly' (the worker's own error: Can't get
    attribute 'Windows' on <module '__main__'>). The refusal is checked against a real spawned DataLoader, which
    fails on the same dataset."""
    out = subprocess.run([sys.executable, *args], input=stdin, capture_output=True, text=True, timeout=120,
                         env={**os.environ, 'PYTHONPATH': os.pathsep.join(sys.path)}).stdout
    assert "refused: the dataset's Windows is defined in a notebook" in out
    assert "move it into a .py file" in out and "trainer.num_workers=0" in out
    assert "the workers: DataLoader worker" in out  # the refusal is not spurious: the workers do fail


class WithTransform(torch.utils.data.Dataset):
    def __init__(self, transform):
        self.transform = transform

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return self.transform(torch.tensor([i]))


def test_a_dataset_that_cannot_be_pickled_is_refused_for_spawned_workers_only(monkeypatch):
    """A lambda, or a class defined inside a function, cannot be pickled, as spawned workers receive a dataset."""
    def local():
        class Local(torch.utils.data.Dataset):
            pass
        return Local()
    monkeypatch.setattr('multiprocessing.get_start_method', lambda: 'spawn')
    for dataset, name in [(WithTransform(lambda x: x * 2), 'lambda'), (local(), 'Local')]:
        with pytest.raises(ValueError, match=f"cannot be sent to the DataLoader workers.*{name}.*top level of a "
                                             "module.*num_workers=0"):
            check_dataset_for_workers(dataset, 2)
        check_dataset_for_workers(dataset, 0)
    monkeypatch.setattr('multiprocessing.get_start_method', lambda: 'fork')  # a forked worker has it already
    check_dataset_for_workers(WithTransform(lambda x: x * 2), 2)


def test_a_module_level_dataset_passes_and_spawned_workers_give_its_batches(monkeypatch):
    """No false refusal: mingpt's own dataset, and a class of an imported module holding a module's function, pass;
    a spawned worker's batch is the one cut in this process."""
    monkeypatch.setattr('multiprocessing.get_start_method', lambda: 'spawn')
    dataset = CharDataset('hello spawned workers ' * 4, block_size=5)
    check_dataset_for_workers(WithTransform(torch.neg), 2)
    check_dataset_for_workers(dataset, 2)
    spawned = torch.utils.data.DataLoader(dataset, batch_size=3, num_workers=1, multiprocessing_context='spawn')
    here = torch.utils.data.DataLoader(dataset, batch_size=3)
    for (x1, y1), (x0, y0) in zip(spawned, here):
        assert torch.equal(x1, x0) and torch.equal(y1, y0)


def test_the_check_for_workers_does_not_copy_a_dataset_held_in_memory(monkeypatch):
    """Pickling a dataset copies its tensors and arrays into bytes: 8 GB more for a billion ids held in memory."""
    monkeypatch.setattr('multiprocessing.get_start_method', lambda: 'spawn')
    dataset = WithTransform(torch.neg)
    dataset.ids, dataset.mask = torch.zeros(4_000_000, dtype=torch.long), np.zeros(4_000_000)  # 32 MB each
    tracemalloc.start()  # it sees the bytes that pickle makes (not torch's own memory)
    try:
        check_dataset_for_workers(dataset, 2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000


@pytest.mark.skipif(not os.path.isdir('/proc/self'), reason="needs Linux's /proc")
def test_a_folder_that_cannot_be_made_in_a_folder_is_not_called_a_file():
    """A cache under /proc/self (a folder where no folder can be made) was named as '/proc/self is a file'."""
    with pytest.raises(FileNotFoundError, match=r"cannot make the folder /proc/self/mingpt/tokens in /proc/self "
                                                r"\(.*\); choose a folder that can be written") as e:
        make_folder('/proc/self/mingpt/tokens')
    assert 'is a file' not in str(e.value)


def test_a_folder_on_a_drive_that_is_not_there_is_named(monkeypatch, tmp_path):
    """MINGPT_CACHE_DIR=E:/cache with no drive E: (a USB disk unplugged): makedirs says FileNotFoundError and no part
    of the path exists, which escaped as a bare StopIteration (a traceback even under run_cli). Simulated here: every
    part of the path reads as missing, as none of E:/cache does on Windows."""
    def no_drive(name, exist_ok=False):
        raise FileNotFoundError(2, 'The system cannot find the path specified', name)
    monkeypatch.setattr(os, 'makedirs', no_drive)
    monkeypatch.setattr(os.path, 'lexists', lambda p: False)
    with pytest.raises(FileNotFoundError, match=r"cannot make the folder .*cache: / does not exist \(a drive not "
                                                r"plugged in, or a network share not reachable\?\)"):
        make_folder(tmp_path / 'cache')


def test_a_text_in_another_unicode_form_than_the_vocabularys_is_named_as_such():
    """A character model of Vietnamese written decomposed (NFD: e, then a combining circumflex) refused a typed 'Tiê'
    (NFC: one character) with "characters 'ê' are not in the vocabulary", beside a vocabulary that showed e and the
    accent, the accent piled onto the letter before it."""
    from mingpt.data import CharTokenizer
    decomposed = unicodedata.normalize('NFD', 'Tiếng Việt')
    assert len(decomposed) == 14  # e with two accents (circumflex and acute; circumflex and dot below), each apart
    tokenizer = CharTokenizer.from_text(decomposed)
    with pytest.raises(ValueError, match=r"^characters 'ê' are not in the vocabulary of this model \(11 characters: "
                                         r"' TVegint\u25cc\u0301\u25cc\u0302\u25cc\u0323'\); they are in another "
                                         r"Unicode form than the vocabulary's: unicodedata.normalize\('NFD', text\) "
                                         r"gives"):
        tokenizer.encode('Tiê')
    assert tokenizer.encode(unicodedata.normalize('NFD', 'Tiê')) == tokenizer.encode('Tie\u0302')  # the way, followed
    with pytest.raises(ValueError, match=r"characters 'z' .*; remove or replace them$"):
        tokenizer.encode('Tiz')


def test_a_folder_locked_by_a_process_is_free_once_it_is_killed(tmp_path):
    """A run killed (SIGKILL, the out-of-memory killer, a power cut) cannot remove a lock of its own: the system's
    lock goes with the process, so the next run in the folder is not blocked by a lock nobody holds."""
    holder = subprocess.Popen([sys.executable, '-c', 'import sys, time; from mingpt.utils import lock_folder\n'
                               f'lock = lock_folder({str(tmp_path)!r}); print(lock is not None, flush=True)\n'
                               'time.sleep(60)'], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, 'PYTHONPATH': str(Path(__file__).parents[1])})
    try:
        assert holder.stdout.readline() == 'True\n'
        assert lock_folder(tmp_path) is None  # held by the other process
    finally:
        holder.kill()
        holder.wait()
    lock = lock_folder(tmp_path)
    assert lock is not None
    assert lock_folder(tmp_path) is None  # another open file of this process is refused too
    lock.close()
    assert lock_folder(tmp_path) is not None


def test_a_lock_file_another_user_made_still_locks_the_folder(tmp_path, monkeypatch):
    """On a lab machine two students may share a run folder: the .lock the first one's run made (0o644 under the
    usual umask) cannot be opened for writing by the second, whose runs were refused there with 'Permission denied'."""
    (tmp_path / '.lock').write_text('process 1 on lab-pc: projects/chargpt.py')
    open_for_writing = os.open

    def not_ours(path, flags, *args):
        if str(path).endswith('.lock') and flags & os.O_RDWR:
            raise PermissionError(13, 'Permission denied', str(path))
        return open_for_writing(path, flags, *args)
    monkeypatch.setattr(os, 'open', not_ours)
    lock = lock_folder(tmp_path)
    assert lock is not None and not lock.writable()
    assert lock_folder(tmp_path) is None  # held all the same
    lock.close()


@pytest.mark.skipif(os.name == 'nt', reason="Windows' files have no permission bits for other users")
def test_a_lock_file_is_made_readable_by_the_other_users_of_the_folder(tmp_path):
    """The .lock a run makes has the mode of the user's other files (0o666 less the umask): one only its maker could
    read stopped another student's run in a shared folder with 'Permission denied', where a read-only lock holds."""
    umask = os.umask(0o022)
    try:
        lock = lock_folder(tmp_path)
    finally:
        os.umask(umask)
    lock.close()
    assert (tmp_path / '.lock').stat().st_mode & 0o777 == 0o644


def test_a_full_disk_while_the_run_is_recorded_names_the_file_and_keeps_the_old_one(tmp_path, monkeypatch):
    """args.txt and config.json on a full disk said '[Errno 28] No space left on device', of no file."""
    C = CN(system=CN(work_dir=str(tmp_path)))
    (tmp_path / 'config.json').write_text('{"the": "run before"}')
    monkeypatch.setattr(Path, 'write_text', full_disk_at('config.json'))
    path = tmp_path / 'config.json'
    with pytest.raises(OSError, match=rf"could not write {re.escape(str(path))} \(\[Errno 28\] No space left on "
                                      r"device; [\d,]+ bytes are free there\); the one there before is unchanged\. "
                                      "If the disk is full, free some space or write elsewhere"):
        setup_logging(C)
    assert path.read_text() == '{"the": "run before"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ['args.txt', 'config.json']  # no temporary file


def test_a_full_disk_while_a_tokenizer_or_gpt2s_config_is_saved_names_the_file(tmp_path, monkeypatch):
    """Encoder.save and save_pretrained (as sentiment's eval.json and ablation's results.md) said only '[Errno 28] No
    space left on device', of no file."""
    from mingpt.bpe import train_bpe
    from mingpt.model import GPT
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=300, block_size=8))
    model, encoder = GPT(C), train_bpe('a cat sat on a mat ' * 5, 260)

    def full(path, text, **kw):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(Path, 'write_text', full)
    # the first file each writes (save_pretrained writes config.json first and renames it over the last one last)
    for save, name in ((encoder.save, 'vocab.bpe'), (model.save_pretrained, 'config.json')):
        with pytest.raises(OSError, match=rf"could not write {re.escape(str(tmp_path / name))} \(\[Errno 28\] No "
                                          r"space left on device; [\d,]+ bytes are free there\); no file was left"):
            save(tmp_path)


def test_a_path_under_an_unknown_home_folder_is_refused_not_made_in_a_folder_named_tilde(monkeypatch):
    """With HOME unset and no entry in the password file (a container run as an arbitrary user id), ~ stayed ~, and
    --system.work_dir=~/out made ./~/out."""
    pwd = pytest.importorskip('pwd')  # Windows has none: its home comes from USERPROFILE

    def no_entry(uid):
        raise KeyError(f'getpwuid(): uid not found: {uid}')
    monkeypatch.delenv('HOME', raising=False)
    monkeypatch.setattr(pwd, 'getpwuid', no_entry)
    C = CN(system=CN(work_dir='out'), trainer=CN(resume=None))
    with pytest.raises(ConfigError, match=r"--system.work_dir='~/out' starts with ~, the home folder, which is not "
                                          r"known here \(HOME is unset .*\): give the full path, or set HOME"):
        C.merge_from_args(['--system.work_dir=~/out'])
    with pytest.raises(ConfigError, match=r"--system.work_dir='~' starts with ~, the home folder"):  # ~ alone: ./~
        C.merge_from_args(['--system.work_dir=~'])
    C.merge_from_args(['--system.work_dir=/tmp/out~'])  # a ~ elsewhere is a name's
    assert C.system.work_dir == '/tmp/out~'


def test_a_folder_locked_under_one_name_is_locked_under_another(tmp_path):
    """A work_dir given through a symbolic link is the folder it points to: the lock is the file's, not the name's."""
    (tmp_path / 'real').mkdir()
    (tmp_path / 'link').symlink_to(tmp_path / 'real')
    lock = lock_folder(tmp_path / 'link')
    assert lock_folder(tmp_path / 'real') is None and lock_folder(f'{tmp_path}/real/../real') is None
    lock.close()


def test_a_folder_on_a_file_system_without_locks_is_used_with_a_warning(tmp_path, monkeypatch):
    """Some network shares answer a lock with ENOLCK: the run goes on, warned that a second one would not be refused,
    rather than never start there."""
    fcntl = pytest.importorskip('fcntl')

    def no_locks(f, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))
    monkeypatch.setattr(fcntl, 'flock', no_locks)
    with pytest.warns(UserWarning, match=rf"{re.escape(str(tmp_path))} cannot be locked \(No locks available\), so a "
                                         "second run started in it at the same time would not be refused") as caught:
        lock = lock_folder(tmp_path)
    assert caught.pop(UserWarning).filename == __file__  # the caller's line, not utils.py's
    assert lock is not None and lock.writable()
    lock.close()
