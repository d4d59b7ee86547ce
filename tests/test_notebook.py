"""A student's notebook: the projects' main([...]) and the library called from cells, which are re-run, interrupted
and run out of order. The kernel's conditions are simulated (no ipython needed): a cell's error or Ctrl-C is caught
and the next cell goes on in the same process, with the same objects."""
import json
import os

import pytest
import torch

from conftest import data_dir, load_project
from mingpt.utils import args_of


@pytest.fixture(scope='module')
def chargpt_run(tmp_path_factory):
    """A chargpt run of 2 iterations, as a notebook's first training cell makes it: its work_dir."""
    work_dir = tmp_path_factory.mktemp('chargpt')
    with pytest.MonkeyPatch.context() as m:
        m.setenv('MINGPT_DATA_DIR', str(data_dir()))
        data_dir('tinyshakespeare', 'input.txt')
        load_project('chargpt').main([f'--system.work_dir={work_dir}', '--model.model_type=gpt-nano',
                                      '--data.block_size=16', '--trainer.batch_size=4', '--trainer.max_iters=2',
                                      '--trainer.eval_iters=1', '--sample.length=0', '--trainer.quiet=True'])
    return work_dir


def test_attention_main_returns_the_picture_it_wrote_so_a_cell_shows_it(chargpt_run, tmp_path, monkeypatch):
    """attention.main([...]) only wrote a PNG: the cell showed nothing, and the student had to open the file. It
    returns the figure it saved, which a notebook shows (by its PNG)."""
    attention = load_project('attention')
    saved = []
    monkeypatch.setattr(attention, 'save', lambda fig, path: saved.append(fig) or path)
    for args in (['--prompt=First'], ['--positions']):
        fig = attention.main([f'--model={chargpt_run / "model.pt"}', *args, f'--out={tmp_path / "x.png"}'])
        assert fig is saved[-1] and fig._repr_png_().startswith(b'\x89PNG')
    assert saved[0].get_suptitle().startswith('attention in') and saved[1].get_suptitle().startswith('positional')


def test_a_run_started_in_a_notebook_is_redone_from_its_config_json(chargpt_run, tmp_path, monkeypatch):
    """args.txt of a run started from Python holds no command, only 'config.json holds its options', and options are
    what main takes. args_of gives them back: the run redone elsewhere trains the same weights, records the same
    config, and args.txt says how."""
    monkeypatch.setenv('MINGPT_DATA_DIR', str(data_dir()))
    monkeypatch.delattr(__import__('__main__'), '__file__', raising=False)  # a notebook's __main__ has no file
    config = json.loads((chargpt_run / 'config.json').read_text())
    config['system']['work_dir'] = config['trainer']['work_dir'] = str(tmp_path)
    load_project('chargpt').main(args_of(config))
    assert json.loads((tmp_path / 'config.json').read_text()) == config
    first, again = (torch.load(run / 'model.pt', weights_only=True)['model'] for run in (chargpt_run, tmp_path))
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)
    assert 'args_of' in (tmp_path / 'args.txt').read_text()


def test_the_stop_button_mid_step_leaves_no_activations_in_the_traceback_a_notebook_keeps():
    """A notebook keeps the last error's traceback (sys.last_traceback), and a stop in the middle of a step kept,
    in the frames of the forward pass, its activations and their graph: on a GPU, memory the resumed run in the next
    cell had to find beside them (another copy of the activations). Frames the run left are cleared on a stop, their
    lines kept."""
    import gc
    import weakref
    from test_trainer import make_trainer
    trainer = make_trainer(max_iters=3)
    first, second = trainer.model.transformer.h[:2]
    kept, first_forward = [], first.forward

    def recorded(*args):  # not a hook: torch's call of a module with hooks keeps its arguments in a closure of its own
        out = first_forward(*args)
        kept.append(weakref.ref(out))
        return out

    def stop_button(*args):
        raise KeyboardInterrupt
    first.forward, second.forward = recorded, stop_button
    with pytest.raises(KeyboardInterrupt) as e:
        trainer.run()
    gc.collect()
    assert kept and kept[-1]() is None, "the first block's activations live on in the traceback"
    assert e.tb is not None  # kept, as the notebook keeps it
    import traceback
    # and still says where the run stopped (with --debug, where a hung run was stuck)
    assert 'raise KeyboardInterrupt' in ''.join(traceback.format_tb(e.tb))


@pytest.fixture(scope='module')
def notebook_ablation(tmp_path_factory):
    """ablation.main([...]) of one tiny variant, run as from a notebook's cell: its work_dir."""
    work_dir = tmp_path_factory.mktemp('ablation')
    (work_dir / 'text.txt').write_text('To be, or not to be, that is the question. ' * 40)
    with pytest.MonkeyPatch.context() as m:
        m.setenv('MINGPT_DATA_DIR', str(data_dir()))
        m.delattr(__import__('__main__'), '__file__', raising=False)  # a notebook's __main__ has no file
        load_project('ablation').main([f'--system.work_dir={work_dir}', f'--data.path={work_dir / "text.txt"}',
                                       '--variants=relu', '--data.block_size=16', '--trainer.batch_size=4',
                                       '--trainer.max_iters=2', '--trainer.eval_interval=2', '--trainer.eval_iters=1',
                                       '--trainer.quiet=True'])
    return work_dir


def test_an_ablation_started_in_a_notebook_records_each_runs_chargpt_command(notebook_ablation, tmp_path):
    """ablation.main([...]) in a cell wrote in each run's args.txt only 'started from Python', though the ablation
    knows the chargpt command of each run (it prints it): args.txt holds that command, and pasted into a shell (here:
    its options given to chargpt.main) it trains the same run again."""
    from conftest import args_txt_words
    from mingpt.plot import read_metrics
    work_dir = notebook_ablation
    folder, _, (python, script, *args) = args_txt_words((work_dir / 'relu' / 'args.txt').read_text())
    assert (python, os.path.basename(script)) == ('python', 'chargpt.py') and '--model.activation=relu' in args
    assert 'started from Python' in (work_dir / 'args.txt').read_text()  # the ablation's own, truly
    load_project('chargpt').main([*args, f'--system.work_dir={tmp_path / "again"}'])
    runs = (work_dir / 'relu', tmp_path / 'again')
    losses = [[r['loss'] for r in read_metrics(run / 'metrics.jsonl')] for run in runs]
    assert losses[0] == losses[1]


def test_a_config_reused_with_another_system_work_dir_trains_there(tmp_path):
    """A cell re-run with config.system.work_dir changed trained in the first run's folder (and refused it, as
    holding a run): the first Trainer had set config.trainer.work_dir from system.work_dir, and the second took that
    for the user's. A work_dir the trainer filled in follows system.work_dir; one the user set stays."""
    from test_trainer import Repeat
    from mingpt.model import GPT
    from mingpt.trainer import Trainer
    from mingpt.utils import CfgNode as CN
    C = CN(system=CN(work_dir=None), model=GPT.get_default_config(), trainer=Trainer.get_default_config())
    C.model.merge_from_dict(dict(model_type='gpt-nano', vocab_size=7, block_size=8))
    C.trainer.merge_from_dict(dict(max_iters=1, batch_size=2, num_workers=0, quiet=True, device='cpu'))
    for name in ('a', 'b'):  # the same cell, run twice
        C.system.work_dir = str(tmp_path / name)
        Trainer(C.trainer, GPT(C.model), Repeat(), run_config=C).run()
        assert (tmp_path / name / 'model.pt').exists()
    C.trainer.work_dir, C.system.work_dir = str(tmp_path / 'mine'), str(tmp_path / 'c')  # the user's own
    Trainer(C.trainer, GPT(C.model), Repeat(), run_config=C).run()
    assert (tmp_path / 'mine' / 'model.pt').exists() and not (tmp_path / 'c').exists()


def test_loss_figure_takes_one_run_as_a_cell_names_it(chargpt_run):
    """loss_figure('out/run/metrics.jsonl'), one path as a string, read it as a list of one-letter paths and failed
    with "No such file or directory: 'o'"; a run's folder failed with IsADirectoryError; labels of another count than
    the paths, and a smooth of 1 or more, were taken without a word (zip dropped runs; the curve stayed flat or grew).
    One path, a work_dir, and a list of them draw the same curves; the others are refused by name."""
    pytest.importorskip('matplotlib')
    from mingpt.plot import loss_figure

    def curves(fig):
        return [(line.get_label(), list(line.get_ydata())) for line in fig.axes[0].get_lines()]
    metrics = chargpt_run / 'metrics.jsonl'
    drawn = curves(loss_figure([metrics]))
    assert drawn[0][0] == f'{chargpt_run.name} train' and len(drawn[0][1]) == 2
    for paths in (str(metrics), metrics, str(chargpt_run), [chargpt_run]):
        assert curves(loss_figure(paths)) == drawn
    assert curves(loss_figure(str(metrics), labels='mine'))[0][0] == 'mine train'
    with pytest.raises(ValueError, match=r"labels gives 2 names for 1 metrics files: give one per file"):
        loss_figure(metrics, labels=['a', 'b'])
    for smooth in (1, 1.5, -0.1):
        with pytest.raises(ValueError, match=rf"smooth={smooth} must be at least 0 and below 1"):
            loss_figure(metrics, smooth=smooth)


def test_attention_figure_names_a_cells_mistakes():
    """Two things a cell tries with attention_figure failed with Python's riddles: layers=[1] to draw one layer of
    the full maps (an IndexError from inside the drawing), and the prompt's ids as its tokens ("'Tensor' object has
    no attribute 'replace'"). Each is refused by name."""
    pytest.importorskip('matplotlib')
    from mingpt.plot import attention_figure
    maps = torch.rand(2, 3, 4, 4).softmax(-1)  # 2 layers, 3 heads, 4 tokens
    with pytest.raises(ValueError, match=r"layers=\[1\] gives 1 numbers for the maps' 2 layers: it only labels"):
        attention_figure(maps, list('abcd'), layers=[1])
    with pytest.raises(ValueError, match=r"heads=\[0, 1, 2, 3\] gives 4 numbers for the maps' 3 heads"):
        attention_figure(maps, list('abcd'), heads=[0, 1, 2, 3])
    with pytest.raises(TypeError, match=r"tokens must be the prompt's tokens as text \(str, or bytes\), not Tensor"):
        attention_figure(maps, torch.tensor([5, 6, 7, 8]))
    fig = attention_figure(maps[[1]][:, [0, 2]], list('abcd'), layers=[1], heads=[0, 2])  # the way the message shows
    assert [ax.get_title() for ax in fig.axes[:2]] == ['head 0', 'head 2']


def test_a_run_that_replaces_another_says_so(tmp_path, capsys):
    """trainer.overwrite=True, set in a cell to replace one run, stays in the config: the next cell's run (a re-run,
    another Trainer on the same config) deleted the run it had just trained without a word. Each replacement says
    what it replaces; a run into a new work_dir says nothing."""
    from test_trainer import Repeat
    from mingpt.model import GPT
    from mingpt.trainer import Trainer
    config = Trainer.get_default_config()
    config.merge_from_dict(dict(max_iters=2, batch_size=2, quiet=True, device='cpu', checkpoint_interval=2,
                                work_dir=str(tmp_path / 'run'), overwrite=True))
    model_config = GPT.get_default_config()
    model_config.merge_from_dict(dict(model_type='gpt-nano', vocab_size=7, block_size=8))
    trainer = Trainer(config, GPT(model_config), Repeat())
    trainer.run()
    assert 'replacing' not in capsys.readouterr().out
    trainer.run()  # the cell run again
    assert (f"note: replacing the earlier run in {tmp_path / 'run'} (ckpt.pt: 2 iterations done), as "
            "trainer.overwrite=True asks") in capsys.readouterr().out


def test_save_checkpoint_from_a_cell_writes_or_says_why_not(tmp_path):
    """trainer.save_checkpoint() in a cell: before run() it failed with "'NoneType' object has no attribute
    'state_dict'", and after a run without a work_dir it wrote nothing, without a word. Both are refused by name;
    with a path it writes a checkpoint that a resume goes on from."""
    from test_trainer import Repeat
    from mingpt.model import GPT
    from mingpt.trainer import Trainer
    config = Trainer.get_default_config()
    config.merge_from_dict(dict(max_iters=2, batch_size=2, quiet=True, device='cpu'))
    model_config = GPT.get_default_config()
    model_config.merge_from_dict(dict(model_type='gpt-nano', vocab_size=7, block_size=8))
    trainer = Trainer(config, GPT(model_config), Repeat())
    with pytest.raises(RuntimeError, match=r"saves the optimizer's state with the weights, and run\(\) makes the "
                                           r"optimizer: call it after run\(\)"):
        trainer.save_checkpoint(tmp_path / 'ckpt.pt')
    trainer.run()
    with pytest.raises(ValueError, match=r"writes work_dir/ckpt.pt, and trainer.work_dir is None: give the file"):
        trainer.save_checkpoint()
    trainer.save_checkpoint(tmp_path / 'ckpt.pt')
    config.resume, config.max_iters = str(tmp_path / 'ckpt.pt'), 3
    trainer.run()
    assert trainer.iter_num == 3


def test_a_config_changed_for_the_next_model_leaves_the_built_one_alone(tmp_path):
    """A cell builds GPT(config); the next changes config for a larger model. The first model held that very config:
    its forward read pos_embd from it (the token embeddings were scaled as if sinusoidal), and its checkpoints recorded
    the new sizes, so GPT.from_checkpoint refused them ('its model_config asks for n_layer=6 (its weights: 3)'). A
    model keeps a copy; the config given is still filled in from its preset, as minGPT's is."""
    from mingpt.checkpoint import model_state, save_checkpoint
    from mingpt.model import GPT
    from mingpt.seq2seq import Transformer
    config = GPT.get_default_config()
    config.merge_from_dict(dict(model_type='gpt-nano', vocab_size=7, block_size=8))
    torch.manual_seed(0)
    model = GPT(config).eval()
    assert config.n_layer == 3  # filled from the preset
    idx = torch.tensor([[1, 2, 3]])
    logits = model(idx)[0]
    config.merge_from_dict(dict(model_type=None, n_layer=6, pos_embd='sinusoidal'))  # the next cell's model
    GPT(config)
    assert torch.equal(model(idx)[0], logits)
    save_checkpoint(model_state(model), tmp_path / 'model.pt')
    loaded, checkpoint = GPT.from_checkpoint(tmp_path / 'model.pt')
    assert checkpoint['model_config']['n_layer'] == 3 and torch.equal(loaded(idx)[0], logits)
    config = Transformer.get_default_config()
    config.merge_from_dict(dict(model_type=None, n_layer=2, n_head=2, n_embd=32, vocab_size=11, block_size=16))
    model = Transformer(config)
    config.n_layer = 4
    assert model.config.n_layer == 2


def test_an_on_eval_end_callback_without_a_val_set_is_warned_of():
    """A cell added its sampling to 'on_eval_end' (as chargpt does) but gave the Trainer no val_dataset: nothing is
    evaluated, the callback never ran, and the run said nothing of it. The run warns; with a val set it does not."""
    import warnings
    from test_trainer import Repeat
    from mingpt.model import GPT
    from mingpt.trainer import Trainer
    config = Trainer.get_default_config()
    config.merge_from_dict(dict(max_iters=1, batch_size=2, quiet=True, device='cpu', eval_iters=1))
    model_config = GPT.get_default_config()
    model_config.merge_from_dict(dict(model_type='gpt-nano', vocab_size=7, block_size=8))
    model, calls = GPT(model_config), []
    trainer = Trainer(config, model, Repeat())
    trainer.add_callback('on_eval_end', lambda t: calls.append(t.iter_num))
    with pytest.warns(UserWarning, match=r"an 'on_eval_end' callback was added, but this Trainer has no val_dataset, "
                                         r"so nothing is evaluated and the callback never runs"):
        trainer.run()
    assert calls == []
    trainer = Trainer(config, model, Repeat(), val_dataset=Repeat())
    trainer.add_callback('on_eval_end', lambda t: calls.append(t.iter_num))
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        trainer.run()
    assert calls == [0]


def test_a_callback_that_sets_trainer_config_learning_rate_changes_the_rate():
    """A cell's callback lowered trainer.config.learning_rate mid-run: under a schedule the next steps took it up, but
    under the default constant schedule it was ignored in silence (the rate was read once, into the optimizer). It
    is taken up under either; under DDP, where callbacks run on rank 0 alone, it is refused, as a change of
    optimizer.param_groups is."""
    from test_trainer import Repeat, make_trainer
    from mingpt.model import GPT
    from mingpt.trainer import Trainer
    model_config = GPT.get_default_config()
    model_config.merge_from_dict(dict(model_type='gpt-nano', vocab_size=7, block_size=8))
    for schedule in ('constant', 'cosine'):
        config = Trainer.get_default_config()
        config.merge_from_dict(dict(max_iters=4, batch_size=2, quiet=True, device='cpu', lr_schedule=schedule,
                                    min_lr=0.0))
        trainer, rates = Trainer(config, GPT(model_config), Repeat()), []

        def lower(t):
            rates.append(t.lr)
            if t.iter_num == 1:
                t.config.learning_rate = 1e-5
        trainer.add_callback('on_batch_end', lower)
        trainer.run()
        assert rates[0] == 3e-4
        if schedule == 'constant':
            assert rates[1:] == [3e-4, 1e-5, 1e-5]
        else:  # the cosine from the new rate: at half way, half of it
            assert rates[2] == pytest.approx(0.5e-5)
    trainer = make_trainer()
    trainer.world_size = 2  # as torchrun's WORLD_SIZE sets it; this is rank 0, which runs the callbacks
    trainer.optimizer = trainer.model.configure_optimizers(trainer.config)
    trainer.add_callback('on_batch_end', lambda t: setattr(t.config, 'learning_rate', 1e-4))
    with pytest.raises(RuntimeError, match=r"a callback changed trainer.config.learning_rate \(0.003 -> 0.0001\) "
                                           r"under DDP, where callbacks run on rank 0 only"):
        trainer.trigger_callbacks('on_batch_end')
