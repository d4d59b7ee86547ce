"""The run folder: the work_dir a run writes its files in, and the checks that keep one run from losing another.

A run writes metrics.jsonl (a line per logged iteration), args.txt and config.json (the command and config, through
utils.setup_logging) here, and the trainer's model.pt and ckpt.pt. RunFolder refuses a folder another run trains in
or a fresh run would overwrite, and locks it while the run trains; check_same_run compares what a checkpoint records
of its run with this one before a resume goes on from it, and refuses, or notes, a difference; how_to_go_on says what
a stopped run saved. The trainer imports this module; it imports mingpt.checkpoint and mingpt.utils alone.
"""
import json
import os
from pathlib import Path

import torch

from mingpt.checkpoint import load_checkpoint
from mingpt.utils import (CfgNode as CN, ConfigError, lock_folder, lock_holder, make_folder, plural,
                          remove_stale_temps, setup_logging, write_failed, write_text_atomically)

# keys of metrics.jsonl's lines; a callback's own numbers (trainer.metrics) may not reuse them
METRICS_KEYS = ('iter', 'loss', 'lr', 'grad_norm', 'tokens_per_s', 'mfu', 'val_loss')
# trainer options that leave the steps' numbers as they are, which a resume may change unnoted (it notes the others)
RESUME_KEYS = ('max_iters', 'resume', 'overwrite', 'work_dir', 'checkpoint_interval', 'eval_interval', 'eval_iters',
               'log_interval', 'quiet', 'num_workers')


class RunFolder:
    """The work_dir a run writes in (None: no file is written), with the trainer options that say what may happen
    to the run it holds: resume continues it, overwrite replaces it, and a fresh run refuses it. Rank 0 (the only
    process without DDP) locks the folder while the run trains there, and writes the files. run_files: the project's
    own files there (the trainer's run_files)."""

    def __init__(self, work_dir, option='trainer', rank=0, resume=None, overwrite=False, checkpoint_interval=None,
                 run_files=()):
        self.work_dir, self.option, self.rank = work_dir, option, rank  # option: 'trainer' or 'system', for messages
        self.resume, self.overwrite, self.checkpoint_interval = resume, overwrite, checkpoint_interval
        self.run_files = run_files
        self.lock = None  # the lock file while this run trains here (rank 0's)

    def path(self, name):
        return os.path.join(self.work_dir, name)

    def check(self):
        """work_dir can be written, and a fresh run never replaces the run it holds: checked before touching any
        file."""
        if self.work_dir is None:
            if self.checkpoint_interval and self.rank == 0:
                print(f"note: trainer.work_dir is None, so no file is written (checkpoint_interval="
                      f"{self.checkpoint_interval} included)")
            return
        why = unwritable(self.work_dir)
        if why:
            raise ConfigError(f"{self.option}.work_dir={self.work_dir!r} {why}; give a folder to write the run in")
        if os.path.isdir(self.work_dir):  # a folder made later is locked when it is made (take)
            self._claim()  # first: a run training there now is no earlier run to resume or replace
        self._refuse_earlier_run()

    def _refuse_earlier_run(self):
        """A fresh run, or one resumed from another folder's checkpoint, refuses a work_dir that holds a run (overwrite
        replaces it); resume=True goes on with it. A resume from a checkpoint of work_dir itself may not overwrite."""
        if self.resume and not self._resumes_elsewhere():
            if self.overwrite:  # it would delete the checkpoint it goes on from
                raise ConfigError(f"trainer.resume={self.resume!r} continues the run in work_dir and "
                                  "trainer.overwrite=True replaces it: give one of them")
            return
        held = None if self.overwrite else self.held()
        if held is None:
            return
        resume = "continue it with --trainer.resume=True, " if held.endswith(' done') else ''  # a readable ckpt.pt
        this = f"this run, resumed from {self.resume}," if self.resume else "this fresh run"
        raise ConfigError(f"{self.work_dir} holds an earlier run ({held}) that {this} would overwrite; {resume}train "
                          f"in another work_dir (--{self.option}.work_dir=DIR), or replace it with "
                          "--trainer.overwrite=True")

    def _resumes_elsewhere(self):
        """Whether resume names a checkpoint in another folder than work_dir: this run continues that folder's here."""
        return isinstance(self.resume, str) and not in_folder(self.resume, self.work_dir)

    def held(self):
        """What the run work_dir holds says of itself ('ckpt.pt: 40 iterations done'), or None where it holds none."""
        name = earlier_run(self.work_dir)
        if name is None:
            return None
        # metrics.jsonl alone: a run stopped before its first checkpoint (without checkpoint_interval: before its end)
        if name == 'metrics.jsonl':
            return f"{name}: no checkpoint to resume from"
        try:
            done = load_checkpoint(self.path(name), mmap=True)['iter_num']
        except (ValueError, KeyError):
            return f"{name}: unreadable"
        done = f"{done} {plural(done, 'iteration')}"
        return f"{name}: {done} done" if name == 'ckpt.pt' else f"{name}: a model saved after {done}"

    def _claim(self):
        """Lock work_dir for this run, on rank 0 (which writes its files), or refuse it while another run holds it:
        two runs in one folder would overwrite each other's ckpt.pt and mix their lines in metrics.jsonl."""
        if self.rank != 0 or self.lock is not None:
            return
        self.lock = lock_folder(self.work_dir)
        if self.lock is None:
            holder = lock_holder(self.work_dir)
            raise ConfigError(f"{self.option}.work_dir={self.work_dir!r} is in use: another run is training in it"
                              f"{f' ({holder})' if holder else ''}, and two runs in one folder would overwrite each "
                              f"other's files; wait for it to end, or train in another work_dir (--{self.option}"
                              ".work_dir=DIR)")

    def take(self):
        """Make work_dir if it is new and lock it (one that was there is locked already), once every check has passed
        and before the DataLoader's workers start; then look again, as a run may have ended in it since the check."""
        if self.rank != 0 or self.work_dir is None or self.lock is not None:
            return
        make_folder(self.work_dir)
        self._claim()
        self._refuse_earlier_run()

    def release(self):
        """Unlock work_dir, however the run ended: another may train in it now."""
        if self.lock is not None:
            if self.lock.writable():  # its note says who trains here: no one, now
                self.lock.truncate(0)
            self.lock.close()
            self.lock = None

    def checkpoint_to_resume(self):
        """The path of the checkpoint resume names: its own, or work_dir/ckpt.pt, which must be there."""
        if isinstance(self.resume, str):
            return self.resume
        path = self.path('ckpt.pt')
        if not os.path.isdir(self.work_dir):  # e.g. relative, from another folder
            relative = '' if os.path.isabs(self.work_dir) else (
                f" (looked for from {os.getcwd()}): run from the folder the run started in (the cd of its args.txt), "
                "or give work_dir as a full path")
            raise ConfigError(f"trainer.resume=True continues the run in {self.work_dir}, but there is no such "
                              f"folder{relative}; without resume, a fresh run starts")
        if not os.path.exists(path):  # e.g. stopped before its first checkpoint
            fresh = ("start it again with --trainer.overwrite=True" if earlier_run(self.work_dir) else
                     "start a fresh run without it")
            every = (f"every trainer.checkpoint_interval={self.checkpoint_interval} iterations"
                     if self.checkpoint_interval else
                     "only when trainer.checkpoint_interval is set: every that many iterations")
            raise ConfigError(f"trainer.resume=True continues from {path}, but the run there saved no checkpoint "
                              f"(ckpt.pt is written {every} and at the end); {fresh}")
        return path

    def start_files(self, run_config=None, resumed_at=None):
        """Once the run is known to start: remove the temporary files of killed writes, the replaced run's
        checkpoints (overwrite), the project's run_files unless this run continues work_dir's own, the metrics of
        iterations to be redone (from resumed_at, where a resumed run goes on); then record the run's arguments and
        config (run_config, the project's whole config)."""
        if self.rank != 0 or self.work_dir is None:
            return
        remove_stale_temps(self.work_dir)
        held = self.held() if self.overwrite else None
        if held is not None:  # said, as a notebook's config may still hold the overwrite=True of an earlier cell
            print(f"note: replacing the earlier run in {self.work_dir} ({held}), as trainer.overwrite=True asks")
        # now, not at this run's first save: a resume must never mix the two runs, nor a crash before that save leave
        # the replaced run's files beside this run's config.json
        continues = resumed_at is not None and not self._resumes_elsewhere()  # work_dir's own run goes on
        replaced = (('ckpt.pt', 'model.pt') if self.overwrite else ()) + (() if continues else tuple(self.run_files))
        for name in replaced:
            if os.path.exists(self.path(name)):
                os.remove(self.path(name))
        path = self.path('metrics.jsonl')
        kept = []
        # a resume keeps the lines of the iterations before its checkpoint's, unless they are another folder's run's
        if resumed_at is not None and os.path.exists(path) and not self._resumes_elsewhere():
            with open(path) as f:
                kept = [line for line in f if iter_of(line) is not None and iter_of(line) < resumed_at]
        write_text_atomically(path, ''.join(kept))  # a kill now leaves the old or the new
        if run_config is not None:
            setup_logging(run_config, self.work_dir, resumed_at=resumed_at)

    def write_metrics(self, record, metrics):
        """record, with a callback's numbers metrics (trainer.metrics), as a line of metrics.jsonl."""
        if metrics:  # most steps' callbacks add none
            clash = sorted(metrics.keys() & set(METRICS_KEYS))
            if clash:
                raise ValueError(f"trainer.metrics {clash} would replace the trainer's own numbers in metrics.jsonl "
                                 f"({', '.join(METRICS_KEYS)}): give the callback's numbers other names")
            record = {**record, **{k: metric_value(k, v) for k, v in metrics.items()}}
        if self.rank == 0 and self.work_dir is not None:
            path = self.path('metrics.jsonl')
            size = os.path.getsize(path) if os.path.exists(path) else 0
            try:
                with open(path, 'a') as f:
                    f.write(json.dumps(record) + '\n')
            except OSError as e:  # a full disk: no half line is left at the end
                os.truncate(path, size)
                raise write_failed(path, e, kept="its earlier lines are kept") from e


def work_dir_option(work_dir, run_config):
    """The option that gave work_dir, as a user gives it: a project's system.work_dir, else trainer.work_dir."""
    system = getattr(run_config, 'system', None)
    return 'system' if work_dir == getattr(system, 'work_dir', None) else 'trainer'


def check_same_run(ckpt, path, model, config, extras, must_match=(), device='cpu', rank=0):
    """Refuse to resume from ckpt, the checkpoint loaded from path, unless it is this run's: iterations left to train
    (config: the trainer's options), the same project identity (must_match: keys of extras, the trainer's
    checkpoint_extras), the same model config and trainable parameters. Other data options, trainer options or
    platform are only noted (on rank 0): training goes on with this run's."""
    # the options that chose the data, where both runs were started by a project (its config.data)
    runs = ckpt.get('config') or {}, extras.get('config') or {}
    there, here = (run.get('data') or {} for run in runs)
    data_diff = describe_difference(there, here) if there and here and there != here else ''
    options = f" (data options: {data_diff})" if data_diff else ''
    args = os.path.join(os.path.dirname(path), 'args.txt')  # written by the run that saved path
    command = f" (the command it last ran with is in {args})" if os.path.exists(args) else ''
    held, max_iters = ckpt['iter_num'], config.max_iters
    if max_iters is not None and max_iters <= held:
        raise ConfigError(f"{path} has trained {held} {plural(held, 'iteration')} already and "
                          f"trainer.max_iters={max_iters}: nothing is left to train; raise --trainer.max_iters to "
                          "train on")
    for key in must_match:
        if key.endswith('?'):  # 'key?': checked only where the checkpoint records it (a record added later)
            key = key[:-1]
            if key not in ckpt:
                if rank == 0:
                    print(f"note: {path} does not record its {key} (it is older than that record): not checked")
                continue
        if ckpt.get(key) != extras.get(key):
            raise ConfigError(f"cannot resume from {path}: its {key} is not this run's ("
                              f"{describe_difference(ckpt.get(key), extras.get(key))}), so the "
                              f"model was trained with other data, tokenizer or options{options}; resume with what "
                              f"it was trained with{command}, or start a new run in another work_dir")
    model_config, saved = getattr(model, 'config', None), ckpt.get('model_config', {})
    if isinstance(model_config, CN):
        diff = changed_settings(saved, model_config.to_dict())
        if diff:
            data = f" and other data options ({data_diff})" if data_diff else ''  # one sentence, not (...) (...)
            raise ConfigError(f"cannot resume from {path}: its model was built with other settings "
                              f"({'; '.join(diff)}){data}; give the model the settings it was trained "
                              f"with{command}, or start a new run in another work_dir")
    trainable = trainable_names(model)
    differ = sorted(set(ckpt.get('trainable', trainable)) ^ set(trainable))  # older checkpoints do not record it
    if differ:  # the optimizer's state is that of the parameters it trained, matched by their order alone
        raise ConfigError(f"cannot resume from {path}: its run trained other parameters than this model leaves "
                          f"trainable ({len(differ)} differ, e.g. {differ[:3]}); freeze the same ones "
                          "(requires_grad_(False)) before run(), or start a new run from its weights")
    if options and rank == 0:  # same vocabulary and model: perhaps more text on purpose, so only said
        print(f"note: {path} was trained on other data{options}; training goes on with this run's")
    saved, now = ckpt.get('trainer_config') or {}, config.to_dict()
    quiet = set(RESUME_KEYS)
    if now['lr_schedule'] == 'cosine' and now['lr_decay_iters'] is None:  # the decay then spans max_iters
        quiet.discard('max_iters')
    changed = changed_settings(saved, now, skip=quiet)
    if changed and rank == 0:  # a lower learning rate is often the point; a batch size left out is not
        print(f"note: {path} was trained with other trainer options ({'; '.join(changed)}); training goes on "
              f"with this run's{command}")
    there, here = ckpt.get('platform'), platform_record(device)  # older checkpoints do not record it
    if there and there != here and rank == 0:
        print(f"note: {path} was trained with {describe_difference(there, here)}: training goes on, but not to "
              "the bits the run would have reached there (floating-point sums are taken in another order)")


def how_to_go_on(steps_done, saved, work_dir, checkpoint_interval):
    """What is saved and how to go on, after a run stopped after steps_done iterations (which a stop in a step's
    evaluation, callbacks or checkpoint writes counts in, as the checkpoint does). saved: (path, iterations) of the
    checkpoint to go on from, or None. From what the run knows, not by reading ckpt.pt: torchrun's SIGTERM, sent to
    the ranks left when one dies, cuts a read short."""
    stopped = f"\nstopped after {steps_done} {plural(steps_done, 'iteration')}"
    if saved is None:
        kept = "no checkpoint was saved" + (f" (trainer.checkpoint_interval={checkpoint_interval})"
                                            if work_dir is not None else " (no work_dir)")
        # a fresh run is refused only by the files of a run; a rank on another machine than rank 0 cannot tell
        refused = work_dir is not None and (not os.path.isdir(work_dir) or earlier_run(work_dir) is not None)
        again = " (in this work_dir with --trainer.overwrite=True)" if refused else ''
        return f"{stopped}; {kept}, so a new run starts over{again}"
    path, done = saved
    resume = path
    if work_dir is not None and os.path.realpath(path) == os.path.realpath(os.path.join(work_dir, 'ckpt.pt')):
        resume = 'True'  # however the path was spelled (./out/ckpt.pt, a link): work_dir's own
    # another folder's checkpoint, which this run resumed from: what it wrote in work_dir is a run to replace
    elif work_dir is not None and not in_folder(path, work_dir) and os.path.isdir(work_dir) and earlier_run(work_dir):
        resume += ' --trainer.overwrite=True'
    done = f"{done} {plural(done, 'iteration')}"
    return f"{stopped}; {path} was saved after {done}: go on from there with --trainer.resume={resume}"


def in_folder(path, work_dir):
    """Whether the file path lies in work_dir, however either is spelled: relative, with '..', or through a link
    (a link to work_dir's ckpt.pt is work_dir's checkpoint, which an overwrite would delete)."""
    return os.path.dirname(os.path.realpath(path)) == os.path.realpath(work_dir)


def earlier_run(work_dir):
    """The first file of a run that work_dir holds, which a fresh run there is refused by, or None. An empty
    metrics.jsonl (a run that stopped before its first line, e.g. torch.compile found no C++ compiler) is not one:
    a fresh run may start there."""
    return next((name for name in ('ckpt.pt', 'model.pt', 'metrics.jsonl')
                 if os.path.exists(os.path.join(work_dir, name)) and os.path.getsize(os.path.join(work_dir, name))),
                None)


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


def platform_record(device):
    """What the same bits need besides the seed and the options: torch's version, the device and, on the CPU, the
    threads of its kernels (OMP_NUM_THREADS), which a GPU's kernels do not use. A checkpoint records it, and a resume
    on another notes it."""
    device = torch.device(device)
    name = torch.cuda.get_device_name(device) if device.type == 'cuda' else device.type
    record = {'torch': str(torch.__version__), 'device': name}
    if device.type == 'cpu':
        record['threads'] = torch.get_num_threads()
    return record


def trainable_names(model):
    """The names of the parameters the optimizer trains: those not frozen with requires_grad_(False)."""
    return [name for name, p in model.named_parameters() if p.requires_grad]


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
