"""Files from other people: a Hugging Face folder sent by a classmate or copied from somewhere else. Each loads
with the logits of its weights, or is refused by a message that says what the file is, without running code it
holds. Offline: every folder is made here with random weights."""
import json
import os
import pickle
import re
import shutil
from pathlib import Path

import pytest
import torch

import mingpt
from conftest import refusal_of_a_pickled_path
from mingpt import pretrained
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
    (b'hello world\n', r"it is text \(it begins 'hello world\\n'\)"),  # was 'KeyError: 101'
    (b'{"model_type": "gpt2"}', r"it is JSON \(it begins '\{\"model_type\": \"gpt2\"\}'\), such as a Hugging Face "
                               r"folder's config.json"),  # a config.json saved over the weights: was 'of another kind'
    (bytes(range(256)), r"it is of another kind \(it begins b'\\x00\\x01"),
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


def test_a_model_safetensors_that_is_a_git_lfs_pointer_says_to_get_the_file_not_to_delete_it(hf):
    """A hub repo cloned without git-lfs holds pointers: model.safetensors said 'git lfs pull', then that the file was
    'truncated or corrupt; delete it and download or save it again'."""
    _, folder = hf
    pointer = b'version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 548105171\n'
    (folder / 'model.safetensors').write_bytes(pointer)
    with pytest.raises(ValueError, match=r"model.safetensors was not loaded: it is a Git LFS pointer, not the file "
                                         r"itself \(git lfs pull gets it\); GPT-2's weights are a file that "
                                         r"torch.save or save_pretrained wrote$"):
        GPT.from_pretrained(folder)


def test_torch_saves_older_format_still_loads(hf):
    """Hugging Face's first GPT-2 uploads are torch.save files of the format before the zip archive."""
    model, folder = hf
    (folder / 'model.safetensors').unlink()
    torch.save(model.state_dict(), folder / 'pytorch_model.bin', _use_new_zipfile_serialization=False)
    assert_same_logits(GPT.from_pretrained(folder), model)


@pytest.mark.parametrize('name', ['config.json', 'model.safetensors'])
def test_a_link_to_nothing_or_a_folder_in_place_of_a_file_is_named(hf, name):
    """A snapshot folder copied out of Hugging Face's cache with cp -r holds links to ../../blobs/..., which lead
    nowhere: the message said the folder 'needs config.json' and 'has config.json'."""
    _, folder = hf
    (folder / name).unlink()
    os.symlink('../../blobs/0123abcd', folder / name)
    with pytest.raises(FileNotFoundError, match=rf"model.safetensors; but {name} is a link to ../../blobs/0123abcd, "
                                                r"which does not exist \(a folder copied out of Hugging Face's cache "
                                                r"keeps its links: copy it with cp -rL\)$"):
        GPT.from_pretrained(folder)
    (folder / name).unlink()
    (folder / name).mkdir()  # was read as a file: 'IsADirectoryError', or 'truncated or corrupt; delete it'
    with pytest.raises(FileNotFoundError, match=rf"model.safetensors; but {name} is a folder$"):
        GPT.from_pretrained(folder)


def test_a_zip_file_unpacked_into_a_folder_of_its_own_names_the_inner_folder(hf, tmp_path):
    """Windows' Extract All (or unzip -d) of my-gpt2.zip, which holds the folder my-gpt2, makes my-gpt2/my-gpt2:
    the outer folder 'has __MACOSX, my-gpt2', said the message, and not which one to pass."""
    _, folder = hf
    outer = tmp_path / 'my-gpt2'
    shutil.copytree(folder, outer / 'my-gpt2')
    (outer / '__MACOSX').mkdir()  # what a zip file made on a Mac also holds
    with pytest.raises(FileNotFoundError, match=rf"it has __MACOSX, my-gpt2; {re.escape(str(outer / 'my-gpt2'))} "
                                                r"holds a config.json: pass that folder$"):
        GPT.from_pretrained(outer)
    GPT.from_pretrained(outer / 'my-gpt2')


def test_a_read_only_half_precision_folder_of_links_loads_with_its_weights(hf, tmp_path):
    """Laid out as Hugging Face's cache leaves it (links into blobs/), read-only, saved in float16: the logits are
    those of the same float16 weights in float32, in Hugging Face's model."""
    model, _ = hf
    model.half().save_pretrained(tmp_path / 'fp16')
    snapshot, blobs = tmp_path / 'cache' / 'snapshots' / 'abc', tmp_path / 'cache' / 'blobs'
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for name in ('config.json', 'model.safetensors'):
        shutil.copy(tmp_path / 'fp16' / name, blobs / name)
        os.chmod(blobs / name, 0o444)
        os.symlink(f'../../blobs/{name}', snapshot / name)
    os.chmod(snapshot, 0o555)
    ours = GPT.from_pretrained(snapshot)
    assert {p.dtype for p in ours.parameters()} == {torch.float32}
    assert_same_logits(ours, model.float())


def test_one_weight_of_a_far_layer_does_not_make_the_model_that_deep(tmp_path, monkeypatch):
    """The depth was checked as the largest layer number in the file: one weight named h.9999999.ln_1.weight, beside
    a config.json of n_layer=10**7, passed, and the model of that many layers was built, for hours."""
    cfg = dict(model_type='gpt2', n_layer=10 ** 7, n_head=1, n_embd=4, vocab_size=5, n_positions=3)
    (tmp_path / 'config.json').write_text(json.dumps(cfg))
    weights = {'wte.weight': torch.zeros(5, 4), 'wpe.weight': torch.zeros(3, 4), 'h.0.ln_1.weight': torch.ones(4),
               'h.9999999.ln_1.weight': torch.ones(4)}
    pretrained.write_safetensors(weights, tmp_path / 'model.safetensors')
    monkeypatch.setattr(GPT, '__init__', lambda self, config: pytest.fail('the model was built'))
    with pytest.raises(ValueError, match=r"model.safetensors holds weights of 2 layers numbered up to 9999999, so "
                                         r"9999998 have none; the file is incomplete or not a GPT-2 checkpoint$"):
        GPT.from_pretrained(tmp_path)


def test_only_the_links_that_lead_nowhere_are_named(hf, tmp_path):
    """A folder of links into Hugging Face's blobs/ whose weights' blob is gone: the message names that link alone,
    not config.json's, whose blob is there."""
    _, folder = hf
    blobs = tmp_path / 'blobs'
    blobs.mkdir()
    shutil.move(folder / 'config.json', blobs / 'config.json')
    os.symlink(blobs / 'config.json', folder / 'config.json')
    (folder / 'model.safetensors').unlink()
    os.symlink(blobs / 'weights', folder / 'model.safetensors')
    gone = re.escape(str(blobs / 'weights'))
    with pytest.raises(FileNotFoundError, match=rf"; but model.safetensors is a link to {gone}, which does not exist "
                                                r"\(a folder copied out of"):
        GPT.from_pretrained(folder)


def test_a_refused_pytorch_model_bin_says_how_to_load_its_tensors_and_the_way_works(hf):
    """The message said only 'load it yourself: torch.load(path, weights_only=False)', which gives a dict that
    from_pretrained does not take. The way it now gives is followed here, on a pytorch_model.bin holding a Path besides
    the weights: the folder then loads, with Hugging Face's logits."""
    model, folder = hf
    (folder / 'model.safetensors').unlink()
    torch.save({**model.state_dict(), 'source': Path('model.ckpt')}, folder / 'pytorch_model.bin')
    message = refusal_of_a_pickled_path(GPT.from_pretrained, folder)
    code = re.search(r"reads first: (mingpt.pretrained.write_safetensors\(.*\)), where state is", message)
    state = torch.load(folder / 'pytorch_model.bin', weights_only=False)
    exec(code[1], {'mingpt': mingpt, 'torch': torch, 'state': state, 'folder': folder})
    assert_same_logits(GPT.from_pretrained(folder), model)
