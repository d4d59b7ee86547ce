"""
Generate text from a GPT: OpenAI's GPT-2 (downloaded once), a Hugging Face GPT-2 directory (with its own tokenizer
if it has one: tokenizer.json, or vocab.json and merges.txt), a checkpoint that projects/chargpt.py saved (then
with its own vocabulary: characters or a byte-level BPE), or a language model that sentiment.py pretrained (its
model.pt, with its cut-down vocabulary: a sample is a sentence). A sample ends at <|endoftext|>
(--stop_at_eos=False runs to --max_new_tokens), and an empty prompt starts from it; for a Hugging Face directory, at the
eos_token_id (any of a list) its generation_config.json (else config.json) names, and from its bos_token_id, where
transformers' generate stops and starts too. Where the directory names none, or an id that is not one of its tokenizer's
special tokens (GPT2Config's 50256 in a vocabulary of another size), <|endoftext|> stands in: transformers' generate
would run on to max_new_tokens there (and refuse an empty prompt); GPT.save_pretrained(folder, eos_token_id=...) names
the right one.

    python projects/generate.py --prompt "The meaning of life is"
    python projects/generate.py --model=gpt2-medium --prompt "Once upon a time" --top_p=0.9 --num_samples=3
    python projects/generate.py --model=out/chargpt/model.pt --prompt "ROMEO:" --max_new_tokens=500
    python projects/generate.py --prompt_file=prompts.txt --batch_size=8 --greedy --compile
    python projects/generate.py --prompt "Hello, I am" --num_beams=5 --max_new_tokens=40
    python projects/generate.py --prompt "The meaning of life is" --show_next=10 --temperature=0.7 --top_p=0.9
    python projects/generate.py --help

Options are written --section.key=value as in every project; a key that is unique may be given alone
(--prompt "..." is --sample.prompt="..."). Sampling is the default (temperature, top_k, top_p); --greedy picks the
most probable token each step; --num_beams=k > 1 runs beam search (the k most probable sequences; printed at the
end, since the best beam is known only then). --show_next=N shows one decoding step instead: the N likeliest next
tokens, each one's probability from the model, at the temperature, and as sampling draws it (top_k and top_p cut
the rest, and what they keep is scaled up to sum to 1); greedy decoding takes the first.

--prompt_file holds one prompt per line. Prompts (and their samples) run in batches of --batch_size rows of
different lengths, each row with the logits it would have alone (greedy gives the same text; sampling draws every
row from one random stream, so --batch_size=1 gives a prompt its own draws); beam search takes the prompts one at a
time, its --num_beams beams the rows of its batch, and so refuses --batch_size. Each completion is printed under its
prompt once its batch is done (or stopped: Ctrl-C prints the batch's text so far, and names the first prompt not
generated). A batch of one row prints its text as it is generated. --compile compiles the decode step
(mingpt/engine.py; on CUDA as a CUDA graph): it costs seconds to minutes once per batch shape, before the clock
starts, and pays off over many tokens. Generated text goes to stdout (on a terminal, control characters other than
newline and tab, and the invisible bidirectional controls, shown as escapes, '\\x1b', '\\r', '\\u202e', so that a
stray one cannot garble or reorder the screen; to a file or a pipe, as written); everything else, ending with the
tokens/s and the time to the first token, to stderr.
"""
import codecs
import contextlib
import os
import re
import statistics
import sys
import time

import torch

from mingpt.bpe import ENDOFTEXT, Encoder, token_repr
from mingpt.data import read_text
from mingpt.engine import Engine
from mingpt.plot import columns
from mingpt.pretrained import Vocabulary, hf_generation_ids, load_model_and_tokenizer, warn_if_unknown
from mingpt.sampling import beam_search, check_sampling, sampling_probs
from mingpt.utils import (CfgNode as CN, ConfigError, bfloat16_emulated, check_range, plural, refuse_ignored,
                          resolve_device, run_cli, set_seed)

DTYPES = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}


def get_config():
    C = CN()
    C.system = CN()
    C.system.seed = 1337
    C.system.device = 'auto'  # 'auto' (cuda, then mps, then cpu), 'cpu', 'cuda', 'cuda:1', 'mps'
    C.system.dtype = 'auto'  # 'auto' (bfloat16 from Ampere on, float16 on a V100/T4, else float32), 'float32', ...
    C.system.compile = False  # compile the decode step (torch.compile; CUDA graphs on CUDA)
    C.model = 'gpt2'  # a hub id (gpt2, gpt2-medium, gpt2-large, gpt2-xl), an HF directory, or a .pt checkpoint
    C.sample = CN()
    C.sample.prompt = ''  # empty: start from <|endoftext|> (or a folder's bos_token_id) or a newline (characters)
    C.sample.prompt_file = None  # a file of prompts, one per line, instead
    C.sample.batch_size = 8  # rows generated together (prompts times samples); beam search: one prompt at a time
    C.sample.max_new_tokens = 100
    C.sample.num_samples = 1  # per prompt
    C.sample.temperature = 1.0
    C.sample.top_k = None  # sample only among the k most probable tokens
    C.sample.top_p = None  # sample only among the most probable tokens that hold probability p (nucleus)
    C.sample.greedy = False  # always the most probable token (no randomness)
    C.sample.num_beams = 1  # > 1: beam search with this many beams
    C.sample.stop_at_eos = True  # stop a sample at <|endoftext|>, or the end token a model folder's config names
    C.sample.show_next = 0  # N > 0: instead of generating, show the N likeliest next tokens and how sampling sees them
    return C


def check(config):
    S = config.sample
    for key in ('batch_size', 'max_new_tokens', 'num_samples', 'num_beams'):
        check_range(f'sample.{key}', getattr(S, key), 1, integer=True)
    check_range('sample.show_next', S.show_next, 0, integer=True)
    chosen = '--greedy' if S.greedy else f'--num_beams={S.num_beams}' if S.num_beams > 1 else None
    if S.greedy and S.num_beams > 1:
        raise ConfigError("--greedy and --num_beams > 1 are two ways of decoding: give one")
    sampling = [f'--{k}' for k in ('top_k', 'top_p') if getattr(S, k) is not None] + \
        (['--temperature'] if S.temperature != 1.0 else [])
    if chosen and sampling:
        raise ConfigError(f"{chosen} decodes without sampling, so {', '.join(sampling)} would be ignored: drop "
                          f"{'them' if len(sampling) > 1 else 'it'}, or drop {chosen} to sample")
    if not chosen:
        check_sampling(S.temperature, S.top_k, S.top_p, prefix='sample.')
    if config.system.dtype not in ('auto', *DTYPES):
        raise ConfigError(f"system.dtype={config.system.dtype!r} is not one of: auto, {', '.join(DTYPES)}")
    if S.num_beams > 1 and S.num_samples > S.num_beams:
        raise ConfigError(f"beam search keeps sample.num_beams={S.num_beams} sequences, fewer than "
                          f"sample.num_samples={S.num_samples}: raise num_beams or lower num_samples")
    if S.show_next and S.num_beams > 1:
        raise ConfigError("sample.show_next shows one step of sampling or greedy decoding, not of beam search "
                          f"(sample.num_beams={S.num_beams}): drop one of the two")
    if S.prompt and S.prompt_file:
        raise ConfigError("give sample.prompt or sample.prompt_file, not both")
    if S.num_beams > 1:
        refuse_ignored('sample', S, get_config().sample, ['batch_size'], f"beam search (sample.num_beams="
                       f"{S.num_beams}) takes the prompts one at a time, its beams the rows of its batch: drop "
                       "--batch_size, or drop --num_beams to sample or decode greedily in batches")
    if config.system.compile and S.num_beams > 1:
        raise ConfigError(f"system.compile=True compiles sampling and greedy decoding, not beam search "
                          f"(sample.num_beams={S.num_beams}): drop one of the two")
    if config.system.compile and S.show_next:
        raise ConfigError("system.compile=True compiles the decoding loop, and sample.show_next shows one step of it "
                          "without generating: drop one of the two")


def load(name, device, dtype):
    """(model, tokenizer) for a hub id, a Hugging Face directory, or a mingpt checkpoint file (its own tokenizer:
    chargpt's characters or BPE vocabulary), on device in dtype."""
    with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the generated text
        # GPT-2's weights converted as they load
        model, tokenizer, note = load_model_and_tokenizer(name, dtype, with_note=True)
        if note:
            print(note)
    return model.to(device), tokenizer


def is_bpe(tokenizer):
    return isinstance(tokenizer, Encoder)


def encode(tokenizer, text, start=None):
    """The prompt's ids; an empty prompt is the token start (see start_and_ends)."""
    if text:
        ids = tokenizer.encode(text, allowed_special=True) if is_bpe(tokenizer) else tokenizer.encode(text)
        warn_if_unknown(tokenizer, ids)
        return ids
    if start is None:
        raise ConfigError("this model needs a prompt (--prompt=...): its vocabulary has no <|endoftext|> or newline "
                          "to start from")
    return [start]


def start_and_ends(name, tokenizer):
    """(start, ends): the id an empty prompt starts from, and the ids that end a sample. A Hugging Face folder's
    bos_token_id and eos_token_id (hf_generation_ids), where transformers' generate starts and stops, count where
    they are the tokenizer's special tokens: GPT2Config names 50256 whatever the vocabulary, an id past a smaller one,
    and in a vocabulary trained here past 50256 tokens an ordinary piece of text. Else a BPE starts and ends at its
    <|endoftext|> (where transformers' generate differs, the module's docstring says), as sentiment.py's vocabularies
    do (each text it pretrains on follows one); characters start from a newline and never end early."""
    if isinstance(tokenizer, Vocabulary):
        return tokenizer.eot, [tokenizer.eot]
    if not is_bpe(tokenizer):
        return tokenizer.stoi.get('\n'), []
    specials, eot = set(tokenizer.special_tokens.values()), tokenizer.special_tokens.get(ENDOFTEXT)
    bos, eos = hf_generation_ids(name)
    ends = [i for i in eos if i in specials] or ([] if eot is None else [eot])
    return bos if bos in specials else eot, ends


def first_end(ids, ends):
    """Where the first of the end ids is in ids; len(ids) where there is none."""
    return next((i for i, t in enumerate(ids) if t in ends), len(ids))


def left_padded(rows, device):
    """Id lists of different lengths as one batch (B, T), padded on the left, and its attention_mask (None if all
    rows have the same length)."""
    T = max(map(len, rows))
    idx = torch.tensor([[0] * (T - len(r)) + r for r in rows], device=device)
    mask = torch.tensor([[0] * (T - len(r)) + [1] * len(r) for r in rows], device=device)
    return idx, None if mask.all() else mask


def generate_batch(stream, rows, S, ends, device, on_token=None):
    """Generate from the id lists `rows` as one batch; returns each row's new ids (up to and with its end), the seconds
    to the first token, and the KeyboardInterrupt (Ctrl-C, or SIGTERM) that stopped it early, if one did: the ids
    are then those written so far, for the caller to print before it stops. on_token(token id) sees a one-row
    batch's tokens as they come."""
    idx, mask = left_padded(rows, device)
    t0, first, steps, stopped = time.perf_counter(), None, [], None
    try:
        for nxt in stream(idx, S.max_new_tokens, temperature=S.temperature, do_sample=not S.greedy, top_k=S.top_k,
                          top_p=S.top_p, eos_token_id=ends or None, attention_mask=mask):
            if first is None:
                nxt.tolist()  # on a GPU, wait until the token is computed
                first = time.perf_counter() - t0
            steps.append(nxt)
            if on_token:
                on_token(nxt[0].item())
    except KeyboardInterrupt as e:
        stopped = e
    new = torch.cat(steps, dim=1).tolist() if steps else [[] for _ in rows]
    return [r[:first_end(r, ends) + 1] for r in new], first, stopped


def text_of(tokenizer, ids, ends):
    """The text of new ids, cut before the first end id."""
    ids = ids[:first_end(ids, ends)]
    return tokenizer.decode_bytes(ids).decode('utf-8', errors='replace')


# the C0 controls but tab and newline, DEL, and the C1 controls: each can move the cursor, or begin an escape sequence;
# and Unicode's Bidi_Control characters (U+202E, right-to-left override...), invisible, which reorder the rest of the
# line on screen. Other invisible format characters stay: the zero-width joiner and the tags build emoji and flags
CONTROLS = re.compile(r'[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]')


def write(text):
    """Write generated text to stdout. On a terminal a control character (CONTROLS) is written as its escape, '\\x1b',
    '\\r' or '\\u202e': a small model's random bytes could otherwise recolour, clear, garble or reorder the screen. To
    a file or a pipe the text goes as the model wrote it."""
    if sys.stdout.isatty():
        text = CONTROLS.sub(lambda m: m.group().encode('unicode_escape').decode('ascii'), text)
    sys.stdout.write(text)


def streamed(tokenizer, ends):
    """(on_token, finish) for a one-row batch: on_token writes each token's complete characters as they come
    (bytes of a character split across tokens wait for the rest); finish writes what is left and a newline."""
    decoder = codecs.getincrementaldecoder('utf-8')(errors='replace')

    def on_token(token):
        if token not in ends:
            write(decoder.decode(tokenizer.decode_bytes([token])))
            sys.stdout.flush()
    return on_token, lambda: write(decoder.decode(b'', final=True) + '\n')


def header(p, k, n_prompts, n_samples, sample='sample', note=''):
    """'--- prompt 2, sample 1 ---' on stderr, naming only what there is more than one of."""
    parts = [f"{name} {i + 1}" for name, i, n in (('prompt', p, n_prompts), (sample, k, n_samples)) if n > 1]
    if parts:
        print(f"--- {', '.join(parts)}{note} ---", file=sys.stderr, flush=True)


def run_batches(model, tokenizer, prompts, ids, S, ends, engine, device):
    """Sample (or greedy-decode) every prompt num_samples times, batch_size rows at a time, and print each
    completion under its prompt. Returns (new tokens, seconds generating, seconds to the first token per batch)."""
    jobs = [(p, k) for p in range(len(prompts)) for k in range(S.num_samples)]
    n_tokens, seconds, firsts, compiled = 0, 0.0, [], set()
    for start in range(0, len(jobs), S.batch_size):
        batch = jobs[start:start + S.batch_size]
        rows = [ids[p] for p, _ in batch]
        shape = (len(rows), max(map(len, rows)))
        if engine and shape not in compiled:  # compile before the clock starts
            t0 = time.perf_counter()
            idx, mask = left_padded(rows, device)
            engine.warm_up(idx, S.max_new_tokens, attention_mask=mask)
            compiled.add(shape)
            print(f"(compiled the decode step for {shape[0]} x {shape[1]} in {time.perf_counter() - t0:.1f} s)",
                  file=sys.stderr)
        on_token = finish = None
        if len(rows) == 1:  # one row: its text as it comes
            header(*batch[0], len(prompts), S.num_samples)
            write(prompts[batch[0][0]])
            sys.stdout.flush()
            on_token, finish = streamed(tokenizer, ends)
        t0 = time.perf_counter()
        new, first, stopped = generate_batch(engine.generate_stream if engine else model.generate_stream, rows, S,
                                             ends, device, on_token)
        seconds += time.perf_counter() - t0
        n_tokens += sum(map(len, new))
        firsts.append(first)
        if finish:
            finish()
        else:
            for (p, k), row in zip(batch, new):
                cut = stopped and first_end(row, ends) == len(row)  # a row that ended was complete before the stop
                header(p, k, len(prompts), S.num_samples, note=' (interrupted)' if cut else '')
                write(prompts[p] + text_of(tokenizer, row, ends) + '\n')
        if stopped:  # the batch's text so far is printed: now stop, as Ctrl-C asked
            if start + len(batch) < len(jobs):  # else the output of a long prompt file just ends, as if complete
                p, k = jobs[start + len(batch)]
                sample = f", sample {k + 1} of {S.num_samples}" if S.num_samples > 1 else ''
                print(f"(stopped before prompt {p + 1} of {len(prompts)}{sample}: nothing from there on was "
                      "generated)", file=sys.stderr)
            raise stopped
    return n_tokens, seconds, firsts


def run_beams(model, tokenizer, prompts, p, ids, S, ends, device):
    """Beam search for prompt p: print the best num_samples beams, best first. Returns the best beam's length."""
    try:
        seqs, scores = beam_search(model, torch.tensor([ids], device=device), S.max_new_tokens, S.num_beams,
                                   eos_token_id=ends or None)
    except KeyboardInterrupt:  # the beams come out only when their search ends: say which one was cut short
        print(f"(stopped during the beam search of prompt {p + 1} of {len(prompts)}: nothing from there on was "
              "generated)", file=sys.stderr)
        raise
    for i, (seq, score) in enumerate(list(zip(seqs, scores))[:S.num_samples]):
        header(p, i, len(prompts), S.num_samples, 'beam', f" (log-prob {score.item():.2f})")
        write(prompts[p] + text_of(tokenizer, seq[len(ids):].tolist(), ends) + '\n')
    best = seqs[0, len(ids):].tolist()
    return min(first_end(best, ends) + 1, len(best))


def show_next(model, tokenizer, prompt, ids, S, device):
    """One decoding step of the lecture, for prompt (its ids): a table of the S.show_next likeliest next tokens."""
    with torch.no_grad():
        logits = model.next_token_logits(torch.tensor([ids], device=device))[0].float()
    p, at_t = logits.softmax(-1), sampling_probs(logits[None], S.temperature)[0]
    drawn = sampling_probs(logits[None], S.temperature, S.top_k, S.top_p)[0]
    print(f"after {prompt!r} (temperature {S.temperature}, top_k {S.top_k}, top_p {S.top_p}): sampling draws from "
          f"{int((drawn > 0).sum()):,} of the {len(p):,} tokens; greedy decoding takes rank 1")
    top = p.topk(min(S.show_next, len(p))).indices.tolist()
    tokens = [token_repr(tokenizer.decode_bytes([i])) for i in top]  # a piece of a character as its bytes
    width = max(16, *map(columns, tokens))  # GPT-2 has tokens such as ' irregularities': the columns make room
    print(f"{'rank':>4}  {'token':<{width}} {'p':>7} {'p at T':>7} {'drawn':>7}")
    for rank, (i, token) in enumerate(zip(top, tokens), 1):
        pad = ' ' * (width - columns(token))  # by columns on screen: '猫' takes two, an accent alone none
        print(f"{rank:>4}  {token}{pad} {shown(p[i]):>7} {shown(at_t[i]):>7} {shown(drawn[i]):>7}")


def shown(prob):
    """A probability to 4 decimals, or in scientific notation where those would read 0.0000 for a token that can be
    drawn: a model near uniform over GPT-2's 50,257 tokens (newly fine-tuned, or at a high temperature) gives each
    2e-5."""
    text = f'{prob:.4f}'
    return f'{prob:.1e}' if text == '0.0000' and prob > 0 else text


def read_prompts(S):
    """The prompts, and each one's line number in the prompt file (None for --prompt): blank lines are skipped."""
    if not S.prompt_file:
        return [S.prompt or ''], [None]  # --prompt=None as the empty prompt
    if not os.path.exists(S.prompt_file):
        raise ConfigError(f"sample.prompt_file={S.prompt_file}: there is no such file; give the path of a text file "
                          "with one prompt per line")
    # split at newlines only, as an editor numbers lines (splitlines also splits at form feeds and the like)
    numbered = [(line, n) for n, line in enumerate(read_text(S.prompt_file).split('\n'), 1) if line.strip()]
    if not numbered:
        raise ConfigError(f"sample.prompt_file={S.prompt_file} holds no prompt; write one prompt per line")
    return [line for line, _ in numbered], [n for _, n in numbered]


def encode_prompts(tokenizer, prompts, line_numbers, prompt_file, start):
    """Every prompt's ids. A character model refuses characters it has never seen: the error names the first
    such line of the prompt file, and the others, so that one run finds them all."""
    ids, bad = [], []
    for prompt, n in zip(prompts, line_numbers):
        try:
            ids.append(encode(tokenizer, prompt, start))
        except ValueError as e:
            if n is None:
                raise
            bad.append((n, e))
    if bad:
        (n, e), more = bad[0], [str(m) for m, _ in bad[1:]]
        also = f" (nor can it read {plural(len(more), 'line')} {', '.join(more)})" if more else ''
        raise ValueError(f"{prompt_file}, line {n}: {e}{also}")
    return ids


def auto_dtype(device):
    """bfloat16 on a GPU that computes in it (Ampere and later), float16 on Volta and Turing (a V100, Colab's T4),
    where bfloat16 is emulated, slowly; float32 on older GPUs (a GTX 10xx computes float16 slowly too) and off CUDA."""
    if not device.startswith('cuda'):
        return torch.float32
    if not bfloat16_emulated(device):
        return torch.bfloat16
    return torch.float16 if torch.cuda.get_device_capability(device)[0] >= 7 else torch.float32


def main(argv):
    config = get_config()
    config.merge_from_args(argv, usage=__doc__)
    check(config)
    S = config.sample
    device = resolve_device(config.system.device)
    dtype = config.system.dtype
    dtype = DTYPES[dtype] if dtype != 'auto' else auto_dtype(device)
    prompts, line_numbers = read_prompts(S)
    model, tokenizer = load(config.model, device, dtype)
    start, ends = start_and_ends(config.model, tokenizer)
    ids = encode_prompts(tokenizer, prompts, line_numbers, S.prompt_file, start)
    if max(map(len, ids)) > model.block_size:
        print(f"(a prompt longer than the model's context keeps its last {model.block_size} tokens)", file=sys.stderr)
        ids = [i[-model.block_size:] for i in ids]
    ends = ends if S.stop_at_eos else []
    if S.greedy and S.num_samples > 1:
        print("(greedy decoding gives the same text every time: one sample)", file=sys.stderr)
        S.num_samples = 1
    set_seed(config.system.seed)
    if S.show_next:
        for prompt, i in zip(prompts, ids):
            show_next(model, tokenizer, prompt, i, S, device)
        return
    if S.num_beams > 1:
        t0 = time.perf_counter()
        n_tokens = sum(run_beams(model, tokenizer, prompts, p, i, S, ends, device) for p, i in enumerate(ids))
        print(f"({n_tokens} tokens (the best beams') in {time.perf_counter() - t0:.2f} s on {device}, beam search "
              f"with {S.num_beams} beams)", file=sys.stderr)
        return
    engine = Engine(model, compile=True) if config.system.compile else None
    n_tokens, seconds, firsts = run_batches(model, tokenizer, prompts, ids, S, ends, engine, device)
    over = ' (median over batches)' if len(firsts) > 1 else ''
    print(f"({n_tokens} tokens in {seconds:.2f} s: {n_tokens / seconds:.1f} tokens/s on {device}; first token after "
          f"{statistics.median(firsts):.3f} s{over})", file=sys.stderr)


if __name__ == '__main__':
    run_cli(main)
