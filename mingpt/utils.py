"""Small helpers every piece shares: the config tree (CfgNode), option ranges, seeding and the random generators'
states, the device, run files, atomic writes, printing above a progress bar (LinesAboveBar), and the command-line
wrapper every project runs under (run_cli). Checkpoint files are checkpoint.py's; the model's config and input
checks, checks.py's."""
import ast
import errno
import json
import math
import multiprocessing
import os
import pickle
import random
import re
import shlex
import shutil
import signal
import socket
import sys
import threading
import traceback
import types
import warnings
from contextlib import contextmanager, redirect_stdout
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows, whose locks are msvcrt's
    fcntl = None
    import msvcrt

import numpy as np
import torch


class ConfigError(ValueError):
    """A config key or value the user gave is not valid; the message says which and how to fix it."""


def set_seed(seed):
    seed = check_range('seed', seed, low=0, high=2 ** 32 - 1, integer=True)  # numpy's range
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


@contextmanager
def rng_kept():
    """Run a block on a copy of every random number generator's state: whatever it draws (dropout in evaluation,
    a sampling callback), the generators are as before when it ends."""
    state = get_rng_state()
    try:
        yield
    finally:
        set_rng_state(state)


def get_rng_state():
    """Python, numpy, torch, CUDA and MPS generator states, as plain types and tensors (loadable with weights_only)."""
    np_state = np.random.get_state()
    return {'python': random.getstate(),
            'numpy': [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
            'torch': torch.get_rng_state(),
            'cuda': torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            'mps': torch.mps.get_rng_state() if torch.backends.mps.is_available() else None}


def set_rng_state(state):
    random.setstate(state['python'])
    name, key, *rest = state['numpy']
    np.random.set_state((name, np.array(key, dtype=np.uint32), *rest))
    torch.set_rng_state(state['torch'].cpu())
    if state['cuda'] and len(state['cuda']) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([s.cpu() for s in state['cuda']])
    if state.get('mps') is not None and torch.backends.mps.is_available():  # older checkpoints have no 'mps'
        torch.mps.set_rng_state(state['mps'].cpu())


@torch.no_grad()
def sample(model, x, steps, temperature=1.0, sample=False, top_k=None):
    """minGPT's generation function from before model.generate, kept because its scripts and notebooks (2020-2022:
    play_char, adder, chargpt, generate.ipynb) call it: continue x (B, T) by `steps` tokens, greedy unless `sample`.
    As minGPT's, it puts the model in eval mode and crops a context longer than block_size to its last block_size
    tokens (model.generate refuses such a prompt); the result starts with all of x."""
    model.eval()
    out = model.generate(x[:, -model.block_size:], steps, temperature=temperature, do_sample=sample, top_k=top_k)
    return torch.cat([x[:, :-model.block_size], out], dim=1)


def python_scalar(value):
    """A numpy or 0-d torch scalar (e.g. data.max() + 1, which minGPT took as a size) as the Python number, which
    config.json and checkpoints can hold; anything else as it is."""
    if isinstance(value, (np.generic, torch.Tensor)) and value.ndim == 0:
        return value.item()
    return value


def check_range(key, value, low=None, high=None, low_open=False, high_open=False, none_ok=False, integer=False):
    """Return value if it lies in the range (low/high None: unbounded; *_open: the bound itself excluded), else
    raise a ConfigError naming the option, its value and the range, e.g. "trainer.batch_size=0 is out of range:
    it must be an integer >= 1". An unbounded side holds every finite number, not inf (a learning rate of inf
    trains to nan): a side where inf means something says so with high=math.inf (or low=-math.inf). none_ok: None
    is allowed too (it means 'off' or 'unlimited'). A numpy or 0-d torch scalar is returned as a Python number, a
    whole number as an int where integer is set."""
    if value is None and none_ok:
        return value
    value = python_scalar(value)
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)
    whole = number and (not integer or float(value).is_integer())
    infinite = number and math.isinf(value) and (high if value > 0 else low) is None  # on an unbounded side
    if (whole and not infinite and (low is None or (value > low if low_open else value >= low))
            and (high is None or (value < high if high_open else value <= high))):
        return int(value) if integer else value  # 64.0 as 64, which range() and numpy's sizes need
    if not number:
        problem = 'is a string, not a number' if isinstance(value, str) else 'is not a number'
    else:
        problem = 'is not finite' if infinite else 'is out of range' if whole else 'is not a whole number'
    # '<= inf' rules nothing out: not named ('< inf' is, finite)
    parts = [f"{'>' if low_open else '>='} {low}" if low is not None and (low_open or low != -math.inf) else '',
             f"{'<' if high_open else '<='} {high}" if high is not None and (high_open or high != math.inf) else '']
    rule = ' '.join(['an integer' if integer else 'a number', ' and '.join(p for p in parts if p)]).strip()
    raise ConfigError(f"{key}={value!r} {problem}: it must be {'None or ' if none_ok else ''}{rule}")


def set_from_data(config, name, fix="use the data's options (--data.*, listed by --help) instead", source='the data',
                  data=None, **values):
    """Set the options the data decides (a model's vocab_size and block_size) in config, the `name` section of a
    project's config. One given on the command line with another value is refused, not silently replaced; the
    message says what decides it (`source`) and ends with `fix`, or, where `data` (the data's section) has an option
    of the same name that sets it, names that option with the value given."""
    for key, value in values.items():
        given = getattr(config, key, None)
        if given is not None and given != value:
            way = f"give --data.{key}={given!r} instead" if hasattr(data, key) else fix
            raise ConfigError(f"{name}.{key}={given!r} cannot be chosen here: {source} sets it (to {value!r}); leave "
                              f"it out, and {way}")
        setattr(config, key, value)


def refuse_ignored(name, config, defaults, keys, why):
    """Refuse the options `keys` of config, the `name` section of a project's config, given a value other than their
    default (in defaults): the project would ignore them. `why` says why, and what to give instead."""
    given = [f"{name}.{k}={getattr(config, k)!r}" for k in keys if getattr(config, k) != getattr(defaults, k)]
    if given:
        raise ConfigError(f"{', '.join(given)} would do nothing here: {why}")


def need_work_dir(work_dir, why):
    """Refuse work_dir None (--system.work_dir=None) in a project that must write there; why: what it writes."""
    if work_dir is None:
        raise ConfigError(f"system.work_dir=None, but {why}: give a folder (--system.work_dir=DIR)")


def bfloat16_emulated(device):
    """Whether bfloat16 math on device is emulated: a CUDA GPU older than Ampere (a V100, Colab's T4) has no
    bfloat16 units."""
    return torch.device(device).type == 'cuda' and torch.cuda.get_device_capability(device)[0] < 8


def resolve_device(device='auto', option='device'):
    """The device to run on: 'auto' picks cuda, then mps (Apple GPUs), then cpu; anything else is kept as given,
    once torch can use it. option: the option it came from, named in a refusal (e.g. 'trainer.device')."""
    if device != 'auto':
        try:
            torch.device(device)
        except (RuntimeError, TypeError):  # torch's message lists a dozen backends (TypeError: None, a float)
            raise ConfigError(f"{option} {device!r} is not a device name: choose 'auto', 'cpu', 'cuda', 'cuda:1' "
                              "or 'mps'") from None
    kind = str(device).split(':')[0]
    available = {'cuda': torch.cuda.is_available, 'mps': torch.backends.mps.is_available}
    if kind in available and not available[kind]():
        raise ConfigError(f"{option} {device!r} is not available to this torch ({torch.__version__}, no {kind} "
                          "support or no such GPU): choose 'auto' (the best one here) or 'cpu'")
    gpus = torch.cuda.device_count() if kind == 'cuda' else 0
    if kind == 'cuda' and (torch.device(device).index or 0) >= gpus:  # else CUDA's 'invalid device ordinal', later
        raise ConfigError(f"{option} {device!r} is not one of this machine's {gpus} GPUs (cuda:0 to cuda:{gpus - 1}, "
                          "as CUDA_VISIBLE_DEVICES numbers them): choose one of them, or 'auto'")
    if device != 'auto':
        return device
    if torch.cuda.is_available():
        return 'cuda'
    if torch.backends.mps.is_available():
        return 'mps'
    return 'cpu'


def plural(n, word):
    """word as a message counts n of it: 'iteration' for 1, 'iterations' for 0 or 2."""
    return word if n == 1 else word + 's'


@contextmanager
def modes_kept(model):
    """Run a block that may switch model or its parts between train() and eval(): when it ends, even after Ctrl-C,
    every module is back in its own mode, a submodule kept in eval on purpose (a frozen probe) too, which
    model.train() would wake."""
    modes = [(module, module.training) for module in model.modules()]
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


@contextmanager
def matmul_precision(precision, backends=('cuda', 'mkldnn')):
    """float32 matmuls at `precision` within the block ('tf32': on TF32 tensor cores, 10-bit mantissas; 'ieee': full
    float32) on each backend (cuda: GPUs; mkldnn: CPUs), each one's setting of before back after it, however the block
    ends: a notebook's later float32 computations keep their precision. Through torch's per-backend settings, as the
    process-wide get_float32_matmul_precision raises once a user has set one of those; torch before 2.9 has only it."""
    chosen = [getattr(getattr(torch.backends, name), 'matmul', None) for name in backends]
    per_backend = all(hasattr(backend, 'fp32_precision') for backend in chosen)
    if per_backend:
        before = [backend.fp32_precision for backend in chosen]
        for backend in chosen:
            backend.fp32_precision = precision
    else:
        before = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision({'tf32': 'high', 'ieee': 'highest'}[precision])
    try:
        yield
    finally:
        if per_backend:
            for backend, setting in zip(chosen, before):
                backend.fp32_precision = setting
        else:
            torch.set_float32_matmul_precision(before)


@contextmanager
def eval_mode(model):
    """Within it, model is in eval mode (no dropout); after it, each module is in the mode it was in: a model loaded
    to be evaluated stays in eval mode, a model in training goes on training (its frozen probe still in eval)."""
    with modes_kept(model):
        model.eval()
        yield model


class _MainFinder(pickle.Pickler):
    """A pickler that notes each class or function that the pickle names as __main__'s."""

    def __init__(self, file):
        super().__init__(file)
        self.found = []

    def persistent_id(self, obj):  # pickle asks this of every object it meets
        if isinstance(obj, (type, types.FunctionType)) and obj.__module__ == '__main__':
            self.found.append(obj.__qualname__)
        return None  # None: pickle it as usual

    def reducer_override(self, obj):
        # the numbers of an array always pickle: skip them, rather than copy a dataset held in memory
        if isinstance(obj, torch.Tensor) or (isinstance(obj, np.ndarray) and obj.dtype != object):
            return int, ()
        return NotImplemented


def check_dataset_for_workers(dataset, num_workers):
    """Refuse, before training, a dataset that DataLoader workers could not receive. Where they start as a new Python
    ('spawn': macOS, Windows; 'forkserver': Linux from Python 3.14), each gets the dataset pickled and imports its
    class, and any function it holds, by module and name: one defined inside a function, a lambda, or one defined in
    a notebook (its __main__ has no file to import) failed there as 'DataLoader worker exited unexpectedly'."""
    method = multiprocessing.get_start_method()
    if num_workers == 0 or method == 'fork':  # a forked worker has the dataset already
        return
    workers = f"the DataLoader workers (trainer.num_workers={num_workers}), which start as a new Python ('{method}')"
    fix = "or set trainer.num_workers=0 (the batches are then cut in this process)"
    with open(os.devnull, 'wb') as nowhere:  # only pickle's walk over the objects is wanted, not the bytes
        finder = _MainFinder(nowhere)
        try:
            finder.dump(dataset)
        except Exception as e:  # pickle's own errors, and an object's refusal (an open file's TypeError)
            raise ValueError(f"the dataset cannot be sent to {workers} and receive it pickled: {type(e).__name__}: "
                             f"{e}. Define its class and the functions it holds at the top level of a module, not "
                             f"inside a function or as a lambda, {fix}") from None
    script = getattr(sys.modules['__main__'], '__file__', None)  # a notebook has none, python - has '<stdin>'
    if finder.found and not (script and os.path.isfile(script)):
        raise ValueError(f"the dataset's {', '.join(dict.fromkeys(finder.found))} is defined in a notebook (or python "
                         f"-c, or stdin), which {workers} cannot import: move it into a .py file and import it from "
                         f"there, {fix}")


@torch.compiler.disable  # under torch.compile, run as plain Python: dynamo cannot trace a walk of the frames
def warn_caller(message):
    """warnings.warn at the line of the user's code that called into mingpt (trainer.run(), model(idx, targets),
    plot.plot...): the first frame outside mingpt and torch (whose nn.Module call, no_grad and torch.compile lie
    between), which the user can change, however deep the warning is. Frames are told by their module's name, so a
    module run as the script (python -m mingpt.bpe) is the caller."""
    frame, level = sys._getframe(1), 2  # stacklevel 2 is warn_caller's caller
    while frame.f_back is not None and frame.f_globals.get('__name__', '').partition('.')[0] in ('mingpt', 'torch'):
        frame, level = frame.f_back, level + 1
    warning = UserWarning(message)  # marked, not a subclass: -W and Python's form ('UserWarning: ...') stay
    warning.mingpt = True  # written for the user: run_cli prints it without the file and line (_format_warning)
    warnings.warn(warning, stacklevel=level)


def other_rank():
    """True in a torchrun process other than the first (RANK > 0): one process prints and writes, the others
    would only repeat it."""
    return int(os.environ.get('RANK', 0)) != 0


# what args.txt's command sets again: where the data was found, and the CPU's threads (the last digits depend on them)
RECORDED_VARIABLES = ('MINGPT_DATA_DIR', 'OMP_NUM_THREADS')


_started_as = []  # the scripts of the started_as blocks the process is in (nested: the innermost last)


@contextmanager
def started_as(script, args):
    """Within it, a run is recorded (args.txt, the lock's note) as started by the command `python script args`, which
    redoes it alone: a project that runs another's main (the ablation runs chargpt's) records each run's own command,
    also where it was itself started from a notebook, whose kernel has no script to name."""
    argv = sys.argv
    sys.argv = [os.fspath(script), *args]
    _started_as.append(script)
    try:
        yield
    finally:
        sys.argv = argv
        _started_as.pop()


def setup_logging(config, work_dir=None, resumed_at=None):
    """Record in work_dir (default config.system.work_dir) how this run was started (args.txt, a command to paste
    into a shell, with the RECORDED_VARIABLES that were set, or a note that it was started from Python, outside a
    started_as block) and its full config (config.json). A run resumed at iteration resumed_at adds its command under
    the earlier ones, so that args.txt records the whole run.
    The Trainer calls it once the run is known to start, so a run refused at start-up changes no file."""
    if other_rank():
        return
    work_dir = work_dir or config.system.work_dir
    script = getattr(sys.modules['__main__'], '__file__', None)  # a notebook kernel has none, python - '<stdin>'
    if not _started_as and not (script and os.path.isfile(script)):  # sys.argv does not start the run again
        saved = os.path.abspath(os.path.join(work_dir, 'config.json'))  # found from the notebook's folder too
        command = ("# started from Python (a notebook, python -c or -), not by a command: config.json holds its "
                   f"options; main(mingpt.utils.args_of(json.load(open({saved!r}))) + ['--system.work_dir=DIR']) "
                   "redoes it\n")
    else:  # from the folder it ran in, where its relative paths hold, with the variables that were set
        settings = [f"{name}={shlex.quote(os.environ[name])}" for name in RECORDED_VARIABLES if name in os.environ]
        command = f"cd {shlex.quote(os.getcwd())} && {' '.join([*settings, shlex.join([*launcher(), *sys.argv])])}\n"
        if int(os.environ.get('GROUP_WORLD_SIZE', 1)) > 1:
            command += ("# on each machine, with the rendezvous options it was started with (--rdzv_id, "
                        "--rdzv_endpoint)\n")
    earlier = os.path.join(work_dir, 'args.txt')
    # a script of minGPT's shape calls this before its Trainer refuses or resumes a run that work_dir holds: keep
    # that run's commands, unless this run replaces it (trainer.overwrite, whose Trainer removes its checkpoints; a
    # resume with it goes on from another folder's checkpoint, so the run it replaces is none of its history)
    replaces = getattr(getattr(config, 'trainer', None), 'overwrite', False)
    held = any(os.path.exists(os.path.join(work_dir, name)) for name in ('ckpt.pt', 'model.pt'))
    # the resume alone would not say how the run began; never through a link (a run folder got from elsewhere may
    # hold one), which would copy its target, say ~/.ssh/id_rsa, into this run's record
    if not replaces and (resumed_at is not None or held) and os.path.exists(earlier) and not os.path.islink(earlier):
        then = f"resumed at iteration {resumed_at}" if resumed_at is not None else "then, with the run above held here"
        # an older mingpt's args.txt has no final newline: the note would go on the old command's line
        kept = Path(earlier).read_text(encoding='utf-8').rstrip('\n')
        command = f"{kept}\n# {then}:\n{command}"
    text = {'args.txt': command, 'config.json': json.dumps(config.to_dict(), indent=4)}
    for name, content in text.items():
        write_text_atomically(os.path.join(work_dir, name), content)


def launcher():
    """The words that start this run again: python, or torchrun with as many machines and processes (torchrun tells
    its processes those, not its rendezvous options)."""
    if int(os.environ.get('WORLD_SIZE', 1)) == 1:
        return ['python']
    nodes = os.environ.get('GROUP_WORLD_SIZE', '1')
    return ['torchrun', '--standalone' if nodes == '1' else f'--nnodes={nodes}',
            f"--nproc_per_node={os.environ.get('LOCAL_WORLD_SIZE', os.environ['WORLD_SIZE'])}"]


class Terminated(KeyboardInterrupt):
    """SIGTERM (kill, a job scheduler's stop) or SIGHUP (the terminal closed) under run_cli, raised where Ctrl-C
    raises KeyboardInterrupt, so that all stop alike: files being written are removed or left whole, and a Trainer
    says which checkpoint to go on from. `signum`: the signal."""

    def __init__(self, signum=signal.SIGTERM):
        super().__init__(signal.Signals(signum).name)  # a --debug traceback says 'Terminated: SIGHUP'
        self.signum = signum


def escape_what_stdout_cannot_encode():
    """A Windows file or pipe takes only its code page's characters (cp1252): print the others as escapes, as stderr
    does, rather than raise a codec error that stops the run (at a sample in training, in generated text)."""
    if sys.stdout is not None and sys.stdout is sys.__stdout__:  # the process's own (not a notebook's or pytest's)
        sys.stdout.reconfigure(errors='backslashreplace')


class LinesAboveBar:
    """Within it, the lines printed on stdout and stderr (a callback's prints and warnings) go above the progress bar
    instead of onto its line (tqdm.write would not clear a bar on stderr while stdout is redirected). A terminal (or a
    notebook, whose output also takes '\\r') has the bar's line cleared and drawn again below each line; a file or a
    pipe keeps every character, so there the bar's line is ended once and drawn again when the callback returns (else
    a log had each line after a bar's text)."""

    def __init__(self, bar):
        self.bar, self.bar_ended = bar, False
        self.in_log = bar.fp in (sys.__stderr__, sys.__stdout__) and not bar.fp.isatty()  # a notebook's: no __stderr__

    def __enter__(self):
        self.streams = sys.stdout, sys.stderr
        self.writers = sys.stdout, sys.stderr = LineWriter(self, sys.stdout), LineWriter(self, sys.stderr)

    def __exit__(self, *exc):
        sys.stdout, sys.stderr = self.streams
        for writer in self.writers:
            writer.end()
        if self.bar_ended:
            self.bar.refresh()

    def show(self, out, text, redraw):
        """Write text to out, a stream of the two, where the bar was; redraw: then draw the bar below it."""
        if not self.in_log:
            self.bar.clear()
            out.write(text)
            if redraw:
                self.bar.refresh()
            return
        if not self.bar_ended:
            self.bar.fp.write('\n')
            self.bar_ended = True
        out.write(text)
        out.flush()  # in order with the other stream's lines, where both go to one log


class LineWriter:
    """stdout or stderr within LinesAboveBar: its whole lines, and a line's start when flushed, go above the bar."""

    def __init__(self, above, out):
        self.above, self.out, self.pending = above, out, ''

    def write(self, text):
        self.pending += text
        if '\n' in self.pending:
            lines, _, self.pending = self.pending.rpartition('\n')
            self.above.show(self.out, lines + '\n', redraw=True)
        return len(text)

    def flush(self):  # e.g. input()'s prompt, which has no newline: shown now, not when the callback returns
        if self.pending:
            self.above.show(self.out, self.pending, redraw=False)  # the bar would draw over the line's start
            self.pending = ''
        self.out.flush()

    def end(self):
        if self.pending:  # the start of a line, printed with end=''
            self.out.write(self.pending)
        self.out.flush()

    def __getattr__(self, name):  # isatty, encoding...: the stream's own
        return getattr(self.out, name)


def _terminate(signum, frame):
    for sig in STOP_SIGNALS:  # one stop is enough: a second (torchrun forwards the terminal's) would cut the cleanup
        signal.signal(sig, signal.SIG_IGN)  # short and leave a temporary file; run_cli puts the handlers back
    if signum != signal.SIGTERM:  # SIGHUP: a terminal that has closed fails every write to it (EIO), our notes too
        for fd in (1, 2):
            try:
                os.write(fd, b'')
            except OSError:  # what is printed from now on goes nowhere
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, fd)
                os.close(devnull)
    raise Terminated(signum)


# kill or a job scheduler's stop; the terminal closed (without a handler the process dies where it is, and a file
# being written leaves its temporary behind). Windows has no SIGHUP.
STOP_SIGNALS = (signal.SIGTERM,) + ((signal.SIGHUP,) if hasattr(signal, 'SIGHUP') else ())


def run_cli(main, argv=None):
    """Run a project's main(argv) as a command: a user error (a bad option, a missing file, a refused resume)
    prints `error: <message>` on stderr and exits with status 2; Ctrl-C exits with 130, SIGTERM with 143 and SIGHUP
    (the terminal closed; not under nohup) with 129, without a traceback; a warning prints as `warning: <message>`,
    without the line of source that Python adds for a developer, and, where it is mingpt's (written for the user),
    without the file and line too; a closed pipe (| head) ends it quietly; a character that stdout cannot encode
    prints as a \\u escape. Under torchrun only rank 0 prints on stdout: every process runs the script, and the
    others would repeat it; their errors and warnings still reach stderr. `--debug` on the command line (or
    MINGPT_DEBUG=1 in the environment) shows the full traceback too, Python's form of a warning, and every rank's
    stdout."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = '--debug' in argv or os.environ.get('MINGPT_DEBUG', '') not in ('', '0')
    argv = [a for a in argv if a != '--debug']
    escape_what_stdout_cannot_encode()
    main_thread = threading.current_thread() is threading.main_thread()  # the only one that may set a handler
    # a signal ignored is left so: nohup starts a run with SIGHUP ignored, to outlive its terminal
    previous = {sig: signal.signal(sig, _terminate) for sig in STOP_SIGNALS
                if main_thread and signal.getsignal(sig) != signal.SIG_IGN}
    quiet = other_rank() and not debug
    # the format, not showwarning, is replaced: a caller's catch_warnings(record=True) (pytest.warns) still records
    formatwarning = warnings.formatwarning
    if not debug:
        warnings.formatwarning = _format_warning
    try:
        with open(os.devnull, 'w') as devnull, redirect_stdout(devnull if quiet else sys.stdout):
            return main(argv)
    except BrokenPipeError:  # the reader of our output has gone (e.g. | head): nothing to report or print
        if debug:
            traceback.print_exc()
        if sys.stdout is sys.__stdout__:  # the process's own stdout (not a notebook's or pytest's stand-in)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # else Python's flush of stdout at exit fails again
            os.close(devnull)
        raise SystemExit(141) from None  # the shell's code for SIGPIPE
    except (ValueError, OSError, RuntimeError) as e:  # ConfigError and UnicodeDecodeError are ValueErrors
        if debug:
            traceback.print_exc()
        print(f"error: {e}", file=sys.stderr)
        if not debug:
            print("(run with --debug, or MINGPT_DEBUG=1, for the traceback)", file=sys.stderr)
        # from None: IPython 8's %run (%run projects/chargpt.py in a notebook) fails with an AttributeError of its
        # own on an exit that chains the error it handles (ipython/ipython#13796), and hides our message under it
        raise SystemExit(2) from None
    except KeyboardInterrupt as e:
        if debug:
            traceback.print_exc()
        terminated = isinstance(e, Terminated)
        print(f"{'terminated' if terminated else 'interrupted'} (every file written is whole)", file=sys.stderr)
        # the shell's codes, 128 + the signal (SIGINT's is 2; a Trainer said how to go on); from None as above
        raise SystemExit(128 + (e.signum if terminated else signal.SIGINT)) from None
    finally:
        warnings.formatwarning = formatwarning
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def _format_warning(message, category, filename, lineno, line=None):
    """mingpt's own warnings (warn_caller's) as `warning: <message>`; another's (torch's, numpy's) with the file
    and line it names, without which 'TypedStorage is deprecated' does not say what to change."""
    if getattr(message, 'mingpt', False):
        return f"warning: {message}\n"
    return f"warning: {message} ({filename}:{lineno})\n"


def make_folder(folder):
    """os.makedirs(folder, exist_ok=True), but naming the file (or broken link) that stands where a folder of the
    path should be, where makedirs said '[Errno 17] File exists: out' of a file named out; or the drive that is not
    there (Windows), or the folder in which none can be made."""
    folder = Path(os.path.abspath(folder))
    try:
        os.makedirs(folder, exist_ok=True)
    except (FileExistsError, NotADirectoryError, FileNotFoundError) as e:
        blocking = next((p for p in (folder, *folder.parents) if os.path.lexists(p)), None)
        if blocking is None:  # on Windows, a drive or a network share that is not there
            raise FileNotFoundError(f"cannot make the folder {folder}: {folder.anchor} does not exist (a drive not "
                                    "plugged in, or a network share not reachable?); choose a folder on a drive that "
                                    "is there") from None
        if blocking.is_dir():  # a folder in which none can be made, such as Linux's /proc/1
            raise FileNotFoundError(f"cannot make the folder {folder} in {blocking} ({e.strerror}); choose a folder "
                                    "that can be written") from None
        what = 'a file' if blocking.exists() else 'a broken link'
        raise NotADirectoryError(f"cannot make the folder {folder}: {blocking} is {what}, not a folder") from None


def atomic_write(path, write):
    """Call write(tmp) to fill a temporary file beside path, fsync it, then rename it over path: a crash at any
    moment leaves the old file or the new one, never half of one."""
    path = os.fspath(path)
    if os.path.isdir(path) or path.endswith(('/', os.sep)):  # else an error about the temporary file's name
        raise IsADirectoryError(f"{path} is a folder, not a file: give the path of the file to write, e.g. "
                                f"{os.path.join(path, 'NAME')}")
    make_folder(os.path.dirname(os.path.abspath(path)))
    tmp = f"{path}.tmp{os.getpid()}"
    if os.path.lexists(tmp):  # a killed write's, or a link planted there: writing through it would change its target
        os.remove(tmp)
    try:
        write(tmp)
        with open(tmp, 'rb+') as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_text_atomically(path, text):
    """atomic_write of text, in UTF-8 (not the locale's encoding: Windows' cp1252 cannot hold every folder name or
    option); a write that fails (a full disk) raises an OSError that names path and keeps the file there before."""
    try:
        atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding='utf-8'))
    except OSError as e:
        raise write_failed(path, e) from e


def json_object(path, what):
    """The JSON object in the file at path, {} if there is no such file (a config beside a model or a vocabulary); a
    file that holds no JSON object is refused, saying to save `what` again."""
    try:
        value = json.loads(Path(path).read_text(encoding='utf-8')) if Path(path).is_file() else {}
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError included; RecursionError: nested too deep
        value = e
    if not isinstance(value, dict):
        raise ValueError(f"cannot read {path} as a JSON object ({value!r:.60}); delete it or save {what} again")
    return value


def write_failed(path, error, what='', kept=None):
    """The OSError to raise where writing path failed with error (a full disk, a quota): it names `what` and the
    file, the cause and the space left there, what is kept (by default: the file there before, which an atomic write
    leaves as it was) and what to do. A write's own error, '[Errno 28] No space left on device', names no file."""
    folder = os.path.dirname(os.path.abspath(path))
    free = f"; {shutil.disk_usage(folder).free:,} bytes are free there" if os.path.isdir(folder) else ''
    if kept is None:
        kept = "the one there before is unchanged" if os.path.exists(path) else "no file was left there"
    return OSError(f"could not write {what}{path} ({error}{free}); {kept}. If the disk is full, free some space or "
                   "write elsewhere")


def remove_stale_temps(directory):
    """Delete the temporary files of atomic_write calls killed before their rename (`<name>.tmp<pid>`): they are
    never read, and at 124M parameters a checkpoint's is 1.5 GB. Returns the names removed."""
    if not os.path.isdir(directory):
        return []
    stale = [n for n in os.listdir(directory) if re.fullmatch(r'.+\.tmp\d+', n)]
    for name in stale:
        os.remove(os.path.join(directory, name))
    return stale


LOCK_NAME = '.lock'  # in a work_dir: held by the run training there


def lock_folder(folder):
    """Lock folder/.lock (made if missing) for this process, so that a second run in the folder can be refused rather
    than overwrite the first one's ckpt.pt and metrics.jsonl, and write in it who holds it (for lock_holder). Returns
    the open file, which holds the lock until it is closed (read-only where the file is another user's); None where
    another process holds it (or another open file of this one). The system lets go of a lock when its process ends,
    killed or crashed too, so a run that died never blocks the next; the file itself stays."""
    path = os.path.join(folder, LOCK_NAME)
    try:
        # unbuffered: a note written in it (a full disk) fails at once, not when the lock is let go
        f = open(os.open(path, os.O_RDWR | os.O_CREAT, 0o666), 'r+b', buffering=0)  # 0o666 less the umask
    except PermissionError:  # another user's, in a folder both may write in: a lock needs only reading
        f = open(path, 'rb', buffering=0)
    try:
        if fcntl is not None:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            msvcrt.locking(f.fileno(), msvcrt.LK_NBLCK, 1)
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES, errno.EDEADLK):  # held (Linux and macOS say EAGAIN, Windows EACCES)
            f.close()
            return None
        # a file system without locks (some network shares): the run goes on, unguarded
        warn_caller(f"{folder} cannot be locked ({e.strerror}), so a second run started in it at the same time "
                    "would not be refused: start one run per folder")
    if f.writable():  # who holds it now: a killed holder's note is replaced
        try:
            f.truncate(0)
            f.write(f"process {os.getpid()} on {socket.gethostname()}: {shlex.join(sys.argv)}".encode())
        except OSError:  # a full disk: the lock holds without its note, and the run's first write says what is wrong
            pass
    return f


def lock_holder(folder):
    """What the run holding folder's lock wrote in it (its process id, machine and command), or '' if unreadable."""
    try:
        return Path(folder, LOCK_NAME).read_text(encoding='utf-8').strip()
    except (OSError, UnicodeDecodeError):  # Windows keeps a locked file from being read
        return ''


def args_of(config):
    """The options that give every key of config (a CfgNode, or a run's config.json loaded as a dict) its value, in
    the form a project's main(argv) reads: a run started from a notebook, whose args.txt holds no command, is redone
    with main(args_of(json.load(open('out/chargpt/config.json'))) + ['--system.work_dir=out/again']). Each value reads
    back as it was: text as typed, unless it would read as another type (the text '1984', not the number, is quoted),
    anything else as a Python literal (inf and nan as Python writes them); a value no literal holds (a tuple with an
    inf in it, an object) is refused by name. A dict-valued option is one literal where config is a CfgNode; in a
    config.json it looks like a section and is given key by key, which merge_from_args sets in the option's dict:
    keys the run's dict lacks then keep the project's default (and JSON's keys are text). Two trainer options are
    left out: a work_dir the trainer took from system.work_dir, to follow it, and resume=True, which a resumed run's
    config.json (the latest command's) holds and which would look for the run in the new work_dir: the run is redone
    from its start (a resume from a checkpoint's path is kept: the run started there)."""
    tree = config.to_dict() if isinstance(config, CfgNode) else config
    options = set(config._leaf_paths()) if isinstance(config, CfgNode) else set()  # the dicts that are no section
    trainer, system = tree.get('trainer'), tree.get('system')
    if isinstance(trainer, dict):
        same_dir = isinstance(system, dict) and trainer.get('work_dir') == system.get('work_dir')
        tree = {**tree, 'trainer': {k: v for k, v in trainer.items()
                                    if not (k == 'work_dir' and same_dir or k == 'resume' and v is True)}}
    args = []
    for key, value in _settings(tree, options):
        text = value if isinstance(value, str) and _parse_value(value) == value else repr(value)
        if repr(_parse_value(text)) != repr(value):  # repr: nan equals no value, itself included
            raise ConfigError(f"{key}={value!r} cannot be written as an option that reads back as it is (no Python "
                              "literal holds it): give it a number, text, True/False/None, or a tuple, list or dict "
                              "of them")
        args.append(f'--{key}={text}')
    return args


def _settings(tree, options, prefix=''):
    """('section.key', value) for each setting of tree (nested dicts); a dict whose path is in options is a value."""
    for key, value in tree.items():
        if isinstance(value, dict) and prefix + key not in options:
            yield from _settings(value, options, f'{prefix}{key}.')
        else:
            yield prefix + key, value


def _parse_value(raw):
    """A command-line value as a Python literal (3, 1e-4, (0.9, 0.95), True, None) or as a float that Python writes
    as no literal (inf, -inf, nan), else the string itself."""
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return float(raw) if raw in ('inf', '-inf', 'nan') else raw


# options that name a file or folder, and options that hold text: a value typed for them stays text even where it
# reads as a number (a file named 1984), and a path's leading ~ is the home directory (the shell expands ~ only at
# the start of a word, not after --key=)
PATH_KEYS = ('path', 'work_dir', 'checkpoint', 'init', 'tokenizer', 'sst2_dir', 'out', 'prompt_file', 'model')
PROSE_KEYS = ('text', 'prompt')  # free text; None, where the default is text, is no text
TEXT_KEYS = PATH_KEYS + PROSE_KEYS + ('model_type',)


def expand_home(path, key):
    """path (a string) with a leading ~ as the home folder, as a shell expands it (which it does not after --key=).
    Where the home folder is not known, a ConfigError naming key, rather than a folder named ~ in the current one
    (which `rm -rf ~` would then seem to clean up)."""
    path = os.path.expanduser(path)
    if path == '~' or path.startswith(('~/', '~' + os.sep)):
        raise ConfigError(f"{key}={path!r} starts with ~, the home folder, which is not known here (HOME is unset and "
                          "this user has no entry in the password file): give the full path, or set HOME")
    return path


def _check_type(key, old, new, raw=None):
    """Return `new` converted to the type of the default `old`, or raise a ConfigError that says what went wrong.
    A default of None accepts anything (but see TEXT_KEYS); an int is fine where a float is expected; strings and
    numbers may be None."""
    new = python_scalar(new)
    leaf = key.rsplit('.', 1)[-1]
    if (raw == 'True' and (leaf in TEXT_KEYS or not isinstance(old, (bool, type(None))))  # a bare --key (True)
            or raw == '' and leaf in PATH_KEYS):  # e.g. --data.path=$FILE with FILE unset
        raise ConfigError(f"--{key} needs a value: --{key}=...")
    if raw is not None and new is not None and leaf in TEXT_KEYS and isinstance(old, (str, type(None))):
        text = new if isinstance(new, str) else raw  # a quoted string literal is read as before; a number as typed
        return expand_home(text, f'--{key}') if leaf in PATH_KEYS else text
    if raw == 'None' and leaf in PROSE_KEYS and isinstance(old, str):  # no text: the project says what it
        return ''  # needs (chargpt: "give some text"), where None crashed it (a TypeError deep in the tokenizer)
    if old is None:
        return new
    if isinstance(old, str):
        if new is None or isinstance(new, str):
            return new
        if raw is not None:  # '--trainer.device=123' means the string '123'
            return raw
    elif isinstance(old, bool):
        if isinstance(new, bool):
            return new
    elif isinstance(old, (int, float)):
        if new is None:  # 'off' or 'no limit' where the option's range allows it (its range check says if not)
            return new
        if isinstance(new, (int, float)) and not isinstance(new, bool):
            if isinstance(old, int) and isinstance(new, float) and not new.is_integer():
                pass  # an int option given 2.5: fall through to the error
            else:
                return type(old)(new)
    elif isinstance(old, (tuple, list)):
        if isinstance(new, (tuple, list)):
            return type(old)(new)
        # one item, --seeds=5, or several, --variants=a,b, of the default's items' type (any, if it has none)
        if not isinstance(new, (bool, type(None))) and all(type(o) is type(new) for o in old):
            items = [s.strip() for s in new.split(',')] if isinstance(new, str) else [new]
            return type(old)(items)
    else:
        return new
    raise ConfigError(f"config key '{key}' expects a value of type {type(old).__name__} "
                      f"(default {old!r}) but got {new!r} of type {type(new).__name__}")


def _with_key(option, keys, value):
    """A copy of the dict option with option[keys[0]][keys[1]]... set to value (--x.option.k1.k2=value); the dict
    it replaces is left as it is, as another config may hold it."""
    option = dict(option) if isinstance(option, dict) else {}
    option[keys[0]] = value if len(keys) == 1 else _with_key(option.get(keys[0]), keys[1:], value)
    return option


class CfgNode:
    """A tree of settings with attribute access, e.g. config.trainer.batch_size, as in yacs / minGPT."""

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)

    def __str__(self):
        return self._str_helper(0)

    def __repr__(self):  # what a notebook cell ending with a config shows: the tree, not <CfgNode object at 0x...>
        return str(self) or 'CfgNode()'

    def _str_helper(self, indent):
        parts = []
        for k, v in self.__dict__.items():
            if isinstance(v, CfgNode):
                parts.append(f"{k}:\n" + v._str_helper(indent + 1))
            else:
                parts.append(f"{k}: {v!r}\n")
        return ''.join(' ' * 4 * indent + p for p in parts)

    def to_dict(self):
        """The tree as nested dicts of what config.json and checkpoints can hold: a path as its string and a numpy
        scalar as the Python number, which json.dumps and torch.load(weights_only=True) refuse."""
        def plain(v):
            if isinstance(v, (list, tuple)):
                return type(v)(map(plain, v))
            return os.fspath(v) if isinstance(v, os.PathLike) else python_scalar(v)
        return {k: v.to_dict() if isinstance(v, CfgNode) else plain(v) for k, v in self.__dict__.items()}

    def _child(self, key, path):
        if key not in self.__dict__:
            valid = ', '.join(sorted(self.__dict__)) or '(none)'
            raise ConfigError(f"unknown config key '{path}'; valid keys here are: {valid}")
        return self.__dict__[key]

    def check_known(self, config, section):
        """Refuse a key of config that these defaults lack (a typo such as max_iter, which nothing would read),
        naming it as section.key and listing the valid keys."""
        for key in vars(config):
            self._child(key, f'{section}.{key}')

    def fill_missing(self, config):
        """Give config each of these defaults that it lacks (a config written for minGPT, or by hand)."""
        for key, value in self.to_dict().items():
            if not hasattr(config, key):
                setattr(config, key, value)

    def merge_from_dict(self, d, _prefix=''):
        """Update from a (possibly nested) dict; unknown keys and wrong types raise a ConfigError."""
        for k, v in d.items():
            path = _prefix + k
            old = self._child(k, path)
            if isinstance(old, CfgNode):
                if not isinstance(v, dict):
                    raise ConfigError(f"config key '{path}' is a section; give a dict, not {v!r}")
                old.merge_from_dict(v, path + '.')
            else:
                self.__dict__[k] = _check_type(path, old, v)

    def _leaf_paths(self, prefix=''):
        for k, v in self.__dict__.items():
            if isinstance(v, CfgNode):
                yield from v._leaf_paths(prefix + k + '.')
            else:
                yield prefix + k

    def normalize_args(self, args):
        """'--key value' and a bare '--flag' (meaning True) become '--key=value'; a key without its section
        stands for the one setting of that name ('--prompt' for '--sample.prompt') when only one has it."""
        by_leaf = {}
        for path in self._leaf_paths():
            by_leaf.setdefault(path.rsplit('.', 1)[-1], []).append(path)
        out, i = [], 0
        while i < len(args):
            arg = args[i]
            i += 1
            if not arg.startswith('--') or arg == '--help':
                out.append(arg)
                continue
            key, eq, value = arg[2:].partition('=')
            if not key:
                raise ConfigError(f"cannot read argument {arg!r}: options are --section.key=value (--help lists them)")
            if not eq:
                if i < len(args) and not args[i].startswith('--'):
                    value, i = args[i], i + 1
                else:
                    value = 'True'
            if '.' not in key and len(by_leaf.get(key, [])) > 1:
                raise ConfigError(f"'--{key}' could be any of {', '.join('--' + p for p in sorted(by_leaf[key]))}: "
                                  "give the one you mean")
            if '.' not in key and len(by_leaf.get(key, [])) == 1:
                key = by_leaf[key][0]
            out.append(f'--{key}={value}')
        return out

    def merge_from_args(self, args, usage=None):
        """Apply overrides like ['--trainer.batch_size=32', '--model.model_type=gpt-nano']. Values are Python
        literals where they parse as one (and inf, -inf, nan), else strings. Also accepted: '--key value', a bare
        '--flag' for True, a key without its section where only one section has it, and one key of a dict-valued
        option (--section.option.key=value). '--help' (or '-h'), wherever it stands, prints `usage` (a project's
        docstring), then the whole config with its defaults, and exits."""
        # main('--x=1') or main(['--x', 1]) from a notebook: else read one character at a time, or an AttributeError
        if isinstance(args, str) or not all(isinstance(a, str) for a in args):
            raise ConfigError(f"options are a list of strings, such as ['--trainer.max_iters=50'], not {args!r}: "
                              "split a command line with shlex.split, and write a number as text")
        if '--help' in args or '-h' in args:
            if usage:
                print(usage.strip() + '\n')
            print("Options (override any with --section.key=value; --debug shows tracebacks):\n")
            print(self)
            sys.exit(0)
        for arg in self.normalize_args(args):
            if not arg.startswith('--'):
                example = next(self._leaf_paths(), 'section.key')  # this config's own: not every project has a trainer
                raise ConfigError(f"cannot read argument '{arg}': expected the form --section.key=value "
                                  f"(e.g. --{example}=...); --help lists every option")
            path, raw = arg[2:].split('=', 1)
            *sections, leaf = path.split('.')
            node = self
            for i, s in enumerate(sections):
                where = '.'.join(sections[:i + 1])
                if isinstance(node._child(s, where), dict):  # a dict-valued option, given key by key (a config.json's)
                    node.__dict__[s] = _with_key(node.__dict__[s], [*sections[i + 1:], leaf], _parse_value(raw))
                    break
                node = node._child(s, where)
                if not isinstance(node, CfgNode):
                    raise ConfigError(f"config key '{where}' is a value, not a section")
            else:  # node is the section that holds leaf
                old = node._child(leaf, path)
                if isinstance(old, CfgNode):
                    raise ConfigError(f"config key '{path}' is a section; set one of its keys, e.g. --{path}.<key>=...")
                node.__dict__[leaf] = _check_type(path, old, _parse_value(raw), raw)
