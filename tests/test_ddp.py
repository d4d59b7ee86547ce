"""DDP on CPU: chargpt under `torchrun --standalone --nproc_per_node=2` (gloo) trains to the same losses as one
process with the same global batch. Each rank takes a fixed share of the batch the single process draws and the
gradients are averaged, so the runs differ only in the order of float additions: with dropout off the losses agree
to 1e-4 (measured: ~1e-6 after 5 iterations). The DDP run also accumulates (2 ranks x 2 micro-steps x 2 sequences
= the single run's 8), which checks no_sync on the first micro-step."""
import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import data_dir
from mingpt.model import GPT

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ['--model.model_type=None', '--model.n_layer=2', '--model.n_head=2', '--model.n_embd=32',
        '--model.embd_pdrop=0', '--model.resid_pdrop=0', '--model.attn_pdrop=0', '--data.block_size=32',
        '--trainer.batch_size=8', '--trainer.max_iters=5', '--trainer.eval_interval=2', '--trainer.eval_iters=2',
        '--trainer.checkpoint_interval=5', '--trainer.quiet=True', '--sample.length=10']


def metrics(work_dir):
    with open(os.path.join(work_dir, 'metrics.jsonl')) as f:
        return [json.loads(line) for line in f]


def test_torchrun_two_processes_match_one(tmp_path):
    data = data_dir('tinyshakespeare', 'input.txt')
    # one thread a process: two processes on a small machine must not fight over cores
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'MINGPT_DATA_DIR': str(data.parent.parent)}
    chargpt = os.path.join(ROOT, 'projects', 'chargpt.py')
    run = dict(env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ddp = subprocess.Popen([sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
                            chargpt, *TINY, f'--system.work_dir={tmp_path / "ddp"}', '--trainer.grad_accum_steps=2'],
                           **run)
    single = subprocess.Popen([sys.executable, chargpt, *TINY, f'--system.work_dir={tmp_path / "single"}'], **run)
    outs = {}
    for name, p in (('ddp', ddp), ('single', single)):
        outs[name], _ = p.communicate(timeout=180)
        assert p.returncode == 0, outs[name]

    one, two = metrics(tmp_path / 'single'), metrics(tmp_path / 'ddp')
    assert [r['iter'] for r in two] == list(range(5))  # only rank 0 writes
    assert [r['loss'] for r in two] == pytest.approx([r['loss'] for r in one], abs=1e-4)
    assert [r.get('val_loss') for r in two] == pytest.approx([r.get('val_loss') for r in one], abs=1e-4)
    assert outs['ddp'].count('iter 2: train loss') == 1  # callbacks (val loss, samples) print on rank 0 only

    ckpt = torch.load(tmp_path / 'ddp' / 'ckpt.pt', weights_only=True)
    assert len(ckpt['rng']) == 2  # each rank's RNG, to resume each where it was
    model, ckpt = GPT.from_checkpoint(tmp_path / 'ddp' / 'model.pt')
    assert len(ckpt['vocab']) == 65 and not any(k.startswith('module.') for k in ckpt['model'])
