"""
Trains a GPT to add n-digit numbers. The sum is written reversed, least significant digit first, because that is
the order in which a person carries: each digit then depends only on digits the model has already seen.

    python projects/adder.py                      # 2-digit addition
    python projects/adder.py --data.ndigit=3
    python projects/adder.py --trainer.resume=True  # continue from out/adder/ckpt.pt

There is no val loss: eval.interval sets how often the accuracy on the held-out problems is measured, and
trainer.eval_interval and trainer.eval_iters, listed below, are refused.
"""
import os

import torch
from torch.utils.data import Dataset

from mingpt.checkpoint import load_checkpoint, model_state, save_checkpoint
from mingpt.checks import check_options_before_data
from mingpt.model import GPT
from mingpt.trainer import Trainer
from mingpt.utils import (CfgNode as CN, ConfigError, check_range, eval_mode, need_work_dir, refuse_ignored, run_cli,
                          set_from_data, set_seed)


def get_config():
    C = CN()
    C.system = CN()
    C.system.seed = 3407
    C.system.work_dir = './out/adder'
    C.data = AdditionDataset.get_default_config()
    C.model = GPT.get_default_config()
    C.model.model_type = 'gpt-nano'
    C.trainer = Trainer.get_default_config()
    C.trainer.learning_rate = 5e-4  # the model is tiny, so we can go a bit faster
    C.trainer.max_iters = 3000  # 2 digits: all 500 held-out problems right by about 2500 iterations
    C.trainer.num_workers = 0  # the examples are made on the fly in microseconds: workers would only cost
    C.trainer.checkpoint_interval = 500  # ckpt.pt, to resume from
    C.eval = CN()
    C.eval.interval = 500  # iterations between accuracy checks (the best model is saved at each)
    C.eval.mistakes = 5  # how many wrong answers to print at each check
    return C


class AdditionDataset(Dataset):
    """
    Problems a + b = c with a, b of ndigit digits. 85 + 50 = 135 becomes the digits "8550" followed by the sum
    reversed and zero-padded to ndigit + 1 digits, "531": x = 855053 (all but the last) and y = 550531
    (shifted by one) with the first 2*ndigit - 1 targets set to -1, so that only the sum's digits are scored.
    The split is fixed (its own seed, whatever system.seed is): 20% of all problems (at most 500) are held out
    for testing.
    """

    @staticmethod
    def get_default_config():
        C = CN()
        C.ndigit = 2
        return C

    def __init__(self, config, split):
        if check_range('data.ndigit', config.ndigit, 1, integer=True) > 4:
            raise ConfigError(f"data.ndigit={config.ndigit} is out of range: it must be an integer <= 4, because "
                              "the dataset lists every one of the (10^ndigit)^2 problems (at 4 digits 10^8 of them, "
                              "800 MB of indices)")
        self.config = config
        self.split = split
        num = (10 ** config.ndigit) ** 2
        perm = torch.randperm(num, generator=torch.Generator().manual_seed(1337))
        num_test = min(int(num * 0.2), 500)
        # the test split copies its few problems out: a view would keep all of perm alive (800 MB at 4 digits)
        self.ixes = perm[:num_test].clone() if split == 'test' else perm[num_test:]

    def get_vocab_size(self):
        return 10  # the digits 0..9

    def get_block_size(self):
        # a, b and c reversed, less one because the last digit is only ever a target
        return 3 * self.config.ndigit + 1 - 1

    def __len__(self):
        return self.ixes.nelement()

    def encode(self, a, b):
        nd = self.config.ndigit
        c = a + b
        return [int(s) for s in f"{a:0{nd}d}{b:0{nd}d}{str(c).zfill(nd + 1)[::-1]}"]

    def __getitem__(self, idx):
        nd = self.config.ndigit
        a, b = divmod(self.ixes[idx].item(), 10 ** nd)
        dix = self.encode(a, b)
        x = torch.tensor(dix[:-1], dtype=torch.long)
        y = torch.tensor(dix[1:], dtype=torch.long)
        y[:nd * 2 - 1] = -1  # the model predicts the sum's digits only
        return x, y


@torch.no_grad()
def eval_split(model, dataset, device, batch_size=500):
    """(exact-match accuracy, the problems it got wrong as (a, b, the model's sum)): the model reads a and b and
    must write every digit of the sum (greedy decoding)."""
    nd = dataset.config.ndigit
    correct, mistakes = 0, []
    x = torch.stack([dataset[i][0] for i in range(len(dataset))]).to(device)
    with eval_mode(model):
        for chunk in x.split(batch_size):
            out = model.generate(chunk[:, :2 * nd], nd + 1, do_sample=False)
            place = 10 ** torch.arange(nd - 1, -1, -1, device=device)  # a and b are written most significant first
            a = (chunk[:, :nd] * place).sum(1)
            b = (chunk[:, nd:2 * nd] * place).sum(1)
            pred = (out[:, 2 * nd:] * 10 ** torch.arange(nd + 1, device=device)).sum(1)  # digits come reversed
            ok = pred == a + b
            correct += ok.sum().item()
            mistakes += [(ai, bi, pi) for ai, bi, pi, oki in zip(a.tolist(), b.tolist(), pred.tolist(), ok.tolist())
                         if not oki]
    return correct / len(dataset), mistakes


def main(argv):
    config = get_config()
    config.merge_from_args(argv, usage=__doc__)
    check_range('eval.interval', config.eval.interval, 1, integer=True)
    refuse_ignored('trainer', config.trainer, get_config().trainer, ('eval_interval', 'eval_iters'),
                   "the trainer's val loss needs a val set, which this project has not; its accuracy on the held-out "
                   "problems is measured every eval.interval iterations: give --eval.interval=N instead")
    check_range('eval.mistakes', config.eval.mistakes, 0, integer=True)
    # before the problems are listed (10^8 at 4 digits), so a typo is told at once
    check_options_before_data(GPT, config.model)
    Trainer.check_options(config.trainer)
    set_seed(config.system.seed)

    train_dataset = AdditionDataset(config.data, split='train')
    test_dataset = AdditionDataset(config.data, split='test')
    set_from_data(config.model, 'model', vocab_size=train_dataset.get_vocab_size(),
                  block_size=train_dataset.get_block_size())
    model = GPT(config.model)
    # run() removes best.pt when it starts a run that does not continue work_dir's (a fresh one, an overwrite, a
    # resume of another folder's checkpoint): a crash before the first check must not leave the replaced run's
    trainer = Trainer(config.trainer, model, train_dataset, run_config=config, run_files=['best.pt'])
    need_work_dir(trainer.config.work_dir, "the adder keeps its most accurate model in work_dir/best.pt")
    ckpt_path = os.path.join(trainer.config.work_dir, 'best.pt')  # model.pt is the trainer's
    best = None  # the accuracy to beat, read at the first check: a resumed run's best so far, once run() has started

    def batch_end_callback(trainer):
        nonlocal best
        last = trainer.steps_done == config.trainer.max_iters
        if trainer.iter_num % config.eval.interval != 0 and not last:
            return
        test_acc, mistakes = eval_split(model, test_dataset, trainer.device)
        print(f"\niter {trainer.iter_num}: train loss {trainer.loss.item():.4f}, held-out accuracy {test_acc:.4f}")
        for a, b, p in mistakes[:config.eval.mistakes]:  # under the line of the model that made them
            print(f"  mistake: {a} + {b} = {a + b}, model said {p}")
        if best is None:
            best = load_checkpoint(ckpt_path)['test_accuracy'] if os.path.exists(ckpt_path) else -1.0
        if test_acc > best:
            best = test_acc
            save_checkpoint({**model_state(model), 'config': config.to_dict(), 'iter_num': trainer.steps_done,
                             'test_accuracy': test_acc}, ckpt_path)
            print(f"saved the best model so far to {ckpt_path}")

    trainer.set_callback('on_batch_end', batch_end_callback)
    trainer.run()


if __name__ == '__main__':
    run_cli(main)
