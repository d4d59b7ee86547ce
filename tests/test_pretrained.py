"""GPT.from_pretrained's memory: the weights held once. Offline: the folders are made here with random weights."""
import pytest
import torch

from mingpt import pretrained
from mingpt.model import GPT

transformers = pytest.importorskip('transformers')
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

SMALL = dict(n_layer=2, n_head=4, n_embd=32, n_positions=64, vocab_size=101)


@pytest.mark.parametrize('fmt', ['safetensors', 'bin'])
def test_from_pretrained_keeps_the_tensors_it_read_tied_and_gives_the_same_logits(tmp_path, monkeypatch, fmt):
    """The model was built (randomly initialised) and the file's tensors copied into it, two copies of the weights at
    the peak. Now each tensor read is the model's parameter itself (the Conv1D ones transposed, each once), with no
    random initialisation (the random numbers are left as they were), and the logits are the source's (within float32
    rounding: transformers 5.23.0's differ from ours by 1.5e-8)."""
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(**SMALL)).eval()
    hf.save_pretrained(tmp_path)
    if fmt == 'bin':
        (tmp_path / 'model.safetensors').unlink()
        torch.save(hf.state_dict(), tmp_path / 'pytorch_model.bin')
    read, reader = {}, pretrained._read_hf_weights
    monkeypatch.setattr(pretrained, '_read_hf_weights', lambda *args: read.update(reader(*args)) or dict(read))
    rng = torch.get_rng_state()
    model = GPT.from_pretrained(tmp_path)
    assert torch.equal(torch.get_rng_state(), rng)
    for name, p in model.named_parameters():
        if not name.endswith(pretrained.HF_CONV1D):
            assert p.data_ptr() == read[name].data_ptr(), name
    assert model.lm_head.weight is model.transformer.wte.weight and len(list(model.parameters())) == 4 + 12 * 2
    x = torch.randint(SMALL['vocab_size'], (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(model(x)[0], hf(x).logits, rtol=0, atol=1e-6)


def test_from_pretrained_converts_to_the_dtype_asked_for(tmp_path):
    """from_pretrained gave float32 only: a half-precision model cost float32's memory first, then model.to(dtype)."""
    torch.manual_seed(0)
    source = GPT2LMHeadModel(GPT2Config(**SMALL))
    source.save_pretrained(tmp_path)
    fp32 = GPT.from_pretrained(tmp_path)
    model = GPT.from_pretrained(tmp_path, dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.lm_head.weight is model.transformer.wte.weight
    for (name, p), want in zip(model.named_parameters(), fp32.to(torch.bfloat16).parameters()):
        assert torch.equal(p, want), name
    x = torch.randint(SMALL['vocab_size'], (2, 9))
    assert torch.equal(model(x)[0], fp32.to(torch.bfloat16)(x)[0])
    with pytest.raises(TypeError, match="dtype must be a floating-point torch.dtype, such as torch.bfloat16, or "
                                        r"'auto' \(the dtype the model was saved in\), not 'bfloat16'"):
        GPT.from_pretrained(tmp_path, dtype='bfloat16')


def test_a_safetensors_file_is_converted_to_the_dtype_as_it_is_read(tmp_path):
    """from_pretrained(dtype=bfloat16) read every float32 tensor first, so its peak held the float32 weights whole;
    each tensor is now converted as it is read (bench/bench_load.py measures the peak)."""
    torch.manual_seed(0)
    tensors = {'w': torch.randn(3, 4), 'half': torch.randn(2).half(), 'ids': torch.arange(5)}
    pretrained.write_safetensors(tensors, tmp_path / 'model.safetensors')
    read = pretrained.read_safetensors(tmp_path / 'model.safetensors', torch.bfloat16)
    assert {k: t.dtype for k, t in read.items()} == {'w': torch.bfloat16, 'half': torch.bfloat16, 'ids': torch.int64}
    assert all(torch.equal(read[k], t.to(read[k].dtype)) for k, t in tensors.items())
    assert pretrained.read_safetensors(tmp_path / 'model.safetensors')['w'].dtype == torch.float32  # as stored


def test_the_start_and_end_tokens_are_the_ones_transformers_generate_uses(tmp_path):
    """hf_generation_ids reads what GPT2LMHeadModel.from_pretrained puts in generation_config's bos_token_id and
    eos_token_id: the generation_config.json's where the folder has one (its ids alone, config.json's left out),
    else config.json's; every id of a list of end ids (it read only the first, where HF's generate stops at any); a
    value that is not an id is named."""
    GPT2LMHeadModel(GPT2Config(**SMALL, bos_token_id=6, eos_token_id=7)).save_pretrained(tmp_path)
    for generation, want in (('{"eos_token_id": [9, 8], "bos_token_id": 9}', (9, [9, 8])),
                             ('{"eos_token_id": 9}', (None, [9])), ('{}', (None, [])), (None, (6, [7]))):
        (tmp_path / 'generation_config.json').unlink(missing_ok=True)
        if generation:
            (tmp_path / 'generation_config.json').write_text(generation)
        assert pretrained.hf_generation_ids(tmp_path) == want
        hf = GPT2LMHeadModel.from_pretrained(tmp_path).generation_config
        eos = hf.eos_token_id  # an id, a list or None
        assert (hf.bos_token_id, eos if isinstance(eos, list) else [] if eos is None else [eos]) == want
    assert pretrained.hf_generation_ids(tmp_path / 'model.safetensors') == (None, [])  # not a folder: the tokenizer's
    for bad in ('{"eos_token_id": "</s>"}', '{"eos_token_id": [7, true]}'):
        (tmp_path / 'generation_config.json').write_text(bad)
        with pytest.raises(ValueError, match=r"generation_config.json's eos_token_id is .*, not a token id \(an int or "
                                             r"a list of them\); correct it or save the model again"):
            pretrained.hf_generation_ids(tmp_path)
    (tmp_path / 'generation_config.json').write_text('{"bos_token_id": 1.5}')
    with pytest.raises(ValueError, match=r"generation_config.json's bos_token_id is 1.5, not a token id \(an int\)"):
        pretrained.hf_generation_ids(tmp_path)
    (tmp_path / 'generation_config.json').write_text('[7]')
    with pytest.raises(ValueError, match=r"cannot read .*generation_config.json as a JSON object"):
        pretrained.hf_generation_ids(tmp_path)
