"""Checkpoint files (mingpt/checkpoint.py): the ways on that its messages, and pretrained.py's, name, followed as
written, then saving, loading and rebuilding (GPT's and seq2seq's from_checkpoint are tested in test_model.py and
test_generate.py too)."""
import importlib
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from conftest import deflate, refusal_of_a_pickled_path
from mingpt.checkpoint import load_checkpoint, model_state, save_checkpoint, tied_names, with_options
from mingpt.model import GPT
from mingpt.utils import CfgNode as CN

NAMED_FUNCTION = re.compile(r'mingpt\.(\w+)\.(save_checkpoint|model_state)\b')


def named(message):
    """The functions of mingpt's modules that message names as mingpt.<module>.<name>, imported as a reader would."""
    found = NAMED_FUNCTION.findall(message)
    assert found, message
    return {name: getattr(importlib.import_module(f'mingpt.{module}'), name) for module, name in found}


def tiny(**options):
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type=None, n_layer=1, n_head=2, n_embd=8, vocab_size=11, block_size=6, **options))
    return GPT(C)


def test_a_state_dict_alone_is_refused_with_a_way_to_save_it_that_works(tmp_path):
    """A bare state dict is refused with how to save a model that from_checkpoint rebuilds; the functions it named,
    mingpt.utils.save_checkpoint and mingpt.utils.model_state, had moved to mingpt.checkpoint."""
    model = tiny()
    torch.save(model.state_dict(), tmp_path / 'weights.pt')
    with pytest.raises(ValueError, match='it holds only weights') as refused:
        load_checkpoint(tmp_path / 'weights.pt')
    way = named(str(refused.value))
    way['save_checkpoint'](way['model_state'](model), tmp_path / 'model.pt')
    rebuilt, _ = GPT.from_checkpoint(tmp_path / 'model.pt')
    assert all(torch.equal(w, rebuilt.state_dict()[k]) for k, w in model.state_dict().items())


class Headed(GPT):
    def __init__(self, config):
        super().__init__(config)
        self.value_head = torch.nn.Linear(config.n_embd, 1)


@pytest.mark.parametrize('model', [lambda: tiny(pos_embd='sinusoidal'), lambda: Headed(tiny().config)],
                         ids=['another architecture', 'weights added'])
def test_save_pretrained_refuses_a_model_gpt2_has_no_layout_for_naming_a_save_that_works(tmp_path, model):
    """save_pretrained of a model that is not GPT-2's says to save it with the trainer's checkpoint instead, naming
    the function (mingpt.utils.save_checkpoint, which had moved to mingpt.checkpoint)."""
    model = model()
    with pytest.raises(ValueError, match="save it with the trainer's checkpoint") as refused:
        model.save_pretrained(tmp_path / 'hf')
    from mingpt.checkpoint import model_state
    named(str(refused.value))['save_checkpoint'](model_state(model), tmp_path / 'model.pt')
    assert load_checkpoint(tmp_path / 'model.pt')['model_class'] == type(model).__name__


def test_checkpoint_roundtrip_and_clear_errors(tmp_path):
    path = tmp_path / 'ck.pt'
    save_checkpoint({'model': {'w': torch.ones(3)}, 'vocab': ['a', 'b']}, path)
    assert load_checkpoint(path)['vocab'] == ['a', 'b']
    assert [p.name for p in tmp_path.iterdir()] == ['ck.pt']  # no temporary file left behind
    data = path.read_bytes()
    (tmp_path / 'trunc.pt').write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError, match=rf"^{re.escape(str(tmp_path / 'trunc.pt'))} could not be read as a mingpt "
                                         r"checkpoint \(truncated, corrupt, or another program's file\): it is "
                                         r"not the zip archive that torch.save writes$"):
        load_checkpoint(tmp_path / 'trunc.pt')  # not torch's advice to load with weights_only=False
    torch.save({'state_dict': {}}, tmp_path / 'foreign.pt')
    with pytest.raises(ValueError, match="not a mingpt checkpoint"):
        load_checkpoint(tmp_path / 'foreign.pt')
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / 'missing.pt')


def test_with_options_keeps_the_models_dtype_mode_and_weights_tied_without_a_copy():
    """with_options (a fine-tune's own dropout) built the new model in float32 and in training mode: a bfloat16 model
    (from_pretrained(dtype=torch.bfloat16)) came back in float32, twice its memory, and an eval one in training, with
    a random initialisation and a second copy of the weights made on the way."""
    model = tiny().to(torch.bfloat16).eval()
    rng = torch.get_rng_state()
    changed = with_options(model, attn_pdrop=0.25, embd_pdrop=0.0)
    assert torch.equal(torch.get_rng_state(), rng)  # no random initialisation
    assert (changed.config.attn_pdrop, changed.transformer.h[0].attn.attn_dropout.p) == (0.25, 0.25)
    assert {p.dtype for p in changed.parameters()} == {torch.bfloat16} and not changed.training
    assert changed.lm_head.weight is changed.transformer.wte.weight
    ours = {p.data_ptr() for p in model.parameters()}
    assert all(p.data_ptr() in ours for p in changed.parameters())
    x = torch.randint(11, (2, 6))
    assert torch.equal(changed(x)[0], model(x)[0])
    assert with_options(model.train(), attn_pdrop=0.5).training
    assert with_options(model, attn_pdrop=model.config.attn_pdrop) is model


def test_a_checkpoint_of_another_format_version_is_refused_and_a_missing_one_names_the_way_on(tmp_path):
    """A torch.save dict whose 'format' is not this code's (a later format, or another program's key of that name) is
    refused by the marker it lacks, not read as if its layout were ours; a path with no file says to train first or
    give a saved checkpoint's path."""
    torch.save({'format': 'mingpt-checkpoint-2', 'model': {'w': torch.ones(3)}}, tmp_path / 'later.pt')
    with pytest.raises(ValueError, match=r"later.pt is not a mingpt checkpoint \(no 'mingpt-checkpoint-1' marker\)"):
        load_checkpoint(tmp_path / 'later.pt')
    with pytest.raises(FileNotFoundError, match=r"no checkpoint at .*missing.pt: train first or pass the path of a "
                                                r"saved checkpoint$"):
        load_checkpoint(tmp_path / 'missing.pt')


def test_a_file_that_is_no_checkpoint_is_named_with_the_loader_it_needs(tmp_path):
    """A Hugging Face model.safetensors renamed model.pt, its config.json, a text and an older pytorch_model.bin were
    all 'not the zip archive that torch.save writes': now each is named, with the loader that reads it. The advice
    for Hugging Face files is followed here: the folder loads, with the saved model's logits."""
    from mingpt.model import GPT
    model = small_model(GPT).eval()
    folder = model.save_pretrained(tmp_path / 'hf')
    os.rename(folder / 'model.safetensors', folder / 'model.pt')
    (tmp_path / 'input.txt').write_text('First Citizen:\nBefore we proceed any further, hear me speak.\n')
    torch.save(model.state_dict(), tmp_path / 'old.bin', _use_new_zipfile_serialization=False)
    hf = (rf"; for Hugging Face GPT-2 weights give their folder, {re.escape(str(folder))}, with their config.json in "
          r"it \(GPT.from_pretrained\(folder\), a project's --model or --system.init\)$")
    renamed = r"; from_pretrained reads the weights named model.safetensors: rename the file back$"
    for path, says in [(folder / 'model.pt', r"a safetensors file \(the weights of a Hugging Face folder\)"
                                             + hf[:-1] + renamed),
                       (folder / 'config.json', r"JSON \(it begins '\{\\n  .*'\), such as a Hugging Face folder's "
                                                r"config.json" + hf),
                       (tmp_path / 'input.txt', r"text \(it begins 'First Citizen:\\nBefore we proceed'\); a mingpt "
                                                r"checkpoint is the model.pt \(or ckpt.pt\) that a training run "
                                                r"writes in its work_dir$")]:
        with pytest.raises(ValueError, match=rf"^{re.escape(str(path))} is not a mingpt checkpoint: it is {says}"):
            GPT.from_checkpoint(path)
    # torch.save's format before torch 1.6 is read as torch.load reads it: weights alone are named as such
    with pytest.raises(ValueError, match=r"old.bin is not a mingpt checkpoint \(no 'mingpt-checkpoint-1' marker\); it "
                                         r"holds only weights \(a state_dict\).*for Hugging Face GPT-2 weights"):
        GPT.from_checkpoint(tmp_path / 'old.bin')
    os.rename(folder / 'model.pt', folder / 'model.safetensors')
    x = torch.randint(11, (2, 6))
    with torch.no_grad():
        torch.testing.assert_close(GPT.from_pretrained(folder)(x)[0], model(x)[0], rtol=0, atol=1e-6)


def test_a_checkpoint_in_torch_saves_format_before_1_6_loads(tmp_path):
    """A checkpoint written again with torch.save(..., _use_new_zipfile_serialization=False) was refused as 'not a
    mingpt checkpoint ... for Hugging Face GPT-2 weights give their folder', which torch.load reads as it is (not
    mapped: that format cannot be)."""
    from mingpt.model import GPT
    model = small_model(GPT)
    save_checkpoint(model_state(model), tmp_path / 'new.pt')
    torch.save(load_checkpoint(tmp_path / 'new.pt'), tmp_path / 'old.pt', _use_new_zipfile_serialization=False)
    loaded, _ = GPT.from_checkpoint(tmp_path / 'old.pt')
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))
    assert load_checkpoint(tmp_path / 'old.pt', mmap=True)['format'] == 'mingpt-checkpoint-1'


def nano_checkpoint(path):
    """A small GPT with a buffer (the sinusoidal table) saved as the trainer saves it; returns the model."""
    from mingpt.model import GPT
    C = GPT.get_default_config()
    C.model_type, C.vocab_size, C.block_size, C.pos_embd = 'gpt-nano', 11, 8, 'sinusoidal'
    model = GPT(C)
    save_checkpoint(model_state(model), path)
    return model


def test_a_model_from_a_checkpoint_survives_a_rewrite_of_its_file(tmp_path):
    """Weights left mapped from the file (torch.load(mmap=True), tried to leave a ckpt.pt's optimizer state unread)
    made torch.save(model.state_dict(), the same path), which rewrites it in place, kill the process with a bus error
    or change the weights under the model."""
    nano_checkpoint(tmp_path / 'model.pt')
    script = ("import sys, torch; from mingpt.model import GPT\n"
              "model, checkpoint = GPT.from_checkpoint(sys.argv[1]); x = torch.zeros(1, 8, dtype=torch.long)\n"
              "before = model(x)[0]; torch.save({'other': torch.zeros(10)}, sys.argv[1])\n"
              "print(torch.equal(model(x)[0], before),\n"  # and the checkpoint's 'model' is the model's one copy
              "      checkpoint['model']['lm_head.weight'].data_ptr() == model.lm_head.weight.data_ptr())")
    out = subprocess.run([sys.executable, '-c', script, tmp_path / 'model.pt'], capture_output=True, text=True,
                         env={**os.environ, 'PYTHONPATH': str(Path(__file__).parents[1])})
    assert out.returncode == 0 and out.stdout.split()[-2:] == ['True', 'True'], out.stderr[-500:]


def test_from_checkpoint_leaves_the_model_on_the_device_map_location_reads_it_to(tmp_path, monkeypatch):
    """GPT.from_checkpoint(path, map_location='cuda') read the weights onto the GPU and moved them back: a CPU model.
    The model, its buffers included, is now where map_location puts the weights, as torch.load leaves them. Shown
    on the meta device, which every machine has (the tie check's torch.equal has no meta kernel: skipped here)."""
    from mingpt import checkpoint
    from mingpt.model import GPT
    nano_checkpoint(tmp_path / 'model.pt')
    monkeypatch.setattr(checkpoint, 'refuse_untied', lambda *args: None)
    for map_location, device in [('meta', 'meta'), (torch.device('meta'), 'meta'), ('cpu', 'cpu')]:
        model, _ = GPT.from_checkpoint(tmp_path / 'model.pt', map_location=map_location)
        assert {t.device.type for t in [*model.parameters(), *model.buffers()]} == {device}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_from_checkpoint_with_map_location_cuda_gives_a_cuda_model_with_the_same_logits(tmp_path):
    from mingpt.model import GPT
    saved = nano_checkpoint(tmp_path / 'model.pt').eval()
    model, _ = GPT.from_checkpoint(tmp_path / 'model.pt', map_location='cuda')
    assert {t.device.type for t in [*model.parameters(), *model.buffers()]} == {'cuda'}
    x = torch.randint(11, (2, 8))
    with torch.no_grad():
        torch.testing.assert_close(model(x.cuda())[0].cpu(), saved(x)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('prefix', ['', '_orig_mod.'])
def test_a_nanogpt_checkpoint_or_a_bare_state_dict_is_named_with_the_way_on(tmp_path, prefix):
    """Both were refused with advice for Hugging Face weights only. The advice given is followed here: the weights
    load, and give the saved model's logits."""
    from mingpt.model import GPT
    model = small_model(GPT).eval()
    weights = {prefix + k: v for k, v in model.state_dict().items()}
    args = dict(n_layer=2, n_head=2, n_embd=8, block_size=6, bias=True, vocab_size=11, dropout=0.0)
    torch.save({'model': weights, 'model_args': args, 'optimizer': {}, 'iter_num': 5, 'best_val_loss': 1.0,
                'config': {'batch_size': 12}}, tmp_path / 'ckpt.pt')
    with pytest.raises(ValueError, match=r"ckpt.pt is not a mingpt checkpoint \(no 'mingpt-checkpoint-1' marker\); it "
                                         r"is a nanoGPT checkpoint \(model_args, iter_num\), which mingpt does not "
                                         r"read\. Its weights have mingpt's names: build a GPT"):
        GPT.from_checkpoint(tmp_path / 'ckpt.pt')
    config = GPT.get_default_config()
    config.merge_from_dict({k: args[k] for k in ('n_layer', 'n_head', 'n_embd', 'vocab_size', 'block_size')})
    loaded = GPT(config).eval()
    saved = torch.load(tmp_path / 'ckpt.pt')['model']
    loaded.load_state_dict({k.removeprefix('_orig_mod.'): v for k, v in saved.items()})
    x = torch.randint(11, (2, 6))
    torch.testing.assert_close(loaded(x)[0], model(x)[0], rtol=0, atol=0)
    # bias=False: its model is this one with zero biases (as GPT's start), which strict=False leaves as they are
    with pytest.raises(ValueError, match=r"its bias=False leaves out mingpt's biases: load with strict=False, which "
                                         r"keeps them at their initial zeros"):
        GPT.from_checkpoint(tmp_path / 'ckpt.pt')
    fresh = GPT(config).eval()
    fresh.load_state_dict({k: v for k, v in model.state_dict().items() if not k.endswith('.bias')}, strict=False)
    torch.testing.assert_close(fresh(x)[0], model(x)[0], rtol=0, atol=0)
    torch.save(weights, tmp_path / 'weights.pt')
    with pytest.raises(ValueError, match=r"weights.pt is not a mingpt checkpoint .*; it holds only weights \(a "
                                         r"state_dict\), not the config to build their model from; for Hugging Face "
                                         r"GPT-2 weights .*; for weights of your own, build their model, then "
                                         r"model.load_state_dict\(torch.load\(path\)\) \(names that start with "
                                         r"'_orig_mod.' are a compiled model's"):
        GPT.from_checkpoint(tmp_path / 'weights.pt')


def test_a_folder_given_for_a_checkpoint_names_the_checkpoints_in_it(tmp_path):
    """A run's folder (--sample.checkpoint=out/translate) was 'truncated, corrupt, or another program's file'."""
    save_checkpoint({'model': {}}, tmp_path / 'run' / 'model.pt')
    save_checkpoint({'model': {}}, tmp_path / 'run' / 'ckpt.pt')
    (tmp_path / 'run' / 'empty').mkdir()
    with pytest.raises(IsADirectoryError, match=rf"^{re.escape(str(tmp_path / 'run'))} is a folder, not a checkpoint: "
                                                r"pass a checkpoint file \(.*ckpt.pt or .*model.pt\)$"):
        load_checkpoint(tmp_path / 'run')
    with pytest.raises(IsADirectoryError, match=r"is a folder, not a checkpoint: pass a checkpoint file \(it holds "
                                                r"none\)$"):
        load_checkpoint(tmp_path / 'run' / 'empty')
    C = GPT.get_default_config()  # save_pretrained's folder given to from_checkpoint: the way to read it is named
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=11, block_size=8))
    GPT(C).save_pretrained(tmp_path / 'hf')
    with pytest.raises(IsADirectoryError, match=r"is a folder, not a checkpoint: pass a checkpoint file \(it holds "
                                                rf"none\); it holds config.json: for Hugging Face weights, "
                                                rf"GPT.from_pretrained\({re.escape(repr(str(tmp_path / 'hf')))}\) "
                                                r"reads the folder$"):
        GPT.from_checkpoint(tmp_path / 'hf')


class RunsCode:
    """A pickle that runs a command when loaded (here a harmless one), as a malicious checkpoint would."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f'touch {self.marker}',))


def test_a_checkpoint_that_would_run_code_is_refused_saying_what_it_holds(tmp_path):
    """Not 'truncated or corrupt': the file is whole, and its pickle names os.system, which torch refused."""
    path, marker = tmp_path / 'model.pt', tmp_path / 'ran'
    torch.save({'format': 'mingpt-checkpoint-1', 'model': RunsCode(marker)}, path)
    with pytest.raises(ValueError, match=r"model.pt was not loaded: it holds a Python object \((posix|nt).system\) "
                                         r"besides the tensors and plain data of a mingpt checkpoint, .* If you "
                                         r"trust whoever made it, load it yourself: "
                                         r"torch.load\(path, weights_only=False\)$"):
        load_checkpoint(path)
    assert not marker.exists()


def test_a_refused_checkpoint_says_how_to_rebuild_its_model_and_the_way_works(tmp_path):
    """The message said only 'load it yourself: torch.load(path, weights_only=False)', and not how to make a model of
    what that gives. The rebuild it now gives is followed here, on a checkpoint holding a Path (an object that
    weights_only refuses): the model gives the saved model's logits."""
    import mingpt
    from mingpt.model import GPT
    saved, path = nano_checkpoint(tmp_path / 'model.pt').eval(), tmp_path / 'model.pt'
    torch.save({**torch.load(path), 'data_path': Path('input.txt')}, path)
    message = refusal_of_a_pickled_path(GPT.from_checkpoint, path)
    code = re.search(r"that torch.load gives, checkpoint: (model = .*\)) \(GPT, or the class that wrote it\)", message)
    scope = {'GPT': GPT, 'mingpt': mingpt, 'checkpoint': torch.load(path, weights_only=False)}
    exec(code[1], scope)
    x = torch.randint(11, (2, 8))
    with torch.no_grad():
        torch.testing.assert_close(scope['model'].eval()(x)[0], saved(x)[0], rtol=0, atol=0)


def test_a_checkpoint_with_compressed_members_is_refused_unread(tmp_path):
    """torch.load unpacks compressed members in memory: this one, 5 KB, unpacked to a 4 MB tensor (so 5 GB of
    memory from 5 MB of file)."""
    path = tmp_path / 'model.pt'
    save_checkpoint({'model': {'w': torch.zeros(1000, 1000)}}, path)
    deflate(path)
    assert path.stat().st_size < 10_000
    with pytest.raises(ValueError, match=r"model.pt was not loaded: its .*/data.pkl is compressed, which "
                                         r"torch.save never does, and could unpack to a thousand times its size"):
        load_checkpoint(path)
    save_checkpoint({'model': {'w': torch.zeros(3)}}, path)
    data = path.read_bytes()
    at = data.rfind(b'PK\x01\x02')  # the central directory, which lists the members, made unreadable
    path.write_bytes(data[:at] + b'XXXX' + data[at + 4:])
    with pytest.raises(ValueError, match=r"could not be read as a mingpt checkpoint \(truncated, corrupt"):
        load_checkpoint(path)


def test_a_torchscript_file_given_as_the_checkpoint_is_named_as_such(tmp_path):
    """torch.jit.save's file (a deployed model, say) was 'its ts/code/... is compressed, which torch.save never
    does'."""
    with warnings.catch_warnings():  # TorchScript is deprecated, but files of it are still about
        warnings.simplefilter('ignore', DeprecationWarning)
        torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), tmp_path / 'ts.pt')
    with pytest.raises(ValueError, match=r"ts.pt was not loaded: it is a TorchScript model \(torch.jit.save\), not a "
                                         r"checkpoint; load it with torch.jit.load\(path\)"):
        load_checkpoint(tmp_path / 'ts.pt')


def test_a_zipped_run_folder_given_as_the_checkpoint_is_named_as_such(tmp_path):
    """A run's folder zipped up to send it, passed as the checkpoint, was 'its run/config.json is compressed, which
    torch.save never does' (stored without compression: torch's 'file in archive is not in a subdirectory')."""
    import zipfile
    save_checkpoint({'model': {'w': torch.zeros(3)}}, tmp_path / 'model.pt')
    (tmp_path / 'config.json').write_text('{}')
    for compression in (zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED):
        with zipfile.ZipFile(tmp_path / 'run.zip', 'w', compression) as z:
            z.write(tmp_path / 'config.json', 'run/config.json')
            z.write(tmp_path / 'model.pt', 'run/model.pt')
        with pytest.raises(ValueError, match=r"run.zip was not loaded: it is a zip archive of other files "
                                             r"\(run/config.json, run/model.pt\), not one that torch.save wrote; "
                                             r"unzip it and pass the checkpoint inside"):
            load_checkpoint(tmp_path / 'run.zip')


def small_model(cls):
    """A tiny GPT or seq2seq Transformer with learned positions, so that every size is in its weights."""
    C = cls.get_default_config()
    C.merge_from_dict(dict(model_type=None, n_layer=2, n_head=2, n_embd=8, vocab_size=11, block_size=6,
                           pos_embd='learned'))
    return cls(C)


@pytest.mark.parametrize('key, value, saved', [('n_layer', 10 ** 6, 2), ('n_embd', 2 ** 30, 8),
                                               ('vocab_size', 10 ** 9, 11), ('block_size', 10 ** 9, 6)])
@pytest.mark.parametrize('model_class', ['GPT', 'Transformer'])
def test_a_checkpoint_whose_model_config_its_weights_do_not_fit_is_refused_before_the_model_is_built(
        tmp_path, monkeypatch, model_class, key, value, saved):
    """A model.pt got from someone else can ask for any size: n_layer=10**6 was still building after 20 s, before
    its weights were compared (as config.json beside Hugging Face weights is checked)."""
    from mingpt.model import GPT
    from mingpt.seq2seq import Transformer
    cls = {'GPT': GPT, 'Transformer': Transformer}[model_class]
    model = small_model(cls)
    save_checkpoint(model_state(model), tmp_path / 'ok.pt')
    again, _ = cls.from_checkpoint(tmp_path / 'ok.pt')
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    save_checkpoint({**model_state(model), 'model_config': {**model.config.to_dict(), key: value}}, tmp_path / 'bad.pt')
    monkeypatch.setattr(cls, '__init__', lambda self, config: pytest.fail('the model was built'))
    with pytest.raises(ValueError, match=rf"bad.pt was not loaded: its model_config asks for {key}={value} \(its "
                                         rf"weights: {saved}\); the weights and model_config do not belong together"):
        cls.from_checkpoint(tmp_path / 'bad.pt')


@pytest.mark.parametrize('model_class', ['GPT', 'Transformer'])
def test_a_checkpoint_with_a_gap_in_its_block_numbers_is_refused_before_the_model_is_built(tmp_path, monkeypatch,
                                                                                         model_class):
    """The size check took the highest block number as n_layer: one block's weights renamed h.999999 beside
    n_layer=10**6 passed it, and the model was built for minutes before the weights failed to load."""
    from mingpt.model import GPT
    from mingpt.seq2seq import Transformer
    cls = {'GPT': GPT, 'Transformer': Transformer}[model_class]
    model = small_model(cls)
    weights = {k.replace('.h.1.', f'.h.{10 ** 6 - 1}.'): v for k, v in model.state_dict().items()}
    save_checkpoint({**model_state(model), 'model': weights, 'model_config': {**model.config.to_dict(),
                                                                              'n_layer': 10 ** 6}}, tmp_path / 'bad.pt')
    monkeypatch.setattr(cls, '__init__', lambda self, config: pytest.fail('the model was built'))
    with pytest.raises(ValueError, match=r"bad.pt was not loaded: its weights hold 2 blocks numbered up to 999999, "
                                         r"so 999998 have none; the file is incomplete"):
        cls.from_checkpoint(tmp_path / 'bad.pt')


def test_a_checkpoint_of_a_model_without_learned_positions_is_rebuilt_by_its_code_and_named_by_the_stock_one(
        tmp_path, monkeypatch):
    """model.py with wpe deleted (from layer_stack and embed) saved a checkpoint that the same code could not read:
    the size check took block_size from wpe ("its model_config asks for block_size=6 (its weights: None)"). That
    code now rebuilds it, with the same logits; the stock model.py, which has wpe, refuses it naming the weight."""
    from mingpt import model as model_py
    stack = model_py.layer_stack

    def without_positions(config, blocks):
        layers = stack(config, blocks)
        del layers['wpe']
        return layers
    monkeypatch.setattr(model_py, 'layer_stack', without_positions)
    monkeypatch.setattr(GPT, 'embed', lambda self, idx, pos: self.transformer.drop(self.transformer.wte(idx)))
    model = tiny().eval()
    save_checkpoint(model_state(model), tmp_path / 'model.pt')
    again, _ = GPT.from_checkpoint(tmp_path / 'model.pt')
    idx = torch.randint(11, (2, 6), generator=torch.Generator().manual_seed(0))
    assert torch.equal(again(idx)[0], model(idx)[0])
    monkeypatch.undo()
    with pytest.raises(ValueError, match=r"model.pt holds a GPT that this code cannot rebuild \(missing from its "
                                         r"weights: transformer.wpe.weight\): it was saved by another version"):
        GPT.from_checkpoint(tmp_path / 'model.pt')


def test_a_compiled_or_ddp_wrapped_models_state_is_saved_as_the_model_inside(tmp_path):
    """model_state(torch.compile(model)) recorded an OptimizedModule with '_orig_mod.' names, and one wrapped in DDP
    (nanoGPT's DDP(torch.compile(model))) a DistributedDataParallel with 'module.' names, which from_checkpoint
    refused as another project's model."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from mingpt.model import GPT
    model = small_model(GPT)
    dist.init_process_group('gloo', init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        for wrapped in (DDP(torch.compile(model)), torch.compile(DDP(model))):
            state = model_state(wrapped)
            assert state['model_class'] == 'GPT' and state['model'].keys() == model.state_dict().keys()
    finally:
        dist.destroy_process_group()
    state = model_state(torch.compile(model))
    assert state['model_class'] == 'GPT' and state['model'].keys() == model.state_dict().keys()
    save_checkpoint(state, tmp_path / 'm.pt')
    again, _ = GPT.from_checkpoint(tmp_path / 'm.pt')
    x = torch.randint(11, (2, 6))
    torch.testing.assert_close(again(x)[0], model.eval()(x)[0], rtol=0, atol=0)


@pytest.mark.parametrize('prefix', ['_orig_mod.', 'module.', 'module._orig_mod.'])
def test_a_checkpoint_of_a_wrappers_state_dict_saved_by_hand_loads_as_a_resume_does(tmp_path, prefix):
    """A compiled or DDP model's state_dict saved by hand beside its config was called a GPT 'saved by another version
    of the model's code' whose weights have no lm_head.weight; a trainer's resume already took such names off."""
    model = tiny().eval()
    state = model_state(model)
    save_checkpoint({**state, 'model': {prefix + k: w for k, w in state['model'].items()}}, tmp_path / 'm.pt')
    loaded, checkpoint = GPT.from_checkpoint(tmp_path / 'm.pt')
    assert checkpoint['model'].keys() == model.state_dict().keys()  # the names the model has, as documented
    x = torch.randint(11, (2, 6))
    torch.testing.assert_close(loaded(x)[0], model(x)[0], rtol=0, atol=0)


class WithModule(GPT):
    """A GPT with a submodule of its own called module, the name DDP gives the model it wraps."""

    def __init__(self, config):
        super().__init__(config)
        self.module = torch.nn.Linear(config.n_embd, 2)


@pytest.mark.parametrize('prefix', ['_orig_mod.', 'module.', 'module._orig_mod.'])
def test_a_wrappers_prefix_comes_off_but_a_submodule_called_module_keeps_its_name(tmp_path, prefix):
    """Every 'module.' was taken off a name, the model's own too: its weights were 'in its weights, not in this
    model: bias, weight'."""
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type=None, n_layer=1, n_head=2, n_embd=8, vocab_size=11, block_size=6))
    model = WithModule(C).eval()
    state = model_state(model)
    save_checkpoint({**state, 'model': {prefix + k: w for k, w in state['model'].items()}}, tmp_path / 'm.pt')
    loaded, _ = WithModule.from_checkpoint(tmp_path / 'm.pt')
    torch.testing.assert_close(loaded.module.weight, model.module.weight, rtol=0, atol=0)


@pytest.mark.parametrize('name, value', [('lm_head.weight', 5), ('transformer.h.0.ln_1.weight', 'x')])
def test_a_checkpoint_with_plain_data_for_a_weight_names_it(tmp_path, name, value):
    from mingpt.model import GPT
    state = model_state(small_model(GPT))
    save_checkpoint({**state, 'model': {**state['model'], name: value}}, tmp_path / 'bad.pt')
    with pytest.raises(ValueError, match=rf"bad.pt's 'model' is not a state dict of a model's weights: under "
                                         rf"'{name}' it holds a {type(value).__name__}, where each name holds a "
                                         "tensor; the file is damaged"):
        GPT.from_checkpoint(tmp_path / 'bad.pt')
    save_checkpoint({**state, 'model': [1, 2]}, tmp_path / 'bad.pt')
    with pytest.raises(ValueError, match=r"bad.pt's 'model' holds a list, not a state dict of a model's weights"):
        GPT.from_checkpoint(tmp_path / 'bad.pt')


@pytest.mark.parametrize('model_config', [[1, 2], {1: 2}])
def test_a_checkpoint_whose_model_config_is_not_a_dict_of_options_says_so(tmp_path, model_config):
    """It was a TypeError of CfgNode(**model_config), which a project shows as a traceback."""
    from mingpt.model import GPT
    save_checkpoint({**model_state(small_model(GPT)), 'model_config': model_config}, tmp_path / 'bad.pt')
    with pytest.raises(ValueError, match=r"bad.pt holds a GPT that this code cannot rebuild \(its model_config is not "
                                         r"a dict of options\)"):
        GPT.from_checkpoint(tmp_path / 'bad.pt')


@pytest.mark.parametrize('model_class, pos_embd', [('GPT', 'learned'), ('GPT', 'sinusoidal'), ('Transformer', None)])
def test_from_checkpoint_holds_the_weights_once_tied_with_real_buffers_and_the_same_outputs(
        tmp_path, model_class, pos_embd):
    """The model was built (randomly initialised) and the checkpoint's weights copied into it: two copies at the
    peak, and a second one kept in the returned checkpoint. Now the model's parameters are the checkpoint's tensors
    (in float32, where a half-precision model was saved), its tied embedding and head one parameter, and its
    sinusoidal table (never saved) computed."""
    from mingpt.model import GPT, sinusoidal_positions
    from mingpt.seq2seq import Transformer
    cls = {'GPT': GPT, 'Transformer': Transformer}[model_class]
    model = small_model(cls).eval()
    if pos_embd:
        model = GPT(CN(**{**model.config.to_dict(), 'pos_embd': pos_embd})).eval()
    else:
        model = Transformer(CN(**{**model.config.to_dict(), 'share_embeddings': True, 'pos_embd': 'sinusoidal'})).eval()
    save_checkpoint(model_state(model), tmp_path / 'm.pt')
    again, ckpt = cls.from_checkpoint(tmp_path / 'm.pt')
    for name, p in again.named_parameters():
        assert p.data_ptr() == ckpt['model'][name].data_ptr(), name
    heads = [again.lm_head.weight, *([again.transformer.wte.weight] if pos_embd else
                                     [again.decoder.wte.weight, again.encoder.wte.weight])]
    assert all(h is heads[0] for h in heads) and len(list(again.parameters())) == len(list(model.parameters()))
    tables = [m.table for m in again.modules() if hasattr(m, 'table')]
    assert len(tables) == (0 if pos_embd == 'learned' else 1 if pos_embd else 2)
    for table in tables:
        assert torch.equal(table, sinusoidal_positions(*table.shape))
    x = torch.randint(11, (2, 6))
    if pos_embd:
        assert torch.equal(again(x)[0], model(x)[0])
    else:
        assert torch.equal(again(x, x[:, :5])[0], model(x, x[:, :5])[0])
    save_checkpoint(model_state(model.half()), tmp_path / 'half.pt')
    assert {p.dtype for p in cls.from_checkpoint(tmp_path / 'half.pt')[0].parameters()} == {torch.float32}


@pytest.mark.parametrize('model_class', ['GPT', 'Transformer'])
def test_from_checkpoint_gives_the_dtype_asked_for_and_auto_the_saved_ones_without_a_copy(tmp_path, model_class):
    """from_checkpoint of a bfloat16 model's checkpoint gave a float32 model, always: twice the memory, and a dtype
    the user did not save. dtype is from_pretrained's: float32 left out (as before), 'auto' the saved dtype."""
    from mingpt.seq2seq import Transformer
    cls = {'GPT': GPT, 'Transformer': Transformer}[model_class]
    model = small_model(cls).to(torch.bfloat16).eval()
    save_checkpoint(model_state(model), tmp_path / 'bf16.pt')
    saved = model.state_dict()
    for dtype, expected in [(torch.float32, torch.float32), ('auto', torch.bfloat16), (torch.float16, torch.float16)]:
        again, ckpt = cls.from_checkpoint(tmp_path / 'bf16.pt', dtype=dtype)
        assert {p.dtype for p in again.parameters()} == {expected}, dtype
        for name, p in again.state_dict().items():  # the saved values, in the dtype asked for
            assert torch.equal(p, saved[name].to(expected)), (dtype, name)
        if dtype == 'auto':  # the checkpoint's own tensors, tied as they were: no float32 copy on the way
            assert all(p.data_ptr() == ckpt['model'][n].data_ptr() for n, p in again.named_parameters())
            assert tied_names(again) == tied_names(model)
    save_checkpoint(model_state(small_model(cls)), tmp_path / 'fp32.pt')  # 'auto' of a float32 one: float32
    assert {p.dtype for p in cls.from_checkpoint(tmp_path / 'fp32.pt', dtype='auto')[0].parameters()} == {torch.float32}
    with pytest.raises(TypeError, match=r"^dtype must be a floating-point torch.dtype, such as torch.bfloat16, or "
                                        r"'auto' \(the dtype the model was saved in\), not 'bfloat16'$"):
        cls.from_checkpoint(tmp_path / 'bf16.pt', dtype='bfloat16')
