"""
Why plain generation's ratio to Hugging Face changes from machine to machine: the weights' memory layout.

A decode step of 124M GPT-2 is mostly its blocks' 48 weight matrices, each read once per new token. mingpt's
nn.Linear keeps a matrix as (out, in) and computes x @ W.T; Hugging Face's Conv1D keeps it as (in, out) and computes
x @ W. The numbers are the same, but the CPU's matrix library (MKL in PyTorch's x86 wheels) picks another kernel for
each layout, and which one is faster depends on the CPU and on the batch. This times the 48 matrix products of one
decode step both ways, each layout in its own process, in turns, over several rounds, and prints the medians, their
spread (min-max over rounds) and the ratio as a Markdown table.

    python bench/bench_layout.py               # 5 rounds, 2 threads, fp32
    python bench/bench_layout.py --rounds 1    # checks that it runs

Run it on an otherwise idle machine: a second busy process makes the numbers worthless.
"""
import argparse
import datetime
import json
import statistics
import sys
import time

import torch

from bench_model import cpu_name, spread
from workers import run_worker

C = 768  # GPT-2 124M's width
# (in, out) of each block's c_attn, attention's c_proj, the MLP's c_fc and c_proj; 12 blocks
SHAPES = [(C, 3 * C), (C, C), (C, 4 * C), (4 * C, C)] * 12
BATCHES = (1, 8)
LAYOUTS = {'nn.Linear (out, in): x @ W.T': 'linear', 'Conv1D (in, out): x @ W': 'conv1d'}


def worker(layout, batch, threads):
    """Runs in its own process: one decode step's matrix products, timed; prints milliseconds as JSON."""
    torch.set_num_threads(threads)
    weights = [(torch.randn(n_in, n_out) * 0.02, torch.zeros(n_out)) for n_in, n_out in SHAPES]
    if layout == 'linear':
        weights = [(w.t().contiguous(), b) for w, b in weights]  # nn.Linear.weight's own layout, (out, in)
    xs = {n: torch.randn(batch, n) for n in (C, 4 * C)}  # the new tokens' activations, one row per sequence

    def step():
        for w, b in weights:
            if layout == 'linear':
                torch.nn.functional.linear(xs[w.size(1)], w, b)  # what nn.Linear calls
            else:
                torch.addmm(b, xs[w.size(0)], w)  # what Conv1D calls
    with torch.inference_mode():
        for _ in range(3):  # warm-up
            step()
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
    print(json.dumps(statistics.median(times) * 1e3))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--threads', type=int, default=2)
    p.add_argument('--rounds', type=int, default=5)
    p.add_argument('--worker', nargs=2, metavar=('LAYOUT', 'BATCH'), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args.worker[0], int(args.worker[1]), args.threads)
    print(f"{datetime.date.today()}, {cpu_name()}, {args.threads} threads, torch {torch.__version__}, fp32; "
          f"{args.rounds} rounds, each layout in its own process, in turns\n")
    linear, conv1d = LAYOUTS
    print(f"| batch | {linear}, ms (median, spread) | {conv1d}, ms (median, spread) | nn.Linear's speed / Conv1D's |")
    print("|---|---|---|---|")
    for batch in BATCHES:
        ms = {name: [] for name in LAYOUTS}
        for r in range(args.rounds):
            for name in (list(LAYOUTS) if r % 2 == 0 else list(LAYOUTS)[::-1]):
                cmd = [sys.executable, __file__, '--worker', LAYOUTS[name], str(batch), '--threads', str(args.threads)]
                ms[name].append(run_worker(cmd, f"{name} batch {batch}"))
        a, b = statistics.median(ms[linear]), statistics.median(ms[conv1d])
        print(f"| {batch} | {a:.1f}{spread(ms[linear], '.1f')} | {b:.1f}{spread(ms[conv1d], '.1f')} | "
              f"{b / a:.2f}x |", flush=True)


if __name__ == '__main__':
    main()
