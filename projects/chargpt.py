"""
Trains a character-level language model on Tiny Shakespeare (or any text file, or a folder of them), shows
samples and the validation loss as it learns, and saves a checkpoint that can be sampled later without training:

    python projects/chargpt.py                                   # train
    python projects/chargpt.py --data.path=text/gutenberg        # every .txt file of a folder, one after another
    python projects/chargpt.py --trainer.resume=True             # continue from out/chargpt/ckpt.pt
    python projects/chargpt.py --sample.checkpoint=out/chargpt/model.pt --sample.prompt="ROMEO:"   # sample
    python projects/chargpt.py --data.tokenizer=DIR              # tokens of a byte-level BPE vocabulary instead
    python projects/chargpt.py --system.init=gpt2 --trainer.learning_rate=3e-5 --trainer.batch_size=8   # GPT-2

The trainer does the evaluation and the files (--help lists its options): every trainer.eval_interval iterations
it measures the val loss (this script then prints it and a sample), keeps the best model in work_dir/model.pt, and
writes work_dir/ckpt.pt (everything needed to resume) every trainer.checkpoint_interval iterations and
work_dir/metrics.jsonl (draw it with: python -m mingpt.plot out/chargpt/metrics.jsonl -o out/chargpt/loss.png).
A work_dir that holds a run is never overwritten: resume it, choose another work_dir, or pass
--trainer.overwrite=True. A resume refuses a checkpoint trained with another model config, text vocabulary or
tokenizer.

--system.init starts from a trained model instead of a new one, with its size and tokenizer: GPT-2's weights (a hub
id such as gpt2, or a Hugging Face directory), or a checkpoint of this script (e.g. trained on a small text, to go
on with a larger one). The dropout options still apply.
"""
import sys

import torch

from mingpt.bpe import get_encoder
from mingpt.checkpoint import with_options
from mingpt.checks import DROPOUT_OPTIONS, check_options_before_data
from mingpt.data import (TINY_SHAKESPEARE_SHA256, TINY_SHAKESPEARE_URL, CharTokenizer, TokenDataset, encode_text,
                         fetch, read_corpus)
from mingpt.model import GPT
from mingpt.pretrained import load_model_and_tokenizer, tokenizer_record
from mingpt.trainer import Trainer
from mingpt.utils import (CfgNode as CN, ConfigError, check_range, eval_mode, refuse_ignored, run_cli, set_from_data,
                          set_seed)


def get_config():
    C = CN()
    C.system = CN()
    C.system.seed = 3407
    C.system.work_dir = './out/chargpt'
    C.system.init = None  # a model to start from (GPT-2's hub id or directory, or a model.pt); None: a new one
    C.data = CN()
    # a text file, or a folder whose .txt files are read one after another (either here, or under $MINGPT_DATA_DIR
    # or the cache); default: Tiny Shakespeare, downloaded once
    C.data.path = None
    # None: one token per character of the text; or a directory holding a byte-level BPE vocabulary in GPT-2's
    # format (encoder.json and vocab.bpe, e.g. one trained with mingpt.bpe); gpt2: GPT-2's, downloaded if need be
    C.data.tokenizer = None
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
    C.sample = CN()
    C.sample.prompt = "O God, O God!"
    C.sample.length = 500
    C.sample.checkpoint = None  # a saved model.pt (or ckpt.pt): sample from it and exit, without training
    return C


def check_model_options(config):
    """The model's options, checked before the text is read: a typo (--model.model_type=gpt-nanoo) is told at once,
    not after the text is tokenized. vocab_size, which the text decides, stands in as 1 for the check."""
    init, M = config.system.init, config.model
    if init:
        if config.data.tokenizer:
            raise ConfigError(f"system.init={init!r} brings its own tokenizer: leave out data.tokenizer")
        refuse_ignored('model', M, get_config().model, [k for k in M.to_dict() if k not in DROPOUT_OPTIONS],
                       f"system.init={init!r} brings its own model, whose size and options it keeps (only the dropout "
                       "options apply); leave them out")
    check_options_before_data(GPT, M, block_size=config.data.block_size)


def start_from(config):
    """(model, tokenizer) of system.init, to train on: its size and tokenizer, and this run's dropout (the options
    check_model_options has checked)."""
    init, M = config.system.init, config.model
    model, tokenizer, trained = load_model_and_tokenizer(init, with_note=True)  # how long a model.pt trained
    if config.data.block_size > model.block_size:
        raise ConfigError(f"data.block_size={config.data.block_size} is longer than the context of {init} "
                          f"({model.block_size} tokens): give --data.block_size={model.block_size} or less")
    model = with_options(model, **{k: getattr(M, k) for k in DROPOUT_OPTIONS})  # this run's dropout
    config.model = CN(**model.config.to_dict())  # what the checkpoints record, and a resume compares
    print(f"starting from {init}: {config.model.n_layer} layers, {config.model.n_head} heads, {config.model.n_embd} "
          f"wide, block_size {model.block_size}, a vocabulary of {config.model.vocab_size} tokens")
    if trained:
        print(trained)
    return model, tokenizer


def split(seq, val_fraction, block_size):
    """(train, val): the last val_fraction of seq (characters or token ids) is held out."""
    n_val = int(len(seq) * val_fraction)
    if min(n_val, len(seq) - n_val) <= block_size:
        raise ConfigError(f"data.val_fraction={val_fraction} splits the text's {len(seq):,} tokens into "
                          f"{len(seq) - n_val:,} to train on and {n_val:,} to validate on, and each part needs more "
                          f"than data.block_size={block_size}; use more text, another val_fraction or a smaller "
                          "block_size")
    return seq[:len(seq) - n_val], seq[len(seq) - n_val:]


def prompt_ids(tokenizer, prompt, block_size):
    """The prompt's ids, checked at start-up: not after an hour of training, at the first sample."""
    try:
        ids = tokenizer.encode(prompt)
    except ValueError as e:  # characters outside a character vocabulary
        default = (" (the default prompt, Shakespeare's: give one in your text's characters with --sample.prompt=...)"
                   if prompt == get_config().sample.prompt else '')
        raise ConfigError(f"sample.prompt{default}: {e}") from None
    if not 1 <= len(ids) <= block_size:
        fix = "shorten it, or train with a larger --data.block_size" if ids else "give some text, e.g. a newline"
        raise ConfigError(f"sample.prompt is {len(ids)} tokens long; it must be 1 to {block_size} tokens, the "
                          f"model's context (block_size): {fix}")
    return ids


def sample(model, tokenizer, ids, length, device):
    """Print the prompt and `length` tokens sampled after it. A Ctrl-C prints the text so far, then stops."""
    idx = torch.tensor([ids], dtype=torch.long, device=device)
    steps = []
    with eval_mode(model):
        try:
            for step in model.generate_stream(idx, length, temperature=1.0, do_sample=True, top_k=10):
                steps.append(step)
        finally:  # a long sample (GPT-2's, on a CPU) takes a while: a user who stops it sees what it wrote
            print(tokenizer.decode(torch.cat([idx, *steps], dim=1)[0].tolist()))


def main(argv):
    config = get_config()
    config.merge_from_args(argv, usage=__doc__)
    D, S = config.data, config.sample
    check_range('data.block_size', D.block_size, 1, integer=True)
    check_range('data.val_fraction', D.val_fraction, 0, 1, low_open=True, high_open=True)
    check_range('sample.length', S.length, 0, integer=True)
    set_seed(config.system.seed)

    if S.checkpoint:
        defaults = get_config()
        refuse_ignored('model', config.model, defaults.model, list(config.model.to_dict()),
                       "sample.checkpoint brings its own model; leave them out")
        refuse_ignored('system', config.system, defaults.system, ['init'],
                       "sample.checkpoint is the model sampled from (system.init is where a training run starts); "
                       "leave it out")
        # e.g. --trainer.max_iters, meant to train the checkpoint on
        for name, given, default in (('data', D, defaults.data), ('trainer', config.trainer, defaults.trainer)):
            refuse_ignored(name, given, default, list(given.to_dict()),
                           "sample.checkpoint samples, on the CPU, and trains nothing; to train on, leave it out and "
                           "give --system.init=CHECKPOINT (a new run from its weights) or --trainer.resume=True (its "
                           "run goes on)")
        model, tokenizer, note = load_model_and_tokenizer(S.checkpoint, with_note=True)
        sample(model, tokenizer, prompt_ids(tokenizer, S.prompt, model.block_size), S.length, 'cpu')
        if note:  # on stderr, as generate.py's notes, and after the text, as its timing
            print(note, file=sys.stderr)
        return

    check_model_options(config)  # before the text is read, so a typo is told at once
    Trainer.check_options(config.trainer)
    path = fetch('tinyshakespeare/input.txt', TINY_SHAKESPEARE_URL, D.path, sha256=TINY_SHAKESPEARE_SHA256,
                 local_copy='pass its path with --data.path=FILE', folder=True)
    text = read_corpus(path)
    if not text.strip():
        raise ValueError(f"data.path={D.path} holds no text to train on")
    if config.system.init:
        model, tokenizer = start_from(config)
    elif D.tokenizer:
        tokenizer = get_encoder(directory=D.tokenizer)
    else:
        tokenizer = CharTokenizer.from_text(text)
    # checked before the text is tokenized (a while, for a large one, the first time); sample.length 0: no samples
    ids = prompt_ids(tokenizer, S.prompt, D.block_size) if S.length else None
    identity = tokenizer_record(tokenizer)
    try:  # saved in the cache, so a resume or another run on this text with this tokenizer reads them back
        tokens = encode_text(text, tokenizer, identity, path.name)  # its train and val parts are views, not copies
    except ValueError as e:  # system.init's characters: a new text (a Gutenberg book) often has more
        raise ConfigError(f"data.path: {e}. A character model reads only the characters it was trained on; to "
                          "go on with a text that has others, train both runs on a byte-level BPE vocabulary, "
                          "which reads any text (--data.tokenizer=gpt2, or a DIR from python -m mingpt.bpe "
                          "train)") from None
    del text  # training reads the tokens: a large text's memory goes back now
    train_ids, val_ids = split(tokens, D.val_fraction, D.block_size)
    train_dataset = TokenDataset(train_ids, D.block_size, len(tokenizer))
    val_dataset = TokenDataset(val_ids, D.block_size, len(tokenizer))
    print(f"training on {len(train_ids):,} tokens, validating on {len(val_ids):,}; vocabulary {len(tokenizer):,}")

    if not config.system.init:
        set_from_data(config.model, 'model', vocab_size=train_dataset.get_vocab_size(), block_size=D.block_size,
                      data=D)
        model = GPT(config.model)
    # the vocabulary (or tokenizer) and the whole config go into every checkpoint, so a checkpoint alone can be
    # sampled from, and a resume on other text or with another tokenizer is refused
    trainer = Trainer(config.trainer, model, train_dataset, val_dataset=val_dataset, checkpoint_extras=identity,
                      run_config=config, must_match=identity)

    def eval_end_callback(trainer):
        print(f"\niter {trainer.iter_num}: train loss {trainer.loss.item():.4f}, val loss {trainer.val_loss:.4f}")
        if S.length:
            sample(model, tokenizer, ids, S.length, trainer.device)

    trainer.set_callback('on_eval_end', eval_end_callback)
    trainer.run()


if __name__ == '__main__':
    run_cli(main)
