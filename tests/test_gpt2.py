"""GPT.from_pretrained / save_pretrained against Hugging Face's GPT2LMHeadModel: same logits, same greedy text,
both key layouts, both file formats, and clear errors. Offline: every checkpoint is made here with random weights."""
import errno
import json
import os
import re
from pathlib import Path

import pytest
import torch

from conftest import PER_BACKEND, deflate, full_disk_at
from mingpt import data, pretrained
from mingpt import model as model_py
from mingpt.model import GPT

transformers = pytest.importorskip('transformers')
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file, save_model  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

SMALL = dict(n_layer=2, n_head=4, n_embd=32, n_positions=64, vocab_size=101)


def hf_model(seed=0, perturb=True, **sizes):
    """A GPT2LMHeadModel with random weights in eval mode; with perturb, biases and layer norms are random too (not
    HF's zeros and ones)."""
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(**sizes))
    with torch.no_grad():
        for p in model.parameters() if perturb else []:
            p.add_(torch.randn_like(p) * 0.05)
    model.generation_config.eos_token_id = None  # generate exactly max_new_tokens, like ours
    return model.eval()


def save_hf(model, folder, layout):
    """'safetensors': save_pretrained as is. 'bin': a pytorch_model.bin with the full state dict, lm_head included
    (what older transformers wrote with safe_serialization=False; transformers 5 writes only safetensors).
    'hub': the hub's own gpt2 layout: base-model keys without 'transformer.', plus the attn.bias buffers."""
    model.save_pretrained(folder)
    if layout == 'bin':
        (folder / 'model.safetensors').unlink()
        torch.save(model.state_dict(), folder / 'pytorch_model.bin')
    elif layout == 'hub':
        sd = {k.removeprefix('transformer.'): v for k, v in load_file(folder / 'model.safetensors').items()}
        n = model.config.n_positions
        for i in range(model.config.n_layer):
            sd[f'h.{i}.attn.bias'] = torch.ones(n, n).tril().view(1, 1, n, n)
            sd[f'h.{i}.attn.masked_bias'] = torch.tensor(-1e4)
        save_file(sd, folder / 'model.safetensors', metadata={'format': 'pt'})
    return folder


def assert_same_as_hf(ours, hf, vocab_size, steps=20, rows=2):
    """Logits within 1e-4 of HF's on two prompts, and the same greedy continuation of the first `rows`."""
    idx = torch.randint(0, vocab_size, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        theirs = hf(idx).logits
    mine, _ = ours(idx)
    assert (mine - theirs).abs().max().item() < 1e-4
    idx = idx[:rows]
    want = hf.generate(idx, attention_mask=torch.ones_like(idx), max_new_tokens=steps, do_sample=False,
                       pad_token_id=0)
    assert torch.equal(ours.generate(idx, steps), want)


@pytest.mark.parametrize('layout', ['safetensors', 'bin', 'hub'])
def test_small_model_matches_hf(tmp_path, layout):
    hf = hf_model(**SMALL)
    model = GPT.from_pretrained(str(save_hf(hf, tmp_path, layout)))
    assert not model.training and model.config.block_size == SMALL['n_positions']
    assert_same_as_hf(model, hf, SMALL['vocab_size'])


def test_gpt2_124m_shape_matches_hf(tmp_path):
    hf = hf_model(perturb=False, n_layer=12, n_head=12, n_embd=768, n_positions=1024, vocab_size=50257)
    model = GPT.from_pretrained(save_hf(hf, tmp_path, 'safetensors'))
    assert model.num_parameters() == sum(p.numel() for p in hf.parameters())
    assert_same_as_hf(model, hf, 50257, rows=1)  # one row: 20 steps of a 124M model are slow on a shared CPU


def test_save_pretrained_round_trip(tmp_path):
    torch.manual_seed(0)
    C = GPT.get_default_config()
    C.merge_from_dict(dict(n_layer=2, n_head=2, n_embd=16, vocab_size=50257, block_size=32))
    ours = GPT(C).eval()
    folder = ours.save_pretrained(tmp_path / 'out')
    config = json.loads((folder / 'config.json').read_text())
    assert config['model_type'] == 'gpt2' and config['architectures'] == ['GPT2LMHeadModel']
    assert (config['n_layer'], config['n_head'], config['n_embd'], config['n_positions']) == (2, 2, 16, 32)
    assert config['bos_token_id'] == config['eos_token_id'] == 50256  # GPT-2's <|endoftext|>
    files = ['config.json', 'generation_config.json', 'model.safetensors']
    assert sorted(p.name for p in folder.iterdir()) == files  # no temp files left
    hf = GPT2LMHeadModel.from_pretrained(folder).eval()
    assert hf.generation_config.bos_token_id == hf.generation_config.eos_token_id == 50256
    hf.generation_config.eos_token_id = None
    assert_same_as_hf(ours, hf, 50257, steps=5)
    again = GPT.from_pretrained(folder)
    assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), again.state_dict().values()))
    hf.save_pretrained(tmp_path / 'hf')  # the same tensors as Hugging Face saves: the tied head stored once, as wte
    assert load_file(folder / 'model.safetensors').keys() == load_file(tmp_path / 'hf' / 'model.safetensors').keys()


def test_save_pretrained_holds_no_copy_of_the_weights_while_writing(tmp_path, monkeypatch):
    """The writer gets the model's own tensors (the Conv1D ones as transposed views), not copies made first: at
    gpt2-medium size the copies held 1.15 GB beside the model's 1.4 GB."""
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=11, block_size=8))
    model = GPT(C)
    written = {}

    def write(tensors, path, metadata):
        written.update(tensors)
        open(path, 'wb').close()
    monkeypatch.setattr(pretrained, 'write_safetensors', write)
    model.save_pretrained(tmp_path)
    ours = {p.untyped_storage().data_ptr() for p in model.parameters()}
    assert len(written) == len(pretrained.gpt2_weight_shapes(C))
    assert all(t.untyped_storage().data_ptr() in ours for t in written.values())


@pytest.mark.parametrize('full_at', ['model.safetensors', 'generation_config.json', 'config.json'])
def test_a_full_disk_in_save_pretrained_names_the_file_and_keeps_the_earlier_save_whole(tmp_path, monkeypatch,
                                                                                        full_at):
    """A full disk while model.safetensors was written said only '[Errno 28] No space left on device', of no file;
    one at generation_config.json or config.json, written after the weights had replaced the earlier ones, left the
    new weights beside the earlier config.json (refused as not belonging together, or the earlier end tokens)."""
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type=None, n_layer=1, n_head=2, n_embd=8, vocab_size=11, block_size=8))
    earlier = GPT(C).eval()
    earlier.save_pretrained(tmp_path)
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def full_disk(tensors, path, metadata):
        open(path, 'wb').write(b'half a file')
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if full_at == 'model.safetensors':
        monkeypatch.setattr(pretrained, 'write_safetensors', full_disk)
    else:
        monkeypatch.setattr(Path, 'write_text', full_disk_at(full_at))
    C.n_layer = 2
    with pytest.raises(OSError, match=rf"^could not write {re.escape(str(tmp_path / full_at))} \(\[Errno 28\] No "
                                      r"space left on device; [\d,]+ bytes are free there\); the one there before "
                                      r"is unchanged\. If the disk is full"):
        GPT(C).save_pretrained(tmp_path, eos_token_id=3)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == files  # no temporary file left either
    x = torch.randint(11, (2, 5))
    torch.testing.assert_close(GPT.from_pretrained(tmp_path)(x)[0], earlier(x)[0], rtol=0, atol=0)


def test_save_pretrained_of_a_model_whose_head_was_untied_names_the_head(tmp_path):
    """A head untied from the token embedding (and trained apart) was refused as a forward pass 'changed in
    model.py?', whose logits differ from GPT-2's; one untied but still equal is GPT-2 and is written."""
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=11, block_size=8))
    model = GPT(C)
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    model.save_pretrained(tmp_path / 'equal')
    with torch.no_grad():
        model.lm_head.weight.mul_(1.5)
    with pytest.raises(ValueError, match=r"^this model's output head \(lm_head.weight\) differs from its token "
                                         r"embedding \(transformer.wte.weight\): GPT-2 ties them into one matrix, "
                                         r"and Hugging Face's layout holds that one alone \(GPT2LMHeadModel would "
                                         r"read wte as the head\): save it with the trainer's checkpoint"):
        model.save_pretrained(tmp_path / 'untied')
    assert not (tmp_path / 'untied').exists()


def test_safetensors_reader_and_writer_agree_with_the_library(tmp_path):
    """Our safetensors code reads what Hugging Face's library writes, and writes what it reads: every dtype we map,
    odd shapes (a scalar, an empty tensor), and the metadata."""
    g = torch.Generator().manual_seed(0)
    tensors = {'w': torch.randn(3, 4, generator=g), 'half': torch.randn(5, generator=g).half(),
               'bf': torch.randn(2, 3, generator=g).bfloat16(), 'f64': torch.randn(2, generator=g).double(),
               'ids': torch.arange(7), 'i32': torch.arange(-3, 3, dtype=torch.int32),
               'i16': torch.arange(4, dtype=torch.int16), 'i8': torch.arange(-2, 2, dtype=torch.int8),
               'u8': torch.arange(250, 256, dtype=torch.uint8), 'mask': torch.tensor([True, False, True]),
               'scalar': torch.tensor(-1e4), 'empty': torch.zeros(0, 3)}
    assert {t.dtype for t in tensors.values()} == set(pretrained.SAFETENSORS_DTYPES.values())
    save_file(tensors, tmp_path / 'theirs.safetensors', metadata={'format': 'pt'})
    pretrained.write_safetensors(tensors, tmp_path / 'ours.safetensors', metadata={'format': 'pt'})
    for name in ('theirs', 'ours'):
        for read in (load_file, pretrained.read_safetensors):
            got = read(tmp_path / f'{name}.safetensors')
            assert got.keys() == tensors.keys()
            for k, t in tensors.items():
                assert got[k].dtype == t.dtype and got[k].shape == t.shape and torch.equal(got[k], t), (name, k)
    with safe_open(tmp_path / 'ours.safetensors', 'pt') as f:
        assert f.metadata() == {'format': 'pt'}
    back = pretrained.read_safetensors(tmp_path / 'ours.safetensors')  # widest first: each tensor's bytes aligned
    assert all(t.data_ptr() % t.element_size() == 0 for t in back.values())
    with pytest.raises(ValueError, match=r"safetensors has no name for torch.complex64 here"):
        pretrained.write_safetensors({'z': torch.zeros(2, dtype=torch.complex64)}, tmp_path / 'z.safetensors')


def safetensors_bytes(header, data=b''):
    head = json.dumps(header).encode()
    return len(head).to_bytes(8, 'little') + head + data


@pytest.mark.parametrize('content, says', [
    (b'version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 548105171\n',
     r"is not a safetensors file: it is a Git LFS pointer, not the file itself \(git lfs pull gets it\)$"),
    (b'', r"is not a safetensors file: its 0 bytes cannot hold the header"),
    (safetensors_bytes({'w': {'dtype': 'F32', 'shape': [4], 'data_offsets': [0, 16]}}, bytes(8)),  # cut short
     r"tensor 'w' \[4\] lies at bytes 0..16 of 8"),
    (safetensors_bytes({'w': {'dtype': 'F32', 'shape': [4], 'data_offsets': [0, 8]}}, bytes(16)),  # 2 floats, not 4
     r"tensor 'w' \[4\] lies at bytes 0..8 of 16"),
    (safetensors_bytes({'w': {'dtype': 'C64', 'shape': [1], 'data_offsets': [0, 8]}}, bytes(8)),
     r"tensor 'w' has dtype C64; this reader knows F64, F32"),
    # bytes appended (the library: 'incomplete metadata, file not fully covered'), a gap, two tensors in one place
    (safetensors_bytes({'w': {'dtype': 'F32', 'shape': [2], 'data_offsets': [0, 8]}}, bytes(16)),
     r"the tensors do not lie one after another over the 16 bytes after the header \(from byte 8: a gap, an "
     r"overlap or bytes appended\); the safetensors library refuses it too"),
    (safetensors_bytes({'a': {'dtype': 'F32', 'shape': [1], 'data_offsets': [0, 4]},
                        'b': {'dtype': 'F32', 'shape': [1], 'data_offsets': [8, 12]}}, bytes(12)),
     r"over the 12 bytes after the header \(from byte 4"),
    (safetensors_bytes({'a': {'dtype': 'F32', 'shape': [2], 'data_offsets': [0, 8]},
                        'b': {'dtype': 'F32', 'shape': [1], 'data_offsets': [4, 8]}}, bytes(8)),
     r"over the 8 bytes after the header \(from byte 8"),
])
def test_a_file_that_is_not_whole_safetensors_is_named(tmp_path, monkeypatch, content, says):
    (tmp_path / 'model.safetensors').write_bytes(content)
    # refused from its header, before any tensor is read: gpt2-xl's 6 GB with bytes appended was read whole first
    monkeypatch.setattr(pretrained.torch, 'empty', lambda *a, **k: pytest.fail('a tensor was read'))
    with pytest.raises(ValueError, match=says):
        pretrained.read_safetensors(tmp_path / 'model.safetensors')


def test_save_pretrained_of_another_vocabulary_names_no_endoftext(tmp_path):
    C = GPT.get_default_config()
    C.merge_from_dict(dict(n_layer=1, n_head=2, n_embd=16, vocab_size=65, block_size=32))
    folder = GPT(C).save_pretrained(tmp_path)
    hf = GPT2Config.from_pretrained(folder)  # left out, HF's defaults would name id 50256, outside this vocabulary
    assert hf.bos_token_id is None and hf.eos_token_id is None
    C.vocab_size = 50256  # GPT-2's vocabulary but its last id, <|endoftext|>
    folder = GPT(C).save_pretrained(tmp_path / 'one_short')
    assert GPT2Config.from_pretrained(folder).eos_token_id is None


def test_save_pretrained_writes_the_end_token_where_hugging_faces_generate_stops(tmp_path):
    """save_pretrained wrote bos/eos 50256 for any vocabulary past 50256 tokens and none below, so transformers'
    generate ran past the <|endoftext|> of a vocabulary trained here (or stopped at 50256, there an ordinary token).
    eos_token_id goes into config.json and generation_config.json: HF's greedy text is ours cut at the first end
    token, for one id and for a list (any of them ends it, as HF's generate reads a list); bos is the (first) end id,
    as in GPT-2. A generation_config.json an earlier save left would override config.json: its ids are replaced, its
    other settings kept."""
    torch.manual_seed(1)
    C = GPT.get_default_config()
    C.merge_from_dict(dict(n_layer=2, n_head=2, n_embd=16, vocab_size=101, block_size=32))
    ours, prompt = GPT(C).eval(), torch.tensor([[1, 2, 3]])
    new = ours.generate(prompt, 12)[0, 3:].tolist()
    first = {t: new.index(t) for t in reversed(new)}
    by_first = sorted(first, key=first.get)  # the tokens greedy decoding gives, by where each first comes
    assert len(by_first) >= 3 and first[by_first[1]] > 0
    (tmp_path / 'generation_config.json').write_text('{"eos_token_id": 50256, "top_k": 7}')
    for eos, ends_at in ((by_first[1], by_first[1]), ([by_first[2], by_first[1]], by_first[1])):
        ours.save_pretrained(tmp_path, eos_token_id=eos)
        hf = GPT2LMHeadModel.from_pretrained(tmp_path).eval()
        assert (hf.generation_config.eos_token_id, hf.generation_config.top_k) == (eos, 7)
        assert GPT2Config.from_pretrained(tmp_path).bos_token_id == (eos[0] if isinstance(eos, list) else eos)
        out = hf.generate(prompt, max_new_tokens=12, do_sample=False)[0, 3:].tolist()
        assert out == new[:first[ends_at] + 1]
    for eos, written in ((torch.tensor(7), 7), (torch.tensor([7, 8], dtype=torch.int32), [7, 8])):  # as generate's
        ours.save_pretrained(tmp_path, eos_token_id=eos)
        assert GPT2LMHeadModel.from_pretrained(tmp_path).generation_config.eos_token_id == written
    for bad in (101, -1, [5, 101], [], True, 5.0, torch.tensor([5.0]), torch.tensor([[5]])):
        with pytest.raises(ValueError, match=rf"eos_token_id={re.escape(repr(bad))} should be a token id of this "
                                             r"model's vocabulary of 101 tokens \(0 to 100\), or a non-empty list of "
                                             r"them: give the id its tokenizer ends a text with .*nothing was written"):
            ours.save_pretrained(tmp_path / 'refused', eos_token_id=bad)
        assert not (tmp_path / 'refused').exists()


def test_save_pretrained_refuses_weights_that_are_not_gpt2s(tmp_path):
    """A model changed in model.py (a head added, RMSNorm for layer norm) has no Hugging Face layout: it was written,
    and GPT2LMHeadModel would have dropped the weights it has not and made up the missing ones."""
    C = GPT.get_default_config()
    C.merge_from_dict(dict(n_layer=2, n_head=2, n_embd=16, vocab_size=65, block_size=32))

    class Headed(GPT):
        def __init__(self, config):
            super().__init__(config)
            self.value_head = torch.nn.Linear(config.n_embd, 1)

    with pytest.raises(ValueError, match=r"this model adds \['value_head.bias', 'value_head.weight'\] and lacks none "
                                         r"\(changed in model.py\?\): save it with the trainer's checkpoint"):
        Headed(C).save_pretrained(tmp_path / 'headed')
    rms = GPT(C)
    for block in rms.transformer.h:
        block.ln_1 = torch.nn.RMSNorm(C.n_embd)  # a gain, no bias
    with pytest.raises(ValueError, match=r"adds none and lacks \['transformer.h.0.ln_1.bias', "
                                         r"'transformer.h.1.ln_1.bias'\]"):
        rms.save_pretrained(tmp_path / 'rms')
    assert not any(tmp_path.iterdir())  # refused before anything is written


def test_gpt2_logits_are_hugging_faces(tmp_path):
    """pretrained.gpt2_logits, the reference save_pretrained checks a model against, written from GPT-2's equations,
    computes GPT2LMHeadModel's logits (random weights, biases and layer norms, two rows)."""
    hf = hf_model(**SMALL)
    weights = GPT.from_pretrained(save_hf(hf, tmp_path, 'safetensors')).state_dict()
    idx = torch.randint(SMALL['vocab_size'], (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        theirs = hf(idx).logits
        torch.testing.assert_close(pretrained.gpt2_logits(weights, SMALL['n_head'], idx), theirs, rtol=0, atol=1e-5)
    assert theirs.abs().max() > 0.5  # not a comparison of near-zeros


def gpt2_like(dtype=torch.float32, **options):
    """A small GPT whose weights, biases and layer norms are all random (as training leaves them), in dtype."""
    torch.manual_seed(0)
    C = GPT.get_default_config()
    C.merge_from_dict(dict(n_layer=4, n_head=4, n_embd=32, vocab_size=101, block_size=64, **options))
    model = GPT(C)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.to(dtype)


def post_norm(self, x, mask=None, cache=None):  # "Add & Norm" typed into Block.forward: LN(x + f(x))
    x = self.ln_1(x + self.attn(x, mask=mask, cache=cache))
    return self.ln_2(x + self.mlp(x))


def no_positions(self, idx, pos):  # the position embedding left out of GPT.embed's sum (wpe still in the model)
    return self.transformer.drop(self.transformer.wte(idx))


def relu(self, x):  # ReLU typed in place of GELU
    return self.dropout(self.c_proj(torch.relu(self.c_fc(x))))


def rotated(q, pos):
    """RoPE: each pair of channels (2i, 2i+1) of q (B, nh, T, hd) turned by the angle pos / 10000^(2i/hd)."""
    angle = pos[:, None] * 10000 ** (-torch.arange(0, q.size(-1), 2, device=q.device) / q.size(-1))  # (T, hd/2)
    cos, sin, even, odd = angle.cos(), angle.sin(), q[..., 0::2], q[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2).to(q.dtype)


ATTENTION = model_py.CausalSelfAttention.attention


def rope(self, q, k, v, mask):  # queries and keys rotated by their positions before the scores
    pos = torch.arange(k.size(2), device=k.device)
    return ATTENTION(self, rotated(q, pos[k.size(2) - q.size(2):]), rotated(k, pos), v, mask)


def unscaled(self, q, k, v, mask):  # scores q k^T without the 1 / sqrt(head size)
    return ATTENTION(self, q * q.size(-1) ** 0.5, k, v, mask)


HAND_EDITS = {'post-norm': [('Block', 'forward', post_norm)], 'no positions': [('GPT', 'embed', no_positions)],
              'RoPE': [('CausalSelfAttention', 'attention', rope), ('GPT', 'embed', no_positions)],
              'ReLU': [('MLP', 'forward', relu)], 'unscaled scores': [('CausalSelfAttention', 'attention', unscaled)]}


@pytest.mark.parametrize('edit, dtype', [(edit, torch.float32) for edit in HAND_EDITS] + [
    ('post-norm', torch.bfloat16), ('ReLU', torch.float16)], ids=lambda x: str(x).removeprefix('torch.'))
def test_save_pretrained_refuses_a_forward_pass_changed_by_hand(tmp_path, monkeypatch, edit, dtype):
    """model.py changed by hand with GPT-2's weight names kept was written as GPT-2, without a word, and
    GPT2LMHeadModel computed other logits from the folder (0.08 to 0.75 apart on a trained gpt-nano). Now the
    model's logits are compared with gpt2_logits' before anything is written."""
    for cls, name, edited in HAND_EDITS[edit]:
        monkeypatch.setattr(getattr(model_py, cls), name, edited)
    model = gpt2_like(dtype)
    with pytest.raises(ValueError, match=r"this model does not compute GPT-2's function of its weights \(changed in "
                                         r"model.py\?\): its logits differ by .*nothing was written. Save it with the "
                                         r"trainer's checkpoint \(mingpt.checkpoint.save_checkpoint\) instead"):
        model.save_pretrained(tmp_path / 'hf')
    assert not (tmp_path / 'hf').exists()


@pytest.mark.parametrize('change, says', [
    ('one key/value head', r"8 of this model's weights differ, e.g. transformer.h.0.attn.c_attn.weight is \(48, "
                           r"32\), GPT-2's \(96, 32\); transformer.h.0.attn.c_attn.bias is \(48,\), GPT-2's \(96,\)"),
    ('a wider MLP', r"12 of this model's weights differ, e.g. transformer.h.0.mlp.c_fc.weight is \(256, 32\), "
                    r"GPT-2's \(128, 32\);")])
def test_save_pretrained_refuses_weights_of_other_shapes_than_gpt2s(tmp_path, change, says):
    """One key/value head shared by the heads (c_attn's outputs n_embd + 2 head sizes) or a wider MLP: the folder
    was written and GPT2LMHeadModel refused to load it (or, with one key/value head now, gpt2_logits failed to
    unpack c_attn's outputs: 'not enough values to unpack')."""
    model = gpt2_like()
    for block in model.transformer.h:
        if change == 'a wider MLP':
            block.mlp.c_fc, block.mlp.c_proj = torch.nn.Linear(32, 256), torch.nn.Linear(256, 32)
        else:
            block.attn.c_attn = torch.nn.Linear(32, 32 + 2 * 8)
    with pytest.raises(ValueError, match=rf"only GPT-2's own shapes have a Hugging Face layout; {says}.* "
                                         r"\(changed in model.py\? e.g. one key/value head, a wider MLP\): save it "
                                         r"with the trainer's checkpoint"):
        model.save_pretrained(tmp_path / 'hf')
    assert not (tmp_path / 'hf').exists()


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16, torch.float16],
                         ids=lambda d: str(d).removeprefix('torch.'))
@pytest.mark.skipif(not PER_BACKEND, reason='torch before 2.9 has no per-backend float32 matmul settings')
@pytest.mark.parametrize('attn_impl', ['sdpa', 'explicit'])
def test_save_pretrained_of_gpt2_in_any_dtype_gives_hugging_face_our_logits(tmp_path, dtype, attn_impl):
    """The check passes GPT-2 itself, both attention implementations, in 16 bits too (whose rounding moves the
    logits more than float32's), and inside autocast (which would round float32's matmuls to bfloat16); the folder
    gives GPT2LMHeadModel our logits; the model keeps its mode, the random state and float32 matmul precision (TF32,
    set through torch's per-backend settings, as the trainer's tf32 sets it) are left as they were."""
    model = gpt2_like(dtype, attn_impl=attn_impl).train()
    backends, rng = (torch.backends.cuda.matmul, torch.backends.mkldnn.matmul), torch.get_rng_state()
    precision = [b.fp32_precision for b in backends]
    try:
        for b in backends:
            b.fp32_precision = 'tf32'
        with torch.autocast('cpu', dtype=torch.bfloat16):
            folder = model.save_pretrained(tmp_path / 'hf')
        assert [b.fp32_precision for b in backends] == ['tf32', 'tf32']
    finally:
        for b, p in zip(backends, precision):
            b.fp32_precision = p
    assert model.training and torch.equal(torch.get_rng_state(), rng)
    hf = GPT2LMHeadModel.from_pretrained(folder, dtype=torch.float32).eval()
    idx = torch.randint(101, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = model.eval()(idx)[0].float(), hf(idx).logits
    # logits of scale 1.2; 16 bits round each step of our forward, by 6e-3 (bfloat16) and 9e-4 (float16) here
    atol = 1e-5 if dtype == torch.float32 else 4 * torch.finfo(dtype).eps
    torch.testing.assert_close(ours, theirs, rtol=0, atol=atol)


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16, torch.float16],
                         ids=lambda d: str(d).removeprefix('torch.'))
def test_save_pretrained_names_the_dtype_as_transformers_does_and_auto_loads_in_it(tmp_path, dtype):
    """save_pretrained of a bfloat16 model wrote no dtype in config.json, so GPT.from_pretrained (and transformers 4,
    the key being torch_dtype there) could not tell what it was saved in; config.json now names it as transformers
    writes it for the same model, and from_pretrained(dtype='auto') loads in it, as transformers' does."""
    ours = json.loads((gpt2_like(dtype).save_pretrained(tmp_path / 'ours') / 'config.json').read_text())
    hf_model(**SMALL).to(dtype).save_pretrained(tmp_path / 'hf')
    theirs = json.loads((tmp_path / 'hf' / 'config.json').read_text())
    assert ours['dtype'] == theirs['dtype'] == str(dtype).removeprefix('torch.')
    assert GPT.from_pretrained(tmp_path / 'ours', dtype='auto').transformer.wte.weight.dtype == dtype
    assert GPT2LMHeadModel.from_pretrained(tmp_path / 'ours', dtype='auto').dtype == dtype
    assert GPT.from_pretrained(tmp_path / 'ours').transformer.wte.weight.dtype == torch.float32  # the default


def test_auto_dtype_reads_transformers_4s_key_else_the_weights(tmp_path):
    folder = gpt2_like(torch.bfloat16).save_pretrained(tmp_path / 'hf')
    config = json.loads((folder / 'config.json').read_text())
    for saved, want in [({'torch_dtype': 'float16'}, torch.float16), ({}, torch.bfloat16)]:  # {}: the weights'
        (folder / 'config.json').write_text(json.dumps({**{k: v for k, v in config.items() if k != 'dtype'}, **saved}))
        model = GPT.from_pretrained(folder, dtype='auto')
        assert {p.dtype for p in model.parameters()} == {want}, saved
    (folder / 'config.json').write_text(json.dumps({**config, 'dtype': 'int8'}))
    with pytest.raises(ValueError, match=r"gives dtype 'int8', not a floating-point torch dtype.*instead of 'auto'"):
        GPT.from_pretrained(folder, dtype='auto')
    assert GPT.from_pretrained(folder, dtype=torch.float32).transformer.wte.weight.dtype == torch.float32


def test_dropout_comes_from_config_json(tmp_path):
    drops = dict(embd_pdrop=0.0, resid_pdrop=0.05, attn_pdrop=0.2)  # HF's defaults are all 0.1, as are ours
    model = GPT.from_pretrained(save_hf(hf_model(**SMALL, **drops), tmp_path, 'safetensors'))
    assert {k: getattr(model.config, k) for k in drops} == drops


@pytest.fixture
def small_dir(tmp_path):
    return save_hf(hf_model(**SMALL), tmp_path / 'small', 'safetensors')


def test_unknown_name(small_dir):
    with pytest.raises(ValueError, match="unknown pretrained model 'gpt3'.*gpt2-medium.*; no such directory exists"):
        GPT.from_pretrained('gpt3')
    with pytest.raises(ValueError, match=r"config.json is a file: give the directory that holds it$"):
        GPT.from_pretrained(str(small_dir / 'config.json'))


def test_a_mingpt_checkpoint_given_to_from_pretrained_is_sent_to_from_checkpoint(tmp_path):
    """GPT.from_pretrained('out/chargpt/model.pt') said 'is a file: give the directory that holds it', and the
    directory was refused in turn with 'a mingpt checkpoint is a file: pass out/chargpt/model.pt': round in a circle."""
    from mingpt.checkpoint import model_state, save_checkpoint
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=11, block_size=8))
    save_checkpoint(model_state(GPT(C)), tmp_path / 'model.pt')
    with pytest.raises(ValueError, match=rf"{re.escape(str(tmp_path / 'model.pt'))} is a mingpt checkpoint, not "
                                         r"Hugging Face weights: GPT.from_checkpoint\(path\) reads it$"):
        GPT.from_pretrained(str(tmp_path / 'model.pt'))
    with pytest.raises(FileNotFoundError, match=rf"a mingpt checkpoint is a file: pass "
                                                rf"{re.escape(str(tmp_path / 'model.pt'))} \(to GPT.from_checkpoint, "
                                                r"or a project's --model or --system.init\)$"):
        GPT.from_pretrained(str(tmp_path))
    assert GPT.from_checkpoint(tmp_path / 'model.pt')[0].config.vocab_size == 11


def test_directory_without_weights(small_dir):
    (small_dir / 'model.safetensors').unlink()
    for hidden in ('.lock', '.gitattributes'):  # a run's lock, a clone's git files: not what the user looks for
        (small_dir / hidden).touch()
    with pytest.raises(FileNotFoundError, match=r'pytorch_model.bin \(or the .index.json of their shards\); it '
                                                r'has config.json, generation_config.json$'):
        GPT.from_pretrained(small_dir)
    for i in range(10):  # a crowded folder is listed in part
        (small_dir / f'x{i}.txt').touch()
    with pytest.raises(FileNotFoundError, match='it has config.json, generation_config.json, x0.txt, .*, x7.txt and '
                                                '2 more$'):
        GPT.from_pretrained(small_dir)


def test_shape_mismatch_names_key_and_shapes(small_dir):
    config = json.loads((small_dir / 'config.json').read_text())
    config['n_positions'] = 128
    (small_dir / 'config.json').write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"model.safetensors holds wpe.weight of shape \(64, 32\) but config.json says "
                                         r"n_positions=128, n_embd=32; the weights and config.json do not belong"):
        GPT.from_pretrained(small_dir)


def test_a_gpts_own_state_dict_beside_config_json_is_named_as_such(small_dir):
    """torch.save(model.state_dict()) as pytorch_model.bin beside save_pretrained's config.json (as one saves a
    GPT2LMHeadModel's): from_pretrained said 'the weights and config.json do not belong together', blaming the
    config, where the weights are in nn.Linear's layout; the fix it names loads them."""
    model = GPT.from_pretrained(small_dir)
    (small_dir / 'model.safetensors').unlink()
    torch.save(model.state_dict(), small_dir / 'pytorch_model.bin')
    with pytest.raises(ValueError, match=r"'transformer.h.0.attn.c_attn.weight' is stored \(out, in\), as nn.Linear "
                                         r"keeps it in a GPT's own state_dict.*model.save_pretrained\(folder\)"):
        GPT.from_pretrained(small_dir)
    again = GPT.from_pretrained(save_hf(hf_model(seed=1, **SMALL), small_dir.parent / 'other', 'safetensors'))
    again.load_state_dict(torch.load(small_dir / 'pytorch_model.bin'))
    idx = torch.randint(0, SMALL['vocab_size'], (1, 9))
    assert torch.equal(again(idx)[0], model(idx)[0])


@pytest.mark.parametrize('key, value', [('n_layer', 10 ** 7), ('n_embd', 2 ** 20), ('vocab_size', 10 ** 9)])
def test_a_config_json_asking_for_sizes_its_weights_have_not_is_refused_before_the_model_is_built(
        small_dir, monkeypatch, key, value):
    """A config.json can ask for any size: 10**7 layers took minutes to build, then failed for want of memory."""
    config = json.loads((small_dir / 'config.json').read_text())
    (small_dir / 'config.json').write_text(json.dumps({**config, key: value}))
    monkeypatch.setattr(GPT, '__init__', lambda self, config: pytest.fail('the model was built'))
    with pytest.raises(ValueError, match=rf"model.safetensors holds .* but config.json says (.*, )?{key}={value}\b.*; "
                                         "the weights and config.json do not belong together"):
        GPT.from_pretrained(small_dir)


@pytest.mark.parametrize('layout', ['safetensors', 'hub'])
@pytest.mark.parametrize('n_layer', [1, 3])
def test_a_config_json_of_another_depth_is_named(tmp_path, layout, n_layer):
    """Files of two checkpoints mixed (gpt2's weights, distilgpt2's config.json): both are GPT-2's, so the message
    says they do not belong together, not that the file is incomplete or not GPT-2's."""
    folder = save_hf(hf_model(**SMALL), tmp_path, layout)
    config = json.loads((folder / 'config.json').read_text())
    (folder / 'config.json').write_text(json.dumps({**config, 'n_layer': n_layer}))
    with pytest.raises(ValueError, match=rf"model.safetensors holds 2 layers but config.json says n_layer={n_layer}; "
                                         "the weights and config.json do not belong together"):
        GPT.from_pretrained(folder)


def test_missing_key(small_dir):
    sd = load_file(small_dir / 'model.safetensors')
    del sd['transformer.h.1.mlp.c_fc.bias']
    save_file(sd, small_dir / 'model.safetensors', metadata={'format': 'pt'})
    with pytest.raises(ValueError, match=r"lacks 1 .*transformer.h.1.mlp.c_fc.bias"):
        GPT.from_pretrained(small_dir)


def test_weights_added_to_the_model_are_named_not_blamed_on_the_file(small_dir):
    class Probed(GPT):  # a student's probe on the embeddings, added to the model
        def __init__(self, config):
            super().__init__(config)
            self.probe = torch.nn.Linear(config.n_embd, 2)

    plain = GPT.from_pretrained(small_dir)
    torch.manual_seed(0)
    fresh = Probed(plain.config)
    torch.manual_seed(0)
    with pytest.warns(UserWarning, match=r"2 weights that GPT-2 has not, e.g. \['probe.bias', 'probe.weight'\] "
                                         r"\(added to model.py\?\): .* so they keep their initial values") as caught:
        probed = Probed.from_pretrained(small_dir)
    assert caught.pop(UserWarning).filename == __file__  # the caller's line, not model.py's
    # GPT-2's own weights load as without the probe, and the probe stays as built, untouched by the file
    assert all(torch.equal(w, probed.state_dict()[k]) for k, w in plain.state_dict().items())
    assert torch.equal(probed.probe.weight, fresh.probe.weight) and torch.equal(probed.probe.bias, fresh.probe.bias)


@pytest.mark.parametrize('layout', ['safetensors', 'hub'])
def test_gpt2_weights_the_model_lost_are_named_not_blamed_on_the_file(tmp_path, layout):
    class RMSNormGPT(GPT):  # a student's RMSNorm for layer norm: a gain, no bias
        def __init__(self, config):
            super().__init__(config)
            for block in self.transformer.h:
                block.ln_1 = torch.nn.RMSNorm(config.n_embd)

    folder = save_hf(hf_model(**SMALL), tmp_path, layout)
    with pytest.raises(ValueError, match=r"holds GPT-2's '(transformer\.)?h.0.ln_1.bias', which this model has not "
                                         r"\(changed in model.py\?\)"):
        RMSNormGPT.from_pretrained(folder)


def save_in_shards(model, folder, fmt):
    """save_pretrained's folder of weights in several files, named by an index: 'safetensors' as transformers writes
    it, 'bin' as transformers 4 wrote it with safe_serialization=False (pytorch_model-00001-of-0000N.bin)."""
    model.save_pretrained(folder, max_shard_size='20KB')
    index = json.loads((folder / 'model.safetensors.index.json').read_text())
    if fmt == 'bin':
        renamed = {}
        for shard in sorted(set(index['weight_map'].values())):
            renamed[shard] = shard.replace('model', 'pytorch_model').replace('.safetensors', '.bin')
            torch.save(load_file(folder / shard), folder / renamed[shard])
            (folder / shard).unlink()
        index['weight_map'] = {name: renamed[shard] for name, shard in index['weight_map'].items()}
        (folder / 'model.safetensors.index.json').unlink()
        (folder / 'pytorch_model.bin.index.json').write_text(json.dumps(index))
    return sorted(set(index['weight_map'].values()))


@pytest.mark.parametrize('fmt', ['safetensors', 'bin'])
def test_a_folder_of_weights_in_shards_loads_with_hugging_faces_logits(tmp_path, fmt):
    """transformers' save_pretrained splits weights past its max_shard_size (5 GB in transformers 4: gpt2-xl in
    float32, fine-tuned) into files an index names; such a folder was refused as 'not supported'."""
    hf = hf_model(**SMALL)
    shards = save_in_shards(hf, tmp_path, fmt)
    assert len(shards) > 2
    assert_same_as_hf(GPT.from_pretrained(tmp_path), hf, SMALL['vocab_size'], steps=3)
    bf16 = GPT.from_pretrained(tmp_path, dtype=torch.bfloat16)
    assert {p.dtype for p in bf16.parameters()} == {torch.bfloat16}
    if fmt == 'safetensors':  # a shard given as a checkpoint: not 'rename the file back' to model.safetensors
        with pytest.raises(ValueError, match=rf"{shards[0]} is not a mingpt checkpoint: it is .*; for Hugging Face "
                                             rf"GPT-2 weights give their folder, {re.escape(str(tmp_path))}, with "
                                             r"their config.json in it \(GPT.from_pretrained\(folder\), a project's "
                                             r"--model or --system.init\)$"):
            GPT.from_checkpoint(tmp_path / shards[0])


def test_a_folder_of_weights_in_shards_with_one_missing_or_another_names_it(tmp_path):
    shards = save_in_shards(hf_model(**SMALL), tmp_path, 'safetensors')
    (tmp_path / shards[1]).rename(tmp_path / 'elsewhere')
    with pytest.raises(ValueError, match=rf"model.safetensors.index.json names the shard '{shards[1]}', which is "
                                         rf"not a weights file in {re.escape(str(tmp_path))}: the folder is "
                                         r"incomplete; download or save the model again$"):
        GPT.from_pretrained(tmp_path)
    (tmp_path / 'elsewhere').rename(tmp_path / shards[1])
    (tmp_path / shards[2]).write_bytes((tmp_path / shards[1]).read_bytes())  # the same file copied over another
    with pytest.raises(ValueError, match=rf"{shards[2]} lacks \d+ of the weights model.safetensors.index.json puts "
                                         r"there, e.g. \['transformer\.h\.\d.*: the shard is not the one the index "
                                         r"was written with; download or save the model again$"):
        GPT.from_pretrained(tmp_path)


@pytest.mark.parametrize('layout', ['safetensors', 'bin'])
def test_truncated_file(tmp_path, layout):
    folder = save_hf(hf_model(**SMALL), tmp_path, layout)
    weights = folder / ('model.safetensors' if layout == 'safetensors' else 'pytorch_model.bin')
    weights.write_bytes(weights.read_bytes()[:weights.stat().st_size // 2])
    with pytest.raises(ValueError, match='truncated or corrupt'):
        GPT.from_pretrained(folder)


def test_an_unreadable_weights_file_is_named_once(tmp_path):
    """'cannot read X (ValueError: X is not a safetensors file...)' said the path twice."""
    folder = save_hf(hf_model(**SMALL), tmp_path, 'safetensors')
    (folder / 'model.safetensors').write_bytes(b'abc')
    with pytest.raises(ValueError) as e:
        GPT.from_pretrained(folder)
    assert str(e.value) == f"{folder / 'model.safetensors'} is not a safetensors file: its 3 bytes cannot hold the " \
        "header; the file is truncated or corrupt: delete it and download or save it again"


def test_a_pytorch_model_bin_that_would_run_code_is_refused_saying_what_it_holds(tmp_path):
    folder = save_hf(hf_model(**SMALL), tmp_path, 'bin')
    marker = tmp_path / 'ran'
    state = torch.load(folder / 'pytorch_model.bin')
    state['hook'] = type('RunsCode', (), {'__reduce__': lambda self: (exec, (f"open({str(marker)!r}, 'w')",))})()
    torch.save(state, folder / 'pytorch_model.bin')
    with pytest.raises(ValueError, match=r"pytorch_model.bin was not loaded: it holds a Python object "
                                         r"\((builtins\.)?exec\) besides the tensors of GPT-2's weights, .* If you "
                                         r"trust whoever made it, "
                                         r"load it yourself: torch.load\(path, weights_only=False\)$"):
        GPT.from_pretrained(folder)
    assert not marker.exists()


def test_a_pytorch_model_bin_with_compressed_members_is_refused_unread(tmp_path):
    folder = save_hf(hf_model(**SMALL), tmp_path, 'bin')
    deflate(folder / 'pytorch_model.bin')
    with pytest.raises(ValueError, match=r"pytorch_model.bin was not loaded: its pytorch_model/data.pkl is compressed"):
        GPT.from_pretrained(folder)


def test_config_or_weights_of_another_shape_name_the_file(small_dir):
    (small_dir / 'config.json').write_text('[1, 2]')
    with pytest.raises(ValueError, match=r"config.json holds a JSON list, not a GPT-2 config"):
        GPT.from_pretrained(small_dir)
    for text in ('{"n_layer": 2,', '[' * 10 ** 5 + ']' * 10 ** 5):  # cut short; nested too deep for json
        (small_dir / 'config.json').write_text(text)
        with pytest.raises(ValueError, match=r"cannot read .*config.json as JSON \(.*\): not a Hugging Face config"):
            GPT.from_pretrained(small_dir)


def test_weights_that_are_not_a_state_dict(tmp_path):
    folder = save_hf(hf_model(**SMALL), tmp_path, 'bin')
    torch.save([1, 2, 3], folder / 'pytorch_model.bin')
    with pytest.raises(ValueError, match=r"pytorch_model.bin holds a list, not a state dict of GPT-2 weights"):
        GPT.from_pretrained(folder)


@pytest.mark.parametrize('key, value', [('transformer.wte.weight', 5), ('transformer.h.0.ln_1.weight', 'x'),
                                        (7, torch.zeros(1))])
def test_a_pytorch_model_bin_with_plain_data_for_a_weight_names_it(tmp_path, key, value):
    """torch.load(weights_only=True) reads numbers and strings too: they gave a bare AttributeError ('int' object has
    no attribute 'shape') in the size check, and a number for a name a TypeError."""
    folder = save_hf(hf_model(**SMALL), tmp_path, 'bin')
    torch.save({**torch.load(folder / 'pytorch_model.bin'), key: value}, folder / 'pytorch_model.bin')
    with pytest.raises(ValueError, match=rf"pytorch_model.bin is not a state dict of GPT-2 weights: under {key!r} it "
                                         rf"holds a {type(value).__name__}, where each name holds a tensor"):
        GPT.from_pretrained(folder)


def test_a_folder_named_like_a_hub_id_without_config_is_not_the_model(tmp_path, monkeypatch):
    (tmp_path / 'gpt2').mkdir()  # e.g. a data folder with encoder.json and vocab.bpe
    monkeypatch.chdir(tmp_path)
    fetched = []
    monkeypatch.setattr(pretrained, 'fetch', lambda rel, url=None, **kw: fetched.append(rel) or tmp_path / 'none')
    assert pretrained._hf_files('gpt2') == (tmp_path / 'none', tmp_path / 'none')  # the hub's files
    assert fetched == ['hf/gpt2/config.json', 'hf/gpt2/model.safetensors']


def test_not_gpt2_config(small_dir):
    config = json.loads((small_dir / 'config.json').read_text())
    (small_dir / 'config.json').write_text(json.dumps({**config, 'model_type': 'gpt_neo'}))
    with pytest.raises(ValueError, match="describes a 'gpt_neo' model; only GPT-2 checkpoints load here"):
        GPT.from_pretrained(small_dir)


# each changes what HF's GPT-2 computes, which this model does not implement
VARIANTS = dict(activation_function='relu', n_inner=3 * SMALL['n_embd'], layer_norm_epsilon=1e-2,
                scale_attn_weights=False, scale_attn_by_inverse_layer_idx=True, tie_word_embeddings=False)


@pytest.mark.parametrize('key', VARIANTS)
def test_a_gpt2_variant_is_refused_by_name(tmp_path, key):
    variant = hf_model(**SMALL, **{key: VARIANTS[key]})
    plain = hf_model(**SMALL)
    if key != 'n_inner':  # the same weights give other logits: the variant really computes something else
        plain.load_state_dict(variant.state_dict())
        idx = torch.arange(7)[None]
        with torch.no_grad():
            assert (variant(idx).logits - plain(idx).logits).abs().max() > 1e-3
    with pytest.raises(ValueError, match=rf"a GPT-2 variant this model does not implement: \{{'{key}'"):
        GPT.from_pretrained(save_hf(variant, tmp_path, 'safetensors'))


@pytest.mark.parametrize('same', [dict(activation_function='gelu_pytorch_tanh'), dict(n_inner=4 * SMALL['n_embd']),
                                  dict(layer_norm_epsilon=1e-5, tie_word_embeddings=True)])
def test_settings_equal_to_gpt2s_own_load(tmp_path, same):
    hf = hf_model(**SMALL, **same)
    assert_same_as_hf(GPT.from_pretrained(save_hf(hf, tmp_path, 'safetensors')), hf, SMALL['vocab_size'], steps=3)


def test_the_tied_matrix_stored_as_the_head_loads(tmp_path):
    """safetensors' own save_model stores a tied pair once, under the first name (lm_head.weight, not wte): Hugging
    Face loads such a file, and so do we."""
    hf = hf_model(**SMALL)
    folder = save_hf(hf, tmp_path, 'safetensors')
    save_model(hf, folder / 'model.safetensors')
    assert 'lm_head.weight' in load_file(folder / 'model.safetensors')
    assert 'transformer.wte.weight' not in load_file(folder / 'model.safetensors')
    assert_same_as_hf(GPT.from_pretrained(folder), hf, SMALL['vocab_size'], steps=3)


def test_an_untied_head_is_refused(tmp_path):
    hf = hf_model(**SMALL)
    folder = save_hf(hf, tmp_path, 'bin')  # the full state dict, lm_head.weight included
    sd = torch.load(folder / 'pytorch_model.bin')
    sd['lm_head.weight'] = sd['lm_head.weight'] + 1  # config.json still says tied
    torch.save(sd, folder / 'pytorch_model.bin')
    with pytest.raises(ValueError, match=r"lm_head.weight differs from wte.weight; this GPT ties them"):
        GPT.from_pretrained(folder)


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.delenv('MINGPT_DATA_DIR', raising=False)
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path / 'cache'))
    return tmp_path / 'cache'


def test_no_network(empty_cache, no_network):
    with pytest.raises(RuntimeError, match='could not download https://huggingface.co/gpt2/resolve/main/config.json'):
        GPT.from_pretrained('gpt2')


def test_no_network_says_what_the_hub_id_needs_and_the_way_round(empty_cache, small_dir, no_network, monkeypatch):
    """Offline, the first file that fails is config.json, but placing it alone would only fail on the weights next:
    the message says once what failed, every place looked in (Hugging Face's cache too), and the ways on: both
    files in one of those folders, or in a folder of one's own passed instead of the hub id."""
    hub = empty_cache.parent / 'hub'
    monkeypatch.setenv('HF_HUB_CACHE', str(hub))
    with pytest.raises(pretrained.DownloadError) as e:  # data.DownloadError, a RuntimeError
        GPT.from_pretrained('gpt2')
    message = str(e.value)
    assert message.startswith('could not download https://huggingface.co/gpt2/resolve/main/config.json (')
    assert f"found no copy in {empty_cache / 'hf' / 'gpt2'} (the download cache) or Hugging Face's cache " \
        f"({hub}). Check the network, or get config.json and model.safetensors elsewhere and put both in " \
        f"{empty_cache / 'hf' / 'gpt2'}/ (or hf/gpt2/ in a folder that MINGPT_DATA_DIR names), or in a folder of " \
        "your own, passed instead of 'gpt2' (GPT.from_pretrained(folder), a project's --model or --system.init)." \
        in message
    assert message.count('hf/gpt2/') == 2 and 'save_pretrained' not in message  # each place once, and no aside
    data = empty_cache.parent / 'data'
    monkeypatch.setenv('MINGPT_DATA_DIR', str(data))  # misspelt, say: the message says it names no folder
    with pytest.raises(RuntimeError, match=rf"\({re.escape(str(hub))}\); MINGPT_DATA_DIR names "
                                           rf"{re.escape(str(data))}, which does not exist: correct it "
                                           r"\(misspelt\?\) or unset it\. .* put both in [^ ]*/hf/gpt2/ \(or "
                                           r"hf/gpt2/ in a folder that MINGPT_DATA_DIR names\)"):
        GPT.from_pretrained('gpt2')
    folder = data / 'hf' / 'gpt2'  # hf/gpt2/ in the folder MINGPT_DATA_DIR names: the hub id loads offline
    folder.mkdir(parents=True)
    for f in ('config.json', 'model.safetensors'):
        (folder / f).write_bytes((small_dir / f).read_bytes())
    assert GPT.from_pretrained('gpt2').config.n_layer == SMALL['n_layer']


def test_hub_id_downloads_into_cache(small_dir, empty_cache, monkeypatch):
    """The hub path end to end with a fake server that serves a small model under the name 'gpt2'."""
    class Response:
        status_code, headers, history = 200, {}, []

        def __init__(self, body):
            self.body = body

        def raise_for_status(self):
            pass

        def iter_content(self, chunk_size):
            yield self.body

    urls = []

    def serve(url, **kw):
        urls.append(url)
        return Response((small_dir / url.rsplit('/', 1)[1]).read_bytes())
    monkeypatch.setattr(data.requests, 'get', serve)
    model = GPT.from_pretrained('gpt2')
    assert model.config.n_embd == SMALL['n_embd']
    assert urls == [f'https://huggingface.co/gpt2/resolve/main/{f}' for f in ('config.json', 'model.safetensors')]
    assert (empty_cache / 'hf' / 'gpt2' / 'model.safetensors').exists()
    GPT.from_pretrained('gpt2')  # the second time from the cache
    assert len(urls) == 2


def test_a_checkpoint_whose_tokenizer_outnumbers_its_model_vocabulary_is_refused(tmp_path):
    from mingpt.data import CharTokenizer
    from mingpt.checkpoint import model_state, save_checkpoint
    C = GPT.get_default_config()
    C.merge_from_dict(dict(n_layer=1, n_head=1, n_embd=8, vocab_size=3, block_size=4))
    model = GPT(C)
    save_checkpoint({**model_state(model), **pretrained.tokenizer_record(CharTokenizer('abc'))}, tmp_path / 'ok.pt')
    assert pretrained.load_model_and_tokenizer(str(tmp_path / 'ok.pt'))[1].chars == list('abc')
    save_checkpoint({**model_state(model), **pretrained.tokenizer_record(CharTokenizer('abcd'))}, tmp_path / 'bad.pt')
    with pytest.raises(ValueError, match=r"has a vocabulary of 3 tokens, fewer than the 4 of its tokenizer"):
        pretrained.load_model_and_tokenizer(str(tmp_path / 'bad.pt'))


def test_load_model_and_tokenizer_takes_the_dtypes_from_pretrained_takes_for_a_checkpoint_too(tmp_path):
    """dtype='auto' loaded a Hugging Face folder in its saved dtype, but a checkpoint failed in torch's model.to with
    'Expected one of cpu, cuda, ... device type at start of device string: auto'; the string 'bfloat16' was an
    'Invalid device string' there."""
    from mingpt.data import CharTokenizer
    from mingpt.checkpoint import model_state, save_checkpoint
    C = GPT.get_default_config()
    C.merge_from_dict(dict(n_layer=1, n_head=1, n_embd=8, vocab_size=3, block_size=4))
    model = GPT(C).to(torch.bfloat16)
    save_checkpoint({**model_state(model), **pretrained.tokenizer_record(CharTokenizer('abc'))}, tmp_path / 'm.pt')
    loaded = pretrained.load_model_and_tokenizer(str(tmp_path / 'm.pt'), 'auto')[0]
    assert {p.dtype for p in loaded.parameters()} == {torch.bfloat16}
    assert all(torch.equal(a, b) for a, b in zip(loaded.parameters(), model.parameters()))
    model.save_pretrained(tmp_path / 'hf')
    for name in (tmp_path / 'm.pt', tmp_path / 'hf'):  # refused before either is read
        with pytest.raises(TypeError, match=r"dtype must be a floating-point torch.dtype, such as torch.bfloat16, or "
                                            r"'auto' \(the dtype the model was saved in\), not 'bfloat16'$"):
            pretrained.load_model_and_tokenizer(str(name), 'bfloat16')


def test_a_path_from_the_home_directory_loads_with_its_tokenizer(tmp_path, monkeypatch):
    """from_pretrained expands '~' but load_model_and_tokenizer looked for '~/...' as typed: a checkpoint there was
    'no checkpoint', and a Hugging Face folder there lost its own tokenizer (GPT-2's was used instead)."""
    from mingpt.bpe import Encoder, bytes_to_unicode
    from mingpt.data import CharTokenizer
    from mingpt.checkpoint import model_state, save_checkpoint
    monkeypatch.setenv('HOME', str(tmp_path))
    C = GPT.get_default_config()
    C.merge_from_dict(dict(n_layer=1, n_head=1, n_embd=8, vocab_size=3, block_size=4))
    save_checkpoint({**model_state(GPT(C)), **pretrained.tokenizer_record(CharTokenizer('abc'))}, tmp_path / 'm.pt')
    assert pretrained.load_model_and_tokenizer('~/m.pt')[1].chars == list('abc')
    bytes_only = Encoder({c: i for i, c in enumerate(bytes_to_unicode().values())}, [])  # 256 tokens, no merges
    C.vocab_size = len(bytes_only)
    GPT(C).save_pretrained(tmp_path / 'hf')
    bytes_only.save(tmp_path / 'hf', hugging_face=True)
    assert len(pretrained.load_model_and_tokenizer('~/hf')[1]) == 256


def test_save_pretrained_checks_the_forward_pass_without_a_probes_hooks(tmp_path):
    """The check ran the model through its call: a probe's forward hook on the model recorded the check's 16 tokens
    as if the student had run them (and a model compiled in place compiled again, only to be saved)."""
    model = gpt2_like()
    seen = []
    model.register_forward_hook(lambda module, args, out: seen.append(args[0].shape))
    model.save_pretrained(tmp_path / 'hf')
    assert seen == []
