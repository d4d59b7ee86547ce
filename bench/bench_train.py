"""Training throughput and MFU: mingpt against Hugging Face's GPT2LMHeadModel, same shapes, same run.

On a GPU the defaults are GPT-2 124M at block 1024 with bf16 autocast, torch.compile and flash attention (SDPA):

    python bench/bench_train.py                                    # 3 rounds
    python bench/bench_train.py --batch 24 --vocab 50304           # nanoGPT's padded vocabulary

On a CPU they shrink to gpt-mini at block 128, float32, no compile (tokens/s only; MFU needs a GPU's peak):

    python bench/bench_train.py --model gpt-micro --block 64 --batch 8 --vocab 65 --steps 5 --rounds 1

Rows: 'mingpt' and 'hf' run the identical train step (autocast forward, cross-entropy, backward, clip, fused
AdamW) on random tokens; 'mingpt Trainer' is mingpt.Trainer itself (its loop, data sampling from a TokenDataset,
pinned copies, one loss read per step), so its distance from 'mingpt' is the trainer's overhead. MFU uses PaLM's
FLOPs per token (6N + 12 L H Q T) and the GPU's dense bf16 peak (H100/H200 989 TFLOP/s, A100 312).

Each measurement runs in a fresh process of its own (so no contender inherits another's compiled graphs, allocator
or memory), the contenders in turns (each round starts with the next one), for several rounds; it prints each one's
median with its spread (min-max over rounds) and the ratio of the medians to HF's, as a Markdown table.
"""
import argparse
import datetime
import json
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from mingpt.data import TokenDataset
from mingpt.model import GPT
from mingpt.trainer import Trainer, flops_per_token, peak_flops

from bench_model import cpu_name, spread
from workers import run_worker

DTYPES = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}
ROWS = {'mingpt': 'mingpt', 'hf': 'hf', 'trainer': 'mingpt Trainer'}  # --impls name: row name


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--model', help='mingpt preset (default: gpt2 on cuda, gpt-mini on cpu)')
    p.add_argument('--block', type=int, help='sequence length (default: 1024 on cuda, 128 on cpu)')
    p.add_argument('--batch', type=int, help='sequences per step (default: 16 on cuda, 8 on cpu)')
    p.add_argument('--vocab', type=int, default=50257)
    p.add_argument('--dtype', choices=DTYPES, help='autocast dtype (default: bfloat16 on cuda, float32 on cpu)')
    p.add_argument('--compile', type=int, help='torch.compile both models, 1 or 0 (default: 1 on cuda, 0 on cpu)')
    p.add_argument('--dropout', type=float, default=0.0)
    p.add_argument('--steps', type=int, default=20, help='timed steps per model')
    p.add_argument('--warmup', type=int, default=5, help='untimed steps first (compilation, allocator, autotune)')
    p.add_argument('--impls', default='mingpt,hf,trainer', help='which rows, comma-separated')
    p.add_argument('--rounds', type=int, default=3, help='processes per contender, in turns')
    p.add_argument('--worker', choices=ROWS, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    cuda = a.device.startswith('cuda')
    a.model = a.model or ('gpt2' if cuda else 'gpt-mini')
    a.block = a.block or (1024 if cuda else 128)
    a.batch = a.batch or (16 if cuda else 8)
    a.dtype = a.dtype or ('bfloat16' if cuda else 'float32')
    a.compile = bool(cuda if a.compile is None else a.compile)
    return a


def mingpt_model(a):
    c = GPT.get_default_config()
    c.model_type, c.vocab_size, c.block_size = a.model, a.vocab, a.block
    c.embd_pdrop = c.resid_pdrop = c.attn_pdrop = a.dropout
    return GPT(c)


def shape_only(a):
    """mingpt's model for these options on the meta device: its config and parameter count, and no memory."""
    with torch.device('meta'):
        return mingpt_model(a)


def hf_model(a, ref):
    from transformers import GPT2Config, GPT2LMHeadModel
    c = ref.config
    config = GPT2Config(vocab_size=a.vocab, n_positions=a.block, n_embd=c.n_embd, n_layer=c.n_layer, n_head=c.n_head,
                        resid_pdrop=a.dropout, embd_pdrop=a.dropout, attn_pdrop=a.dropout, tie_word_embeddings=True,
                        attn_implementation='sdpa')  # PyTorch's fused attention (flash on a GPU), as mingpt's
    return GPT2LMHeadModel(config)


def adamw(model, device):
    """The optimizer mingpt's configure_optimizers makes (decay on matrices, fused), for any model."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{'params': [p for p in params if p.dim() >= 2], 'weight_decay': 0.1},
              {'params': [p for p in params if p.dim() < 2], 'weight_decay': 0.0}]
    return torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), fused=device.type in ('cuda', 'cpu'))


def sync(device):
    if device.type == 'cuda':
        torch.cuda.synchronize()


def time_steps(step, a, device):
    for _ in range(a.warmup):
        step()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    sync(device)
    return (time.perf_counter() - t0) / a.steps


def bench_loop(name, model, a, device):
    """Seconds per train step of model on random tokens, the step written out once for both models."""
    model.to(device).train()
    opt = adamw(model, device)
    fwd = torch.compile(model) if a.compile else model
    x = torch.randint(a.vocab, (a.batch, a.block), device=device)
    y = torch.randint(a.vocab, (a.batch, a.block), device=device)
    is_hf = name == 'hf'

    def step():
        with torch.autocast(device.type, dtype=DTYPES[a.dtype], enabled=a.dtype != 'float32'):
            if is_hf:
                logits = fwd(input_ids=x).logits
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
            else:
                loss = fwd(x, y)[1]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return time_steps(step, a, device)


def bench_trainer(model, a, device):
    """Seconds per iteration of mingpt.Trainer, timed by a callback over the steps after warm-up."""
    ids = np.random.default_rng(0).integers(a.vocab, size=a.batch * a.block * 8, dtype=np.uint16)
    tc = Trainer.get_default_config()
    tc.merge_from_dict(dict(device=str(device), max_iters=a.warmup + a.steps, batch_size=a.batch, quiet=True,
                            dtype=a.dtype, compile=a.compile, tf32=True))
    trainer = Trainer(tc, model, TokenDataset(ids, a.block, vocab_size=a.vocab))
    marks = {}

    def on_batch_end(t):
        if t.iter_num + 1 in (a.warmup, a.warmup + a.steps):
            sync(device)
            marks[t.iter_num + 1] = time.perf_counter()
    trainer.add_callback('on_batch_end', on_batch_end)
    trainer.run()
    return (marks[a.warmup + a.steps] - marks[a.warmup]) / a.steps


def worker(impl, a):
    """Runs in its own process: build, warm up, time; prints seconds per step and what the device is as JSON."""
    device = torch.device(a.device)
    torch.manual_seed(0)
    if device.type == 'cuda':
        torch.set_float32_matmul_precision('high')  # TF32 for what stays in float32
    if impl == 'trainer':
        dt = bench_trainer(mingpt_model(a), a, device)
    else:
        model = mingpt_model(a) if impl == 'mingpt' else hf_model(a, shape_only(a))
        dt = bench_loop(impl, model, a, device)
    cuda = device.type == 'cuda'
    where = torch.cuda.get_device_name(device) if cuda else f"{cpu_name()}, {torch.get_num_threads()} threads"
    print(json.dumps(dict(seconds=dt, device=where, peak=peak_flops(device) if cuda else None)))


def table(runs, tokens_per_step, per_token, peak):
    """The Markdown table of the workers' results: each row's median and spread, MFU and ratio of medians to HF."""
    base = statistics.median(r['seconds'] for r in runs['hf']) if 'hf' in runs else None
    lines = ["| implementation | ms/step (median, spread) | tokens/s (median, spread) | MFU | vs HF |",
             "|---|---:|---:|---:|---:|"]
    for impl, results in runs.items():
        seconds = [r['seconds'] for r in results]
        dt = statistics.median(seconds)
        tok_s = [tokens_per_step / s for s in seconds]
        mfu = f"{per_token * tokens_per_step / dt / peak:.1%}" if peak else '-'
        ratio = f"{base / dt:.2f}x" if base else '-'
        lines.append(f"| {ROWS[impl]} | {dt * 1e3:,.1f}{spread([s * 1e3 for s in seconds], ',.1f')} | "
                     f"{tokens_per_step / dt:,.0f}{spread(tok_s)} | {mfu} | {ratio} |")
    return '\n'.join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    if a.worker:
        return worker(a.worker, a)
    impls = a.impls.split(',')
    unknown = [impl for impl in impls if impl not in ROWS]
    if unknown:
        raise SystemExit(f"unknown impl {unknown[0]!r}: choose from {', '.join(ROWS)}")
    ref = shape_only(a)  # the parent never touches the device: that is the workers'
    per_token = flops_per_token(ref, a.block)
    print(f"model {a.model} ({ref.num_parameters() / 1e6:.1f}M params), batch {a.batch} x block {a.block}, vocab "
          f"{a.vocab}, {a.dtype}, compile={a.compile}, dropout {a.dropout}; {a.warmup} warm-up + {a.steps} timed "
          f"steps; {per_token / 1e6:.1f} MFLOP/token (PaLM: 6N + 12LHQT); {a.rounds} rounds, each contender in its "
          "own process, in turns", flush=True)
    runs = {impl: [] for impl in impls}
    for r in range(a.rounds):
        for impl in impls[r % len(impls):] + impls[:r % len(impls)]:
            cmd = [sys.executable, __file__, *argv, '--worker', impl]
            runs[impl].append(run_worker(cmd, ROWS[impl]))
            print(f"round {r + 1}/{a.rounds}: {ROWS[impl]}, {1e3 * runs[impl][-1]['seconds']:.1f} ms/step",
                  file=sys.stderr, flush=True)
    first = next(iter(runs.values()))[0]
    print(f"\n{datetime.date.today()}, {first['device']}, torch {torch.__version__}\n")
    print(table(runs, a.batch * a.block, per_token, first['peak']))


if __name__ == '__main__':
    main()
