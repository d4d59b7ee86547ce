"""DDP on CPU: chargpt under `torchrun --standalone --nproc_per_node=2` (gloo) trains to the same losses as one
process with the same global batch. Each rank takes a fixed share of the batch the single process draws and the
gradients are averaged, so the runs differ only in the order of float additions: with dropout off the losses agree
to 1e-4 (measured: ~1e-6 after 5 iterations). The DDP run also accumulates (2 ranks x 2 micro-steps x 2 sequences
= the single run's 8), which checks no_sync on the first micro-step."""
import json
import os
import re
import subprocess
import sys
import textwrap

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
        # gloo's abort at exit (GLOO_EXIT_ABORT, below) comes after the run's files, which the checks below read whole
        assert p.returncode == 0 or (name == 'ddp' and GLOO_EXIT_ABORT in outs[name]), outs[name]

    one, two = metrics(tmp_path / 'single'), metrics(tmp_path / 'ddp')
    assert [r['iter'] for r in two] == list(range(5))  # only rank 0 writes
    assert [r['loss'] for r in two] == pytest.approx([r['loss'] for r in one], abs=1e-4)
    assert [r.get('val_loss') for r in two] == pytest.approx([r.get('val_loss') for r in one], abs=1e-4)
    assert outs['ddp'].count('iter 2: train loss') == 1  # callbacks (val loss, samples) print on rank 0 only
    assert outs['ddp'].count('number of parameters') == 1  # and so does the script: the other ranks are quiet

    ckpt = torch.load(tmp_path / 'ddp' / 'ckpt.pt', weights_only=True)
    assert len(ckpt['rng']) == 2  # each rank's RNG, to resume each where it was
    model, ckpt = GPT.from_checkpoint(tmp_path / 'ddp' / 'model.pt')
    assert len(ckpt['vocab']) == 65 and not any(k.startswith('module.') for k in ckpt['model'])


TWO_RUNS = textwrap.dedent("""
    import os, time
    import torch
    import torch.distributed as dist
    from mingpt.model import GPT
    from mingpt.trainer import Trainer
    config = GPT.get_default_config()
    config.model_type, config.vocab_size, config.block_size = 'gpt-nano', 10, 8
    data = torch.utils.data.TensorDataset(torch.randint(10, (64, 8)), torch.randint(10, (64, 8)))
    for run in range(2):
        if run and os.environ['RANK'] == '1':
            time.sleep(1)  # the ranks reach the next run at different times, as after a project's own work
        tc = Trainer.get_default_config()
        tc.max_iters, tc.batch_size, tc.quiet, tc.device = 3, 4, True, 'cpu'
        Trainer(tc, GPT(config), data).run()
        print(f"run {run}, rank {os.environ['RANK']}: in the group {dist.is_initialized()}", flush=True)
""")


# torch's gloo can abort a process at interpreter exit, after all its work, when a worker thread drops the last
# reference to a collective's tensor then (pytorch/pytorch#190489); seen in about one CI run in ten
GLOO_EXIT_ABORT = 'terminate called without an active exception'
SCRIPT_DONE = 'torchrun_ok: the script ran to its end on rank'


def torchrun_ok(script, env, timeout):
    """The output of script run by torchrun in 2 processes, which must end well within timeout seconds, on both ranks
    without an error: a process aborted by gloo at exit passes only where both ranks had run the script to its end."""
    script.write_text(script.read_text() + f"\nimport os\nprint('{SCRIPT_DONE}', os.environ['RANK'], flush=True)\n")
    p = subprocess.Popen([sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
                          str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:  # hung: torchrun passes SIGTERM on to the workers
        p.terminate()
        p.communicate()
        raise
    assert p.returncode == 0 or (GLOO_EXIT_ABORT in out and out.count(SCRIPT_DONE) == 2), out
    return out


def test_a_second_run_under_torchrun_joins_the_same_group(tmp_path):
    """The ablation trains one Trainer after another: the group is kept between them (one made again over torchrun's
    store hung, now and then, in DDP's first collective)."""
    script = tmp_path / 'two_runs.py'
    script.write_text(TWO_RUNS)
    out = torchrun_ok(script, {**os.environ, 'OMP_NUM_THREADS': '1'}, timeout=60)
    for run in range(2):
        for rank in range(2):
            assert f"run {run}, rank {rank}: in the group True" in out


def test_a_resume_on_another_number_of_processes_says_so_and_each_rank_keeps_its_own_dropout(tmp_path):
    """The batches do not depend on the number of processes, so a run may go on with more or fewer; the dropout
    draws do, so the run is told it does not continue exactly, and a rank the checkpoint lacks draws its own (it
    took rank 0's, and both ranks dropped the same units)."""
    data = data_dir('tinyshakespeare', 'input.txt')
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'MINGPT_DATA_DIR': str(data.parent.parent)}
    chargpt = os.path.join(ROOT, 'projects', 'chargpt.py')
    args = [*TINY, '--model.resid_pdrop=0.1', f'--system.work_dir={tmp_path}', '--trainer.checkpoint_interval=2']
    run = dict(env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180)
    torchrun = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2']
    steps = [([sys.executable], 2, None), (torchrun, 4, "WORLD_SIZE=1 and this one has 2"),
             ([sys.executable], 6, "WORLD_SIZE=2 and this one has 1")]
    for launch, max_iters, note in steps:
        resume = ['--trainer.resume=True'] if note else []
        out = subprocess.run([*launch, chargpt, *args, f'--trainer.max_iters={max_iters}', *resume], **run).stdout
        assert 'note: the run of' not in out if note is None else out.count(note) == 1, out
        if launch is torchrun:
            rng = torch.load(tmp_path / 'ckpt.pt', weights_only=True)['rng']
            assert not torch.equal(rng[0]['torch'], rng[1]['torch'])
    assert [r['iter'] for r in metrics(tmp_path)] == list(range(6))


COUNTED = textwrap.dedent("""
    import os
    import torch
    from mingpt.model import GPT
    from mingpt.trainer import Trainer
    config = GPT.get_default_config()
    config.model_type, config.vocab_size, config.block_size = 'gpt-nano', 10, 8
    data = torch.utils.data.TensorDataset(torch.randint(10, (64, 8)), torch.randint(10, (64, 8)))
    counted = []

    class Counting(Trainer):
        def _measure(self, t0):  # the tokens this rank counted for the line of metrics.jsonl being made
            counted.append(int(self._log_tokens))
            return super()._measure(t0)

    tc = Trainer.get_default_config()
    tc.max_iters, tc.batch_size, tc.grad_accum_steps, tc.log_interval, tc.quiet, tc.device = 4, 8, 2, 2, True, 'cpu'
    Counting(tc, GPT(config), data).run()
    print(f"rank {os.environ['RANK']} counted {counted}", flush=True)
""")


def test_only_rank_0_counts_the_tokens_of_the_throughput_it_alone_reports(tmp_path):
    """Every rank summed its batch's tokens on its device at each micro-step, for a tokens/s only rank 0 writes. The
    lines of iterations 0, 2 (two steps) and 3 (the last): 8 windows of 8 tokens a step, the whole batch's count."""
    script = tmp_path / 'counted.py'
    script.write_text(COUNTED)
    out = torchrun_ok(script, {**os.environ, 'OMP_NUM_THREADS': '1'}, timeout=120)
    assert "rank 0 counted [64, 128, 64]" in out and "rank 1 counted [0, 0, 0]" in out, out


KILLED = textwrap.dedent("""
    import os, signal, sys
    import torch
    import mingpt.trainer
    from mingpt.model import GPT
    from mingpt.trainer import Trainer
    from mingpt.utils import run_cli

    def main(argv):
        config = GPT.get_default_config()
        config.model_type, config.vocab_size, config.block_size = 'gpt-nano', 10, 8
        data = torch.utils.data.TensorDataset(torch.randint(10, (64, 8)), torch.randint(10, (64, 8)))
        tc = Trainer.get_default_config()
        tc.max_iters, tc.batch_size, tc.quiet, tc.device = 1000, 4, True, 'cpu'
        tc.work_dir, tc.checkpoint_interval = argv[0], 2
        trainer = Trainer(tc, GPT(config), data)
        die = lambda: os.kill(os.getpid(), signal.SIGKILL)
        if argv[1] == 'callback':
            trainer.add_callback('on_batch_end', lambda t: t.iter_num == 4 and die())
        elif argv[1] == 'metric':  # not killed: a callback's error ends rank 0
            trainer.add_callback('on_batch_end', lambda t: t.iter_num == 4 and t.metrics.update(pair=torch.ones(2)))
        else:  # in the write of the checkpoint of 4 iterations, as the OOM killer would in torch.save
            write = mingpt.trainer.save_checkpoint

            def dying_write(checkpoint, path):
                if checkpoint['iter_num'] == 4:
                    die()
                write(checkpoint, path)

            mingpt.trainer.save_checkpoint = dying_write
        trainer.run()

    run_cli(main)
""")


@pytest.mark.parametrize('where, stopped, saved', [('callback', 5, 4), ('write', 4, 2)])
def test_when_rank_0_is_killed_the_others_say_what_is_saved_and_how_to_go_on(tmp_path, where, stopped, saved):
    """The OOM killer's SIGKILL leaves no word from the rank it ends; the others meet a lost connection (or torchrun's
    SIGTERM), which said nothing of a checkpoint. Rank 0 dies in iteration 4's callbacks, after the checkpoint of 4;
    or in the write of that checkpoint, which the others had counted as saved (they now wait for the write)."""
    script = tmp_path / 'killed.py'
    script.write_text(KILLED)
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'PYTHONPATH': ROOT}
    out = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
                          str(script), str(tmp_path / 'run'), where], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=120).stdout
    assert f"stopped after {stopped} iterations; {tmp_path / 'run' / 'ckpt.pt'} was saved after {saved} iterations: " \
           "go on from there with --trainer.resume=True" in out, out
    assert torch.load(tmp_path / 'run' / 'ckpt.pt', weights_only=True)['iter_num'] == saved


def test_a_metric_that_is_not_one_number_is_named_and_no_rank_waits_for_rank_0(tmp_path):
    """A callback on rank 0 gives trainer.metrics a pair: the error names the metric (it said only 'a Tensor with 2
    elements cannot be converted to Scalar'), and the other rank, waiting in the next step, ends too."""
    script = tmp_path / 'killed.py'
    script.write_text(KILLED)
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'PYTHONPATH': ROOT}
    p = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
                        str(script), str(tmp_path / 'run'), 'metric'], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    assert p.returncode != 0
    assert "trainer.metrics['pair'] = tensor([1., 1.]) is not one number" in p.stdout, p.stdout
    assert [r['iter'] for r in metrics(tmp_path / 'run')] == list(range(4))  # nothing of the refused line


IN_CALLBACKS = textwrap.dedent("""
    import os
    import torch
    from mingpt.model import GPT
    from mingpt.trainer import Trainer
    config = GPT.get_default_config()
    config.model_type, config.vocab_size, config.block_size = 'gpt-nano', 10, 8
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randint(10, (64, 8)), torch.randint(10, (64, 8)))
    tc = Trainer.get_default_config()
    tc.max_iters, tc.batch_size, tc.quiet, tc.device = 6, 4, True, 'cpu'
    tc.work_dir, tc.eval_interval, tc.eval_iters = os.environ['WORK_DIR'], 3, 2
    trainer = Trainer(tc, GPT(config), data, val_dataset=data)

    def on_eval_end(trainer):
        trainer.metrics['again'] = trainer.evaluate()
        try:
            trainer.save_checkpoint(os.path.join(tc.work_dir, 'mine.pt'))
        except RuntimeError as e:
            print(f"refused: {e}", flush=True)

    trainer.add_callback('on_eval_end', on_eval_end)
    print(f"rank {os.environ['RANK']}: before the run {trainer.evaluate()!r}", flush=True)
    trainer.run()
    if os.environ['RANK'] == '0':
        print(f"rank 0 alone, after the run: {trainer.evaluate()!r}", flush=True)
    total = sum(p.double().sum() for p in trainer.model.parameters()).item()
    print(f"rank {os.environ['RANK']}: parameters sum to {total!r}", flush=True)
""")


def test_evaluate_outside_the_loop_scores_alone_and_a_callback_is_told_it_cannot_save_a_checkpoint(tmp_path):
    """Callbacks run on rank 0 only, so a collective called in one waited for ranks that never came: evaluate()
    crashed gloo ('collective mismatch'), save_checkpoint() hung for good; evaluate() before run() failed (no process
    group yet), and after it on rank 0 alone would hang. Now evaluate() outside the loop's own evaluations scores every
    window in its process, the val loss the loop measured, and save_checkpoint() in a callback is refused by name;
    the run goes on and the replicas stay identical."""
    script = tmp_path / 'in_callbacks.py'
    script.write_text(IN_CALLBACKS)
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'PYTHONPATH': ROOT, 'WORK_DIR': str(tmp_path / 'run')}
    out = torchrun_ok(script, env, timeout=90)
    lines = [r for r in metrics(tmp_path / 'run') if 'val_loss' in r]
    assert [r['iter'] for r in lines] == [0, 3, 5]
    assert [r['again'] for r in lines] == pytest.approx([r['val_loss'] for r in lines], abs=1e-7)
    assert out.count("refused: trainer.save_checkpoint() was called from a callback under DDP") == 3, out
    assert not (tmp_path / 'run' / 'mine.pt').exists()
    for said in ('parameters sum to', 'before the run'):  # the ranks' prints may share a line: found by pattern
        by_rank = dict(re.findall(rf"rank (\d): {said} ([\d.]+)", out))
        assert sorted(by_rank) == ['0', '1'] and by_rank['0'] == by_rank['1'], out
    after = [float(v) for v in re.findall(r"rank 0 alone, after the run: ([\d.]+)", out)]
    assert after == pytest.approx([lines[-1]['val_loss']], abs=1e-7)  # iteration 5, the last, was evaluated


AFTER_THE_RUN = textwrap.dedent("""
    import os
    import torch
    import torch.distributed as dist
    from mingpt.model import GPT
    from mingpt.trainer import Trainer
    config = GPT.get_default_config()
    config.model_type, config.vocab_size, config.block_size = 'gpt-nano', 10, 8
    data = torch.utils.data.TensorDataset(torch.randint(10, (64, 8)), torch.randint(10, (64, 8)))
    tc = Trainer.get_default_config()
    tc.max_iters, tc.batch_size, tc.quiet, tc.device = 3, 4, True, 'cpu'
    tc.work_dir, tc.checkpoint_interval = os.environ['WORK_DIR'], 3
    trainer = Trainer(tc, GPT(config), data)
    trainer.run()
    trainer.save_checkpoint(os.path.join(tc.work_dir, 'every_rank.pt'))  # as the docstring said: every rank calls it
    if trainer.rank == 0:  # as with many other libraries
        trainer.save_checkpoint(os.path.join(tc.work_dir, 'rank_0.pt'))
    dist.barrier()  # the other rank waits for rank 0 here, not in the save
    print(f"rank {trainer.rank}: done", flush=True)
""")


def test_save_checkpoint_after_the_run_on_rank_0_alone_saves_what_the_loops_last_checkpoint_holds(tmp_path):
    """`if trainer.rank == 0: trainer.save_checkpoint()` after run() hung (or crashed, if the other rank had
    exited): it waited for the other ranks' random states. It now saves those the ranks ended run() with, as the loop's
    checkpoint of the same step does: the files hold the same random states, weights and optimizer state."""
    script = tmp_path / 'after_the_run.py'
    script.write_text(AFTER_THE_RUN)
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'PYTHONPATH': ROOT, 'WORK_DIR': str(tmp_path / 'run')}
    out = torchrun_ok(script, env, timeout=60)
    assert 'rank 0: done' in out and 'rank 1: done' in out, out
    loop = torch.load(tmp_path / 'run' / 'ckpt.pt', weights_only=True)
    assert len(loop['rng']) == 2 and not torch.equal(loop['rng'][0]['torch'], loop['rng'][1]['torch'])
    for name in ('every_rank.pt', 'rank_0.pt'):
        mine = torch.load(tmp_path / 'run' / name, weights_only=True)
        assert mine['iter_num'] == loop['iter_num'] == 3
        for key in ('rng', 'model', 'optimizer'):
            assert same(mine[key], loop[key]), key


def same(a, b):
    """a == b, tensors compared by value, within dicts, lists and tuples."""
    if torch.is_tensor(a) or torch.is_tensor(b):
        return torch.is_tensor(a) and torch.is_tensor(b) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b
