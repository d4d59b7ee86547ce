"""The adder's best.pt across runs in one work_dir (its end-to-end runs are in test_projects.py)."""
import pytest
import torch

from conftest import load_project
from mingpt.checkpoint import save_checkpoint

TINY = ['--trainer.quiet=True', '--trainer.batch_size=8', '--trainer.device=cpu']


def test_a_run_that_does_not_continue_work_dirs_run_starts_without_its_best(tmp_path, monkeypatch):
    """An overwriting run that crashed before its first check (here in it: an out-of-memory error) left the replaced
    run's best.pt beside its own config.json; and a resume of another folder's checkpoint into a folder holding
    such a best.pt was held to its accuracy, so the resumed run's models were never saved. run() now removes
    best.pt when it starts a run that does not continue work_dir's own."""
    adder = load_project('adder')
    run = tmp_path / 'run'
    for work_dir in (run, tmp_path / 'from'):
        adder.main([f'--system.work_dir={work_dir}', '--trainer.max_iters=2', '--trainer.checkpoint_interval=1', *TINY])
    assert (run / 'best.pt').exists()

    def out_of_memory(model, dataset, device):
        raise RuntimeError('CUDA out of memory')
    monkeypatch.setattr(adder, 'eval_split', out_of_memory)
    with pytest.raises(RuntimeError, match='out of memory'):
        adder.main([f'--system.work_dir={run}', '--trainer.max_iters=2', '--trainer.overwrite=True', *TINY])
    assert not (run / 'best.pt').exists()
    # the folder now holds no run (an empty metrics.jsonl), and a best.pt better than any model, as a crash left it
    ckpt = torch.load(tmp_path / 'from' / 'best.pt', weights_only=True)
    save_checkpoint({**ckpt, 'test_accuracy': 2.0}, run / 'best.pt')
    monkeypatch.setattr(adder, 'eval_split', lambda model, dataset, device: (0.5, []))
    resume = f'--trainer.resume={tmp_path / "from" / "ckpt.pt"}'
    adder.main([f'--system.work_dir={run}', '--trainer.max_iters=3', resume, *TINY])
    assert torch.load(run / 'best.pt', weights_only=True)['test_accuracy'] == 0.5
