"""
Generation speed of the 124M GPT-2 shape (random weights): mingpt's plain generate (eager), the engine's compiled
decode step (mingpt/engine.py) and Hugging Face's GPT2LMHeadModel.generate, greedy, at batch 1, batch 8, and a batch
of 8 prompts of lengths 5..120 (left padded, with an attention mask).

Each measurement runs in a fresh process of its own, the three contenders in turns (each round starts with the next
one), for several rounds; it prints each one's median tokens/s and time to the first token (the prompt's forward and
one token) with their spread (min-max over rounds), and the ratios of the medians, as a Markdown table to paste into
the README. The compiled side compiles once per process before the clock starts (the inductor's cache makes later
rounds compile faster); its median compile time is printed below the table.

    python bench/bench_generate.py                  # 3 rounds, 2 threads, fp32 on CPU (about 11 minutes)
    python bench/bench_generate.py --device=cuda    # bf16, the compiled step as a CUDA graph
    python bench/bench_generate.py --quick --tiny   # 1 round, a 2-layer model: checks that it runs

Run it on an otherwise idle machine: a second busy process makes the numbers worthless.
"""
import argparse
import datetime
import json
import statistics
import sys
import time

import torch

from bench_model import GPT2, build, cpu_name, spread
from workers import run_worker

TINY = (2, 2, 64, 1000, 1024)
SIDES = ('hf', 'eager', 'compiled')
RAGGED = [5 + round(i * 115 / 7) for i in range(8)]  # prompt lengths 5, 21, ..., 120
# name: (prompt lengths, new tokens, timed runs per process)
WORKLOADS = {
    'batch 1, 16 -> +128 tokens': ([16], 128, 2),
    'batch 8, 16 -> +128 tokens': ([16] * 8, 128, 1),
    'batch 8, prompts 5..120 (left padded) -> +64 tokens': (RAGGED, 64, 1),
}


def prompts(lengths, vocab, device):
    """Random prompts of the given lengths, left padded into one batch, and its attention mask."""
    T = max(lengths)
    idx = torch.randint(0, vocab, (len(lengths), T), device=device)
    mask = (torch.arange(T, device=device) >= T - torch.tensor(lengths, device=device)[:, None]).long()
    return idx.masked_fill(mask == 0, 0), mask


def contender(side, model, idx, mask):
    """(generate, warm_up) for one side: generate(new) is its greedy generation of `new` tokens after idx (the mask
    only where rows differ in length); warm_up(new) readies it: allocations, and on the compiled side the compile
    (or the CUDA graph) for the shape that generate(new) runs."""
    mask_or_none = None if mask.all() else mask
    if side == 'hf':
        def generate(new):
            return model.generate(idx, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                                  pad_token_id=0)
    else:
        from mingpt.engine import Engine
        engine = Engine(model, compile=True) if side == 'compiled' else model

        def generate(new):
            return engine.generate(idx, new, attention_mask=mask_or_none)
        if side == 'compiled':
            return generate, lambda new: engine.warm_up(idx, new, attention_mask=mask_or_none)
    return generate, lambda new: generate(4)


def timed(fn, device, runs):
    times = []
    for _ in range(runs):
        if device.startswith('cuda'):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.startswith('cuda'):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def worker(name, side, args):
    """Runs in its own process: build, warm up (and compile), time; prints tokens/s, first-token and warm-up seconds
    as JSON."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    lengths, new, runs = WORKLOADS[name]
    runs = 1 if args.quick else runs
    shape = TINY if args.tiny else GPT2
    dtype = torch.bfloat16 if args.device.startswith('cuda') else torch.float32
    model = build('mingpt' if side != 'hf' else 'hf', shape, dropout=0.0).to(args.device, dtype).eval()
    idx, mask = prompts(lengths, shape[3], args.device)
    generate, warm_up = contender(side, model, idx, mask)
    with torch.inference_mode():
        t0 = time.perf_counter()
        warm_up(new)
        warm = time.perf_counter() - t0
        seconds = timed(lambda: generate(new), args.device, runs)
        first = timed(lambda: generate(1), args.device, 3)
    print(json.dumps(dict(tokens_per_s=len(lengths) * new / seconds, first_token_ms=1000 * first, warm_up_s=warm)))


def measure(name, side, args):
    cmd = [sys.executable, __file__, '--worker', name, side, '--threads', str(args.threads), '--device', args.device]
    cmd += [flag for flag, on in (('--quick', args.quick), ('--tiny', args.tiny)) if on]
    return run_worker(cmd, f"{side} '{name}'")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--threads', type=int, default=2)
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--device', default='cpu')
    p.add_argument('--quick', action='store_true', help='1 round, 1 timed run per process')
    p.add_argument('--tiny', action='store_true', help=f'a small model {TINY} instead of 124M: checks that it runs')
    p.add_argument('--worker', nargs=2, metavar=('WORKLOAD', 'SIDE'), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(*args.worker, args)
    rounds = 1 if args.quick else args.rounds
    import transformers
    where = torch.cuda.get_device_name() if args.device.startswith('cuda') else f"{cpu_name()}, {args.threads} threads"
    dtype = 'bf16' if args.device.startswith('cuda') else 'fp32'
    print(f"{datetime.date.today()}, {where}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{dtype}, {'tiny model' if args.tiny else '124M'}, random weights, greedy; "
          f"{rounds} rounds, each contender in its own process, in turns\n")
    print("| workload | HF tok/s | eager tok/s | compiled tok/s | compiled / eager | compiled / HF | "
          "first token ms: HF, eager, compiled |\n|---|---|---|---|---|---|---|")
    compile_s = []
    for name in WORKLOADS:
        runs = {side: [] for side in SIDES}
        for r in range(rounds):
            for side in SIDES[r % 3:] + SIDES[:r % 3]:
                runs[side].append(measure(name, side, args))
        compile_s += [r['warm_up_s'] for r in runs['compiled']]
        tok = {s: [r['tokens_per_s'] for r in runs[s]] for s in SIDES}
        ms = {s: [r['first_token_ms'] for r in runs[s]] for s in SIDES}
        med = {s: statistics.median(tok[s]) for s in SIDES}
        cells = [f"{med[s]:,.1f}" + spread(tok[s]) for s in SIDES]
        firsts = ', '.join(f"{statistics.median(ms[s]):,.0f}" + spread(ms[s]) for s in SIDES)
        print(f"| {name} | {' | '.join(cells)} | {med['compiled'] / med['eager']:.2f}x | "
              f"{med['compiled'] / med['hf']:.2f}x | {firsts} |", flush=True)
    print(f"\ncompiling the decode step (once per process, before timing): median {statistics.median(compile_s):.0f} s"
          + spread(compile_s))


if __name__ == '__main__':
    main()
