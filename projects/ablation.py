"""
An ablation anyone can rerun: trains projects/chargpt.py once per variant of the model, GPT-2's design against one
switch each (post-norm "Add & Norm", ReLU, sinusoidal positions), with the same seed, data and iterations, then
writes a val-loss table (work_dir/results.md, beside the ablation's args.txt and config.json) and the loss curves of
every run (work_dir/loss.png):

    python projects/ablation.py                    # 4 runs: gpt-nano, block 64, batch 32, 500 iterations
    python projects/ablation.py --model.model_type=gpt-micro --data.block_size=128 --trainer.max_iters=2000
    python projects/ablation.py --variants=gpt2,post-norm --seeds=1,2,3

Every option of chargpt applies to all runs (--help lists them). Each run lives in work_dir/<variant>/ (with
several seeds, work_dir/<variant>-seed<N>/), with the chargpt command that redoes it alone: printed, and in its
args.txt.
--trainer.resume=True continues an interrupted ablation with the options it started with (more iterations may be
given): finished runs are read, the others resumed or started. One seed per variant tells little about a difference
smaller than the spread between seeds: give several to measure it.
Needs matplotlib for the plot: pip install -e ".[plot]".
"""
import os
import shlex
import sys
import time

import torch

from mingpt.checkpoint import load_checkpoint
from mingpt.data import corpus_files, fetch, sha256_of
from mingpt.model import GPT
from mingpt.plot import loss_figure, new_figure, read_metrics, save
from mingpt.runs import changed_settings
from mingpt.utils import (CfgNode as CN, ConfigError, check_range, need_work_dir, run_cli, setup_logging, started_as,
                          write_text_atomically)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the projects are scripts, not a package
import chargpt  # noqa: E402

# each variant: the model options it changes from GPT-2's (learned positions, pre-norm, GELU)
VARIANTS = {
    'gpt2': {},
    'post-norm': {'model.norm': 'post'},
    'relu': {'model.activation': 'relu'},
    'sinusoidal': {'model.pos_embd': 'sinusoidal'},
}
# what a resumed ablation may give its runs anew: where their files are, how a run goes on (not what it learns), the
# samples it prints (callbacks change no training), and more iterations (checked on its own)
MAY_CHANGE_ON_RESUME = ('system.work_dir', 'data.path', 'trainer.resume', 'trainer.overwrite', 'trainer.device',
                        'trainer.num_workers', 'trainer.compile', 'trainer.quiet', 'trainer.log_interval',
                        'trainer.checkpoint_interval', 'trainer.max_iters', 'sample.prompt', 'sample.length')


def get_config():
    C = chargpt.get_config()
    C.system.work_dir = './out/ablation'
    # small enough for a few minutes on 2 CPU cores; scale any of them up from the command line
    C.model.model_type = 'gpt-nano'
    C.data.block_size = 64
    C.trainer.batch_size = 32
    C.trainer.max_iters = 500
    C.trainer.eval_interval = C.trainer.checkpoint_interval = 50  # a killed ablation resumes from there
    C.sample.length = 0  # no samples while training: the table is the result
    C.ablation = CN()
    C.ablation.variants = tuple(VARIANTS)
    C.ablation.seeds = (3407,)
    return C


def flat(config, prefix=''):
    """{'section.key': value} for every setting of a config tree."""
    out = {}
    for key, value in config.to_dict().items() if isinstance(config, CN) else config.items():
        out.update(flat(value, f'{prefix}{key}.') if isinstance(value, dict) else {prefix + key: value})
    return out


def chargpt_args(settings):
    """The command-line options that turn chargpt's defaults into settings ({'section.key': value})."""
    defaults = flat(chargpt.get_config())
    return [f'--{key}={value}' for key, value in settings.items() if key in defaults and defaults[key] != value]


def runs(config):
    """(variant, name, chargpt options) of every variant and seed, in the order they run."""
    A = config.ablation
    unknown = [v for v in A.variants if v not in VARIANTS]
    if unknown or not A.variants:
        what = f"has no variant {', '.join(map(repr, unknown))}" if unknown else "is empty"
        raise ConfigError(f"ablation.variants {what}: name some of {', '.join(VARIANTS)}, e.g. --variants=gpt2,relu")
    if not A.seeds:
        raise ConfigError("ablation.seeds is empty: give at least one seed, e.g. --seeds=3407")
    if len(set(A.variants)) < len(A.variants) or len(set(A.seeds)) < len(A.seeds):
        raise ConfigError(f"ablation.variants {A.variants!r} and seeds {A.seeds!r} must not repeat one")
    # checked now: chargpt would refuse a bad seed only after training the runs before it (and 2.0 is taken as 2)
    seeds = [check_range('ablation.seeds', seed, 0, 2 ** 32 - 1, integer=True) for seed in A.seeds]
    if config.trainer.work_dir is not None:  # every run would share it, and the second would refuse the first's
        raise ConfigError("the ablation puts each run in system.work_dir/<variant>: give --system.work_dir=DIR, "
                          "not --trainer.work_dir")
    need_work_dir(config.system.work_dir, "the ablation puts each run in system.work_dir/<variant>")
    if config.trainer.resume and config.trainer.overwrite:  # chargpt's refusal, which a finished run never reaches
        raise ConfigError("trainer.resume=True continues the ablation's runs and trainer.overwrite=True replaces them: "
                          "give one of them")
    if config.system.seed != get_config().system.seed:
        raise ConfigError(f"the ablation trains once per seed of ablation.seeds {A.seeds!r}: give "
                          f"--seeds={config.system.seed} instead of --system.seed")
    if config.sample.checkpoint:
        raise ConfigError("the ablation trains; to sample a run's model, use chargpt: python projects/chargpt.py "
                          "--sample.checkpoint=WORK_DIR/<variant>/model.pt")
    if config.system.init:  # chargpt's, which would refuse each variant's model options
        raise ConfigError(f"system.init={config.system.init!r}: the ablation trains a new model of each variant; to go "
                          "on from a trained one, use chargpt: python projects/chargpt.py --system.init=...")
    for variant in A.variants:
        for seed in seeds:
            name = variant if len(seeds) == 1 else f'{variant}-seed{seed}'
            work_dir = os.path.join(config.system.work_dir, name)
            # a resumed ablation continues the runs that have a checkpoint and starts the others again (a run
            # killed before its first checkpoint has nothing to resume)
            checkpointed = os.path.exists(os.path.join(work_dir, 'ckpt.pt'))
            resume = bool(config.trainer.resume) and checkpointed
            restart = bool(config.trainer.resume) and not checkpointed and os.path.isdir(work_dir)
            settings = {**flat(config), **VARIANTS[variant], 'system.seed': seed, 'system.work_dir': work_dir,
                        'trainer.resume': resume or None, 'trainer.overwrite': restart or config.trainer.overwrite}
            if resume:
                check_resumable(work_dir, settings)
            yield variant, name, chargpt_args(settings)


def check_resumable(work_dir, settings):
    """Refuse to go on with the run in work_dir, or to read its result back, if it was trained with other settings
    than this ablation gives it ({'section.key': value}): the table would report its val loss under their header."""
    ckpt = load_checkpoint(os.path.join(work_dir, 'ckpt.pt'), mmap=True)
    # a setting None here is one the run fills in: the model's size from model_type, vocab_size and block_size from
    # the data, trainer.work_dir from system.work_dir
    given = {key: value for key, value in settings.items() if value is not None}
    trained = flat(ckpt.get('config') or {})
    diff = changed_settings(trained, given, skip=MAY_CHANGE_ON_RESUME)
    there, here = trained.get('data.path'), settings['data.path']
    if there != here and not same_text(there, here):
        diff.append(f"data.path={there!r} there, {here!r} here: another text")
    if diff:
        raise ConfigError(f"cannot resume the ablation: {work_dir} was trained with other settings ({'; '.join(diff)});"
                          f" resume with the options it was trained with (its chargpt command is in "
                          f"{os.path.join(work_dir, 'args.txt')}), or start anew in another --system.work_dir")
    held, max_iters = ckpt['iter_num'], settings['trainer.max_iters']
    if max_iters is not None and held > max_iters:
        raise ConfigError(f"cannot resume the ablation: {work_dir} has trained {held} iterations, more than "
                          f"trainer.max_iters={max_iters}; give --trainer.max_iters={held} or more")


def same_text(trained, given):
    """Whether data.path `given` names the text a run was trained on at `trained` (None: Tiny Shakespeare), byte for
    byte: a text may move, but a finished run read back on another would be reported under its name. A text no longer
    found where it was has moved: the run's own resume still refuses another vocabulary."""
    def digest(path):
        try:
            found = fetch('tinyshakespeare/input.txt', path=path, folder=True)  # as chargpt does, not downloading
            return [sha256_of(f) for f in corpus_files(found)]
        except FileNotFoundError:
            if path and path == given:  # mistyped: refused as chargpt refuses it, not called another text
                raise
            return None
    before = digest(trained)
    return before is None or before == digest(given)


def run_chargpt(args):
    """chargpt.main(args), recorded as if chargpt.py were started alone, so that the run's args.txt is the chargpt
    command that redoes it, not the ablation's (nor, in a notebook, a note that it was started from Python)."""
    with started_as(chargpt.__file__, args):
        chargpt.main(args)


def finished(work_dir, max_iters):
    """True if work_dir holds a run that trained max_iters iterations (a resumed ablation skips it)."""
    path = os.path.join(work_dir, 'ckpt.pt')
    return os.path.exists(path) and load_checkpoint(path, mmap=True)['iter_num'] >= max_iters


def result_of(work_dir, seconds):
    """What the table reports of a finished run: its last val loss, its size and its time (None: not timed)."""
    val = [r['val_loss'] for r in read_metrics(os.path.join(work_dir, 'metrics.jsonl')) if 'val_loss' in r]
    model, _ = GPT.from_checkpoint(os.path.join(work_dir, 'model.pt'))
    return {'val_loss': val[-1], 'params': model.num_parameters(), 'seconds': seconds}


def signed(difference):
    """The difference to 4 decimals with its sign, and none where it rounds to zero: not -0.0000, which reads as a
    loss lower than GPT-2's."""
    return f"{difference:+.4f}" if round(difference, 4) else '0.0000'


def table(config, results):
    """The Markdown table: one row per variant, its val loss averaged over the seeds (range in brackets)."""
    C, T = config, config.trainer
    lines = [f"chargpt, {C.model.model_type}, block {C.data.block_size}, batch {T.batch_size}, {T.max_iters} "
             f"iterations, seeds {', '.join(map(str, C.ablation.seeds))}; val loss: mean of {T.eval_iters} batches "
             f"after the last iteration, nats per token (torch {torch.__version__}, {torch.get_num_threads()} "
             "threads)", '',
             '| variant | model options changed | parameters | val loss | vs gpt2 | time (s) |',
             '| --- | --- | ---: | ---: | ---: | ---: |']
    means = {variant: sum(r['val_loss'] for r in rows) / len(rows) for variant, rows in results.items()}
    for variant, rows in results.items():
        losses = [r['val_loss'] for r in rows]
        spread = f' ({min(losses):.4f} to {max(losses):.4f})' if len(losses) > 1 else ''
        change = ', '.join(f'{k.split(".")[-1]}={v}' for k, v in VARIANTS[variant].items()) or '(GPT-2)'
        delta = signed(means[variant] - means['gpt2']) if 'gpt2' in means and variant != 'gpt2' else ''
        timed = [r['seconds'] for r in rows if r['seconds'] is not None]  # not the runs done before a resume
        seconds = f"{sum(timed) / len(timed):.0f}" if timed else '-'
        lines.append(f"| {variant} | {change} | {rows[0]['params']:,} | {means[variant]:.4f}{spread} | {delta} | "
                     f"{seconds} |")
    return '\n'.join(lines) + '\n'


def main(argv):
    config = get_config()
    config.merge_from_args(argv, usage=__doc__)
    new_figure(1, 1)  # fail now, not after training, if matplotlib is missing
    plan = list(runs(config))
    results, start = {}, time.time()
    for i, (variant, name, args) in enumerate(plan):
        print(f"\n[{i + 1}/{len(plan)}] {name}: python projects/chargpt.py {shlex.join(args)}")
        work_dir, t0 = os.path.join(config.system.work_dir, name), time.time()
        if config.trainer.resume and finished(work_dir, config.trainer.max_iters):
            print(f"{work_dir} has trained all {config.trainer.max_iters} iterations: its result is read from there")
            seconds = None
        else:
            run_chargpt(args)
            seconds = time.time() - t0
        results.setdefault(variant, []).append(result_of(work_dir, seconds))

    out = config.system.work_dir
    text = table(config, results) + f"\nwall time of the whole ablation: {time.time() - start:.0f} s\n"
    write_text_atomically(os.path.join(out, 'results.md'), text)
    setup_logging(config)  # the table's own command and options, beside it: args.txt and config.json
    names = [name for _, name, _ in plan]
    # the train curve averaged over about 10 iterations, fewer in a short run, where that lag would lift its end
    smooth = min(0.9, max(0.0, 1 - 20 / config.trainer.max_iters))
    seeds = ', '.join(map(str, config.ablation.seeds))
    fig = loss_figure([os.path.join(out, name, 'metrics.jsonl') for name in names], smooth=smooth, labels=names,
                      title=f'ablation: chargpt {config.model.model_type}, seeds {seeds}, same data and iterations')
    png = save(fig, os.path.join(out, 'loss.png'), dpi=120)
    print(f"\n{text}\nwrote {os.path.join(out, 'results.md')} and {png}")
    return fig  # a notebook cell that ends with ablation.main([...]) shows the loss curves


if __name__ == '__main__':
    run_cli(main)
