"""A generic training loop: it knows nothing about GPT beyond model(x, y) -> (logits, loss) and, as minGPT's,
model.configure_optimizers(config) -> the optimizer.

minGPT's API: Trainer(config, model, train_dataset), callbacks, and what they read (iter_num, iter_dt, loss, and
the step's gradients, still on the parameters in on_batch_end). It adds lr and grad_norm for callbacks, steps_done
(the iterations finished, for a callback's checkpoint), and, each off by default so that the defaults behave as
minGPT's loop: a warmup + cosine learning-rate schedule, gradient accumulation, mixed precision, torch.compile,
evaluation on a val set, atomic checkpoints that resume exactly, metrics.jsonl, and DistributedDataParallel when
started by torchrun.

No run is lost: a run refuses a work_dir that another run is training in, a fresh run one that holds a run, a
resume a checkpoint of another model or another vocabulary (and notes other data options that keep the vocabulary),
and nothing is written before those checks pass (they live in runs.py, the run folder, with the files a run writes
besides its checkpoints). Evaluation and callbacks run on a copy of the random number generators' states, so they
never change the training's trajectory.
"""
import atexit
import itertools
import math
import os
import sys
import time
import traceback
import types
import weakref
from collections import defaultdict
from contextlib import nullcontext

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, default_collate
from tqdm.auto import tqdm

from mingpt.checkpoint import check_loads_back, load_checkpoint, model_state, save_checkpoint, strip_prefixes
from mingpt.runs import RunFolder, check_same_run, how_to_go_on, platform_record, trainable_names, work_dir_option
from mingpt.utils import (CfgNode as CN, ConfigError, LinesAboveBar, Terminated, bfloat16_emulated,
                          check_dataset_for_workers, check_range, escape_what_stdout_cannot_encode, eval_mode,
                          expand_home, get_rng_state, matmul_precision, modes_kept, resolve_device, rng_kept,
                          set_rng_state, warn_caller)

EVENTS = ('on_batch_end', 'on_eval_end')  # what callbacks can be added for (see trigger_callbacks)
DTYPES = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}
# keys of the trainer's checkpoints; a project's checkpoint_extras may not reuse them
CHECKPOINT_KEYS = ('model', 'model_class', 'model_config', 'optimizer', 'scaler', 'iter_num', 'trainer_config', 'rng',
                   'sampler', 'best_val_loss', 'val_loss', 'trainable', 'platform', 'format')
# the valid range of each numeric option, as check_range's arguments (none_ok: None means 'off' or 'no limit'; inf
# only where high=math.inf says it means something)
RANGES = {
    'batch_size': dict(low=1, integer=True),
    'grad_accum_steps': dict(low=1, integer=True),
    'max_iters': dict(low=1, integer=True, none_ok=True),
    'learning_rate': dict(low=0, low_open=True),
    'min_lr': dict(low=0, none_ok=True),
    'warmup_iters': dict(low=0, integer=True),
    'lr_decay_iters': dict(low=1, integer=True, none_ok=True),
    'weight_decay': dict(low=0),
    'grad_norm_clip': dict(low=0, high=math.inf, none_ok=True),  # inf: the norm measured (grad_norm), never clipped
    'eval_interval': dict(low=0, integer=True, none_ok=True),
    'eval_iters': dict(low=1, integer=True),
    'checkpoint_interval': dict(low=1, integer=True, none_ok=True),
    'log_interval': dict(low=1, integer=True),
    'num_workers': dict(low=0, integer=True),
}
BATCH_KEYS = ('batch_size', 'grad_accum_steps', 'eval_iters')  # the options batches are cut by: check_batches'


# the trainer configs whose work_dir a Trainer took from its run config's system.work_dir, with that value
FILLED_WORK_DIR = weakref.WeakKeyDictionary()


class Trainer:
    """The training loop, with minGPT's API: Trainer(config, model, train_dataset), add_callback(event, fn), run().
    config is get_default_config()'s; what it adds to minGPT's loop is off by default (see the module's docstring)."""

    @staticmethod
    def get_default_config():
        C = CN()
        # device to train on: 'auto' picks cuda, then mps, then cpu (under torchrun: cuda:LOCAL_RANK)
        C.device = 'auto'
        # DataLoader worker processes; 0 cuts batches in this process, best for in-memory or memory-mapped data
        C.num_workers = 0
        # optimizer parameters
        C.max_iters = None
        C.batch_size = 64  # sequences per optimizer step, summed over accumulation micro-steps and DDP ranks
        C.learning_rate = 3e-4
        C.betas = (0.9, 0.95)
        C.weight_decay = 0.1  # on the 2-D weights (matmuls, embeddings), not biases or layer norms
        C.grad_norm_clip = 1.0  # None: off; inf: the norm measured (trainer.grad_norm, metrics.jsonl), never clipped
        # learning-rate schedule: linear warmup over warmup_iters, then 'constant', 'cosine' decay to min_lr, or
        # 'inverse_sqrt' ("Attention is all you need": decay as 1/sqrt(iteration))
        C.lr_schedule = 'constant'
        C.warmup_iters = 0
        C.lr_decay_iters = None  # where the cosine reaches min_lr; default max_iters
        C.min_lr = None  # default learning_rate / 10
        # micro-steps per optimizer step (each of batch_size / (grad_accum_steps * ranks) sequences). The step's loss
        # is the mean of the micro-steps' (and ranks') mean losses, so with -1 targets in varying numbers a target
        # weighs 1 / (grad_accum_steps * ranks * its micro-step's count), not 1 / the whole batch's count
        C.grad_accum_steps = 1
        # 'float32', or autocast to 'bfloat16' / 'float16' (float16 adds a gradient scaler)
        C.dtype = 'float32'
        C.tf32 = False  # CUDA: float32 matmuls on TF32 tensor cores while run() trains (the setting comes back after)
        C.compile = False  # torch.compile the model
        # evaluation, when a val_dataset is given: every eval_interval iterations, the mean loss over eval_iters
        # batches of windows drawn with a fixed seed (the same at every evaluation): a sample, not the whole val set.
        # None or 0: no evaluation (model.pt is then the latest model)
        C.eval_interval = 500
        C.eval_iters = 20
        # files: metrics.jsonl, model.pt (best val loss, else latest) and ckpt.pt (all state, to resume) go here;
        # None: the run config's system.work_dir (run_config, as the projects pass it), else no files at all
        C.work_dir = None
        C.checkpoint_interval = None  # write ckpt.pt every this many iterations (and at the end)
        C.resume = None  # True: continue from work_dir/ckpt.pt; or the path of a ckpt.pt
        C.overwrite = False  # True: a fresh run (or a resume of another folder's ckpt.pt) may replace work_dir's run
        C.log_interval = 1  # iterations between lines of metrics.jsonl (reading the loss waits for the GPU)
        # a progress bar (iteration, loss, tokens/s) when max_iters is set; quiet=True turns it off
        C.quiet = False
        return C

    def __init__(self, config, model, train_dataset, val_dataset=None, checkpoint_extras=None, run_config=None,
                 must_match=(), run_files=()):
        """checkpoint_extras: project data saved in every checkpoint beside the trainer's own keys, e.g. {'vocab':
        ...}. run_config: the project's whole config, saved as config.json and in checkpoints ('config'); its
        system.work_dir is the default work_dir. must_match: keys of checkpoint_extras that a resume requires
        unchanged, because they say what the model was trained on (a vocabulary, a tokenizer); 'key?' checks key
        only where the checkpoint records it (a record added after some runs were saved). run_files: names of the
        project's own files in work_dir (the adder's best.pt), which run() removes when it starts a run that does not
        continue work_dir's (see runs.RunFolder.start_files)."""
        self.get_default_config().fill_missing(config)  # the options a minGPT-made config lacks
        self.config = config
        # torch.compile(model) (nanoGPT's idiom) is trained through as given; self.model is the module inside, so
        # that checkpoints hold a GPT with its own names, not an OptimizedModule's '_orig_mod.' ones
        self.model = getattr(model, '_orig_mod', model)
        self._compiled = model if model is not self.model else None
        self.optimizer = None
        self.scaler = None
        self.train_dataset = train_dataset
        self.val_dataset = val_dataset
        self.run_config = run_config
        self.checkpoint_extras = dict(checkpoint_extras or {})
        if run_config is not None:
            # first: run_config.trainer is config, as projects pass it; a work_dir filled in here before (a notebook's
            # cell re-run with another system.work_dir) follows system.work_dir, one the user set stays
            if (config.work_dir in (None, FILLED_WORK_DIR.get(config))
                    and hasattr(getattr(run_config, 'system', None), 'work_dir')):
                config.work_dir = FILLED_WORK_DIR[config] = run_config.system.work_dir
            self.checkpoint_extras.setdefault('config', run_config.to_dict())
        for name, names in (('must_match', must_match), ('run_files', run_files)):
            if isinstance(names, str):  # a string is a sequence of characters: 'best.pt' would name '.', work_dir
                raise TypeError(f"{name} is a list of names, not the string {names!r}: give [{names!r}]")
        self.must_match = tuple(must_match)
        self.run_files = tuple(run_files)
        self.callbacks = defaultdict(list)
        clash = sorted(set(self.checkpoint_extras) & set(CHECKPOINT_KEYS))
        if clash:
            raise ValueError(f"checkpoint_extras may not use the trainer's own keys {clash}; rename them")
        check_loads_back(self.checkpoint_extras)
        self._place(config.device)
        self.model = self.model.to(self.device)
        if self.rank == 0:
            print("running on device", self.device)
        # what the loop sets at every step, for callbacks to read (as minGPT's) and for metrics.jsonl
        self.iter_num = 0
        self.steps_done = 0  # iter_num + 1 within a step's evaluation and callbacks, iter_num between steps
        self.iter_time = 0.0
        self.iter_dt = 0.0
        self.loss = None
        self.lr = None  # this step's learning rate
        self.grad_norm = None  # this step's gradient norm before clipping, a tensor; None with grad_norm_clip off
        self.val_loss = None  # the last evaluation's
        self.best_val_loss = float('inf')
        self.metrics = {}  # a callback's own numbers for this step's line of metrics.jsonl (see trigger_callbacks)
        self._stopping = False  # a callback called stop(); each run() starts without
        self.autocast = nullcontext()  # run() sets the real one from config.dtype
        self._eval_model = self.model  # run() sets the compiled one, when compiling
        self._in_callbacks = False  # within trigger_callbacks: under DDP, on rank 0 alone
        self._rng_at_end = None  # run() sets the random states it ended with (every rank's, under DDP)
        self._folder = None  # the work_dir of run(), locked while it trains there (see runs.RunFolder)

    def _place(self, device):
        """This process's rank (torchrun tells each process its place through the environment) and its device;
        refuses a placement torchrun cannot run."""
        self.world_size = int(os.environ.get('WORLD_SIZE', 1))
        self.rank = int(os.environ.get('RANK', 0)) if self.world_size > 1 else 0
        self.local_rank = int(os.environ.get('LOCAL_RANK', 0)) if self.world_size > 1 else 0
        self.device = resolve_device(device, 'trainer.device')
        if self.world_size > 1 and self.device == 'cuda':
            self.device = f'cuda:{self.local_rank}'  # one GPU per process
        self.device_type = torch.device(self.device).type
        local_size = int(os.environ.get('LOCAL_WORLD_SIZE', 1))  # torchrun's processes on this machine
        if self.device_type == 'cuda' and local_size > 1 and torch.device(self.device).index != self.local_rank:
            raise ConfigError(f"under torchrun each process takes the GPU of its LOCAL_RANK, but device "
                              f"{self.device!r} puts them all on one: give --trainer.device=cuda (or auto)")
        if self.device_type == 'cuda' and local_size > torch.cuda.device_count():
            raise ConfigError(f"torchrun started {local_size} processes on this machine, one per GPU, but it has "
                              f"only {torch.cuda.device_count()}: give torchrun --nproc_per_node="
                              f"{torch.cuda.device_count()} (or fewer), or train on the CPUs with --trainer.device=cpu")
        if self.world_size > 1 and self.device_type == 'mps':
            raise ConfigError("torchrun on 'mps': gloo, the backend off CUDA, cannot exchange MPS tensors; train in "
                              "one process, or on the CPUs with --trainer.device=cpu")
        if self.world_size > 1 and self.device_type == 'cuda':
            torch.cuda.set_device(self.device)  # under torchrun the process is its GPU's for good (one process: run())

    def add_callback(self, onevent: str, callback):
        check_callback(onevent, callback)
        warn_if_added_again(self.callbacks[onevent], onevent, callback)
        self.callbacks[onevent].append(callback)

    def set_callback(self, onevent: str, callback):
        check_callback(onevent, callback)
        self.callbacks[onevent] = [callback]

    def trigger_callbacks(self, onevent: str):
        """Events: 'on_batch_end' after every optimizer step, 'on_eval_end' after every evaluation. Under DDP
        callbacks run on rank 0 only: they print and save, and the other ranks hold the same model. A callback adds
        its own numbers to this step's line of metrics.jsonl with trainer.metrics['name'] = value (a number), and
        ends the run after this step with trainer.stop() (early stopping). Under DDP a callback may not stop the run
        or set the learning rate: the other ranks would not know, so it is refused; nor may it call save_checkpoint(),
        which saves their random states (trainer.evaluate() in a callback does not: it scores in this process alone)."""
        callbacks = self.callbacks.get(onevent, [])
        if self.rank != 0 or not callbacks:  # every step asks: most steps have nothing to run
            return
        bar = getattr(self, '_bar', None)
        before = dict(max_iters=self.config.max_iters, stopping=self._stopping, rate=self.config.learning_rate,
                      lrs=self._lrs())
        # a callback that sampled in eval mode must not leave dropout off for the steps after it, nor may its
        # model.train() wake a submodule kept in eval on purpose (a frozen probe): each module gets its own mode back
        self._in_callbacks = True  # save_checkpoint() then knows the other ranks are not with it
        try:
            with modes_kept(self.model), LinesAboveBar(bar) if bar is not None and not bar.disable else nullcontext():
                for callback in callbacks:
                    callback(self)
        finally:
            self._in_callbacks = False
        if self.world_size > 1:
            self._refuse_what_other_ranks_miss(**before)

    def _refuse_what_other_ranks_miss(self, max_iters, stopping, rate, lrs):
        """Under DDP, after rank 0's callbacks: refuse a stop or a learning rate they set, which the other ranks
        would not know (max_iters, stopping, rate and lrs: as they were before the callbacks)."""
        others = f"under DDP, where callbacks run on rank 0 only: the other {self.world_size - 1} rank(s)"
        # a stop rank 0 alone knows: it would leave while the others wait for it, and the run hang
        if self.config.max_iters != max_iters or self._stopping != stopping:
            what = (f"changed trainer.config.max_iters ({max_iters} -> {self.config.max_iters})"
                    if self.config.max_iters != max_iters else "called trainer.stop()")
            raise RuntimeError(f"a callback {what} {others} would go on training and wait for this one forever. Stop a "
                               "run early in one process, or give max_iters before the run")
        rate_changed = self.config.learning_rate != rate  # which this rank's next steps take up (_set_lr)
        if self._lrs() != lrs or rate_changed:  # else each rank would step at its own rate
            changed = (f"trainer.config.learning_rate ({rate} -> {self.config.learning_rate})" if rate_changed
                       else f"the learning rate ({lrs} -> {self._lrs()})")
            raise RuntimeError(f"a callback changed {changed} {others} would keep "
                               "theirs, and the replicas would drift apart. Steer the rate in one process, or give "
                               "its schedule before the run (trainer.lr_schedule, warmup_iters, min_lr)")

    def stop(self):
        """End the run after this step, from a callback (early stopping). The step is evaluated (with a val set)
        and its line of metrics.jsonl, model.pt (and ckpt.pt, with checkpoint_interval) are written, as at any end.
        config.max_iters is left as it is, so run() again trains max_iters, and a resume of the checkpoint goes on
        towards it (the older way, trainer.config.max_iters = trainer.steps_done, stops too, but lowers max_iters for
        good)."""
        self._stopping = True

    def _ends(self):
        """Whether the step just done is the run's last: max_iters reached, or a callback stopped the run."""
        return self._stopping or (self.config.max_iters is not None and self.steps_done >= self.config.max_iters)

    # ----------------------------------------------------------------------------------------------------------
    # the loop

    def run(self):
        """Set up (or resume), then until max_iters: one optimisation step, then evaluation, callbacks and files."""
        try:
            tf32 = self.config.tf32 and self.device_type == 'cuda'
            # one process on cuda:N makes it the current GPU while it trains (where DataLoader pins batches), and
            # gives the caller's back after: a notebook's next tensor on 'cuda' stays where it went before
            gpu = self.world_size == 1 and self.device_type == 'cuda' and torch.device(self.device).index is not None
            with matmul_precision('tf32', ['cuda']) if tf32 else nullcontext(), \
                    torch.cuda.device(self.device) if gpu else nullcontext():  # while it trains, not for good
                self._train()
        finally:
            if self._folder is not None:
                self._folder.release()  # however the run ended: another may train in work_dir now

    def _train(self):
        batches = self._start()
        try:
            x, y = self._to_device(next(batches))
            while not self._stopping and (self.config.max_iters is None or self.iter_num < self.config.max_iters):
                # a clock for durations: time.time() may not tick within a fast step (15.6 ms on Windows before
                # Python 3.13) and may step back (NTP), and tokens/s divides by it
                t0 = time.perf_counter()
                x, y = self._optimization_step(x, y, batches)
                self._after_step(t0)
                # only now: evaluation, checkpoints and callbacks ran with the gradients kept, so that callbacks
                # may read them (as in minGPT); freed before the next forward, they add nothing to peak memory
                self.optimizer.zero_grad(set_to_none=True)
                self.iter_num += 1
                tnow = time.perf_counter()
                self.iter_dt, self._step_end = tnow - self._step_end, tnow
                self.iter_time = time.time()  # as minGPT's: when the step ended, by the wall clock
        except (Exception, KeyboardInterrupt, SystemExit) as e:  # Ctrl-C, a crash, sys.exit() in a callback
            self._bar.close()  # now, so that the note below goes on a line of its own, not onto the bar's
            if self._says_how_to_go_on(e):
                print(how_to_go_on(self.steps_done, self._saved, self.config.work_dir, self.config.checkpoint_interval),
                      file=sys.stderr)
            if isinstance(e, KeyboardInterrupt):
                # a notebook keeps the stop's traceback (sys.last_traceback), whose frames of the step below held their
                # activations, memory the next run (a resume) needs: free their variables, keep their lines (where a
                # hung run was stuck, which --debug shows)
                traceback.clear_frames(e.__traceback__)
            raise
        finally:
            self._bar.close()  # whatever stopped the run (a callback's error too): else the next run's bar is lower
            # a notebook keeps the error's frames, and this iterator in them: its worker processes would live on
            if hasattr(batches, '_shutdown_workers'):  # DataLoader's, with num_workers > 0 (it has no public one)
                batches._shutdown_workers()
        self._finish()

    def _start(self):
        """Everything before the first step. Every check (options, work_dir, the checkpoint to resume) comes before
        the first file is written, so a refused run leaves work_dir as it was (but for the .lock it held). Returns the
        batch iterator."""
        c = self.config
        self.check_options(c, self.world_size)
        # here, not in check_options: a project checks its options before its Trainer fills work_dir in
        if c.resume and not isinstance(c.resume, str) and c.work_dir is None:
            raise ConfigError("trainer.resume=True reads work_dir/ckpt.pt but trainer.work_dir is None; set it, "
                              "or give resume the checkpoint's path")
        self._folder = RunFolder(c.work_dir, work_dir_option(c.work_dir, self.run_config), self.rank, resume=c.resume,
                                 overwrite=c.overwrite, checkpoint_interval=c.checkpoint_interval,
                                 run_files=self.run_files)
        self._folder.check()
        self._check_data_and_model()
        self._init_distributed()
        self._make_optimizer()
        # the seed of the batch sampler comes from torch's RNG, so set_seed fixes it, the same on every rank
        self.sampler_seed = int(torch.randint(2 ** 31 - 1, (1,)))
        self.iter_num = self.steps_done = 0  # as minGPT's run(): run() again trains max_iters more (resume: its own)
        self.lr = None  # none set by this run yet (an earlier run()'s last would read as a callback's)
        self._saved = None  # (path, iterations) of the checkpoint to go on from, which a stop's note names
        self._rng_at_end = None  # the random states this run() ends with (every rank's, under DDP)
        self._stopping = False
        self.metrics.clear()  # numbers a callback left when an earlier run stopped
        # model.pt is the best of this run (a resume's from its checkpoint on): not measured against an earlier run()'s
        self.val_loss, self.best_val_loss = None, float('inf')
        ckpt = self._resume() if c.resume else None
        self._folder.take()
        self._eval_model = self._compiled_model()
        # the loop trains through DDP, which all-reduces the gradients in backward; evaluation needs no wrapper
        self._train_model = self._eval_model if self.world_size == 1 else DDP(
            self._eval_model, device_ids=[self.local_rank] if self.device_type == 'cuda' else None)
        batches = iter(DataLoader(
            self.train_dataset, num_workers=c.num_workers, pin_memory=self.device_type == 'cuda',
            batch_sampler=StepSampler(len(self.train_dataset), c.batch_size, self.sampler_seed, self.iter_num,
                                      self.rank, self.world_size, c.grad_accum_steps)))
        # RNG states last: everything above may draw from them, and a resumed run must continue where it stopped
        saved = ckpt['rng'] if ckpt is not None else []
        if self.rank < len(saved):
            set_rng_state(saved[self.rank])
        elif self.world_size > 1:  # a new run, or a rank the checkpoint's run did not have
            torch.manual_seed(self.sampler_seed + self.rank)  # a different dropout mask on each rank
        self._folder.start_files(self.run_config, resumed_at=self.iter_num if ckpt is not None else None)
        escape_what_stdout_cannot_encode()  # a script's own, as run_cli does: a callback's sample must not stop the run
        self._bar = tqdm(total=c.max_iters, initial=self.iter_num, desc='training', dynamic_ncols=True,
                         disable=c.quiet or c.max_iters is None or self.rank != 0)
        self._train_mode()
        self.iter_time, self._step_end = time.time(), time.perf_counter()
        self._log_seconds, self._log_tokens = 0.0, 0  # training time and tokens since the last metrics line
        return batches

    def _make_optimizer(self):
        """The model's optimizer (warned of, on rank 0, where it leaves a trainable parameter out), the gradient
        scaler (float16) and autocast."""
        c = self.config
        self.model.zero_grad(set_to_none=True)  # a step stopped in an earlier run() (Ctrl-C) left its gradients
        self.optimizer = self.model.configure_optimizers(c)
        self._given_lr = c.learning_rate  # the rate the optimizer was made with; a change of it is applied (_set_lr)
        left = parameters_left_out(self.model, self.optimizer)
        if left and self.rank == 0:  # e.g. a classifier's configure_optimizers that returns its GPT's: the head
            warn_caller(f"the optimizer from {type(self.model).__name__}.configure_optimizers leaves out the "
                        f"trainable {first_names(left)}, so they never change (their gradients add up and "
                        "count in grad_norm_clip's norm): give it every trainable parameter, e.g. "
                        "configure_optimizers = GPT.configure_optimizers in the class, or freeze them with "
                        "requires_grad_(False)")
        self.scaler = torch.amp.GradScaler(self.device_type, enabled=c.dtype == 'float16')
        self.autocast = torch.autocast(self.device_type, dtype=DTYPES[c.dtype], enabled=c.dtype != 'float32')

    def _train_mode(self):
        """The model in train mode, as minGPT's run() puts it; a part kept in eval with trainable weights is named."""
        if not self.model.training:  # e.g. loaded for sampling; a submodule kept in eval() in a training model stays
            self.model.train()
        left = trainable_in_eval(self.model)
        if left and self.rank == 0:
            warn_caller(f"{first_names(left)} hold trainable parameters but are in eval mode, so they "
                        "train without their dropout: a GPT from from_pretrained or from_checkpoint comes in eval "
                        "mode (for sampling), and run() switches only a model given in eval mode as a whole. Call "
                        "model.train() on your whole module before run(), then put only frozen parts back in eval: "
                        "part.requires_grad_(False).eval()")

    def _optimization_step(self, x, y, batches):
        """One optimizer step over grad_accum_steps micro-batches, starting with (x, y); sets self.loss and returns
        the next micro-batch, loaded while the device computes."""
        c, A, model = self.config, self.config.grad_accum_steps, self._train_model
        self.lr = self._set_lr(self.iter_num)
        self._seq_len = x.size(-1)
        loss_sum = torch.zeros((), device=self.device)
        for micro_step in range(A):
            # DDP all-reduces the gradients in backward; on all but the last micro-step there is nothing to sync
            sync = self.world_size == 1 or micro_step == A - 1
            with nullcontext() if sync else model.no_sync():
                with self.autocast:
                    loss = loss_of(model(x, y), self.model)
                if self.rank == 0:  # the tokens read, not padding (-1, as in sentiment's rows), for rank 0's log:
                    self._log_tokens += (x >= 0).sum() * self.world_size  # its share times the ranks
                x, y = self._to_device(next(batches))
                self.scaler.scale(loss / A).backward()
            loss_sum += loss.detach() / A
        if c.grad_norm_clip:
            self.scaler.unscale_(self.optimizer)  # clip the true gradients, not the loss-scaled ones
            self.grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.grad_norm_clip)
        else:  # clipping measures it: without, none (not an earlier step's, which metrics.jsonl would repeat)
            self.grad_norm = None
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.world_size > 1:  # report the loss of the whole batch, not of this rank's share
            dist.all_reduce(loss_sum)
            loss_sum /= self.world_size
        self.loss = loss_sum
        self.steps_done = self.iter_num + 1
        return x, y

    def _after_step(self, t0):
        """After the step that began at t0: evaluation (every eval_interval steps, and at the end), callbacks, the
        step's line of metrics.jsonl (every log_interval steps; at an evaluation, the end, or where a callback added
        numbers) and the bar, then its files. A callback may stop() the run, so the end is asked again after them."""
        c = self.config
        evaluates = self.val_dataset is not None and bool(c.eval_interval)  # this run evaluates at all
        eval_now = evaluates and (self.iter_num % c.eval_interval == 0 or self._ends())
        record = None  # this step's line of metrics.jsonl, once measured
        if self.iter_num % c.log_interval == 0 or self._ends() or eval_now:
            record = self._measure(t0)
        else:
            self._log_seconds += time.perf_counter() - t0  # an unlogged step counts in the next line's tokens/s
        draws = eval_now or (self.rank == 0 and self.callbacks.get('on_batch_end'))  # random numbers (sampling)
        with rng_kept() if draws else nullcontext():  # evaluation and callbacks must not change training's
            if eval_now:
                self._evaluate_step(record)
            self.trigger_callbacks('on_batch_end')
            last = self._ends()  # again: a callback may have stopped the run
            if record is None and (last or self.metrics):  # its time was counted above
                record = self._measure(time.perf_counter())
            if last and evaluates and not eval_now:  # an early stop's step is evaluated, as a normal end's
                self._evaluate_step(record)
        if record is not None:
            self._folder.write_metrics(record, self.metrics)
            self.metrics.clear()
            if not self._bar.disable:
                self._bar.set_postfix(loss=f"{record['loss']:.4f}", tok_s=f"{record['tokens_per_s']:,.0f}")
        if last:  # an early stop ends the bar full at its step, not part way to max_iters
            self._bar.total = self.steps_done
        self._bar.update(1)
        self._save_files(last, evaluates)

    def _save_files(self, last, evaluates):
        """ckpt.pt every checkpoint_interval steps and at the end (with checkpoint_interval set); model.pt then too, and
        at the end, where the run does not evaluate."""
        c = self.config
        checkpoint = c.checkpoint_interval and (self.steps_done % c.checkpoint_interval == 0 or last)
        if checkpoint:  # taken by all ranks together: each gives its random state to rank 0's ckpt.pt
            self._write_ckpt_pt(None, self._rng_states(), wait=self.world_size > 1)
        if (checkpoint or last) and not evaluates:
            self._save_model_pt()  # no val loss to pick the best by (no val set, or evaluation off): the latest

    def _evaluate_step(self, record):
        """The val loss, into this step's record; model.pt when it is the best so far; then on_eval_end's callbacks."""
        self.val_loss = record['val_loss'] = self.evaluate(shared=True)  # every rank is here to score a share
        if self.val_loss < self.best_val_loss:
            self.best_val_loss = self.val_loss
            self._save_model_pt()  # model.pt holds the best model so far
        self.trigger_callbacks('on_eval_end')

    def _measure(self, t0):
        """This step's line of metrics.jsonl: loss, learning rate, gradient norm, tokens/s since the last line, MFU on
        a GPU. Under DDP only rank 0 writes the line and shows the bar; the other ranks' record holds the iteration
        alone: they count no tokens, and reading their numbers would make them wait for their device for nothing.
        runs.METRICS_KEYS lists the keys a line may hold."""
        if self.rank != 0:
            self._log_seconds = 0.0
            return {'iter': self.iter_num}
        # one read of the device for the three numbers, where an .item() each waited three times; float64 holds the
        # float32 loss and norm and the token count exactly (MPS has none: float32 there, exact to 2 ** 24 tokens)
        numbers = [self.loss, self._log_tokens] + ([self.grad_norm] if self.grad_norm is not None else [])
        dtype = torch.float32 if self.device_type == 'mps' else torch.float64
        loss, tokens, *grad_norm = torch.stack([n.to(dtype) for n in numbers]).tolist()
        self._log_seconds += time.perf_counter() - t0  # after the read, so the device's time to get there counts
        record = {'iter': self.iter_num, 'loss': loss, 'lr': self.lr}
        if grad_norm:
            record['grad_norm'] = grad_norm[0]
        record['tokens_per_s'] = tokens / self._log_seconds
        mfu = self._mfu(record['tokens_per_s'], self._seq_len)
        if mfu is not None:
            record['mfu'] = mfu
        self._log_seconds, self._log_tokens = 0.0, 0
        return record

    def _says_how_to_go_on(self, e):
        """Whether this rank says what is saved and how to go on, after e stopped the run."""
        if isinstance(e, SystemExit):  # sys.exit() in a callback ends the run on purpose: a note if it can go on
            return self._saved is not None
        # Ctrl-C reaches every rank, so rank 0 speaks for all. When the OOM killer ends a rank, rank 0 perhaps, the
        # others meet a lost connection or torchrun's SIGTERM, neither of which says what is saved: each says it
        return self.rank == 0 or not isinstance(e, KeyboardInterrupt) or isinstance(e, Terminated)

    def _finish(self):
        # what a checkpoint saved after run() holds, not the states a sample drew from since; under DDP every rank's,
        # so that rank 0 may save one alone (see save_checkpoint)
        self._rng_at_end = self._rng_states()
        if self.world_size > 1:
            dist.barrier()  # leave together: a rank tearing gloo down while another still talks to it can abort

    # ----------------------------------------------------------------------------------------------------------
    # checks before the run starts, and the checkpoint it resumes from (the work_dir's checks: runs.RunFolder)

    @classmethod
    def check_options(cls, c, world_size=None):
        """Refuse trainer options that cannot work, by name, and make whole floats ints (max_iters=1e4). run() checks
        them; a project calls this before it reads its data, so a typo is told at once. world_size: the processes
        (default: torchrun's WORLD_SIZE, else 1)."""
        world_size = world_size or int(os.environ.get('WORLD_SIZE', 1))
        cls.get_default_config().check_known(c, 'trainer')  # a key the trainer never reads (max_iter)
        if isinstance(c.resume, (str, os.PathLike)):  # a checkpoint's path; ~ is home
            c.resume = expand_home(os.fspath(c.resume), 'trainer.resume')
        if isinstance(c.work_dir, (str, os.PathLike)) and os.fspath(c.work_dir).startswith('~'):  # set in Python
            c.work_dir = expand_home(os.fspath(c.work_dir), 'trainer.work_dir')  # else a folder named ~ here
        words = ('true', 'false', 'none', 'yes', 'no', 'on', 'off')  # meant as True or False
        if isinstance(c.resume, str) and c.resume.lower() in words and not os.path.exists(c.resume):
            raise ConfigError(f"trainer.resume={c.resume!r} is read as a checkpoint's path; write True, False or "
                              "None, capitalised as in Python")
        if c.dtype not in DTYPES:
            raise ConfigError(f"trainer.dtype must be one of {', '.join(DTYPES)}, not {c.dtype!r}")
        if c.lr_schedule not in ('constant', 'cosine', 'inverse_sqrt'):
            raise ConfigError(f"trainer.lr_schedule must be 'constant', 'cosine' or 'inverse_sqrt', not "
                              f"{c.lr_schedule!r}")
        cls.check_batches(c, world_size)
        for key, valid in RANGES.items():
            if key not in BATCH_KEYS:  # checked just above
                setattr(c, key, check_range(f'trainer.{key}', getattr(c, key), **valid))
        if not isinstance(c.betas, (tuple, list)) or len(c.betas) != 2:
            raise ConfigError(f"trainer.betas={c.betas!r} must be Adam's pair (beta1, beta2), e.g. (0.9, 0.95)")
        for beta in c.betas:
            check_range('trainer.betas', beta, 0, 1, high_open=True)
        if c.lr_schedule == 'cosine' and c.lr_decay_iters is None and c.max_iters is None:
            raise ConfigError("trainer.lr_schedule='cosine' needs trainer.max_iters or trainer.lr_decay_iters")
        if c.lr_schedule == 'cosine' and c.lr_decay_iters is not None and c.lr_decay_iters <= c.warmup_iters:
            raise ConfigError(f"trainer.lr_decay_iters ({c.lr_decay_iters}) must be above warmup_iters "
                              f"({c.warmup_iters}): the cosine decays between them (else it drops to min_lr at once)")
        if c.lr_schedule == 'cosine' and c.min_lr is not None and c.min_lr > c.learning_rate:
            raise ConfigError(f"trainer.min_lr ({c.min_lr}) is above learning_rate ({c.learning_rate}): the cosine "
                              "decays from learning_rate down to min_lr; lower min_lr or raise learning_rate")
        if c.resume is True and c.overwrite:  # a path: RunFolder tells another folder's checkpoint from work_dir's
            raise ConfigError("trainer.resume=True continues the run in work_dir and trainer.overwrite=True replaces "
                              "it: give one of them")

    @staticmethod
    def check_batches(c, world_size):
        """Refuse the options by which run() and evaluate() cut their batches where a cut would be empty: a batch
        (evaluate: each of eval_iters) is split into grad_accum_steps micro-batches on each of world_size processes."""
        for key in BATCH_KEYS:
            setattr(c, key, check_range(f'trainer.{key}', getattr(c, key), **RANGES[key]))
        A = c.grad_accum_steps
        if c.batch_size % (A * world_size):
            raise ConfigError(f"trainer.batch_size ({c.batch_size}) must be a multiple of grad_accum_steps ({A}) "
                              f"times the number of processes ({world_size})")

    def _check_data_and_model(self):
        """Refuse what would fail later with torch's riddle, or train nothing: an empty dataset, one DataLoader's
        workers cannot take, a model with nothing to train or no optimizer, float16 weights under a gradient scaler.
        Warn (on rank 0) of what trains less than the user thinks: on_eval_end callbacks that no evaluation will call,
        16-bit weights, bfloat16 emulated on an older GPU."""
        c, main = self.config, self.rank == 0
        if self.val_dataset is None and self.callbacks.get('on_eval_end') and main:  # else silence
            warn_caller("an 'on_eval_end' callback was added, but this Trainer has no val_dataset, so nothing is "
                        "evaluated and the callback never runs: give Trainer(..., val_dataset=...), or add it for "
                        "'on_batch_end' (after every step; trainer.evaluate(dataset) scores a dataset there)")
        for name, dataset in (('train_dataset', self.train_dataset), ('val_dataset', self.val_dataset)):
            if dataset is not None and len(dataset) == 0:
                raise ValueError(f"{name} is empty (len 0): is its text shorter than block_size + 1 tokens?")
        check_dataset_for_workers(self.train_dataset, c.num_workers)  # else a worker dies without a reason
        if not any(p.requires_grad for p in self.model.parameters()):  # else backward fails with torch's riddle
            raise ValueError("every parameter of the model is frozen (requires_grad=False): there is nothing to train; "
                             "unfreeze the ones to fine-tune, e.g. model.transformer.h[-1].requires_grad_(True)")
        if not callable(getattr(self.model, 'configure_optimizers', None)):
            raise TypeError(f"{type(self.model).__name__} has no configure_optimizers(train_config), which the trainer "
                            "calls for its optimizer: add one, e.g. configure_optimizers = GPT.configure_optimizers "
                            "in the class (AdamW, weight decay on the 2-D weights)")
        low = {p.dtype for p in self.model.parameters() if p.requires_grad} & {torch.bfloat16, torch.float16}
        if torch.float16 in low and c.dtype == 'float16':  # else torch's 'Attempting to unscale FP16 gradients.'
            raise ValueError("the model's trainable parameters are float16, and trainer.dtype='float16' adds a "
                             "gradient scaler, which refuses float16 gradients (mixed precision trains float32 "
                             "weights): keep the weights in float32 and let autocast compute in float16, e.g. "
                             "GPT.from_pretrained(name) without a dtype, or model.float() before training")
        if low and main:  # e.g. GPT.from_pretrained(name, dtype=torch.bfloat16)
            name = str(min(low, key=str)).removeprefix('torch.')
            warn_caller(f"the model's trainable parameters are {name}, which rounds away an update much smaller than "
                        "its weight (in bfloat16 any below about 1/500 of it), so most of AdamW's steps change "
                        f"little or nothing: keep the weights in float32 and compute in {name} with "
                        f"trainer.dtype='{name}' (autocast), e.g. GPT.from_pretrained(name) without a dtype")
        if c.dtype == 'bfloat16' and main and bfloat16_emulated(self.device):
            warn_caller(f"trainer.dtype='bfloat16' on {torch.cuda.get_device_name(self.device)}, a GPU older than "
                        "Ampere (compute capability below 8.0), is emulated and slower than float32: use "
                        "trainer.dtype='float16' there (with a gradient scaler)")

    def _resume(self):
        """Load the checkpoint to continue from (ckpt.pt, or the path resume gives), once it is known to be this
        run's: the same model config, the same project identity (must_match), and iterations left to train."""
        c = self.config
        path = self._folder.checkpoint_to_resume()
        ckpt = load_checkpoint(path, map_location=self.device)
        missing = [k for k in ('optimizer', 'rng', 'sampler') if k not in ckpt]
        if missing:
            raise ValueError(f"{path} holds only weights (no {', '.join(missing)}), so training cannot continue from "
                             "it exactly; resume from the ckpt.pt that checkpoint_interval writes")
        check_same_run(ckpt, path, self.model, c, self.checkpoint_extras, self.must_match, self.device, self.rank)
        self._keep_seed_of(ckpt, path)
        # the prefixes a wrapper adds (DDP's 'module.', torch.compile's '_orig_mod.'), in a checkpoint other code wrote;
        # only down to this model's names, since a model of one's own may hold its GPT as self.module
        state = strip_prefixes(ckpt['model'], self.model.state_dict().keys())
        try:
            self.model.load_state_dict(state)
        except RuntimeError as e:
            raise ValueError(f"the model in {path} does not match this model (trained with other model settings?): "
                             f"{e}") from None
        # Adam's moments go on from the checkpoint; its groups' settings (weight_decay, betas...) give way to this
        # run's, as check_same_run's note promises (nanoGPT keeps the checkpoint's). The rate: below
        settings = [{k: v for k, v in group.items() if k not in ('params', 'lr')}
                    for group in self.optimizer.param_groups]
        self.optimizer.load_state_dict(ckpt['optimizer'])
        for group, ours in zip(self.optimizer.param_groups, settings):
            group.update(ours)
        # the rate saved goes on in a run without a schedule (a callback may be steering it) at the same learning_rate;
        # else this run's learning_rate (a resume may lower it; a schedule sets every step's anyway)
        saved = ckpt.get('trainer_config') or {}
        steered = saved.get('lr_schedule') == 'constant' and not saved.get('warmup_iters')
        if not steered or saved.get('learning_rate') != c.learning_rate:
            for group in self.optimizer.param_groups:
                group['lr'] = c.learning_rate
        if ckpt['scaler'] and self.scaler.is_enabled():
            self.scaler.load_state_dict(ckpt['scaler'])
        self.best_val_loss = ckpt.get('best_val_loss', float('inf'))
        self.sampler_seed, self.iter_num = ckpt['sampler']['seed'], ckpt['iter_num']
        self._saved = path, self.iter_num
        self.steps_done = self.iter_num
        if self.rank == 0:
            print(f"resuming from {path} at iteration {ckpt['iter_num']}")
            if len(ckpt['rng']) != self.world_size:  # the batches do not depend on it; each rank's dropout does
                print(f"note: the run of {path} had WORLD_SIZE={len(ckpt['rng'])} and this one has "
                      f"{self.world_size}: the batches go on in the same order, but the dropout draws differ, so "
                      "training does not continue exactly as it would have")
        return ckpt

    def _keep_seed_of(self, ckpt, path):
        """A resume goes on from the checkpoint's random states, not from a seed: the run's files keep its seed."""
        configs = ckpt.get('config') or {}, self.checkpoint_extras.get('config') or {}
        there, here = ((run.get('system') or {}).get('seed') for run in configs)
        if self.run_config is not None and None not in (there, here) and there != here:
            self.run_config.system.seed = self.checkpoint_extras['config']['system']['seed'] = there
            if self.rank == 0:
                print(f"note: {path}'s run was started with system.seed={there} and a resume goes on with its random "
                      f"numbers, so system.seed={here} changes nothing; the run's files keep {there}")

    # ----------------------------------------------------------------------------------------------------------
    # helpers of the loop

    def _init_distributed(self):
        """Join the process group torchrun set up (nccl between GPUs, gloo between CPU processes), unless joined.
        The group is left at exit, not after run(): one made again over torchrun's store can hang, so a second run()
        (the ablation's next variant) joins this one."""
        if self.world_size == 1 or dist.is_initialized():
            return
        if self.device_type == 'cuda':  # device_id binds the group to this process's GPU (barrier needs to know it)
            dist.init_process_group(backend='nccl', device_id=torch.device(self.device))
        else:
            dist.init_process_group(backend='gloo')
        atexit.register(leave_group)

    def _compiled_model(self):
        """The module evaluation calls, and the loop too (through DDP under torchrun): compiled (config.compile, or the
        torch.compile(model) given), else self.model. self.model stays the plain module, so callbacks and checkpoints
        see the ordinary parameter names (no '_orig_mod.' or 'module.' prefixes)."""
        if self._compiled is not None:
            return self._compiled
        return torch.compile(self.model) if self.config.compile else self.model

    def _to_device(self, batch):
        items = isinstance(batch, (tuple, list))
        if not (items and len(batch) == 2 and all(torch.is_tensor(t) for t in batch)):
            got = f"({', '.join(type(t).__name__ for t in batch)})" if items else type(batch).__name__
            raise TypeError(f"a dataset's item must be (x, y), a pair of tensors (or numpy arrays) of token ids and "
                            f"their targets; batched, its items gave {got}: make __getitem__ return (x, y)")
        # the DataLoader pinned the batch on CUDA, so the copy runs in the background; elsewhere (MPS) the batch's
        # memory may be freed before a background copy has read it
        return [t.to(self.device, non_blocking=self.device_type == 'cuda') for t in batch]

    def get_lr(self, it):
        """Learning rate at iteration it: linear warmup to learning_rate, then constant, cosine decay to min_lr, or
        the inverse square root of the iteration."""
        c = self.config
        if it < c.warmup_iters:
            return c.learning_rate * (it + 1) / (c.warmup_iters + 1)
        if c.lr_schedule == 'constant':
            return c.learning_rate
        if c.lr_schedule == 'inverse_sqrt':
            return c.learning_rate * math.sqrt((c.warmup_iters + 1) / (it + 1))
        min_lr = c.learning_rate / 10 if c.min_lr is None else c.min_lr
        decay_iters = c.lr_decay_iters if c.lr_decay_iters is not None else c.max_iters
        progress = min(1.0, (it - c.warmup_iters) / max(1, decay_iters - c.warmup_iters))
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (c.learning_rate - min_lr)

    def _lrs(self):
        return None if self.optimizer is None else [group['lr'] for group in self.optimizer.param_groups]

    def _set_lr(self, it):
        c = self.config
        if c.warmup_iters or c.lr_schedule != 'constant':
            if self.lr is not None and any(group['lr'] != self.lr for group in self.optimizer.param_groups):
                warn_caller(f"a callback set the learning rate, which lr_schedule={c.lr_schedule!r} with "
                            f"warmup_iters={c.warmup_iters} sets at every step: to steer it from a callback, give "
                            "lr_schedule='constant' and warmup_iters=0")
            rate = self.get_lr(it)
        elif c.learning_rate != self._given_lr:  # a callback set trainer.config.learning_rate: taken up
            rate = self._given_lr = c.learning_rate
        else:  # leave it alone: a callback may be steering param_groups itself
            return self.optimizer.param_groups[0]['lr']
        for group in self.optimizer.param_groups:
            group['lr'] = rate
        return rate

    def _mfu(self, tokens_per_s, seq_len):
        """Model FLOPs utilisation on a GPU of known peak: achieved / peak FLOP/s (None elsewhere)."""
        if self.device_type != 'cuda':
            return None
        peak = peak_flops(self.device)
        per_token = flops_per_token(self.model, seq_len)
        if peak is None or per_token is None:
            return None
        return per_token * tokens_per_s / (peak * self.world_size)

    @torch.no_grad()
    def evaluate(self, dataset=None, shared=False):
        """Mean loss over eval_iters batches of dataset (default: the val set). The windows come from a fixed seed,
        the same at every evaluation, so successive val losses compare fairly. Under DDP with shared=True (the loop's
        evaluations, which every rank runs) each rank scores a share and the sums are added up across the ranks; a
        call of your own (in a callback, which runs on rank 0 only, or before or after run(), perhaps on one rank)
        scores them all in this process, as waiting for ranks that are not calling it would hang or crash the run."""
        c = self.config
        dataset = self.val_dataset if dataset is None else dataset
        if dataset is None:  # else "object of type 'NoneType' has no len()"
            raise ValueError("trainer.evaluate() scores the val set, and this Trainer was given none: give the dataset "
                             "to score, trainer.evaluate(dataset), or Trainer(..., val_dataset=...)")
        self.check_batches(c, self.world_size)  # called before run(): else an empty micro-batch's IndexError
        ix = np.random.default_rng(0).integers(len(dataset), size=c.eval_iters * c.batch_size)
        model = self._eval_model
        dtype = torch.float32 if self.device_type == 'mps' else torch.float64  # MPS has no float64
        total = torch.zeros(2, dtype=dtype, device=self.device)  # sum of losses, number of windows
        collective = self.world_size > 1 and shared
        ranks = [self.rank] if collective else range(self.world_size)  # whose shares of ix this process scores
        with eval_mode(self.model):
            for rank in ranks:
                for chunk in np.array_split(ix[rank::self.world_size], max(1, c.eval_iters * c.grad_accum_steps)):
                    x, y = self._to_device(default_collate([dataset[i] for i in chunk.tolist()]))
                    with self.autocast:
                        loss = loss_of(model(x, y), self.model)
                    total[0] += loss.to(dtype) * len(chunk)
                    total[1] += len(chunk)
        if collective:
            dist.all_reduce(total)
        return (total[0] / total[1]).item()

    # ----------------------------------------------------------------------------------------------------------
    # checkpoints: model.pt (_save_model_pt), ckpt.pt (_write_ckpt_pt: the loop's in _save_files, save_checkpoint yours)

    def _model_state(self):
        """What GPT.from_checkpoint needs: the weights, the model's config, and the project's extras."""
        state = {**self.checkpoint_extras, **model_state(self.model), 'iter_num': self.steps_done}
        if self.val_loss is not None:
            state['val_loss'] = self.val_loss
        return state

    def _save_model_pt(self):  # rank 0's: the weights are the same on every rank
        if self.rank == 0 and self.config.work_dir is not None:
            save_checkpoint(self._model_state(), os.path.join(self.config.work_dir, 'model.pt'))

    def save_checkpoint(self, path=None):
        """Everything needed to continue exactly: weights, optimizer, scaler, iteration, RNG states of every rank
        and the sampler's position; rank 0 writes, atomically. After run() it saves the random states run() ended
        with, as the loop's last checkpoint does, so a sample drawn in between does not change the resumed run. Under
        DDP it waits for no other rank, so after run() rank 0 may call it alone (if trainer.rank == 0: ...), as every
        rank may. In a callback under DDP it is refused: the run is not over, and the other ranks are training on
        without giving their random states."""
        if self.world_size > 1 and self._in_callbacks:  # else a checkpoint with the others' states of another step
            raise RuntimeError("trainer.save_checkpoint() was called from a callback under DDP: it saves every "
                               "rank's random state, and callbacks run on rank 0 only while the others train on. Give "
                               "trainer.checkpoint_interval (the loop's checkpoints are taken by all ranks together), "
                               "call it after run(), or save the weights alone in the callback: "
                               "torch.save(trainer.model.state_dict(), path)")
        if self.world_size > 1 and self._rng_at_end is None:
            raise RuntimeError("trainer.save_checkpoint() under DDP saves the random states every rank ended run() "
                               "with, and no run() has ended here (none has run, or an error stopped it): go on from "
                               "the last checkpoint the loop saved (trainer.checkpoint_interval)")
        if self.optimizer is None:  # else "'NoneType' object has no attribute 'state_dict'"
            raise RuntimeError("trainer.save_checkpoint() saves the optimizer's state with the weights, and run() "
                               "makes the optimizer: call it after run(), or save the weights alone: "
                               "torch.save(trainer.model.state_dict(), path)")
        if path is None and self.config.work_dir is None:  # asked for: not skipped, as the loop's are
            raise ValueError("trainer.save_checkpoint() writes work_dir/ckpt.pt, and trainer.work_dir is None: give "
                             "the file to write, trainer.save_checkpoint('ckpt.pt'), or set trainer.config.work_dir")
        self._write_ckpt_pt(path, self._rng_at_end or [get_rng_state()])  # no run() ended (one process): now's

    def _rng_states(self):
        """Every rank's random states, gathered by all ranks together (in one process: its own)."""
        if self.world_size == 1:
            return [get_rng_state()]
        states = [None] * self.world_size
        dist.all_gather_object(states, get_rng_state())
        return states

    def _write_ckpt_pt(self, path, rng, wait=False):
        """ckpt.pt's state with the ranks' random states rng, written by rank 0 to path (default work_dir/ckpt.pt).
        wait: every rank waits for the write, so that none says a checkpoint is saved (if rank 0 dies) before it is."""
        if path is None and self.config.work_dir is None:
            return
        path = path or os.path.join(self.config.work_dir, 'ckpt.pt')
        if self.rank == 0:
            save_checkpoint({
                **self._model_state(),
                'optimizer': self.optimizer.state_dict(),
                'scaler': self.scaler.state_dict(),
                'trainer_config': self.config.to_dict(),
                'rng': rng,
                'sampler': {'seed': self.sampler_seed, 'iter': self.steps_done},
                'best_val_loss': self.best_val_loss,
                'trainable': trainable_names(self.model),
                'platform': platform_record(self.device),
            }, path)
        if wait:
            dist.barrier()
        self._saved = path, self.steps_done  # on every rank: if rank 0 dies, the others say what is saved


def loss_of(output, model):
    """The loss in model(x, y)'s output, which minGPT's contract makes (logits, loss), the loss one number. Anything
    else is named: the loop met the loss alone as 'iteration over a 0-d tensor', a loss per row or (loss, logits) as
    'grad can be implicitly created only for scalar outputs', a dict as a str divided by an int."""
    loss = output[1] if isinstance(output, (tuple, list)) and len(output) == 2 else None
    if torch.is_tensor(loss) and loss.dim() == 0 and loss.is_floating_point():
        return loss

    def described(value):
        if isinstance(value, (tuple, list)):
            return f"({', '.join(described(v) for v in value)})"
        if torch.is_tensor(value):
            return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)}"
        return type(value).__name__
    raise TypeError(f"{type(model).__name__}'s forward(x, y) returned {described(output)}; the trainer needs (logits, "
                    "loss), the loss one number (a 0-dim float tensor: the batch's mean), as GPT's forward returns: "
                    "e.g. return logits, F.cross_entropy(logits, y)")


def parameters_left_out(model, optimizer):
    """The names of model's trainable parameters that optimizer, what configure_optimizers returned, does not hold.
    Anything but an optimizer is refused: a configure_optimizers without its return gave None, which the loop met as
    'NoneType' object has no attribute 'param_groups'."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"{type(model).__name__}.configure_optimizers(train_config) returned "
                        f"{type(optimizer).__name__}, not a torch.optim optimizer: return the one it makes, e.g. "
                        "return torch.optim.AdamW(self.parameters(), lr=train_config.learning_rate)")
    held = {id(p) for group in optimizer.param_groups for p in group['params']}
    return [name for name, p in model.named_parameters() if p.requires_grad and id(p) not in held]


def trainable_in_eval(model):
    """The names of the modules in eval mode that hold trainable parameters of their own, inside a part of model kept
    in eval mode whose dropout (p > 0) eval mode switches off. A frozen part kept in eval on purpose is not named (its
    parameters do not train), nor a part without dropout (the two modes train it alike), such as a distilled student
    beside its frozen teacher."""
    names, parts = [], {}  # parts: the outermost modules in eval mode, and whether dropout is switched off in each
    for name, m in model.named_modules():  # a module comes before the modules inside it
        if m.training:
            continue
        part = next((p for p in parts if name.startswith(f'{p}.')), name)
        if part == name:
            parts[name] = any(isinstance(d, torch.nn.Dropout) and d.p > 0 and not d.training for d in m.modules())
        if parts[part] and any(p.requires_grad for p in m.parameters(recurse=False)):
            names.append(name)
    return names


def first_names(names):
    """'a, b, c and 7 more': a long list of modules or parameters, named in a line."""
    return ', '.join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else '')


def leave_group():
    """At exit: the process group the trainer joined, unless the script has left it already."""
    if dist.is_initialized():
        dist.destroy_process_group()


def check_callback(onevent, callback):
    """A callback that cannot be called is refused now, not at the end of the first step. One for an event the loop
    never triggers would never run: say so (a subclass may trigger its own)."""
    if not callable(callback):
        raise TypeError(f"a callback is a function of the trainer, e.g. def on_batch_end(trainer): ..., but "
                        f"{callback!r:.60} cannot be called: give the event's name, then the function itself (not "
                        "what calling it returns)")
    if onevent not in EVENTS:
        warn_caller(f"Trainer triggers {' and '.join(map(repr, EVENTS))}, not {onevent!r}: this callback runs "
                    f"only if your own code calls trigger_callbacks({onevent!r})")


def warn_if_added_again(added, onevent, callback):
    """add_callback appends, as minGPT's does, so a notebook cell run again adds its callback again, and it runs twice
    per step (or its old definition with its new one): warn where the callback, or a function of its name defined
    anew, is already there. A lambda or a function made inside another (a loop's, a factory's) may well be another."""
    def name(f):  # a lambda's '<lambda>', a nested function's 'outer.<locals>.f': no name of its own
        named = isinstance(f, types.FunctionType) and '<' not in f.__qualname__
        return (f.__module__, f.__qualname__) if named else None
    if callback in added or name(callback) and name(callback) in map(name, added):
        warn_caller(f"{getattr(callback, '__name__', 'this callback')} is added to {onevent!r} again (a notebook cell "
                    "run twice?): the one added before runs too, at every event. To keep one, "
                    f"trainer.set_callback({onevent!r}, f) replaces the event's callbacks, or remove the earlier one "
                    f"from trainer.callbacks[{onevent!r}]")


class StepSampler:
    """The batch of optimizer step i is a pure function of (seed, i): windows drawn uniformly with replacement, as
    minGPT's sampler. So a resumed run needs only i, prefetching workers cannot drift, and DDP ranks split exactly
    the batch one process would draw. Yields this rank's micro-batches (lists of indices), accum per step."""

    def __init__(self, n, batch_size, seed, start, rank=0, world_size=1, accum=1):
        self.n, self.batch_size, self.seed, self.start = n, batch_size, seed, start
        self.rank, self.world_size, self.accum = rank, world_size, accum

    def __iter__(self):
        for step in itertools.count(self.start):
            ix = np.random.default_rng([self.seed, step]).integers(self.n, size=self.batch_size)
            yield from ix.reshape(self.world_size, self.accum, -1)[self.rank].tolist()


def flops_per_token(model, seq_len):
    """Training FLOPs per token by PaLM's formula (Chowdhery et al. 2022, appendix B): 6N for the matmuls with the
    N weights (2 forward, 4 backward) plus 12 L H Q T for attention over T positions with L layers of H heads of size
    Q. N leaves out the position embeddings, a lookup. None for a model without GPT's config, and for an
    encoder-decoder (seq2seq's Transformer), whose three attentions per layer over two lengths it does not count."""
    c = getattr(model, 'config', None)
    encoder_decoder = isinstance(getattr(model, 'encoder', None), torch.nn.Module)
    if encoder_decoder or not all(hasattr(c, k) for k in ('n_layer', 'n_head', 'n_embd')):
        return None
    n = sum(p.numel() for p in model.parameters())
    wpe = getattr(getattr(model, 'transformer', None), 'wpe', None)
    if wpe is not None:  # a learned table has weights; the sinusoidal one has none
        n -= sum(p.numel() for p in wpe.parameters())
    return 6 * n + 12 * c.n_layer * c.n_head * (c.n_embd // c.n_head) * seq_len


# dense bf16 tensor-core peak FLOP/s from NVIDIA's datasheets, the denominator of MFU; the first name that matches
PEAK_FLOPS = {'H100 PCIe': 756e12, 'H100 NVL': 835e12, 'H100': 989e12, 'H200 NVL': 835e12, 'H200': 989e12,
              'A100': 312e12}


def peak_flops(device):
    """Dense bf16 peak FLOP/s of a GPU we know, else None."""
    name = torch.cuda.get_device_name(device)
    return next((flops for key, flops in PEAK_FLOPS.items() if key in name), None)
