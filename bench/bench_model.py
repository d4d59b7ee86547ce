"""
mingpt against Hugging Face's GPT2LMHeadModel on identical shapes: training-step and generation tokens/s.

Each measurement runs in a fresh process of its own (so neither side pays for the other's memory or threads), the
two contenders in turns (who goes first alternates from round to round, so a drifting machine favours neither), for
several rounds; it prints each side's median tokens/s with its spread (min-max over rounds) and the ratio of the
medians, as a Markdown table to paste into the README.

    python bench/bench_model.py                 # 5 rounds, 2 threads, fp32, random weights, tied embeddings
    python bench/bench_model.py --quick         # 1 round, fewer steps: checks that it runs
    python bench/bench_model.py --only 'batch 8' --rounds 9   # the workloads whose name contains 'batch 8'

Run it on an otherwise idle machine: a second busy process makes the numbers worthless.
"""
import argparse
import datetime
import json
import platform
import statistics
import sys
import time

import torch

from workers import run_worker

# name: (model shape, what is timed); shapes as (n_layer, n_head, n_embd, vocab_size, block_size)
MINI, GPT2 = (6, 6, 192, 65, 128), (12, 12, 768, 50257, 1024)
WORKLOADS = {
    'train gpt-mini char, batch 32 x 128, dropout 0.1': dict(shape=MINI, train=(32, 128), steps=10),
    # the same with nn.Dropout in mingpt: what model.py's Dropout (its torch.rand mask on CPU) buys
    'train gpt-mini char, batch 32 x 128, dropout 0.1, mingpt with nn.Dropout': dict(shape=MINI, train=(32, 128),
                                                                                     steps=10, plain_dropout=True),
    'train 124M, batch 4 x 256, dropout 0.1': dict(shape=GPT2, train=(4, 256), steps=3),
    'generate 124M, batch 1, 16 -> +128 tokens': dict(shape=GPT2, generate=(1, 16, 128), steps=2),
    'generate 124M, batch 8, 16 -> +128 tokens': dict(shape=GPT2, generate=(8, 16, 128), steps=2),
}


def build(side, shape, dropout=0.1, plain_dropout=False):
    n_layer, n_head, n_embd, vocab, block = shape
    if side == 'mingpt':
        from mingpt.model import GPT, Dropout
        C = GPT.get_default_config()
        C.merge_from_dict(dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, vocab_size=vocab, block_size=block,
                               embd_pdrop=dropout, resid_pdrop=dropout, attn_pdrop=dropout))
        model = GPT(C)
        if plain_dropout:
            for m in model.modules():
                if type(m) is Dropout:
                    m.__class__ = torch.nn.Dropout
        return model
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd, vocab_size=vocab, n_positions=block,
                        embd_pdrop=dropout, resid_pdrop=dropout, attn_pdrop=dropout, tie_word_embeddings=True)
    return GPT2LMHeadModel._from_config(config, attn_implementation='sdpa')


def train_step(side, model, batch, block, vocab):
    """One optimisation step as each library's user writes it: ours with configure_optimizers (fused AdamW), HF's
    with torch's default AdamW; the same decay groups, clipping and shapes (HF shifts the labels inside)."""
    model.train()
    x, y = torch.randint(0, vocab, (batch, block)), torch.randint(0, vocab, (batch, block))
    groups = [{'params': [p for p in model.parameters() if p.dim() >= 2], 'weight_decay': 0.1},
              {'params': [p for p in model.parameters() if p.dim() < 2], 'weight_decay': 0.0}]
    if side == 'mingpt':
        tc = argparse.Namespace(learning_rate=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
        opt, loss_of = model.configure_optimizers(tc), lambda: model(x, y)[1]
    else:
        opt, loss_of = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95)), lambda: model(input_ids=x, labels=y).loss

    def step():
        loss = loss_of()
        model.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return step


def generation(side, model, batch, prompt, new, vocab):
    model.eval()
    idx = torch.randint(0, vocab, (batch, prompt))
    if side == 'mingpt':
        return lambda: model.generate(idx, new)
    return lambda: model.generate(idx, attention_mask=torch.ones_like(idx), max_new_tokens=new, min_new_tokens=new,
                                  do_sample=False, pad_token_id=0)


def worker(name, side, threads, quick):
    """Runs in its own process: build, warm up, time; prints tokens/s as JSON."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    w = WORKLOADS[name]
    model = build(side, w['shape'], plain_dropout=w.get('plain_dropout', False))
    if 'train' in w:
        batch, block = w['train']
        fn, tokens = train_step(side, model, batch, block, w['shape'][3]), batch * block
    else:
        batch, prompt, new = w['generate']
        fn, tokens = generation(side, model, batch, prompt, new, w['shape'][3]), batch * new
    steps = 1 if quick else w['steps']
    with torch.inference_mode(mode='generate' in w):
        fn()  # warm-up: allocations, kernel choice
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    print(json.dumps(tokens / statistics.median(times)))


def measure(name, side, threads, quick):
    cmd = [sys.executable, __file__, '--worker', name, side, '--threads', str(threads)] + (['--quick'] if quick else [])
    return run_worker(cmd, f"{side} '{name}'")


def cpu_name():
    try:
        with open('/proc/cpuinfo') as f:
            return next(line.split(':', 1)[1].strip() for line in f if line.startswith('model name'))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def spread(xs, fmt=',.0f'):
    """' (min-max)' of several rounds' figures, to follow their median; nothing for one round."""
    return f" ({min(xs):{fmt}}-{max(xs):{fmt}})" if len(xs) > 1 else ''


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--threads', type=int, default=2)
    p.add_argument('--rounds', type=int, default=5)
    p.add_argument('--quick', action='store_true')
    p.add_argument('--only', default='', help="run only the workloads whose name contains this text")
    p.add_argument('--worker', nargs=2, metavar=('WORKLOAD', 'SIDE'), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(*args.worker, args.threads, args.quick)
    rounds = 1 if args.quick else args.rounds
    names = [name for name in WORKLOADS if args.only in name]
    if not names:
        p.error(f"no workload name contains {args.only!r}; they are: {'; '.join(WORKLOADS)}")
    import transformers
    print(f"{datetime.date.today()}, {cpu_name()}, {args.threads} threads, torch "
          f"{torch.__version__}, transformers {transformers.__version__}, fp32; {rounds} rounds, each contender "
          "in its own process, in turns\n")
    print("| workload | mingpt tok/s (median, spread) | HF tok/s (median, spread) | ratio |\n|---|---|---|---|")
    for name in names:
        runs = {'mingpt': [], 'hf': []}
        for r in range(rounds):
            for side in (['mingpt', 'hf'] if r % 2 == 0 else ['hf', 'mingpt']):
                runs[side].append(measure(name, side, args.threads, args.quick))
        o, h = statistics.median(runs['mingpt']), statistics.median(runs['hf'])
        print(f"| {name} | {o:,.0f}{spread(runs['mingpt'])} | {h:,.0f}{spread(runs['hf'])} | {o / h:.2f}x |",
              flush=True)


if __name__ == '__main__':
    main()
