"""Generation from Python: model.generate, generate_stream, the Engine's generate and beam_search, and the checks
they share on the prompt (GPT.check_prompt)."""
import warnings

import pytest
import torch

from mingpt.engine import Engine
from mingpt.model import GPT
from mingpt.sampling import beam_search
from test_model import model as tiny_model, padded  # a tiny GPT (vocab 11, block 8, no dropout); rows as batch + mask


@pytest.fixture(scope='module')
def model():
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=11, block_size=16))
    torch.manual_seed(0)
    return GPT(C).eval()


PROMPT = torch.tensor([[1, 2, 3], [0, 0, 0], [4, 5, 6], [0, 0, 0]])
MASK = torch.tensor([[1, 1, 1], [0, 0, 0], [0, 1, 1], [0, 0, 0]])  # rows 1 and 3: padding only


@pytest.mark.parametrize('generate, rows', [
    (lambda m: m.generate(PROMPT, 3, attention_mask=MASK), 'rows 1, 3'),
    (lambda m: next(m.generate_stream(PROMPT, 3, do_sample=True, attention_mask=MASK)), 'rows 1, 3'),
    (lambda m: Engine(m).generate(PROMPT, 3, attention_mask=MASK), 'rows 1, 3'),
    (lambda m: beam_search(m, PROMPT[1:2], 3, 2, attention_mask=MASK[1:2]), 'row 0'),  # one prompt
], ids=['generate', 'generate_stream', 'Engine.generate', 'beam_search'])
def test_a_prompt_row_of_padding_only_is_refused_by_name(model, generate, rows):
    with pytest.raises(ValueError, match=f"attention_mask marks no real token in prompt {rows}: every row needs"):
        generate(model)


def test_a_row_of_one_real_token_among_padding_continues_as_it_would_alone(model):
    idx, mask = torch.tensor([[1, 2, 3], [0, 0, 7]]), torch.tensor([[1, 1, 1], [0, 0, 1]])
    out = model.generate(idx, 4, attention_mask=mask)
    assert out[1, 3:].tolist() == model.generate(torch.tensor([[7]]), 4)[0, 1:].tolist()


@pytest.mark.parametrize('generator', ['model', 'Engine'])
def test_cached_logits_equal_the_whole_sequence_recomputed_also_past_block_size(generator):
    """At every step the logits that the KV cache gives (the new token alone through the model) are those of the
    whole sequence so far through forward, without a cache; once it is longer than block_size (8: 5 prompt tokens
    and 10 new), of its last 8 tokens, the sliding window. The rows of a ragged batch: each row's own sequence."""
    m = tiny_model(scale=4)  # random weights made larger: peaked distributions, not near-uniform ones
    idx, mask = m.check_prompt(*padded([[1, 2, 3, 4, 5], [6, 7]], 'right', pad=9))
    source = m if generator == 'model' else Engine(m)
    caches = source.new_caches(2, m.block_size)
    for step in range(10):
        logits = source.next_token_logits(idx, caches, mask)
        for row in range(2):
            seq = idx[row][mask[row].bool()][-m.block_size:]  # the row without its padding, cropped to the window
            torch.testing.assert_close(logits[row], m(seq[None])[0][0, -1], atol=1e-5, rtol=1e-5,
                                       msg=lambda msg: f'step {step}, row {row}: {msg}')
        idx = torch.cat([idx, logits.argmax(-1, keepdim=True)], dim=1)
        mask = torch.cat([mask, torch.ones(2, 1, dtype=mask.dtype)], dim=1)


@pytest.mark.parametrize('generator', ['model', 'Engine'])
def test_a_list_of_end_ids_ends_a_row_at_any_of_them_as_in_hugging_face(tmp_path, generator):
    """A generation_config.json may name several end ids, and Hugging Face's generate stops a row at any of them;
    generate took one id, so a row ran past the others. Now a list ends each row where HF's does, and pads a finished
    row with the first id, as HF (with no pad token) does: the same tokens, padding included."""
    transformers = pytest.importorskip('transformers')
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_head=2, n_embd=16, n_positions=32,
                                                              vocab_size=23, bos_token_id=None, eos_token_id=None))
    with torch.no_grad():
        for p in hf.parameters():
            p.mul_(20)  # a random model with opinions: greedy decoding varies its tokens
    hf.eval().save_pretrained(tmp_path)
    ours, prompt = GPT.from_pretrained(tmp_path), torch.tensor([[1, 2, 3], [4, 5, 6]])
    source = ours if generator == 'model' else Engine(ours)
    free = source.generate(prompt, 10)[:, 3:].tolist()
    ends = [free[1][1], free[0][3]]  # row 1 ends at the first id, after 2 tokens; row 0 at the second, after 4
    assert [min(r.index(e) for e in ends if e in r) for r in free] == [3, 1]
    theirs = hf.generate(prompt, max_new_tokens=10, do_sample=False, eos_token_id=ends, pad_token_id=ends[0])
    assert theirs.shape == (2, 3 + 4)  # both rows ended: HF stopped after row 0's fourth token
    assert source.generate(prompt, 10, eos_token_id=ends).tolist() == theirs.tolist()
    assert source.generate(prompt, 10, eos_token_id=tuple(ends)).tolist() == theirs.tolist()
    # HF's generate takes a tensor of ids too: an integer tensor ends rows as the list does (it was "not a number")
    for dtype in (torch.long, torch.int32):
        assert source.generate(prompt, 10, eos_token_id=torch.tensor(ends, dtype=dtype)).tolist() == theirs.tolist()
    one = hf.generate(prompt, max_new_tokens=10, do_sample=False, eos_token_id=torch.tensor(ends[0]),
                      pad_token_id=ends[0])
    assert source.generate(prompt, 10, eos_token_id=torch.tensor(ends[0])).tolist() == one.tolist()


@pytest.mark.parametrize('generate', [
    lambda m, eos: m.generate(PROMPT[:1], 3, eos_token_id=eos),
    lambda m, eos: beam_search(m, PROMPT[:1], 3, 2, eos_token_id=eos),
], ids=['generate', 'beam_search'])
def test_a_list_of_end_ids_is_checked_id_by_id_and_an_empty_one_is_refused(model, generate):
    """An empty list of end ids said 'eos_token_id=[] is not a number: it must be None or an integer', where a list
    is allowed: it names the list. Each id of a list is checked as one id is."""
    with pytest.raises(ValueError, match=r"eos_token_id=\[\] names no end token: give one id, a list of them, or "
                                         r"None \(no end\)"):
        generate(model, [])
    with pytest.raises(ValueError, match=r"eos_token_id=11 is out of range: it must be an integer >= 0 and <= 10"):
        generate(model, [3, 11])
    with pytest.raises(ValueError, match=r"eos_token_id=None is not a number: it must be an integer"):
        generate(model, [3, None])  # None in a list ends nothing: refused, not failed deep inside generate_stream


def test_generating_in_training_mode_with_dropout_is_warned_of():
    """A GPT is built in training mode: generating before model.eval() chose every token with dropout on, so the
    text was random and worse (greedy decoding too), without a word."""
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=11, block_size=16))
    m = GPT(C)
    warned = r"^dropout is on while the model generates \(it is in training mode\), .* call model.eval\(\) first"
    for generate in (lambda: m.generate(PROMPT[:1], 2), lambda: next(Engine(m).generate_stream(PROMPT[:1], 2)),
                     lambda: beam_search(m, PROMPT[:1], 2, 2)):
        with pytest.warns(UserWarning, match=warned) as caught:
            generate()
        assert caught.pop(UserWarning).filename == __file__  # the caller's line, not model.py's
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        m.eval().generate(PROMPT[:1], 2)  # eval mode: no dropout
        C.embd_pdrop = C.resid_pdrop = C.attn_pdrop = 0.0
        GPT(C).generate(PROMPT[:1], 2)  # training mode, but no dropout to switch off
        m.train().apply(lambda d: d.eval() if isinstance(d, torch.nn.Dropout) else None)
        m.generate(PROMPT[:1], 2)  # training mode, its dropouts in eval: none drops
    m.eval().transformer.drop.train()  # eval mode, but one dropout left in training: it drops
    with pytest.warns(UserWarning, match=warned):
        m.generate(PROMPT[:1], 2)


def test_sdpa_drops_attention_weights_as_attn_dropout_is_set(monkeypatch):
    """The explicit path drops by attn_dropout's own mode and SDPA by the attention module's: an attention in training
    with its attn_dropout in eval (a dropout switched off by hand) dropped on a GPU (SDPA) and not on a CPU (the
    formula). On the meta device, which is no CPU, attention takes SDPA's path: the dropout_p it passes is read."""
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=11, block_size=16))
    attn = GPT(C).transformer.h[0].attn
    seen = []
    monkeypatch.setattr(torch.nn.functional, 'scaled_dot_product_attention',
                        lambda *args, dropout_p, **kwargs: seen.append(dropout_p) or args[0])
    q = torch.empty(1, 3, 4, 16, device='meta')
    for attention_training, dropout_training in ((True, True), (True, False), (False, True)):
        attn.train(attention_training)
        attn.attn_dropout.train(dropout_training)
        attn.attention(q, q, q, None)
    assert seen == [0.1, 0.0, 0.1]


@pytest.mark.parametrize('generate', [
    lambda m, eos: m.generate(PROMPT[:1], 3, eos_token_id=eos),
    lambda m, eos: beam_search(m, PROMPT[:1], 3, 2, eos_token_id=eos)[0],
], ids=['generate', 'beam_search'])
def test_end_ids_as_an_integer_tensor_are_taken_and_a_float_or_bool_one_is_refused_by_name(model, generate):
    """A tensor of end ids was 'not a number' (and a 0-d float one a TypeError from deep inside): an integer tensor,
    0-d or 1-d, is now the id or list of ids it holds; one of floats or bools, or of two dimensions, is named."""
    assert torch.equal(generate(model, torch.tensor([3, 5])), generate(model, [3, 5]))
    assert torch.equal(generate(model, torch.tensor(3, dtype=torch.int32)), generate(model, 3))
    for eos, says in [(torch.tensor([3.]), r"eos_token_id=tensor\(\[3\.\]\) is a tensor of torch\.float32, not "
                                           r"of token ids: give an integer tensor \(e\.g\. \.long\(\)\)"),
                      (torch.tensor(3.), r"eos_token_id=tensor\(3\.\) is a tensor of torch\.float32"),
                      (torch.tensor(True), r"eos_token_id=tensor\(True\) is a tensor of torch\.bool"),
                      (torch.tensor([[3]]), r"eos_token_id=tensor\(\[\[3\]\]\) has shape \(1, 1\): give one id "
                                            r"\(a 0-d tensor\) or several in a 1-d tensor"),
                      (torch.tensor([], dtype=torch.long), r"names no end token"),
                      (torch.tensor([3, 11]), r"eos_token_id=11 is out of range: it must be an integer >= 0")]:
        with pytest.raises(ValueError, match=says):
            generate(model, eos)


@pytest.mark.parametrize('options, named', [
    (dict(temperature=0.5), 'temperature only shapes'),
    (dict(top_k=2, top_p=0.9), 'top_k, top_p only shape'),
])
def test_sampling_options_without_do_sample_are_warned_of_as_ignored(model, options, named):
    """Greedy decoding takes the argmax, which temperature, top-k and top-p leave where it is: a student comparing
    temperatures without do_sample=True got the same text each time, without a word."""
    warned = rf"^{named} sampling, but do_sample=False decodes greedily"
    with pytest.warns(UserWarning, match=warned) as caught:
        out = model.generate(PROMPT[:1], 4, **options)
    assert caught.pop(UserWarning).filename == __file__  # the caller's line, not model.py's
    assert torch.equal(out, model.generate(PROMPT[:1], 4))  # greedy's tokens all the same
    with pytest.warns(UserWarning, match=named):
        next(Engine(model).generate_stream(PROMPT[:1], 4, **options))
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # the defaults, or sampling with them: no warning
        model.generate(PROMPT[:1], 4, temperature=1.0, top_k=None, top_p=None)
        model.generate(PROMPT[:1], 4, do_sample=True, **options)


@pytest.mark.parametrize('options, says', [
    (dict(temperature=-1), r"^temperature=-1 is out of range: it must be a number > 0 and < inf$"),
    (dict(temperature=float('inf')), r"^temperature=inf is out of range"),
    (dict(temperature='0.7'), r"^temperature='0.7' is a string, not a number"),
    (dict(top_k=0), r"^top_k=0 is out of range: it must be None or an integer >= 1; None keeps every token"),
    (dict(top_p=1.5), r"^top_p=1.5 is out of range: it must be None or a number > 0 and <= 1$"),
])
def test_greedy_decoding_refuses_the_sampling_values_sampling_refuses(model, options, says):
    """temperature=-1 without do_sample was warned of as ignored, with do_sample refused: a typo is named either way
    (Hugging Face's generate only warns)."""
    for do_sample in (True, False):
        with pytest.raises(ValueError, match=says):
            model.generate(PROMPT[:1], 2, do_sample=do_sample, **options)
    with pytest.raises(ValueError, match=says):
        next(Engine(model).generate_stream(PROMPT[:1], 2, **options))


def test_temperature_zero_is_greedy_decodings_own_and_not_warned_of(model):
    """Sampling refuses temperature=0 and sends the caller to do_sample=False, which must then take it without a
    warning: the warning of ignored options said 'pass do_sample=True to sample with it', which refuses it."""
    with pytest.raises(ValueError, match=r"temperature=0 is out of range: .* use do_sample=False"):
        model.generate(PROMPT[:1], 4, temperature=0, do_sample=True)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        out = model.generate(PROMPT[:1], 4, temperature=0)
        assert torch.equal(model.generate(PROMPT[:1], 4, temperature=0.0, do_sample=False), out)
    assert torch.equal(out, model.generate(PROMPT[:1], 4))
    with pytest.warns(UserWarning, match=r"^top_k only shapes sampling"):  # the others given with it still are
        model.generate(PROMPT[:1], 4, temperature=0, top_k=2)
