"""
mingpt against Hugging Face's GPT2LMHeadModel on identical shapes, in one run: training-step and generation
tokens/s, plus this machine's limits measured in the same run (memory read bandwidth, fp32 matmul rate) and each
figure as a fraction of its limit.

    python bench/bench_model.py                 # 2 threads, fp32, random weights, tied embeddings on both sides
    python bench/bench_model.py --quick         # fewer repeats, to check that it runs

Run it on an otherwise idle machine: a second busy process makes the numbers worthless.
"""
import argparse
import statistics
import time

import torch

from mingpt.model import GPT, Linear


def median_time(fn, repeats, warmup=2):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved(fns, repeats, warmup=2):
    """Median seconds of each function, timed in turns, so that a drift in machine speed (these machines drift
    by +-30% over minutes) hits all of them alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(median_time(fn, 1, warmup=0))
    return {name: statistics.median(t) for name, t in times.items()}


PROBE_BYTES = 512 * 1024 ** 2  # far larger than any cache


def read_probe():
    """A function that reads PROBE_BYTES once, as fast as torch can stream memory."""
    x = torch.ones(PROBE_BYTES // 4)
    return lambda: x.sum()


@torch.no_grad()
def machine_limits(repeats):
    read_bw = PROBE_BYTES / median_time(read_probe(), repeats)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    matmul = 2 * 2048 ** 3 / median_time(lambda: a @ b, repeats)
    return read_bw, matmul


def per_matrix_fns(model):
    """Two floors for batch-1 generation, one token each: every Linear once on one row (the matmuls alone), and a
    plain read (sum) of every weight matrix (what any code making one torch op per matrix pays just to read them:
    each op starts cold, so this takes longer than the bytes at the 512 MiB read's rate)."""
    linears = [m for m in model.modules() if isinstance(m, Linear)]
    xs = {m.in_features: torch.randn(1, m.in_features) for m in linears}
    return {'matmuls': lambda: [m(xs[m.in_features]) for m in linears],
            'reads': lambda: [m.weight.sum() for m in linears]}


def build_pair(n_layer, n_head, n_embd, vocab, block, dropout):
    """Our GPT and HF's GPT2LMHeadModel with the same random weights (through save_pretrained)."""
    import tempfile
    from transformers import GPT2LMHeadModel
    C = GPT.get_default_config()
    C.merge_from_dict(dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, vocab_size=vocab, block_size=block,
                           embd_pdrop=dropout, resid_pdrop=dropout, attn_pdrop=dropout))
    ours = GPT(C)
    with tempfile.TemporaryDirectory() as d:
        ours.save_pretrained(d)
        hf = GPT2LMHeadModel.from_pretrained(d, attn_implementation='sdpa')
    assert hf.lm_head.weight is hf.transformer.wte.weight
    return ours, hf


def train_step_rate(ours, hf, batch, block, vocab, repeats):
    tc = type('TC', (), dict(learning_rate=3e-4, betas=(0.9, 0.95), weight_decay=0.1))
    x = torch.randint(0, vocab, (batch, block))
    y = torch.randint(0, vocab, (batch, block))
    ours.train()
    hf.train()
    opt_ours = ours.configure_optimizers(tc)
    decay = [p for p in hf.parameters() if p.dim() >= 2]
    rest = [p for p in hf.parameters() if p.dim() < 2]
    opt_hf = torch.optim.AdamW([{'params': decay, 'weight_decay': 0.1}, {'params': rest, 'weight_decay': 0.0}],
                               lr=3e-4, betas=(0.9, 0.95))  # what a Hugging Face user gets by default

    def train_step(model, optimizer, loss_of):
        def step():
            loss = loss_of()
            model.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        return step

    step_ours = train_step(ours, opt_ours, lambda: ours(x, y)[1])
    step_hf = train_step(hf, opt_hf, lambda: hf(input_ids=x, labels=y).loss)  # HF shifts labels inside: same work

    t = interleaved({'ours': step_ours, 'hf': step_hf}, repeats)
    return batch * block / t['ours'], batch * block / t['hf']


@torch.no_grad()
def generate_times(ours, hf, batch, prompt, new, vocab, repeats, extra=None):
    """Seconds per run of both, of the 512 MiB read probe (for batch 1's bound) and of any extra functions, all
    timed in turns."""
    ours.eval()
    hf.eval()
    idx = torch.randint(0, vocab, (batch, prompt))
    return interleaved({'ours': lambda: ours.generate(idx, new), 'probe': read_probe(),
                        'hf': lambda: hf.generate(idx, attention_mask=torch.ones_like(idx), max_new_tokens=new,
                                                  min_new_tokens=new, do_sample=False, pad_token_id=0),
                        **(extra or {})}, repeats, warmup=1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--threads', type=int, default=2)
    p.add_argument('--quick', action='store_true')
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    reps = 3 if args.quick else 6
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {args.threads} threads, fp32")

    read_bw, matmul = machine_limits(reps)
    print(f"machine: memory read {read_bw / 1e9:.1f} GB/s, fp32 matmul {matmul / 1e9:.1f} GFLOP/s\n")
    print(f"{'workload':52s} {'mingpt tok/s':>13s} {'HF tok/s':>10s} {'ratio':>7s}  limit", flush=True)

    def row(name, o, h, note=''):  # printed as soon as measured
        print(f"{name:52s} {o:13,.0f} {h:10,.0f} {o / h:6.2f}x  {note}", flush=True)

    ours, hf = build_pair(6, 6, 192, 65, 128, 0.1)  # gpt-mini, characters
    o, h = train_step_rate(ours, hf, 32, 128, 65, 3 * reps)  # a step takes <1 s: more repeats, less noise
    row('train gpt-mini char, batch 32 x 128', o, h)

    ours, hf = build_pair(12, 12, 768, 50257, 1024, 0.1)  # the 124M shape
    n = ours.num_parameters() - ours.transformer.wpe.weight.numel()  # wpe is looked up, not multiplied
    L, Cd, T = 12, 768, 256
    flops_per_token = 6 * n + 12 * L * Cd * T  # PaLM: 6N plus attention's 12 L H Q T (H Q = n_embd)
    o, h = train_step_rate(ours, hf, 4, T, 50257, max(2, reps // 2))
    row('train 124M, batch 4 x 256', o, h, f"{o * flops_per_token / matmul:.0%} of matmul rate")

    weight_bytes = n * 4  # each new token reads every weight once (batch 1 is bound by that)
    for batch in (1, 8):
        # (greedy tokens of random-weight models are not compared: near-uniform logits make argmax ties)
        extra = per_matrix_fns(ours) if batch == 1 else None
        t = generate_times(ours, hf, batch, 16, 128, 50257, reps if batch == 1 else max(3, reps // 2), extra)
        o, h = batch * 128 / t['ours'], batch * 128 / t['hf']
        note = ''
        if batch == 1:
            bw = PROBE_BYTES / t['probe']
            bound = bw / weight_bytes  # tokens/s if every weight streamed at the probe's rate
            note = (f"{o / bound:.0%} of bandwidth bound ({bw / 1e9:.1f} GB/s between the runs); reading each "
                    f"weight matrix alone reaches {1 / t['reads'] / bound:.0%}, the matmuls alone "
                    f"{1 / t['matmuls'] / bound:.0%}")
        row(f"generate 124M, batch {batch}, 16 -> +128", o, h, note)


if __name__ == '__main__':
    main()
