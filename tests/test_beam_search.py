"""Beam search against exhaustive search over every continuation of a tiny model, and against greedy decoding."""
import itertools

import pytest
import torch

from mingpt.model import GPT
from mingpt.sampling import beam_search

V, STEPS = 5, 3


def tiny_model(block_size=8, seed=0):
    torch.manual_seed(seed)
    C = GPT.get_default_config()
    C.merge_from_dict(dict(n_layer=2, n_head=2, n_embd=16, vocab_size=V, block_size=block_size))
    model = GPT(C).eval()
    with torch.no_grad():
        for p in model.parameters():  # larger weights: peaked, varied next-token distributions
            p.mul_(8)
    return model


def logprob(model, prompt, continuation):
    """Sum of the log-probs of continuation after prompt, from one plain forward pass (no cache)."""
    seq = torch.tensor([prompt + list(continuation)])
    logits, _ = model(seq[:, :-1])
    logp = logits[0, len(prompt) - 1:].log_softmax(-1)
    return logp.gather(1, torch.tensor(continuation)[:, None]).sum().item()


def all_continuations(model, prompt, eos=None):
    """Every distinct continuation of STEPS tokens (cut after the first eos) with its log-prob, best first; one
    batched forward pass over all V ** STEPS sequences."""
    conts = torch.tensor(list(itertools.product(range(V), repeat=STEPS)))
    logits, _ = model(torch.cat([torch.tensor([prompt]).expand(len(conts), -1), conts], dim=1)[:, :-1])
    logp = logits[:, len(prompt) - 1:].log_softmax(-1).gather(2, conts[..., None])[..., 0].cumsum(1)
    seen = {}
    for c, running in zip(conts.tolist(), logp.tolist()):
        n = c.index(eos) + 1 if eos in c else STEPS
        seen[tuple(c[:n])] = running[n - 1]
    return sorted(seen.items(), key=lambda kv: -kv[1])


PROMPT = [1, 3]


def test_full_width_beam_is_exhaustive_search():
    model = tiny_model()
    exhaustive = all_continuations(model, PROMPT)
    seqs, scores = beam_search(model, torch.tensor([PROMPT]), STEPS, num_beams=V ** STEPS)
    assert seqs.shape == (V ** STEPS, len(PROMPT) + STEPS)
    assert tuple(seqs[0, len(PROMPT):].tolist()) == exhaustive[0][0]
    assert scores[0].item() == pytest.approx(exhaustive[0][1], rel=1e-5, abs=1e-5)
    # and every sequence with its log-prob, in the same order
    assert scores.tolist() == pytest.approx([s for _, s in exhaustive], rel=1e-5, abs=1e-5)
    assert {tuple(s[len(PROMPT):].tolist()) for s in seqs} == {c for c, _ in exhaustive}


def test_one_beam_is_greedy():
    model = tiny_model()
    idx = torch.tensor([PROMPT])
    seqs, _ = beam_search(model, idx, 6, num_beams=1)
    assert torch.equal(seqs, model.generate(idx, 6))


def test_beyond_block_size_the_window_slides():
    model = tiny_model(block_size=4)
    idx = torch.tensor([PROMPT + [0]])
    seqs, _ = beam_search(model, idx, 5, num_beams=1)  # 3 + 5 tokens > block_size 4
    assert torch.equal(seqs, model.generate(idx, 5))


def test_scores_are_the_beams_log_probs():
    model = tiny_model(seed=1)
    seqs, scores = beam_search(model, torch.tensor([PROMPT]), STEPS, num_beams=4)
    best = all_continuations(model, PROMPT)[0][1]
    assert scores.tolist() == sorted(scores.tolist(), reverse=True) and scores[0].item() <= best + 1e-5
    for seq, score in zip(seqs, scores):  # the reordered KV caches gave each beam its own history
        assert logprob(model, PROMPT, seq[len(PROMPT):].tolist()) == pytest.approx(score.item(), rel=1e-5, abs=1e-5)


def test_eos_finishes_a_beam():
    model = tiny_model(seed=2)
    eos = 0
    exhaustive = all_continuations(model, PROMPT, eos=eos)
    seqs, scores = beam_search(model, torch.tensor([PROMPT]), STEPS, num_beams=V ** STEPS, eos_token_id=eos)
    assert scores.tolist() == pytest.approx([s for _, s in exhaustive], rel=1e-5, abs=1e-5)
    for seq, (cont, _) in zip(seqs, exhaustive):
        assert seq[len(PROMPT):len(PROMPT) + len(cont)].tolist() == list(cont)
        assert (seq[len(PROMPT) + len(cont):] == eos).all()  # padded with eos after the end


def test_bad_arguments():
    model = tiny_model()
    with pytest.raises(ValueError, match='one prompt'):
        beam_search(model, torch.tensor([PROMPT, PROMPT]), 2, 2)
    with pytest.raises(ValueError, match='block_size'):
        beam_search(model, torch.zeros(1, 9, dtype=torch.long), 2, 2)
    with pytest.raises(ValueError, match='num_beams'):
        beam_search(model, torch.tensor([PROMPT]), 2, 0)
