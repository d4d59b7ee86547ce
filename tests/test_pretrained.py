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
    random initialisation (the random numbers are left as they were), and the logits are the source's exactly."""
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(**SMALL)).eval()
    hf.save_pretrained(tmp_path)
    if fmt == 'bin':
        (tmp_path / 'model.safetensors').unlink()
        torch.save(hf.state_dict(), tmp_path / 'pytorch_model.bin')
    read, reader = {}, pretrained._read_hf_weights
    monkeypatch.setattr(pretrained, '_read_hf_weights', lambda path: read.update(reader(path)) or dict(read))
    rng = torch.get_rng_state()
    model = GPT.from_pretrained(tmp_path)
    assert torch.equal(torch.get_rng_state(), rng)
    for name, p in model.named_parameters():
        if not name.endswith(pretrained.HF_CONV1D):
            assert p.data_ptr() == read[name].data_ptr(), name
    assert model.lm_head.weight is model.transformer.wte.weight and len(list(model.parameters())) == 4 + 12 * 2
    x = torch.randint(SMALL['vocab_size'], (2, 9))
    with torch.no_grad():
        assert torch.equal(model(x)[0], hf(x).logits)


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
    with pytest.raises(TypeError, match="dtype must be a floating-point torch.dtype, such as torch.bfloat16, not "
                                        "'bfloat16'"):
        GPT.from_pretrained(tmp_path, dtype='bfloat16')
