"""The encoder-decoder transformer (mingpt/seq2seq.py) and the translate project, on tiny models."""

import csv
import functools
import math
import re
import warnings

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from conftest import load_project, perturb_norms
from mingpt.checkpoint import load_checkpoint, model_state, save_checkpoint
from mingpt.model import CausalSelfAttention, GPT, sinusoidal_positions
from mingpt.sampling import beam_search
from mingpt.seq2seq import SourceConditioned, Transformer, cut_at_eos, kept_columns
from mingpt.trainer import Trainer
from mingpt.utils import ConfigError

PAD, BOS, EOS = 0, 1, 2
VARIANTS = [dict(), dict(norm='pre', pos_embd='learned', activation='gelu', share_embeddings=True)]


def tiny(**overrides):
    C = Transformer.get_default_config()
    C.merge_from_dict(dict(model_type=None, n_layer=2, n_head=2, n_embd=32, vocab_size=11, block_size=16,
                           embd_pdrop=0.0, resid_pdrop=0.0, attn_pdrop=0.0))
    C.merge_from_dict(overrides)
    torch.manual_seed(0)
    return Transformer(C).eval()


def test_the_parameter_count_is_printed_once_under_torchrun(capsys, monkeypatch):
    """As GPT's: the first torchrun process (RANK unset or 0) prints it, the others stay quiet."""
    monkeypatch.delenv('RANK', raising=False)
    capsys.readouterr()
    expected = f"number of parameters: {tiny().num_parameters() / 1e6:.2f}M\n"
    assert capsys.readouterr().out == expected
    monkeypatch.setenv('RANK', '1')
    tiny()
    assert capsys.readouterr().out == ''


def sentences(lengths, seed=0):
    """Rows of random tokens 3..10, each ended by EOS and padded with PAD to the longest."""
    g = torch.Generator().manual_seed(seed)
    out = torch.full((len(lengths), max(lengths) + 1), PAD)
    for i, n in enumerate(lengths):
        out[i, :n] = torch.randint(3, 11, (n,), generator=g)
        out[i, n] = EOS
    return out


@pytest.mark.parametrize('variant', VARIANTS)
def test_encoder_sees_both_directions_and_decoder_never_the_future(variant):
    model = tiny(**variant)
    src, tgt = sentences([6, 6]), sentences([7, 7], seed=1)
    memory = model.encode(src)[0]
    src2 = src.clone()
    src2[:, 4] = 3 + (src[:, 4] - 2) % 8  # another token at position 4
    memory2 = model.encode(src2)[0]
    assert not torch.allclose(memory[:, :4], memory2[:, :4])  # earlier positions see a later token
    assert not torch.allclose(memory[:, 5:], memory2[:, 5:])  # and later ones an earlier token
    # an encoder layer alone, without a padding mask (which encode always gives), is not causal either
    x = model.embed(model.encoder, src)
    x2 = model.embed(model.encoder, src2)
    assert not torch.allclose(model.encoder.h[0](x)[:, :4], model.encoder.h[0](x2)[:, :4])

    logits = model(src, tgt)[0]
    tgt2 = tgt.clone()
    tgt2[:, 4] = 3 + (tgt[:, 4] - 2) % 8
    logits2 = model(src, tgt2)[0]
    # the decoder reads BOS + tgt[:-1]: position 5 is the first to read tgt[4]
    torch.testing.assert_close(logits[:, :5], logits2[:, :5])
    assert not torch.allclose(logits[:, 5:], logits2[:, 5:])


@pytest.mark.parametrize('variant', VARIANTS)
def test_padding_changes_no_output(variant):
    model = tiny(**variant)
    src, tgt = sentences([3, 7, 5]), sentences([4, 2, 6], seed=1)
    logits = model(src, tgt)[0]
    padded = torch.cat([src, torch.full((3, 4), PAD)], dim=1)  # more padding than any row needs
    torch.testing.assert_close(model(padded, tgt)[0], logits)
    # each row alone, at its own length, as in the batch
    for i, (n, m) in enumerate([(3, 4), (7, 2), (5, 6)]):
        alone = model(src[i:i + 1, :n + 1], tgt[i:i + 1, :m + 1])[0]
        torch.testing.assert_close(alone, logits[i:i + 1, :m + 1])
    # the test can fail: without the key-padding mask, the padding would change the output
    x, mask = model.embed(model.encoder, padded), model.encode(padded)[1]
    assert not torch.allclose(model.encoder.h[0](x, mask)[0, :4], model.encoder.h[0](x, torch.ones_like(mask))[0, :4])
    # a batch of sources of different lengths translates as each one alone
    batch = model.translate(src, max_new_tokens=8)
    assert [model.translate(src[i:i + 1, :n + 1], max_new_tokens=8)[0] for i, n in enumerate([3, 7, 5])] == batch


@pytest.mark.parametrize('variant', VARIANTS)
def test_cached_decoding_equals_uncached(variant):
    model = tiny(**variant)
    src = sentences([3, 7, 5])
    memory, mask = model.encode(src)
    seq = model.greedy(memory, mask, max_new_tokens=10)
    assert seq.size(1) == 11  # an untrained model does not stop early
    caches = model.new_caches(memory, mask, 10)
    step_logits = torch.stack([model.next_token_logits(seq[:, :t + 1], caches) for t in range(10)], dim=1)
    full_logits = never_pad_or_bos(model.lm_head(model.decode(seq[:, :-1], memory, mask)))  # all at once, no cache
    torch.testing.assert_close(step_logits, full_logits, rtol=1e-4, atol=1e-5)
    assert torch.equal(full_logits.argmax(-1), seq[:, 1:])  # greedy wrote the argmax at every step


@pytest.mark.parametrize('variant', VARIANTS)
def test_decoder_block_is_self_attention_then_cross_attention_then_the_mlp(variant):
    """A decoder layer written out, post-norm (the paper's "Add & Norm") or pre-norm, with random layer norm gains
    and biases: at init (1, 0) every layer norm computes the same, so a block that used another would pass."""
    model = perturb_norms(tiny(**variant))
    block = model.decoder.h[0]
    memory, mask = model.encode(sentences([3, 5]))
    x = torch.randn(2, 4, 32)
    self_attn, mlp = block.attn, block.mlp

    def cross(h):
        return block.crossattention(h, context=memory, mask=mask)
    if model.config.norm == 'post':
        h = block.ln_1(x + self_attn(x))
        h = block.ln_cross_attn(h + cross(h))
        want = block.ln_2(h + mlp(h))
    else:
        h = x + self_attn(block.ln_1(x))
        h = h + cross(block.ln_cross_attn(h))
        want = h + mlp(block.ln_2(h))
    torch.testing.assert_close(block(x, memory, mask), want)


def paper_positions(n, d):
    """The paper's sinusoidal positional encoding by its formula, one number at a time: sin(pos / 10000^(i/d)) at an
    even dimension i, cos(pos / 10000^((i-1)/d)) at an odd one."""
    return torch.tensor([[math.sin(p / 10000 ** (i / d)) if i % 2 == 0 else math.cos(p / 10000 ** ((i - 1) / d))
                          for i in range(d)] for p in range(n)])


def test_forward_is_the_lectures_encoder_decoder_computed_by_hand():
    """The whole model, one encoder and one decoder layer, from its raw weights with the formulas of the lecture:
    embedding * sqrt(d) + sinusoidal positions; encoder self-attention that sees every real source token and no
    padding; decoder causal self-attention over BOS + target, cross-attention to the encoder's output; post-norm
    Add & Norm, ReLU MLP; tied generator; the label-smoothed loss over the real target positions."""
    model = perturb_norms(tiny(n_layer=1, n_head=2, n_embd=8))
    d, hs, eps, V = 8, 4, 0.1, 11
    src = torch.tensor([[5, 6, 7, EOS], [8, EOS, PAD, PAD]])  # the second source is padded
    tgt = torch.tensor([[9, EOS, PAD], [3, 4, EOS]])
    pe = paper_positions(16, d)

    def layer_norm(ln, x):
        mean, var = x.mean(-1, keepdim=True), ((x - x.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + 1e-5) * ln.weight + ln.bias

    def attention(attn, x, context, allowed):  # allowed (B, T, S): may query t look at key s
        W, b = attn.c_attn.weight, attn.c_attn.bias
        q, k, v = x @ W[:d].T + b[:d], context @ W[d:2 * d].T + b[d:2 * d], context @ W[2 * d:].T + b[2 * d:]
        heads = []
        for h in range(2):
            part = slice(h * hs, (h + 1) * hs)
            scores = (q[..., part] @ k[..., part].transpose(1, 2) / math.sqrt(hs)).masked_fill(~allowed, -math.inf)
            heads.append(torch.softmax(scores, -1) @ v[..., part])
        return attn.c_proj(torch.cat(heads, -1))

    def mlp(m, x):
        return torch.relu(x @ m.c_fc.weight.T + m.c_fc.bias) @ m.c_proj.weight.T + m.c_proj.bias

    def embed(stack, ids):
        return stack.wte.weight[ids] * math.sqrt(d) + pe[:ids.size(1)]

    enc, dec = model.encoder.h[0], model.decoder.h[0]
    real = (src != PAD)[:, None, :].expand(2, 4, 4)
    x = embed(model.encoder, src)
    x = layer_norm(enc.ln_1, x + attention(enc.attn, x, x, real))
    memory = layer_norm(enc.ln_2, x + mlp(enc.mlp, x))
    y = embed(model.decoder, torch.tensor([[BOS, 9, EOS], [BOS, 3, 4]]))  # BOS + the target, shifted right
    y = layer_norm(dec.ln_1, y + attention(dec.attn, y, y, torch.ones(3, 3).tril().bool().expand(2, 3, 3)))
    y = layer_norm(dec.ln_cross_attn, y + attention(dec.crossattention, y, memory, real[:, :1].expand(2, 3, 4)))
    y = layer_norm(dec.ln_2, y + mlp(dec.mlp, y))
    logits = y @ model.decoder.wte.weight.T  # the generator is the decoder's embedding
    logp = logits.log_softmax(-1)
    at = tgt != PAD  # 5 real target positions: (1 - eps) on the right token, eps spread over all V
    loss = -((1 - eps) * logp.gather(-1, tgt[..., None])[..., 0] + eps / V * logp.sum(-1))[at].mean()
    got_logits, got_loss = model(src, tgt)
    torch.testing.assert_close(got_logits, logits)
    torch.testing.assert_close(got_loss, loss)


# ---- against torch.nn.Transformer: the same paper's encoder-decoder, written independently in torch itself ----

# the paper's model (post-norm "Add & Norm", ReLU, sinusoidal positions), also with the explicit attention formula,
# and the pre-norm variant (GPT-2's tanh GELU, learned positions, one shared embedding)
REFERENCE_VARIANTS = [dict(), dict(attn_impl='explicit'), VARIANTS[1]]


def torch_transformer(model):
    """torch.nn.Transformer (batch_first, no dropout) holding model's weights, loaded strictly: every one of its
    parameters comes from ours, name by name. nn.Transformer always ends its encoder and its decoder in a LayerNorm
    (encoder.norm, decoder.norm): pre-norm has it too (our ln_f), the paper's post-norm has none (each layer already
    ends in one), so there it is replaced by nn.Identity."""
    c = model.config
    act = F.relu if c.activation == 'relu' else functools.partial(F.gelu, approximate='tanh')  # GPT-2's GELU
    with warnings.catch_warnings():  # its note that pre-norm takes no nested-tensor fast path
        warnings.filterwarnings('ignore', message='enable_nested_tensor is True')
        ref = torch.nn.Transformer(c.n_embd, c.n_head, c.n_layer, c.n_layer, 4 * c.n_embd, dropout=0.0,
                                   activation=act, batch_first=True, norm_first=c.norm == 'pre')
    if c.norm == 'post':
        ref.encoder.norm = ref.decoder.norm = torch.nn.Identity()
    ours = {}  # nn.Transformer's parameter name -> ours

    def same(theirs, mine):
        ours.update({f'{theirs}.weight': f'{mine}.weight', f'{theirs}.bias': f'{mine}.bias'})

    def attention(theirs, mine):  # in_proj is query, key, value stacked, as c_attn
        ours[f'{theirs}.in_proj_weight'] = f'{mine}.c_attn.weight'
        ours[f'{theirs}.in_proj_bias'] = f'{mine}.c_attn.bias'
        same(f'{theirs}.out_proj', f'{mine}.c_proj')
    for i in range(c.n_layer):
        for stack in ('encoder', 'decoder'):
            theirs, mine = f'{stack}.layers.{i}', f'{stack}.h.{i}'
            attention(f'{theirs}.self_attn', f'{mine}.attn')
            same(f'{theirs}.linear1', f'{mine}.mlp.c_fc')
            same(f'{theirs}.linear2', f'{mine}.mlp.c_proj')
            same(f'{theirs}.norm1', f'{mine}.ln_1')
        attention(f'decoder.layers.{i}.multihead_attn', f'decoder.h.{i}.crossattention')
        same(f'encoder.layers.{i}.norm2', f'encoder.h.{i}.ln_2')
        same(f'decoder.layers.{i}.norm2', f'decoder.h.{i}.ln_cross_attn')
        same(f'decoder.layers.{i}.norm3', f'decoder.h.{i}.ln_2')
    if c.norm == 'pre':
        same('encoder.norm', 'encoder.ln_f')
        same('decoder.norm', 'decoder.ln_f')
    state = model.state_dict()
    ref.load_state_dict({theirs: state[mine] for theirs, mine in ours.items()})
    return ref.eval()


def reference_logits(model, ref, src, tgt_in):
    """ref's logits (B, T, vocab_size) after each token of tgt_in (B, T), BOS and the target so far, all recomputed.
    Around nn.Transformer, model's token embeddings times sqrt(d) plus the positional encoding (the paper's formula,
    or the learned table), and its generator. nn.Transformer's masks say True where attention may NOT look."""
    d = model.config.n_embd

    def embed(stack, ids):
        T = ids.size(1)
        positions = paper_positions(T, d) if model.config.pos_embd == 'sinusoidal' else stack.wpe.weight[:T]
        return stack.wte.weight[ids] * math.sqrt(d) + positions
    causal = torch.nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1))  # -inf above the diagonal
    padding = src == PAD
    out = ref(embed(model.encoder, src), embed(model.decoder, tgt_in), tgt_mask=causal, tgt_is_causal=True,
              src_key_padding_mask=padding, memory_key_padding_mask=padding)
    return model.lm_head(out)


@pytest.mark.parametrize('variant', REFERENCE_VARIANTS)
def test_forward_equals_torch_nn_transformer_with_the_same_weights(variant):
    model = perturb_norms(tiny(n_head=4, **variant))  # 4 heads of 8: a wrong split of the heads would show
    ref = torch_transformer(model)
    src = torch.tensor([[5, 6, 7, 8, 9, EOS, PAD], [8, 3, EOS, PAD, PAD, PAD, PAD], [4, EOS, PAD, PAD, PAD, PAD, PAD]])
    tgt = torch.tensor([[9, 4, EOS, PAD, PAD], [3, 4, 5, 6, EOS], [7, EOS, PAD, PAD, PAD]])
    tgt_in = torch.cat([torch.full((3, 1), BOS), tgt[:, :-1]], dim=1)  # teacher forcing: BOS + target, shifted
    logits, _ = model(src, tgt)
    torch.testing.assert_close(logits, reference_logits(model, ref, src, tgt_in), rtol=1e-5, atol=1e-5)


def reference_next_logprobs(model, ref, src, seq):
    """ref's log-probs (B, vocab_size) of the token after seq (B, T), recomputed without a cache, among the tokens a
    decoder may write (PAD and BOS ruled out, as in next_token_logits)."""
    return never_pad_or_bos(reference_logits(model, ref, src, seq)[:, -1]).log_softmax(-1)


def reference_beam_search(model, ref, src, max_new_tokens, num_beams, length_penalty):
    """Beam search as sampling.beam_search documents it, over ref's log-probs recomputed at every step, to the last
    step: (score, sequence from BOS) best first; a sequence that ends in EOS among the num_beams best candidates is
    finished, the num_beams best of the others go on."""
    live, finished = [(0.0, [BOS])], []
    for step in range(1, max_new_tokens + 1):
        candidates = []
        for score, seq in live:
            logprobs = reference_next_logprobs(model, ref, src, torch.tensor([seq]))[0].tolist()
            candidates += [(score + lp, seq + [t]) for t, lp in enumerate(logprobs) if lp > -math.inf]
        candidates.sort(key=lambda c: -c[0])
        finished += [(s / step ** length_penalty, seq) for s, seq in candidates[:num_beams] if seq[-1] == EOS]
        live = [c for c in candidates if c[1][-1] != EOS][:num_beams]
    finished += [(s / max_new_tokens ** length_penalty, seq) for s, seq in live]
    return sorted(finished, key=lambda f: -f[0])[:num_beams]


@pytest.mark.parametrize('variant', REFERENCE_VARIANTS)
def test_cached_greedy_and_beam_search_equal_torch_nn_transformer_recomputed_at_every_step(variant):
    model = perturb_norms(tiny(n_head=4, **variant))
    # EOS made likelier, so that some rows and beams end early and others go on
    model.lm_head.register_forward_hook(lambda module, inputs, logits: logits + 1.0 * (torch.arange(11) == EOS))
    ref = torch_transformer(model)
    src = torch.tensor([[5, 6, 7, 8, 9, EOS], [8, 3, EOS, PAD, PAD, PAD], [4, EOS, PAD, PAD, PAD, PAD]])
    memory, mask = model.encode(src)
    seq = model.greedy(memory, mask, max_new_tokens=6)
    caches = model.new_caches(memory, mask, 6)
    want = torch.full((3, 1), BOS)
    for t in range(seq.size(1) - 1):  # greedy by hand on the reference; a row that wrote EOS goes on with EOS
        logprobs = reference_next_logprobs(model, ref, src, want)
        cached = model.next_token_logits(seq[:, :t + 1], caches).log_softmax(-1)
        torch.testing.assert_close(cached, logprobs, rtol=1e-5, atol=1e-5)
        ended = (want[:, 1:] == EOS).any(1, keepdim=True)
        want = torch.cat([want, logprobs.argmax(-1, keepdim=True).masked_fill(ended, EOS)], dim=1)
    assert torch.equal(seq, want)
    for i in range(3):
        for length_penalty in (0.0, 1.0):
            beams, scores = beam_search(SourceConditioned(model, memory[i:i + 1], mask[i:i + 1]),
                                        torch.full((1, 1), BOS), 5, 3, EOS, length_penalty)
            ranked = reference_beam_search(model, ref, src[i:i + 1], 5, 3, length_penalty)
            assert [cut_at_eos(b.tolist(), EOS) for b in beams] == [cut_at_eos(s, EOS) for _, s in ranked]
            assert scores.tolist() == pytest.approx([s for s, _ in ranked], abs=1e-5)


def test_greedy_pads_a_finished_row_with_eos_and_stops_when_every_row_has():
    model = tiny()
    memory, mask = model.encode(sentences([3, 7, 5]))
    logits = model.next_token_logits

    def eos_at(steps):  # row i writes EOS at step steps[i] (0: the first new token) and never otherwise
        def forced(seq, caches):
            out = logits(seq, caches).clone()
            out[:, EOS] = -1e9
            out[[i for i, s in enumerate(steps) if s == seq.size(1) - 1], EOS] = 1e9
            return out
        return forced

    model.next_token_logits = eos_at([None, None, None])
    plain = model.greedy(memory, mask, max_new_tokens=8)
    model.next_token_logits = eos_at([2, None, None])
    seq = model.greedy(memory, mask, max_new_tokens=8)
    assert torch.equal(seq[0, :3], plain[0, :3]) and (seq[0, 3:] == EOS).all()  # padded from its EOS on
    assert torch.equal(seq[1:], plain[1:])  # the other rows go on as before
    model.next_token_logits = eos_at([2, 4, 0])
    assert model.greedy(memory, mask, max_new_tokens=8).size(1) == 1 + 5  # BOS and 5 steps: all rows are done
    want = [plain[0, 1:3].tolist(), plain[1, 1:5].tolist(), []]
    assert model.translate(sentences([3, 7, 5]), max_new_tokens=8) == want


def test_translate_writes_up_to_block_size_tokens():
    model = tiny()  # block_size 16: the decoder reads BOS and the first 15 new tokens
    src = sentences([3, 7])
    assert [len(t) for t in model.translate(src)] == [15, 15]  # by default, the longest target training can show
    assert [len(t) for t in model.translate(src, max_new_tokens=16)] == [16, 16]
    assert [len(t) for t in model.translate(src, max_new_tokens=16, num_beams=2)] == [16, 16]
    with pytest.raises(ValueError, match="max_new_tokens must be 1 to block_size = 16, got 17"):
        model.translate(src, max_new_tokens=17)
    # a context of one token: the target is EOS alone, the default writes that one token (it was 0, refused)
    assert len(tiny(block_size=1).translate(torch.tensor([[EOS]]))[0]) <= 1


def test_a_source_of_only_padding_is_refused_by_name():
    """Its encoder states were NaN with attn_impl='explicit' (every key masked) and arbitrary with SDPA: translate
    wrote PAD ids, and training (forward) got a NaN loss."""
    model = tiny(attn_impl='explicit')
    tgt = sentences([2, 3])
    for src in (torch.tensor([[5, 6, EOS], [PAD, PAD, PAD]]), torch.tensor([[PAD, PAD]]), torch.zeros(1, 0).long()):
        for call in (lambda: model.translate(src, max_new_tokens=4), lambda: model(src, tgt[:len(src)]),
                     lambda: model.encode(src), lambda: model.cross_attention_maps(src, tgt[:len(src)])):
            with pytest.raises(ValueError, match=r"a source row holds only padding \(pad_token_id=0\)"):
                call()
    assert model.translate(torch.tensor([[EOS, PAD]]), max_new_tokens=4)  # EOS alone is a source
    assert model(torch.tensor([[EOS, PAD], [5, EOS]]), tgt)[1].isfinite()


def test_a_target_of_only_padding_is_refused_by_name():
    """A target without EOS (padding only, or no column at all) gave a NaN loss when the whole batch was such, which
    training spread into every weight without a word, and taught nothing where other rows were real."""
    model = tiny()
    src = sentences([3, 4])
    for tgt in (torch.full((2, 3), PAD), torch.tensor([[5, EOS, PAD], [PAD, PAD, PAD]]), torch.zeros(2, 0).long()):
        with pytest.raises(ValueError, match=r"a target row holds only padding \(pad_token_id=0\): end each target "
                                             r"with EOS \(eos_token_id\), an empty one too"):
            model(src, tgt)
    assert model(src, torch.tensor([[5, EOS], [EOS, PAD]]))[1].isfinite()  # EOS alone is a target


def test_ids_that_are_not_a_batch_of_the_models_tokens_are_refused_by_name():
    """They failed deep inside: 'index out of range in self' (a device-side assert on a GPU) for an id outside the
    vocabulary, a reduction's 'Specify the reduction dim' for one sentence without its batch dimension."""
    model = tiny()  # vocab_size 11
    src, tgt = sentences([3, 4]), sentences([2, 5], seed=1)
    hidden_pad = tgt.masked_fill(tgt == PAD, -100)  # Hugging Face's ignored label, not this model's padding
    past_vocab = src.clone()
    past_vocab[1, 0] = 11
    for call, message in [(lambda: model(past_vocab, tgt), r"src holds token ids from 0 to 11"),
                          (lambda: model(src, hidden_pad), r"tgt holds token ids from -100 to .*pad_token_id=0"),
                          (lambda: model.translate(src.clamp(max=3) + 9), r"src holds token ids from 9 to 12"),
                          (lambda: model.translate(src[0]), r"src must be \(batch, tokens\).*src\[None\]"),
                          (lambda: model(src.float(), tgt), r"src must be \(batch, tokens\) int64 or int32 token ids"),
                          (lambda: model(src, tgt[:1]), "src has 2 rows and tgt 1")]:
        with pytest.raises(ValueError, match=message):
            call()
    assert model(src, tgt)[1].isfinite() and model.translate(src[:1], max_new_tokens=2)  # ids of 0..10 pass


def test_encoder_keys_values_are_computed_once_and_reused():
    model = tiny()
    memory, mask = model.encode(sentences([5, 3]))
    attn = model.decoder.h[0].crossattention
    x = torch.randn(2, 4, 32)
    keys_values = attn.context_keys_values(memory)
    torch.testing.assert_close(attn(x, context=keys_values, mask=mask), attn(x, context=memory, mask=mask))
    caches = model.new_caches(memory, mask, 8)
    calls = []
    attn.context_keys_values = lambda context: calls.append(context)  # would break decoding if called again
    model.next_token_logits(torch.full((2, 1), BOS), caches)
    model.next_token_logits(torch.tensor([[BOS, 5], [BOS, 6]]), caches)
    assert calls == [] and caches[0].len == 2


def test_cross_attention_of_gpt_unchanged_by_precomputed_keys():
    """CausalSelfAttention with a context computes query from x and key/value from the context, by hand."""
    config = GPT.get_default_config()
    config.merge_from_dict(dict(n_head=2, n_embd=8, attn_pdrop=0.0, resid_pdrop=0.0))
    torch.manual_seed(0)
    attn = CausalSelfAttention(config, causal=False)
    x, context = torch.randn(1, 3, 8), torch.randn(1, 5, 8)
    w, b = attn.c_attn.weight, attn.c_attn.bias
    q, k, v = x @ w[:8].T + b[:8], context @ w[8:16].T + b[8:16], context @ w[16:].T + b[16:]
    heads = [torch.softmax(q[..., h] @ k[..., h].transpose(1, 2) / 2, -1) @ v[..., h]
             for h in (slice(0, 4), slice(4, 8))]
    expected = attn.c_proj(torch.cat(heads, -1))
    torch.testing.assert_close(attn(x, context=context), expected)
    torch.testing.assert_close(attn(x, context=attn.context_keys_values(context)), expected)


def test_beam_search_with_one_beam_equals_greedy_and_scores_its_beams_by_their_log_probs():
    model = tiny()
    src = sentences([4, 6, 2], seed=3)
    greedy = model.translate(src, max_new_tokens=8)
    memory, mask = model.encode(src)
    bos = torch.full((1, 1), BOS)
    for i, expected in enumerate(greedy):
        conditioned = SourceConditioned(model, memory[i:i + 1], mask[i:i + 1])
        one, _ = beam_search(conditioned, bos, 8, 1, EOS)
        assert cut_at_eos(one[0, 1:].tolist(), EOS) == expected
        beams, scores = beam_search(conditioned, bos, 8, 4, EOS)
        assert len(beams) == 4
        for seq, score in zip(beams, scores):  # the beams' caches followed their own sequences
            assert score.item() == pytest.approx(score_of(model, src[i:i + 1], seq), abs=1e-4)
    # translate(num_beams=4) returns each source's best beam: here, the last source's
    assert model.translate(src, max_new_tokens=8, num_beams=4)[-1] == cut_at_eos(beams[0, 1:].tolist(), EOS)


def test_translate_passes_the_length_penalty_to_beam_search():
    model = tiny()
    with torch.no_grad():  # larger weights: peaked distributions, where EOS comes first unless length is rewarded
        for p in model.parameters():
            p.mul_(2)
    src = sentences([4, 6, 2])
    memory, mask = model.encode(src)
    bos = torch.full((1, 1), BOS)
    for penalty in (0.0, 2.0):
        want = [cut_at_eos(beam_search(SourceConditioned(model, memory[i:i + 1], mask[i:i + 1]), bos, 8, 3, EOS,
                                       length_penalty=penalty)[0][0, 1:].tolist(), EOS) for i in range(3)]
        assert model.translate(src, max_new_tokens=8, num_beams=3, length_penalty=penalty) == want
    assert want != model.translate(src, max_new_tokens=8, num_beams=3)  # the penalty changes a best beam here


def test_translate_takes_numpy_beam_counts_and_warns_of_a_length_penalty_it_ignores():
    """A grid search over np.arange(1, 5) gave num_beams=np.int64(3), which translate refused as not a whole number;
    and num_beams=1 decodes greedily, so a length_penalty there changed nothing, without a word. A warning, not an
    error: a grid search over num_beams with one length_penalty goes on (as in Hugging Face)."""
    model = tiny()
    src = sentences([4, 6, 2])
    assert model.translate(src, max_new_tokens=8, num_beams=np.int64(3)) == model.translate(src, max_new_tokens=8,
                                                                                            num_beams=3)
    for num_beams in (1, np.int64(1), 1.0):
        with pytest.warns(UserWarning, match=r"length_penalty=2.0 ranks beam search's finished beams, but num_beams=1 "
                                             r"decodes greedily, which has none to rank: it is ignored") as caught:
            greedy = model.translate(src, max_new_tokens=8, num_beams=num_beams, length_penalty=2.0)
        assert greedy == model.translate(src, max_new_tokens=8) and caught[0].filename == __file__
    with pytest.raises(ValueError, match=r"num_beams=0 is out of range: it must be an integer >= 1"):
        model.translate(src, num_beams=0)


def test_translating_in_training_mode_with_dropout_is_warned_of():
    """A Transformer is built in training mode, so translating before model.eval() decoded with dropout on: greedy
    translations changed from call to call, without a word (as GPT's generate, which warns of it)."""
    model = tiny(embd_pdrop=0.1, resid_pdrop=0.1, attn_pdrop=0.1).train()
    src = sentences([4, 6, 2])
    with pytest.warns(UserWarning, match=r"^dropout is on while the model generates") as caught:
        model.translate(src, max_new_tokens=4)
    assert caught[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        model.eval().translate(src, max_new_tokens=4)
        tiny().train().translate(src, max_new_tokens=4)  # no dropout to switch off


def score_of(model, src, seq):
    """The sum of the log-probs of seq's tokens after BOS (up to and including the first EOS), without a cache."""
    ids = seq[1:].tolist()
    ids = ids[:ids.index(EOS) + 1] if EOS in ids else ids
    logits = never_pad_or_bos(model.lm_head(model.decode(seq[None, :len(ids)], *model.encode(src))))
    return logits.log_softmax(-1)[0, range(len(ids)), ids].sum().item()


def never_pad_or_bos(logits):
    """The logits a decoder chooses from: PAD and BOS ruled out."""
    return logits.index_fill(-1, torch.tensor([PAD, BOS]), float('-inf'))


def test_decoding_never_writes_pad_or_bos():
    """Label smoothing leaves PAD and BOS some probability; here the generator prefers them by far. Greedy and beam
    search must choose among the other tokens, as an uncached loop over decode with them ruled out does."""
    model = tiny()
    boost = torch.zeros(11).index_fill(0, torch.tensor([PAD, BOS]), 50.0)
    model.lm_head.register_forward_hook(lambda module, inputs, logits: logits + boost)
    src = sentences([4, 6, 2], seed=3)
    memory, mask = model.encode(src)
    seq = torch.full((3, 1), BOS)
    for _ in range(8):  # greedy by hand, no cache
        logits = never_pad_or_bos(model.lm_head(model.decode(seq, memory, mask))[:, -1])
        seq = torch.cat([seq, logits.argmax(-1, keepdim=True)], dim=1)
    want = [cut_at_eos(row[1:].tolist(), EOS) for row in seq]
    assert model.translate(src, max_new_tokens=8) == want
    for i in range(3):
        beams, scores = beam_search(SourceConditioned(model, memory[i:i + 1], mask[i:i + 1]), seq[:1, :1], 8, 3, EOS)
        assert not any(t in (PAD, BOS) for t in beams[:, 1:].flatten().tolist())
        for beam, score in zip(beams, scores):  # log-probs renormalised over the tokens a decoder may write
            assert score.item() == pytest.approx(score_of(model, src[i:i + 1], beam), abs=1e-4)


def test_learns_to_copy_a_sequence():
    class Copy(torch.utils.data.Dataset):
        """Sequences of 1 to 5 tokens out of 5, to be written back unchanged."""

        def __init__(self, n, seed):
            g = torch.Generator().manual_seed(seed)
            self.pairs = []
            for _ in range(n):
                seq = torch.randint(3, 8, (int(torch.randint(1, 6, (1,), generator=g)),), generator=g).tolist()
                self.pairs.append(torch.tensor(pad(seq + [EOS], 6)))

        def __len__(self):
            return len(self.pairs)

        def __getitem__(self, i):
            return self.pairs[i], self.pairs[i]

    torch.manual_seed(0)
    C = Transformer.get_default_config()
    C.merge_from_dict(dict(n_layer=1, n_head=2, n_embd=32, vocab_size=8, block_size=6, embd_pdrop=0.0,
                           resid_pdrop=0.0, attn_pdrop=0.0, label_smoothing=0.0))
    model = Transformer(C)
    T = Trainer.get_default_config()
    T.merge_from_dict(dict(max_iters=500, batch_size=64, learning_rate=3e-3, warmup_iters=30, weight_decay=0.0,
                           device='cpu', quiet=True, betas=(0.9, 0.98), lr_schedule='inverse_sqrt'))
    trainer = Trainer(T, model, Copy(5000, 0))
    trainer.run()
    test = torch.stack(Copy(200, 1).pairs)
    out = model.eval().translate(test, max_new_tokens=5)
    assert out == [[t for t in row if t > EOS] for row in test.tolist()]


def pad(ids, n):
    return ids + [PAD] * (n - len(ids))


def test_inverse_sqrt_lr_is_the_papers_schedule():
    # the paper: lr = d^-0.5 * min(step^-0.5, step * warmup^-1.5), step from 1; the trainer's iteration it is
    # step - 1, its peak learning_rate (d * warmup)^-0.5 and its warmup_iters warmup - 1
    d, warmup = 512, 4000
    T = Trainer.get_default_config()
    T.merge_from_dict(dict(learning_rate=(d * warmup) ** -0.5, warmup_iters=warmup - 1, lr_schedule='inverse_sqrt'))
    trainer = Trainer(T, torch.nn.Linear(1, 1), torch.utils.data.TensorDataset(torch.zeros(1, 1)))
    for it in (0, 10, 3998, 3999, 4000, 10_000, 100_000):
        step = it + 1
        paper = d ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
        assert trainer.get_lr(it) == pytest.approx(paper)


def test_presets_options_and_bad_config():
    C = Transformer.get_default_config()
    C.merge_from_dict(dict(model_type='transformer-base', vocab_size=37000, block_size=64, share_embeddings=True))
    base = Transformer(C)
    # the paper's base model, one 37k embedding shared: 6 + 6 layers of d=512, h=8, d_ff=2048
    d, layers = 512, 6 * (4 * 512 * 512 + 2 * 512 * 2048) + 6 * (8 * 512 * 512 + 2 * 512 * 2048)
    assert abs(base.num_parameters() - (37000 * d + layers)) / base.num_parameters() < 0.01
    assert round(base.num_parameters() / 1e6) == 63  # as the preset's comment says
    assert base.encoder.wte.weight is base.lm_head.weight is base.decoder.wte.weight
    assert not hasattr(base.encoder.wpe, 'weight')  # sinusoidal: a buffer, not trained
    separate = tiny()
    assert separate.encoder.wte.weight is not separate.lm_head.weight
    with pytest.raises(ConfigError, match='three different token ids'):
        tiny(eos_token_id=0)
    with pytest.raises(ConfigError, match='label_smoothing'):
        tiny(label_smoothing=1.0)
    with pytest.raises(ConfigError, match='norm'):
        tiny(norm='middle')
    with pytest.raises(ValueError, match='block_size'):
        tiny().translate(sentences([20]))


def test_every_matrix_starts_xavier_uniform():
    """The Annotated Transformer's init: each matrix uniform in +-sqrt(6 / (fan_in + fan_out)), whose standard
    deviation is that bound / sqrt(3); PyTorch's defaults differ (N(0, 1) for an embedding)."""
    matrices = [(n, p) for n, p in tiny().named_parameters() if p.dim() > 1]
    assert len(matrices) == 2 + 2 * 4 + 2 * 6  # two embeddings (the decoder's is the generator), 2 + 2 blocks
    for name, p in matrices:
        fan_out, fan_in = p.shape  # (out, in) of a Linear; an Embedding's (vocab, n_embd) counts as torch counts it
        bound = (6 / (fan_in + fan_out)) ** 0.5
        assert p.abs().max().item() <= bound, name
        assert p.std().item() == pytest.approx(bound / 3 ** 0.5, rel=0.1), name


def test_label_smoothing_is_the_loss_option():
    model = tiny(label_smoothing=0.1)
    src, tgt = sentences([3, 4]), sentences([5, 2], seed=1)
    logits, loss = model(src, tgt)
    keep = tgt.flatten() != PAD
    logprobs = logits.flatten(0, 1)[keep].log_softmax(-1)
    nll = -logprobs.gather(1, tgt.flatten()[keep, None]).mean()
    expected = 0.9 * nll - 0.1 * logprobs.mean()  # 0.1 of the target spread evenly over the 11 tokens
    torch.testing.assert_close(loss, expected)


def test_embedding_is_scaled_by_sqrt_d_and_the_pre_norm_encoder_ends_in_a_layer_norm():
    m = tiny()
    src = sentences([5, 3])
    T = src.size(1)
    assert m.config.pos_embd == 'sinusoidal'  # the paper's default
    want = m.encoder.wte(src) * 32 ** 0.5 + sinusoidal_positions(16, 32)[:T]  # n_embd 32, block_size 16
    torch.testing.assert_close(m.embed(m.encoder, src), want)
    memory, _ = tiny(**VARIANTS[1]).encode(src)  # pre-norm: the last layer norm is ln_f (gain 1, bias 0)
    torch.testing.assert_close(memory.mean(-1), torch.zeros(2, T), atol=1e-5, rtol=0)
    torch.testing.assert_close(memory.var(-1, unbiased=False), torch.ones(2, T), atol=1e-3, rtol=0)


def test_cross_attention_maps_leave_dropout_out_and_the_mode_alone():
    m = tiny(embd_pdrop=0.5, resid_pdrop=0.5, attn_pdrop=0.5).train()
    src, tgt = sentences([5, 3]), sentences([4, 6], seed=1)
    first, again = m.cross_attention_maps(src, tgt), m.cross_attention_maps(src, tgt)
    assert m.training and all(torch.equal(a, b) for a, b in zip(first, again))
    assert all(torch.equal(a, b) for a, b in zip(first, m.eval().cross_attention_maps(src, tgt)))
    assert not m.training  # a model in eval mode stays there
    assert first[0].shape == (2, 2, tgt.size(1), src.size(1))


def test_cross_attention_maps_are_softmax_of_decoder_queries_times_encoder_keys_with_padding_masked():
    """The map of a decoder layer recomputed from its weights: queries from the decoder's state after masked
    self-attention, keys from the encoder's output, softmax(q k^T / sqrt(head size)) with the padding columns at 0."""
    model = perturb_norms(tiny())
    src, tgt = sentences([3, 6]), sentences([4, 2], seed=1)  # the first source has 3 padding columns
    block = model.decoder.h[1]
    seen = []  # post-norm: ln_1's output is the state the cross-attention reads
    block.ln_1.register_forward_hook(lambda module, inputs, out: seen.append(out))
    maps = model.cross_attention_maps(src, tgt)
    memory = model.encode(src)[0]
    W, b, hs = block.crossattention.c_attn.weight, block.crossattention.c_attn.bias, 16
    q, k = seen[-1] @ W[:32].T + b[:32], memory @ W[32:64].T + b[32:64]  # (B, T, 32), (B, S, 32)
    for h in range(2):
        part = slice(h * hs, (h + 1) * hs)
        scores = q[..., part] @ k[..., part].transpose(1, 2) / math.sqrt(hs)  # (B, T, S)
        want = scores.masked_fill((src == PAD)[:, None, :], -math.inf).softmax(-1)
        torch.testing.assert_close(maps[1][:, h], want)
    assert (maps[1][0, :, :, 4:] == 0).all() and maps[1][0, :, :, :4].sum(-1).allclose(torch.ones(2, 5))


def test_the_module_docstring_names_each_part_of_the_lecture():
    """A newcomer finds each part by the lecture's word in one place: the docstring of mingpt/seq2seq.py."""
    import mingpt.seq2seq
    doc = mingpt.seq2seq.__doc__.replace('\n', ' ')
    for word in ('encoder', 'decoder', 'cross-attention', 'padding mask', 'masked (causal) self-attention',
                 'add & norm', 'positional encoding', 'label smoothing', 'teacher forcing', 'greedy', 'beam search',
                 "learning-rate schedule", "lr_schedule='inverse_sqrt'"):
        assert word in doc.lower(), word


def test_trim_padding_keeps_every_real_token():
    def trim_padding(ids, pad_token_id):  # as forward and translate cut their ids
        return ids[:, :int(kept_columns(ids, pad_token_id))]
    ids = torch.tensor([[3, 4, 0, 0, 0], [5, 0, 6, 2, 0]])  # a pad inside a row, and one column of padding only
    assert trim_padding(ids, 0).tolist() == [[3, 4, 0, 0], [5, 0, 6, 2]]
    assert trim_padding(torch.tensor([[0, 0, 3, 2]]), 0).tolist() == [[0, 0, 3, 2]]  # left padding
    assert trim_padding(torch.zeros(2, 3, dtype=torch.long), 0).shape == (2, 0)
    assert trim_padding(torch.zeros(2, 0, dtype=torch.long), 0).shape == (2, 0)  # no column at all


# ---- the project ----

def test_dates_by_hand_and_held_out():
    translate = load_project('translate')
    import datetime
    assert [translate.ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 31)] == \
        ['1st', '2nd', '3rd', '4th', '11th', '12th', '13th', '21st', '22nd', '23rd', '31st']
    date = datetime.date(2021, 3, 3)
    assert translate.write_date(date, 'the {do} of {M}, {Y}', 'as is') == 'the 3rd of March, 2021'
    assert translate.write_date(date, '{W}, {M} {d}, {Y}', 'upper') == 'WEDNESDAY, MARCH 3, 2021'
    assert translate.write_date(datetime.date(1999, 12, 7), '{m}/{d}/{Y}', 'as is') == '12/7/1999'
    assert translate.write_date(datetime.date(1999, 12, 7), '{dd}.{mm}.{Y}', 'as is') == '07.12.1999'
    train, test = translate.dates_task(5000, 300, seed=1)
    assert len(train) == 5000 and len(test) == 300
    assert not {iso for _, iso in train} & {iso for _, iso in test}  # no held-out day is trained on
    assert all(datetime.date.fromisoformat(iso) for _, iso in train)
    sources = [s for s, _ in train]  # written as is, in lower case and in upper case
    assert any(s != s.lower() and s != s.upper() for s in sources)
    assert any(s == s.upper() != s.lower() for s in sources) and any(s == s.lower() != s.upper() for s in sources)


def test_every_date_format_by_hand():
    translate = load_project('translate')
    import datetime
    date = datetime.date(2021, 3, 5)  # a Friday (the 3rd was a Wednesday); day and month of one digit
    assert [translate.write_date(date, fmt, 'as is') for fmt in translate.FORMATS] == [
        '5th of March 2021', 'the 5th of March, 2021', 'March 5th, 2021', 'March 5, 2021', '5 March 2021',
        '05 Mar 2021', 'Mar 5 2021', '5-Mar-2021', '05.03.2021', '5.3.2021', '03/05/2021', '3/5/2021', '2021/03/05',
        '20210305', 'Friday, March 5, 2021', 'Friday 5th Mar 2021', '2021-03-05']
    assert translate.write_date(datetime.date(1900, 12, 31), '{dd} {Mon} {Y}', 'lower') == '31 dec 1900'


def test_every_held_out_day_is_kept_from_training(monkeypatch):
    translate = load_project('translate')
    import datetime
    first = datetime.date(2000, 1, 1).toordinal()
    monkeypatch.setattr(translate, 'FIRST', first)
    monkeypatch.setattr(translate, 'LAST', first + 19)  # 20 days, so training draws each of the others many times
    train, test = translate.dates_task(1000, 3, seed=1)
    held_out = {iso for _, iso in test}
    assert len(held_out) == 3  # three different days (seed 0 draws one twice)
    assert {iso for _, iso in train} == {datetime.date.fromordinal(first + i).isoformat() for i in range(20)} - held_out


def test_vocabularies_round_trip(tmp_path):
    translate = load_project('translate')
    texts = ['the 3rd of March, 2021', '2021-03-03', 'über', 'Straße']
    for kind in ('char', 'bpe'):
        vocab = translate.Vocabulary.train(kind, texts * 20, 280)
        ids = vocab.batch(texts)
        assert [vocab.decode(row.tolist()) for row in ids] == texts
        assert (ids[:, 0] != vocab.special_ids['<pad>']).all() and vocab.special_ids['<eos>'] in ids[2].tolist()
        eos_at = [row.tolist().index(vocab.special_ids['<eos>']) for row in ids]  # each text ends in one eos
        assert all((row[n + 1:] == vocab.special_ids['<pad>']).all() for row, n in zip(ids, eos_at))  # then pad
        assert translate.Vocabulary(vocab.record).encode(texts[0]) == vocab.encode(texts[0])
    n = len(vocab)  # a BPE's special tokens are its last ids, after the bytes and the merges
    assert vocab.special_ids == {'<pad>': n - 3, '<bos>': n - 2, '<eos>': n - 1}
    # a character the BPE never saw is two byte tokens, labelled by their bytes (their text is U+FFFD alike)
    assert [translate.token_label(vocab, i) for i in vocab.encode('é')] == ['\\xc3', '\\xa9', '<eos>']
    chars = translate.Vocabulary.train('char', ['a b\x01'], 0)
    assert [translate.token_label(chars, i) for i in chars.encode('a b\x01')] == ['a', '\u2423', 'b', '\\x01', '<eos>']


def test_read_pairs_holds_out_and_names_bad_lines(tmp_path, capsys):
    translate = load_project('translate')
    path = tmp_path / 'pairs.tsv'
    path.write_text(''.join(f'src {i}\ttgt {i}\n' for i in range(10)), encoding='utf-8')
    train, test = translate.read_pairs(path, 3, seed=0)
    assert len(train) == 7 and len(test) == 3 and not set(train) & set(test)
    assert translate.read_pairs(path, 3, seed=0) == (train, test) != translate.read_pairs(path, 3, seed=1)
    assert test != [(f'src {i}', f'tgt {i}') for i in range(3)]  # drawn at random, not the first lines
    with pytest.raises(ConfigError, match=r"has 10 pairs, not more than data.n_test=10"):
        translate.read_pairs(path, 10, seed=0)
    path.write_text('\n \n', encoding='utf-8')
    with pytest.raises(ValueError, match=r"pairs.tsv holds no pair: write one source TAB target per line"):
        translate.read_pairs(path, 10, seed=0)
    for bad in ('no tab here', 'a\tb\tc'):
        path.write_text(f' a \t b \n{bad}\n', encoding='utf-8')
        with pytest.raises(ValueError, match='line 2: expected source TAB target'):
            translate.read_pairs(path, 1, seed=0)
    path.write_text(' a \t b \nc\td\n', encoding='utf-8')
    assert sorted(sum(translate.read_pairs(path, 1, seed=0), [])) == [('a', 'b'), ('c', 'd')]  # stripped
    path.write_text('a\tb\nc\td\na\tb\na\tB\n', encoding='utf-8')  # a repeated pair, held out, was trained on too
    train, test = translate.read_pairs(path, 1, seed=0)
    assert sorted(train + test) == [('a', 'B'), ('a', 'b'), ('c', 'd')]
    assert 'repeats 1 pair(s): each is kept once' in capsys.readouterr().out
    path.write_text('Hello\u2028world\x0c!\tBonjour\nYes\tOui\n', encoding='utf-8')  # separators inside a line
    assert sorted(sum(translate.read_pairs(path, 1, seed=0), [])) == [('Hello\u2028world\x0c!', 'Bonjour'),
                                                                     ('Yes', 'Oui')]


@pytest.mark.parametrize('option, says', [
    ('--model.model_type=gpt-nano', r"unknown model_type 'gpt-nano'; presets are: transformer-base"),
    ('--model.pos_embd=sinusoid', r"model.pos_embd must be one of 'learned', 'sinusoidal', not 'sinusoid'"),
    ('--trainer.lr_schedule=cosin', r"trainer.lr_schedule must be 'constant', 'cosine' or 'inverse_sqrt', not 'cosin'"),
])
def test_project_refuses_a_model_option_before_reading_the_pairs(option, says, tmp_path, monkeypatch):
    """A typo is told before the pairs are made and the vocabulary trained, not after."""
    translate = load_project('translate')
    monkeypatch.setattr(translate, 'dates_task', lambda *args: pytest.fail("the pairs were made first"))
    with pytest.raises(ConfigError, match=says):
        translate.main([f'--system.work_dir={tmp_path}', option])


def test_project_trains_saves_translates_and_draws(tmp_path, capsys):
    translate = load_project('translate')
    tiny_run = ['--model.model_type=transformer-nano', '--trainer.max_iters=3', '--trainer.batch_size=8',
                '--data.n_train=200', '--data.n_test=20', '--trainer.quiet=True']
    tmp_path = tmp_path / 'my run'  # the printed command quotes it
    translate.main([f'--system.work_dir={tmp_path}'] + tiny_run)
    out = capsys.readouterr().out
    assert 'exact match on 20 held-out pairs' in out and 'BLEU' not in out
    assert f"translate with '--sample.checkpoint={tmp_path / 'model.pt'}' --sample.text=..." in out
    assert 'iter 0: train loss ' in out  # the batch's loss, beside the held-out exact match
    assert (tmp_path / 'translate_attention.png').stat().st_size > 0
    # every held-out pair, in order, with the saved model's translation and whether it is exact
    assert f"wrote {tmp_path / 'translations.tsv'}: the 20 held-out translations" in out
    with open(tmp_path / 'translations.tsv', encoding='utf-8', newline='') as f:
        header, *rows = list(csv.reader(f, delimiter='\t'))
    test_pairs = translate.dates_task(200, 20, 3407)[1]
    model, ckpt = Transformer.from_checkpoint(tmp_path / 'model.pt')
    hyps = translate.translate(model, translate.Vocabulary(ckpt['vocabulary']), [s for s, _ in test_pairs])
    assert header == ['source', 'reference', 'prediction', 'correct']
    assert rows == [[s, t, h, str(int(h == t))] for (s, t), h in zip(test_pairs, hyps)]
    assert f"exact match on 20 held-out pairs: {sum(r[3] == '1' for r in rows) / 20:.4f}" in out
    translate.main([f'--sample.checkpoint={tmp_path / "model.pt"}', '--sample.text=3rd of March 2021|1/2/2000'])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2].startswith("'3rd of March 2021' -> ") and lines[-1].startswith("'1/2/2000' -> ")
    for text in ('', '1/2/2000| '):
        with pytest.raises(ConfigError, match=r"holds an empty sentence: give text to translate, several separated"):
            translate.main([f'--sample.checkpoint={tmp_path / "model.pt"}', f'--sample.text={text}'])
    with pytest.raises(ConfigError, match=r"sample.text: characters '\u03a9' are not in the vocabulary"):
        translate.main([f'--sample.checkpoint={tmp_path / "model.pt"}', '--sample.text=1/2/2000|2000\u03a9'])
    block_size = load_checkpoint(tmp_path / 'model.pt')['model_config']['block_size']
    long = '1' * block_size  # with its eos, one token too many: and a larger block_size is no option here
    with pytest.raises(ConfigError, match=rf"sample.text '1+' is {block_size + 1} tokens with its eos, longer than "
                                          rf"the model's block_size \({block_size}, the longest sentence of the data "
                                          r"it was trained on\): shorten it, or train on data with longer sentences"):
        translate.main([f'--sample.checkpoint={tmp_path / "model.pt"}', f'--sample.text=1/2/2000|{long}'])
    resume = [f'--system.work_dir={tmp_path}', '--trainer.resume=True', *tiny_run, '--trainer.max_iters=4']
    with pytest.raises(ConfigError, match="its vocabulary is not this run's"):  # another tokenizer, other ids
        translate.main(resume + ['--data.tokenizer=bpe', '--data.vocab_size=300'])
    # other dates: some held-out days would have been trained on
    with pytest.raises(ConfigError, match=r"its data is not this run's \(seed=3407 there, 1 here\)"):
        translate.main(resume + ['--system.seed=1'])
    for option, differs in (('--data.n_test=30', 'n_test=20 there, 30 here'),
                            ('--data.n_train=300', 'n_train=200 there, 300 here')):
        with pytest.raises(ConfigError, match=rf"its data is not this run's \({differs}\)"):
            translate.main(resume + [option])
    ckpt = torch.load(tmp_path / 'ckpt.pt', weights_only=True)
    del ckpt['data']  # as written before the data was recorded: resumed, with a note
    torch.save(ckpt, tmp_path / 'ckpt.pt')
    translate.main(resume)
    out = capsys.readouterr().out
    assert "ckpt.pt does not record its data (it is older than that record): not checked" in out
    assert f'resuming from {tmp_path / "ckpt.pt"} at iteration 3' in out


@pytest.mark.parametrize('option, message', [
    ('--model.vocab_size=50', r"model.vocab_size=50 cannot be chosen here: the data sets it \(to \d+\)"),
    ('--model.block_size=64', r"model.block_size=64 cannot be chosen here: the data sets it \(to \d+\)"),
    ('--model.pad_token_id=5', r"model.pad_token_id=5 cannot be chosen here: the data sets it \(to 0\)"),
    ('--eval.attention_text=' + '1' * 60, r"eval.attention_text is 61 tokens with its eos, longer than the model's "
                                          r"block_size \(\d+\): shorten it"),
    ('--eval.attention_text=20210303\u03a9', r"eval.attention_text: characters '\u03a9' are not in the vocabulary"),
    ('--data.n_test=40000', r"data.n_test=40000 is out of range: it must be an integer >= 1 and <= 36524"),
    ('--eval.examples=-1', r"eval.examples=-1 is out of range: it must be an integer >= 0"),
    ('--data.tokenizer=word', r"data.tokenizer must be 'char' or 'bpe', not 'word'"),
    # told after the pairs were read (by train_bpe, as 'vocab_size=100'), or not at all for a character vocabulary
    ('--data.tokenizer=bpe --data.vocab_size=100', r"data.vocab_size=100 is too small: a byte-level BPE's vocabulary "
                                                   r"counts the 256 byte tokens, the merges and the 3 special tokens, "
                                                   r"so it must be at least 259$"),
    ('--data.vocab_size=2000', r"data.vocab_size=2000 would do nothing here: data.tokenizer='char' takes every "
                               r"character of the pairs; .* add --data.tokenizer=bpe"),
    # a corpus trains on every pair not held out: n_train, the dates generated, was ignored without a word
    ('--data.path=pairs.tsv', r"data.n_train=200 would do nothing here: n_train is how many dates the default task "
                              r"generates; with data.path every pair not held out .* give a file of fewer pairs"),
])
def test_project_refuses_before_training(option, message, tmp_path):
    translate = load_project('translate')
    with pytest.raises(ConfigError, match=message):
        translate.main([f'--system.work_dir={tmp_path}', '--data.n_train=200', '--data.n_test=20', *option.split()])
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # nothing written


def test_project_takes_a_whole_float_vocab_size_as_its_int():
    """From Python, data.vocab_size=300.0 passed the check and train_bpe then refused it as 'not an int'."""
    translate = load_project('translate')
    config = translate.get_config()
    config.data.tokenizer, config.data.vocab_size = 'bpe', 300.0
    translate.check_options(config)
    assert config.data.vocab_size == 300 and type(config.data.vocab_size) is int


def test_project_looks_for_data_path_as_every_project_does(tmp_path, monkeypatch):
    """A relative data.path was read from this folder alone (not $MINGPT_DATA_DIR's), and a missing one was
    '[Errno 2] No such file or directory' with no fix."""
    translate = load_project('translate')
    (tmp_path / 'corpus').mkdir()
    (tmp_path / 'corpus' / 'pairs.tsv').write_text('a\tb\n', encoding='utf-8')
    monkeypatch.setenv('MINGPT_DATA_DIR', str(tmp_path))

    class Read(Exception):  # the path read_pairs is given, and no training after it
        pass

    def read_pairs(path, n_test, seed):
        raise Read(path)
    monkeypatch.setattr(translate, 'read_pairs', read_pairs)
    with pytest.raises(Read) as read:
        translate.main([f'--system.work_dir={tmp_path / "run"}', '--data.path=corpus/pairs.tsv'])
    assert read.value.args == (tmp_path / 'corpus' / 'pairs.tsv',)
    with pytest.raises(FileNotFoundError, match=r"nothere.tsv does not exist \(nor under .*\); pass the path of an "
                                                r"existing file$"):
        translate.main([f'--system.work_dir={tmp_path / "run"}', '--data.path=nothere.tsv'])


def test_project_on_a_tsv_corpus_with_bpe_and_bleu(tmp_path, capsys, monkeypatch):
    import sys
    import types
    translate = load_project('translate')
    path = tmp_path / 'pairs.tsv'
    path.write_text(''.join(f'{w} {i}\t{i} {w[::-1]}\n' for i, w in enumerate(['cat', 'dog', 'bird'] * 20)))
    args = [f'--data.path={path}', '--data.tokenizer=bpe', '--data.vocab_size=300', '--data.n_test=10',
            '--model.model_type=transformer-nano', '--trainer.max_iters=2', '--trainer.batch_size=4',
            '--trainer.quiet=True', '--eval.examples=2']
    monkeypatch.setitem(sys.modules, 'sacrebleu', None)  # not installed: said so, not an error
    translate.main([f'--system.work_dir={tmp_path / "a"}'] + args)
    assert 'BLEU: skipped (pip install sacrebleu' in capsys.readouterr().out
    fake = types.SimpleNamespace(corpus_bleu=lambda hyps, refs: types.SimpleNamespace(score=12.5))
    monkeypatch.setitem(sys.modules, 'sacrebleu', fake)
    translate.main([f'--system.work_dir={tmp_path / "b"}'] + args)
    assert 'BLEU: 12.50' in capsys.readouterr().out


def opinionated_translator(translate):
    """A character vocabulary of 'abcd' and a random tiny Transformer whose beam search and greedy decoding differ
    on 'dcba' (weights scaled up so that it has strong preferences)."""
    vocab = translate.Vocabulary.train('char', ['abcd'], 0)
    model = tiny(vocab_size=len(vocab), block_size=12)
    torch.manual_seed(4)
    model = Transformer(model.config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(5)
    return vocab, model


def test_a_run_that_does_not_go_on_with_work_dirs_run_starts_without_its_report(tmp_path, monkeypatch):
    """An overwriting run stopped before its end (Ctrl-C) left the replaced run's translations.tsv and attention
    picture beside its own config.json and metrics.jsonl, as the adder's best.pt was: run() now removes them. Here a
    fresh run finds them alone in its work_dir."""
    translate = load_project('translate')
    for name in ('translations.tsv', 'translate_attention.png'):
        (tmp_path / name).write_text("the replaced run's")

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(translate, 'exact_match', stopped)  # in the check at iteration 0, after run() has started
    with pytest.raises(KeyboardInterrupt):
        translate.main([f'--system.work_dir={tmp_path}', '--model.model_type=transformer-nano', '--data.n_train=200',
                        '--data.n_test=20', '--trainer.batch_size=8', '--trainer.quiet=True'])
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix in ('.tsv', '.png')) == []


def test_the_final_report_and_a_checkpoint_translate_with_eval_num_beams(tmp_path, capsys, monkeypatch):
    translate = load_project('translate')
    vocab, model = opinionated_translator(translate)
    greedy, beams = (translate.translate(model, vocab, ['abc', 'dcba'], n) for n in (1, 3))
    assert greedy != beams  # so the two can be told apart
    config = translate.get_config()
    config.model, config.eval.num_beams = model.config, 3
    drawn = []
    monkeypatch.setattr(translate, 'draw_cross_attention', lambda *args: drawn.append(args))
    translate.report(model, vocab, [('abc', beams[0]), ('dcba', beams[1])], config, tmp_path, 'dcba')
    out = capsys.readouterr().out
    assert 'exact match on 2 held-out pairs: 1.0000' in out and drawn[0][2:] == ('dcba', str(tmp_path /
                                                                                        'translate_attention.png'))
    translate.main([f'--sample.checkpoint={tmp_path / "model.pt"}', '--sample.text=abc | dcba', '--eval.num_beams=3'])
    assert capsys.readouterr().out.splitlines()[-2:] == [f"'abc' -> {beams[0]!r}", f"'dcba' -> {beams[1]!r}"]


@pytest.mark.parametrize('record, says', [
    (5, r"its 'vocabulary' should hold kind 'char' and its 'chars', or kind 'bpe' .* \(TypeError"),
    ({'chars': list('abcd')}, r"its 'vocabulary' should hold .* \(KeyError: 'kind'\)"),
    ({'kind': 'char', 'chars': 5}, r"its 'vocabulary' should hold .* \(TypeError"),
    ({'kind': 'char', 'chars': [1, 2, 3, 4]}, r"its 'vocabulary' should hold .* \(TypeError"),
    ({'kind': 'bpe', 'encoder': 5, 'merges': []}, r"its 'vocabulary' should hold .* \(ValueError: the encoder must"),
    ({'kind': 'char', 'chars': list('abcde')}, r"its vocabulary has 8 tokens and its model 7; the two do not belong")])
def test_a_checkpoints_vocabulary_of_another_shape_is_refused_by_name(tmp_path, record, says):
    """Vocabulary(ckpt['vocabulary']) was a bare TypeError or KeyError for a damaged record, and characters that are
    not strings failed only when a translation was printed."""
    translate = load_project('translate')
    vocab, model = opinionated_translator(translate)  # 'abcd' and the three special tokens: 7
    save_checkpoint({**model_state(model), 'vocabulary': record}, tmp_path / 'bad.pt')
    with pytest.raises(ValueError, match=r"bad.pt was not loaded: " + says):
        translate.main([f'--sample.checkpoint={tmp_path / "bad.pt"}', '--sample.text=abc'])


def test_translations_in_batches_are_the_ones_made_alone():
    translate = load_project('translate')
    vocab, model = opinionated_translator(translate)
    sources = ['abc', 'dcba', 'a', 'bbbb', 'cab']
    assert translate.translate(model, vocab, sources, batch_size=2) == [translate.translate(model, vocab, [s])[0]
                                                                      for s in sources]


def test_translating_leaves_the_model_in_its_mode_even_when_interrupted(monkeypatch):
    """translate() ended with model.train(): a model loaded from a checkpoint (eval mode) had its dropout turned on
    for whatever a notebook did next with it; a Ctrl-C while it decoded left a model in training in eval mode."""
    translate = load_project('translate')
    vocab, model = opinionated_translator(translate)
    translate.translate(model, vocab, ['abc'])
    assert not model.training
    model.train()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(model, 'translate', interrupted)
    with pytest.raises(KeyboardInterrupt):
        translate.translate(model, vocab, ['abc'])
    assert model.training


def interrupted_at_call(n, function):
    """function, with a Ctrl-C on its n-th call."""
    calls = []

    def function_or_stop(*args, **kwargs):
        calls.append(args)
        if len(calls) == n:
            raise KeyboardInterrupt
        return function(*args, **kwargs)
    return function_or_stop


def test_a_ctrl_c_says_which_sentence_it_stopped_and_keeps_the_beams_translated_before(tmp_path, capsys,
                                                                                        monkeypatch):
    """--sample.checkpoint with beam search printed nothing until every sentence was translated, so a Ctrl-C lost
    them all and said not where it stopped. Now each is printed as it comes and the stop names the sentence (or,
    greedy, the batch) it cut."""
    translate = load_project('translate')
    vocab, model = opinionated_translator(translate)
    first = translate.translate(model, vocab, ['abc'], num_beams=3)[0]
    save_checkpoint({**model_state(model), 'vocabulary': vocab.record}, tmp_path / 'model.pt')
    monkeypatch.setattr('mingpt.seq2seq.beam_search', interrupted_at_call(2, beam_search))  # the second sentence
    with pytest.raises(KeyboardInterrupt):
        translate.main([f'--sample.checkpoint={tmp_path / "model.pt"}', '--sample.text=abc|dcba|cab',
                        '--eval.num_beams=3'])
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == f"'abc' -> {first!r}"
    assert err.splitlines()[-1] == "(stopped while translating sentence 2 of 3, 'dcba')"
    monkeypatch.setattr(Transformer, 'greedy', interrupted_at_call(2, Transformer.greedy))  # the second batch
    with pytest.raises(KeyboardInterrupt):
        translate.translate(model, vocab, ['abc', 'dcba', 'a', 'bbbb', 'cab'], batch_size=2)
    assert capsys.readouterr().err.splitlines()[-1] == "(stopped while translating sentences 3 to 4 of 5)"


def test_the_translations_file_reads_back_whatever_the_text_and_is_written_whole(tmp_path, monkeypatch):
    translate = load_project('translate')
    pairs = [('a\tb', 'x "y"'), ('one', '1'), ('deux', '2')]  # a tab, quotes, a newline: each must read back
    hyps = ['x "y"', '1\n1', '2']
    path = tmp_path / 'translations.tsv'
    translate.write_translations(pairs, hyps, path)
    with open(path, encoding='utf-8', newline='') as f:
        assert list(csv.reader(f, delimiter='\t')) == [['source', 'reference', 'prediction', 'correct'],
                                                       ['a\tb', 'x "y"', 'x "y"', '1'], ['one', '1', '1\n1', '0'],
                                                       ['deux', '2', '2', '1']]
    before = path.read_bytes()

    class Failing:
        def writerow(self, row):
            pass

        def writerows(self, rows):
            raise OSError("disk full")
    monkeypatch.setattr(translate.csv, 'writer', lambda *args, **kwargs: Failing())
    with pytest.raises(OSError, match="disk full"):
        translate.write_translations(pairs, hyps, path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ['translations.tsv']


def test_examples_show_the_wrong_translations_first(capsys):
    translate = load_project('translate')
    pairs = [('one', '1'), ('two', '2'), ('three', '3'), ('four', '4')]
    translate.print_examples(pairs, ['1', 'x', '3', 'y'], 3)
    assert capsys.readouterr().out.splitlines() == ["  BAD 'two' -> 'x' (expected '2')",
                                                    "  BAD 'four' -> 'y' (expected '4')", "  ok  'one' -> '1'"]


def test_the_cross_attention_picture_has_a_row_for_each_token_written_and_eos(tmp_path, monkeypatch):
    pytest.importorskip('matplotlib')
    translate = load_project('translate')
    vocab, model = opinionated_translator(translate)
    seen, real = [], model.cross_attention_maps
    monkeypatch.setattr(model, 'cross_attention_maps', lambda src, tgt: seen.append(tgt) or real(src, tgt))
    translate.draw_cross_attention(model, vocab, 'adcb', tmp_path / 'a.png')
    written = model.translate(vocab.batch(['adcb']))[0]  # two tokens, then EOS
    assert 0 < len(written) < model.config.block_size - 1
    assert seen[0].tolist() == [written + [vocab.special_ids['<eos>']]] and (tmp_path / 'a.png').stat().st_size


def test_translating_from_a_missing_checkpoint_says_how_to_train_and_name_one(tmp_path, monkeypatch):
    """It said 'train first or pass the path of a saved checkpoint', naming neither the command nor the option."""
    translate = load_project('translate')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=rf"^no checkpoint at out/translate/model.pt \(a path from this "
                                                 rf"folder, {re.escape(str(tmp_path))}\): train one first \(python "
                                                 r"projects/translate.py writes out/translate/model.pt, or model.pt "
                                                 r"in its --system.work_dir\), and give its path with "
                                                 r"--sample.checkpoint=PATH$"):
        translate.main(['--sample.checkpoint=out/translate/model.pt', '--sample.text=1/2/2000'])


def test_the_cross_attention_picture_has_no_eos_row_where_the_translation_wrote_none(tmp_path, monkeypatch):
    """A model that never writes EOS (early in training) runs to the longest translation; the picture gave it an
    EOS row all the same, labelled as a token it wrote."""
    pytest.importorskip('matplotlib')
    translate = load_project('translate')
    vocab, model = opinionated_translator(translate)
    eos, real_logits = vocab.special_ids['<eos>'], model.next_token_logits

    def never_eos(seq, caches):
        logits = real_logits(seq, caches)
        logits[:, eos] = float('-inf')
        return logits
    monkeypatch.setattr(model, 'next_token_logits', never_eos)
    seen, real = [], model.cross_attention_maps
    monkeypatch.setattr(model, 'cross_attention_maps', lambda src, tgt: seen.append(tgt) or real(src, tgt))
    translate.draw_cross_attention(model, vocab, 'abc', tmp_path / 'a.png')
    written = model.translate(vocab.batch(['abc']))[0]
    assert len(written) == model.config.block_size - 1 and seen[0].tolist() == [written]


def test_without_a_working_matplotlib_the_run_goes_on_without_its_picture(tmp_path, monkeypatch, capsys):
    """translate drew with pyplot, after matplotlib.use('Agg') (a notebook's backend switched), and its own message
    called a matplotlib that fails to import (one newer than numpy) 'not installed'; it now uses plot.new_figure."""
    translate = load_project('translate')
    vocab, model = opinionated_translator(translate)

    def broken(width, height):
        raise RuntimeError("drawing needs matplotlib, which is installed but failed to import: numpy too old")
    monkeypatch.setattr(translate, 'new_figure', broken)
    capsys.readouterr()
    translate.draw_cross_attention(model, vocab, 'abc', tmp_path / 'a.png')
    assert capsys.readouterr().out == ("no cross-attention PNG: drawing needs matplotlib, which is installed but "
                                       "failed to import: numpy too old\n")
    assert not model.training and not (tmp_path / 'a.png').exists()  # in eval mode, as it was


@pytest.mark.parametrize('source', ['ab', 'dcbadcba'])
def test_the_cross_attention_picture_shows_its_whole_title_and_axis_labels(source, tmp_path, monkeypatch):
    """A short sentence made a figure narrower than its title: the title and the axis labels were cut off."""
    matplotlib = pytest.importorskip('matplotlib')
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    translate = load_project('translate')
    vocab, model = opinionated_translator(translate)
    figures = []
    real_save = translate.save
    monkeypatch.setattr(translate, 'save', lambda fig, path, dpi: figures.append(fig) or real_save(fig, path, dpi))
    translate.draw_cross_attention(model, vocab, source, tmp_path / 'a.png')
    fig = figures[0]
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # the layout, at the figure's own dpi
    renderer, texts = canvas.get_renderer(), fig.findobj(matplotlib.text.Text)
    shown = [t.get_text() for t in texts if t.get_visible() and t.get_text()]
    assert any(repr(source) in t for t in shown) and 'target tokens written' in shown
    for text in texts:  # the title, the axis labels, the tokens
        if text.get_visible() and text.get_text():
            box = text.get_window_extent(renderer)
            assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0 <= box.y1 <= fig.bbox.y1


def test_the_longest_held_out_sentence_sets_the_context_and_is_drawn(tmp_path, monkeypatch, capsys):
    translate = load_project('translate')
    path = tmp_path / 'pairs.tsv'
    lines = [f'{w} {i}\t{i} {w[::-1]}' for i, w in enumerate(['cat', 'dog', 'bird', 'fish', 'cow', 'owl'] * 2)]
    path.write_text('\n'.join(lines))
    _, test = translate.read_pairs(path, 2, seed=3407)
    long = 'a long sentence about a cat 12'  # held out: the shuffle moves lines by their number, not their text
    lines[lines.index('\t'.join(test[0]))] = f'{long}\t12 tac'
    path.write_text('\n'.join(lines))
    drawn = []
    monkeypatch.setattr(translate, 'draw_cross_attention', lambda model, vocab, source, png: drawn.append(source))
    translate.main([f'--system.work_dir={tmp_path / "run"}', f'--data.path={path}', '--data.n_test=2',
                    '--model.model_type=transformer-nano', '--trainer.max_iters=1', '--trainer.batch_size=4',
                    '--trainer.quiet=True'])
    ckpt = torch.load(tmp_path / 'run' / 'model.pt', weights_only=True)
    assert drawn == [long] and ckpt['model_config']['block_size'] == len(long) + 1  # and its eos
    out = capsys.readouterr().out  # the one iteration is the last: measured once, by the final report
    assert 'exact match on 2 held-out pairs' in out and 'held-out exact match' not in out
    # a corpus's held-out part is bounded by the corpus, not by the dates task's 36524 days
    with pytest.raises(ConfigError, match=r"has 12 pairs, not more than data.n_test=40000"):
        translate.main([f'--system.work_dir={tmp_path / "big"}', f'--data.path={path}', '--data.n_test=40000'])


def test_a_resume_refuses_a_corpus_edited_since(tmp_path, capsys):
    """Only the path was recorded: lines removed (same characters) reshuffled the held-out pairs among trained ones."""
    translate = load_project('translate')
    path = tmp_path / 'pairs.tsv'
    lines = [f'{w} {i}\t{i} {w[::-1]}\n' for i, w in enumerate(['cat', 'dog', 'bird', 'fish'] * 3)]
    path.write_text(''.join(lines))
    run = [f'--system.work_dir={tmp_path / "run"}', f'--data.path={path}', '--data.n_test=2', '--trainer.quiet=True',
           '--model.model_type=transformer-nano', '--trainer.batch_size=4', '--eval.examples=0']
    translate.main(run + ['--trainer.max_iters=1'])
    translate.main(run + ['--trainer.max_iters=2', '--trainer.resume=True'])  # the same file: resumed
    assert 'resuming from' in capsys.readouterr().out
    path.write_text(''.join(lines[:10]))
    with pytest.raises(ConfigError, match=r"its corpus is not this run's \(pairs=12 there, 10 here; sha256='\w+' "
                                          r"there, '\w+' here\)"):
        translate.main(run + ['--trainer.max_iters=3', '--trainer.resume=True'])
    path.write_text(''.join(lines))  # a checkpoint from before the corpus was recorded: resumed, with a note
    ckpt = load_checkpoint(tmp_path / 'run' / 'ckpt.pt')
    del ckpt['corpus']
    save_checkpoint(ckpt, tmp_path / 'run' / 'ckpt.pt')
    translate.main(run + ['--trainer.max_iters=3', '--trainer.resume=True'])
    assert 'does not record its corpus' in capsys.readouterr().out


def test_a_state_dict_whose_tied_embeddings_differ_is_refused():
    """The decoder's embedding and the generator head are one tensor (and the encoder's too, with share_embeddings):
    load_state_dict took a state dict in which they differ and kept whichever it copied last, with no word."""
    model = tiny(share_embeddings=True)
    for name in ('encoder.wte.weight', 'decoder.wte.weight'):
        state = {k: w.clone() for k, w in model.state_dict().items()}
        state[name] += 1
        with pytest.raises(ValueError, match=r"differ, where Transformer ties them into one tensor"):
            model.load_state_dict(state)
    model.load_state_dict(model.state_dict())
