"""Pure functions that turn next-token logits into a choice: temperature, top-k, top-p (nucleus), greedy;
and beam search, which keeps the most probable whole sequences instead of choosing one token at a time."""
import math
import sys

import torch

from mingpt.utils import ConfigError, check_range, warn_caller


def top_k_filter(logits, k):
    """Keep the k largest logits of each row, and any equal to the k-th (as Hugging Face's top-k: top_k=1 on tied
    logits samples among them); the rest become -inf (never sampled)."""
    k = min(int(k), logits.size(-1))  # int: a config may hold 40.0
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float('-inf'))


def top_p_filter(logits, p):
    """Keep the smallest set of most probable tokens whose probabilities sum to at least p (always at least one).
    Of tokens tied in probability the lowest id comes first, as greedy's argmax takes it (Hugging Face's
    TopPLogitsWarper keeps the highest id of a tie that p cuts through)."""
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True, stable=True)
    probs = sorted_logits.softmax(dim=-1)
    drop_sorted = (probs.cumsum(dim=-1) - probs) >= p  # the tokens before this one already hold mass p
    drop = drop_sorted.scatter(-1, order, drop_sorted)  # back from sorted order to each token's own place
    return logits.masked_fill(drop, float('-inf'))


def check_sampling(temperature=1.0, top_k=None, top_p=None, prefix='', do_sample=True):
    """Reject settings that would leave no token to sample, naming the option (after prefix, e.g. 'sample.') and
    its range. Greedy decoding (do_sample=False) ignores them but refuses the same values, so that a typo such as
    temperature=-1 is named either way; temperature=0 alone is greedy's own (the limit below), so it passes there."""
    if temperature == 0 and not do_sample:  # greedy's own: no temperature of sampling's to check
        temperature = 1.0
    if temperature == 0:  # what sampling tends to as the temperature falls: the most likely token
        raise ConfigError(f"{prefix}temperature={temperature!r} is out of range: it must be a number > 0 (it divides "
                          "the logits); for greedy decoding, the limit of temperature -> 0, use do_sample=False "
                          "(generate.py: --greedy)")
    # finite: logits / inf are all 0 (a -inf one NaN), uniform sampling that no one asks for by that name
    check_range(f'{prefix}temperature', temperature, low=0, high=math.inf, low_open=True, high_open=True)
    try:
        check_range(f'{prefix}top_k', top_k, low=1, integer=True, none_ok=True)
    except ConfigError as e:  # e.g. top_k=0, which Hugging Face reads as 'off'
        raise ConfigError(f"{e}; None keeps every token (Hugging Face's top_k=0)") from None
    check_range(f'{prefix}top_p', top_p, low=0, high=1, low_open=True, none_ok=True)


def warn_if_ignored(temperature=1.0, top_k=None, top_p=None):
    """Warn of sampling options given to greedy decoding, which has no use for them (as Hugging Face warns): else
    generate(idx, n, temperature=2.0) gives greedy's text as if the temperature did nothing. Values that sampling
    would refuse are refused here too (check_sampling), where Hugging Face only warns."""
    check_sampling(temperature, top_k, top_p, do_sample=False)
    # temperature=0 is not ignored but greedy's own, where sampling's refusal of it sends the caller
    offs = dict(temperature=(1.0, 0), top_k=(None,), top_p=(None,))
    ignored = [name for name, value in (('temperature', temperature), ('top_k', top_k), ('top_p', top_p))
               if value not in offs[name]]
    if ignored:
        one = len(ignored) == 1
        warn_caller(f"{', '.join(ignored)} only shape{'s' * one} sampling, but do_sample=False decodes greedily (the "
                    f"most likely token each step), so {'it is' if one else 'they are'} ignored: pass do_sample=True "
                    f"to sample with {'it' if one else 'them'}")


def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    """The distribution that sampling draws the next token from, (B, V): softmax(logits / temperature) over the
    tokens that top_k and top_p keep (the rest get 0). The order is the lecture's (and Hugging Face's): temperature,
    then top-k, then top-p over the distribution that both left, then softmax."""
    check_sampling(temperature, top_k, top_p)
    # the largest logit becomes 0 first (softmax is unchanged): a tiny temperature then sends the rest to -inf,
    # where logits / temperature alone overflows to inf and softmax of inf - inf is NaN
    logits = (logits - logits.amax(dim=-1, keepdim=True)) / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None and top_p < 1.0:
        logits = top_p_filter(logits, top_p)
    return logits.softmax(dim=-1)


def end_ids(eos_token_id):
    """eos_token_id as the list of ids that end a row: none for None, else one id or each of a list or of an integer
    tensor, 0-d or 1-d (a row ends at any of them, as in Hugging Face's generate, which takes all of these)."""
    given = eos_token_id
    if isinstance(eos_token_id, torch.Tensor):
        if eos_token_id.is_floating_point() or eos_token_id.is_complex() or eos_token_id.dtype == torch.bool:
            raise ValueError(f"eos_token_id={given!r} is a tensor of {eos_token_id.dtype}, not of token ids: give "
                             "an integer tensor (e.g. .long()), a list of ids, or one id")
        if eos_token_id.ndim > 1:
            raise ValueError(f"eos_token_id={given!r} has shape {tuple(eos_token_id.shape)}: give one id (a 0-d "
                             "tensor) or several in a 1-d tensor (e.g. .flatten())")
        eos_token_id = eos_token_id.tolist()  # an int, or a list of them
    several = isinstance(eos_token_id, (list, tuple))
    if several and not eos_token_id:
        raise ValueError(f"eos_token_id={given!r} names no end token: give one id, a list of them, or None (no end)")
    return list(eos_token_id) if several else [] if eos_token_id is None else [eos_token_id]


def sample_next(logits, temperature=1.0, do_sample=False, top_k=None, top_p=None, generator=None):
    """Pick the next token of each row from logits (B, V): the argmax, or a sample after temperature/top-k/top-p."""
    if not do_sample:  # greedy: temperature, top-k and top-p all keep the argmax, so they are not applied
        return logits.argmax(dim=-1, keepdim=True)
    return torch.multinomial(sampling_probs(logits, temperature, top_k, top_p), num_samples=1, generator=generator)


@torch.no_grad()
def beam_search(model, idx, max_new_tokens, num_beams, eos_token_id=None, length_penalty=0.0, attention_mask=None):
    """The num_beams most probable continuations of one prompt idx (1, T), by the sum of their tokens' log-probs.

    At each step every kept sequence is extended by every token; of those candidates the num_beams with the highest
    total log-prob are kept, the rest dropped. A candidate that ends in eos_token_id (or in any of a list of ids)
    is finished and stops growing (it still competes for the final ranking). Finished sequences are ranked by
    sum / (new tokens ** length_penalty): 0 (the default) is the plain sum, larger values favour longer outputs
    (Hugging Face's default is 1). It stops as Hugging Face's early_stopping='never' does, once no live sequence can
    overtake the finished ones (with a length_penalty, at max_new_tokens); Hugging Face's default,
    early_stopping=False, stops by an estimate, so with a length_penalty it can return lower-scoring beams.
    attention_mask (1, T) marks a padded prompt's real tokens (1) and padding (0), as in generate.

    Returns (sequences, scores): (n, T + max_new_tokens) int64 ids (as generate returns, whatever the prompt's integer
    dtype), the prompt as given and then each beam's new tokens, best first, shorter ones padded with eos_token_id
    (the first of a list), and their (n,) scores; n = num_beams, or fewer if fewer exist.
    """
    # check_prompt first: it names an idx that is no tensor, a 1-D one (idx[None]) and a batch of no rows
    prompt, mask = model.check_prompt(idx, attention_mask, eos_token_id)
    if idx.size(0) != 1:
        raise ValueError(f"beam_search takes one prompt, shape (1, T); got {tuple(idx.shape)} (loop over prompts)")
    num_beams = check_range('num_beams', num_beams, low=1, integer=True)  # 4.0 and numpy's 4 as 4
    max_new_tokens = check_range('max_new_tokens', max_new_tokens, low=0, integer=True)
    # finite: a length ** inf is inf (every score -0) or 0 (a division by zero)
    check_range('length_penalty', length_penalty, low=-math.inf, high=math.inf, low_open=True, high_open=True)
    check_length_penalty(length_penalty, max_new_tokens)
    ends = end_ids(eos_token_id)
    T = idx.size(1)
    seqs, scores = prompt, torch.zeros(1, device=idx.device)
    kept = [0.0]  # the live scores, best first, as the host holds them (read with the step's other choices)
    finished = []  # (score for ranking, sequence)
    caches = model.new_caches(1, min(T + max_new_tokens, model.block_size))
    end_tokens = torch.tensor(ends, dtype=torch.long, device=idx.device)  # copied to the device once, not every step
    for step in range(max_new_tokens):
        logprobs = model.next_token_logits(seqs, caches, mask).float().log_softmax(dim=-1)  # (n, V)
        rows, tokens, scores, kept, ended = best_extensions(scores, logprobs, num_beams, end_tokens)
        finished += [(s / (step + 1) ** length_penalty, torch.cat([seqs[row], seqs.new_full((1,), token)]))
                     for row, token, s in ended]
        if not kept:  # every live sequence could only end: none is left to rank as it stands
            seqs = seqs[:0]
            break
        seqs = torch.cat([seqs[rows], tokens[:, None]], dim=1)
        if mask is not None:
            mask = torch.cat([mask[rows], mask.new_ones(len(kept), 1)], dim=1)
        if seqs.size(1) > model.block_size:  # from now on the window slides and is recomputed at each step (see
            caches = []  # next_token_logits): the caches are never read again, so reordering them is wasted work
        for cache in caches:
            cache.select(rows)  # each kept sequence continues from its parent's keys and values
        # log-probs only decrease: once num_beams finished beams score at least the best live one, no live one can
        # overtake them. A length penalty > 0 divides by a growing length, which can raise a score: search every step
        if len(finished) >= num_beams and length_penalty == 0 and \
                sorted(f[0] for f in finished)[-num_beams] >= kept[0]:
            break
    n = seqs.size(1) - T
    finished += [(s / max(n, 1) ** length_penalty, seq) for s, seq in zip(kept, seqs)]
    finished.sort(key=lambda f: -f[0])
    best = finished[:num_beams]
    pad = ends[0] if ends else 0
    out = torch.full((len(best), T + max_new_tokens), pad, dtype=torch.long, device=idx.device)
    out[:, :T] = idx  # a padded prompt as given, as generate returns it
    for r, (_, seq) in enumerate(best):
        out[r, T:seq.numel()] = seq[T:]
    return out, torch.tensor([s for s, _ in best], device=idx.device)


def check_length_penalty(length_penalty, max_new_tokens):
    """Refuse a length_penalty so large that length ** length_penalty leaves the range of a float at a length the
    search can reach (up to max_new_tokens): Python's ** raises a bare OverflowError there (as in Hugging Face's
    beam search), and its reciprocal, 0, a ZeroDivisionError."""
    limit = math.log(sys.float_info.max) / math.log(max_new_tokens) if max_new_tokens > 1 else math.inf
    if abs(length_penalty) >= limit:
        raise ConfigError(f"length_penalty={length_penalty!r} is too large for max_new_tokens={max_new_tokens}: a "
                          f"score divides by (new tokens) ** length_penalty, which leaves the range of a float past "
                          f"|length_penalty| = {limit:.4g}; give a smaller one (Hugging Face's default is 1.0, and 0 "
                          "ranks by log-prob alone)")


def best_extensions(scores, logprobs, num_beams, end_tokens):
    """Of the live sequences, each extended by every token: the num_beams best that do not end in one of end_tokens
    (a tensor of ids, maybe empty) go on, as tensors of rows, tokens and scores (best first), and their scores as a
    list; those that end in one and rank among the best num_beams finish, as a list of (row, token, score). The
    choice is made on the device, where the next step reads it; the host reads the device once, for what it decides
    with (the lists)."""
    vocab_size = logprobs.size(-1)
    candidates = (scores[:, None] + logprobs).view(-1)
    # enough to refill num_beams after eos: each of num_beams rows may end in every end id, so (1 + ids) * num_beams,
    # at least 2 * num_beams, as Hugging Face's
    width = (1 + max(len(end_tokens), 1)) * num_beams
    # the best width and any equal to the last of them, best first; equal scores by row then token, as greedy's
    # argmax takes the lowest id (topk leaves the order of equals unspecified)
    kth = candidates.topk(min(width, candidates.numel())).values[-1]
    top = (candidates >= kth).nonzero()[:, 0]
    top_scores, order = candidates[top].sort(descending=True, stable=True)
    top = top[order]
    # those that may go on, best first: not -inf (a token the model rules out), and not ending in eos
    ends = torch.isin(top % vocab_size, end_tokens)
    may_go_on = top_scores.masked_fill(ends, float('-inf'))
    go_on_scores, go_on = may_go_on.sort(descending=True, stable=True)  # stable: equals stay by row, then token
    # one read; float64 holds the ids exactly
    best = torch.stack([t[:num_beams].double() for t in (go_on_scores, top_scores, top, ends)]).tolist()
    kept, best_scores, best, best_end = best
    kept = [s for s in kept if s > float('-inf')]
    ended = []
    for s, i, end in zip(best_scores, best, best_end):
        row, token = divmod(int(i), vocab_size)
        if end and s > float('-inf'):
            ended.append((row, token, s))
    go_on = top[go_on[:len(kept)]]
    return go_on // vocab_size, go_on % vocab_size, go_on_scores[:len(kept)], kept, ended
