import math
import warnings

import numpy as np
import pytest
import torch

from conftest import perturb_norms
from mingpt.model import GPT, CausalSelfAttention, Dropout, sinusoidal_positions
from mingpt.sampling import beam_search, sample_next, sampling_probs, top_k_filter, top_p_filter
from mingpt.utils import ConfigError


def config(**kw):
    C = GPT.get_default_config()
    C.model_type = None
    C.merge_from_dict({**dict(n_layer=2, n_head=2, n_embd=16, vocab_size=11, block_size=8, embd_pdrop=0.0,
                              resid_pdrop=0.0, attn_pdrop=0.0), **kw})
    return C


# GPT-2's model, each alternative of GPT.CHOICES alone, and the paper's parts together: the generation tests run on
# every variant, a new one too
VARIANTS = [{}] + [{key: value} for key, values in GPT.CHOICES.items() for value in values[1:]] + [
    dict(pos_embd='sinusoidal', norm='post', activation='relu')]


def model(scale=1, **kw):
    """A tiny GPT (vocab 11, block 8, no dropout). Its random weights at scale=1 give nearly uniform attention,
    which a test of tokens alone hardly sees; scale=8 gives peaked, varied distributions."""
    torch.manual_seed(0)
    m = GPT(config(**kw)).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(scale)
    return m


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
    with pytest.raises(ConfigError, match=r"model_type \('gpt-nano'\) or n_layer/n_head/n_embd \(2/2/16\), not"):
        GPT(C)
    C = config(model_type='gpt-nano', n_layer=None, n_head=None, n_embd=None)
    GPT(C)  # fills in the preset's sizes, as minGPT does
    C.model_type = 'gpt-micro'  # a second model from the same config object
    with pytest.raises(ConfigError, match=r"\(3/3/48\), not both \(a config that GPT\(\) has filled from a "
                                          r"preset holds both\): set model_type=None to use these sizes, or the "
                                          r"sizes to None"):
        GPT(C)
    with pytest.raises(ConfigError, match="unknown model_type 'gpt'"):
        GPT(config(model_type='gpt', n_layer=None, n_head=None, n_embd=None))
    with pytest.raises(ConfigError, match="either model_type"):
        GPT(config(n_layer=None))
    with pytest.raises(ConfigError, match="vocab_size and block_size"):
        GPT(config(vocab_size=None))
    with pytest.raises(ConfigError, match=r"^model.n_embd=16 must be a multiple of model.n_head=3 \(each head takes "
                                          r"n_embd / n_head of the channels\): e.g. 15 or 18$"):
        GPT(config(n_head=3))
    with pytest.raises(ConfigError, match=r"model.n_head=32 .*: e.g. 32$"):  # no multiple below
        GPT(config(n_head=32))
    C = config()
    C.n_layers = 4  # a typo, which would otherwise leave n_layer as it was
    with pytest.raises(ConfigError, match=r"unknown config key 'model.n_layers'; valid keys here are: .*n_layer, "):
        GPT(C)
    # a preset config can be used twice (the sizes it filled in agree with the preset)
    C = config(model_type='gpt-nano', n_layer=None, n_head=None, n_embd=None)
    GPT(C)
    GPT(C)
    C = config(vocab_size=10.0)  # a whole float (e.g. computed) is the int torch needs
    assert GPT(C).config.vocab_size == 10 and type(C.vocab_size) is int


@pytest.mark.parametrize('key, bad, says', [
    ('block_size', 0, 'is out of range: it must be an integer >= 1'), ('block_size', -4, 'integer >= 1'),
    ('n_layer', 0, 'integer >= 1'), ('vocab_size', 2.5, 'is not a whole number'),
    ('embd_pdrop', -0.5, '>= 0 and < 1'), ('attn_pdrop', 1.0, '>= 0 and < 1'),
    ('norm', 'no-such-norm', "'pre', 'post'"), ('pos_embd', 'no-such-positions', "'learned', 'sinusoidal'"),
    ('activation', 'no-such-function', "'gelu', 'relu'"), ('attn_impl', 'no-such-kernel', "'sdpa', 'explicit'")])
def test_a_bad_model_option_is_named_with_its_valid_values(key, bad, says):
    with pytest.raises(ConfigError, match=f"model.{key}.*{says}"):
        GPT(config(**{key: bad}))


def test_minGPT_style_usage():
    C = GPT.get_default_config()
    C.model_type = 'gpt-nano'
    C.vocab_size, C.block_size = 10, 6
    m = GPT(C)
    idx = torch.randint(0, 10, (2, 6))
    with pytest.warns(UserWarning, match='targets is idx itself'):  # runs, and says what targets are
        logits, loss = m(idx, idx)
    assert logits.shape == (2, 6, 10) and loss.ndim == 0
    assert m(idx)[1] is None


def test_the_targets_is_idx_warning_names_the_callers_line_under_torch_compile():
    """A fixed stacklevel counted forward's frames: under torch.compile it named torch/_dynamo/eval_frame.py."""
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=10, block_size=6))
    idx = torch.randint(0, 10, (2, 6))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        torch.compile(GPT(C), backend='eager')(idx, idx)
    # one warning (none of dynamo's about tracing the frame walk), at this file's line
    assert [(str(w.message)[:26], w.filename) for w in caught] == [('targets is idx itself: tar', __file__)]


def test_the_parameter_count_is_printed_once_under_torchrun(capsys, monkeypatch):
    """A script of one's own, run by torchrun, builds the model in every process (before any process group):
    the first prints minGPT's line, the others (RANK, which torchrun sets, above 0) stay quiet."""
    expected = f"number of parameters: {GPT(config()).num_parameters() / 1e6:.2f}M\n"
    for rank, printed in ((None, expected), ('0', expected), ('1', ''), ('3', '')):
        if rank is None:
            monkeypatch.delenv('RANK', raising=False)
        else:
            monkeypatch.setenv('RANK', rank)
        capsys.readouterr()
        GPT(config())
        assert capsys.readouterr().out == printed, rank


def test_sizes_from_numpy_or_torch_scalars_are_taken_as_minGPT_took_them():
    # e.g. vocab_size = data.max() + 1 on a numpy array or a tensor: torch's layers take them, and so did minGPT
    C = config()
    C.vocab_size, C.block_size, C.attn_pdrop = np.int64(11), torch.tensor(8), np.float32(0.0)
    m = GPT(C)
    assert (C.vocab_size, C.block_size) == (11, 8) and type(C.vocab_size) is type(C.block_size) is int
    assert type(C.attn_pdrop) is float  # plain Python numbers: the checkpoint's model_config loads with weights_only
    out = m.generate(torch.zeros(1, 1, dtype=torch.long), np.int64(3), do_sample=True, top_k=np.int64(2))
    assert out.shape == (1, 4)
    assert torch.equal(m.generate(out, 3.0), m.generate(out, 3))  # a count computed as a float, n / 2


def test_tied_head_and_init():
    m = model(n_layer=4, n_embd=64, n_head=4, vocab_size=500, block_size=64)
    assert m.lm_head.weight is m.transformer.wte.weight
    assert abs(m.transformer.wte.weight.std().item() - 0.02) < 0.002
    for block in m.transformer.h:  # both residual projections, the attention's and the MLP's: 0.02 / sqrt(2 * 4)
        for proj in (block.attn.c_proj, block.mlp.c_proj):
            assert abs(proj.weight.std().item() - 0.02 / (2 * 4) ** 0.5) < 0.001
    assert abs(m.transformer.h[0].mlp.c_fc.weight.std().item() - 0.02) < 0.002
    linears = [mod for mod in m.modules() if isinstance(mod, torch.nn.Linear) and mod.bias is not None]
    norms = [mod for mod in m.modules() if isinstance(mod, torch.nn.LayerNorm)]
    assert len(linears) == 4 * 4 and len(norms) == 2 * 4 + 1
    assert all((mod.bias == 0).all() for mod in linears)  # GPT-2 starts every bias at 0
    assert all((mod.weight == 1).all() and (mod.bias == 0).all() for mod in norms)


def test_init_takes_a_layer_norm_without_bias():
    """A student's nn.LayerNorm(n_embd, bias=False) (a bias option, as in nanoGPT) gets gain 1 from GPT's init;
    it raised AttributeError, zeroing a bias that is None."""
    ln = torch.nn.LayerNorm(4, bias=False)
    with torch.no_grad():
        ln.weight.fill_(3.0)
    model()._init_weights(ln)
    assert ln.bias is None and (ln.weight == 1).all()


def test_loss_ignores_minus_one_and_matches_manual():
    m = model()
    idx = torch.randint(0, 11, (2, 8))
    tgt = idx.clone()
    tgt[:, :3] = -1
    logits, loss = m(idx, tgt)
    manual = torch.nn.functional.cross_entropy(logits[:, 3:].reshape(-1, 11), idx[:, 3:].reshape(-1))
    assert torch.allclose(loss, manual)


def test_too_long_sequence_is_a_clear_error():
    with pytest.raises(ValueError, match=r"crop the input to its last 8 tokens, or build the model with "
                                         r"block_size >= 9 \(to train on a dataset's windows\)"):
        model()(torch.zeros(1, 9, dtype=torch.long))  # e.g. a batch of the data's windows, longer than the model's
    m = model()  # with a cache the length is the cached tokens and the new ones: 6 + 3 > block_size 8
    caches = m.new_caches(1)
    m.hidden_states(torch.zeros(1, 6, dtype=torch.long), caches)
    with pytest.raises(ValueError, match=r"cannot forward a sequence of length 9: the model's context \(block_size\) "
                                         r"is 8"):
        m.hidden_states(torch.zeros(1, 3, dtype=torch.long), caches)
    with pytest.raises(ValueError, match="prompt has 9 tokens"):
        model().generate(torch.zeros(1, 9, dtype=torch.long), 1)


def test_a_prompt_without_its_batch_dimension_or_its_tokens_says_which():
    with pytest.raises(ValueError, match=r"of shape \(3,\): a single sequence is idx\[None\]$"):
        model().generate(torch.tensor([0, 3, 4]), 1)  # e.g. torch.tensor(tokenizer.encode(text))
    with pytest.raises(ValueError, match=r"got shape \(1, 0\) \(e.g. start from a newline or start-of-text token\)$"):
        model().generate(torch.zeros(1, 0, dtype=torch.long), 1)
    with pytest.raises(ValueError, match=r"of shape \(1, 1, 3\)$"):
        model().generate(torch.zeros(1, 1, 3, dtype=torch.long), 1)
    with pytest.raises(ValueError, match=r"^the prompt is a batch of no rows, shape \(0, 3\): give at least one "
                                         r"prompt$"):
        model().generate(torch.zeros(0, 3, dtype=torch.long), 1)  # was min()'s error on an empty tensor


@pytest.mark.parametrize('bad', [11, -1])
def test_a_prompt_outside_the_vocabulary_is_a_clear_error(bad):
    with pytest.raises(ValueError, match=rf"token ids from {min(bad, 0)} to {max(bad, 3)}, outside the model's "
                                         r"vocabulary of 11: encode it with the model's tokenizer"):
        model().generate(torch.tensor([[0, 3, bad]]), 1)


@pytest.mark.parametrize('generate', ['generate', 'beam_search', 'engine'])
@pytest.mark.parametrize('eos', [11, 50256, -1])
def test_an_end_token_outside_the_vocabulary_is_a_clear_error(generate, eos):
    """An eos_token_id the model can never emit (GPT-2's 50256 given to a character model) let generation run to
    max_new_tokens as if none were given, and -1 padded finished rows with an id no tokenizer decodes."""
    from mingpt.engine import Engine
    m, idx = model().eval(), torch.tensor([[0, 3]])
    call = dict(generate=lambda: m.generate(idx, 2, eos_token_id=eos),
                beam_search=lambda: beam_search(m, idx, 2, num_beams=2, eos_token_id=eos),
                engine=lambda: Engine(m).generate(idx, 2, eos_token_id=eos))[generate]
    with pytest.raises(ConfigError, match=rf"eos_token_id={eos} is out of range: it must be None or an integer >= 0 "
                                          r"and <= 10$"):
        call()
    assert m.generate(idx, 2, eos_token_id=np.int64(10)).shape == (1, 4)  # the last id is a token like any


@pytest.mark.parametrize('bad', [11, -1])
def test_forward_names_a_vocabulary_too_small_for_the_data(bad):
    with pytest.raises(ValueError, match=rf"idx holds token ids from {min(bad, 0)} to {max(bad, 3)}, outside the "
                                         r"model's vocabulary of 11: set model.vocab_size from the data"):
        model()(torch.tensor([[0, 3, bad]]))


def test_forward_of_a_sequence_without_its_batch_dimension_is_a_clear_error():
    with pytest.raises(ValueError, match=r"idx must be \(batch, tokens\) int64 or int32 token ids, got torch.int64 of "
                                         r"shape \(3,\): a single sequence is idx\[None\]"):
        model()(torch.tensor([0, 3, 4]))
    with pytest.raises(ValueError, match=r"int32 token ids, got torch.float32 of shape \(1, 3\)$"):
        model()(torch.tensor([[0.0, 3.0, 4.0]]))


def test_ids_as_a_list_are_refused_naming_the_conversion():
    """A list of ids (tok.encode's) failed deep inside with "'list' object has no attribute 'dim'"."""
    for call in (lambda m: m([[0, 3, 4]]), lambda m: m.eval().generate([[0, 3, 4]], 2),
                 lambda m: m.attention_maps([[0, 3, 4]])):
        with pytest.raises(TypeError, match=r"^idx must be a tensor of token ids, \(batch, tokens\), got a list: "
                                            r"torch.tensor\(idx\) converts a list of lists of ids \(or a numpy "
                                            r"array\)$"):
            call(model())


@pytest.mark.parametrize('dtype', [torch.uint8, torch.int16, torch.uint16])
def test_ids_of_a_small_integer_type_are_refused_naming_the_conversion(dtype):
    """nn.Embedding takes only int64 and int32 indices; uint16 is how token files (nanoGPT's .bin) store ids, and
    PyTorch's own error named neither the model's argument nor the fix."""
    with pytest.raises(ValueError, match=rf"int64 or int32 token ids, got {dtype} of shape \(1, 3\): idx.long\(\) "
                                         r"converts them"):
        model()(torch.tensor([[0, 3, 4]], dtype=dtype))
    with pytest.raises(ValueError, match=rf"got {dtype} of shape \(1, 3\): idx.long"):
        model().eval().generate(torch.tensor([[0, 3, 4]], dtype=dtype), 2)


def test_targets_of_another_shape_are_refused_and_int32_ids_work():
    m, idx = model(), torch.tensor([[0, 3, 4], [1, 2, 5]])
    for bad in (idx.T, idx[:, :2], idx[0]):  # transposed (as many elements): once a silently wrong loss
        with pytest.raises(ValueError, match=rf"targets must have idx's shape \(2, 3\), the next token at each "
                                             rf"position, got \({', '.join(map(str, bad.shape))},?\)"):
            m(idx, bad)
    logits, loss = m(idx.int(), idx.roll(-1, 1).int())  # int32, as a numpy-made dataset may give
    assert torch.equal(loss, m(idx, idx.roll(-1, 1))[1])
    assert torch.equal(loss, m(idx, idx.roll(-1, 1).view(-1))[1])  # flattened, as minGPT's forward accepted them
    for bad in (idx.masked_fill(idx == 3, -100), idx + 9):  # Hugging Face's ignored label; an id past the vocabulary
        with pytest.raises(ValueError, match=rf"targets hold ids from {bad.min()} to {bad.max()}: each must be a token "
                                             r"id below vocab_size=11, or -1 for a position that does not count"):
            m(idx, bad)
    labels = idx.masked_fill(idx == 3, -100)  # the fix the message names gives the loss of Hugging Face's convention
    with pytest.raises(ValueError, match=r"labels have -100: targets.masked_fill\(targets == -100, -1\)\)$"):
        m(idx, labels)
    logits, loss = m(idx, labels.masked_fill(labels == -100, -1))
    assert torch.allclose(loss, torch.nn.functional.cross_entropy(logits.view(-1, 11), labels.view(-1)))  # -100 ignored
    # Hugging Face's model(input_ids, labels=input_ids), which it shifts itself: here it trains to copy the input.
    # Warned of, not refused: minGPT's forward took it, and code written for minGPT runs unchanged
    with pytest.warns(UserWarning, match=r"targets is idx itself: targets are the next token at each position, the "
                                         r"ids shifted by one \(idx = ids\[:, :-1\], targets = ids\[:, 1:\]\)"):
        assert m(idx, idx)[1].ndim == 0


@pytest.mark.parametrize('mask', [[[0, 1, 2]], [[0.0, float('-inf'), 0.0]]])
def test_an_attention_mask_other_than_zeros_and_ones_is_refused(mask):
    with pytest.raises(ValueError, match=r"attention_mask must hold only 0 \(padding\) and 1 \(real tokens\)"):
        model().generate(torch.tensor([[0, 3, 4]]), 1, attention_mask=torch.tensor(mask))
    float_mask = torch.tensor([[0.0, 1.0, 1.0]])
    assert model().generate(torch.tensor([[0, 3, 4]]), 1, attention_mask=float_mask).shape == (1, 4)
    with pytest.raises(ValueError, match=r"attention_mask has shape \(1, 2\) but the prompt has \(1, 3\)"):
        model().generate(torch.tensor([[0, 3, 4]]), 1, attention_mask=torch.tensor([[1, 1]]))


def test_a_negative_number_of_new_tokens_is_refused():
    with pytest.raises(ValueError, match=r"max_new_tokens=-3 is out of range: it must be an integer >= 0"):
        model().generate(torch.tensor([[0, 3]]), -3)
    assert model().generate(torch.tensor([[0, 3]]), 0).tolist() == [[0, 3]]


def test_one_obvious_place_chooses_the_attention_path(monkeypatch):
    """The comparisons of the two paths mean something only if each runs where it should."""
    calls = []
    sdpa, explicit = torch.nn.functional.scaled_dot_product_attention, CausalSelfAttention.explicit_attention
    monkeypatch.setattr(torch.nn.functional, 'scaled_dot_product_attention',
                        lambda *a, **k: calls.append('sdpa') or sdpa(*a, **k))
    monkeypatch.setattr(CausalSelfAttention, 'explicit_attention',
                        lambda *a, **k: calls.append('explicit') or explicit(*a, **k))
    idx = torch.randint(0, 11, (1, 8))

    def paths(m, run):
        calls.clear()
        run(m)
        return set(calls)
    assert paths(model(attn_impl='explicit'), lambda m: m(idx)) == {'explicit'}
    assert paths(model(), lambda m: m(idx)) == {'sdpa'}
    assert paths(model(), lambda m: m.generate(idx[:, :3], 3)) == {'sdpa'}
    assert paths(model(attn_impl='explicit'), lambda m: m.generate(idx[:, :3], 3)) == {'explicit'}
    assert paths(model(), lambda m: m.attention_maps(idx)) == {'explicit'}  # the maps are its weights
    assert paths(model(attn_pdrop=0.1).train(), lambda m: m(idx)) == {'explicit'}  # CPU training with dropout
    assert paths(model(attn_pdrop=0.1).eval(), lambda m: m(idx)) == {'sdpa'}  # in eval, no dropout: fused again


@pytest.mark.parametrize('impl', ['sdpa', 'explicit'])
def test_causality(impl):
    m = model(attn_impl=impl)
    idx = torch.randint(0, 11, (1, 8))
    changed = idx.clone()
    changed[0, 5] = (idx[0, 5] + 1) % 11
    a, b = m(idx)[0], m(changed)[0]
    assert torch.equal(a[:, :5], b[:, :5])  # the past never sees the future
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_train_and_eval_leave_parameters_where_they_are():
    m = GPT(config())
    layout = {n: (p.data_ptr(), p.stride()) for n, p in m.named_parameters()}
    for mode in (m.eval, m.train, m.eval):
        mode()
        assert {n: (p.data_ptr(), p.stride()) for n, p in m.named_parameters()} == layout
        m.transformer.wte.weight.view(-1)  # a probe that needs contiguous memory works in either mode


def test_three_token_attention_by_hand():
    """One head, q = k = v = x for x1 = [1, 0], x2 = [0, 1], x3 = [1, 1] (d = 2), worked on paper:
    token 3's scores x3.x1 = 1, x3.x2 = 1, x3.x3 = 2, scaled by 1/sqrt(2): 0.7071, 0.7071, 1.4142;
    softmax: e^0.7071 = 2.0281, e^1.4142 = 4.1133, sum 8.1695 -> 0.2483, 0.2483, 0.5035;
    output 0.2483 x1 + 0.2483 x2 + 0.5035 x3 = [0.7517, 0.7517]. Token 2 sees x1, x2: scores 0, 0.7071 ->
    weights 1/3.0281 = 0.3302, 0.6698 -> [0.3302, 0.6698]. Token 1 sees only itself: [1, 0]."""
    C = config(n_layer=1, n_head=1, n_embd=2, attn_impl='explicit')
    attn = CausalSelfAttention(C)
    with torch.no_grad():
        attn.c_attn.weight.copy_(torch.eye(2).repeat(3, 1))  # query, key and value are all x itself
        attn.c_attn.bias.zero_()
        attn.c_proj.weight.copy_(torch.eye(2))
        attn.c_proj.bias.zero_()
    attn.keep_weights = True
    y = attn(torch.tensor([[[1., 0.], [0., 1.], [1., 1.]]]))
    torch.testing.assert_close(attn.weights[0, 0], torch.tensor([[1, 0, 0], [0.3302, 0.6698, 0],
                                                                 [0.2483, 0.2483, 0.5035]]), atol=1e-4, rtol=0)
    torch.testing.assert_close(y[0], torch.tensor([[1., 0.], [0.3302, 0.6698], [0.7517, 0.7517]]), atol=1e-4, rtol=0)


def test_layer_norm_by_hand():
    """"The" = [0.5, 0.1, 0.3]: mean 0.3, variance (0.04 + 0.04 + 0) / 3 = 0.02667, std 0.1633;
    (x - mean) / std = [1.2247, -1.2247, 0] (the notes round to [1.23, -1.23, 0])."""
    ln = torch.nn.LayerNorm(3, eps=0.0)  # GPT's layer norms start with gain 1 and bias 0
    torch.testing.assert_close(ln(torch.tensor([0.5, 0.1, 0.3])), torch.tensor([1.2247, -1.2247, 0.]),
                               atol=1e-4, rtol=0)


def test_sinusoidal_positions_by_hand():
    pe = sinusoidal_positions(50, 6)  # d = 6: wavelengths 10000^(0/6), 10000^(2/6), 10000^(4/6) times 2 pi
    for pos in (0, 1, 7, 49):
        for i in range(3):
            angle = pos / 10000 ** (2 * i / 6)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    assert sinusoidal_positions(4, 5).shape == (4, 5)  # an odd width ends with a sine


def test_sinusoidal_model_uses_the_table_and_saves_no_positions():
    m = model(pos_embd='sinusoidal')
    assert 'transformer.wpe.table' not in m.state_dict()  # fixed, not learned: nothing to save
    assert not any('wpe' in n for n, _ in m.named_parameters())
    idx = torch.randint(0, 11, (1, 8))
    x = m.transformer.wte(idx) * 4 + sinusoidal_positions(8, 16)  # tokens scaled by sqrt(n_embd) = 4
    for block in m.transformer.h:
        x = block(x)
    torch.testing.assert_close(m(idx)[0], m.lm_head(m.transformer.ln_f(x)))


def test_post_norm_block_is_add_and_norm():
    m = perturb_norms(model(norm='post', activation='relu'))
    block = m.transformer.h[0]
    x = torch.randn(2, 8, 16)
    # written out: LN(x + attention(x)), then LN(h + W2 relu(W1 h))
    h = block.ln_1(x + block.attn(x))
    mlp = block.mlp.c_proj(torch.relu(block.mlp.c_fc(h)))
    torch.testing.assert_close(block(x), block.ln_2(h + mlp))
    assert isinstance(m.transformer.ln_f, torch.nn.Identity)
    pre = perturb_norms(model()).transformer.h[0]
    h = x + pre.attn(pre.ln_1(x))  # GPT-2: x + f(LN(x))
    torch.testing.assert_close(pre(x), h + pre.mlp(pre.ln_2(h)))


@pytest.mark.parametrize('switch', [dict(), dict(norm='post'), dict(activation='relu'), dict(pos_embd='sinusoidal')])
def test_each_variant_learns(switch):
    torch.manual_seed(0)
    m = GPT(config(**switch))
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    idx = torch.randint(0, 11, (4, 8))
    losses = []
    for _ in range(60):
        loss = m(idx[:, :-1], idx[:, 1:])[1]
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]  # random tokens: 60 steps memorise a good part of them


def test_old_configs_get_the_gpt2_defaults():
    C = config()
    for key in ('pos_embd', 'norm', 'activation', 'attn_impl'):
        delattr(C, key)  # a config from minGPT's get_default_config, or an older checkpoint
    m = GPT(C)
    assert (C.pos_embd, C.norm, C.activation) == ('learned', 'pre', 'gelu')
    assert isinstance(m.transformer.wpe, torch.nn.Embedding)


def test_sdpa_equals_explicit_attention():
    torch.manual_seed(0)
    sd = model()
    ex = model(attn_impl='explicit')
    ex.load_state_dict(sd.state_dict())
    idx = torch.randint(0, 11, (3, 8))
    torch.testing.assert_close(sd(idx)[0], ex(idx)[0], atol=1e-5, rtol=1e-5)
    # and the same gradients
    tgt = torch.randint(0, 11, (3, 8))
    ls, le = sd(idx, tgt)[1], ex(idx, tgt)[1]
    ls.backward()
    le.backward()
    torch.testing.assert_close(sd.transformer.wte.weight.grad, ex.transformer.wte.weight.grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize('new', [1, 3])
def test_explicit_equals_sdpa_with_a_cache(new):
    sd, ex = model(), model(attn_impl='explicit')
    idx = torch.randint(0, 11, (2, 8))
    full = sd.hidden_states(idx)
    for m in (sd, ex):
        caches = m.new_caches(2)
        m.hidden_states(idx[:, :8 - new], caches)
        torch.testing.assert_close(m.hidden_states(idx[:, 8 - new:], caches), full[:, 8 - new:],
                                   atol=1e-5, rtol=1e-5)


def test_tokens_past_a_caches_length_or_of_another_batch_are_refused_by_name():
    """Caches for 4 tokens take 3, then not 3 more (block_size 8 would allow them); caches for 2 rows take no 1-row
    batch. Both were shape errors from inside attention."""
    m = model()
    caches = m.new_caches(1, 4)
    m.hidden_states(torch.zeros(1, 3, dtype=torch.long), caches)
    with pytest.raises(ValueError, match=r"holds 1 rows of up to 4 tokens and has 3; 3 more of 1 rows do not fit: "
                                         r"make the caches with new_caches\(batch_size, max_len\)"):
        m.hidden_states(torch.zeros(1, 3, dtype=torch.long), caches)
    with pytest.raises(ValueError, match=r"holds 2 rows of up to 8 tokens and has 0; 3 more of 1 rows do not fit"):
        m.hidden_states(torch.zeros(1, 3, dtype=torch.long), m.new_caches(2))


def test_an_attention_mask_of_the_wrong_length_is_named():
    """With caches the mask covers the cached tokens and the new ones: a mask of the new ones only failed with
    a size mismatch from inside the masks' arithmetic ('The size of tensor a (5) must match ... b (3)')."""
    m, idx = model(), torch.randint(0, 11, (2, 5))
    caches = m.new_caches(2)
    m.hidden_states(idx[:, :2], caches, torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"attention_mask has shape \(2, 3\); for 2 rows of 2 cached and 3 new "
                                         r"tokens it must be \(2, 5\)"):
        m.hidden_states(idx[:, 2:], caches, torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"attention_mask has shape \(5,\)"):
        m.hidden_states(idx, attention_mask=torch.ones(5))


def test_attention_maps_are_causal_distributions():
    m = model()
    maps = m.attention_maps(torch.randint(0, 11, (2, 8)))
    assert len(maps) == 2 and maps[0].shape == (2, 2, 8, 8)
    for a in maps:
        torch.testing.assert_close(a.sum(-1), torch.ones(2, 2, 8))
        assert (a.triu(diagonal=1) == 0).all()
    assert all(block.attn.weights is None for block in m.transformer.h)  # nothing kept around


def test_attention_maps_of_a_padded_batch_are_each_rows_alone():
    """A left-padded row's maps, at its real tokens, are the maps of the row alone; padding gets no weight."""
    m, idx = model(), torch.randint(0, 11, (2, 8))
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1], [1] * 8])
    for padded, alone, full in zip(m.attention_maps(idx, mask), m.attention_maps(idx[:1, 3:]), m.attention_maps(idx)):
        torch.testing.assert_close(padded[0, :, 3:, 3:], alone[0])
        assert (padded[0, :, 3:, :3] == 0).all()
        torch.testing.assert_close(padded[1], full[1])


def test_attention_maps_leave_dropout_out_and_the_mode_alone():
    m = model(embd_pdrop=0.5, resid_pdrop=0.5, attn_pdrop=0.5).train()
    idx = torch.randint(0, 11, (2, 8))
    first, again = m.attention_maps(idx), m.attention_maps(idx)
    assert m.training and all(torch.equal(a, b) for a, b in zip(first, again))
    assert all(torch.equal(a, b) for a, b in zip(first, m.eval().attention_maps(idx)))
    assert not m.training  # a model in eval mode stays there


def test_float_attention_mask_counts_positions_as_an_integer_one():
    m, idx = model(), torch.randint(0, 11, (2, 6))
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    torch.testing.assert_close(m.hidden_states(idx, attention_mask=mask.float()),
                               m.hidden_states(idx, attention_mask=mask))


def argmax_loop(m, idx, n):
    """The reference: minGPT's generate, greedy, the whole (cropped) context through forward each step."""
    for _ in range(n):
        logits = m(idx[:, -m.block_size:])[0]
        idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return idx


@pytest.mark.parametrize('variant', VARIANTS, ids=str)
@pytest.mark.parametrize('prompt_len, new', [(1, 5), (3, 5), (3, 20), (8, 4)])
def test_cached_greedy_equals_forward_loop(prompt_len, new, variant):
    # vocab 11, block 8: (3, 20) and (8, 4) cross the block_size boundary, where the window slides
    m = model(**variant)
    idx = torch.randint(0, 11, (3, prompt_len))
    torch.testing.assert_close(m.generate(idx, new), argmax_loop(m, idx, new), rtol=0, atol=0)


def test_next_token_logits_asked_again_without_a_new_token_says_what_to_pass():
    """A loop of one's own that forgets to append the chosen token: it was an IndexError on no hidden states."""
    m, seq = model(), torch.tensor([[1, 2, 3]])
    caches = m.new_caches(1)
    m.next_token_logits(seq, caches)
    with pytest.raises(ValueError, match=r"^the caches have seen 3 tokens and seq has 3: pass the whole sequence so "
                                         r"far, ending in the tokens the caches have not seen"):
        m.next_token_logits(seq, caches)
    torch.testing.assert_close(m.next_token_logits(torch.tensor([[1, 2, 3, 4]]), caches),
                               m(torch.tensor([[1, 2, 3, 4]]))[0][:, -1], atol=1e-6, rtol=1e-6)


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
    fed = []
    m.hidden_states = lambda idx, *a, **kw: fed.append(idx.size(1)) or hidden_states(idx, *a, **kw)
    m.generate(torch.randint(0, 11, (2, 3)), 8)  # block_size 8: the sequence reaches 8, then 9 and 10 tokens
    assert fed == [3, 1, 1, 1, 1, 1, 8, 8]  # the cache serves up to block_size tokens; past it, windows of 8


def test_eos_stops_a_row_and_others_go_on():
    m = model(scale=8)
    idx = torch.randint(0, 11, (4, 3), generator=torch.Generator().manual_seed(1))
    free = m.generate(idx, 12)
    eos = free[0, 5].item()  # the token row 0 emits at step 3
    assert free[0, 6].item() != eos  # without eos_token_id, row 0 goes on with other tokens
    out = m.generate(idx, 12, eos_token_id=eos)
    for row, ref in zip(out, free):
        gen = ref[3:].tolist()
        cut = gen.index(eos) + 1 if eos in gen else len(gen)
        assert row[3:3 + cut].tolist() == gen[:cut]  # identical until its eos
        assert (row[3 + cut:] == eos).all()  # then only padding
    # once every row has emitted eos the stream stops: here after the first token
    first = m.generate(idx[:1], 1)[0, -1].item()
    assert len(list(m.generate_stream(idx[:1], 10, eos_token_id=first))) == 1


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
    assert torch.equal(top_k_filter(logits, 5.0), top_k_filter(logits, 5))  # a config's 5.0 is 5
    assert (top_p_filter(logits, 0.7) > float('-inf')).sum(-1).eq(n_p).all()
    assert (top_p_filter(logits, 1e-9) > float('-inf')).sum(-1).eq(1).all()  # always at least one token
    # four equal tokens, p=0.5: the first two already hold 0.5, so two are kept (as HF's TopPLogitsWarper)
    assert (top_p_filter(torch.zeros(1, 4), 0.5) > float('-inf')).sum().item() == 2


def test_top_p_reads_the_distribution_that_top_k_left():
    """Probabilities 0.35, 0.25, 0.2, 0.1, 0.1 with top_k=2, top_p=0.55, by hand: top-k keeps 0.35 and 0.25,
    renormalised 0.5833 and 0.4167; the first already holds 0.55, so top-p keeps it alone (as HF's warpers, top-k
    then top-p). Top-p over the full distribution would keep both (0.35 < 0.55)."""
    logits = torch.tensor([[0.35, 0.25, 0.2, 0.1, 0.1]]).log()
    torch.testing.assert_close(sampling_probs(logits, top_k=2, top_p=0.55), torch.tensor([[1.0, 0, 0, 0, 0]]))
    torch.testing.assert_close(sampling_probs(logits, top_k=2), torch.tensor([[0.35, 0.25, 0, 0, 0]]) / 0.6)
    # temperature 2 flattens first: 0.35^0.5, 0.25^0.5 renormalised are 0.5420, 0.4580; top-p 0.55 keeps both
    torch.testing.assert_close(sampling_probs(logits, temperature=2.0, top_k=2, top_p=0.55),
                               torch.tensor([[0.5420, 0.4580, 0, 0, 0]]), atol=1e-4, rtol=0)


def test_top_p_one_keeps_every_token_where_the_float_sum_reaches_one_early():
    """top_p=1 is no cut (HF's generate leaves its warper out). Probabilities 1 - 4.1e-9, 2.06e-9, 2.06e-9
    (e^-20 = 2.06e-9): in float32 the first already sums to 1, so a cut at p=1 would drop the other two."""
    logits = torch.tensor([[0.0, -20.0, -20.0]])
    torch.testing.assert_close(sampling_probs(logits, top_p=1.0), logits.softmax(-1), rtol=0, atol=0)
    assert (sampling_probs(logits, top_p=1.0) > 0).all()


def test_a_tiny_temperature_tends_to_greedy_instead_of_nan():
    """softmax(logits / T) as T -> 0 puts all the mass on the largest logit, shared among equal ones. Below ~1e-38
    logits / T overflowed float32 to inf and softmax gave NaN; ordinary temperatures give HF's warper's, to float
    rounding."""
    transformers = pytest.importorskip('transformers')
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0], [3.0, -2.0, 3.0, 0.0]])
    for t in (0.3, 1.0, 4.0):
        want = transformers.TemperatureLogitsWarper(t)(None, logits).softmax(-1)
        torch.testing.assert_close(sampling_probs(logits, temperature=t), want, atol=1e-6, rtol=1e-5)
    for t in (1e-3, 1e-39, 1e-45):
        assert sampling_probs(logits, temperature=t).tolist() == [[1, 0, 0, 0], [0.5, 0, 0.5, 0]]
        assert sample_next(logits[:1], temperature=t, do_sample=True).item() == 0


def test_among_equal_logits_a_tiny_top_p_takes_the_greedy_token_and_top_k_keeps_them_all():
    """Three tokens share the top logit (four in row 1): greedy takes the first (argmax), and so does top-p that
    keeps one token."""
    logits = torch.zeros(2, 50)
    logits[:, 45:48] = 5.0
    logits[1, 10] = 5.0
    greedy = sample_next(logits)
    assert greedy.tolist() == [[45], [10]]
    assert torch.equal(sample_next(logits, do_sample=True, top_p=1e-6), greedy)
    # top-k keeps every token equal to the k-th, as HF's: top_k=1 samples among the tied tokens
    assert (top_k_filter(logits, 1) > float('-inf')).sum(-1).tolist() == [3, 4]


@pytest.mark.parametrize('bad, says', [(dict(temperature=0), 'temperature=0 .* > 0'),
                                       (dict(top_k=0), r"top_k=0 .* >= 1; None keeps every token \(Hugging"),
                                       (dict(temperature=float('inf')), 'temperature=inf .* > 0 and < inf'),
                                       (dict(top_k=-1), 'top_k=-1 .* integer >= 1'),
                                       (dict(top_p=0), 'top_p=0 .* > 0 and <= 1'),
                                       (dict(top_p=1.5), 'top_p=1.5 .* > 0 and <= 1')])
def test_sampling_options_are_checked(bad, says):
    with pytest.raises(ValueError, match=says):
        sample_next(torch.randn(1, 5), do_sample=True, **bad)
    with pytest.raises(ValueError, match=says):
        model().generate(torch.zeros(1, 1, dtype=torch.long), 2, do_sample=True, **bad)


def test_temperature_zero_is_refused_with_the_way_to_greedy_decoding():
    """Many libraries read temperature 0 as 'always the most likely token'; here that is do_sample=False."""
    with pytest.raises(ValueError, match=r"^temperature=0 is out of range: it must be a number > 0 \(it divides the "
                                         r"logits\); for greedy decoding, the limit of temperature -> 0, use "
                                         r"do_sample=False \(generate.py: --greedy\)$"):
        model().generate(torch.zeros(1, 1, dtype=torch.long), 2, do_sample=True, temperature=0)
    # no hint: -1 is no way to ask for greedy
    with pytest.raises(ValueError, match=r"temperature=-1 is out of range: it must be a number > 0 and < inf$"):
        sample_next(torch.randn(1, 5), do_sample=True, temperature=-1)


def test_configure_optimizers_decays_matrices_once():
    m = model()
    opt = m.configure_optimizers(type('TC', (), dict(weight_decay=0.1, learning_rate=3e-4, betas=(0.8, 0.9))))
    decay, no_decay = opt.param_groups
    assert decay['weight_decay'] == 0.1 and no_decay['weight_decay'] == 0.0
    assert all(g['lr'] == 3e-4 and g['betas'] == (0.8, 0.9) for g in opt.param_groups)  # not AdamW's defaults
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


def padded(rows, side, pad=0):
    """Rows of different lengths as one (B, T) batch and its attention_mask (1 on real tokens)."""
    T = max(len(r) for r in rows)
    idx = torch.full((len(rows), T), pad)
    mask = torch.zeros(len(rows), T, dtype=torch.long)
    for i, r in enumerate(rows):
        sl = slice(T - len(r), T) if side == 'left' else slice(0, len(r))
        idx[i, sl], mask[i, sl] = torch.tensor(r), 1
    return idx, mask


@pytest.mark.parametrize('variant', VARIANTS, ids=str)
@pytest.mark.parametrize('side', ['left', 'right'])
@pytest.mark.parametrize('new', [3, 10])  # 10 slides the window past block_size 8
def test_ragged_batch_equals_each_row_alone(side, new, variant):
    m = model(scale=8, **variant)
    rows = [[1, 2, 3, 4, 5], [6], [7, 8, 9]]
    idx, mask = padded(rows, side, pad=10)
    out = m.generate(idx, new, attention_mask=mask)[:, idx.size(1):]
    for row, got in zip(rows, out):
        alone = m.generate(torch.tensor([row]), new)[0, len(row):]
        assert got.tolist() == alone.tolist()


def test_padding_tokens_change_nothing():
    m = model(scale=8)
    idx, mask = padded([[1, 2, 3], [4, 5]], 'left')
    other = idx.masked_fill(mask == 0, 9)  # another padding token
    a, b = m.generate(idx, 4, attention_mask=mask), m.generate(other, 4, attention_mask=mask)
    assert torch.equal(a[:, 3:], b[:, 3:])


def test_a_long_padded_prompt_keeps_its_tokens_in_order():
    """Moving the padding to the front must keep the real tokens in their order. torch's default sort is not stable
    on CPU past about 64 elements, so only a prompt this long tells a stable sort from one that shuffles tokens."""
    m = model(scale=8, block_size=80)
    g = torch.Generator().manual_seed(0)
    rows = [torch.randint(0, 11, (n,), generator=g).tolist() for n in (70, 40)]
    for side in ('left', 'right'):
        idx, mask = padded(rows, side)
        out = m.generate(idx, 3, attention_mask=mask)[:, idx.size(1):]
        for row, got in zip(rows, out):
            assert got.tolist() == argmax_loop(m, torch.tensor([row]), 3)[0, len(row):].tolist(), side


@pytest.mark.parametrize('side', ['left', 'right'])
def test_beam_search_with_a_padded_prompt(side):
    m = model(scale=8)
    idx, mask = padded([[1, 2, 3], [4]], side)
    seqs, scores = beam_search(m, idx[1:], 4, num_beams=3, attention_mask=mask[1:])
    ref, ref_scores = beam_search(m, torch.tensor([[4]]), 4, num_beams=3)
    assert torch.equal(seqs[:, :3], idx[1:].expand(3, -1))  # the prompt as given, as generate returns it
    assert torch.equal(seqs[:, 3:], ref[:, 1:])
    torch.testing.assert_close(scores, ref_scores)


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
    # p=1 drops everything, as nn.Dropout(1.0) does (not 0 * 1/0, NaN)
    assert torch.equal(Dropout(1.0)(x), torch.nn.Dropout(1.0)(x)) and not Dropout(1.0)(x).any()


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_dropout_in_16_bits_drops_a_fraction_p(dtype):
    """CPU autocast (trainer.dtype='bfloat16') gives Dropout bfloat16 inputs, whose torch.rand draws are coarse:
    p=0.01 dropped 1.2% of the elements (p=0.1: 10.2%). nn.Dropout's fraction, within 5 standard deviations."""
    torch.manual_seed(0)
    y = Dropout(0.01)(torch.ones(1000, 1000, dtype=dtype))
    assert y.dtype == dtype
    assert abs((y == 0).double().mean().item() - 0.01) < 5e-4  # one standard deviation: 1e-4


def test_a_changed_model_names_the_weights_an_old_checkpoint_lacks_or_has_and_how_to_load_them(tmp_path, monkeypatch):
    """A student's model.py with a gate on each residual branch (a new parameter per block) and RMSNorm for the first
    layer norm (no bias) cannot load a checkpoint saved before: torch's message, cut at 200 characters, named a few
    of each layer's names and stopped mid-name, with no way on."""
    from mingpt.model import Block
    from mingpt.checkpoint import model_state, save_checkpoint
    old = model()
    save_checkpoint(model_state(old), tmp_path / 'old.pt')
    block_init = Block.__init__

    def changed_init(self, config):
        block_init(self, config)
        self.gate = torch.nn.Parameter(torch.ones(()))
        self.ln_1 = torch.nn.RMSNorm(config.n_embd)

    monkeypatch.setattr(Block, '__init__', changed_init)
    path = str(tmp_path / 'old.pt')

    def refusal():
        with pytest.raises(ValueError) as e:
            GPT.from_checkpoint(path)
        return str(e.value)
    names = (f"{path} holds a GPT that this code cannot rebuild (missing from its weights: transformer.h.*.gate; in "
             "its weights, not in this model: transformer.h.*.ln_1.bias")
    assert refusal() == names + (
        "): it was saved by another version of the model's code; "
        "to start from its weights anyway, load those that match into this code's model: "
        f"model.load_state_dict(torch.load({path!r})['model'], strict=False) (the rest keep their initial values)")
    new = GPT(config())
    new.load_state_dict(torch.load(path)['model'], strict=False)  # the way it names
    assert torch.equal(new.transformer.h[1].ln_1.weight, old.transformer.h[1].ln_1.weight)
    assert new.transformer.h[1].gate.item() == 1.0

    def wider_init(self, config):  # the gate and an MLP of 8x: strict=False would fail on the shapes
        changed_init(self, config)
        self.mlp.c_fc = torch.nn.Linear(config.n_embd, 8 * config.n_embd)
        self.mlp.c_proj = torch.nn.Linear(8 * config.n_embd, config.n_embd)

    monkeypatch.setattr(Block, '__init__', wider_init)
    assert refusal() == names + (
        "; of another shape: transformer.h.*.mlp.c_fc.bias, "
        "transformer.h.*.mlp.c_fc.weight, transformer.h.*.mlp.c_proj.weight): it was saved by another version of the "
        "model's code")


def test_a_checkpoint_of_an_untied_model_is_refused_instead_of_losing_its_embedding(tmp_path):
    """A student who freezes the token embedding but trains the output head unties them (the head a parameter of its
    own). from_checkpoint built the tied GPT and loaded both into its one matrix: the embedding became the head's
    weights, with no word."""
    from mingpt.checkpoint import model_state, save_checkpoint
    m = model()
    m.lm_head.weight = torch.nn.Parameter(m.lm_head.weight.detach() + 1)
    save_checkpoint(model_state(m), tmp_path / 'untied.pt')
    with pytest.raises(ValueError) as e:
        GPT.from_checkpoint(tmp_path / 'untied.pt')
    path = str(tmp_path / 'untied.pt')
    assert str(e.value) == (  # the same code, untied at run time: not "saved by another version of the model's code"
        f"{path}'s transformer.wte.weight and lm_head.weight differ, where GPT ties them into one tensor: it was saved "
        f"from a model untied after it was built. Build that model and load it: checkpoint = torch.load({path!r}); "
        "model = GPT(mingpt.utils.CfgNode(**checkpoint['model_config'])); untie it the same way; "
        "model.load_state_dict(checkpoint['model'])")
    import mingpt.utils  # the message's way, followed (it named a `checkpoint` that the reader did not have)
    checkpoint = torch.load(path)
    loaded = GPT(mingpt.utils.CfgNode(**checkpoint['model_config']))
    loaded.lm_head.weight = torch.nn.Parameter(loaded.lm_head.weight.detach().clone())
    loaded.load_state_dict(checkpoint['model'])
    assert torch.equal(loaded.transformer.wte.weight, m.transformer.wte.weight)
    assert torch.equal(loaded.lm_head.weight, m.lm_head.weight)
    save_checkpoint(model_state(model()), tmp_path / 'tied.pt')  # the same values under both names: loaded
    assert torch.equal(GPT.from_checkpoint(tmp_path / 'tied.pt')[0].transformer.wte.weight, model().lm_head.weight)


def test_a_state_dict_with_its_own_head_is_refused_by_load_state_dict():
    """minGPT's GPT keeps lm_head apart from wte. Its state dict is refused for its attn.bias masks, but
    load_state_dict(sd, strict=False), the usual way past that, loaded both into the one tied matrix: the embedding
    became minGPT's head, with no word."""
    m = model()
    minGPTs = {name: w.clone() for name, w in m.state_dict().items()}
    minGPTs['lm_head.weight'] += 1
    minGPTs['transformer.h.0.attn.bias'] = torch.ones(1, 1, 8, 8).tril()
    kept = {name: w.clone() for name, w in m.state_dict().items()}
    with pytest.raises(ValueError, match=r"the state dict's transformer.wte.weight and lm_head.weight differ, where "
                                         r"GPT ties them into one tensor: it comes from a model with an output head of "
                                         r"its own, such as minGPT's"):
        m.load_state_dict(minGPTs, strict=False)
    assert all(torch.equal(w, kept[name]) for name, w in m.state_dict().items())  # nothing was loaded
    wrapped = torch.nn.ModuleDict(dict(gpt=m))  # inside one's own module too, where the names have a prefix
    with pytest.raises(ValueError, match="differ, where GPT ties them"):
        wrapped.load_state_dict({f'gpt.{name}': w for name, w in minGPTs.items()}, strict=False)
    m.load_state_dict(kept)  # its own state dict (one tensor, under both names) loads
    for name in ('lm_head.weight', 'transformer.wte.weight'):  # a run that diverged saves NaN, under both names
        kept[name][0, 0] = float('nan')  # and NaN != NaN
    m.load_state_dict(kept)
    assert m.lm_head.weight[0, 0].isnan()
    with torch.device('meta'):  # a state dict of sizes only, which load_state_dict(assign=True) takes
        GPT(m.config).load_state_dict(GPT(m.config).state_dict(), assign=True)
