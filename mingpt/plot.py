"""Draw the loss curves of one or more runs from their metrics.jsonl (written by the trainer) to a PNG:

    python -m mingpt.plot out/chargpt/metrics.jsonl -o loss.png
    python -m mingpt.plot out/a/metrics.jsonl out/b/metrics.jsonl --smooth=0.9 -o compare.png

Train loss is drawn thin (with an exponential moving average over it when --smooth > 0), val loss as a thicker
line with points, in the same colour per run. Needs matplotlib: pip install -e '.[plot]'.
"""
import argparse
import json
import os
import sys


def read_metrics(path):
    """The records of a metrics.jsonl; a line cut short (a run killed mid-write) is skipped."""
    records = []
    with open(path) as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except ValueError:
                pass
    return records


def ema(values, alpha):
    """Exponential moving average, started at the first value (so the curve does not rise from zero)."""
    out, avg = [], None
    for v in values:
        avg = v if avg is None else alpha * avg + (1 - alpha) * v
        out.append(avg)
    return out


def plot(paths, out, smooth=0.0, labels=None, title=None, logy=False):
    try:
        import matplotlib
        matplotlib.use('Agg')  # files only, no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("drawing needs matplotlib: pip install -e '.[plot]' (or pip install matplotlib)") from None
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for i, path in enumerate(paths):
        records = read_metrics(path)
        if not records:
            raise SystemExit(f"{path} holds no metrics; is it a trainer's metrics.jsonl?")
        name = labels[i] if labels else os.path.basename(os.path.dirname(os.path.abspath(path))) or path
        colour = f'C{i}'
        it = [r['iter'] for r in records]
        loss = [r['loss'] for r in records]
        if smooth > 0:
            ax.plot(it, loss, color=colour, alpha=0.25, linewidth=0.8)
            ax.plot(it, ema(loss, smooth), color=colour, linewidth=1.2, label=f'{name} train')
        else:
            ax.plot(it, loss, color=colour, linewidth=1.0, label=f'{name} train')
        val = [(r['iter'], r['val_loss']) for r in records if 'val_loss' in r]
        if val:
            ax.plot(*zip(*val), color=colour, linewidth=2.0, marker='o', markersize=3.5, linestyle='--',
                    label=f'{name} val')
    ax.set_xlabel('iteration')
    ax.set_ylabel('loss (cross-entropy, nats per token)')
    if logy:
        ax.set_yscale('log')
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog='python -m mingpt.plot', description='Draw loss curves from metrics.jsonl files.')
    p.add_argument('metrics', nargs='+', help='metrics.jsonl files written by the trainer (one curve pair each)')
    p.add_argument('-o', '--out', default='loss.png', help='the PNG to write (default: loss.png)')
    p.add_argument('--smooth', type=float, default=0.0, help='EMA factor for the train loss, e.g. 0.9 (default: 0)')
    p.add_argument('--labels', nargs='+', help='one name per file (default: the name of its folder)')
    p.add_argument('--title')
    p.add_argument('--logy', action='store_true', help='logarithmic loss axis')
    args = p.parse_args(argv)
    if args.labels and len(args.labels) != len(args.metrics):
        p.error(f"--labels gives {len(args.labels)} names for {len(args.metrics)} files")
    for path in args.metrics:
        if not os.path.exists(path):
            p.error(f"{path} does not exist")
    print(f"wrote {plot(args.metrics, args.out, args.smooth, args.labels, args.title, args.logy)}")


if __name__ == '__main__':
    main(sys.argv[1:])
