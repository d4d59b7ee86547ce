"""Pictures for teaching and for watching training, drawn with matplotlib (optional: pip install -e ".[plot]"):

- loss curves of one or more runs from their metrics.jsonl (written by the trainer), also as a command:

    python -m mingpt.plot out/chargpt/metrics.jsonl -o out/chargpt/loss.png
    python -m mingpt.plot out/a/metrics.jsonl out/b/metrics.jsonl --smooth=0.9 -o compare.png

  Train loss is drawn thin (with a smoothed curve over it when --smooth > 0: an exponential moving average run forward
  and then backward, so it does not trail a falling loss), val loss as a thicker line with points, in the same colour
  per run. Any other number of the lines, such as the dev accuracy that sentiment's finetune writes, is drawn as its
  own curves, one per run with a point where it was measured (metric_figure):

    python -m mingpt.plot out/sentiment/scratch out/sentiment/finetune --metric=dev_accuracy
- attention maps: every layer x head of a prompt as one grid, or one map large (projects/attention.py draws them
  from a checkpoint or GPT-2);
- positional encodings: the sinusoidal table, a learned one, and the cosine similarity between their positions.

Each picture is a function that returns a matplotlib Figure (look at it in a notebook, or test what it holds);
save() writes one to a PNG (or the format its file's suffix names). Figures are made without pyplot, so no display
and no global backend are needed. Text in any script (tokens, run names, titles) is drawn in an installed font that
has its characters (matplotlib's default has no Japanese, Devanagari or emoji), or as code points where none has.
"""
import argparse
import functools
import io
import json
import math
import operator
import os
import re
import sys
import unicodedata

import numpy as np
import regex

from mingpt.utils import atomic_write, run_cli, warn_caller


def new_figure(width, height):
    """A matplotlib Figure of width x height inches; a clear error when matplotlib is missing or fails to import."""
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        if (e.name or '').split('.')[0] != 'matplotlib':  # installed, but it failed: e.g. 'requires numpy>=1.25'
            raise RuntimeError(f"drawing needs matplotlib, which is installed but failed to import: {e}") from e
        raise RuntimeError('drawing needs matplotlib, which is not installed: pip install -e ".[plot]" '
                           '(or pip install matplotlib)') from None
    import matplotlib
    if tuple(map(int, re.findall(r'\d+', matplotlib.__version__)[:2])) < (3, 8):  # tick labels take a font list
        raise RuntimeError(f"drawing needs matplotlib 3.8 or later, not {matplotlib.__version__}: pip install -U "
                           "matplotlib")
    fig = Figure(figsize=(width, height), layout='constrained')  # room for labels and colour bars
    # a notebook shows the picture, not '<Figure size ...>', though no pyplot backend (%matplotlib inline) draws it
    fig._repr_png_ = functools.partial(png_bytes, fig)
    return fig


def png_bytes(fig):
    """fig as a PNG file's bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format='png')
    return buffer.getvalue()


def image_format(fig, path):
    """The format that path's suffix names (.png, .pdf, .svg...; PNG without one), refused by name if matplotlib
    cannot write it: a command checks it before its long work, not at the end."""
    fmt = os.path.splitext(path)[1][1:].lower() or 'png'
    if fmt not in fig.canvas.get_supported_filetypes():
        raise ValueError(f"cannot draw {path}: matplotlib does not write .{fmt} files; name a .png, .pdf or .svg")
    return fmt


def save(fig, path, dpi=100):
    """Write fig to path, atomically, in the format its suffix names (image_format); returns path."""
    fmt = image_format(fig, path)
    atomic_write(path, lambda tmp: fig.savefig(tmp, format=fmt, dpi=dpi))
    return path


def set_title(fig, title, fontsize, fontfamily=None):
    """fig's title, wrapped to its width (a one-column figure is narrower than a title naming a prompt or a path);
    past three lines it is cut with '\u2026': a long prompt's would cover the maps (its tokens are along the axes).
    fontfamily: as drawable gives it, for a title beyond the default font."""
    fits = int(fig.get_figwidth() * 72 / (0.65 * fontsize))  # characters of this size across the figure
    lines = wrapped(title, fits)
    if len(lines) > 3:
        lines = lines[:2] + [lines[2][:-1] + '\u2026']
    fig.suptitle('\n'.join(lines), fontsize=fontsize, fontfamily=fontfamily)


def columns(text):
    """text's width in average characters, as a terminal counts them: a wide one (Chinese, Japanese, most emoji)
    takes two, a combining mark (an accent, most Devanagari vowel signs) none: it sits on the one before."""
    return sum(0 if unicodedata.category(c) in ('Mn', 'Me') else 2 if unicodedata.east_asian_width(c) in 'WF' else 1
               for c in text)


def wrapped(text, width):
    """text as lines at most width columns wide, broken at spaces, or inside a word too long for a line (Chinese
    and Japanese put no spaces between words), there between what a reader sees as one character (regex's \\X:
    a letter and its accents, an emoji with its skin tone or its ZWJ-joined parts)."""
    lines, line = [], ''
    for word in text.split(' '):
        longer = f'{line} {word}' if line else word
        if columns(longer) <= width:
            line = longer
            continue
        if line:
            lines.append(line)
        line = ''
        for c in regex.findall(r'\X', word):
            if line and columns(line + c) > width:  # one wider than a line has a line of its own
                lines.append(line)
                line = ''
            line += c
    return lines + [line]


def as_array(x):
    """A float64 numpy array of x: a list, an array, or a tensor (a parameter, on a GPU, in bf16...)."""
    if hasattr(x, 'detach'):
        x = x.detach().float().cpu()
    return np.asarray(x, dtype=np.float64)


# ---- text beyond the default font ----

@functools.cache
def installed_fonts():
    """{family: the code points its regular face draws} for the fonts matplotlib knows, but its Last Resort font,
    whose glyphs are boxes that name a script, not the characters."""
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font
    faces = {}
    for entry in sorted(font_manager.fontManager.ttflist, key=lambda e: (e.style != 'normal', e.weight != 400)):
        faces.setdefault(entry.name, entry.fname)  # the regular face first: the one drawn
    fonts = {}
    for name, path in sorted(faces.items()):
        try:
            font = FT2Font(path)
        except (OSError, RuntimeError):  # a font removed or changed since matplotlib listed it: its findfont skips it
            continue
        if font.scalable and not name.startswith('Last Resort'):  # a bitmap font (colour emoji) has no other sizes
            fonts[name] = set(font.get_charmap())
    return fonts


def drawable(texts):
    """(texts, families): texts as they can be drawn, and the font families to draw them in. The families are
    matplotlib's default, then installed fonts for the characters it lacks (Japanese, Devanagari...; matplotlib
    falls back along the list glyph by glyph). A character no installed font has is written as its code point
    ('\\u5409'), not as a box alike for all, with a warning that says what to install."""
    from matplotlib import font_manager, rcParams
    from matplotlib.ft2font import FT2Font
    need = {ord(c) for text in texts for c in text if c.isprintable()}  # a newline is laid out, not drawn
    need -= set(FT2Font(font_manager.findfont(font_manager.FontProperties())).get_charmap())
    families = list(rcParams['font.family'])
    while need:  # each time the font that draws most of what is still missing
        name, has = max(((name, need & chars) for name, chars in installed_fonts().items()),
                        key=lambda font: len(font[1]), default=(None, None))
        if not has:
            break
        families.append(name)
        need -= has
    if need:
        missing = sorted(need)
        shown = ' '.join(f"'{escaped(chr(c), need)}'" for c in missing[:3]) + (' ...' if len(missing) > 3 else '')
        # a long prompt in a script without a font (a page of Chinese) named hundreds of characters on one line
        named = ' '.join(map(chr, missing[:10])) + (f" and {len(missing) - 10} more" if len(missing) > 10 else '')
        warn_caller(f"no installed font draws {named}, so the picture writes them as code points ({shown}): install "
                    "a font that has them (e.g. Noto Sans CJK, Noto Sans Devanagari), then delete matplotlib's font "
                    "cache (~/.cache/matplotlib) for it to be found")
    return [escaped(text, need) for text in texts], families


def escaped(text, missing):
    """text with each code point in missing written as its escape ('\\u5409')."""
    return ''.join(c.encode('unicode_escape').decode() if ord(c) in missing else c for c in text)


# ---- loss curves ----

def read_metrics(path):
    """The records of a metrics.jsonl: the lines with an iteration and a loss. Any other line (one cut short by a
    killed run, another program's) is skipped."""
    records = []
    try:
        with open(path, encoding='utf-8') as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and 'iter' in record and 'loss' in record:
                    records.append(record)
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not a metrics.jsonl (it is not text): give the one a run wrote") from None
    return records


def ema(values, alpha):
    """Exponential moving average, started at the first value (so the curve does not rise from zero), and again after
    a value that is not finite (a diverged step's NaN shows as a gap, not as the end of the curve)."""
    out, avg = [], None
    for v in values:
        avg = v if avg is None or not math.isfinite(avg) else alpha * avg + (1 - alpha) * v
        out.append(avg)
    return out


def smoothed(values, alpha):
    """values smoothed by an exponential moving average run forward, then backward over the result. The forward
    average alone trails a falling loss by about alpha / (1 - alpha) steps, so it drew the train loss above a val
    loss equal to it; the backward pass shifts it back by as much. Within that many steps of either end, where there
    is one side to average, the curve leans toward the inside (the thin raw curve under it shows the ends)."""
    return ema(ema(values, alpha)[::-1], alpha)[::-1]


def metrics_paths(paths):
    """paths as a list of metrics.jsonl files: one path alone (a string, in a notebook's cell) is a list of one, where
    it was read as a list of one-letter paths, and a run's work_dir stands for the metrics.jsonl in it."""
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    for path in paths:
        if os.path.isdir(path) and not os.path.exists(os.path.join(path, 'metrics.jsonl')):
            raise FileNotFoundError(no_metrics(path))
    return [os.path.join(path, 'metrics.jsonl') if os.path.isdir(path) else path for path in paths]


def no_metrics(folder):
    """What to give instead of a folder without a metrics.jsonl: the runs in its subfolders (the ablation's folder
    holds one per variant), or a run's own folder. A bare 'No such file' named the file but not the fix."""
    runs = sorted(name for name in os.listdir(folder) if os.path.isfile(os.path.join(folder, name, 'metrics.jsonl')))
    if runs:
        shown = ' '.join(os.path.join(folder, name) for name in runs[:5]) + (' ...' if len(runs) > 5 else '')
        return f"{folder} holds no metrics.jsonl, but runs in it do: give the runs, {shown}"
    return (f"{folder} holds no metrics.jsonl: give a run's work_dir (the trainer writes metrics.jsonl there as a run "
            "starts) or the metrics.jsonl itself")


def run_axes(paths, labels, title):
    """The axes that loss_figure and metric_figure draw on, and what to draw: (ax, runs, title, families), runs a
    (path, name, records) per metrics.jsonl in paths (or per run folder holding one); labels: one name per path;
    title and families: as drawable gives them."""
    paths = metrics_paths(paths)
    labels = [labels] if isinstance(labels, str) else labels  # one run's name, as its one path
    if labels is not None and len(labels) != len(paths):  # zip would drop the runs without one, or the extra names
        raise ValueError(f"labels gives {len(labels)} names for {len(paths)} metrics files: give one per file")
    ax = new_figure(7, 4.2).subplots()
    names = [str(label) for label in labels] if labels else [
        os.path.basename(os.path.dirname(os.path.abspath(path))) or path for path in paths]
    (*names, title), families = drawable(list(names) + [title or ''])
    runs = []
    for path, name in zip(paths, names):
        records = read_metrics(path)
        if not records:
            raise ValueError(f"{path} holds no metrics: its run has logged no step yet, or it is not a trainer's "
                             "metrics.jsonl")
        runs.append((path, name, records))
    return ax, runs, title, families


def finish_axes(ax, ylabel, title, families, logy):
    """ax labelled (iteration along x, ylabel up y), with its title, grid and legend; returns its figure."""
    ax.set_xlabel('iteration')
    ax.set_ylabel(ylabel)
    if logy:  # values that span a few decades: label them as numbers (0.3, 3), not 3 x 10^0, and draw grid lines
        from matplotlib.ticker import LogFormatter

        class PlainNumbers(LogFormatter):
            """matplotlib's choice of the log axis's ticks to label, written as plain numbers."""
            def __call__(self, x, pos=None):
                return f'{x:g}' if super().__call__(x, pos) else ''
        ax.set_yscale('log')
        ax.yaxis.set_major_formatter(PlainNumbers(labelOnlyBase=False))
        ax.yaxis.set_minor_formatter(PlainNumbers(labelOnlyBase=False))
    if title:
        ax.set_title(title, fontfamily=families)
    ax.grid(alpha=0.3, which='both' if logy else 'major')
    ax.legend(prop={'size': 8, 'family': families})
    return ax.figure


def loss_figure(paths, smooth=0.0, labels=None, title=None, logy=False):
    """Train and val loss against iteration, one colour per metrics.jsonl in paths (or per run folder holding one);
    smooth: the train loss's moving-average factor, 0 (none) to below 1; labels: one name per path."""
    if not 0 <= smooth < 1:  # 1 never leaves the first loss; above it the average grows without bound
        raise ValueError(f"smooth={smooth} must be at least 0 and below 1 (0.9 keeps 90% of the average each step)")
    ax, runs, title, families = run_axes(paths, labels, title)
    for i, (path, name, records) in enumerate(runs):
        colour = f'C{i}'
        it = [r['iter'] for r in records]
        loss = [r['loss'] for r in records]
        if smooth > 0:
            ax.plot(it, loss, color=colour, alpha=0.25, linewidth=0.8)
            ax.plot(it, smoothed(loss, smooth), color=colour, linewidth=1.2, label=f'{name} train')
        else:
            ax.plot(it, loss, color=colour, linewidth=1.0, label=f'{name} train')
        val = [(r['iter'], r['val_loss']) for r in records if 'val_loss' in r]
        if val:
            ax.plot(*zip(*val), color=colour, linewidth=2.0, marker='o', markersize=3.5, linestyle='--',
                    label=f'{name} val')
    return finish_axes(ax, 'loss (cross-entropy, nats per token)', title, families, logy)


def metric_figure(paths, metric, labels=None, title=None, logy=False):
    """One number of the lines of metrics.jsonl against iteration, a curve per run with a point where it was
    measured: a callback's (trainer.metrics['name'] = value), such as the dev_accuracy that sentiment's finetune
    writes at each evaluation, or the trainer's own (lr, grad_norm...). paths, labels, title, logy: as loss_figure's."""
    ax, runs, title, families = run_axes(paths, labels, title)
    for i, (path, name, records) in enumerate(runs):
        points = [(r['iter'], r[metric]) for r in records if metric in r]
        if not points:
            held = sorted({key for r in records for key in r} - {'iter'})
            raise ValueError(f"{path} holds no {metric!r}: its lines hold {', '.join(held)}; draw one of those")
        ax.plot(*zip(*points), color=f'C{i}', linewidth=1.5, marker='o', markersize=3.5, label=name)
    return finish_axes(ax, metric, title, families, logy)


def plot(paths, out, smooth=0.0, labels=None, title=None, logy=False, metric=None):
    """Draw the loss curves of the metrics.jsonl files in paths (see loss_figure), or with metric the curves of that
    number (see metric_figure), into the image out, in the format its suffix names (.png, .pdf, .svg...; see save);
    returns out."""
    if metric is None:
        fig = loss_figure(paths, smooth, labels, title, logy)
    elif smooth:  # smoothing is the train loss's: a callback's points are few, each an evaluation
        raise ValueError(f"smooth={smooth} smooths the loss curves' train loss; metric={metric!r} is drawn as "
                         "measured: leave smooth (--smooth) out")
    else:
        fig = metric_figure(paths, metric, labels, title, logy)
    return save(fig, out, dpi=120)


# ---- attention maps ----

def readable(token):
    """A token as a label one can see: a space as '␣', a newline as '↵', a tab as '⇥', other controls escaped. A
    byte-level BPE token given as its bytes shows the bytes that are only part of a character as escapes ('\\xc3'),
    where its decoded text would be U+FFFD, alike for every such byte."""
    if isinstance(token, bytes):
        token = token.decode('utf-8', errors='backslashreplace')
    token = token.replace(' ', '\u2423').replace('\n', '\u21b5').replace('\t', '\u21e5')
    return ''.join(c if c.isprintable() else repr(c)[1:-1] for c in token)


def _label_step(n_tokens, panel_inches, fontsize):
    """k, to label every k-th token along an axis: 1 when all of them fit at this font size."""
    fits = max(1, int(panel_inches * 72 / (1.3 * fontsize)))  # 72 points per inch; 1.3: line spacing
    return math.ceil(n_tokens / fits)


def attention_figure(maps, tokens, title=None, layers=None, heads=None):
    """Attention weights as a grid of heat maps, one row per layer and one column per head: maps is
    (n_layer, n_head, T, T) (a tensor, an array, or a list of (n_head, T, T)), tokens the prompt's T tokens as
    strings or, for a byte-level BPE, as bytes (see readable), layers and heads the numbers to label the rows and
    columns with (default 0, 1, ...). Row i of a map is query token i; its colours say how it spreads its attention
    over the keys j <= i (each row sums to 1). The future, which the causal mask hides, is left blank. The colour
    scale is the square root of the weight, so that a weight spread over many keys still shows. A single map is
    drawn large, every token labelled if they fit; else the axes say which share of them is."""
    maps = np.stack([as_array(m) for m in maps])  # (n_layer, n_head, T, T)
    n_layer, n_head, T = maps.shape[0], maps.shape[1], maps.shape[-1]
    if maps.shape[2:] != (T, T) or len(tokens) != T:
        batch = (": GPT.attention_maps(idx) gives each layer's (batch, n_head, T, T), so pass one prompt's maps, "
                 "[m[0] for m in maps]") if maps.ndim == 5 else ''
        raise ValueError(f"attention maps of shape {maps.shape} do not fit {len(tokens)} tokens: give maps "
                         f"(n_layer, n_head, T, T) and T tokens{batch}")
    other = next((t for t in tokens if not isinstance(t, (str, bytes))), None)  # e.g. the prompt's ids, idx[0]
    if other is not None:
        raise TypeError(f"tokens must be the prompt's tokens as text (str, or bytes), not {type(other).__name__}: "
                        "decode each id, e.g. [tokenizer.decode([i]) for i in idx[0].tolist()]")
    # as ints: numbers in a tensor or an array (torch.arange(3)) stopped at 'Boolean value of Tensor ... is ambiguous'
    layers = range(n_layer) if layers is None else [operator.index(n) for n in layers]  # 0.5 refused, not cut to 0
    heads = range(n_head) if heads is None else [operator.index(n) for n in heads]
    for name, numbers, n in (('layers', layers, n_layer), ('heads', heads, n_head)):
        if len(numbers) != n:  # else an IndexError, or rows under the wrong numbers
            raise ValueError(f"{name}={list(numbers)} gives {len(numbers)} numbers for the maps' {n} {name}: it only "
                             "labels the maps given; to draw some of them, give those maps and their numbers, e.g. "
                             "attention_figure(maps[[1]][:, [0, 2]], tokens, layers=[1], heads=[0, 2]) of a tensor")
    one = n_layer * n_head == 1
    panel = min(10.0, max(4.0, 0.16 * T)) if one else min(2.6, max(1.4, 10.0 / max(n_layer, n_head)))
    fontsize = 8 if one else 7
    fig = new_figure(n_head * panel + 1.6, n_layer * panel + 1.2)  # first: it says if matplotlib is missing
    from matplotlib.colors import PowerNorm
    axes = fig.subplots(n_layer, n_head, squeeze=False, sharex=True, sharey=True)
    (*labels, title), families = drawable([readable(t) for t in tokens] + [title or ''])
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    norm = PowerNorm(gamma=0.5, vmin=0, vmax=1)
    for layer in range(n_layer):
        for head in range(n_head):
            ax = axes[layer, head]
            image = ax.imshow(np.ma.masked_array(maps[layer, head], future), cmap='viridis', norm=norm,
                              interpolation='nearest')
            ax.tick_params(length=1.5, pad=1, labelsize=fontsize, labelfontfamily=families)
            ax.tick_params(axis='x', labelrotation=90)
            if one:
                ax.set_title(f'layer {layers[0]}, head {heads[0]}', fontsize=9)
            elif layer == 0:
                ax.set_title(f'head {heads[head]}', fontsize=8)
            if head == 0 and not one:
                ax.set_ylabel(f'layer {layers[layer]}', fontsize=8)
    step = _label_step(T, panel, fontsize)
    ticks = list(range((T - 1) % step, T, step))  # ending at the last token: its row predicts the next one
    axes[0, 0].set_xticks(ticks, [labels[t] for t in ticks])  # the axes are shared: this labels every panel
    axes[0, 0].set_yticks(ticks, [labels[t] for t in ticks])
    bar = fig.colorbar(image, ax=axes, shrink=0.6, fraction=0.04, pad=0.02)
    bar.set_ticks([0, 0.05, 0.2, 0.5, 1])
    bar.set_label('attention weight (square-root colour scale)', fontsize=8)
    shown = f' (1 token in {step} labelled)' if step > 1 else ''
    fig.supylabel(f'query (the token attending) \u2192 down{shown}', fontsize=9)
    fig.supxlabel(f'key (the token attended to) \u2192 right{shown}', fontsize=9)
    if title:
        set_title(fig, title, fontsize=11, fontfamily=families)
    return fig


# ---- positional encodings ----

def cosine_similarity(table):
    """(n, n) cosine similarity between the rows of table (n, d): how alike the encodings of two positions are."""
    table = as_array(table)
    unit = table / np.linalg.norm(table, axis=1, keepdims=True)
    return unit @ unit.T


def positions_figure(sinusoidal, learned=None, title=None):
    """Positional encodings side by side, one column per table (the sinusoidal one, and a model's learned wpe if
    given): on top the table itself (position x dimension), below the cosine similarity between positions."""
    tables = [('sinusoidal', as_array(sinusoidal))]
    if learned is not None:
        tables.append(('learned (wpe)', as_array(learned)))
    fig = new_figure(5.0 * len(tables) + 0.4, 9.0)
    axes = fig.subplots(2, len(tables), squeeze=False)
    for col, (name, table) in enumerate(tables):
        top, bottom = axes[0, col], axes[1, col]
        limit = np.abs(table).max()
        image = top.imshow(table, cmap='RdBu_r', vmin=-limit, vmax=limit, aspect='auto', interpolation='nearest')
        fig.colorbar(image, ax=top, fraction=0.046, pad=0.03)
        top.set(title=f'{name} table', xlabel='dimension', ylabel='position')
        image = bottom.imshow(cosine_similarity(table), cmap='RdBu_r', vmin=-1, vmax=1, interpolation='nearest')
        fig.colorbar(image, ax=bottom, fraction=0.046, pad=0.03)
        bottom.set(title=f'{name}: cosine similarity', xlabel='position', ylabel='position')
    if title:
        set_title(fig, title, fontsize=12)
    return fig


def main(argv):  # no default of sys.argv: in a notebook that is the kernel's (-f kernel.json)
    p = argparse.ArgumentParser(prog='python -m mingpt.plot', description='Draw loss curves (or the curves of another '
                                'number, --metric) from metrics.jsonl files.')
    path = os.path.expanduser  # the shell leaves the ~ of --out=~/loss.png as it is, after the '='
    p.add_argument('metrics', nargs='+', type=path, help='metrics.jsonl files written by the trainer, or the run '
                   'folders holding them (a curve pair each; one curve with --metric)')
    p.add_argument('-o', '--out', type=path, help='the image to write: .png, .pdf, .svg (default: loss.png, or '
                   'METRIC.png with --metric)')
    p.add_argument('--metric', help="draw this number of metrics.jsonl's lines instead of the losses, one curve per "
                   'run, e.g. dev_accuracy (sentiment finetune), lr, grad_norm')
    p.add_argument('--smooth', type=float, default=0.0, help='smoothing of the train loss, e.g. 0.9: an EMA '
                   'factor (default: 0)')
    p.add_argument('--labels', nargs='+', help='one name per file (default: the name of its folder)')
    p.add_argument('--title')
    p.add_argument('--logy', action='store_true', help='logarithmic y axis')
    args = p.parse_args(argv)
    if args.labels and len(args.labels) != len(args.metrics):
        p.error(f"--labels gives {len(args.labels)} names for {len(args.metrics)} files")
    for path in args.metrics:
        if not os.path.exists(path):
            p.error(f"{path} does not exist")
    if not 0 <= args.smooth < 1:
        p.error(f"--smooth={args.smooth} must be at least 0 and below 1 (0.9 keeps 90% of the average each step)")
    out = args.out or re.sub(r'[^\w.-]', '_', args.metric or 'loss') + '.png'  # a name as 'eval/acc' is no folder
    print(f"wrote {plot(args.metrics, out, args.smooth, args.labels, args.title, args.logy, args.metric)}")


if __name__ == '__main__':
    run_cli(main, sys.argv[1:])
