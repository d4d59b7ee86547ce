"""Pure functions that turn next-token logits into a choice: temperature, top-k, top-p (nucleus), greedy."""
import torch


def top_k_filter(logits, k):
    """Keep the k largest logits of each row; the rest become -inf (never sampled)."""
    k = min(k, logits.size(-1))
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float('-inf'))


def top_p_filter(logits, p):
    """Keep the smallest set of most probable tokens whose probabilities sum to at least p (always at least one)."""
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    drop_sorted = (probs.cumsum(dim=-1) - probs) >= p  # the tokens before this one already hold mass p
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float('-inf'))


def sample_next(logits, temperature=1.0, do_sample=False, top_k=None, top_p=None, generator=None):
    """Pick the next token of each row from logits (B, V): the argmax, or a sample after temperature/top-k/top-p."""
    if not do_sample:
        return logits.argmax(dim=-1, keepdim=True)
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 when sampling (got {temperature}); use do_sample=False for greedy")
    logits = logits / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None and top_p < 1.0:
        logits = top_p_filter(logits, top_p)
    return torch.multinomial(logits.softmax(dim=-1), num_samples=1, generator=generator)
