from types import SimpleNamespace

import pytest
import torch

from mingpt.model import GPT, Dropout, Linear
from mingpt.sampling import sample_next, top_k_filter, top_p_filter
from mingpt.utils import ConfigError


def config(**kw):
    C = GPT.get_default_config()
    C.model_type = None
    C.merge_from_dict({**dict(n_layer=2, n_head=2, n_embd=16, vocab_size=11, block_size=8, embd_pdrop=0.0,
                              resid_pdrop=0.0, attn_pdrop=0.0), **kw})
    return C


def model(**kw):
    torch.manual_seed(0)
    return GPT(config(**kw)).eval()


def per_layer(C):
    return 12 * C * C + 13 * C  # attention 4C^2+4C, MLP 8C^2+5C, two layer norms 4C


@pytest.mark.parametrize('name, L, H, C', [('gpt-nano', 3, 3, 48), ('gpt-micro', 4, 4, 128), ('gpt-mini', 6, 6, 192),
                                           ('gopher-44m', 8, 16, 512), ('gpt2', 12, 12, 768),
                                           ('gpt2-medium', 24, 16, 1024), ('gpt2-large', 36, 20, 1280),
                                           ('gpt2-xl', 48, 25, 1600), ('openai-gpt', 12, 12, 768)])
def test_presets_and_parameter_counts(name, L, H, C):
    cfg = GPT.get_default_config()
    cfg.merge_from_dict(dict(model_type=name, vocab_size=50257, block_size=1024))
    with torch.device('meta'):
        m = GPT(cfg)
    assert (cfg.n_layer, cfg.n_head, cfg.n_embd) == (L, H, C)
    # tied head: wte counted once; wpe; L blocks; final layer norm
    assert m.num_parameters() == 50257 * C + 1024 * C + L * per_layer(C) + 2 * C
    if name == 'gpt2':
        assert m.num_parameters() == 124_439_808  # Hugging Face's GPT2LMHeadModel count


def test_config_errors_are_clear():
    C = config(model_type='gpt-nano')
    with pytest.raises(ConfigError, match="not both"):
        GPT(C)
    with pytest.raises(ConfigError, match="unknown model_type 'gpt'"):
        GPT(config(model_type='gpt', n_layer=None, n_head=None, n_embd=None))
    with pytest.raises(ConfigError, match="either model_type"):
        GPT(config(n_layer=None))
    with pytest.raises(ConfigError, match="vocab_size and block_size"):
        GPT(config(vocab_size=None))
    with pytest.raises(ConfigError, match="multiple of n_head"):
        GPT(config(n_head=3))
    # a preset config can be used twice (the sizes it filled in agree with the preset)
    C = config(model_type='gpt-nano', n_layer=None, n_head=None, n_embd=None)
    GPT(C)
    GPT(C)


def test_minGPT_style_usage():
    C = GPT.get_default_config()
    C.model_type = 'gpt-nano'
    C.vocab_size, C.block_size = 10, 6
    m = GPT(C)
    idx = torch.randint(0, 10, (2, 6))
    logits, loss = m(idx, idx)
    assert logits.shape == (2, 6, 10) and loss.ndim == 0
    assert m(idx)[1] is None


def test_tied_head_and_init():
    m = model(n_layer=4, n_embd=64, n_head=4, vocab_size=500, block_size=64)
    assert m.lm_head.weight is m.transformer.wte.weight
    assert abs(m.transformer.wte.weight.std().item() - 0.02) < 0.002
    assert abs(m.transformer.h[0].attn.c_proj.weight.std().item() - 0.02 / (2 * 4) ** 0.5) < 0.001
    assert abs(m.transformer.h[0].mlp.c_fc.weight.std().item() - 0.02) < 0.002


def test_loss_ignores_minus_one_and_matches_manual():
    m = model()
    idx = torch.randint(0, 11, (2, 8))
    tgt = idx.clone()
    tgt[:, :3] = -1
    logits, loss = m(idx, tgt)
    manual = torch.nn.functional.cross_entropy(logits[:, 3:].reshape(-1, 11), idx[:, 3:].reshape(-1))
    assert torch.allclose(loss, manual)


def test_too_long_sequence_is_a_clear_error():
    with pytest.raises(ValueError, match="block_size"):
        model()(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="prompt has 9 tokens"):
        model().generate(torch.zeros(1, 9, dtype=torch.long), 1)


@pytest.mark.parametrize('impl', ['sdpa', 'explicit'])
def test_causality(impl):
    m = model(attn_impl=impl)
    idx = torch.randint(0, 11, (1, 8))
    changed = idx.clone()
    changed[0, 5] = (idx[0, 5] + 1) % 11
    a, b = m(idx)[0], m(changed)[0]
    assert torch.equal(a[:, :5], b[:, :5])  # the past never sees the future
    assert not torch.allclose(a[:, 5:], b[:, 5:])


@pytest.mark.parametrize('threads', [2, 3, 5])  # 5 does not divide the 24 input features: F.linear itself
@pytest.mark.parametrize('shape, out, bias', [((1, 1, 24), 11, False), ((2, 3, 24), 12, True), ((5, 24), 7, True),
                                              ((4, 20, 24), 9, True)])  # the last has 80 rows: F.linear itself
def test_few_rows_linear_equals_nn_linear(threads, shape, out, bias):
    torch.manual_seed(0)
    ours, ref = Linear(24, out, bias=bias), torch.nn.Linear(24, out, bias=bias)
    ref.load_state_dict(ours.state_dict())
    ours.eval()  # on CPU eval() lays the weight out as (in, out), which the few-row path needs
    assert ours.weight.t().is_contiguous() and torch.equal(ours.weight, ref.weight)
    x = torch.randn(shape, requires_grad=True)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)  # each thread takes 24 / threads input features
    try:
        y = ours(x)
        with torch.autocast('cpu', dtype=torch.bfloat16):  # mixed precision: the same dtype out as nn.Linear
            assert ours(x).dtype == ref(x).dtype == torch.bfloat16
    finally:
        torch.set_num_threads(old)
    torch.testing.assert_close(y, ref(x), atol=1e-6, rtol=1e-5)
    y.square().sum().backward()
    gx, x.grad = x.grad, None
    ref(x).square().sum().backward()
    torch.testing.assert_close(gx, x.grad, atol=1e-5, rtol=1e-5)


def test_eval_relays_weights_in_place_and_train_restores_them():
    torch.manual_seed(0)
    m = GPT(config())
    opt = m.configure_optimizers(SimpleNamespace(learning_rate=1e-3, betas=(0.9, 0.95), weight_decay=0.1))
    idx = torch.randint(0, 11, (2, 8))
    w, before = m.lm_head.weight, m.lm_head.weight.detach().clone()
    m.eval()
    # the same Parameter (the optimizer and the tied embedding still hold it), the same values, (in, out) memory
    assert m.lm_head.weight is w and m.transformer.wte.weight is w and w in opt.param_groups[0]['params']
    assert w.t().is_contiguous() and torch.equal(w, before)
    assert all(l.weight.t().is_contiguous() for l in m.modules() if isinstance(l, Linear))
    logits = m(idx)[0]
    m.train()
    assert all(p.is_contiguous() for p in m.parameters()) and torch.equal(w, before)
    m.eval()
    torch.testing.assert_close(m(idx)[0], logits)


def test_dropout_zeroes_a_fraction_p_and_scales_the_rest():
    torch.manual_seed(0)
    d = Dropout(0.1)
    x = torch.rand(1000, 1000) + 1.0  # never 0, so a 0 in the output is a dropped element
    x.requires_grad_(True)
    y = d(x)
    dropped = y == 0
    assert abs(dropped.float().mean().item() - 0.1) < 0.003  # 10 standard deviations of the binomial
    torch.testing.assert_close(y[~dropped], x[~dropped] / 0.9)
    y.sum().backward()
    torch.testing.assert_close(x.grad, (~dropped).float() / 0.9)  # the gradient passes where the value did
    d.eval()
    assert d(x) is x
    assert torch.equal(Dropout(1.0)(x), torch.zeros_like(x))


def test_sdpa_equals_explicit_attention():
    torch.manual_seed(0)
    sd = model()
    ex = model(attn_impl='explicit')
    ex.load_state_dict(sd.state_dict())
    idx = torch.randint(0, 11, (3, 8))
    torch.testing.assert_close(sd(idx)[0], ex(idx)[0], atol=1e-5, rtol=1e-5)
    # and in training mode with gradients
    tgt = torch.randint(0, 11, (3, 8))
    ls, le = sd(idx, tgt)[1], ex(idx, tgt)[1]
    ls.backward()
    le.backward()
    torch.testing.assert_close(sd.transformer.wte.weight.grad, ex.transformer.wte.weight.grad, atol=1e-5, rtol=1e-4)


def test_attention_maps_are_causal_distributions():
    m = model()
    maps = m.attention_maps(torch.randint(0, 11, (2, 8)))
    assert len(maps) == 2 and maps[0].shape == (2, 2, 8, 8)
    for a in maps:
        torch.testing.assert_close(a.sum(-1), torch.ones(2, 2, 8))
        assert (a.triu(diagonal=1) == 0).all()
    assert all(block.attn.weights is None for block in m.transformer.h)  # nothing kept around


def argmax_loop(m, idx, n):
    """The reference: minGPT's generate, greedy, the whole (cropped) context through forward each step."""
    for _ in range(n):
        logits = m(idx[:, -m.block_size:])[0]
        idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return idx


@pytest.mark.parametrize('impl', ['sdpa', 'explicit'])
@pytest.mark.parametrize('prompt_len, new', [(1, 5), (3, 5), (3, 20), (8, 4)])
def test_cached_greedy_equals_forward_loop(prompt_len, new, impl):
    # vocab 11, block 8: (3, 20) and (8, 4) cross the block_size boundary, where the window slides
    m = model(attn_impl=impl)
    idx = torch.randint(0, 11, (3, prompt_len))
    torch.testing.assert_close(m.generate(idx, new), argmax_loop(m, idx, new), rtol=0, atol=0)


def test_stream_yields_same_tokens_as_generate():
    m = model()
    idx = torch.randint(0, 11, (2, 3))
    streamed = torch.cat([idx] + list(m.generate_stream(idx, 10)), dim=1)
    assert torch.equal(streamed, m.generate(idx, 10))


def test_generate_runs_one_forward_per_new_token():
    m = model()
    forwards = []
    hidden_states = m.hidden_states
    m.hidden_states = lambda *a, **kw: forwards.append(1) or hidden_states(*a, **kw)
    m.generate(torch.randint(0, 11, (2, 3)), 5)
    assert len(forwards) == 5  # the prompt's, then one per token but the last, whose logits nobody reads


def test_eos_stops_a_row_and_others_go_on():
    m = model()
    idx = torch.randint(0, 11, (4, 3))
    free = m.generate(idx, 12)
    eos = free[0, 5].item()  # the token row 0 emits at step 3
    out = m.generate(idx, 12, eos_token_id=eos)
    for row, ref in zip(out, free):
        gen = ref[3:].tolist()
        cut = gen.index(eos) + 1 if eos in gen else len(gen)
        assert row[3:3 + cut].tolist() == gen[:cut]  # identical until its eos
        assert (row[3 + cut:] == eos).all()  # then only padding
    if all(eos in r[3:].tolist() for r in free):
        assert out.size(1) < free.size(1)  # all rows done: generation stopped early


def test_top_k_and_top_p_never_pick_outside_allowed_set():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 50, generator=g)
    allowed_k = torch.topk(logits, 5).indices
    probs = logits.softmax(-1)
    sp, order = probs.sort(-1, descending=True)
    n_p = ((sp.cumsum(-1) - sp) < 0.7).sum(-1)  # smallest prefix reaching mass 0.7
    for _ in range(20):
        pick = sample_next(logits, do_sample=True, top_k=5, generator=g)
        assert (pick == allowed_k).any(-1).all()
        pick = sample_next(logits, do_sample=True, top_p=0.7, generator=g)
        for row in range(64):
            assert pick[row].item() in order[row, :n_p[row]].tolist()
    assert (top_k_filter(logits, 5) > float('-inf')).sum(-1).eq(5).all()
    assert (top_p_filter(logits, 0.7) > float('-inf')).sum(-1).eq(n_p).all()
    assert (top_p_filter(logits, 1e-9) > float('-inf')).sum(-1).eq(1).all()  # always at least one token


def test_temperature_must_be_positive_when_sampling():
    with pytest.raises(ValueError, match="temperature"):
        sample_next(torch.randn(1, 5), temperature=0, do_sample=True)


def test_configure_optimizers_decays_matrices_once():
    m = model()
    opt = m.configure_optimizers(type('TC', (), dict(weight_decay=0.1, learning_rate=1e-3, betas=(0.9, 0.95))))
    decay, no_decay = opt.param_groups
    assert decay['weight_decay'] == 0.1 and no_decay['weight_decay'] == 0.0
    assert all(p.dim() >= 2 for p in decay['params']) and all(p.dim() < 2 for p in no_decay['params'])
    ids = [id(p) for g in opt.param_groups for p in g['params']]
    assert len(ids) == len(set(ids)) == len(list(m.parameters()))  # the tied wte/lm_head matrix appears once


def test_tiny_model_overfits_a_fixed_batch():
    m = model(vocab_size=11).train()
    opt = m.configure_optimizers(type('TC', (), dict(weight_decay=0.0, learning_rate=1e-2, betas=(0.9, 0.95))))
    idx = torch.randint(0, 11, (4, 8), generator=torch.Generator().manual_seed(1))
    idx[:, 0] = torch.arange(4)  # distinct first tokens, so every next token is determined by its prefix
    for _ in range(300):
        _, loss = m(idx[:, :-1], idx[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05  # from ln(11) = 2.4
