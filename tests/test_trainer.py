"""The minGPT Trainer API: code written for minGPT's trainer runs unchanged."""
import errno
import io
import json
import math
import multiprocessing
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import PER_BACKEND, full_disk_at
from mingpt import runs, trainer as trainer_module
from mingpt.checkpoint import load_checkpoint, save_checkpoint
from mingpt.model import GPT
from mingpt.runs import describe_difference
from mingpt.trainer import Trainer
from mingpt.utils import ConfigError, lock_holder, matmul_precision


class Repeat(torch.utils.data.Dataset):
    """Sequences 0 1 2 ... of the vocabulary, from every start: trivially learnable."""

    def __len__(self):
        return 100

    def __getitem__(self, i):
        seq = (torch.arange(9) + i) % 7
        return seq[:-1], seq[1:]


def make_trainer(**kw):
    torch.manual_seed(0)
    C = GPT.get_default_config()
    C.model_type, C.vocab_size, C.block_size = 'gpt-nano', 7, 8
    T = Trainer.get_default_config()
    T.merge_from_dict(dict(max_iters=60, batch_size=16, learning_rate=3e-3, num_workers=0, quiet=True, device='cpu'))
    T.merge_from_dict(kw)
    return Trainer(T, GPT(C), Repeat())


class Labelled(Repeat):
    """Repeat's sequences, each labelled with one of two classes."""

    def __getitem__(self, i):
        return super().__getitem__(i)[0], torch.tensor(i % 2)


class Classifier(torch.nn.Module):
    """A module of one's own around a GPT, as a student writes it: the last position's hidden state, a linear head."""

    def __init__(self, gpt):
        super().__init__()
        self.gpt = gpt
        self.head = torch.nn.Linear(gpt.config.n_embd, 2)

    def forward(self, x, y=None):
        logits = self.head(self.gpt.hidden_states(x)[:, -1])
        return logits, None if y is None else F.cross_entropy(logits, y)

    configure_optimizers = GPT.configure_optimizers


class Holder(torch.nn.Module):
    """A module of one's own that holds its GPT as self.module, the name DDP gives the model it wraps."""

    def __init__(self, gpt):
        super().__init__()
        self.module = gpt

    def forward(self, x, y=None):
        return self.module(x, y)

    configure_optimizers = GPT.configure_optimizers


def make_classifier_trainer(**kw):
    """make_trainer's GPT inside a Classifier, in eval mode as GPT.from_checkpoint and from_pretrained return it."""
    trainer = make_trainer(**kw)
    trainer.model, trainer.train_dataset = Classifier(trainer.model.eval()), Labelled()
    return trainer


class Items(torch.utils.data.Dataset):
    def __init__(self, item):
        self.item = item

    def __len__(self):
        return 100

    def __getitem__(self, i):
        return self.item


@pytest.mark.parametrize('item, got', [((torch.zeros(8, dtype=torch.long),) * 3, r'\(Tensor, Tensor, Tensor\)'),
                                       (dict(x=torch.zeros(8, dtype=torch.long)), 'dict'),
                                       (([0] * 8, [1] * 8), r'\(list, list\)')])  # lists: collated per position
def test_a_dataset_whose_items_are_not_x_y_tensors_is_named(item, got):
    """A third item (a mask, say) was "too many values to unpack (expected 2)", a dict "'str' object has no
    attribute 'to'", and lists of ids (collated as a list of tensors per position) an AttributeError too."""
    trainer = make_trainer(max_iters=1)
    trainer.train_dataset = Items(item)
    with pytest.raises(TypeError, match=rf"a dataset's item must be \(x, y\), a pair of tensors .*; batched, its "
                                        rf"items gave {got}: make __getitem__ return \(x, y\)"):
        trainer.run()


def test_default_config_has_minGPT_keys():
    C = Trainer.get_default_config()
    for key in ['device', 'num_workers', 'max_iters', 'batch_size', 'learning_rate', 'betas', 'weight_decay',
                'grad_norm_clip']:
        assert hasattr(C, key)
    assert C.device == 'auto' and C.max_iters is None


def test_callbacks_see_minGPT_attributes_and_loss_falls():
    trainer = make_trainer()
    seen = []

    def on_batch_end(t):
        assert t.device == 'cpu' and t.optimizer is not None and t.iter_dt >= 0
        assert abs(t.iter_time - time.time()) < 60  # minGPT's iter_time: a time of the wall clock, as time.time()
        seen.append((t.iter_num, t.loss.item()))

    trainer.add_callback('on_batch_end', on_batch_end)
    also = []
    trainer.add_callback('on_batch_end', lambda t: also.append(t.iter_num))
    trainer.run()
    assert [i for i, _ in seen] == list(range(60)) == also  # iter_num is 0 at the first batch's callback
    assert seen[-1][1] < 0.5 * seen[0][1]
    assert trainer.iter_num == 60


def test_callbacks_see_the_steps_gradients_lr_and_grad_norm():
    """As in minGPT's loop, on_batch_end finds the step's gradients on the parameters (clipped, as the optimizer
    used them); they are freed before the next forward, so no step adds to another's."""
    trainer = make_trainer(max_iters=5, grad_norm_clip=0.5, warmup_iters=3)
    seen, fresh = [], []
    trainer.model.register_forward_pre_hook(lambda m, a: fresh.append(all(p.grad is None for p in m.parameters())))

    def on_batch_end(t):
        norm = torch.cat([p.grad.flatten() for p in t.model.parameters()]).norm().item()
        seen.append((norm, t.grad_norm.item(), t.lr, t.get_lr(t.iter_num)))

    trainer.add_callback('on_batch_end', on_batch_end)
    trainer.run()
    assert len(seen) == 5 and fresh == [True] * 5
    for norm, before_clipping, lr, want_lr in seen:
        assert before_clipping > 0.5 and norm == pytest.approx(0.5, rel=1e-4)  # a new model's gradients exceed 0.5
        assert lr == want_lr
    assert [lr for *_, lr in seen] == pytest.approx([0.75e-3, 1.5e-3, 2.25e-3, 3e-3, 3e-3])  # the warmup, then constant


def test_a_run_stopped_in_a_callback_leaves_no_gradients_to_the_next_run():
    trainer = make_trainer(max_iters=3)

    def stop(t):
        raise KeyboardInterrupt  # Ctrl-C during chargpt's sample, say: the step's gradients are still there

    trainer.add_callback('on_batch_end', stop)
    with pytest.raises(KeyboardInterrupt):
        trainer.run()
    trainer.set_callback('on_batch_end', lambda t: None)
    fresh = []
    trainer.model.register_forward_pre_hook(lambda m, a: fresh.append(all(p.grad is None for p in m.parameters())))
    trainer.run()  # run() again, as in a notebook
    assert fresh and all(fresh)


def test_a_run_stopped_in_a_notebook_leaves_no_dataloader_workers():
    """A notebook keeps the traceback of the last error (sys.last_traceback), and with it run()'s frame: after Ctrl-C
    the DataLoader's worker processes (num_workers > 0) lived on, each with its copy of the dataset, until another
    error replaced it."""
    import multiprocessing
    trainer = make_trainer(max_iters=3, num_workers=2)

    def stop(*args):
        raise KeyboardInterrupt

    kept = []  # the tracebacks, as a notebook keeps them
    trainer.add_callback('on_batch_end', stop)  # Ctrl-C in a callback (chargpt's sample)
    hook = trainer.model.register_forward_pre_hook(stop)  # and, more often, within a step
    for _ in range(2):
        with pytest.raises(KeyboardInterrupt) as e:
            trainer.run()
        kept.append(e.tb)
        assert multiprocessing.active_children() == []
        hook.remove()


def test_a_run_stopped_by_an_error_closes_its_progress_bar(capsys):
    """A callback's error (or the dataset's) left the bar open: the next run() in the notebook drew its bar a line
    below, moving the cursor up at every update, and the old bar came back when it was freed."""
    trainer = make_trainer(max_iters=3, quiet=False)

    def bug(t):
        raise ValueError('a bug in my callback')

    trainer.add_callback('on_batch_end', bug)
    with pytest.raises(ValueError):
        trainer.run()
    capsys.readouterr()
    trainer.set_callback('on_batch_end', lambda t: None)
    trainer.run()
    err = capsys.readouterr().err
    assert '3/3' in err and '\x1b[A' not in err  # the bar, on its own line


def test_run_again_trains_max_iters_more_from_iteration_0_as_minGPT():
    # minGPT's run() sets iter_num = 0 first: a notebook's second trainer.run() trains again, it is not a no-op
    trainer = make_trainer(max_iters=3)
    seen = []
    trainer.add_callback('on_batch_end', lambda t: seen.append(t.iter_num))
    trainer.run()
    weights = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.run()
    assert seen == [0, 1, 2, 0, 1, 2] and trainer.iter_num == 3
    assert any(not torch.equal(a, b) for a, b in zip(weights, trainer.model.parameters()))


def test_a_trainer_config_with_only_minGPTs_keys_runs():
    # e.g. built by hand, or from a minGPT run's config.json: the options minGPT lacks take their defaults
    from mingpt.utils import CfgNode as CN
    T = CN(device='cpu', num_workers=0, max_iters=3, batch_size=8, learning_rate=3e-4, betas=(0.9, 0.95),
           weight_decay=0.1, grad_norm_clip=1.0)
    C = GPT.get_default_config()
    C.model_type, C.vocab_size, C.block_size = 'gpt-nano', 7, 8
    trainer = Trainer(T, GPT(C), Repeat())
    trainer.run()
    assert trainer.iter_num == 3 and T.lr_schedule == 'constant' and T.max_iters == 3


def test_numpy_numbers_in_the_trainer_config_are_kept_as_python_numbers(tmp_path):
    # max_iters = np.int64(...) ran in minGPT; kept as numpy, it would make ckpt.pt unloadable (weights_only)
    trainer = make_trainer(work_dir=str(tmp_path), checkpoint_interval=2)
    trainer.config.max_iters = np.int64(2)
    trainer.run()
    assert trainer.iter_num == 2 and type(trainer.config.max_iters) is int
    assert load_checkpoint(tmp_path / 'ckpt.pt')['trainer_config']['max_iters'] == 2


def test_a_run_without_checkpoints_or_val_set_saves_its_model_at_the_end(tmp_path):
    """work_dir given, checkpoint_interval None, no val set: model.pt ('best val loss, else latest') was never
    written, so the trained model was lost when the script ended."""
    trainer = make_trainer(work_dir=str(tmp_path), max_iters=3)
    trainer.run()
    model, ckpt = GPT.from_checkpoint(tmp_path / 'model.pt')
    assert ckpt['iter_num'] == 3 and not (tmp_path / 'ckpt.pt').exists()
    for name, weight in trainer.model.state_dict().items():
        assert torch.equal(model.state_dict()[name], weight), name


def test_whole_floats_given_to_integer_options_train_as_ints():
    # the range check takes 8.0 as an integer; numpy's batch draw then stopped with "got '8.0'"
    trainer = make_trainer(max_iters=2)
    trainer.config.batch_size, trainer.config.grad_accum_steps, trainer.config.max_iters = 8.0, 2.0, 2.0
    trainer.run()
    assert trainer.iter_num == 2 and type(trainer.config.batch_size) is int


def test_set_callback_replaces_and_trigger_runs_them():
    trainer = make_trainer(max_iters=3)
    calls = []
    trainer.add_callback('on_batch_end', lambda t: calls.append('a'))
    trainer.set_callback('on_batch_end', lambda t: calls.append('b'))
    trainer.run()
    assert calls == ['b', 'b', 'b']
    trainer.trigger_callbacks('on_batch_end')
    trainer.trigger_callbacks('no_such_event')  # an event nobody listens to is fine
    assert calls == ['b'] * 4


def test_callbacks_of_one_event_run_in_the_order_they_were_added():
    trainer = make_trainer(max_iters=2)
    calls = []
    for name in 'abc':
        trainer.add_callback('on_batch_end', lambda t, name=name: calls.append(name))
    trainer.run()
    assert calls == list('abcabc')


def test_on_eval_end_runs_before_on_batch_end_and_the_last_step_is_evaluated_first_too():
    """A callback that prints or logs trainer.val_loss from on_batch_end sees the val loss of its own step wherever
    one was taken, the last step (off the eval_interval grid) included; on_eval_end runs before it, at each
    evaluated step. Guards the order of evaluation and callbacks, not only which steps are evaluated."""
    trainer = make_trainer(max_iters=5, eval_interval=3, eval_iters=1)
    trainer.val_dataset = Repeat()
    events = []
    trainer.add_callback('on_eval_end', lambda t: events.append(('eval', t.iter_num, t.val_loss)))
    trainer.add_callback('on_batch_end', lambda t: events.append(('batch', t.iter_num, t.val_loss)))
    trainer.run()
    assert [e[:2] for e in events] == [('eval', 0), ('batch', 0), ('batch', 1), ('batch', 2), ('eval', 3),
                                       ('batch', 3), ('eval', 4), ('batch', 4)]
    losses = {i: loss for kind, i, loss in events if kind == 'eval'}
    assert len(set(losses.values())) == 3  # three evaluations, three losses: the one a step saw is its own
    assert all(loss == losses[max(j for j in losses if j <= i)] for kind, i, loss in events if kind == 'batch')


def test_a_callback_that_samples_in_eval_mode_and_stays_there_leaves_training_as_it_was():
    def sample(t):  # model.eval() without the model.train() after it: the rest of the run trained without dropout
        t.model.eval()
        t.model.generate(torch.zeros(1, 1, dtype=torch.long), 3, do_sample=True)

    plain = make_trainer(max_iters=4)
    plain.run()
    sampled = make_trainer(max_iters=4)
    sampled.add_callback('on_batch_end', sample)
    sampled.run()
    assert sampled.model.training
    assert all(torch.equal(a, b) for a, b in zip(plain.model.parameters(), sampled.model.parameters()))


def test_a_callback_for_an_event_the_loop_never_triggers_is_warned_of_but_kept():
    trainer = make_trainer(max_iters=2)
    calls = []
    with pytest.warns(UserWarning, match=r"Trainer triggers 'on_batch_end' and 'on_eval_end', not 'on_batch_ends': "
                                         r"this callback runs only if your own code calls trigger_callbacks") as caught:
        trainer.add_callback('on_batch_ends', lambda t: calls.append(t.iter_num))
    assert caught[0].filename == __file__
    trainer.run()
    assert calls == []
    trainer.trigger_callbacks('on_batch_ends')  # a subclass may trigger events of its own
    assert calls == [2]


def test_a_callback_added_again_is_warned_of_and_still_runs_as_often_as_added():
    """A notebook cell with trainer.add_callback run twice added its callback twice, silently: it ran twice a step
    (or its old definition beside the new one). add_callback still appends, as minGPT's does, but says so."""
    trainer = make_trainer(max_iters=1)
    calls, cell = [], "def log(t):\n    calls.append(t.iter_num)\ntrainer.add_callback('on_batch_end', log)\n"
    notebook = {'__name__': '__main__', 'trainer': trainer, 'calls': calls}
    exec(cell, notebook)
    again = r"log is added to 'on_batch_end' again \(a notebook cell run twice\?\): the one added before runs too"
    with pytest.warns(UserWarning, match=again):
        exec(cell, notebook)  # the cell run again: log defined anew
    with pytest.warns(UserWarning, match=again) as caught:
        trainer.add_callback('on_batch_end', notebook['log'])  # the same function again
    assert caught[0].filename == __file__
    printer = Printer(calls)
    trainer.add_callback('on_batch_end', printer.log)
    with pytest.warns(UserWarning, match="log is added to 'on_batch_end' again"):
        trainer.add_callback('on_batch_end', printer.log)  # a bound method: equal to the first, not the same object
    trainer.run()
    assert calls == [0, 0, 0, 'm', 'm']
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # other functions of one name, from a loop or a factory: no warning
        for k in range(2):
            trainer.add_callback('on_batch_end', lambda t, k=k: None)
        for k in range(2):
            trainer.add_callback('on_batch_end', every(k))


class Printer:
    def __init__(self, calls):
        self.calls = calls

    def log(self, trainer):
        self.calls.append('m')


def every(k):
    def on_batch_end(t):
        return t.iter_num % k
    return on_batch_end


def test_a_callback_that_cannot_be_called_is_refused_when_added():
    """The result of calling it, or the two arguments swapped: the run stopped after its first step (a GPT-2
    fine-tune's loading and step, say) with "'NoneType' object is not callable"."""
    trainer = make_trainer(max_iters=2)
    for args in (('on_batch_end', None), (print, 'on_batch_end')):  # None: what calling a plain function returns
        for add in (trainer.add_callback, trainer.set_callback):
            with pytest.raises(TypeError, match=r"a callback is a function of the trainer, .* cannot be called: give "
                                                r"the event's name, then the function itself"):
                add(*args)
    assert not trainer.callbacks


def test_a_misspelt_option_an_uncapitalised_true_and_an_empty_dataset_are_refused_before_training():
    trainer = make_trainer()
    trainer.config.max_iter = 3  # a typo: max_iters stays None, and the loop would never end
    with pytest.raises(ConfigError, match=r"unknown config key 'trainer.max_iter'; valid keys here are: .*max_iters"):
        trainer.run()
    for word in ('true', 'yes'):  # 'yes' was 'no checkpoint at yes'
        with pytest.raises(ConfigError, match=rf"trainer.resume='{word}' is read as a checkpoint's path; write True"):
            make_trainer(resume=word).run()
    trainer = make_trainer()
    trainer.train_dataset = []
    with pytest.raises(ValueError, match=r"train_dataset is empty \(len 0\): is its text shorter than block_size \+ 1"):
        trainer.run()
    assert trainer.iter_num == 0


def test_frozen_parameters_stay_as_they_are_and_a_wholly_frozen_model_is_refused():
    """Fine-tuning the top: the frozen embeddings (and so the tied head) and block 0 do not move, nor does weight
    decay touch them; every parameter frozen is refused before training (backward said 'element 0 of tensors does
    not require grad and does not have a grad_fn')."""
    trainer = make_trainer(max_iters=3)
    frozen = [trainer.model.transformer.wte, trainer.model.transformer.wpe, trainer.model.transformer.h[0]]
    for module in frozen:
        module.requires_grad_(False)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.run()
    moved = {n for n, p in trainer.model.named_parameters() if not torch.equal(p, before[n])}
    assert moved == {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert not trainer.model.lm_head.weight.requires_grad  # tied to wte: frozen with it
    trainer.model.requires_grad_(False)
    with pytest.raises(ValueError, match=r"every parameter of the model is frozen \(requires_grad=False\): there is "
                                         r"nothing to train; unfreeze"):
        trainer.run()


def test_a_model_without_configure_optimizers_is_told_how_to_add_one():
    """The trainer asks the model for its optimizer (minGPT's contract): a module of one's own around a GPT met a bare
    AttributeError after the run had begun; the advice given trains it."""
    class Wrapper(torch.nn.Module):
        def __init__(self, gpt):
            super().__init__()
            self.gpt = gpt

        def forward(self, x, y=None):
            return self.gpt(x, y)
    trainer = make_trainer(max_iters=2)
    trainer.model = Wrapper(trainer.model)
    with pytest.raises(TypeError, match=r"Wrapper has no configure_optimizers\(train_config\), which the trainer "
                                        r"calls for its optimizer: add one, e.g. configure_optimizers = "
                                        r"GPT.configure_optimizers"):
        trainer.run()
    Wrapper.configure_optimizers = GPT.configure_optimizers
    trainer.run()
    assert trainer.iter_num == 2


def test_a_crash_says_what_is_saved_too_naming_the_checkpoint_a_resume_came_from(tmp_path, capsys):
    """An error stops training as Ctrl-C does (under torchrun: the lost connection the other ranks meet when one is
    killed). A run resumed from another folder's checkpoint names it until it saves its own (it said none was saved)."""
    def crash_at_iteration_3(t):
        if t.iter_num == 3:
            raise RuntimeError('Connection reset by peer')
    trainer = make_trainer(work_dir=str(tmp_path / 'a'), checkpoint_interval=2, max_iters=4)
    trainer.add_callback('on_batch_end', crash_at_iteration_3)
    with pytest.raises(RuntimeError, match='Connection reset by peer'):
        trainer.run()
    assert re.search(rf"stopped after 4 iterations; {tmp_path / 'a' / 'ckpt.pt'} was saved after 2 iterations: go on "
                     r"from there with --trainer.resume=True\n", capsys.readouterr().err)
    trainer = make_trainer(work_dir=str(tmp_path / 'b'), resume=str(tmp_path / 'a' / 'ckpt.pt'), max_iters=4)
    trainer.add_callback('on_batch_end', crash_at_iteration_3)
    with pytest.raises(RuntimeError):
        trainer.run()
    # b holds what the continuation wrote (its metrics), which only overwrite lets a resume into b replace
    assert (f"stopped after 4 iterations; {tmp_path / 'a' / 'ckpt.pt'} was saved after 2 iterations: go on from there "
            f"with --trainer.resume={tmp_path / 'a' / 'ckpt.pt'} --trainer.overwrite=True\n") in capsys.readouterr().err


def test_a_resume_from_another_folder_never_overwrites_the_run_in_work_dir(tmp_path, capsys):
    """--trainer.resume=a/ckpt.pt into work_dir b, which held a run of its own: b's ckpt.pt and model.pt were
    replaced in silence, and its metrics.jsonl kept b's lines 0-1 before a's 2-3. Such a resume starts a run in b, so
    it is refused as a fresh run is, by any run b holds (a finished run without checkpoints: model.pt and metrics),
    until --trainer.overwrite=True replaces it; then b holds the resumed run's lines alone. A resume from b's own
    checkpoint may not overwrite: that would delete the checkpoint it goes on from."""
    a, b, c = (str(tmp_path / name) for name in 'abc')
    make_trainer(work_dir=a, max_iters=2, checkpoint_interval=2).run()
    make_trainer(work_dir=b, max_iters=6, checkpoint_interval=6).run()
    finished = make_trainer(work_dir=c, max_iters=6, eval_interval=3)  # model.pt and metrics, no ckpt.pt
    finished.val_dataset = Repeat()
    finished.run()
    for folder, held in [(b, 'ckpt.pt: 6 iterations done'), (c, 'model.pt: a model saved after 6 iterations')]:
        with pytest.raises(ConfigError, match=re.escape(f"{folder} holds an earlier run ({held}) that this run, "
                                                        f"resumed from {a}/ckpt.pt, would overwrite")):
            make_trainer(work_dir=folder, max_iters=4, resume=f'{a}/ckpt.pt').run()
    capsys.readouterr()
    assert load_checkpoint(f'{b}/ckpt.pt')['iter_num'] == 6 and load_checkpoint(f'{c}/model.pt')['iter_num'] == 6
    assert len(Path(b, 'metrics.jsonl').read_text().splitlines()) == 6
    make_trainer(work_dir=b, max_iters=4, resume=f'{a}/ckpt.pt', overwrite=True, checkpoint_interval=4).run()
    assert [json.loads(line)['iter'] for line in Path(b, 'metrics.jsonl').read_text().splitlines()] == [2, 3]
    assert "note: replacing the earlier run in" in capsys.readouterr().out
    with pytest.raises(ConfigError, match=re.escape(f"trainer.resume='{b}/ckpt.pt' continues the run in work_dir and "
                                                    "trainer.overwrite=True replaces it")):
        make_trainer(work_dir=b, max_iters=6, resume=f'{b}/ckpt.pt', overwrite=True).run()
    assert load_checkpoint(f'{b}/ckpt.pt')['iter_num'] == 4


def test_a_path_to_work_dirs_own_checkpoint_spelled_otherwise_or_through_a_link_is_work_dirs_own(
        tmp_path, capsys, monkeypatch):
    """A path to work_dir's ckpt.pt spelled otherwise (./a/ckpt.pt for work_dir a) was taken for another folder's
    checkpoint: a stop before the continuation's first checkpoint said to go on with --trainer.resume=./a/ckpt.pt
    --trainer.overwrite=True, which is refused. A link to the file (d/ckpt.pt -> a/ckpt.pt) was another folder's
    too: with overwrite=True it deleted a's ckpt.pt and model.pt before the first step."""
    def crash_at_iteration_3(t):
        if t.iter_num == 3:
            raise RuntimeError('Connection reset by peer')
    monkeypatch.chdir(tmp_path)
    make_trainer(work_dir='a', max_iters=2, checkpoint_interval=2).run()
    trainer = make_trainer(work_dir='a', resume='./a/ckpt.pt', max_iters=6, checkpoint_interval=6)
    trainer.add_callback('on_batch_end', crash_at_iteration_3)
    with pytest.raises(RuntimeError):
        trainer.run()
    assert capsys.readouterr().err.endswith("./a/ckpt.pt was saved after 2 iterations: go on from there with "
                                            "--trainer.resume=True\n")
    (tmp_path / 'd').mkdir()
    (tmp_path / 'd' / 'ckpt.pt').symlink_to(tmp_path / 'a' / 'ckpt.pt')
    with pytest.raises(ConfigError, match=r"^trainer.resume='d/ckpt.pt' continues the run in work_dir and "
                                          r"trainer.overwrite=True replaces it: give one of them$"):
        make_trainer(work_dir='a', resume='d/ckpt.pt', overwrite=True, max_iters=4).run()
    assert load_checkpoint('a/ckpt.pt')['iter_num'] == 2
    make_trainer(work_dir='a', resume=True, max_iters=4).run()  # as the note said


class Unreadable(Repeat):
    """Repeat's sequences on a disk that went away: every item read fails."""

    def __getitem__(self, i):
        raise OSError('the disk holding the data went away')


def test_a_resumed_run_that_fails_before_its_first_step_counts_the_iterations_its_checkpoint_holds(tmp_path, capsys):
    """A resume whose first batch cannot be read stops before training a step: it says it stopped after the
    checkpoint's iterations (not after 0), so the way on it names matches what ckpt.pt holds."""
    make_trainer(work_dir=str(tmp_path), checkpoint_interval=2, max_iters=2).run()
    trainer = make_trainer(work_dir=str(tmp_path), resume=True, max_iters=4)
    trainer.train_dataset = Unreadable()
    with pytest.raises(OSError, match='the disk holding the data went away'):
        trainer.run()
    assert (f"stopped after 2 iterations; {tmp_path / 'ckpt.pt'} was saved after 2 iterations: go on from there with "
            "--trainer.resume=True\n") in capsys.readouterr().err
    assert trainer.steps_done == trainer.iter_num == 2


def test_ctrl_c_says_what_is_saved_and_how_to_go_on(tmp_path, capsys, monkeypatch):
    """Counted as the checkpoint counts, in iterations done: a Ctrl-C in the callbacks of iteration 3 (a sample)
    comes after 4 (it said 'stopped at iteration 3', and after the checkpoint of 2 that read as one lost, not two)."""
    def ctrl_c_at_iteration_3(t):
        if t.iter_num == 3:
            raise KeyboardInterrupt
    for interval, says in [(2, rf"stopped after 4 iterations; {tmp_path / 'run2' / 'ckpt.pt'} was saved after 2 "
                                r"iterations: go on from there with --trainer.resume=True"),
                           (None, r"stopped after 4 iterations; no checkpoint was saved \(trainer.checkpoint_interval="
                                  r"None\), so a new run starts over \(in this work_dir with "
                                  r"--trainer.overwrite=True\)")]:
        trainer = make_trainer(work_dir=str(tmp_path / f'run{interval}'), checkpoint_interval=interval)
        trainer.add_callback('on_batch_end', ctrl_c_at_iteration_3)
        with pytest.raises(KeyboardInterrupt):
            trainer.run()
        assert re.search(says, capsys.readouterr().err)
    trainer = make_trainer(work_dir=str(tmp_path / 'run2'), checkpoint_interval=2, resume=True, max_iters=4)
    trainer.run()  # as the message says
    assert trainer.iter_num == 4
    # resuming the run that saved none says why and how to start it again
    with pytest.raises(ConfigError, match=r"trainer.resume=True continues from .*runNone.ckpt.pt, but the run there "
                                          r"saved no checkpoint \(ckpt.pt is written every trainer.checkpoint_interval"
                                          r"=3 iterations and at the end\); start it again with --trainer.overwrite="
                                          r"True$"):
        make_trainer(work_dir=str(tmp_path / 'runNone'), checkpoint_interval=3, resume=True).run()
    # a relative work_dir from another folder: it said 'the run there saved no checkpoint', of no run
    (tmp_path / 'elsewhere').mkdir()
    monkeypatch.chdir(tmp_path / 'elsewhere')
    with pytest.raises(ConfigError, match=rf"continues the run in run2, but there is no such folder \(looked for "
                                          rf"from {re.escape(str(tmp_path / 'elsewhere'))}\): run from the folder the "
                                          r"run started in \(the cd of its args.txt\), or give work_dir as a full "
                                          "path; without resume, a fresh run starts$"):
        make_trainer(work_dir='run2', checkpoint_interval=3, resume=True).run()
    with pytest.raises(ConfigError, match=r"continues the run in .*never, but there is no such folder; without "):
        make_trainer(work_dir=str(tmp_path / 'never'), checkpoint_interval=3, resume=True).run()
    # without checkpoint_interval none is ever written (it said 'every trainer.checkpoint_interval=None iterations')
    with pytest.raises(ConfigError, match=r"\(ckpt.pt is written only when trainer.checkpoint_interval is set: every "
                                          r"that many iterations and at the end\)"):
        make_trainer(work_dir=str(tmp_path / 'runNone'), resume=True).run()
    (tmp_path / 'empty').mkdir()  # the resume's lock made .lock there: no run to start again with overwrite
    with pytest.raises(ConfigError, match=r"the run there saved no checkpoint .*; start a fresh run without it$"):
        make_trainer(work_dir=str(tmp_path / 'empty'), resume=True).run()


def test_a_run_stopped_before_its_first_metrics_line_is_not_told_to_overwrite_it(tmp_path, capsys):
    """A dataset whose items are one tensor stops the run at its first batch, leaving an empty metrics.jsonl (and
    args.txt in a project): the note, and a resume's refusal, said to start again with --trainer.overwrite=True,
    which a fresh run there does not need."""
    trainer = make_trainer(work_dir=str(tmp_path), max_iters=2)
    trainer.train_dataset = Items(torch.zeros(9, dtype=torch.long))
    with pytest.raises(TypeError, match=r"a dataset's item must be \(x, y\)"):
        trainer.run()
    assert capsys.readouterr().err.endswith("\nstopped after 0 iterations; no checkpoint was saved (trainer."
                                            "checkpoint_interval=None), so a new run starts over\n")
    with pytest.raises(ConfigError, match=r"the run there saved no checkpoint .*; start a fresh run without it$"):
        make_trainer(work_dir=str(tmp_path), resume=True).run()
    make_trainer(work_dir=str(tmp_path), max_iters=2).run()  # as the note says, without overwrite


def test_sys_exit_in_a_callback_says_which_checkpoint_to_go_on_from(tmp_path, capsys):
    """sys.exit() in a callback (SystemExit, which is no Exception) ended the run without the note that Ctrl-C and
    errors give. It ends the run on purpose, so the note comes where there is a checkpoint to go on from."""
    def exit_at_iteration_3(t):
        if t.iter_num == 3:
            sys.exit("loss too high")
    for interval, says in [(2, f"\nstopped after 4 iterations; {tmp_path / 'run2' / 'ckpt.pt'} was saved after 2 "
                               "iterations: go on from there with --trainer.resume=True\n"), (None, '')]:
        trainer = make_trainer(work_dir=str(tmp_path / f'run{interval}'), checkpoint_interval=interval)
        trainer.add_callback('on_batch_end', exit_at_iteration_3)
        with pytest.raises(SystemExit, match='loss too high'):
            trainer.run()
        assert capsys.readouterr().err == says


def test_progress_bar_shows_loss_and_tokens_per_second(capsys):
    make_trainer(max_iters=5, quiet=False).run()
    err = capsys.readouterr().err
    assert '5/5' in err and 'loss=' in err and 'tok_s=' in err


def test_callback_prints_go_above_the_progress_bar(monkeypatch):
    # a terminal: the bar (stderr) and print (stdout) share one screen
    screen = io.StringIO()
    monkeypatch.setattr(sys, 'stdout', screen)
    monkeypatch.setattr(sys, 'stderr', screen)
    trainer = make_trainer(max_iters=3, quiet=False)
    trainer.add_callback('on_batch_end', lambda t: print('iter', t.iter_num, 'done'))
    trainer.add_callback('on_batch_end', lambda t: print('note', t.iter_num, file=sys.stderr))  # as a warning is
    trainer.run()
    raw = screen.getvalue()
    for i in range(3):
        for line in (f'iter {i} done\n', f'note {i}\n'):
            before = raw[:raw.index(line)]
            # the bar's line was cleared (carriage return, blanks, carriage return), so the text starts its own line
            assert before.rsplit('\n', 1)[-1].rsplit('\r', 1)[-1] == '', repr(before[-120:])
    assert '3/3' in raw.rsplit('done\n', 1)[-1]  # and the bar is drawn again below it


def test_callback_prints_start_their_own_lines_in_a_log():
    """python projects/chargpt.py 2>&1 | tee log: a file keeps the '\\r' that clears the bar's line on a terminal, so
    each printed line went on after the bar's text in the log (and, with stdout buffered, after later bars). There the
    bar's line is ended instead, and drawn again after the callback's lines."""
    code = ("import sys\nfrom mingpt.model import GPT; from mingpt.trainer import Trainer\n"
            "from mingpt.data import TokenDataset\n"
            "C = GPT.get_default_config(); C.model_type, C.vocab_size, C.block_size = 'gpt-nano', 7, 8\n"
            "T = Trainer.get_default_config(); T.max_iters, T.batch_size, T.device = 3, 4, 'cpu'\n"
            "trainer = Trainer(T, GPT(C), TokenDataset(list(range(7)) * 4, 8, 7))\n"
            "def report(t):\n"
            "    print(f'note {t.iter_num}', file=sys.stderr)\n"  # a warning's way
            "    print(f'iter {t.iter_num}\\nsample {t.iter_num}')\n"
            "trainer.add_callback('on_batch_end', report)\n"
            "trainer.run()\n")
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONUNBUFFERED'}  # stdout buffered, as a pipe's is
    env['PYTHONPATH'] = str(Path(__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, '-c', code], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         timeout=300)
    log = out.stdout.decode()  # as the file holds it: text=True would read each '\r' as a line's end
    assert out.returncode == 0, log
    lines = log.split('\n')
    for i in range(3):
        assert lines.index(f'note {i}') + 1 == lines.index(f'iter {i}') == lines.index(f'sample {i}') - 1, log
        assert 'training:' in lines[lines.index(f'note {i}') - 1], log  # whole lines below the bar's line, in order
        assert 'training:' in lines[lines.index(f'sample {i}') + 1], log  # and the bar drawn again below
    assert '3/3' in ''.join(lines[lines.index('sample 2'):]), log


def test_a_flushed_line_start_shows_at_once(monkeypatch):
    # e.g. input()'s prompt: no newline, flushed, and the user must see it while the callback waits
    screen = io.StringIO()
    monkeypatch.setattr(sys, 'stdout', screen)
    monkeypatch.setattr(sys, 'stderr', screen)
    trainer = make_trainer(max_iters=1, quiet=False)
    seen = []

    def ask(t):
        print('Continue? [y/n] ', end='', flush=True)
        seen.append(screen.getvalue().rsplit('\r', 1)[-1])
    trainer.add_callback('on_batch_end', ask)
    trainer.run()
    assert seen == ['Continue? [y/n] ']  # on its own line start, the bar cleared


def test_a_line_start_never_finished_is_not_lost(monkeypatch):
    screen = io.StringIO()
    monkeypatch.setattr(sys, 'stdout', screen)
    monkeypatch.setattr(sys, 'stderr', screen)
    trainer = make_trainer(max_iters=1, quiet=False)
    trainer.add_callback('on_batch_end', lambda t: print('no newline, no flush', end=''))
    trainer.run()
    assert 'no newline, no flush' in screen.getvalue()


def test_a_sample_the_console_cannot_encode_does_not_stop_a_script_of_ones_own():
    """A student's script (no run_cli) on a Windows pipe or file (cp1252): a callback printing a character outside
    the code page stopped the run with a codec error, and the training with it. It prints as an escape instead."""
    code = ("from mingpt.model import GPT; from mingpt.trainer import Trainer; from mingpt.data import TokenDataset\n"
            "C = GPT.get_default_config(); C.model_type, C.vocab_size, C.block_size = 'gpt-nano', 7, 8\n"
            "T = Trainer.get_default_config(); T.max_iters, T.batch_size, T.quiet = 2, 4, True\n"
            "trainer = Trainer(T, GPT(C), TokenDataset(list(range(7)) * 4, 8, 7))\n"
            "trainer.add_callback('on_batch_end', lambda t: print(t.iter_num, 'caf\\xe9 \\u2192'))\n"
            "trainer.run()\n")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]), PYTHONIOENCODING='cp1252')
    out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr.decode('cp1252', 'replace')
    assert out.stdout.splitlines()[-2:] == [b'0 caf\xe9 \\u2192', b'1 caf\xe9 \\u2192']


@pytest.mark.parametrize('extra, named', [(lambda s: s, 'PicklingError'), (np.arange(3), 'numpy')])
def test_checkpoint_extras_that_cannot_be_saved_and_loaded_back_are_refused_before_training(extra, named):
    """A lambda failed at the first save, which without a val set or checkpoint_interval is model.pt's at the end:
    all the training lost. A numpy array was saved, and from_checkpoint then refused the model.pt it made."""
    with pytest.raises(ValueError, match=rf"checkpoint_extras\['tokenize'\] cannot be saved .*{named}"):
        Trainer(Trainer.get_default_config(), make_trainer().model, Repeat(), checkpoint_extras={'tokenize': extra})


@pytest.mark.parametrize('option', ['must_match', 'run_files'])
def test_a_single_name_given_as_a_string_is_refused(option):
    """run_files='best.pt' was read as its characters: run() removed work_dir's files named b, e, s, t and p, then
    failed on '.', work_dir itself; must_match='vocab' checked five keys that no checkpoint has, so nothing."""
    message = rf"^{option} is a list of names, not the string 'best.pt': give \['best.pt'\]$"
    with pytest.raises(TypeError, match=message):
        Trainer(Trainer.get_default_config(), make_trainer().model, Repeat(), **{option: 'best.pt'})


def test_metrics_lines_hold_the_steps_loss_and_grad_norm_to_the_bit(tmp_path):
    """metrics.jsonl's numbers, read from the device in one go, are the step's own tensors' values exactly; a run
    without grad_norm_clip has no norm to write."""
    seen = []
    trainer = make_trainer(work_dir=str(tmp_path / 'clipped'), max_iters=4, grad_norm_clip=0.5)
    trainer.add_callback('on_batch_end', lambda t: seen.append(dict(loss=t.loss.item(), grad_norm=t.grad_norm.item())))
    trainer.run()
    lines = [json.loads(line) for line in (tmp_path / 'clipped' / 'metrics.jsonl').read_text().splitlines()]
    assert [{k: line[k] for k in ('loss', 'grad_norm')} for line in lines] == seen
    seen.clear()
    trainer = make_trainer(work_dir=str(tmp_path / 'unclipped'), max_iters=2, grad_norm_clip=None)
    trainer.add_callback('on_batch_end', lambda t: seen.append({'loss': t.loss.item()}))
    trainer.run()
    lines = [json.loads(line) for line in (tmp_path / 'unclipped' / 'metrics.jsonl').read_text().splitlines()]
    assert [{k: v for k, v in line.items() if k in ('loss', 'grad_norm')} for line in lines] == seen


def test_a_run_without_clipping_writes_no_grad_norm_rather_than_an_earlier_steps(tmp_path):
    """grad_norm is measured by clipping: a second run() without it, or a callback turning clipping off, wrote the
    last clipped norm on every line of metrics.jsonl."""
    trainer = make_trainer(work_dir=str(tmp_path / 'clipped'), max_iters=4, grad_norm_clip=1.0)

    def clip_off_after_2(t):
        if t.steps_done == 2:
            t.config.grad_norm_clip = None
    trainer.add_callback('on_batch_end', clip_off_after_2)
    trainer.run()
    lines = [json.loads(line) for line in (tmp_path / 'clipped' / 'metrics.jsonl').read_text().splitlines()]
    assert ['grad_norm' in line for line in lines] == [True, True, False, False] and trainer.grad_norm is None
    trainer.config.work_dir = str(tmp_path / 'unclipped')  # a notebook's next run(), clipping still off
    trainer.run()
    lines = [json.loads(line) for line in (tmp_path / 'unclipped' / 'metrics.jsonl').read_text().splitlines()]
    assert len(lines) == 4 and not any('grad_norm' in line for line in lines)


def test_evaluate_before_run_refuses_the_batches_run_would_refuse_with_runs_message():
    """evaluate() before any run() cut 2 windows into eval_iters * grad_accum_steps = 4 micro-batches, two of them
    empty, and failed with IndexError from collating nothing; now it checks the options it cuts by, as run() does."""
    for kw, message in ((dict(batch_size=2, grad_accum_steps=4, eval_iters=1),
                         r"trainer.batch_size \(2\) must be a multiple of grad_accum_steps \(4\) times the number of "
                         r"processes \(1\)"),
                        (dict(batch_size=0), r"trainer.batch_size=0 is out of range: it must be an integer >= 1")):
        for call in ('evaluate', 'run'):
            trainer = make_trainer(**kw)
            with pytest.raises(ConfigError, match=message):
                trainer.evaluate(Repeat()) if call == 'evaluate' else trainer.run()
    trainer = make_trainer(batch_size=4, grad_accum_steps=4, eval_iters=1)  # one window per micro-batch: scored
    assert 0 < trainer.evaluate(Repeat()) < 3


def test_check_options_checks_each_range_once(monkeypatch):
    """batch_size, grad_accum_steps and eval_iters were checked twice, by check_options' loop over RANGES and again
    by check_batches (which evaluate() calls alone); each option is now checked once, with the same message."""
    checked = []

    def counting(name, value, *args, **kw):
        checked.append(name)
        return check_range(name, value, *args, **kw)
    check_range = trainer_module.check_range
    monkeypatch.setattr(trainer_module, 'check_range', counting)
    Trainer.check_options(Trainer.get_default_config(), world_size=1)
    once = [name for name in checked if name != 'trainer.betas']  # its two numbers share one name
    assert sorted(once) == sorted(f'trainer.{key}' for key in trainer_module.RANGES), checked
    for key in trainer_module.BATCH_KEYS:
        c = Trainer.get_default_config()
        setattr(c, key, 0)
        with pytest.raises(ConfigError, match=rf"^trainer.{key}=0 is out of range: it must be an integer >= 1$"):
            Trainer.check_options(c, world_size=1)


def test_an_infinite_option_is_refused_by_name_but_an_infinite_clip_measures_the_norm_and_never_clips():
    """check_range took an unbounded side to hold inf: learning_rate=inf (or weight_decay=inf) was accepted and
    trained to nan from the second step. inf means something for grad_norm_clip alone: the norm is measured
    (grad_norm, metrics.jsonl) and never clipped, so the run trains as one without clipping."""
    for key in ('learning_rate', 'min_lr', 'weight_decay', 'max_iters'):
        with pytest.raises(ConfigError, match=rf"^trainer.{key}=inf is not finite: it must be (None or )?an? "):
            trainer = make_trainer()
            setattr(trainer.config, key, math.inf)  # as a notebook sets it (the command line's int max_iters: a type)
            trainer.run()
    with pytest.raises(ConfigError, match=r"^trainer.grad_norm_clip=-1.0 is out of range: it must be None or a "
                                          r"number >= 0$"):
        make_trainer(grad_norm_clip=-1).run()  # inf, a bound that allows every number, is not named ('<= inf')
    runs_ = {}
    for clip in (math.inf, None):
        trainer = make_trainer(max_iters=3, grad_norm_clip=clip)
        seen = runs_[clip] = []
        trainer.add_callback('on_batch_end', lambda t: seen.append((t.loss.item(), t.grad_norm)))
        trainer.run()
    assert [loss for loss, _ in runs_[math.inf]] == [loss for loss, _ in runs_[None]]
    assert all(norm > 1 for _, norm in runs_[math.inf]) and all(norm is None for _, norm in runs_[None])


def test_a_step_faster_than_the_wall_clock_ticks_is_measured(monkeypatch, tmp_path):
    """time.time() moves in 15.6 ms steps on Windows before Python 3.13, and NTP may set it back: a step of gpt-nano
    read 0 s there, and the run stopped at its first line with ZeroDivisionError (tokens / 0 s). The loop times its
    steps on perf_counter, a clock for durations, which this test makes tick 1 ms per forward pass."""
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(trainer_module, 'time', SimpleNamespace(time=lambda: 1e9, perf_counter=lambda: clock.now))
    trainer = make_trainer(work_dir=str(tmp_path), max_iters=3)
    trainer.model.register_forward_pre_hook(lambda *_: setattr(clock, 'now', clock.now + 1e-3))
    trainer.run()
    lines = [json.loads(line) for line in (tmp_path / 'metrics.jsonl').read_text().splitlines()]
    assert [line['tokens_per_s'] for line in lines] == [pytest.approx(16 * 8 / 1e-3)] * 3
    assert trainer.iter_dt == pytest.approx(1e-3) and trainer.iter_time == 1e9  # minGPT's iter_time: time.time()


def test_the_line_an_early_stop_writes_counts_its_steps_time_once(monkeypatch, tmp_path):
    """tokens_per_s on a clock that advances 1 s per forward pass: every line is batch_size x block_size = 128 tokens
    per second. The line an early stop writes after an unlogged step counted that step's second twice (64)."""
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(trainer_module, 'time', SimpleNamespace(time=time.time, perf_counter=lambda: clock.now))
    trainer = make_trainer(work_dir=str(tmp_path), log_interval=4)
    trainer.model.register_forward_pre_hook(lambda *_: setattr(clock, 'now', clock.now + 1.0))
    trainer.add_callback('on_batch_end', lambda t: t.steps_done == 10 and setattr(t.config, 'max_iters', 10))
    trainer.run()
    lines = [json.loads(line) for line in (tmp_path / 'metrics.jsonl').read_text().splitlines()]
    assert [line['iter'] for line in lines] == [0, 4, 8, 9]
    assert [line['tokens_per_s'] for line in lines] == [128.0] * 4


def test_a_callback_that_lowers_max_iters_under_ddp_is_refused_instead_of_hanging_the_other_ranks():
    """Callbacks run on rank 0 only: the other ranks never learnt of the new max_iters and waited at the next step's
    all-reduce forever. Rank 0 now stops with the reason (torchrun then ends the others)."""
    trainer = make_trainer()
    trainer.world_size = 2  # as torchrun's WORLD_SIZE sets it; this is rank 0, which runs the callbacks
    trainer.steps_done = 10
    trainer.add_callback('on_batch_end', lambda t: setattr(t.config, 'max_iters', t.steps_done))
    with pytest.raises(RuntimeError, match=r"a callback changed trainer.config.max_iters \(\d+ -> 10\) under DDP, "
                                           r"where callbacks run on rank 0 only: the other 1 rank\(s\) would go on"):
        trainer.trigger_callbacks('on_batch_end')


def test_a_callback_that_steers_the_learning_rate_under_ddp_is_refused_instead_of_splitting_the_replicas():
    """Under the constant schedule a callback's rate is kept, but on rank 0 only: each rank stepped at its own rate and
    the replicas, which DDP never compares, drifted apart in silence. Rank 0 now stops with the reason."""
    trainer = make_trainer()
    trainer.world_size = 2
    trainer.optimizer = trainer.model.configure_optimizers(trainer.config)  # as run() makes it, at 3e-3
    trainer.trigger_callbacks('on_batch_end')  # no callback: nothing to refuse
    trainer.add_callback('on_batch_end', lambda t: None)
    trainer.trigger_callbacks('on_batch_end')  # a callback that leaves the rate alone runs as before
    trainer.add_callback('on_batch_end', lambda t: [g.update(lr=1e-4) for g in t.optimizer.param_groups])
    with pytest.raises(RuntimeError, match=r"a callback changed the learning rate \(\[0.003, 0.003\] -> "
                                           r"\[0.0001, 0.0001\]\) under DDP, where callbacks run on rank 0 only"):
        trainer.trigger_callbacks('on_batch_end')


def test_a_callback_that_lowers_max_iters_stops_the_run_with_the_ends_files(tmp_path):
    """Early stopping, as trigger_callbacks says: the end's checkpoint and model were not written (the step was not
    known to be the last when it began), so the run lost its last 2 steps (ckpt.pt at 8) or its model.pt entirely;
    with log_interval=4, metrics.jsonl lacked the last step's line (iteration 9), which any other end writes."""
    def stop(t):
        if t.steps_done == 10:
            t.config.max_iters = t.steps_done

    for kw, name in ((dict(checkpoint_interval=4), 'ckpt.pt'), ({}, 'model.pt')):
        trainer = make_trainer(work_dir=str(tmp_path / name), log_interval=4, **kw)
        trainer.add_callback('on_batch_end', stop)
        trainer.run()
        assert trainer.iter_num == 10 and load_checkpoint(tmp_path / name / name)['iter_num'] == 10
        logged = [json.loads(line)['iter'] for line in (tmp_path / name / 'metrics.jsonl').read_text().splitlines()]
        assert logged == [0, 4, 8, 9]


def test_a_learning_rate_a_callback_steers_goes_on_exactly_after_a_resume(tmp_path):
    """The resume reset the optimizer to learning_rate, so the step after it ran at 3e-3, not the callback's 1.5e-3;
    a resume given another learning_rate, or from a run with a schedule, still trains at learning_rate."""
    def decay(t):  # the next step's rate, as a minGPT user would set it
        for group in t.optimizer.param_groups:
            group['lr'] = 3e-3 * 0.5 ** (t.steps_done // 2)

    def lrs(**kw):
        trainer = make_trainer(checkpoint_interval=3, **kw)
        trainer.add_callback('on_batch_end', decay)
        seen = []
        trainer.add_callback('on_batch_end', lambda t: seen.append(t.lr))
        trainer.run()
        return seen

    straight = lrs(max_iters=6)
    assert straight == pytest.approx([3e-3, 3e-3, 1.5e-3, 1.5e-3, 7.5e-4, 7.5e-4])
    assert lrs(max_iters=3, work_dir=str(tmp_path)) + lrs(max_iters=6, work_dir=str(tmp_path), resume=True) == straight
    assert lrs(max_iters=7, work_dir=str(tmp_path), resume=True, learning_rate=1e-3)[0] == 1e-3
    warm = str(tmp_path / 'warmup')  # stopped in a warmup and resumed without one: learning_rate, not the warmup's
    make_trainer(max_iters=2, warmup_iters=10, checkpoint_interval=2, work_dir=warm).run()
    assert lrs(max_iters=3, work_dir=warm, resume=True) == [3e-3]


@pytest.mark.parametrize('kw, refused', [
    (dict(warmup_iters=10, lr_decay_iters=5), r"trainer.lr_decay_iters \(5\) must be above warmup_iters \(10\)"),
    (dict(warmup_iters=10, lr_decay_iters=10), r"trainer.lr_decay_iters \(10\) must be above warmup_iters \(10\)"),
    (dict(min_lr=1e-2), r"trainer.min_lr \(0.01\) is above learning_rate \(0.003\): the cosine decays from"),
    (dict(min_lr=4e-3), r"trainer.min_lr \(0.004\) is above learning_rate \(0.003\): the cosine decays from")])
def test_a_cosine_that_would_not_decay_is_refused(kw, refused):
    """It ran: a decay ending inside the warmup dropped to min_lr at the step after it, a min_lr above the peak rose.
    The edges too: a decay that ends where the warmup ends (no step to decay over), a min_lr only a little above."""
    with pytest.raises(ConfigError, match=refused):
        make_trainer(lr_schedule='cosine', **kw).run()


def test_a_callback_setting_the_learning_rate_under_a_built_in_schedule_is_warned_that_it_is_overwritten():
    """The schedule replaced the callback's rate at the next step, silently."""
    def lower(t):
        for group in t.optimizer.param_groups:
            group['lr'] = 1e-5

    trainer = make_trainer(max_iters=3, lr_schedule='cosine')
    seen = []
    trainer.add_callback('on_batch_end', lambda t: seen.append(t.lr))
    trainer.run()  # the schedule alone, run() twice: no warning
    trainer.add_callback('on_batch_end', lower)
    with pytest.warns(UserWarning, match=r"a callback set the learning rate, which lr_schedule='cosine' with "
                                         r"warmup_iters=0 sets at every step: to steer it from a callback, give "
                                         r"lr_schedule='constant' and warmup_iters=0") as caught:
        trainer.run()
    assert caught[0].filename == __file__
    assert seen[3:] == seen[:3] == [trainer.get_lr(i) for i in range(3)]


def test_a_submodule_kept_in_eval_on_purpose_stays_there_through_evaluation_and_callbacks():
    """A frozen probe put in eval() before run(): run() switched the whole model to train(), and so did the end of
    every evaluation and of every step's callbacks, so the probe's dropout was on in the steps. A model given in eval
    mode as a whole (loaded for sampling) still trains in train mode."""
    trainer = make_trainer(max_iters=4, eval_interval=2, eval_iters=1)
    trainer.val_dataset = Repeat()
    model = trainer.model
    model.probe = torch.nn.Dropout(0.5)  # not used by forward: only its mode is watched
    model.probe.eval()
    seen = []  # (probe.training, transformer.training) at every forward of a training step

    def watch(m, args):
        if torch.is_grad_enabled():  # not evaluation's
            seen.append((m.probe.training, m.transformer.training))

    model.register_forward_pre_hook(watch)
    trainer.add_callback('on_batch_end', lambda t: t.model.train())  # e.g. after sampling in eval mode
    trainer.run()
    assert seen == [(False, True)] * 4 and not model.probe.training and model.training
    model.eval()
    seen.clear()
    trainer.run()
    assert seen == [(True, True)] * 4


def test_an_early_stop_evaluates_its_step_fills_its_bar_and_leaves_max_iters_for_run_again(tmp_path, capsys):
    """A callback's trainer.stop() at 10 of 60 (or the older max_iters = steps_done): the last step was not evaluated,
    unlike a normal end's, so metrics.jsonl and model.pt lacked the stopped model's val loss; the bar stayed at 10/60;
    and lowering max_iters made run() again train only 10 (stop() leaves max_iters alone)."""
    def stop_at_10(t):
        if t.steps_done == 10:
            t.stop()

    def lower_at_10(t):
        if t.steps_done == 10:
            t.config.max_iters = t.steps_done

    for how, callback in (('lower', lower_at_10), ('stop', stop_at_10)):
        trainer = make_trainer(work_dir=str(tmp_path / how), eval_interval=4, eval_iters=1, log_interval=4,
                               checkpoint_interval=4, quiet=False)
        trainer.val_dataset = Repeat()
        trainer.add_callback('on_batch_end', callback)
        trainer.run()
        lines = [json.loads(line) for line in (tmp_path / how / 'metrics.jsonl').read_text().splitlines()]
        assert [(line['iter'], 'val_loss' in line) for line in lines] == [(0, True), (4, True), (8, True), (9, True)]
        assert lines[-1]['val_loss'] == trainer.evaluate() == trainer.val_loss  # the stopped model's, recomputed
        assert load_checkpoint(tmp_path / how / 'ckpt.pt')['iter_num'] == 10
        err = capsys.readouterr().err
        assert '10/10' in err and '/60' not in err.rpartition('\r')[2]
        assert trainer.config.max_iters == (10 if how == 'lower' else 60)  # the older way lowers it for good
    trainer = make_trainer(eval_interval=None)
    trainer.add_callback('on_batch_end', stop_at_10)
    trainer.run()
    assert trainer.iter_num == 10 and trainer.config.max_iters == 60
    trainer.set_callback('on_batch_end', lambda t: None)
    trainer.run()
    assert trainer.iter_num == 60


def test_a_stopped_run_resumes_from_its_stop_towards_max_iters(tmp_path):
    def stop_at_3(t):
        if t.steps_done == 3:
            t.stop()

    trainer = make_trainer(work_dir=str(tmp_path), max_iters=6, checkpoint_interval=100)
    trainer.add_callback('on_batch_end', stop_at_3)
    trainer.run()
    resumed = make_trainer(work_dir=str(tmp_path), max_iters=6, resume=True)
    seen = []
    resumed.add_callback('on_batch_end', lambda t: seen.append(t.iter_num))
    resumed.run()
    straight = make_trainer(max_iters=6)
    straight.run()
    assert seen == [3, 4, 5]
    assert all(torch.equal(a, b) for a, b in zip(straight.model.parameters(), resumed.model.parameters()))


def test_a_callbacks_own_numbers_go_on_its_steps_line_of_metrics_jsonl(tmp_path):
    """A held-out accuracy had no way into metrics.jsonl: trainer.metrics['name'] = value puts it on the line of the
    step whose callback set it, written for it when log_interval would skip that step; a tensor is written as its
    number. A name the trainer writes itself is refused, not silently replaced."""
    given = {}

    def accuracy(t):
        if t.steps_done % 3 == 0:
            x, y = Repeat()[t.steps_done]
            with torch.no_grad():
                given[t.iter_num] = t.metrics['accuracy'] = (t.model(x[None])[0].argmax(-1) == y).float().mean()

    trainer = make_trainer(work_dir=str(tmp_path / 'a'), max_iters=10, log_interval=4)
    trainer.add_callback('on_batch_end', accuracy)
    trainer.run()
    lines = [json.loads(line) for line in (tmp_path / 'a' / 'metrics.jsonl').read_text().splitlines()]
    assert [line['iter'] for line in lines] == [0, 2, 4, 5, 8, 9]
    assert {line['iter']: line['accuracy'] for line in lines if 'accuracy' in line} == {
        i: a.item() for i, a in given.items()} and sorted(given) == [2, 5, 8]
    trainer = make_trainer(work_dir=str(tmp_path / 'b'), max_iters=2)
    trainer.add_callback('on_batch_end', lambda t: t.metrics.update(val_loss=1.0))
    with pytest.raises(ValueError, match=r"trainer.metrics \['val_loss'\] would replace the trainer's own numbers in "
                                         r"metrics.jsonl \(iter, loss, .*\): give the callback's numbers other names"):
        trainer.run()


def test_an_evaluation_off_the_log_interval_grid_gets_its_own_line_of_metrics_jsonl(tmp_path):
    """With eval_interval and log_interval that do not divide each other, each evaluated step still writes its line,
    val_loss on it (the loss curves plot it from there); the logged steps in between keep theirs, without one."""
    trainer = make_trainer(work_dir=str(tmp_path), max_iters=7, log_interval=4, eval_interval=3, eval_iters=1)
    trainer.val_dataset = Repeat()
    trainer.run()
    lines = [json.loads(line) for line in (tmp_path / 'metrics.jsonl').read_text().splitlines()]
    assert [line['iter'] for line in lines] == [0, 3, 4, 6]
    assert [line['iter'] for line in lines if 'val_loss' in line] == [0, 3, 6]
    assert lines[-1]['val_loss'] == trainer.val_loss


@pytest.mark.parametrize('value', ['text', None, [1.0, 2.0], torch.ones(2)])
def test_a_callbacks_metric_that_is_not_one_number_is_refused_by_name(tmp_path, value):
    """Text and None went into metrics.jsonl, where the plots and the readers expect a number; a pair too (as a
    list), or failed with torch's 'a Tensor with 2 elements cannot be converted to Scalar'."""
    trainer = make_trainer(work_dir=str(tmp_path), max_iters=3)
    trainer.add_callback('on_batch_end', lambda t: t.steps_done == 2 and t.metrics.update(note=value))
    with pytest.raises(TypeError, match=rf"trainer.metrics\['note'\] = {re.escape(repr(value)[:80])} is not one "
                                        "number, which is what a line of metrics.jsonl holds per name"):
        trainer.run()
    lines = [json.loads(line) for line in (tmp_path / 'metrics.jsonl').read_text().splitlines()]
    assert [line['iter'] for line in lines] == [0] and 'note' not in lines[0]  # nothing of the refused line


@pytest.mark.parametrize('value, number', [(3, 3), (2.5, 2.5), (True, True), (torch.tensor([0.25]), 0.25),
                                           (np.float32(0.5), 0.5), (np.array([[7]]), 7)])
def test_a_callbacks_metric_that_is_one_number_is_written_as_a_python_number(value, number):
    written = runs.metric_value('m', value)
    assert written == number and type(written) is type(number) and json.loads(json.dumps(written)) == number


def test_a_run_stopped_after_one_step_says_1_iteration(tmp_path, capsys):
    trainer = make_trainer(work_dir=str(tmp_path), checkpoint_interval=1, max_iters=3)
    def crash_in_step_2(t):
        if t.steps_done == 2:
            raise RuntimeError('a bug in my callback')

    trainer.add_callback('on_batch_end', crash_in_step_2)
    with pytest.raises(RuntimeError):
        trainer.run()
    assert "stopped after 2 iterations; " + str(tmp_path / 'ckpt.pt') + " was saved after 1 iteration: go on" in (
        capsys.readouterr().err)


def test_a_callback_that_calls_stop_under_ddp_is_refused_instead_of_hanging_the_other_ranks():
    trainer = make_trainer()
    trainer.world_size = 2  # rank 0, which alone runs the callbacks
    trainer.add_callback('on_batch_end', lambda t: t.stop())
    with pytest.raises(RuntimeError, match=r"a callback called trainer.stop\(\) under DDP, where callbacks run on rank "
                                           r"0 only: the other 1 rank\(s\) would go on training and wait for this one"):
        trainer.trigger_callbacks('on_batch_end')


def test_save_checkpoint_under_ddp_before_a_run_has_ended_is_refused_by_name(tmp_path):
    """Under DDP a checkpoint of one's own holds the random states every rank ended run() with; before run(), or
    after an error stopped it, there are none (it failed in torch: 'Default process group has not been
    initialized')."""
    trainer = make_trainer(work_dir=str(tmp_path))
    trainer.world_size = 2
    with pytest.raises(RuntimeError, match=r"trainer.save_checkpoint\(\) under DDP saves the random states every rank "
                                           r"ended run\(\) with, and no run\(\) has ended here \(none has run, or an "
                                           r"error stopped it\): go on from the last checkpoint the loop saved"):
        trainer.save_checkpoint()
    assert not list(tmp_path.iterdir())


def test_training_weights_held_in_bfloat16_is_warned_of():
    """GPT.from_pretrained(name, dtype=torch.bfloat16), made for sampling, then trained: every layer norm gain stayed
    at 1 after two steps at lr 3e-4 (bfloat16's steps near 1 are 0.0078), with no word."""
    trainer = make_trainer(max_iters=2, learning_rate=3e-4)
    trainer.model.to(torch.bfloat16)
    with pytest.warns(UserWarning, match=r"trainable parameters are bfloat16, which rounds away .* keep the weights in "
                                         r"float32 and compute in bfloat16 with trainer.dtype='bfloat16'") as caught:
        trainer.run()
    assert caught[0].filename == __file__  # at the user's trainer.run(), not a line of the loop in trainer.py
    gains = [m.weight for m in trainer.model.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert all(bool((g == 1).all()) for g in gains)  # what the warning is about: these did not move
    trainer = make_trainer(max_iters=1)
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # float32 weights: no warning
        trainer.run()


def test_bfloat16_autocast_on_a_gpu_older_than_ampere_is_warned_of(monkeypatch):
    """trainer.dtype='bfloat16' on Colab's T4 (compute capability 7.5) ran emulated, slower than float32, without a
    word (the README says float16 there). No GPU here: the capability is mocked, and so is the device for the run."""
    capability = {}
    monkeypatch.setattr(torch.cuda, 'get_device_capability', lambda device=None: capability['now'])
    for now, emulated in (((7, 5), True), ((7, 0), True), ((8, 0), False), ((9, 0), False)):
        capability['now'] = now
        assert trainer_module.bfloat16_emulated('cuda') is emulated
        assert trainer_module.bfloat16_emulated('cuda:1') is emulated
    assert not trainer_module.bfloat16_emulated('cpu') and not trainer_module.bfloat16_emulated('mps')
    monkeypatch.setattr(trainer_module, 'bfloat16_emulated', lambda device: True)  # as on a T4
    monkeypatch.setattr(torch.cuda, 'get_device_name', lambda device=None: 'Tesla T4')
    with pytest.warns(UserWarning, match=r"trainer.dtype='bfloat16' on Tesla T4, a GPU older than Ampere \(compute "
                                         r"capability below 8.0\), is emulated and slower than float32: use "
                                         r"trainer.dtype='float16' there"):
        make_trainer(max_iters=1, dtype='bfloat16').run()
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # another dtype: no word
        make_trainer(max_iters=1, dtype='float32').run()


def test_float16_weights_under_the_float16_gradient_scaler_are_refused_before_training(tmp_path):
    """Colab's T4 has no bfloat16, so float16 it is: GPT.from_pretrained(name, dtype=torch.float16) trained with
    trainer.dtype='float16' stopped at the first step with torch's 'Attempting to unscale FP16 gradients.' The CPU's
    GradScaler is the same code as CUDA's."""
    trainer = make_trainer(max_iters=2, dtype='float16', work_dir=str(tmp_path / 'run'))
    trainer.model.half()
    with pytest.raises(ValueError, match=r"parameters are float16, and trainer.dtype='float16' adds a gradient scaler.*"
                                         r"keep the weights in float32"):
        trainer.run()
    assert not (tmp_path / 'run').exists()  # refused before any file
    trainer.model.float()  # the fix the message gives: float32 weights, float16 autocast
    trainer.run()
    assert trainer.scaler.is_enabled() and trainer.steps_done == 2


def test_a_dataset_spawned_workers_cannot_import_is_refused_before_training(monkeypatch, tmp_path):
    """On macOS and Windows DataLoader workers start as a new Python and import the dataset's class: one defined
    inside a function (or in a notebook) stopped training with 'DataLoader worker exited unexpectedly'."""
    class Local(Repeat):  # defined here, inside a function: no worker can import it
        pass

    monkeypatch.setattr(multiprocessing, 'get_start_method', lambda *args, **kw: 'spawn')  # as on macOS
    trainer = make_trainer(max_iters=1, num_workers=2, work_dir=str(tmp_path / 'run'))
    trainer.train_dataset = Local()
    with pytest.raises(ValueError, match=r"the dataset cannot be sent to the DataLoader workers \(trainer.num_workers=2"
                                         r"\), which start as a new Python \('spawn'\).* or set trainer.num_workers=0"):
        trainer.run()
    assert trainer.iter_num == 0 and not (tmp_path / 'run').exists()  # refused before a step or a file


def test_a_trainable_gpt_left_in_eval_mode_inside_a_module_of_ones_own_is_warned_of():
    """A GPT from from_checkpoint or from_pretrained (eval mode, for sampling) inside a classifier of one's own, a new
    module and so in train mode: run() left the GPT in eval mode, and it trained without dropout, with no word. Parts
    frozen and kept in eval on purpose (sentiment.py's freeze) are not warned of, nor is a model without dropout."""
    trainer = make_classifier_trainer(max_iters=2)
    gpt = trainer.model.gpt
    with pytest.warns(UserWarning, match=r"gpt.transformer.wte, gpt.transformer.wpe, .* and \d+ more hold trainable "
                                         r"parameters but are in eval mode, so they train without their dropout.* "
                                         r"Call model.train\(\) on your whole module before run\(\)") as caught:
        trainer.run()
    assert caught[0].filename == __file__
    assert not gpt.training  # what the warning is about: the run kept it so
    gpt.requires_grad_(False).eval()
    gpt.transformer.h[-1].requires_grad_(True).train()
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        trainer.run()  # the frozen blocks in eval, the block that trains in train mode
        gpt.requires_grad_(True).eval()
        for module in gpt.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        trainer.run()  # no dropout: eval mode trains as train mode does
        teacher = make_trainer().model.requires_grad_(False).eval()  # with dropout, frozen: distilled into gpt
        trainer.model.teacher = teacher
        trainer.run()  # gpt, the student, has no dropout: nothing to warn of (the teacher's counted for it before)


def test_trainable_parameters_the_optimizer_leaves_out_are_warned_of_and_a_missing_optimizer_is_named():
    """A classifier whose configure_optimizers returns its GPT's trained the GPT and never its head, with no word; one
    that forgot to return its optimizer stopped with "'NoneType' object has no attribute 'param_groups'"."""
    class Delegating(Classifier):
        def configure_optimizers(self, train_config):
            return self.gpt.configure_optimizers(train_config)

    class NoReturn(Classifier):
        def configure_optimizers(self, train_config):
            torch.optim.AdamW(self.parameters(), lr=train_config.learning_rate)

    trainer = make_classifier_trainer(max_iters=2)
    trainer.model = Delegating(trainer.model.gpt.train())
    head = trainer.model.head.weight.detach().clone()
    with pytest.warns(UserWarning, match=r"the optimizer from Delegating.configure_optimizers leaves out the trainable "
                                         r"head.weight, head.bias, so they never change .* e.g. configure_optimizers = "
                                         r"GPT.configure_optimizers in the class, or freeze them"):
        trainer.run()
    assert torch.equal(trainer.model.head.weight, head)  # what the warning is about
    trainer.model.head.requires_grad_(False)  # left out on purpose: frozen
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        trainer.run()
    trainer.model = NoReturn(trainer.model.gpt)
    with pytest.raises(TypeError, match=r"NoReturn.configure_optimizers\(train_config\) returned NoneType, not a "
                                        r"torch.optim optimizer: return the one it makes"):
        trainer.run()


@pytest.mark.parametrize('returns, named', [
    (lambda logits, loss: loss, r"returned a float32 tensor of shape \(\)"),
    (lambda logits, loss: (loss, logits), r"returned \(a float32 tensor of shape \(\), a float32 tensor of shape "
                                          r"\(16, 2\)\)"),
    (lambda logits, loss: dict(logits=logits, loss=loss), r"returned dict"),
    (lambda logits, loss: (logits, None), r"returned \(a float32 tensor of shape \(16, 2\), NoneType\)")],
    ids=['the loss alone', '(loss, logits)', 'a dict', 'no loss'])
def test_a_forward_that_does_not_return_logits_and_one_loss_is_named(returns, named):
    """minGPT's contract is model(x, y) -> (logits, loss). A classifier of one's own that returned the loss alone met
    'iteration over a 0-d tensor'; (loss, logits), 'grad can be implicitly created only for scalar outputs'; a dict,
    "unsupported operand type(s) for /: 'str' and 'int'"; a forward that ignored y, NoneType's. Each is named, with
    the fix, before a step."""
    class Returns(Classifier):
        def forward(self, x, y=None):
            logits, loss = super().forward(x, y)
            return returns(logits, loss)

    trainer = make_classifier_trainer(max_iters=1)
    trainer.model = Returns(trainer.model.gpt.train())
    refused = (r"Returns's forward\(x, y\) " + named + r"; the trainer needs \(logits, loss\), the loss one number .* "
               r"e.g. return logits, F.cross_entropy\(logits, y\)")
    with pytest.raises(TypeError, match=refused):
        trainer.run()
    assert trainer.iter_num == 0
    with pytest.raises(TypeError, match=refused):
        trainer.evaluate(Labelled())  # evaluation reads the loss as the step does


def test_a_setting_the_checkpoint_does_not_record_is_named_as_newer_than_it():
    """A sentiment checkpoint written before lm_loss_weight existed was refused with 'lm_loss_weight=None there, 0.0
    here', as if its run had set it to None; a value recorded as None is still None."""
    assert (describe_difference({'dropout': 0.1}, {'dropout': 0.1, 'lm_loss_weight': 0.0})
            == "lm_loss_weight not recorded there (older than that option), 0.0 here")
    assert describe_difference({'head': None}, {'head': 'linear'}) == "head=None there, 'linear' here"


def test_a_run_started_in_a_work_dir_another_run_is_training_in_is_refused(tmp_path):
    """Two terminals (or two students) started in one work_dir: the second removed the first's checkpoint being
    written (its temporary file), which stopped it with 'No such file or directory', and put its own config.json and
    metrics lines over the first's. Now it is refused, fresh, resumed or overwriting, and the first trains on."""
    work_dir = tmp_path / 'run'  # made by the first run: it is locked when made
    first = make_trainer(work_dir=str(work_dir), max_iters=4, checkpoint_interval=2)
    refusals = []

    def second_run(t):
        if t.iter_num == 2:
            for kw in ({}, {'resume': True}, {'overwrite': True}):
                with pytest.raises(ConfigError) as e:
                    make_trainer(work_dir=str(work_dir), max_iters=8, **kw).run()
                refusals.append(str(e.value))
    first.add_callback('on_batch_end', second_run)
    first.run()
    assert len(refusals) == 3
    for message in refusals:
        assert re.fullmatch(rf"trainer.work_dir='{re.escape(str(work_dir))}' is in use: another run is training in it "
                            rf"\(process {os.getpid()} on .+: .+\), and two runs in one folder would overwrite "
                            r"each other's files; wait for it to end, or train in another work_dir "
                            r"\(--trainer.work_dir=DIR\)", message, re.DOTALL), message
    assert [json.loads(line)['iter'] for line in (work_dir / 'metrics.jsonl').open()] == [0, 1, 2, 3]
    assert load_checkpoint(work_dir / 'ckpt.pt')['iter_num'] == 4
    make_trainer(work_dir=str(work_dir), max_iters=6, resume=True).run()  # the first has ended: the folder is free
    assert load_checkpoint(work_dir / 'model.pt')['iter_num'] == 6


def test_a_fresh_run_into_a_new_folder_looks_again_once_it_holds_the_lock(tmp_path):
    """Two runs started into a folder not yet made: the first ended while the second was setting up (here: in its
    configure_optimizers), and the second then took the free lock and wrote over the first's run without a word."""
    work_dir = tmp_path / 'run'
    second = make_trainer(work_dir=str(work_dir), max_iters=2, num_workers=2)
    own = second.model.configure_optimizers

    def first_run_meanwhile(train_config):
        make_trainer(work_dir=str(work_dir), max_iters=3).run()
        return own(train_config)
    second.model.configure_optimizers = first_run_meanwhile
    earlier = r"holds an earlier run \(model.pt: a model saved after 3 iterations\)"
    with pytest.raises(ConfigError, match=earlier) as kept:  # kept, as a notebook keeps the error and its traceback
        second.run()
    assert load_checkpoint(work_dir / 'model.pt')['iter_num'] == 3  # the first run's, kept
    assert multiprocessing.active_children() == [], kept  # refused before its DataLoader's workers started


def test_a_refused_run_names_the_process_holding_the_folder_not_a_killed_one_before_it(tmp_path):
    """The note of who holds the lock was written only once the run's files began: a run killed (kill -9) left its
    note, and while the next one set up, a third was told that the dead process held the folder."""
    (tmp_path / '.lock').write_text('process 111 on deadhost: python chargpt.py')  # a killed run's note
    holder = runs.RunFolder(str(tmp_path))
    holder.check()  # holds the lock, setting up
    try:
        with pytest.raises(ConfigError, match=rf"is in use: another run is training in it \(process {os.getpid()} on "):
            make_trainer(work_dir=str(tmp_path), max_iters=2).run()
    finally:
        holder.release()


def test_a_run_refused_or_stopped_by_an_error_frees_its_work_dir(tmp_path):
    (tmp_path / 'ckpt.pt').write_bytes(b'')  # refused after the lock is taken: it holds a run (an empty file: none)
    trainer = make_trainer(work_dir=str(tmp_path), max_iters=2, dtype='float16')
    trainer.model.half()
    with pytest.raises(ValueError, match='parameters are float16'):
        trainer.run()

    def bug(t):
        raise RuntimeError('a bug in a callback')
    trainer = make_trainer(work_dir=str(tmp_path), max_iters=2)
    trainer.add_callback('on_batch_end', bug)
    with pytest.raises(RuntimeError, match='a bug'):
        trainer.run()
    make_trainer(work_dir=str(tmp_path), max_iters=2, overwrite=True).run()


def test_a_full_disk_while_metrics_jsonl_is_written_keeps_its_whole_lines_and_names_it(tmp_path, monkeypatch):
    """A write to a full disk said only '[Errno 28] No space left on device', of no file, and left half a line."""
    lines = []

    def half_then_full(f, text):
        f.buffer.write(text[:len(text) // 2].encode())
        f.buffer.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def filling_open(path, mode='r', **kw):
        f = open(path, mode, **kw)
        if os.path.basename(path) == 'metrics.jsonl' and 'a' in mode:
            lines.append(path)
            if len(lines) == 4:  # the fourth line: half of it written, then the disk is full
                f.write = lambda text: half_then_full(f, text)
        return f
    monkeypatch.setattr(runs, 'open', filling_open, raising=False)
    trainer = make_trainer(work_dir=str(tmp_path), max_iters=6)
    path = tmp_path / 'metrics.jsonl'
    with pytest.raises(OSError, match=rf"could not write {re.escape(str(path))} \(\[Errno 28\] No space left on "
                                      r"device; [\d,]+ bytes are free there\); its earlier lines are kept. If the "
                                      "disk is full, free some space"):
        trainer.run()
    assert [json.loads(line)['iter'] for line in path.read_text().splitlines()] == [0, 1, 2]
    assert path.read_text().endswith('\n')


@pytest.mark.skipif(not os.path.isdir('/proc/self'), reason="Linux's /proc: a folder no one can make folders in")
def test_a_work_dir_that_cannot_be_made_is_named_with_the_folder_it_would_be_made_in():
    """For root, who may write anywhere, /proc passed the check of work_dir, and the run stopped with makedirs's
    '[Errno 2] No such file or directory: /proc/mingpt'."""
    with pytest.raises((ConfigError, FileNotFoundError)) as e:
        make_trainer(work_dir='/proc/mingpt/run', max_iters=1).run()
    assert re.search(r"cannot make the folder /proc/mingpt/run in /proc \(No such file or directory\); choose a folder "
                     r"that can be written|cannot be written: this user may not write in /proc", str(e.value))


def test_a_work_dir_set_in_python_under_the_home_folder_is_there_not_in_a_folder_named_tilde(tmp_path, monkeypatch):
    """train_config.work_dir = '~/runs/x' in a notebook made ./~/runs/x: Python's paths, unlike a shell, keep the ~.
    A folder named ~ is one a student cleans up with `rm -rf ~`, the home folder itself."""
    monkeypatch.setenv('HOME', str(tmp_path / 'home'))
    monkeypatch.chdir(tmp_path)
    trainer = make_trainer(work_dir='~/runs/x', max_iters=2)
    trainer.run()
    assert trainer.config.work_dir == str(tmp_path / 'home' / 'runs' / 'x')
    assert (tmp_path / 'home' / 'runs' / 'x' / 'model.pt').exists() and not (tmp_path / '~').exists()


def test_a_disk_too_full_for_the_locks_note_is_named_by_the_first_file_the_run_writes(tmp_path):
    """The note in work_dir/.lock of who trains there is written unbuffered, so a full disk fails it at once: the
    lock still holds, and the run stops at args.txt, by name, not at the lock's close with an OSError of no file.
    The disk is full as ulimit -f 0 makes it: no file may grow (Python ignores SIGXFSZ, so a write fails, EFBIG)."""
    code = ("import resource, sys, tempfile; from types import SimpleNamespace; from test_trainer import make_trainer\n"
            "tempfile.gettempdir()  # found before the disk fills: torch asks for it when it builds the optimizer\n"
            "trainer = make_trainer(max_iters=2, work_dir=sys.argv[1])\n"
            "trainer.run_config = SimpleNamespace(system=SimpleNamespace(work_dir=None), to_dict=dict)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n"
            "trainer.run()\n")
    out = subprocess.run([sys.executable, '-c', code, str(tmp_path)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, 'PYTHONPATH': os.pathsep.join(sys.path)})
    # the last line: the error the user reads (a buffered note failed again at the lock's release, naming no file)
    assert out.stderr.strip().splitlines()[-1].startswith(
        f"OSError: could not write {tmp_path / 'args.txt'} ([Errno 27] File too large"), out.stderr
    assert sorted(os.listdir(tmp_path)) == ['.lock', 'metrics.jsonl']  # empty: no temporary file left


def test_a_full_disk_when_a_resume_rewrites_metrics_jsonl_names_it_and_keeps_it(tmp_path, monkeypatch):
    """A resume rewrites metrics.jsonl without the iterations it redoes; on a full disk that said only '[Errno 28] No
    space left on device'."""
    make_trainer(work_dir=str(tmp_path), max_iters=2, checkpoint_interval=2).run()
    before = (tmp_path / 'metrics.jsonl').read_text()
    monkeypatch.setattr(Path, 'write_text', full_disk_at('metrics.jsonl'))
    path = tmp_path / 'metrics.jsonl'
    with pytest.raises(OSError, match=rf"could not write {re.escape(str(path))} \(\[Errno 28\] No space left on "
                                      r"device; [\d,]+ bytes are free there\); the one there before is unchanged"):
        make_trainer(work_dir=str(tmp_path), max_iters=4, resume=True).run()
    assert path.read_text() == before and not [p for p in os.listdir(tmp_path) if '.tmp' in p]


def test_the_lock_names_the_run_training_in_work_dir_and_is_emptied_when_it_ends(tmp_path):
    """A refused run prints what .lock says of the run training there: that must be this run alone, not this run's
    note over the longer one of a run killed before (whose end was left behind), nor a run that has ended."""
    (tmp_path / '.lock').write_text('process 4242 on a-machine-with-a-long-name: projects/chargpt.py ' * 3)
    notes = []
    trainer = make_trainer(work_dir=str(tmp_path), max_iters=2)
    trainer.add_callback('on_batch_end', lambda t: notes.append(lock_holder(tmp_path)))
    trainer.run()
    assert notes == [f"process {os.getpid()} on {socket.gethostname()}: {shlex.join(sys.argv)}"] * 2
    assert (tmp_path / '.lock').read_bytes() == b''


def test_a_run_in_a_folder_whose_lock_another_user_made_trains_and_leaves_the_lock_as_it_was(tmp_path, monkeypatch):
    """Two students share a run folder: the .lock the first one's run made is read-only to the second, whose run
    locks it all the same; it must neither fail at its end trying to empty that file nor change it."""
    (tmp_path / '.lock').write_text('process 1 on lab-pc: projects/chargpt.py')
    open_for_writing = os.open

    def not_ours(path, flags, *args):
        if str(path).endswith('.lock') and flags & os.O_RDWR:
            raise PermissionError(errno.EACCES, 'Permission denied', str(path))
        return open_for_writing(path, flags, *args)
    monkeypatch.setattr(os, 'open', not_ours)
    make_trainer(work_dir=str(tmp_path), max_iters=2, overwrite=True).run()
    assert load_checkpoint(tmp_path / 'model.pt')['iter_num'] == 2
    assert (tmp_path / '.lock').read_text() == 'process 1 on lab-pc: projects/chargpt.py'


def test_a_resume_path_set_in_python_under_the_home_folder_is_read_there(tmp_path, monkeypatch):
    """train_config.resume = '~/runs/x/ckpt.pt' in a notebook: Python's paths keep the ~, so the checkpoint was looked
    for in a folder named ~ here: "no checkpoint at ~/runs/x/ckpt.pt"."""
    monkeypatch.setenv('HOME', str(tmp_path / 'home'))
    monkeypatch.chdir(tmp_path)
    make_trainer(work_dir=str(tmp_path / 'home' / 'runs' / 'x'), max_iters=2, checkpoint_interval=2).run()
    trainer = make_trainer(work_dir=str(tmp_path / 'y'), max_iters=4, resume='~/runs/x/ckpt.pt')
    trainer.run()
    assert trainer.config.resume == str(tmp_path / 'home' / 'runs' / 'x' / 'ckpt.pt')
    assert load_checkpoint(tmp_path / 'y' / 'model.pt')['iter_num'] == 4


@pytest.mark.skipif(not PER_BACKEND, reason='torch before 2.9 has no per-backend float32 matmul settings')
def test_tf32_gives_each_backend_its_precision_back_however_the_run_ends(tmp_path):
    """The trainer's tf32 set torch's float32 matmul precision to 'high' for good: in a notebook every later float32
    computation (a comparison with Hugging Face's logits) was rounded to TF32 after one training cell. And a user of
    torch's per-backend settings (torch.backends.cuda.matmul.fp32_precision) could not train at all: the trainer read
    the process-wide precision, which torch refuses to report once those are set."""
    cuda, cpu = torch.backends.cuda.matmul, torch.backends.mkldnn.matmul
    before = cuda.fp32_precision, cpu.fp32_precision
    try:
        cuda.fp32_precision, cpu.fp32_precision = 'ieee', 'ieee'  # the user's own choice, through the new API
        with pytest.raises(KeyboardInterrupt):  # the kernel's stop button, mid-training
            with matmul_precision('tf32', ['cuda']):
                assert (cuda.fp32_precision, cpu.fp32_precision) == ('tf32', 'ieee')
                raise KeyboardInterrupt
        assert (cuda.fp32_precision, cpu.fp32_precision) == ('ieee', 'ieee')
        make_trainer(max_iters=2, tf32=True, work_dir=str(tmp_path)).run()  # on the CPU: tf32 changes nothing
        assert (cuda.fp32_precision, cpu.fp32_precision) == ('ieee', 'ieee')
    finally:
        cuda.fp32_precision, cpu.fp32_precision = before


def test_tf32_on_a_torch_without_per_backend_settings_uses_the_process_wide_one(monkeypatch):
    """torch before 2.9 (mingpt runs on 2.5) has no torch.backends.*.matmul.fp32_precision: the one setting there is
    set and given back."""
    if PER_BACKEND:
        cuda, cpu = torch.backends.cuda.matmul, torch.backends.mkldnn.matmul
        before = cuda.fp32_precision, cpu.fp32_precision
        monkeypatch.setattr(torch.backends.mkldnn, 'matmul', None)  # as on such a torch
    try:
        torch.set_float32_matmul_precision('highest')
        with matmul_precision('tf32'):
            assert torch.get_float32_matmul_precision() == 'high'
        assert torch.get_float32_matmul_precision() == 'highest'
    finally:
        if PER_BACKEND:
            cuda.fp32_precision, cpu.fp32_precision = before


@pytest.mark.skipif(not torch.cuda.is_available(), reason='tf32 applies on CUDA only')
def test_tf32_is_on_while_the_trainer_runs_on_cuda_and_off_after():
    """trainer.tf32 on a GPU: TF32 matmuls in the steps and callbacks, the full float32 precision of before once
    run() returns (a Trainer made with tf32 set it at construction, and nothing set it back)."""
    cuda = torch.backends.cuda.matmul
    before = cuda.fp32_precision
    try:
        cuda.fp32_precision = 'ieee'
        trainer = make_trainer(max_iters=2, device='cuda', tf32=True)
        assert cuda.fp32_precision == 'ieee'
        seen = []
        trainer.add_callback('on_batch_end', lambda t: seen.append(cuda.fp32_precision))
        trainer.run()
        assert seen == ['tf32', 'tf32'] and cuda.fp32_precision == 'ieee'
    finally:
        cuda.fp32_precision = before


def test_a_model_whose_own_submodule_is_named_module_resumes_its_checkpoint(tmp_path):
    """The trainer saves the names of the model it was given, but a resume stripped 'module.' (DDP's prefix) from
    every name: a model holding its GPT as self.module could not resume its own ckpt.pt ('does not match this model
    (trained with other model settings?)')."""
    first = make_trainer(work_dir=str(tmp_path), max_iters=2, checkpoint_interval=2)
    first.model = Holder(first.model)
    first.run()
    again = make_trainer(work_dir=str(tmp_path), max_iters=4, resume=True)
    again.model = Holder(again.model)
    again.run()
    assert again.iter_num == 4
    # its state_dict saved through DDP by other code ('module.module.'): DDP's prefix alone comes off
    ckpt = load_checkpoint(tmp_path / 'ckpt.pt')
    ckpt['model'] = {'module.' + k: v for k, v in ckpt['model'].items()}
    save_checkpoint(ckpt, tmp_path / 'ckpt.pt')
    third = make_trainer(work_dir=str(tmp_path), max_iters=6, resume=True)
    third.model = Holder(third.model)
    third.run()
    assert third.iter_num == 6


def test_a_device_this_torch_cannot_use_is_refused_by_its_option(monkeypatch):
    """The refusal said "device 'cuda' is not available", not which of a project's options set it."""
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    with pytest.raises(ConfigError, match=r"^trainer.device 'cuda' is not available to this torch .*: choose 'auto'"):
        make_trainer(device='cuda')
