"""The run folder: the work_dir a run writes its files in, and what it records there.

A run writes metrics.jsonl (a line per logged iteration), args.txt and config.json (the command and config, through
utils.setup_logging), and the trainer's model.pt and ckpt.pt. What a checkpoint records of its run (the platform,
the options) is compared here when a run resumes from it, so that a resume notes, or refuses, a run that is not the
same. The trainer imports this module; it imports mingpt.utils alone.
"""
import json
import os
from pathlib import Path

import torch

# keys of metrics.jsonl's lines; a callback's own numbers (trainer.metrics) may not reuse them
METRICS_KEYS = ('iter', 'loss', 'lr', 'grad_norm', 'tokens_per_s', 'mfu', 'val_loss')
# trainer options that leave the steps' numbers as they are, which a resume may change unnoted (it notes the others)
RESUME_KEYS = ('max_iters', 'resume', 'overwrite', 'work_dir', 'checkpoint_interval', 'eval_interval', 'eval_iters',
               'log_interval', 'quiet', 'num_workers')


def platform_record(device):
    """What the same bits need besides the seed and the options: torch's version, the threads of its CPU kernels
    (OMP_NUM_THREADS) and the device. A checkpoint records it, and a resume on another notes it."""
    device = torch.device(device)
    name = torch.cuda.get_device_name(device) if device.type == 'cuda' else device.type
    return {'torch': str(torch.__version__), 'threads': torch.get_num_threads(), 'device': name}


def metric_value(name, value):
    """A callback's trainer.metrics[name] as metrics.jsonl writes it: a one-element tensor or array as its number.
    Anything else is refused by its name: .item() and json said only 'a Tensor with 2 elements...', and text or None
    went into the file, where the plots and the readers of metrics.jsonl expect a number."""
    try:
        value = value.item() if hasattr(value, 'item') else value
    except (RuntimeError, ValueError):  # a tensor or array of more than one element
        pass
    if not isinstance(value, (int, float)):
        raise TypeError(f"trainer.metrics[{name!r}] = {value!r:.80} is not one number, which is what a line of "
                        "metrics.jsonl holds per name: give e.g. value.mean().item(), or one name per element (and "
                        "print text rather than log it)")
    return value


def unwritable(work_dir):
    """Why files cannot be written in work_dir (a folder, made if missing), or None if they can."""
    if work_dir == '':
        return "is empty"
    there = Path(os.path.abspath(work_dir))
    try:
        while not there.exists() and not there.is_symlink() and there != there.parent:
            there = there.parent  # the nearest existing folder: makedirs creates the rest
    except OSError as e:  # e.g. a name longer than the file system allows
        return f"cannot be made ({e.strerror})"
    if not there.exists():
        return f"cannot be made: {there} is a broken link" if there.is_symlink() else f"{there} does not exist"
    if not there.is_dir():
        return f"cannot be a directory: {there} is a file"
    if not os.access(there, os.W_OK | os.X_OK):
        return f"cannot be written: this user may not write in {there}"
    return None


def iter_of(line):
    """The iteration of a whole line of metrics.jsonl; None for a line cut short by a kill."""
    try:
        return json.loads(line)['iter'] if line.endswith('\n') else None
    except (ValueError, KeyError, TypeError):
        return None


def changed_settings(saved, now, skip=()):
    """'key=saved there, now here' for each setting of now (a dict) that saved holds with another value, keys in skip
    aside. A tuple and a list of the same items are one value, as a command line gives it: betas=[0.9, 0.95]."""
    def value(v):
        return list(v) if isinstance(v, tuple) else v
    return [f"{k}={saved[k]!r} there, {now[k]!r} here" for k in now
            if k in saved and k not in skip and value(saved[k]) != value(now[k])]


def describe_difference(saved, now):
    """How two values of a must_match key differ, e.g. '62 of 65 entries differ' for two vocabularies, or
    'seed=3407 there, 1 here' for two dicts of settings."""
    if isinstance(saved, (list, tuple)) and isinstance(now, (list, tuple)):
        if len(saved) != len(now):
            return f"{len(saved)} entries there, {len(now)} here"
        return f"{sum(a != b for a, b in zip(saved, now))} of {len(saved)} entries differ"
    if isinstance(saved, dict) and isinstance(now, dict):
        every = saved.keys() | now.keys()
        keys = sorted((k for k in every if saved.get(k) != now.get(k)), key=str)
        if len(every) > 10:  # a table (a tokenizer's encoder), not a few settings
            return f"{len(keys)} of {len(every)} entries differ"
        parts = []
        for key in keys:
            there, here = saved.get(key), now.get(key)
            if isinstance(there, (list, tuple, dict)) and isinstance(here, (list, tuple, dict)):
                parts.append(f"{key}: {describe_difference(there, here)}")
            elif key not in saved:  # an option added to mingpt after the checkpoint was written
                parts.append(f"{key} not recorded there (older than that option), {here!r} here")
            else:
                parts.append(f"{key}={there!r} there, {here!r} here")
        return '; '.join(parts)
    return "the checkpoint has none" if saved is None else "not the same"
