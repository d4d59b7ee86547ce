"""mingpt/engine.py: the fixed-size KV cache and the compiled decode step give model.generate's tokens, for GPT and a
chargpt-style model, ragged batches included, and the step compiles once. Most tests compile with dynamo's
'aot_eager' backend (the graph capture and its guards, which decide recompilation, without a C++ compiler); one
compiles with inductor, the default, when a C++ compiler is found."""
import pytest
import torch
import torch.nn as nn
from torch._dynamo.testing import CompileCounter
from torch._dynamo.utils import counters

from mingpt.engine import Engine
from mingpt.model import GPT, CausalSelfAttention, KVCache
from mingpt.sampling import beam_search
from test_model import VARIANTS, model, padded  # a tiny GPT (vocab 11, block 8, no dropout); rows as batch + mask

AOT_EAGER = dict(backend='aot_eager')


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles from scratch: dynamo keeps at most 8 compiled versions of decode_step, whatever made them."""
    torch._dynamo.reset()


def chargpt_model(block_size=32):
    """chargpt's shape: a gpt-nano preset over Tiny Shakespeare's 65 characters."""
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=65, block_size=block_size))
    torch.manual_seed(0)
    return GPT(C).eval()


@pytest.mark.parametrize('kw', VARIANTS, ids=str)
@pytest.mark.parametrize('prompt_len, new', [(1, 5), (3, 5), (3, 20), (8, 4)])
def test_eager_engine_equals_generate(prompt_len, new, kw):
    # block 8: (3, 20) and (8, 4) go past block_size, where the engine hands over to the sliding window
    m = model(scale=8, **kw)
    idx = torch.randint(0, 11, (3, prompt_len))
    engine = Engine(m)
    assert torch.equal(engine.generate(idx, new), m.generate(idx, new))
    other = torch.randint(0, 11, (3, prompt_len))  # same shapes: the engine's caches are reused, from empty
    assert torch.equal(engine.generate(other, new), m.generate(other, new))


def test_a_generation_started_over_another_stops_the_older_one_instead_of_giving_it_wrong_tokens():
    """Both streams wrote into the engine's one set of buffers: the first went on from the second's keys and values
    and gave other tokens than model.generate, in silence. It now stops with the reason; the newer one is right."""
    m = model(scale=8)
    engine = Engine(m)
    a, b = torch.randint(0, 11, (2, 3)), torch.randint(0, 11, (2, 3))
    first = engine.generate_stream(a, 4)
    next(first)
    assert torch.equal(engine.generate(b, 4), m.generate(b, 4))
    with pytest.raises(RuntimeError, match="this Engine has started another generation since this one: an Engine "
                                           "serves one generation at a time"):
        next(first)
    assert torch.equal(engine.generate(a, 4), m.generate(a, 4))  # a generation after the other is served as before


def test_a_subclass_with_its_own_hidden_states_is_refused_and_one_with_its_own_blocks_served():
    """decode_step repeats GPT's layer loop: a subclass's own hidden_states ran at the prompt only, and the engine
    gave other tokens than model.generate without a word. Its own blocks and embed the step does call."""
    class Scaled(GPT):
        def hidden_states(self, idx, caches=None, attention_mask=None):
            return 3 * super().hidden_states(idx, caches, attention_mask)

    class Doubled(GPT):
        def embed(self, idx, pos):
            return 2 * super().embed(idx, pos)

    plain = model(scale=8)
    for cls in (Scaled, Doubled):
        mine = cls(plain.config).eval()
        mine.load_state_dict(plain.state_dict())
        if cls is Scaled:
            with pytest.raises(ValueError, match="Scaled has its own hidden_states, which the engine's decode step "
                                                 "does not run .*: generate with model.generate"):
                Engine(mine)
        else:
            idx = torch.tensor([[1, 2, 3]])
            assert torch.equal(Engine(mine).generate(idx, 5), mine.generate(idx, 5))


def test_an_engine_takes_a_torch_compiled_model():
    """torch.compile(model) wraps the module in a class without GPT's methods: the check for a subclass's own
    hidden_states failed on it with a bare AttributeError, where the engine had served it."""
    m = model(scale=8)
    idx = torch.tensor([[1, 2, 3]])
    assert torch.equal(Engine(torch.compile(m)).generate(idx, 5), m.generate(idx, 5))


@pytest.mark.parametrize('compile', [False, AOT_EAGER], ids=['eager', 'compiled'])
def test_each_token_the_buffers_have_not_seen_goes_through_a_decode_step(compile):
    """As GPT.next_token_logits, the engine's takes the whole sequence so far, ending in any number of tokens not
    passed before (a loop of one's own may append a token it forces, then the one it chose). The engine sent only
    the last through its decode step: the slot of the one before stayed empty, and the logits were wrong in silence
    (by 2.2 in a logit here)."""
    m = model(scale=4, block_size=32)
    idx, mask = padded([[1, 2, 3], [4]], 'left', pad=3)
    engine = Engine(m, compile=compile)
    caches = engine.new_caches(2, 16)
    engine.next_token_logits(idx, caches, mask)
    for new in ([[5, 6], [7, 8]], [[9], [10]]):  # two unseen tokens, then one
        idx = torch.cat([idx, torch.tensor(new)], dim=1)
        mask = torch.cat([mask, torch.ones_like(torch.tensor(new))], dim=1)
        want = m.next_token_logits(idx, None, mask)  # the whole sequence through the model, no cache
        torch.testing.assert_close(engine.next_token_logits(idx, caches, mask), want, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match=r"^this Engine's buffers hold 6 tokens and seq has 6: pass the whole "
                                         r"sequence so far, ending in the tokens not passed before"):
        engine.next_token_logits(idx, caches, mask)


def rotate(x, pos):
    """Rotary positions: each pair of channels (i, i + hd/2) of x (B, nh, T, hd) turned by pos (T,) times its
    frequency."""
    half = x.size(-1) // 2
    angle = pos[:, None] * 10000 ** (-torch.arange(half) / half)  # (T, hd/2)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * angle.cos() - x2 * angle.sin(), x1 * angle.sin() + x2 * angle.cos()], dim=-1)


class RotaryAttention(CausalSelfAttention):
    """Attention with rotary positions as a student types it into model.py: the new tokens' positions start at the
    cache's length, and their keys are rotated before they are cached. `lens`, if a list, gets the cache's length
    before and after each append."""

    lens = None

    def forward(self, x, context=None, mask=None, cache=None):
        B, T, C = x.size()
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in self.c_attn(x).split(C, 2))
        start = cache.len if cache is not None else 0
        pos = torch.arange(start, start + T)
        q, k = rotate(q, pos), rotate(k, pos)
        if cache is not None:
            k, v = cache.append(k, v)
            if self.lens is not None:
                self.lens.append((start, cache.len))
        return self.c_proj(self.attention(q, k, v, mask).transpose(1, 2).reshape(B, T, C))


def rotary_model():
    m = model(scale=8, block_size=32)
    for block in m.transformer.h:
        attn = RotaryAttention(m.config).eval()
        attn.load_state_dict(block.attn.state_dict())
        block.attn = attn
    return m


def test_the_engines_caches_count_tokens_as_the_models_at_every_point_a_module_reads_them():
    """A step did not count its own token: the cache's len was the prompt's, or the last call's, through the whole
    call. A module read (3, 3) around its append where the model's KVCache gives (3, 4), and with two new tokens in
    one call, both were given the first one's position."""
    m = rotary_model()
    prompt = torch.randint(0, 11, (2, 3))
    calls = [prompt, torch.cat([prompt, torch.tensor([[5, 6], [7, 8]])], dim=1)]  # then two new tokens in one call
    calls.append(torch.cat([calls[-1], torch.tensor([[9], [10]])], dim=1))  # then one
    read = {}
    for name, generator in (('model', m), ('engine', Engine(m))):
        for block in m.transformer.h:
            block.attn.lens = []
        caches = generator.new_caches(2, 16)
        for seq in calls:  # the logits of the whole sequence through the model, without a cache
            torch.testing.assert_close(generator.next_token_logits(seq, caches), m.next_token_logits(seq),
                                       atol=1e-5, rtol=1e-5)
        read[name] = [block.attn.lens for block in m.transformer.h]
    assert read['model'][0] == [(0, 3), (3, 5), (5, 6)]  # the prompt; two tokens at once; one
    assert read['engine'] == [[(0, 3), (3, 4), (4, 5), (5, 6)]] * m.config.n_layer  # one step per token


def test_a_compiled_step_that_reads_the_cache_length_gives_the_models_logits_and_compiles_twice():
    """The count is a host int that the step reads: compiled for its first value, then once for all of them (dynamo's
    automatic dynamic shapes), not at every token. Two new tokens in one call were both at the first one's position."""
    m = rotary_model()
    counter = CompileCounter()
    engine = Engine(m, compile=dict(backend=counter))
    idx = torch.randint(0, 11, (2, 3))
    assert torch.equal(engine.generate(idx, 20), m.generate(idx, 20))
    seq = torch.cat([idx, torch.tensor([[5, 6], [7, 8]])], dim=1)
    with torch.no_grad():  # as in generate: grad mode is part of what a compiled step is kept for
        caches = engine.new_caches(2, 16)  # buffers of the same shape: the same compiled step
        engine.next_token_logits(idx, caches)
        logits = engine.next_token_logits(seq, caches)
    torch.testing.assert_close(logits, m.next_token_logits(seq), atol=1e-5, rtol=1e-5)
    assert counter.frame_count == 2


class MultiQueryAttention(CausalSelfAttention):
    """Multi-query attention as a student types it into model.py: every query head reads one shared head of keys
    and values (c_attn gives the queries' n_embd channels, then one head's key and value)."""

    def __init__(self, config):
        super().__init__(config)
        self.c_attn = nn.Linear(config.n_embd, config.n_embd + 2 * (config.n_embd // config.n_head))

    def forward(self, x, context=None, mask=None, cache=None):
        B, T, C = x.size()
        hd = C // self.n_head
        q, k, v = self.c_attn(x).split([C, hd, hd], dim=2)
        q = q.view(B, T, self.n_head, hd).transpose(1, 2)
        k, v = (t.view(B, T, 1, hd).transpose(1, 2) for t in (k, v))  # (B, 1, T, hd)
        if cache is not None:
            k, v = cache.append(k, v)
        y = self.attention(q, k.expand(-1, self.n_head, -1, -1), v.expand(-1, self.n_head, -1, -1), mask)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


def test_multi_query_attention_is_refused_at_the_prompt_by_name():
    """The buffers hold n_head heads of keys and values: the prompt's one head was spread over all of them in silence,
    then the first decode step failed deep inside, in index_copy_, with a shape error that named no cause."""
    m = model(scale=8, block_size=32)
    for block in m.transformer.h:
        block.attn = MultiQueryAttention(m.config).eval()
    idx = torch.randint(0, 11, (2, 3))
    assert m.generate(idx, 4).shape == (2, 7)  # the model's own KVCache spreads the one head over all of them
    with pytest.raises(ValueError, match=r"^the attention gives keys and values of 1 head for its 2 query heads "
                                         r"\(config.n_head\): an Engine's buffers hold 2, one per query head, so "
                                         r"multi-query or grouped-query attention does not fit them; generate with "
                                         r"model.generate$"):
        Engine(m).generate(idx, 4)


def test_beam_search_over_an_engine_is_refused_by_name():
    """An Engine has what beam_search asks of a model, but its buffers cannot be reordered by beam: it failed with
    'StaticKVCache' object has no attribute 'select'."""
    m = model(scale=8)
    with pytest.raises(TypeError, match=r"beam_search reorders the KV caches' rows at every step, which an Engine's "
                                        r"fixed buffers do not allow: call beam_search\(model, ...\)"):
        beam_search(Engine(m), torch.tensor([[1, 2, 3]]), 3, num_beams=2)
    assert beam_search(m, torch.tensor([[1, 2, 3]]), 3, num_beams=2)[0].shape == (2, 6)


def test_caches_follow_the_models_dtype():
    m = model(scale=8)
    idx = torch.randint(0, 11, (2, 3))
    engine = Engine(m)
    engine.generate(idx, 4)
    m.double()  # the same shapes as before, another dtype: the caches are made again
    assert torch.equal(engine.generate(idx, 4), m.generate(idx, 4))


def test_the_prompts_keys_and_values_go_straight_into_the_buffers(monkeypatch):
    """The prompt's cached forward writes into the engine's buffers: caches of their own held a second copy of its
    keys and values, copied over after (at gpt2's size, 270 MB for 4 prompts of 960 tokens). Nor are caches of the
    prompt's size made and dropped: on CUDA their never-written torch.empty memory still counted at the peak."""
    m = model(scale=8, block_size=32)
    idx, mask = padded([[1, 2, 3, 4, 5], [6, 7]], 'left', pad=3)
    engine = Engine(m)
    written, made = [], []
    append, init = KVCache.append, KVCache.__init__
    monkeypatch.setattr(KVCache, 'append', lambda cache, k, v: written.append(cache.k.data_ptr()) or
                        append(cache, k, v))
    monkeypatch.setattr(KVCache, '__init__', lambda cache, *args: made.append(args) or init(cache, *args))
    out = engine.generate(idx, 6, attention_mask=mask)
    assert made == []  # the model's new_caches allocates buffers
    assert torch.equal(out, m.generate(idx, 6, attention_mask=mask))
    buffers = {cache.k.data_ptr() for cache in engine.caches}
    assert len(buffers) == m.config.n_layer and set(written[:m.config.n_layer]) == buffers  # the engine's prompt


@pytest.mark.parametrize('make, vocab, batch', [(lambda: model(block_size=256), 11, 1), (chargpt_model, 65, 2)])
def test_compiled_decode_equals_eager_and_compiles_once(make, vocab, batch):
    m = make()
    counter = CompileCounter()
    engine = Engine(m, compile=dict(backend=counter))
    idx = torch.randint(0, vocab, (batch, 5))
    assert torch.equal(engine.generate(idx, 24), m.generate(idx, 24))  # 23 decode steps
    assert counter.frame_count == 1  # compiled at the first step, never again
    assert engine.caches[0].k.size(2) == min(64, m.block_size)  # prompt + new tokens, rounded up; not block_size
    other = torch.randint(0, vocab, (batch, 7))  # another prompt of the same shape bucket: the same compiled step
    assert torch.equal(engine.generate(other, 20), m.generate(other, 20))
    assert counter.frame_count == 1


def test_batches_of_many_shapes_share_a_dynamic_compile():
    m = model(block_size=1024)
    counter = CompileCounter()
    engine = Engine(m, compile=dict(backend=counter))
    for B, T in [(1, 5), (2, 70), (3, 130), (1, 200), (4, 300), (2, 400), (1, 500), (3, 600), (2, 700), (1, 900)]:
        idx = torch.randint(0, 11, (B, T))
        assert torch.equal(engine.generate(idx, 3), m.generate(idx, 3))
    assert counter.frame_count <= 3  # the first shape, then dynamic batch and length; never dynamo's limit of 8


@pytest.mark.parametrize('make', [lambda: model(scale=8, block_size=16), lambda: chargpt_model(block_size=16)])
def test_ragged_batch_through_the_compiled_engine_equals_each_row_alone(make):
    m = make()
    rows = [[1, 2, 3, 4, 5, 6, 7], [8], [9, 10, 1]]
    engine = Engine(m, compile=AOT_EAGER)
    for side, new in (('left', 6), ('right', 6), ('left', 14), ('right', 14)):  # 14 goes past block_size 16
        idx, mask = padded(rows, side, pad=3)
        out = engine.generate(idx, new, attention_mask=mask)[:, idx.size(1):]
        for row, got in zip(rows, out):
            assert got.tolist() == m.generate(torch.tensor([row]), new)[0, len(row):].tolist(), (side, new)


def test_float_mask_and_bf16_autocast_as_generate():
    m = model(block_size=32)
    idx, mask = padded([[1, 2, 3, 4], [5, 6]], 'left', pad=3)
    want = m.generate(idx, 6, attention_mask=mask)
    assert torch.equal(Engine(m).generate(idx, 6, attention_mask=mask.float()), want)
    with torch.autocast('cpu', torch.bfloat16):  # keys and values come in bf16, the caches are float32
        assert torch.equal(Engine(m).generate(idx, 6, attention_mask=mask), m.generate(idx, 6, attention_mask=mask))


def test_sampling_and_eos_as_generate():
    m = model(block_size=32)
    idx, mask = padded([[1, 2, 3], [4]], 'left')
    kw = dict(do_sample=True, temperature=0.9, top_k=5, top_p=0.9, attention_mask=mask)
    a = m.generate(idx, 12, generator=torch.Generator().manual_seed(3), **kw)
    b = Engine(m).generate(idx, 12, generator=torch.Generator().manual_seed(3), **kw)
    assert torch.equal(a, b)
    eos = a[0, 6].item()  # row 0's fourth new token
    engine = Engine(m)
    with torch.inference_mode():  # buffers made here are used again outside inference mode
        assert torch.equal(engine.generate(idx, 12, eos_token_id=eos), m.generate(idx, 12, eos_token_id=eos))
    assert torch.equal(engine.generate(idx, 12, eos_token_id=eos), m.generate(idx, 12, eos_token_id=eos))


def inductor_missing():
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
        get_cpp_compiler()
        return None
    except Exception as e:  # the error says which compilers were looked for
        return f"torch.compile's inductor backend needs a C++ compiler on CPU (e.g. apt-get install g++): {e}"


@pytest.mark.skipif(inductor_missing() is not None, reason=str(inductor_missing()))
def test_inductor_compiled_decode_equals_eager():
    import torch._inductor.config
    m = model(block_size=32, n_layer=1)
    idx = torch.randint(0, 11, (2, 4))
    counters.clear()
    engine = Engine(m, compile=True)  # on CPU: max-autotune, the weights frozen into the step
    before = engine.generate(idx, 16)
    assert torch.equal(before, m.generate(idx, 16))
    assert counters['stats']['unique_graphs'] == 1
    torch.manual_seed(1)
    with torch.no_grad():  # the frozen step would still use the old weights: the engine refuses to run
        for p in m.parameters():
            p.copy_(torch.randn_like(p))
    with pytest.raises(RuntimeError, match="weights changed after this Engine compiled"):
        engine.generate(idx, 2)
    new = Engine(m, compile=True)  # compiles its own step, with the new weights (not the first engine's)
    after = new.generate(idx, 16)
    assert torch.equal(after, m.generate(idx, 16)) and not torch.equal(after, before)
    m.transformer.h[0].mlp.c_fc.weight.data = m.transformer.h[0].mlp.c_fc.weight.data * 3  # no version change
    with pytest.raises(RuntimeError, match="weights changed after this Engine compiled"):
        new.generate(idx, 2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CUDA graphs)")
def test_cuda_graphs_decode_equals_eager():
    m = model(block_size=64).cuda()
    idx = torch.randint(0, 11, (2, 5), device='cuda')
    counters.clear()
    assert torch.equal(Engine(m, compile=True).generate(idx, 24), Engine(m).generate(idx, 24))
    assert counters['stats']['unique_graphs'] == 1
