"""The trainer's scale features: schedule, accumulation, mixed precision, compile, evaluation, metrics, checkpoints
and exact resume (a run killed with SIGKILL and resumed reproduces the uninterrupted run bit for bit on CPU)."""
import json
import math
import os
import pickle
import re
import signal
import subprocess
import sys
import textwrap
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from conftest import load_project
from mingpt.bpe import get_encoder, train_bpe
from mingpt.checkpoint import load_checkpoint, save_checkpoint, strip_prefixes
from mingpt.data import CharDataset, CharTokenizer, TokenDataset, cache_dir, encode_text
from mingpt.model import GPT
from mingpt.runs import check_same_run, platform_record
from mingpt.seq2seq import Transformer
from mingpt.trainer import StepSampler, Trainer, flops_per_token, peak_flops
from mingpt.utils import CfgNode as CN, ConfigError, eval_mode, get_rng_state, set_rng_state, set_seed

VOCAB, BLOCK = 16, 8


def tiny_gpt(dropout=0.0):
    c = GPT.get_default_config()
    c.model_type, c.n_layer, c.n_head, c.n_embd = None, 2, 2, 16
    c.vocab_size, c.block_size = VOCAB, BLOCK
    c.embd_pdrop = c.resid_pdrop = c.attn_pdrop = dropout
    return GPT(c)


def tokens(n=2000, seed=0):
    # a learnable sequence (each id mostly follows from the last) with some noise
    rng = np.random.default_rng(seed)
    ids = np.cumsum(rng.integers(1, 3, size=n)) % VOCAB
    return TokenDataset(ids, BLOCK, vocab_size=VOCAB)


def train(tmp_path=None, val=False, callbacks=(), seed=0, hook=None, must_match=(), **overrides):
    """Train tiny_gpt on tokens(); hook(model), when given, runs first (to register the test's module hooks)."""
    set_seed(seed)
    model = tiny_gpt(overrides.pop('dropout', 0.0))
    if hook:
        hook(model)
    tc = Trainer.get_default_config()
    tc.merge_from_dict({'max_iters': 4, 'batch_size': 8, 'quiet': True, 'learning_rate': 1e-2,
                        'work_dir': str(tmp_path) if tmp_path else None, **overrides})
    trainer = Trainer(tc, model, tokens(), val_dataset=tokens(500, seed=1) if val else None,
                      checkpoint_extras={'vocab': list('abcdefghijklmnop')}, must_match=must_match)
    losses = []
    trainer.add_callback('on_batch_end', lambda t: losses.append(t.loss.item()))
    for event, fn in callbacks:
        trainer.add_callback(event, fn)
    trainer.run()
    return trainer, losses


def read_metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


TORCHRUN_RANK_1 = {'WORLD_SIZE': '2', 'RANK': '1', 'LOCAL_RANK': '1', 'LOCAL_WORLD_SIZE': '2'}


def gpu_trainer(monkeypatch, ranks, device='auto', gpus=2):
    """A Trainer on `gpus` GPUs that may not exist: only the choice of device is real. Returns it and the indices it
    passed to torch.cuda.set_device, through set_device's own check (which runs before any driver call)."""
    from torch.cuda._utils import _get_device_index
    calls = []
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: gpus)
    monkeypatch.setattr(torch.cuda, 'set_device', lambda d: calls.append(_get_device_index(d)))
    for key, value in ranks.items():
        monkeypatch.setenv(key, value)
    model = tiny_gpt()
    model.to = lambda *args, **kwargs: model
    tc = Trainer.get_default_config()
    tc.tf32, tc.device = False, device
    return Trainer(tc, model, tokens()), calls


@pytest.mark.parametrize('ranks, asked, device, chosen', [
    ({}, 'auto', 'cuda', []),
    (TORCHRUN_RANK_1, 'auto', 'cuda:1', [1]),
    (TORCHRUN_RANK_1, 'cuda:1', 'cuda:1', [1]),
    ({}, 'cuda:1', 'cuda:1', []),
])
def test_a_gpu_is_taken_as_torch_accepts_it(monkeypatch, ranks, asked, device, chosen):
    """On one GPU 'auto' is plain 'cuda', which torch.cuda.set_device refuses (it needs an index). Under torchrun
    each process takes cuda:LOCAL_RANK as its current GPU for good; one process on cuda:1 leaves the current GPU to
    run() (next test)."""
    trainer, calls = gpu_trainer(monkeypatch, ranks, asked)
    assert trainer.device == device and calls == chosen


@pytest.mark.parametrize('stop', [None, KeyboardInterrupt])
def test_one_process_on_cuda_1_makes_it_current_while_it_trains_and_gives_the_callers_back(monkeypatch, stop):
    """Trainer(device='cuda:1') set it as the current GPU for good: a notebook's next tensor on 'cuda' went to GPU 1
    after the run. Now it is current while run() trains (where DataLoader pins batches), then GPU 0 is again, however
    the run ends. torch.cuda.device, which run() enters, stands in for the GPUs this machine lacks."""
    trainer, calls = gpu_trainer(monkeypatch, {}, 'cuda:1')
    current, seen = [0], []

    @contextmanager
    def device(d):
        before, current[0] = current[0], torch.device(d).index
        try:
            yield
        finally:
            current[0] = before
    monkeypatch.setattr(torch.cuda, 'device', device)

    def train():
        seen.append(current[0])
        if stop:
            raise stop
    trainer._train = train
    with pytest.raises(stop) if stop else nullcontext():
        trainer.run()
    assert calls == [] and seen == [1] and current == [0]


def test_torchrun_refuses_one_gpu_for_all_processes_and_binds_the_group_to_its_own(monkeypatch):
    with pytest.raises(ConfigError, match=r"each process takes the GPU of its LOCAL_RANK, but device 'cuda:0' puts "
                                          r"them all on one: give --trainer.device=cuda \(or auto\)"):
        gpu_trainer(monkeypatch, TORCHRUN_RANK_1, 'cuda:0')
    trainer, _ = gpu_trainer(monkeypatch, TORCHRUN_RANK_1)
    joined = []
    monkeypatch.setattr(torch.distributed, 'init_process_group', lambda **kw: joined.append(kw))
    trainer._init_distributed()
    assert joined == [{'backend': 'nccl', 'device_id': torch.device('cuda:1')}]


def test_torchrun_refuses_more_processes_than_gpus(monkeypatch):
    """The README's --nproc_per_node=8 on a machine with fewer GPUs: the rank without one failed in
    torch.cuda.set_device with 'CUDA error: invalid device ordinal'."""
    with pytest.raises(ConfigError, match=r"torchrun started 2 processes on this machine, one per GPU, but it has "
                                          r"only 1: give torchrun --nproc_per_node=1 \(or fewer\), or train on the "
                                          r"CPUs with --trainer.device=cpu"):
        gpu_trainer(monkeypatch, TORCHRUN_RANK_1, gpus=1)
    assert gpu_trainer(monkeypatch, TORCHRUN_RANK_1, 'cpu', gpus=1)[0].device == 'cpu'


@pytest.mark.parametrize('name, peak', [('NVIDIA H100 80GB HBM3', 989e12), ('NVIDIA H100 PCIe', 756e12),
                                        ('NVIDIA H100 NVL', 835e12), ('NVIDIA H200 NVL', 835e12),
                                        ('NVIDIA H200', 989e12), ('NVIDIA A100-SXM4-80GB', 312e12),
                                        ('NVIDIA GeForce RTX 3090', None)])
def test_peak_flops_of_the_gpus_we_know(monkeypatch, name, peak):
    monkeypatch.setattr(torch.cuda, 'get_device_name', lambda device=None: name)
    assert peak_flops('cuda:0') == peak


def test_bench_train_times_each_contender_in_its_own_process(monkeypatch, tmp_path, capsys):
    """The worker (what each process runs) times a real step and reports its device; the table takes medians over
    the rounds, here by hand: mingpt 0.2 s, HF 0.3 s a step at 1,000 tokens a step, so 5,000 and 3,333 tokens/s,
    1.50x; at 1e9 FLOPs a token on a 1e13 FLOP/s peak, MFU 1e12 / 0.2 / 1e13 = 50%."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / 'bench'))  # for its own imports
    bench = load_project('bench_train', folder='bench')
    monkeypatch.chdir(tmp_path)
    bench.main(['--device=cpu', '--model=gpt-nano', '--block=16', '--batch=2', '--vocab=11', '--warmup=1',
                '--steps=2', '--worker=trainer'])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result['seconds'] > 0 and result['device'].endswith(f'{torch.get_num_threads()} threads')
    assert result['peak'] is None
    runs = {'mingpt': [{'seconds': s} for s in (0.2, 0.1, 0.4)], 'hf': [{'seconds': s} for s in (0.3, 0.2, 0.3)]}
    assert bench.table(runs, 1000, 1e9, 1e13).splitlines()[2:] == [
        '| mingpt | 200.0 (100.0-400.0) | 5,000 (2,500-10,000) | 50.0% | 1.50x |',
        '| hf | 300.0 (200.0-300.0) | 3,333 (3,333-5,000) | 33.3% | 1.00x |']
    started = []

    def run_worker(cmd, what):  # what main starts: this interpreter on the script, one contender a process
        assert cmd[:2] == [sys.executable, bench.__file__]
        started.append(cmd[cmd.index('--worker') + 1])
        return dict(seconds=0.1, device='cpu', peak=None)
    monkeypatch.setattr(bench, 'run_worker', run_worker)
    bench.main(['--device=cpu', '--model=gpt-nano', '--block=16', '--rounds=3', '--impls=mingpt,hf'])
    assert started == ['mingpt', 'hf', 'hf', 'mingpt', 'mingpt', 'hf']  # in turns, each round led by the next
    with pytest.raises(SystemExit, match="unknown impl 'deepspeed': choose from mingpt, hf, trainer"):
        bench.main(['--impls=mingpt,deepspeed'])


def test_mps_gets_float32_evaluation_and_no_torchrun(monkeypatch, tmp_path):
    """MPS has no float64 and gloo cannot move MPS tensors; this machine has no MPS, so the CPU stands in for it."""
    trainer, _ = train(val=True, eval_interval=100)
    full = trainer.evaluate()
    trainer.device_type = 'mps'
    assert trainer.evaluate() == pytest.approx(full, rel=1e-6)
    state = get_rng_state()
    assert state['mps'] is None  # kept where there is an MPS device
    del state['mps']
    set_rng_state(state)  # a checkpoint from before MPS states were kept still resumes
    monkeypatch.setattr(torch.backends.mps, 'is_available', lambda: True)
    for key, value in {'WORLD_SIZE': '2', 'RANK': '0', 'LOCAL_RANK': '0'}.items():
        monkeypatch.setenv(key, value)
    tc = Trainer.get_default_config()
    tc.device = 'mps'
    with pytest.raises(ConfigError, match="torchrun on 'mps': gloo, .* --trainer.device=cpu"):
        Trainer(tc, tiny_gpt(), tokens())
    monkeypatch.delenv('WORLD_SIZE')  # one process on MPS is fine
    monkeypatch.setattr(torch.nn.Module, 'to', lambda module, *args, **kwargs: module)  # stays on the CPU here
    assert Trainer(tc, tiny_gpt(), tokens()).device == 'mps'


def test_tokens_per_second_counts_the_time_of_unlogged_steps_too(tmp_path):
    """Each forward sleeps 50 ms, so no 64-token step can run faster than 1,280 tokens/s."""
    train(tmp_path, hook=lambda model: model.register_forward_pre_hook(lambda module, args: time.sleep(0.05)),
          max_iters=8, log_interval=4)
    records = read_metrics(tmp_path / 'metrics.jsonl')
    assert [r['iter'] for r in records] == [0, 4, 7]
    assert all(r['tokens_per_s'] < 8 * BLOCK / 0.05 for r in records)


def test_flops_per_token_by_hand_with_either_positional_encoding():
    model = tiny_gpt()
    n = sum(p.numel() for p in model.parameters()) - BLOCK * 16  # the learned positions are a lookup
    attention = 12 * 2 * 2 * 8 * BLOCK  # 12 L H Q T
    assert flops_per_token(model, BLOCK) == 6 * n + attention
    c = model.config
    c.pos_embd = 'sinusoidal'
    sinusoidal = GPT(c)  # no position weights at all
    assert flops_per_token(sinusoidal, BLOCK) == 6 * sum(p.numel() for p in sinusoidal.parameters()) + attention
    # an encoder-decoder has three attentions per layer (and a source embedding that is only a lookup): no MFU,
    # where the formula logged one for it that counted a third of its attention
    C = Transformer.get_default_config()
    C.merge_from_dict(dict(model_type='transformer-micro', vocab_size=20, block_size=BLOCK))
    assert flops_per_token(Transformer(C), BLOCK) is None
    model.encoder = object()  # a GPT that keeps something else under that name still gets its count
    assert flops_per_token(model, BLOCK) == 6 * n + attention


def test_lr_schedule_warmup_then_cosine():
    trainer, _ = train(max_iters=1)
    c = trainer.config
    c.merge_from_dict(dict(lr_schedule='cosine', warmup_iters=10, max_iters=110, learning_rate=1.0, min_lr=0.1))
    lrs = [trainer.get_lr(i) for i in range(120)]
    assert lrs[0] == pytest.approx(1 / 11) and lrs[9] == pytest.approx(10 / 11)  # linear warmup
    assert lrs[10] == pytest.approx(1.0)
    assert lrs[60] == pytest.approx(0.55)  # half way down the cosine
    assert lrs[110] == pytest.approx(0.1) and lrs[119] == pytest.approx(0.1)  # then min_lr
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
    # lr_decay_iters ends the cosine before max_iters; min_lr defaults to learning_rate / 10
    c.merge_from_dict(dict(warmup_iters=0, lr_decay_iters=40, min_lr=None))
    assert trainer.get_lr(0) == 1.0 and trainer.get_lr(40) == pytest.approx(0.1) == trainer.get_lr(100)
    assert trainer.get_lr(10) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi / 4)))
    c.merge_from_dict(dict(lr_schedule='constant', warmup_iters=0))
    assert trainer.get_lr(50) == 1.0


def test_inverse_sqrt_peaks_at_warmup_iters_then_decays_as_one_over_the_root():
    c = Trainer.get_default_config()
    c.merge_from_dict(dict(lr_schedule='inverse_sqrt', warmup_iters=3, learning_rate=1.0))
    trainer = Trainer(c, tiny_gpt(), tokens())
    lrs = [trainer.get_lr(i) for i in range(16)]
    assert lrs[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])  # linear warmup, the peak at iteration warmup_iters
    assert lrs[15] == pytest.approx(0.5)  # iteration 15 is step 16, 4 times the peak's step 4: 1 / sqrt(4)


def test_schedule_reaches_the_optimizer_and_metrics(tmp_path):
    trainer, _ = train(tmp_path, lr_schedule='cosine', warmup_iters=2, max_iters=6, learning_rate=1e-2, min_lr=0.0)
    records = read_metrics(tmp_path / 'metrics.jsonl')
    lrs = [r['lr'] for r in records]
    assert lrs == pytest.approx([trainer.get_lr(i) for i in range(6)])
    assert records[-1]['grad_norm'] == pytest.approx(trainer.grad_norm.item())  # each line: the step's, unclipped
    assert all(group['lr'] == lrs[-1] for group in trainer.optimizer.param_groups)  # decayed or not, every group
    train(tmp_path / 'warmup', lr_schedule='constant', warmup_iters=2, learning_rate=3e-2)  # warmup, then constant
    warmup_lrs = [r['lr'] for r in read_metrics(tmp_path / 'warmup' / 'metrics.jsonl')]
    assert warmup_lrs == pytest.approx([1e-2, 2e-2, 3e-2, 3e-2])
    assert lrs[0] < lrs[1] < lrs[2] and lrs[2] > lrs[5]


def test_a_callback_may_steer_the_learning_rate_of_a_constant_schedule(tmp_path):
    def halve(trainer):  # as a minGPT user would write it
        for group in trainer.optimizer.param_groups:
            group['lr'] /= 2
    train(tmp_path, callbacks=[('on_batch_end', halve)])
    assert [r['lr'] for r in read_metrics(tmp_path / 'metrics.jsonl')] == [1e-2, 5e-3, 2.5e-3, 1.25e-3]


def test_resume_trains_at_this_runs_learning_rate(tmp_path):
    train(tmp_path, learning_rate=1e-2, checkpoint_interval=4)  # the saved optimizer state holds lr 1e-2
    train(tmp_path, resume=True, max_iters=6, learning_rate=1e-3)
    assert [r['lr'] for r in read_metrics(tmp_path / 'metrics.jsonl')] == [1e-2] * 4 + [1e-3] * 2


def test_run_config_gives_the_work_dir_only_to_a_trainer_without_one(tmp_path):
    run = CN(system=CN(work_dir=str(tmp_path / 'project')))
    tc = Trainer.get_default_config()
    tc.work_dir = str(tmp_path / 'mine')
    assert Trainer(tc, tiny_gpt(), tokens(), run_config=run).config.work_dir == str(tmp_path / 'mine')
    tc.work_dir = None
    assert Trainer(tc, tiny_gpt(), tokens(), run_config=run).config.work_dir == str(tmp_path / 'project')
    with pytest.raises(ValueError, match=r"checkpoint_extras may not use the trainer's own keys \['model'\]"):
        Trainer(tc, tiny_gpt(), tokens(), checkpoint_extras={'model': 'mine'})


def test_different_seeds_draw_different_batches():
    def first_batch(seed):
        seen = []
        train(seed=seed, max_iters=1,
              hook=lambda model: model.register_forward_pre_hook(lambda module, args: seen.append(args[0].clone())))
        return seen[0]
    assert torch.equal(first_batch(0), first_batch(0)) and not torch.equal(first_batch(0), first_batch(1))


def test_a_callback_that_draws_random_numbers_changes_no_training():
    _, plain = train(dropout=0.1, max_iters=3)
    _, drawn = train(dropout=0.1, max_iters=3, callbacks=[('on_batch_end', lambda t: torch.rand(100))])
    assert drawn == plain


def test_gradients_are_clipped_to_their_true_norm(monkeypatch):
    """The optimizer sees gradients of norm grad_norm_clip; under float16 the norm is the true gradients', taken after
    unscaling, not the loss-scaled ones' (65536 times larger)."""
    norms, clip = [], torch.nn.utils.clip_grad_norm_

    def record(trainer):
        def pre_step(optimizer, args, kwargs):
            norms.append(torch.cat([p.grad.flatten() for p in trainer.model.parameters()]).norm().item())
        trainer.optimizer.register_step_pre_hook(pre_step)
    # the optimizer exists once the run starts: hook it at the first evaluation, after step 0, for steps 1 and 2
    train(val=True, grad_norm_clip=0.01, max_iters=3, eval_interval=100, eval_iters=1,
          callbacks=[('on_eval_end', lambda t: t.iter_num == 0 and record(t))])
    assert norms == pytest.approx([0.01, 0.01], rel=1e-3)

    def norms_before_clipping(dtype):
        seen = []
        monkeypatch.setattr(torch.nn.utils, 'clip_grad_norm_', lambda p, max_norm: seen.append(clip(p, max_norm)))
        train(grad_norm_clip=0.01, max_iters=3, dtype=dtype)
        return [n.item() for n in seen]
    assert norms_before_clipping('float16') == pytest.approx(norms_before_clipping('float32'), rel=0.05)


def test_mixed_precision_computes_in_its_dtype():
    dtypes = []
    train(max_iters=1, dtype='bfloat16',
          hook=lambda model: model.lm_head.register_forward_hook(lambda module, args, out: dtypes.append(out.dtype)))
    assert dtypes == [torch.bfloat16]


def test_tokens_per_second_is_the_rate_since_the_last_line(tmp_path, monkeypatch):
    """On a clock the test drives (so a busy machine cannot change the numbers), steps 0-4 take 0.5 s each and the
    rest 0.01 s: the line at iteration 8 covers steps 5-8 only, not the 2.5 s before them."""
    import mingpt.trainer
    clock, steps = [0.0], []
    monkeypatch.setattr(mingpt.trainer, 'time', SimpleNamespace(perf_counter=lambda: clock[0], time=time.time))

    def step_takes(module, args):
        steps.append(0)
        clock[0] += 0.5 if len(steps) <= 5 else 0.01
    train(tmp_path, hook=lambda model: model.register_forward_pre_hook(step_takes), max_iters=12, log_interval=4)
    records = read_metrics(tmp_path / 'metrics.jsonl')
    assert [r['iter'] for r in records] == [0, 4, 8, 11]
    tokens = 8 * BLOCK  # per step
    assert records[1]['tokens_per_s'] == pytest.approx(4 * tokens / 2.0, rel=1e-3)  # steps 1-4
    assert records[2]['tokens_per_s'] == pytest.approx(4 * tokens / 0.04, rel=1e-3)  # steps 5-8


def test_tokens_per_second_leaves_padding_out(tmp_path, monkeypatch):
    """Rows right-padded with -1 (sentiment's classifier reads them so) count their real tokens only: here 3 of 8 in
    each of 8 rows, one step a second. It counted all 64."""
    import mingpt.trainer
    clock = [0.0]
    monkeypatch.setattr(mingpt.trainer, 'time', SimpleNamespace(perf_counter=lambda: clock[0], time=time.time))

    class Padded(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gpt = tiny_gpt()

        def forward(self, x, y):
            clock[0] += 1.0
            return self.gpt(x.clamp(min=0), y)

        def configure_optimizers(self, config):
            return self.gpt.configure_optimizers(config)
    x = torch.full((16, BLOCK), -1)
    x[:, :3] = 5
    tc = Trainer.get_default_config()
    tc.merge_from_dict({'max_iters': 2, 'batch_size': 8, 'quiet': True, 'work_dir': str(tmp_path)})
    Trainer(tc, Padded(), torch.utils.data.TensorDataset(x, torch.zeros_like(x))).run()
    assert [r['tokens_per_s'] for r in read_metrics(tmp_path / 'metrics.jsonl')] == [8 * 3, 8 * 3]


def test_evaluate_without_a_val_set_is_refused_by_name():
    # it failed with "TypeError: object of type 'NoneType' has no len()"
    trainer, _ = train(max_iters=1)
    with pytest.raises(ValueError, match=r"evaluate\(\) scores the val set, and this Trainer was given none: give the "
                                         r"dataset to score, trainer.evaluate\(dataset\), or Trainer\(\.\.\., "
                                         r"val_dataset=\.\.\.\)"):
        trainer.evaluate()


def test_resume_trains_with_this_runs_weight_decay_and_betas_and_the_checkpoints_moments(tmp_path):
    """A resume given other optimizer options (the note says training goes on with this run's) trained with the
    checkpoint's: load_state_dict brought back its groups' weight_decay and betas. The reference: an unbroken run
    whose callback sets the new options on the groups at the checkpoint's step, so Adam's moments go on unchanged."""
    def switch(trainer):
        if trainer.steps_done == 2:
            for group in trainer.optimizer.param_groups:
                group['betas'] = (0.8, 0.9)
                group['weight_decay'] = 0.5 if group['weight_decay'] else 0.0  # the biases' group keeps none
    whole, whole_losses = train(tmp_path / 'whole', max_iters=4, callbacks=[('on_batch_end', switch)])
    train(tmp_path / 'resumed', max_iters=2, checkpoint_interval=2)
    resumed, losses = train(tmp_path / 'resumed', resume=True, max_iters=4, weight_decay=0.5, betas=(0.8, 0.9))
    assert [group['weight_decay'] for group in resumed.optimizer.param_groups] == [0.5, 0.0]
    assert losses == whole_losses[2:]
    for a, b in zip(whole.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)


def test_validation_loss_by_hand_and_the_mode_kept():
    trainer, _ = train(val=True, eval_interval=100, eval_iters=2, max_iters=1)
    ix = np.random.default_rng(0).integers(len(trainer.val_dataset), size=2 * 8)  # eval_iters batches, fixed
    x, y = (torch.stack(t) for t in zip(*[trainer.val_dataset[i] for i in ix]))
    model = trainer.model.eval()
    with torch.no_grad():
        logits = model(x)[0]
    by_hand = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten()).item()
    assert trainer.evaluate() == pytest.approx(by_hand, rel=1e-5)
    assert not model.training  # evaluate() leaves the mode as it found it
    model.train()
    trainer.evaluate()
    assert model.training


def test_resume_keeps_the_best_val_loss_and_may_name_a_checkpoint_without_a_work_dir(tmp_path, monkeypatch):
    best, _ = train(tmp_path, val=True, max_iters=4, eval_interval=2, eval_iters=1, checkpoint_interval=4)
    # the resumed run's one step at learning rate 1 ruins the model: model.pt must stay the best one so far
    worse, _ = train(tmp_path, val=True, resume=True, max_iters=5, eval_iters=1, learning_rate=1.0)
    assert worse.val_loss > best.best_val_loss == worse.best_val_loss
    assert load_checkpoint(tmp_path / 'model.pt')['val_loss'] == best.best_val_loss
    monkeypatch.setenv('HOME', str(tmp_path))
    elsewhere, _ = train(resume='~/ckpt.pt', max_iters=6)  # writes nothing, needs no work_dir; ~ is home
    assert train(resume=tmp_path / 'ckpt.pt', max_iters=6)[0].iter_num == 6  # a Path, as a string
    assert elsewhere.iter_num == 6
    elsewhere.save_checkpoint(tmp_path / 'named.pt')  # an explicit path is written even without a work_dir
    assert load_checkpoint(tmp_path / 'named.pt')['iter_num'] == 6


def test_save_checkpoint_after_run_keeps_the_random_states_run_ended_with(tmp_path):
    """In one process save_checkpoint() saved the random states as they were at the call: a sample drawn between
    run() and the save (a notebook looking at the model) changed the dropout of the resumed run, which then differed
    from the unbroken one. The reference: the unbroken run of 4 iterations."""
    whole, whole_losses = train(tmp_path / 'whole', max_iters=4, dropout=0.1)
    first, _ = train(tmp_path / 'resumed', max_iters=2, dropout=0.1)
    with eval_mode(first.model):
        first.model.generate(torch.zeros(1, 1, dtype=torch.long), 5, do_sample=True)  # draws from torch's generator
    first.save_checkpoint(tmp_path / 'resumed' / 'ckpt.pt')
    resumed, losses = train(tmp_path / 'resumed', resume=True, max_iters=4, dropout=0.1)
    assert losses == whole_losses[2:]
    for a, b in zip(whole.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)


def test_each_run_of_one_trainer_saves_its_own_best_model(tmp_path):
    """A notebook's sweep: one Trainer, the weights put back, a lower learning rate, run() into a new work_dir. The
    second run never beat the first one's best val loss, so it wrote no model.pt; replacing the first run with
    overwrite=True lost its model.pt too."""
    start = {}
    trainer, _ = train(tmp_path / 'first', val=True, max_iters=4, eval_interval=2, eval_iters=1,
                       hook=lambda model: start.update({k: v.clone() for k, v in model.state_dict().items()}))
    for work_dir, overwrite in (tmp_path / 'second', False), (tmp_path / 'first', True):
        trainer.model.load_state_dict(start)
        trainer.config.merge_from_dict(dict(learning_rate=1e-6, work_dir=str(work_dir), overwrite=overwrite))
        trainer.run()
        val_losses = [r['val_loss'] for r in read_metrics(work_dir / 'metrics.jsonl') if 'val_loss' in r]
        assert len(val_losses) == 3 and trainer.best_val_loss == min(val_losses)
        assert load_checkpoint(work_dir / 'model.pt')['val_loss'] == min(val_losses)


def test_resume_checks_only_what_the_checkpoint_records(tmp_path, capsys):
    train(tmp_path, max_iters=2, checkpoint_interval=2)
    ckpt = load_checkpoint(tmp_path / 'ckpt.pt')
    del ckpt['model_config']['pos_embd']  # a setting added after this checkpoint was written
    save_checkpoint(ckpt, tmp_path / 'ckpt.pt')
    trainer, _ = train(tmp_path, resume=True, max_iters=3, must_match=('vocab', 'tokenizer?'))
    assert trainer.iter_num == 3 and 'does not record its tokenizer' in capsys.readouterr().out


def test_a_record_the_checkpoint_lacks_is_noted_by_rank_0_alone(capsys):
    # as check_same_run's other notes: under torchrun every rank printed it
    model, config = tiny_gpt(), Trainer.get_default_config()
    ckpt = {'iter_num': 1, 'model_config': model.config.to_dict(), 'vocab': [1]}
    capsys.readouterr()  # the model's size
    for rank, said in (1, ''), (0, "note: x/ckpt.pt does not record its tokenizer (it is older than that record): "
                                   "not checked\n"):
        check_same_run(ckpt, 'x/ckpt.pt', model, config, {'vocab': [1]}, must_match=('vocab', 'tokenizer?'), rank=rank)
        assert capsys.readouterr().out == said


def test_a_resume_names_the_trainer_options_that_changed(tmp_path, capsys):
    """A resume command that left out the first run's --trainer.batch_size=4 trained on at the default without a
    word, so the run no longer continued as it would have."""
    train(tmp_path, max_iters=2, checkpoint_interval=2, batch_size=4)
    capsys.readouterr()
    train(tmp_path, resume=True, max_iters=3, betas=[0.9, 0.95])  # a list, as a command line gives it: the same
    assert re.search(r"note: .*ckpt.pt was trained with other trainer options \(batch_size=4 there, 8 here\); "
                     r"training goes on with this run's\n", capsys.readouterr().out)
    train(tmp_path, resume=True, max_iters=4, batch_size=4, checkpoint_interval=1)  # these leave the steps as they are
    assert 'other trainer options' not in capsys.readouterr().out
    # but a cosine decay over max_iters (lr_decay_iters None) changes with it: the rest of the schedule is another
    train(tmp_path / 'cosine', max_iters=2, checkpoint_interval=2, lr_schedule='cosine')
    capsys.readouterr()
    train(tmp_path / 'cosine', resume=True, max_iters=4, lr_schedule='cosine')
    assert "other trainer options (max_iters=2 there, 4 here)" in capsys.readouterr().out


def test_a_resume_on_another_thread_count_says_its_bits_differ(tmp_path, capsys):
    """OMP_NUM_THREADS changes the last digits (README): a resume there went on without a word, and the run's
    losses differed from the step after it."""
    threads = torch.get_num_threads()
    train(tmp_path, max_iters=2, checkpoint_interval=2)
    assert load_checkpoint(tmp_path / 'ckpt.pt')['platform'] == {'torch': torch.__version__, 'threads': threads,
                                                                  'device': 'cpu'}
    # a GPU's kernels do not use the CPU's threads: a resume on a node with other cores is no other platform
    assert platform_record('mps') == {'torch': torch.__version__, 'device': 'mps'}
    capsys.readouterr()
    train(tmp_path, resume=True, max_iters=3)
    assert 'note' not in capsys.readouterr().out
    torch.set_num_threads(threads + 1)
    try:
        train(tmp_path, resume=True, max_iters=4)
    finally:
        torch.set_num_threads(threads)
    assert re.search(rf"note: .*ckpt.pt was trained with threads={threads} there, {threads + 1} here: training goes "
                     r"on, but not to the bits", capsys.readouterr().out)


def test_a_resume_with_another_seed_keeps_the_runs_seed_in_its_files(tmp_path, capsys):
    """A resume goes on with the checkpoint's weights, batches and random states, whatever system.seed says: a
    resume that gave --system.seed=1 (or left out the first command's seed) trained on as before, but model.pt,
    ckpt.pt and config.json then recorded a seed the model was never trained with."""
    def run(seed, **overrides):
        set_seed(seed)
        tc = Trainer.get_default_config()
        tc.merge_from_dict({'max_iters': 2, 'batch_size': 8, 'quiet': True, 'checkpoint_interval': 2, **overrides})
        trainer = Trainer(tc, tiny_gpt(), tokens(1000, seed=0), val_dataset=tokens(500, seed=1),
                          run_config=CN(system=CN(seed=seed, work_dir=str(tmp_path))))
        trainer.run()
        return trainer

    run(3407)
    capsys.readouterr()
    resumed = run(1, resume=True, max_iters=3)
    assert ("ckpt.pt's run was started with system.seed=3407 and a resume goes on with its random numbers, so "
            "system.seed=1 changes nothing; the run's files keep 3407") in capsys.readouterr().out
    assert resumed.run_config.system.seed == 3407
    for name in ('ckpt.pt', 'model.pt'):
        assert load_checkpoint(tmp_path / name)['config']['system']['seed'] == 3407
    assert json.loads((tmp_path / 'config.json').read_text())['system']['seed'] == 3407


def test_resume_refuses_other_frozen_parameters(tmp_path):
    """The optimizer's state is matched to the parameters by their order alone: frozen block 1 instead of block 0
    (the same shapes) took block 0's Adam moments without a word, and nothing frozen failed with torch's 'loaded
    state dict contains a parameter group that doesn't match the size of optimizer's group'."""
    def freeze(i):
        return lambda model: model.transformer.h[i].requires_grad_(False)

    train(tmp_path, max_iters=2, checkpoint_interval=2, hook=freeze(0))
    for hook in (freeze(1), None):
        with pytest.raises(ConfigError, match=r"ckpt.pt: its run trained other parameters than this model leaves "
                                              r"trainable \(\d+ differ, e.g. \['transformer.h.0.attn.c_attn.bias', "):
            train(tmp_path, resume=True, max_iters=3, hook=hook)
    assert train(tmp_path, resume=True, max_iters=3, hook=freeze(0))[0].iter_num == 3


def test_overwrite_removes_the_old_runs_checkpoints_at_the_start(tmp_path):
    train(tmp_path, max_iters=2, checkpoint_interval=2)
    assert (tmp_path / 'ckpt.pt').exists() and (tmp_path / 'model.pt').exists()
    train(tmp_path, max_iters=1, overwrite=True)  # no ckpt.pt: the old one must not stay to be resumed
    assert not (tmp_path / 'ckpt.pt').exists() and load_checkpoint(tmp_path / 'model.pt')['iter_num'] == 1


def test_resume_drops_a_metrics_line_without_its_newline(tmp_path):
    train(tmp_path, max_iters=4, checkpoint_interval=2)
    metrics = tmp_path / 'metrics.jsonl'
    lines = metrics.read_text().splitlines(keepends=True)
    metrics.write_text(''.join(lines[:2]) + lines[2].rstrip('\n'))  # killed as it wrote iteration 2's newline
    train(tmp_path, resume=True, max_iters=5)
    assert [r['iter'] for r in read_metrics(metrics)] == [0, 1, 4]


def test_gradient_accumulation_matches_the_full_batch():
    _, full = train(max_iters=3)
    _, accumulated = train(max_iters=3, grad_accum_steps=4)
    assert accumulated == pytest.approx(full, abs=1e-5)


def test_with_ignored_targets_a_step_averages_its_micro_steps_means_as_the_comment_says():
    """Each micro-step's loss is its model's mean over its own counted targets, and the step averages those means:
    with targets of -1 in different numbers per micro-step, that is not the mean over the whole batch's targets."""
    class Ignored(torch.utils.data.Dataset):  # row i counts the targets of its first 1 + i % 8 positions only
        def __init__(self):
            self.windows = tokens()

        def __len__(self):
            return len(self.windows)

        def __getitem__(self, i):
            x, y = self.windows[i]
            return x, y.masked_fill(torch.arange(BLOCK) > i % BLOCK, -1)
    set_seed(0)
    model = tiny_gpt()
    start = {k: v.clone() for k, v in model.state_dict().items()}
    tc = Trainer.get_default_config()
    tc.merge_from_dict(dict(max_iters=1, batch_size=8, grad_accum_steps=4, quiet=True))
    trainer = Trainer(tc, model, Ignored())
    trainer.run()
    model.load_state_dict(start)
    micro = iter(StepSampler(len(trainer.train_dataset), 8, trainer.sampler_seed, 0, accum=4))
    batches = [[trainer.train_dataset[i] for i in next(micro)] for _ in range(4)]
    with torch.no_grad():
        means = [model(torch.stack([x for x, _ in b]), torch.stack([y for _, y in b]))[1] for b in batches]
        rows = [row for b in batches for row in b]
        whole = model(torch.stack([x for x, _ in rows]), torch.stack([y for _, y in rows]))[1]
    assert trainer.loss.item() == pytest.approx(torch.stack(means).mean().item(), abs=1e-6)
    assert abs(trainer.loss.item() - whole.item()) > 1e-3


def test_bad_settings_are_clear_errors(monkeypatch):
    with pytest.raises(ConfigError, match='dtype'):
        train(dtype='half')
    with pytest.raises(ConfigError, match='multiple of grad_accum_steps'):
        train(grad_accum_steps=3)
    for key, value in TORCHRUN_RANK_1.items():  # refused before any process group is made
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError, match=r"batch_size \(5\) must be a multiple of grad_accum_steps \(1\) times the "
                                          r"number of processes \(2\)"):
        train(batch_size=5)
    with pytest.raises(ConfigError, match='work_dir'):
        train(resume=True)


@pytest.mark.parametrize('dtype', ['bfloat16', 'float16'])
def test_mixed_precision_trains(dtype):
    trainer, losses = train(max_iters=8, dtype=dtype)
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert trainer.scaler.is_enabled() == (dtype == 'float16')  # a gradient scaler only for float16
    with trainer.autocast:  # the dtype asked for, not another half precision
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == getattr(torch, dtype)


def test_eval_metrics_and_files(tmp_path):
    evals = []
    trainer, losses = train(tmp_path, val=True, max_iters=6, eval_interval=2, eval_iters=2,
                            callbacks=[('on_eval_end', lambda t: evals.append((t.iter_num, t.val_loss)))])
    assert [i for i, _ in evals] == [0, 2, 4, 5]  # every eval_interval iterations and at the last
    records = read_metrics(tmp_path / 'metrics.jsonl')
    assert [r['iter'] for r in records] == list(range(6))
    assert [r['loss'] for r in records] == losses
    assert all(r['tokens_per_s'] > 0 and r['lr'] == 1e-2 for r in records)
    assert [r['val_loss'] for r in records if 'val_loss' in r] == [v for _, v in evals]
    assert 'mfu' not in records[0]  # MFU only on a GPU with a known peak
    # model.pt: the best model by val loss, readable by GPT.from_checkpoint with the project's extras
    model, ckpt = GPT.from_checkpoint(tmp_path / 'model.pt')
    assert ckpt['val_loss'] == min(v for _, v in evals) and ckpt['vocab'][0] == 'a'
    # as the README says: checkpoints count the steps done, metrics.jsonl's iter the steps from 0
    assert next(r['val_loss'] for r in records if r['iter'] == ckpt['iter_num'] - 1) == ckpt['val_loss']
    assert trainer.evaluate() == pytest.approx(trainer.evaluate())  # the same windows each time
    assert not (tmp_path / 'ckpt.pt').exists()  # checkpoint_interval is off by default


def test_checkpoint_contents_load_with_weights_only(tmp_path):
    train(tmp_path, max_iters=3, checkpoint_interval=2, dtype='float16')
    ckpt = torch.load(tmp_path / 'ckpt.pt', weights_only=True)
    assert ckpt['iter_num'] == 3 and ckpt['sampler']['iter'] == 3
    for key in ('model', 'model_config', 'optimizer', 'scaler', 'trainer_config', 'rng', 'vocab'):
        assert key in ckpt, key
    assert ckpt['scaler']['scale'] > 0
    assert set(ckpt['rng'][0]) == {'python', 'numpy', 'torch', 'cuda', 'mps'}
    GPT.from_checkpoint(tmp_path / 'model.pt')  # no val set: model.pt is the latest


def test_evaluation_off_with_a_val_set_still_writes_the_latest_model(tmp_path):
    # no val loss to pick the best by: model.pt is the latest, as without a val set (before, no model.pt at all)
    train(tmp_path, val=True, eval_interval=0, max_iters=3, checkpoint_interval=2)
    model, ckpt = GPT.from_checkpoint(tmp_path / 'model.pt')
    assert ckpt['iter_num'] == 3 and 'val_loss' not in ckpt


def test_compiled_model_saves_plain_names(tmp_path, monkeypatch):
    # the eager backend wraps the model just as inductor does (an OptimizedModule, '_orig_mod.'), in seconds
    compile = torch.compile
    monkeypatch.setattr(torch, 'compile', lambda m: compile(m, backend='eager'))
    trainer, losses = train(tmp_path, max_iters=2, compile=True, checkpoint_interval=2)
    assert trainer._eval_model is not trainer.model
    names = list(torch.load(tmp_path / 'ckpt.pt', weights_only=True)['model'])
    assert names and not any('_orig_mod' in n for n in names)
    GPT.from_checkpoint(tmp_path / 'ckpt.pt')


def test_a_model_compiled_before_the_trainer_trains_compiled_and_saves_a_plain_gpt(tmp_path):
    """nanoGPT's idiom, model = torch.compile(model), then Trainer(config, model, ...): its checkpoints held an
    'OptimizedModule' with '_orig_mod.' names, which GPT.from_checkpoint refused and a plain model could not resume."""
    calls = []

    def backend(graph, inputs):
        calls.append(1)
        return graph.forward
    compiled = torch.compile(tiny_gpt(), backend=backend)
    tc = Trainer.get_default_config()
    tc.merge_from_dict(dict(max_iters=2, batch_size=8, quiet=True, work_dir=str(tmp_path), checkpoint_interval=2))
    trainer = Trainer(tc, compiled, tokens())
    trainer.run()
    assert calls and trainer.model is compiled._orig_mod  # trained through the wrapper; callbacks get the GPT
    ckpt = load_checkpoint(tmp_path / 'ckpt.pt')
    assert ckpt['model_class'] == 'GPT' and not any('_orig_mod' in n for n in ckpt['model'])
    GPT.from_checkpoint(tmp_path / 'model.pt')
    train(tmp_path, max_iters=3, resume=True)  # a plain model goes on from it


def test_checkpoints_record_the_work_dir_the_run_config_gave(tmp_path):
    """A project passes its config as run_config, with the trainer's section inside it: model.pt's record said
    trainer.work_dir None, where config.json said the folder the run was written to."""
    tc = Trainer.get_default_config()
    tc.merge_from_dict(dict(max_iters=2, batch_size=4, quiet=True))
    run = CN(system=CN(work_dir=str(tmp_path / 'run')), trainer=tc)
    Trainer(tc, tiny_gpt(), tokens(), run_config=run).run()
    saved = torch.load(tmp_path / 'run' / 'model.pt', weights_only=True)['config']
    assert json.loads(json.dumps(saved)) == json.load(open(tmp_path / 'run' / 'config.json'))  # betas: a tuple
    assert saved['trainer']['work_dir'] == str(tmp_path / 'run')


def test_run_files_wait_for_the_checks_and_a_weights_only_run_is_kept_too(tmp_path):
    from mingpt.utils import CfgNode as CN
    run_config = CN(system=CN(work_dir=str(tmp_path / 'run')), note=CN(text='hello'))
    set_seed(0)
    tc = Trainer.get_default_config()
    tc.merge_from_dict(dict(max_iters=2, batch_size=0, quiet=True))
    trainer = Trainer(tc, tiny_gpt(), tokens(), val_dataset=tokens(500, seed=1), run_config=run_config)
    assert tc.work_dir == str(tmp_path / 'run')  # the trainer's work_dir defaults to the project's
    with pytest.raises(ConfigError, match='trainer.batch_size=0 is out of range'):
        trainer.run()
    assert not (tmp_path / 'run').exists()  # refused before any file
    tc.batch_size, tc.eval_iters, tc.eval_interval = 8, 1, 1
    trainer.run()
    assert sorted(p.name for p in (tmp_path / 'run').iterdir()) == ['.lock', 'args.txt', 'config.json',
                                                                    'metrics.jsonl', 'model.pt']  # .lock: run() held it
    assert json.load(open(tmp_path / 'run' / 'config.json'))['note'] == {'text': 'hello'}
    assert torch.load(tmp_path / 'run' / 'model.pt', weights_only=True)['config']['note'] == {'text': 'hello'}
    # model.pt alone cannot be resumed, so the message offers the two other ways
    with pytest.raises(ConfigError, match=r"holds an earlier run \(model.pt: a model saved after 2 iterations\) that "
                                          r"this fresh run would overwrite; train in another work_dir"):
        train(tmp_path / 'run')
    # a run without a val set or checkpoint_interval saves its last model at the end only; stopped before, its
    # metrics still mark it
    train(tmp_path / 'bare')
    assert sorted(p.name for p in (tmp_path / 'bare').iterdir()) == ['.lock', 'metrics.jsonl', 'model.pt']

    def stop(t):
        if t.iter_num == 1:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path / 'stopped', callbacks=[('on_batch_end', stop)])
    assert sorted(p.name for p in (tmp_path / 'stopped').iterdir()) == ['.lock', 'metrics.jsonl']
    with pytest.raises(ConfigError, match=r"holds an earlier run \(metrics.jsonl: no checkpoint to resume from\)"):
        train(tmp_path / 'stopped')


def test_a_run_that_stopped_before_its_first_step_does_not_block_the_next(tmp_path):
    """A run that fails in its first step (torch.compile on a laptop without a C++ compiler, out of memory) trained
    nothing: the next command, without the failing option, need not add --trainer.overwrite=True."""
    def no_compiler(module, args):
        raise RuntimeError('InvalidCxxCompiler: No working C++ compiler found')
    with pytest.raises(RuntimeError, match='C\\+\\+ compiler'):
        train(tmp_path, hook=lambda model: model.register_forward_pre_hook(no_compiler))
    assert (tmp_path / 'metrics.jsonl').read_text() == ''
    train(tmp_path)
    assert len((tmp_path / 'metrics.jsonl').read_text().splitlines()) == 4


def test_bad_checkpoints_give_clear_errors(tmp_path):
    train(tmp_path, max_iters=2, checkpoint_interval=2)
    data = (tmp_path / 'ckpt.pt').read_bytes()
    (tmp_path / 'ckpt.pt').write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError, match='truncated'):
        train(tmp_path, max_iters=3, resume=True)
    torch.save({'state_dict': {}}, tmp_path / 'foreign.pt')
    with pytest.raises(ValueError, match='not a mingpt checkpoint'):
        train(tmp_path, max_iters=3, resume=str(tmp_path / 'foreign.pt'))
    with pytest.raises(ValueError, match='only weights'):
        train(tmp_path, max_iters=3, resume=str(tmp_path / 'model.pt'))


RESUMABLE_RUN = textwrap.dedent('''
    import sys, time, torch
    sys.path.insert(0, {tests!r})
    from test_trainer_scale import train
    work_dir, kill_at = sys.argv[1], int(sys.argv[2])

    def on_batch_end(t):
        if t.iter_num == kill_at:
            open(work_dir + '/waiting', 'w').close()
            time.sleep(600)  # until the test kills us

    train(work_dir, val=True, dropout=0.1, max_iters=9, eval_interval=3, eval_iters=1, checkpoint_interval=3,
          dtype='bfloat16', resume=(kill_at < 0 and {resume}) or None,
          callbacks=[('on_batch_end', on_batch_end), ('on_eval_end', lambda t: torch.rand(1))])  # as sampling does
''')


def test_resume_after_sigkill_is_bit_exact(tmp_path):
    tests = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, 'OMP_NUM_THREADS': '1'}

    def start(work_dir, kill_at, resume=False):
        script = RESUMABLE_RUN.format(tests=tests, resume=resume)
        return subprocess.Popen([sys.executable, '-c', script, str(work_dir), str(kill_at)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    whole, killed = tmp_path / 'whole', tmp_path / 'killed'
    killed.mkdir()
    reference = start(whole, -1)
    victim = start(killed, 4)  # killed in iteration 4: after the checkpoint of iterations 0-2, before the next
    deadline = time.time() + 120
    while not (killed / 'waiting').exists():
        assert victim.poll() is None, victim.stdout.read()
        assert time.time() < deadline, 'the run to kill never reached iteration 4'
        time.sleep(0.1)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    assert [r['iter'] for r in read_metrics(killed / 'metrics.jsonl')] == [0, 1, 2, 3]
    resumed = start(killed, -1, resume=True)
    out, _ = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, out
    assert 'resuming from' in out and 'at iteration 3' in out
    out, _ = reference.communicate(timeout=120)
    assert reference.returncode == 0, out
    # the same losses, val losses and learning rates, to the last bit (JSON floats round-trip exactly)
    def exact(path):
        return [{k: v for k, v in r.items() if k != 'tokens_per_s'} for r in read_metrics(path)]
    assert len(exact(whole / 'metrics.jsonl')) == 9
    assert exact(killed / 'metrics.jsonl') == exact(whole / 'metrics.jsonl')
    a, b = torch.load(whole / 'ckpt.pt', weights_only=True), torch.load(killed / 'ckpt.pt', weights_only=True)
    assert all(torch.equal(a['model'][k], b['model'][k]) for k in a['model'])


def test_step_sampler_splits_the_batch_across_ranks_and_micro_steps():
    def batches(rank, world, accum, steps=3):
        it = iter(StepSampler(1000, 8, seed=5, start=0, rank=rank, world_size=world, accum=accum))
        return [[i for _ in range(accum) for i in next(it)] for _ in range(steps)]
    single = batches(0, 1, 1)
    for world, accum in ((2, 1), (2, 2), (4, 2)):
        per_rank = [batches(r, world, accum) for r in range(world)]
        assert [sum((p[s] for p in per_rank), []) for s in range(3)] == single
    # resuming at step 2 needs nothing but the step
    assert next(iter(StepSampler(1000, 8, seed=5, start=2))) == single[2]


def test_checkpoint_names_lose_the_ddp_and_compile_prefixes():
    names = ['lm_head.weight', 'transformer.wte.weight', 'module.weight']  # a model with a submodule called module
    for prefix in ('module.', '_orig_mod.', 'module._orig_mod.'):  # DDP's, compile's, nanoGPT's DDP(compile(model))
        assert list(strip_prefixes({prefix + n: i for i, n in enumerate(names)})) == names
    # the model's own names keep a prefix every one of them has (one holding its GPT as self.module)
    assert list(strip_prefixes({'module.module.' + n: 0 for n in names}, {'module.' + n: 0 for n in names}.keys())) \
        == ['module.' + n for n in names]


def test_token_dataset_memmap(tmp_path):
    ids = np.arange(100) % 50000
    path = TokenDataset.write(tmp_path / 'train.bin', ids)
    assert path.stat().st_size == 200  # two bytes a token
    ds = TokenDataset(path, block_size=10, vocab_size=50257)
    assert isinstance(ds.tokens, np.memmap) and len(ds) == 90
    x, y = ds[7]
    assert x.dtype == torch.long and x.tolist() == list(range(7, 17)) and y.tolist() == list(range(8, 18))
    with pytest.raises(IndexError):
        ds[90]
    with pytest.raises(IndexError):
        ds[-1]  # the sampler's indices are never negative; one that is would be a bug, not the last window
    clone = pickle.loads(pickle.dumps(ds))  # as a DataLoader worker receives it: reopened, not copied
    assert isinstance(clone.tokens, np.memmap) and clone[7][0].tolist() == x.tolist()
    large = TokenDataset(TokenDataset.write(tmp_path / 'large.bin', np.arange(100_000) % 50000), 10)
    assert len(pickle.dumps(large)) < 1000  # not the file's 200 kB
    # the last window ends at the last token, and one window needs block_size + 1 tokens
    assert [t.tolist() for t in ds[89]] == [list(range(89, 99)), list(range(90, 100))]
    assert len(TokenDataset(np.arange(11), 10)) == len(CharDataset('abcdefghijk', 10)) == 1
    assert [t.tolist() for t in CharDataset('abcdefghijk', 10)[0]] == [list(range(10)), list(range(1, 11))]
    with pytest.raises(ValueError, match=r"the token array has 10 tokens, too few for one window of block_size 10"):
        TokenDataset(np.arange(10), 10)
    with pytest.raises(ValueError, match=r"the text has 10 characters, too few for one window of block_size 10"):
        CharDataset('abcdefghij', 10)
    assert np.fromfile(TokenDataset.write(tmp_path / 'edge.bin', [0, 65535]), dtype=np.uint16).tolist() == [0, 65535]
    assert TokenDataset(torch.tensor([1, 2, 3, 4]), 2).get_vocab_size() == 5
    (tmp_path / 'odd.bin').write_bytes(b'abc')
    with pytest.raises(ValueError, match='uint16'):
        TokenDataset(tmp_path / 'odd.bin', 2)
    for bad in ([70000], [65536], [3, -1]):
        with pytest.raises(ValueError, match='65535'):
            TokenDataset.write(tmp_path / 'big.bin', bad)
    assert not (tmp_path / 'big.bin').exists()
    # in memory, ids outside the vocabulary are refused here rather than as an IndexError deep in the model
    with pytest.raises(ValueError, match=r"token ids must be >= 0; these include -1"):
        TokenDataset([0, 1, -1, 3], 2)
    with pytest.raises(ValueError, match=r"token id 5 is outside the vocabulary \(vocab_size=5: ids 0..4\)"):
        TokenDataset(torch.tensor([0, 1, 5, 3]), 2, vocab_size=5)
    with pytest.raises(ValueError, match="token ids must be integers, not float64"):
        TokenDataset(np.array([0.5, 1, 2, 3]), 2)
    # in a file, when a window holding them is read (the model's IndexError, a device-side assert on a GPU)
    bad_file = TokenDataset(TokenDataset.write(tmp_path / 'bad.bin', [0, 1, 2, 70, 3]), 2, vocab_size=65)
    assert bad_file[0][0].tolist() == [0, 1]
    with pytest.raises(ValueError, match=r"bad.bin holds token id 70 \(in window 1\), outside the vocabulary "
                                         r"\(vocab_size=65: ids 0..64\); pass the right vocab_size or fix the file"):
        bad_file[1]
    (tmp_path / 'empty.bin').write_bytes(b'')
    with pytest.raises(ValueError, match=r"empty.bin is empty or has an odd number of bytes"):
        TokenDataset(tmp_path / 'empty.bin', 2)
    for bad in (0, -3):
        with pytest.raises(ValueError, match=rf"block_size={bad} is out of range: it must be an integer >= 1"):
            TokenDataset(torch.arange(10), bad)
        with pytest.raises(ValueError, match=rf"block_size={bad} is out of range"):
            CharDataset('some text', bad)


@pytest.mark.parametrize('games, shape', [(np.ones((20, 12), int), r'; these have the shape \(20, 12\)'),
                                          ([[1, 2, 3], [4, 5]], ''), (7, r'; these have the shape \(\)')])
def test_token_dataset_refuses_several_sequences_by_name(games, shape):
    # a 2-D array trained on windows of rows, (B, T, 12) batches the model refused; ragged lists were numpy's riddle
    with pytest.raises(ValueError, match=rf"tokens must be one sequence of ids: join .* np.concatenate.*{shape}$"):
        TokenDataset(games, 8, 10)


def test_encode_text_saves_the_ids_once_and_reads_them_back(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path))
    text = 'the cat sat.\n\non the  mat! ' * 50
    tok = CharTokenizer.from_text(text)
    ids = encode_text(text, tok, {'vocab': tok.chars}, 'cats.txt', piece_size=7)  # in about 200 pieces
    assert ids.dtype == np.uint16 and ids.tolist() == tok.encode(text)
    [saved] = (tmp_path / 'tokens').iterdir()
    assert saved.name.startswith('cats.txt.') and saved.stat().st_size == 2 * len(text)
    assert f"tokenizing cats.txt into {saved}" in capsys.readouterr().out
    monkeypatch.setattr(tok, 'encode', None)  # read back, not encoded again
    assert encode_text(text, tok, {'vocab': tok.chars}, 'cats.txt').tolist() == ids.tolist()
    assert f"reading the tokens of cats.txt saved in {saved}" in capsys.readouterr().out
    # another text, or another vocabulary of the same size, is encoded into a file of its own
    other = CharTokenizer(tok.chars[::-1])
    assert encode_text(text, other, {'vocab': other.chars}, 'cats.txt').tolist() == other.encode(text)
    assert encode_text(text[::-1], other, {'vocab': other.chars}, 'cats.txt').tolist() == other.encode(text[::-1])
    assert len(list((tmp_path / 'tokens').iterdir())) == 3
    assert 'tokenizing' in capsys.readouterr().err  # the progress bar
    monkeypatch.setenv('RANK', '1')  # under torchrun only rank 0 draws it
    assert encode_text(text[:-1], other, {'vocab': other.chars}, 'cats.txt').tolist() == other.encode(text[:-1])
    assert 'tokenizing' not in capsys.readouterr().err
    monkeypatch.delenv('RANK')
    large = CharTokenizer(tok.chars + [chr(0x4e00 + i) for i in range(70_000)])
    assert encode_text(text, large, 'large', 'cats.txt').dtype == np.uint32  # ids past 65535 need 4 bytes
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(saved))  # a file, not a folder
    with pytest.raises(OSError, match=rf"cannot save the tokens in {saved}/tokens \(.*\); set MINGPT_CACHE_DIR to"):
        encode_text(text, tok, 'new', 'cats.txt')


def test_encode_text_of_a_file_with_a_long_name_fits_its_cache_files_name(tmp_path, monkeypatch):
    """A text file named in 82 Chinese characters (244 bytes, which a file name may hold) failed with 'File name too
    long': the cache file's name added its hashes (34 bytes) to the text's name."""
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path))
    name = '红楼梦第一回甄士隐梦幻识通灵贾雨村风尘怀闺秀' * 3 + '红楼梦第一回甄士隐梦幻识通灵.txt'
    (tmp_path / name).write_text('abc')  # the text's own name is fine here
    tok = CharTokenizer.from_text('abc')
    assert encode_text('abcabc', tok, {'vocab': tok.chars}, name).tolist() == [0, 1, 2, 0, 1, 2]
    [saved] = (tmp_path / 'tokens').iterdir()
    assert len(saved.name.encode()) <= 240 and name.startswith(saved.name.split('.')[0][:60])


def test_encode_text_in_pieces_gives_the_whole_texts_bpe_ids(data_root, tmp_path, monkeypatch):
    """A piece ends before a space or newline that follows a non-space character, where neither characters nor
    GPT-2's pre-tokens (' word', white space runs, symbols) are cut; a vocabulary without pre-tokeniser is whole."""
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path))
    tail = ' x\r\n\r\n  \t y \n\n\n z!\x1c w  '
    text = (data_root / 'tinyshakespeare' / 'input.txt').read_text()[:20_000] + tail * 200
    # '!\x1c' is one pre-token (\x1c is a symbol to GPT-2's regex, white space to Python's re) and merges here
    for tokenizer in (get_encoder(), train_bpe(text, 300), train_bpe(text, 300, pretokenize=False)):
        for size in (0, 1, 5, 100):
            assert encode_text(text, tokenizer, [size, len(tokenizer), tokenizer.pat is None], 'x', size).tolist() == \
                tokenizer.encode(text)


def test_char_tokenizer_decodes_its_ids_and_names_others(monkeypatch, tmp_path):
    tok = CharTokenizer(['a', 'b'])
    assert tok.decode([1, 0, torch.tensor(1)]) == 'bab'
    with pytest.raises(ValueError, match=r"cannot decode ids \[2, -1\]: this vocabulary's ids are 0..1"):
        tok.decode([0, 2, -1])
    assert CharTokenizer(['a'], unknown=True).decode([0, 1]) == 'a\ufffd'  # the unknown id
    monkeypatch.setenv('MINGPT_CACHE_DIR', '~/somewhere')
    monkeypatch.setenv('HOME', str(tmp_path))
    assert cache_dir() == tmp_path / 'somewhere'


@pytest.mark.parametrize('batch', [torch.tensor([[1, 0, 1]]), [[1, 0, 1]]])
def test_char_tokenizer_refuses_a_batch_of_ids_by_name(batch):
    # generate's (batch, tokens) output decoded whole: torch's 'only one element tensors can be converted' before
    with pytest.raises(ValueError, match=r"decode takes one sequence of token ids, not .*decode\(out\[0\]\)"):
        CharTokenizer(['a', 'b']).decode(batch)


def test_both_tokenizers_decode_one_id():
    """Encoder.decode takes one id (a sampled token); CharTokenizer's called it a batch: 'decode takes one sequence
    of token ids, not 1: decode a batch ... a row at a time'. The projects swap the two."""
    for one in (1, torch.tensor(1), np.int64(1)):
        assert CharTokenizer(['a', 'b']).decode(one) == 'b'


def test_workers_draw_the_same_batches():
    _, inline = train(max_iters=2)
    _, workers = train(max_iters=2, num_workers=1)
    assert workers == inline


def test_loss_curves_by_hand(tmp_path, capsys):
    pytest.importorskip('matplotlib')
    from matplotlib.colors import to_rgba
    from mingpt import plot
    assert plot.ema([4, 0, 0], 0.75) == [4, 3, 2.25]  # each step keeps 75% of the average
    runs = {'a': [4, 2, 2, 1], 'b': [5, 5, 5, 5]}
    for run, losses in runs.items():
        (tmp_path / run).mkdir()
        records = [{'iter': i, 'loss': x, **({'val_loss': x - 0.5} if run == 'a' and i in (0, 3) else {})}
                   for i, x in enumerate(losses)]
        (tmp_path / run / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in records))
    paths = [tmp_path / run / 'metrics.jsonl' for run in runs]
    ax = plot.loss_figure(paths, smooth=0.5, title='two runs', logy=True).axes[0]
    lines = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith('_')}
    assert {k: (list(v.get_xdata()), list(v.get_ydata())) for k, v in lines.items()} == {
        # the average forward, [4, 3, 2.5, 1.75], then backward over that
        'a train': ([0, 1, 2, 3], [3.28125, 2.5625, 2.125, 1.75]), 'a val': ([0, 3], [3.5, 0.5]),
        'b train': ([0, 1, 2, 3], [5, 5, 5, 5])}
    assert len(ax.get_lines()) == 5  # and each run's raw train loss, thin, under its average
    colour = {k: to_rgba(v.get_color()) for k, v in lines.items()}
    assert colour['a train'] == colour['a val'] != colour['b train']  # one colour per run
    assert ax.get_yscale() == 'log' and ax.get_title() == 'two runs'
    assert 'iteration' in ax.get_xlabel() and 'loss' in ax.get_ylabel()  # iterations along x, losses up y
    ax = plot.loss_figure(paths[:1], labels=['mine']).axes[0]  # no smoothing: the train loss as it is
    assert [(line.get_label(), list(line.get_ydata())) for line in ax.get_lines()] == [
        ('mine train', [4, 2, 2, 1]), ('mine val', [3.5, 0.5])]
    assert ax.get_yscale() == 'linear'
    for args, message in (([str(paths[0]), '--labels', 'x', 'y'], '--labels gives 2 names for 1 files'),
                          ([str(tmp_path / 'c' / 'metrics.jsonl')], 'metrics.jsonl does not exist')):
        with pytest.raises(SystemExit):
            plot.main(args + ['-o', str(tmp_path / 'loss.png')])
        assert message in capsys.readouterr().err
    assert not (tmp_path / 'loss.png').exists()


def test_plot_command_expands_a_tilde_after_the_equals_sign(tmp_path, monkeypatch):
    """The shell leaves --out=~/loss.png as typed: it wrote into ./~/loss.png and said 'wrote ~/loss.png'."""
    pytest.importorskip('matplotlib')
    from mingpt import plot
    train(tmp_path, max_iters=2)
    monkeypatch.setenv('HOME', str(tmp_path))
    monkeypatch.chdir(tmp_path)
    plot.main(['--out=~/loss.png', '~/metrics.jsonl'])
    assert (tmp_path / 'loss.png').exists() and not (tmp_path / '~').exists()


def test_plot_draws_metrics_to_png(tmp_path):
    pytest.importorskip('matplotlib')
    from mingpt import plot
    train(tmp_path, val=True, max_iters=3, eval_interval=2, eval_iters=1)
    with open(tmp_path / 'metrics.jsonl', 'a') as f:
        f.write('{"iter": 3, "lo')  # a line cut short by a crash is skipped
    plot.main([str(tmp_path / 'metrics.jsonl'), '-o', str(tmp_path / 'loss.png'), '--smooth=0.5'])
    assert (tmp_path / 'loss.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    with pytest.raises(SystemExit):  # an average that grows without bound
        plot.main([str(tmp_path / 'metrics.jsonl'), '-o', str(tmp_path / 'loss.png'), '--smooth=1.5'])
    (tmp_path / 'model.pt').write_bytes(b'PK\x03\x04\x80\x81')  # a checkpoint given by mistake
    with pytest.raises(ValueError, match=r"model.pt is not a metrics.jsonl \(it is not text\)"):
        plot.read_metrics(tmp_path / 'model.pt')
    # another program's JSON lines are skipped, and a file of nothing else is refused by name
    (tmp_path / 'other.jsonl').write_text('{"iter": 0, "val_loss": 2.0}\n{"step": 0, "loss": 2}\n[1, 2, 3]\n7\n')
    assert plot.read_metrics(tmp_path / 'other.jsonl') == []
    with pytest.raises(ValueError, match=r"other.jsonl holds no metrics: its run has logged no step yet, or it is not a trainer's metrics.jsonl$"):
        plot.loss_figure([tmp_path / 'other.jsonl'])
    plot.main([str(tmp_path / 'metrics.jsonl'), '-o', str(tmp_path / 'loss.pdf')])  # the format its suffix names
    assert (tmp_path / 'loss.pdf').read_bytes()[:5] == b'%PDF-'


def test_the_plot_command_passes_its_options_and_writes_atomically(tmp_path, capsys, monkeypatch):
    pytest.importorskip('matplotlib')
    from matplotlib.figure import Figure
    from mingpt import plot
    (tmp_path / 'run').mkdir()
    metrics = str(tmp_path / 'run' / 'metrics.jsonl')
    with open(metrics, 'w') as f:
        f.write('{"iter": 0, "loss": 4.0}\n{"iter": 1, "loss": 2.0}\n')
    drawn = []
    with monkeypatch.context() as m:
        m.setattr(plot, 'save', lambda fig, path, dpi=100: drawn.append(fig) or path)
        plot.main([metrics, '-o', str(tmp_path / 'loss.png'), '--title', 'mine', '--logy', '--labels', 'a'])
    ax = drawn[0].axes[0]
    assert (ax.get_title(), ax.get_yscale(), ax.get_legend_handles_labels()[1]) == ('mine', 'log', ['a train'])
    with pytest.raises(SystemExit):  # an average that never leaves the first loss
        plot.main([metrics, '-o', str(tmp_path / 'loss.png'), '--smooth=1'])
    assert '--smooth=1.0 must be at least 0 and below 1' in capsys.readouterr().err

    def fails_halfway(fig, fname, **kwargs):
        with open(fname, 'wb') as f:
            f.write(b'half a pic')
        raise OSError('No space left on device')
    monkeypatch.setattr(Figure, 'savefig', fails_halfway)
    (tmp_path / 'loss.png').write_bytes(b'the old picture')
    with pytest.raises(OSError, match='No space left'):
        plot.main([metrics, '-o', str(tmp_path / 'loss.png')])
    assert (tmp_path / 'loss.png').read_bytes() == b'the old picture'  # the old file whole, no temporary beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ['loss.png', 'run']
