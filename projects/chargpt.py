"""
Trains a character-level language model on Tiny Shakespeare (or any text file), shows samples and the
validation loss as it learns, and saves a checkpoint that can be sampled later without training:

    python projects/chargpt.py                                   # train
    python projects/chargpt.py --trainer.resume=True             # continue from out/chargpt/ckpt.pt
    python projects/chargpt.py --sample.checkpoint=out/chargpt/model.pt --sample.prompt="ROMEO:"   # sample

The trainer does the evaluation and the files (--help lists its options): every trainer.eval_interval iterations
it measures the val loss (this script then prints it and a sample), keeps the best model in work_dir/model.pt, and
writes work_dir/ckpt.pt (everything needed to resume) every trainer.checkpoint_interval iterations and
work_dir/metrics.jsonl (draw it with: python -m mingpt.plot out/chargpt/metrics.jsonl -o loss.png).
"""
import sys

import torch

from mingpt.data import TINY_SHAKESPEARE_URL, CharDataset, CharTokenizer, fetch
from mingpt.model import GPT
from mingpt.trainer import Trainer
from mingpt.utils import CfgNode as CN, set_seed, setup_logging


def get_config():
    C = CN()
    C.system = CN()
    C.system.seed = 3407
    C.system.work_dir = './out/chargpt'
    C.data = CN()
    C.data.path = None  # a text file; default: Tiny Shakespeare ($MINGPT_DATA_DIR, the cache, or downloaded once)
    C.data.block_size = 128
    C.data.val_fraction = 0.1  # the last 10% of the text is held out for the validation loss
    C.model = GPT.get_default_config()
    C.model.model_type = 'gpt-mini'
    C.trainer = Trainer.get_default_config()
    C.trainer.learning_rate = 5e-4  # the model is small, so we can go a bit faster
    C.trainer.max_iters = 5000
    C.trainer.eval_interval = 500  # every this many iterations: val loss, a sample, model.pt if the best so far
    C.trainer.eval_iters = 10  # batches averaged for the val loss
    C.trainer.checkpoint_interval = 500
    C.trainer.work_dir = None  # default: system.work_dir
    C.sample = CN()
    C.sample.prompt = "O God, O God!"
    C.sample.length = 500
    C.sample.checkpoint = None  # a saved model.pt (or ckpt.pt): sample from it and exit, without training
    return C


def sample(model, tokenizer, prompt, length, device):
    idx = torch.tensor([tokenizer.encode(prompt)], dtype=torch.long, device=device)
    model.eval()
    print(prompt, end='', flush=True)
    for tok in model.generate_stream(idx, length, temperature=1.0, do_sample=True, top_k=10):
        print(tokenizer.decode(tok[0]), end='', flush=True)
    print()


def main(argv):
    config = get_config()
    config.merge_from_args(argv)
    config.trainer.work_dir = config.trainer.work_dir or config.system.work_dir
    set_seed(config.system.seed)

    if config.sample.checkpoint:
        model, ckpt = GPT.from_checkpoint(config.sample.checkpoint)
        sample(model, CharTokenizer(ckpt['vocab']), config.sample.prompt, config.sample.length, 'cpu')
        return

    setup_logging(config)
    text = open(fetch('tinyshakespeare/input.txt', TINY_SHAKESPEARE_URL, config.data.path), encoding='utf-8').read()
    tokenizer = CharTokenizer.from_text(text)
    n_val = int(len(text) * config.data.val_fraction)
    train_dataset = CharDataset(text[:-n_val], config.data.block_size, tokenizer)
    val_dataset = CharDataset(text[-n_val:], config.data.block_size, tokenizer)
    tokenizer.encode(config.sample.prompt)  # fail now, not after an hour of training, if the prompt can't be read

    config.model.vocab_size = train_dataset.get_vocab_size()
    config.model.block_size = train_dataset.get_block_size()
    model = GPT(config.model)
    # the vocabulary and the whole config go into every checkpoint, so a checkpoint alone can be sampled from
    trainer = Trainer(config.trainer, model, train_dataset, val_dataset=val_dataset,
                      checkpoint_extras={'vocab': tokenizer.chars, 'config': config.to_dict()})

    def eval_end_callback(trainer):
        print(f"\niter {trainer.iter_num}: train loss {trainer.loss.item():.4f}, val loss {trainer.val_loss:.4f}")
        sample(model, tokenizer, config.sample.prompt, config.sample.length, trainer.device)
        model.train()

    trainer.set_callback('on_eval_end', eval_end_callback)
    trainer.run()


if __name__ == '__main__':
    main(sys.argv[1:])
