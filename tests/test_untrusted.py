"""Files from other people: a Hugging Face folder sent by a classmate or copied from somewhere else. Each loads
with the logits of its weights, or is refused by a message that says what the file is, without running code it
holds. Offline: every folder is made here with random weights."""
import os
import pickle

import pytest
import torch

from mingpt.model import GPT

transformers = pytest.importorskip('transformers')
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

SMALL = dict(n_layer=2, n_head=4, n_embd=32, n_positions=64, vocab_size=101)


@pytest.fixture
def hf(tmp_path):
    """(GPT2LMHeadModel with random weights, the folder its save_pretrained wrote: config.json, model.safetensors)."""
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(**SMALL)).eval()
    model.save_pretrained(tmp_path / 'hf')
    return model, tmp_path / 'hf'


def assert_same_logits(ours, theirs):
    idx = torch.randint(SMALL['vocab_size'], (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ours(idx)[0], theirs(idx).logits.float(), rtol=0, atol=1e-6)


def test_a_safetensors_file_named_pytorch_model_bin_loads(hf):
    """It went to torch.load, whose error said 'Unsupported operand 32' and that weights_only=False 'will likely
    succeed'; the file's first bytes now say what it is."""
    model, folder = hf
    os.rename(folder / 'model.safetensors', folder / 'pytorch_model.bin')
    assert_same_logits(GPT.from_pretrained(folder), model)


class RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), 'w'))  # unpickling creates the marker file


@pytest.mark.parametrize('content, says', [
    (b'', r"it is empty \(0 bytes\)"),  # was 'EOFError: ', 'the file is truncated or corrupt'
    (b'hello world\n', r"it is of another kind \(it begins b'hello world\\n'\)"),  # was 'KeyError: 101'
    (b'version https://git-lfs.github.com/spec/v1\n', r"it is a Git LFS pointer, not the file itself"),
    (None, r"it is a Python pickle that torch.save did not write; unpickling it could run code"),  # pickle.dump's
])
def test_a_pytorch_model_bin_that_no_torch_save_wrote_is_named_unread(hf, content, says):
    """A pickle.dump file got torch's own advice, that weights_only=False 'will likely succeed': that runs its code."""
    _, folder = hf
    marker = folder.parent / 'ran'
    (folder / 'model.safetensors').unlink()
    if content is None:
        content = pickle.dumps({'transformer.wte.weight': RunsCode(marker)})
    (folder / 'pytorch_model.bin').write_bytes(content)
    with pytest.raises(ValueError, match=r"pytorch_model.bin was not loaded: " + says):
        GPT.from_pretrained(folder)
    assert not marker.exists()
    assert (folder / 'pytorch_model.bin').read_bytes() == content  # nothing written or removed


def test_torch_saves_older_format_still_loads(hf):
    """Hugging Face's first GPT-2 uploads are torch.save files of the format before the zip archive."""
    model, folder = hf
    (folder / 'model.safetensors').unlink()
    torch.save(model.state_dict(), folder / 'pytorch_model.bin', _use_new_zipfile_serialization=False)
    assert_same_logits(GPT.from_pretrained(folder), model)
