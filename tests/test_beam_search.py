"""Beam search against exhaustive search over every continuation of a tiny model, against greedy decoding, by hand
with a length penalty, and against Hugging Face's; sampling by hand and against Hugging Face's."""
import itertools
import math
import re
import sys

import numpy as np
import pytest
import torch

from mingpt.model import GPT, KVCache
from mingpt.sampling import beam_search, sample_next, sampling_probs
from test_exam import Bigram  # a hand-made model: a fixed table of next-token probabilities after each token
from test_hotpath import HostWaits  # counts where the host waits for the device, by kind and function

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


def test_an_int32_prompt_gives_int64_ids_as_generate_does():
    """generate's torch.cat promotes an int32 prompt to its int64 tokens; beam_search returned the prompt's int32,
    so a student comparing the two decodings got tensors of two dtypes."""
    model = tiny_model()
    idx = torch.tensor([PROMPT], dtype=torch.int32)
    seqs, _ = beam_search(model, idx, 4, num_beams=2)
    greedy = model.generate(idx, 4)
    assert seqs.dtype == greedy.dtype == torch.int64
    assert seqs[:, :len(PROMPT)].tolist() == [PROMPT, PROMPT]


def test_beyond_block_size_the_window_slides():
    model = tiny_model(block_size=4)
    idx = torch.tensor([PROMPT + [0]])
    seqs, _ = beam_search(model, idx, 5, num_beams=1)  # 3 + 5 tokens > block_size 4
    assert torch.equal(seqs, model.generate(idx, 5))


def test_beyond_block_size_the_caches_are_no_longer_reordered(monkeypatch):
    """Past block_size next_token_logits recomputes the sliding window without the caches, yet beam search went on
    copying their rows at every step. Prompt 3 + 5 new tokens, block_size 4: only after the first step (4 tokens,
    read with the caches next) does each of the 2 layers' caches need reordering. The beams' scores are those of an
    uncached loop over the same sliding window."""
    model = tiny_model(block_size=4)
    selected = []
    select = KVCache.select
    monkeypatch.setattr(KVCache, 'select', lambda cache, rows: (selected.append(cache.len), select(cache, rows)))
    idx = torch.tensor([PROMPT + [0]])
    seqs, scores = beam_search(model, idx, 5, num_beams=3)
    assert selected == [3, 3]  # once per layer, after the prompt's 3 tokens went through
    for seq, score in zip(seqs, scores):
        logprobs = [model.next_token_logits(seq[None, :t]).log_softmax(-1)[0, seq[t]].item() for t in range(3, 8)]
        assert sum(logprobs) == pytest.approx(score.item(), rel=1e-5, abs=1e-5)


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


def hf_twin(tmp_path, seed=3, vocab=20, n_layer=2, scale=10):
    """A random Hugging Face GPT2LMHeadModel and our GPT with its weights. The weights are scaled up: peaked,
    varied distributions, so beams differ from greedy and eos comes early."""
    transformers = pytest.importorskip('transformers')
    torch.manual_seed(seed)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=vocab, n_layer=n_layer, n_head=2, n_embd=16,
                                                               n_positions=32)).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.mul_(scale)
    hf.save_pretrained(tmp_path)
    return hf, GPT.from_pretrained(tmp_path)


def check_beams_equal_hfs(hf, ours, prompt, num_beams, eos, length_penalty):
    ends = [] if eos is None else eos if isinstance(eos, list) else [eos]  # a list: a beam ends at any of them
    seqs, scores = beam_search(ours, prompt, 6, num_beams, eos_token_id=eos, length_penalty=length_penalty)
    ref = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6, do_sample=False,
                      num_beams=num_beams, num_return_sequences=num_beams, eos_token_id=eos,
                      pad_token_id=ends[0] if ends else 0, length_penalty=length_penalty,
                      early_stopping='never', output_scores=True, return_dict_in_generate=True)
    width = ref.sequences.size(1)  # HF stops when every beam has ended; ours pads to max_new_tokens
    assert torch.equal(seqs[:, :width], ref.sequences), (num_beams, eos, length_penalty)
    torch.testing.assert_close(scores, ref.sequences_scores, atol=1e-4, rtol=1e-5)
    return bool(torch.isin(seqs[:, prompt.size(1):], torch.tensor(ends, dtype=torch.long)).any())


def test_equals_hugging_face_beam_search(tmp_path):
    """HF's generate(num_beams=...) on the same weights: the same beams and scores, with eos (one id or a list of
    them, as a generation_config.json may give) and length penalties. early_stopping='never' is HF's exact search,
    which ours is: a beam stops only when no live one can beat it."""
    hf, ours = hf_twin(tmp_path)
    ended = sum(check_beams_equal_hfs(hf, ours, torch.tensor([[5, 11, 2]]), *options)
                for options in itertools.product((2, 4), (None, 0, 7, [7, 0]), (0.0, 1.0, 2.0)))
    assert ended >= 4  # eos did finish beams


@pytest.mark.parametrize('seed', range(8))
def test_equals_hugging_face_beam_search_on_more_models(seed, tmp_path):
    """Other random models end beams at other ranks and steps: when eos is not the best continuation, when the
    finished beams outnumber the live ones, when a finished beam can no longer be beaten."""
    hf, ours = hf_twin(tmp_path, seed, vocab=12, n_layer=1, scale=6)
    for options in itertools.product((2, 4), (0, 5, [5, 0]), (0.0, 1.0)):
        check_beams_equal_hfs(hf, ours, torch.tensor([[5, 11, 2]]), *options)


@pytest.mark.parametrize('options', [dict(temperature=0.5), dict(temperature=2.0), dict(top_k=3), dict(top_k=50),
                                     dict(top_p=0.6), dict(temperature=3.0, top_p=0.5),
                                     dict(temperature=0.7, top_k=5, top_p=0.8)])
def test_sampling_equals_hugging_face(options, tmp_path):
    """With the same seed, sampling draws the same tokens as HF's generate(do_sample=True): temperature, top-k
    (larger than the vocabulary too) and top-p (nucleus) shape the same distribution, in the same order."""
    hf, ours = hf_twin(tmp_path, scale=5)
    prompt = torch.tensor([[5, 11, 2]] * 4)
    torch.manual_seed(11)
    got = ours.generate(prompt, 8, do_sample=True, **options)
    torch.manual_seed(11)
    want = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8, do_sample=True,
                       pad_token_id=0, **{'top_k': 0, 'temperature': 1.0, **options})  # HF's default top_k is 50
    assert torch.equal(got, want)
    assert len(set(map(tuple, got.tolist()))) > 1  # the draws differ between rows: sampling, not greedy


def test_no_new_tokens_is_the_prompt_with_log_prob_zero_whatever_the_length_penalty():
    """max_new_tokens=0, as generate allows: one beam, the prompt itself, whose new tokens' log-probs sum to 0 (an
    empty sum); a length penalty divides that by a length of 0 new tokens, which must not be 0 ** penalty."""
    for length_penalty in (0.0, 1.0, 2.0):
        seqs, scores = beam_search(tiny_model(), torch.tensor([PROMPT]), 0, 3, length_penalty=length_penalty)
        assert seqs.tolist() == [PROMPT] and scores.tolist() == [0.0]


def test_the_search_ranks_its_last_beams_without_reading_the_device_again():
    """Each step reads the live scores to the host with its other choices (in best_extensions); the end of the search
    ranks the last live beams by those, not by a read of the same scores from the device (scores.tolist())."""
    with HostWaits() as waits:
        beam_search(tiny_model(), torch.tensor([PROMPT]), STEPS, num_beams=3)
    own = {where: n for where, n in waits.items() if where.endswith(' in sampling.beam_search')}
    assert own == {'from host in sampling.beam_search': 2}  # the end ids to the device, the scores returned
    assert waits['tolist in sampling.best_extensions'] == STEPS


def test_bad_arguments():
    model = tiny_model()
    with pytest.raises(ValueError, match=r'one prompt, shape \(1, T\); got \(2, 2\) \(loop over prompts\)'):
        beam_search(model, torch.tensor([PROMPT, PROMPT]), 2, 2)
    with pytest.raises(ValueError, match=r'of shape \(2,\): a single sequence is idx\[None\]$'):  # not a loop
        beam_search(model, torch.tensor(PROMPT), 2, 2)
    with pytest.raises(ValueError, match=r'shape \(0, 2\): give at least one prompt$'):
        beam_search(model, torch.zeros(0, 2, dtype=torch.long), 2, 2)
    with pytest.raises(ValueError, match='block_size'):
        beam_search(model, torch.zeros(1, 9, dtype=torch.long), 2, 2)
    with pytest.raises(ValueError, match='num_beams'):
        beam_search(model, torch.tensor([PROMPT]), 2, 0)
    with pytest.raises(ValueError, match=r'max_new_tokens=-2 is out of range: it must be an integer >= 0'):
        beam_search(model, torch.tensor([PROMPT]), -2, 2)
    with pytest.raises(ValueError, match=r"length_penalty='x' is a string, not a number"):
        beam_search(model, torch.tensor([PROMPT]), 2, 2, length_penalty='x')
    for inf in (math.inf, -math.inf):  # every longer beam's score -0, or a ZeroDivisionError
        with pytest.raises(ValueError, match=rf"length_penalty={inf} is out of range: it must be a number > -inf and"):
            beam_search(model, torch.tensor([PROMPT]), 2, 2, length_penalty=inf)
    # whole numbers as floats or numpy integers are the counts they hold, as in generate
    want = beam_search(model, torch.tensor([PROMPT]), 2, 2)
    for max_new_tokens, num_beams in ((2.0, 2), (2, 2.0), (np.int64(2), np.int64(2))):
        assert all(map(torch.equal, beam_search(model, torch.tensor([PROMPT]), max_new_tokens, num_beams), want))


def test_a_length_penalty_past_the_range_of_a_float_is_refused_by_name():
    """length_penalty=1e308 raised a bare OverflowError from length ** length_penalty (as Hugging Face's beam search
    does), and -1e308 a ZeroDivisionError: refused by name, from where the longest length leaves a float's range."""
    model, prompt = tiny_model(), torch.tensor([PROMPT])
    limit = math.log(sys.float_info.max) / math.log(4)  # 4 new tokens at most
    for length_penalty in (1e308, -1e308, limit, -limit):
        with pytest.raises(ValueError, match=re.escape(
                f"length_penalty={length_penalty!r} is too large for max_new_tokens=4: a score divides by (new "
                f"tokens) ** length_penalty, which leaves the range of a float past |length_penalty| = {limit:.4g}; "
                "give a smaller one")):
            beam_search(model, prompt, 4, 2, length_penalty=length_penalty)
    for length_penalty in (math.nextafter(limit, 0), -math.nextafter(limit, 0)):  # just inside: the beams run on
        seqs, _ = beam_search(model, prompt, 4, 2, length_penalty=length_penalty)
        assert seqs.shape == (2, len(PROMPT) + 4)
    # one new token is a length of 1 whatever the penalty: the plain sum of log-probs
    want = beam_search(model, prompt, 1, 2)
    assert all(map(torch.equal, beam_search(model, prompt, 1, 2, length_penalty=1e308), want))


class MaskedOut:
    """A stand-in for a model whose logits rule tokens out (-inf): after any sequence, only tokens 1 and 2 can come,
    at logits 0 and -1. What beam_search asks of a model: block_size, check_prompt, new_caches, next_token_logits."""
    block_size = 8

    def check_prompt(self, idx, attention_mask=None, eos_token_id=None):
        return idx, attention_mask

    def new_caches(self, batch_size, max_len):
        return []

    def next_token_logits(self, seq, caches, attention_mask=None):
        logits = torch.full((seq.size(0), V), float('-inf'))
        logits[:, 1], logits[:, 2] = 0.0, -1.0
        return logits


@pytest.mark.parametrize('eos', [None, 3, [0, 3]])
def test_a_token_ruled_out_never_makes_a_beam(eos):
    """Two steps over two possible tokens: only 4 sequences exist, so 5 beams return those 4. By hand:
    log p(1) = -log(1 + e^-1) = -0.3133, log p(2) = -1 - 0.3133 = -1.3133. An end id the model rules out ends no
    beam, though its -inf ranks among the best 5 candidates."""
    seqs, scores = beam_search(MaskedOut(), torch.tensor([[0]]), 2, num_beams=5, eos_token_id=eos)
    a, b = -math.log(1 + math.exp(-1)), -1 - math.log(1 + math.exp(-1))
    assert seqs[:, 1:].tolist()[0] == [1, 1] and seqs[:, 1:].tolist()[3] == [2, 2]
    assert sorted(map(tuple, seqs[:, 1:].tolist())) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert scores.tolist() == pytest.approx([2 * a, a + b, a + b, 2 * b], abs=1e-6)


class EndsAfterOneToken(MaskedOut):
    """After the prompt, tokens 1 and 2 (logits 0 and -1, as MaskedOut); after them only eos (3) can come."""

    def next_token_logits(self, seq, caches, attention_mask=None):
        if seq.size(1) == 1:
            return super().next_token_logits(seq, caches)
        logits = torch.full((seq.size(0), V), float('-inf'))
        logits[:, 3] = 0.0
        return logits


def test_a_sequence_that_can_only_end_is_returned_once_ended():
    """Only two sequences exist, 1 eos and 2 eos: three beams return those two, not also 1 or 2 unended."""
    seqs, scores = beam_search(EndsAfterOneToken(), torch.tensor([[0]]), 4, num_beams=3, eos_token_id=3)
    a, b = -math.log(1 + math.exp(-1)), -1 - math.log(1 + math.exp(-1))
    assert seqs.tolist() == [[0, 1, 3, 3, 3], [0, 2, 3, 3, 3]]
    assert scores.tolist() == pytest.approx([a, b], abs=1e-6)


class Ties(MaskedOut):
    """After any sequence, tokens 45, 46 and 47 of 50 share the top logit."""

    def next_token_logits(self, seq, caches, attention_mask=None):
        logits = torch.zeros(seq.size(0), 50)
        logits[:, 45:48] = 5.0
        return logits


def test_equal_scores_go_to_the_lowest_id_as_in_greedy_decoding():
    """Greedy's argmax takes the first of equal logits; one beam does the same, and more beams take equal sequences
    in the order of their ids."""
    prompt = torch.tensor([[0]])
    greedy = sample_next(Ties().next_token_logits(prompt, None))
    assert greedy.item() == 45
    assert beam_search(Ties(), prompt, 3, num_beams=1)[0].tolist() == [[0, 45, 45, 45]]
    assert beam_search(Ties(), prompt, 2, num_beams=4)[0].tolist() == [[0, 45, 45], [0, 45, 46], [0, 45, 47],
                                                                        [0, 46, 45]]


def test_of_equal_scores_eos_finishes_by_its_rank_and_the_next_ids_go_on():
    """Ties with eos = 45, two beams, two steps. Step 1: 45, 46, 47 tie (log-prob p each); 45 ranks first and
    finishes, 46 and 47 go on. Step 2: the six best tie at 2p, by row then token: 46 45 (rank 0) finishes, 46 46 and
    46 47 go on; 47 45 ranks fourth and does not finish. The best two: 45 (p), then the first finished of 2p. With
    four beams 47 45 ranks among them and finishes too, before the live 46 46 of the same score."""
    p = 5 - math.log(47 + 3 * math.exp(5))
    seqs, scores = beam_search(Ties(), torch.tensor([[0]]), 2, num_beams=2, eos_token_id=45)
    assert seqs.tolist() == [[0, 45, 45], [0, 46, 45]]
    assert scores.tolist() == pytest.approx([p, 2 * p], abs=1e-6)
    seqs, scores = beam_search(Ties(), torch.tensor([[0]]), 2, num_beams=4, eos_token_id=45)
    assert seqs.tolist() == [[0, 45, 45], [0, 46, 45], [0, 47, 45], [0, 46, 46]]


def test_a_list_of_end_ids_leaves_enough_candidates_to_go_on():
    """eos = 3, 4 or 5, two beams, two new tokens. Step 1 after 0: 1 (0.3), then the end ids (0.2 each), then 2 (0.1).
    0 3 ranks second and finishes; 0 4 and 0 5 rank below the best two and are dropped; 1 and 2 go on. Of the best
    2 * num_beams candidates only 1 would go on (the other three end): each row may end in every end id, so
    Hugging Face's keep (1 + 3) * num_beams. Step 2: 0 2 2 (0.1 x 0.9 = 0.09) beats every 0 1 x (0.3 / 6 = 0.05)."""
    model = Bigram([[0.0, 0.3, 0.1, 0.2, 0.2, 0.2],  # after token 0 (the prompt)
                    [1 / 6] * 6,  # after 1
                    [0.02, 0.02, 0.9, 0.02, 0.02, 0.02],  # after 2
                    *[[1 / 6] * 6] * 3])  # after the end ids: never read
    seqs, scores = beam_search(model, torch.tensor([[0]]), 2, num_beams=2, eos_token_id=[3, 4, 5])
    assert seqs.tolist() == [[0, 3, 3], [0, 2, 2]]
    assert scores.tolist() == pytest.approx([math.log(0.2), math.log(0.09)], abs=1e-6)


def test_two_beams_with_a_length_penalty_by_hand():
    """Bigram probabilities, eos = 3, two beams, two new tokens. Step 1 after 0: 1 (0.5), eos (0.4), 2 (0.1); eos
    ranks among the best two, so 0 3 finishes (1 new token); 1 and 2 go on. Step 2: 0 1 2 (0.5 x 0.7 = 0.35) and
    0 1 1 (0.5 x 0.2 = 0.1) are the best two; 0 1 3 (0.05) ranks third and does not finish. Each is ranked by
    log p / (new tokens ** length_penalty): log 0.4 = -0.9163, log 0.35 = -1.0498, log 0.1 = -2.3026."""
    model = Bigram([[0.0, 0.5, 0.1, 0.4],  # after token 0 (the prompt)
                    [0.0, 0.2, 0.7, 0.1],  # after 1
                    [0.0, 0.3, 0.3, 0.4],  # after 2
                    [0.25, 0.25, 0.25, 0.25]])  # after 3 (eos: never read)
    a, b, c = math.log(0.4), math.log(0.35), math.log(0.1)
    for length_penalty, want, scores in [
            (0.0, [[0, 3, 3], [0, 1, 2]], [a, b]),  # the plain sum: the short one wins (0.4 > 0.35)
            (1.0, [[0, 1, 2], [0, 3, 3]], [b / 2, a]),  # -0.5249 > -0.9163: per token, the long one wins
            (2.0, [[0, 1, 2], [0, 1, 1]], [b / 4, c / 4])]:  # -0.2624, -0.5756 > -0.9163: 0 3 drops out
        seqs, got = beam_search(model, torch.tensor([[0]]), 2, num_beams=2, eos_token_id=3,
                                length_penalty=length_penalty)
        assert seqs.tolist() == want, length_penalty
        assert got.tolist() == pytest.approx(scores, abs=1e-6), length_penalty


def test_top_p_keeps_the_token_that_crosses_p_and_of_tied_tokens_the_lowest_id():
    """Probabilities 0.2, 0.4, 0.2, 0.2, by hand. top_p=0.3: token 1 alone holds 0.4 >= 0.3. top_p=0.5: token 1
    holds 0.4 < 0.5, so the next one is kept too, the one that crosses p (0.6); of the tied 0.2s that is the lowest
    id, 0. top_p=0.7: 0.6 < 0.7, so token 2 crosses (0.8) and token 3 is dropped."""
    logits = torch.tensor([[0.2, 0.4, 0.2, 0.2]]).log()
    for top_p, hand in [(0.3, [0, 1, 0, 0]), (0.5, [1 / 3, 2 / 3, 0, 0]), (0.7, [0.25, 0.5, 0.25, 0])]:
        assert sampling_probs(logits, top_p=top_p)[0].tolist() == pytest.approx(hand, abs=1e-6), top_p


def test_temperature_comes_before_top_p():
    """Temperature 0.5 squares the probabilities 0.2, 0.4, 0.2, 0.2 (p ** (1 / T)): 0.04, 0.16, 0.04, 0.04, i.e.
    1/7, 4/7, 1/7, 1/7. Token 1's 4/7 = 0.571 now holds top_p=0.5 alone; at temperature 1 it kept tokens 1 and 0.
    Temperature 2 takes square roots: 0.4472, 0.6325, 0.4472, 0.4472, sum 1.9741."""
    logits = torch.tensor([[0.2, 0.4, 0.2, 0.2]]).log()
    for options, hand in [(dict(temperature=0.5), [1 / 7, 4 / 7, 1 / 7, 1 / 7]),
                          (dict(temperature=2.0), [0.2265, 0.3204, 0.2265, 0.2265]),
                          (dict(temperature=0.5, top_p=0.5), [0, 1, 0, 0])]:
        assert sampling_probs(logits, **options)[0].tolist() == pytest.approx(hand, abs=1e-4), options


def test_a_prompt_that_is_no_tensor_or_not_one_row_is_refused_by_name():
    """A list of ids failed with "'list' object has no attribute 'dim'"; it is named as generate names it."""
    with pytest.raises(TypeError, match=r"^idx must be a tensor of token ids, \(batch, tokens\), got a list: "
                                        r"torch.tensor\(idx\) converts"):
        beam_search(tiny_model(), [PROMPT], 3, 2)
    with pytest.raises(ValueError, match=r"^beam_search takes one prompt, shape \(1, T\); got \(2, 2\) \(loop over "
                                         r"prompts\)$"):
        beam_search(tiny_model(), torch.tensor([PROMPT, PROMPT]), 3, 2)
