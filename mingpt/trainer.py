"""A generic training loop: it knows nothing about GPT beyond model(x, y) -> (logits, loss)."""
import time
from collections import defaultdict

import torch
from torch.utils.data.dataloader import DataLoader
from tqdm.auto import tqdm

from mingpt.utils import CfgNode as CN


class Trainer:

    @staticmethod
    def get_default_config():
        C = CN()
        # device to train on: 'auto' picks cuda when available, else cpu
        C.device = 'auto'
        # dataloader parameters
        C.num_workers = 4
        # optimizer parameters
        C.max_iters = None
        C.batch_size = 64
        C.learning_rate = 3e-4
        C.betas = (0.9, 0.95)
        C.weight_decay = 0.1  # only applied on matmul weights
        C.grad_norm_clip = 1.0
        # a progress bar (iteration, loss, tokens/s) when max_iters is set; quiet=True turns it off
        C.quiet = False
        return C

    def __init__(self, config, model, train_dataset):
        self.config = config
        self.model = model
        self.optimizer = None
        self.train_dataset = train_dataset
        self.callbacks = defaultdict(list)
        if config.device == 'auto':
            self.device = 'cuda' if torch.cuda.is_available() else 'cpu'
        else:
            self.device = config.device
        self.model = self.model.to(self.device)
        print("running on device", self.device)
        # variables that will be assigned to trainer class later for logging and etc
        self.iter_num = 0
        self.iter_time = 0.0
        self.iter_dt = 0.0
        self.loss = None

    def add_callback(self, onevent: str, callback):
        self.callbacks[onevent].append(callback)

    def set_callback(self, onevent: str, callback):
        self.callbacks[onevent] = [callback]

    def trigger_callbacks(self, onevent: str):
        for callback in self.callbacks.get(onevent, []):
            callback(self)

    def run(self):
        model, config = self.model, self.config
        self.optimizer = model.configure_optimizers(config)
        # sample with replacement for as long as we train: the loader never runs dry
        train_loader = DataLoader(
            self.train_dataset,
            sampler=torch.utils.data.RandomSampler(self.train_dataset, replacement=True, num_samples=int(1e10)),
            shuffle=False,
            pin_memory=self.device.startswith('cuda'),
            batch_size=config.batch_size,
            num_workers=config.num_workers,
        )
        bar = tqdm(total=config.max_iters, disable=config.quiet or config.max_iters is None,
                   desc='training', dynamic_ncols=True)
        model.train()
        self.iter_num = 0
        self.iter_time = time.time()
        data_iter = iter(train_loader)
        while True:
            x, y = (t.to(self.device, non_blocking=True) for t in next(data_iter))
            logits, self.loss = model(x, y)
            model.zero_grad(set_to_none=True)
            self.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_norm_clip)
            self.optimizer.step()

            self.trigger_callbacks('on_batch_end')
            self.iter_num += 1
            tnow = time.time()
            self.iter_dt = tnow - self.iter_time
            self.iter_time = tnow
            if not bar.disable:
                bar.update(1)
                bar.set_postfix(loss=f"{self.loss.item():.4f}", tok_s=f"{x.numel() * (bar.format_dict['rate'] or 0):,.0f}")
            if config.max_iters is not None and self.iter_num >= config.max_iters:
                break
        bar.close()


@torch.no_grad()
def estimate_loss(model, dataset, batch_size, iters, device, seed=0):
    """Mean loss over `iters` batches of windows drawn from dataset with a fixed seed, so that successive
    evaluations see the same windows and their losses compare fairly."""
    was_training = model.training
    model.eval()
    g = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(iters):
        ix = torch.randint(len(dataset), (batch_size,), generator=g).tolist()
        x, y = (torch.stack(t).to(device) for t in zip(*(dataset[i] for i in ix)))
        losses.append(model(x, y)[1].item())
    model.train(was_training)
    return sum(losses) / len(losses)
