"""Checkpoint files: the one format the project writes and reads (a torch.save dict marked with CHECKPOINT_FORMAT),
and a model rebuilt from one. Read top to bottom: writing one (model_state, save_checkpoint); reading one (file_kind
tells a file's kind by its first bytes; load_checkpoint refuses a foreign, compressed or pickled file and says what
to do instead); rebuilding its model (checked_config, before anything is built, then rebuild_model, which is GPT's
and seq2seq's Transformer's from_checkpoint); and loading the weights into it without a copy (parameters_on_meta,
load_weights), where names the model ties into one tensor must hold one value (refuse_untied). pretrained.py reads
GPT-2's files with the same checks.
"""
import io
import os
import pickle
import re
import zipfile
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel

from mingpt.utils import CfgNode, ConfigError, atomic_write, plural, warn_caller, write_failed

CHECKPOINT_FORMAT = 'mingpt-checkpoint-1'


def model_state(model):
    """The part of a checkpoint that from_checkpoint rebuilds a model from: the class's name (so that another
    model's checkpoint is named as such), its config and its weights."""
    # torch.compile's wrapper and DDP's, in either order (nanoGPT's DDP(torch.compile(model))): save the model inside,
    # under its own names
    while hasattr(model, '_orig_mod') or isinstance(model, DistributedDataParallel):
        model = model.module if isinstance(model, DistributedDataParallel) else model._orig_mod
    state = {'model_class': type(model).__name__, 'model': model.state_dict()}
    if isinstance(getattr(model, 'config', None), CfgNode):
        state['model_config'] = model.config.to_dict()
    return state


def save_checkpoint(checkpoint, path):
    """torch.save the checkpoint dict atomically, marked with the project's checkpoint format. A write that fails
    (a full disk) leaves the file that was there, and raises an OSError that names it."""
    try:
        atomic_write(path, lambda tmp: torch.save({'format': CHECKPOINT_FORMAT, **checkpoint}, tmp))
    except (OSError, RuntimeError) as e:  # torch.save's writer says a full disk as 'unexpected pos 540736 vs 540624'
        raise write_failed(path, e, 'the checkpoint ') from e


LFS_POINTER = "a Git LFS pointer, not the file itself (git lfs pull gets it)"  # what a clone without git-lfs holds
TORCH_PICKLE = pickle.dumps(0x1950a86a20f9469cfc6c, protocol=2)[2:-1]  # the magic number torch.save once pickled first


def file_kind(path):
    """(kind, what) of the file at path, by its first bytes: kind is 'zip' (torch.save's archive, among others),
    'torch' (torch.save's pickle from before torch 1.6, which starts with its magic number), 'safetensors' (8 bytes,
    the header's length, then the header's JSON), 'json' (a config.json) or None, any other file; `what` names it
    for a message."""
    with open(path, 'rb') as f:
        start = f.read(32)
    if start.startswith(b'PK'):
        return 'zip', "a zip archive"
    if TORCH_PICKLE in start:
        return 'torch', "a torch.save file of the format before torch 1.6 (as older pytorch_model.bin files are)"
    # a header's length is small; the first 8 bytes of any text, read as a number, are not
    if start[8:9] == b'{' and int.from_bytes(start[:8], 'little') < 2 ** 32:
        return 'safetensors', "a safetensors file (the weights of a Hugging Face folder)"
    if start.startswith(b'\x80'):  # a pickle's protocol mark: pickle.dump's, whose loading can run any code
        return None, ("a Python pickle that torch.save did not write; unpickling it could run code of the file's "
                      "choosing")
    if start.startswith(b'version '):
        return None, LFS_POINTER
    if not start:
        return None, "empty (0 bytes)"
    text = start.decode('utf-8', 'ignore')  # 'ignore': the 32 bytes may end inside a character
    if b'\0' not in start and len(text) >= len(start) - 3 and all(c.isprintable() or c.isspace() for c in text):
        if text.lstrip().startswith(('{', '[')):
            return 'json', f"JSON (it begins {text!r}), such as a Hugging Face folder's config.json"
        return None, f"text (it begins {text!r})"
    return None, f"of another kind (it begins {start[:16]!r})"


def no_checkpoint(path, fix='train first or pass the path of a saved checkpoint'):
    """The FileNotFoundError for a checkpoint path that holds none: a relative path also names the folder it was
    looked for from (run from another one?), and fix says what writes one."""
    here = '' if os.path.isabs(path) else f" (a path from this folder, {os.getcwd()})"
    return FileNotFoundError(f"no checkpoint at {path}{here}: {fix}")


def load_checkpoint(path, map_location='cpu', mmap=False):
    """Read a checkpoint written by save_checkpoint; a truncated or foreign file raises a ValueError saying so.
    mmap=True maps the tensors instead of reading them (to look at a large checkpoint's iteration cheaply)."""
    if not os.path.exists(path):
        raise no_checkpoint(path)
    if os.path.isdir(path):  # a run's folder: its checkpoints are files in it
        inside = ' or '.join(sorted(str(p) for p in Path(path).glob('*.pt'))) or 'it holds none'
        hf = (f"; it holds config.json: for Hugging Face weights, GPT.from_pretrained({str(path)!r}) reads the folder"
              if (Path(path) / 'config.json').is_file() and inside == 'it holds none' else '')  # save_pretrained's
        raise IsADirectoryError(f"{path} is a folder, not a checkpoint: pass a checkpoint file ({inside}){hf}")
    hf = (f"for Hugging Face GPT-2 weights give their folder, {Path(path).absolute().parent}, with their "
          "config.json in it (GPT.from_pretrained(folder), a project's --model or --system.init)")
    kind, what = file_kind(path)
    if kind not in ('zip', 'torch'):  # refused before torch.load, whose advice (weights_only=False) fits no such file
        ours = "a mingpt checkpoint is the model.pt (or ckpt.pt) that a training run writes in its work_dir"
        advice = hf if kind in ('safetensors', 'json') else ours
        # renamed, the folder lacks it; a shard (model-00001-of-00002.safetensors) is read through the folder's index
        shard = re.fullmatch(r'model-\d+-of-\d+\.safetensors', Path(path).name)
        if kind == 'safetensors' and Path(path).name != 'model.safetensors' and not shard:
            advice += "; from_pretrained reads the weights named model.safetensors: rename the file back"
        raise ValueError(f"{path} is not a mingpt checkpoint: it is {what}; {advice}")
    if kind == 'zip':
        if not zipfile.is_zipfile(path):
            raise ValueError(f"{path} could not be read as a mingpt checkpoint (truncated, corrupt, or another "
                             "program's file): it is not the zip archive that torch.save writes")
        refuse_compressed(path)
    try:  # torch.save's format before torch 1.6 (kind 'torch') loads too, but cannot be mapped
        checkpoint = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap and kind == 'zip')
    except Exception as e:
        rebuild = ("Its model is rebuilt from the dict that torch.load gives, checkpoint: model = "
                   "GPT(mingpt.utils.CfgNode(**checkpoint['model_config'])); "
                   "model.load_state_dict(checkpoint['model']) (GPT, or the class that wrote it). ")
        raise load_refused(path, e, "the tensors and plain data of a mingpt checkpoint", rebuild,
                           f"{path} could not be read as a mingpt checkpoint (truncated, corrupt, or another program's "
                           f"file): {type(e).__name__}: {e}") from None
    if not isinstance(checkpoint, dict) or checkpoint.get('format') != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not a mingpt checkpoint (no '{CHECKPOINT_FORMAT}' marker); "
                         f"{foreign_checkpoint_advice(checkpoint, hf)}")
    return checkpoint


def foreign_checkpoint_advice(checkpoint, hf):
    """The way on from a torch.save file without the mingpt marker, by what it holds; hf is the advice for Hugging
    Face weights."""
    compiled = "names that start with '_orig_mod.' are a compiled model's: remove that prefix"
    if isinstance(checkpoint, dict) and {'model', 'model_args'} <= checkpoint.keys():
        return ("it is a nanoGPT checkpoint (model_args, iter_num), which mingpt does not read. Its weights have "
                "mingpt's names: build a GPT with model_type=None and the n_layer, n_head, n_embd, vocab_size and "
                f"block_size of its model_args, then model.load_state_dict(checkpoint['model']) ({compiled}; "
                "its bias=False leaves out mingpt's biases: load with strict=False, which keeps them at their initial "
                "zeros; nanoGPT's GELU is exact, mingpt's the tanh approximation, so the outputs differ slightly)")
    if isinstance(checkpoint, dict) and checkpoint and all(isinstance(w, torch.Tensor) for w in checkpoint.values()):
        return (f"it holds only weights (a state_dict), not the config to build their model from; {hf}; for weights "
                f"of your own, build their model, then model.load_state_dict(torch.load(path)) ({compiled}). To save "
                "a model that from_checkpoint rebuilds: mingpt.checkpoint.save_checkpoint("
                "mingpt.checkpoint.model_state(model), path)")
    return hf


def refuse_compressed(path):
    """Refuse the zip archive at path (torch.save's format) if it is not one torch.save wrote (a run's folder zipped
    up, to send it) or a member is compressed: torch.save stores them as they are, and torch.load unpacks compressed
    ones in memory, where 5 KB can hold a tensor of 4 MB."""
    try:
        with zipfile.ZipFile(path) as z:
            members = z.infolist()
    except (zipfile.BadZipFile, OSError):  # not a zip archive, or unreadable: torch.load says what it is
        return
    names = [m.filename for m in members]
    if not any(name.endswith('/data.pkl') for name in names):  # torch.save's archive: <name>/data.pkl, the tensors
        files = [name for name in names if not name.endswith('/')]
        shown = ', '.join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else '')
        raise ValueError(f"{path} was not loaded: it is a zip archive of other files ({shown or 'none'}), not one that "
                         "torch.save wrote; unzip it and pass the checkpoint inside (a run's model.pt)")
    if any(name.endswith('/constants.pkl') for name in names):  # torch.jit.save's, which also keeps code
        raise ValueError(f"{path} was not loaded: it is a TorchScript model (torch.jit.save), not a checkpoint; load "
                         "it with torch.jit.load(path)")
    packed = next((m.filename for m in members if m.compress_type != zipfile.ZIP_STORED), None)
    if packed:
        raise ValueError(f"{path} was not loaded: its {packed} is compressed, which torch.save never does, and could "
                         "unpack to a thousand times its size")


PICKLED_GLOBAL = re.compile(r'GLOBAL ([\w.]+)')  # how torch.load(weights_only=True) names an object it refuses


def check_loads_back(extras):
    """Refuse, naming its key, an extra of every checkpoint that torch.save cannot write (a lambda, an open file) or
    load_checkpoint would not read back (a numpy array): now, not at the first save, perhaps after all the training."""
    for key, value in extras.items():
        buffer = io.BytesIO()
        try:
            torch.save(value, buffer)
            buffer.seek(0)
            torch.load(buffer, weights_only=True)
        except Exception as e:
            found = PICKLED_GLOBAL.search(str(e))
            why = f"it holds a Python object, {found[1]}" if found else f"{type(e).__name__}: {e}"
            raise ValueError(f"checkpoint_extras[{key!r}] cannot be saved in a checkpoint that loads back ({why}); "
                             "keep to tensors and plain data (numbers, strings, lists, dicts; a numpy array as "
                             ".tolist())") from None


def load_refused(path, error, expected, rebuild, unreadable):
    """The ValueError to raise where torch.load(path, weights_only=True) failed with error: where it refused a Python
    object (its error names it, e.g. posix.system) beside what the file is `expected` to hold, why and what to do
    (rebuild: how to make a model, and a file that loads safely, of what torch.load(path, weights_only=False) gives,
    for one who trusts the file); else the message `unreadable` (a truncated file, say)."""
    found = PICKLED_GLOBAL.search(str(error))
    if found:
        return ValueError(f"{path} was not loaded: it holds a Python object ({found[1]}) besides {expected}, and "
                          f"unpickling it would run code of the file's choosing. {rebuild}If you trust whoever made "
                          "it, load it yourself: torch.load(path, weights_only=False)")
    return ValueError(unreadable)


def refuse_non_tensors(weights, source, what):
    """Refuse weights read from source (a file, or a part of one) unless they are a state dict (names to tensors) of
    `what`: a file can hold any plain data, such as a number or a string under a weight's name, where a shape is
    read."""
    if not isinstance(weights, dict):
        raise ValueError(f"{source} holds a {type(weights).__name__}, not a state dict of {what}")
    for name, w in weights.items():
        if not (isinstance(name, str) and isinstance(w, torch.Tensor)):
            raise ValueError(f"{source} is not a state dict of {what}: under {name!r} it holds a {type(w).__name__}, "
                             "where each name holds a tensor; the file is damaged or not what it is named")


STACK_LAYER = re.compile(r'\w+\.h\.(\d+)\.')  # a weight of block i in layer_stack's names


def numbered_blocks(weights, pattern):
    """(n, missing): the blocks whose weights are named by pattern (its group: the block's number) are numbered up to
    n - 1, and `missing` of those numbers have no weight. A gap is refused before a model is built: one weight of
    block 10**6 - 1 alone would read as 10**6 blocks."""
    blocks = {int(m[1]) for m in map(pattern.match, weights) if m}
    n = max(blocks, default=-1) + 1
    return n, n - len(blocks)


def check_sizes(config, weights, path):
    """Refuse a checkpoint whose model_config asks for other sizes than its weights have. Checked before the model is
    built: a config can ask for any size, which takes minutes to build or more memory than there is (n_layer=10**6).
    Reads layer_stack's names (GPT's transformer, seq2seq's encoder and decoder) and the head's, lm_head."""
    head = weights.get('lm_head.weight')
    if head is None or head.dim() != 2:  # another model's weights, e.g. a classifier's, named gpt.*
        raise ConfigError("its weights have no lm_head.weight matrix")
    n_layer, missing = numbered_blocks(weights, STACK_LAYER)
    if missing:
        held = n_layer - missing
        raise ValueError(f"{path} was not loaded: its weights hold {held} {plural(held, 'block')} numbered up to "
                         f"{n_layer - 1}, so {missing} have none; the file is incomplete")
    have = dict(n_layer=n_layer, vocab_size=head.shape[0], n_embd=head.shape[1])
    wpe = [w for k, w in weights.items() if k.endswith('.wpe.weight')]
    # a sinusoidal table is computed, never saved; and weights with no table at all are a model.py's whose learned
    # positions were taken out (loading them into a model that has them names wpe as missing)
    if config.pos_embd == 'learned' and wpe:
        have['block_size'] = len(wpe[0]) if wpe[0].dim() else None
    wrong = [f"{k}={getattr(config, k)!r} (its weights: {v})" for k, v in have.items() if v != getattr(config, k)]
    if wrong:
        raise ValueError(f"{path} was not loaded: its model_config asks for {', '.join(wrong)}; the weights and "
                         "model_config do not belong together")


def checked_config(cls, checkpoint, weights, path):
    """The config of class cls that checkpoint (read from path) records as its model_config, checked before any model
    is built: that cls can build it, and that its sizes are those of weights (the state dict it goes with). A
    ConfigError says why not."""
    if 'model_config' not in checkpoint:
        raise ConfigError("it has no model_config")
    saved_config = checkpoint['model_config']
    if not isinstance(saved_config, dict) or not all(isinstance(k, str) for k in saved_config):
        raise ConfigError("its model_config is not a dict of options")
    config = CfgNode(**saved_config)
    cls.check_config(config)
    check_sizes(config, weights, path)
    return config


def with_options(model, **options):
    """model, or its weights in a new model of its class built with these config options (e.g. a fine-tune's own
    dropout, where a checkpoint or config.json gave another), where they differ from model.config's: in model's
    dtype, on its device and in its mode, holding model's own tensors (no copy, no random initialisation)."""
    if all(getattr(model.config, k) == v for k, v in options.items()):
        return model
    weight = next(model.parameters())
    with parameters_on_meta():
        new = type(model)(CfgNode(**{**model.config.to_dict(), **options})).to(weight.dtype)
    load_weights(new, model.state_dict(), weight.device)
    return new.train(model.training)


def check_dtype(dtype):
    """Refuse a dtype that from_pretrained and from_checkpoint cannot load a model in, before anything is
    read (torch's own error for the string 'bfloat16' spoke of an 'invalid device string')."""
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point or isinstance(dtype, str) and dtype == 'auto'):
        raise TypeError(f"dtype must be a floating-point torch.dtype, such as torch.bfloat16, or 'auto' (the dtype the "
                        f"model was saved in), not {dtype!r}")


def stored_dtype(weights):
    """The dtype weights (name: tensor) are stored in: the first floating-point one's, as transformers' 'auto' reads a
    checkpoint whose config names none (float32 where none is)."""
    return next((w.dtype for w in weights.values() if w.is_floating_point()), torch.float32)


def rebuild_model(cls, path, map_location='cpu', dtype=torch.float32):
    """cls.from_checkpoint: the model of class cls that a checkpoint written with model_state holds, in eval mode and
    its parameters in dtype ('auto': the dtype its weights were saved in, as from_pretrained's), and the checkpoint
    dict, whose 'model' holds the model's own tensors (one copy of the weights, not two, where dtype is theirs)."""
    check_dtype(dtype)
    checkpoint = load_checkpoint(path, map_location)
    weights = checkpoint.get('model', {})
    refuse_non_tensors(weights, f"{path}'s 'model'", "a model's weights")
    if weights:  # a wrapper's state_dict saved by hand loses the wrapper's prefix, as a trainer's resume takes it off
        weights = checkpoint['model'] = strip_prefixes(weights)
    if dtype == 'auto':
        dtype = stored_dtype(weights)
    model = None
    try:
        config = checked_config(cls, checkpoint, weights, path)
        with parameters_on_meta():  # no memory, no random initialisation: the weights come from the file
            model = cls(config).to(dtype)
        refuse_untied(model, weights, path, "it was saved from a model untied after it was built. Build that model "
                      f"and load it: checkpoint = torch.load({str(path)!r}); model = {cls.__name__}(mingpt.utils."
                      "CfgNode(**checkpoint['model_config'])); untie it the same way; "
                      "model.load_state_dict(checkpoint['model'])")
        # on the device map_location read the weights to, as torch.load would leave them
        load_weights(model, weights, next(iter(weights.values())).device if weights else 'cpu')
    except (ConfigError, RuntimeError) as e:
        differ = weight_differences(model.state_dict(), weights) if model is not None else {}
        reason = ('; '.join(f"{what}: {layer_names(names)}" for what, names in differ.items())
                  or ' '.join(str(e).split())[:200])  # torch's message lists every layer's names, and is cut
        saved = checkpoint.get('model_class')  # checkpoints older than model_state do not say
        if saved not in (None, cls.__name__):
            raise ValueError(f"{path} holds a {saved}, not a {cls.__name__}: a checkpoint is read by the project "
                             "that wrote it") from None
        if saved:  # the right class, but not one this code builds (saved by a changed model.py?)
            anyway = ("; to start from its weights anyway, load those that match into this code's model: "
                      f"model.load_state_dict(torch.load({str(path)!r})['model'], strict=False) (the rest keep their "
                      "initial values)")
            loadable = differ and 'of another shape' not in differ  # strict=False still refuses other shapes
            raise ValueError(f"{path} holds a {cls.__name__} that this code cannot rebuild ({reason}): it was "
                             f"saved by another version of the model's code{anyway if loadable else ''}") from None
        raise ValueError(f"{path} does not hold a {cls.__name__} ({reason}): a checkpoint of another model, such "
                         "as sentiment's classifier, is read by the project that wrote it") from None
    saved = checkpoint.get('model_class')
    # a subclass's checkpoint read as GPT, whose forward or blocks may be its own (GPT's read by a subclass is meant)
    if saved is not None and saved not in {c.__name__ for c in cls.__mro__}:
        warn_caller(f"{path} holds a {saved}, rebuilt here from its weights as a {cls.__name__}, which runs none of "
                    f"{saved}'s own code: {saved}.from_checkpoint(path) rebuilds the {saved}")
    return model.eval(), checkpoint


def strip_prefixes(state_dict, names=None):
    """state_dict without the prefixes a wrapper adds to every name: DDP's 'module.' and torch.compile's '_orig_mod.',
    nested either way (nanoGPT's DDP(torch.compile(model)) saves 'module._orig_mod.'). A prefix comes off only where
    every name has it, and none once the names are `names` (the model's own): a model may have a submodule called
    module, whose names keep theirs."""
    while state_dict and (names is None or state_dict.keys() != names):
        prefix = next((p for p in ('module.', '_orig_mod.') if all(k.startswith(p) for k in state_dict)), None)
        if prefix is None:
            break
        state_dict = {k[len(prefix):]: v for k, v in state_dict.items()}
    return state_dict


def weight_differences(expected, weights):
    """How the names and shapes of weights (a state dict) differ from those of expected (the model's): each kind of
    difference that occurs ('missing from its weights', 'in its weights, not in this model', 'of another shape')
    with its names."""
    kinds = {'missing from its weights': expected.keys() - weights.keys(),
             'in its weights, not in this model': weights.keys() - expected.keys(),
             'of another shape': {n for n in expected.keys() & weights.keys() if expected[n].shape != weights[n].shape}}
    return {what: names for what, names in kinds.items() if names}


def layer_names(names):
    """Parameter names for a message, each layer's once (h.*) and at most six."""
    names = sorted({re.sub(r'\.h\.\d+\.', '.h.*.', n) for n in names})
    return ', '.join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else '')


@contextmanager
def parameters_on_meta():
    """Modules built inside get their parameters on the meta device: shapes without memory, and a random
    initialisation that costs nothing, for a model whose weights are loaded next (load_weights). Buffers are built
    as usual: a non-persistent one, such as the sinusoidal table, is in no file."""
    def to_meta(module, name, param):
        if param is not None and not param.is_meta:  # one already on meta is a tie (GPT's lm_head): kept as is
            return torch.nn.Parameter(param.to('meta'), param.requires_grad)
    hook = torch.nn.modules.module.register_module_parameter_registration_hook(to_meta)
    try:
        yield
    finally:
        hook.remove()


def tied_names(model):
    """The names of each tensor of model, such as GPT's tied token embedding and output head: one list per tensor."""
    names = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        names.setdefault(id(tensor), []).append(name)
    return list(names.values())


def load_weights(model, weights, device='cpu'):
    """Make weights (a state dict) the parameters of model, built inside parameters_on_meta, without copying them:
    each in its parameter's dtype, on device, where the model's buffers are moved; names that model ties into one
    tensor stay one. A name or shape that is not model's raises load_state_dict's RuntimeError."""
    ours, tied = model.state_dict(), [names for names in tied_names(model) if len(names) > 1]
    for name, w in weights.items():
        if name in ours:
            weights[name] = w.to(device, ours[name].dtype)  # the same tensor where it is already so
    model.load_state_dict(weights, assign=True)
    for first, *others in tied:  # assign gave each name a parameter of its own
        for name in others:
            module, _, leaf = name.rpartition('.')
            setattr(model.get_submodule(module), leaf, model.get_parameter(first))
    model.to(device)  # the buffers, built on the CPU (a table that no file holds, such as the sinusoidal one)


def refuse_untied(model, weights, source, fix):
    """Refuse weights (a state dict) with two values for one tensor of model under two names, such as GPT's tied token
    embedding and output head: load_state_dict would keep the one it copies last, with no word."""
    def same(a, b):  # NaN as equal to NaN (a run that diverged saves them); a meta tensor has no values to differ
        if a.is_meta or b.is_meta or (a.data_ptr(), a.shape, a.stride()) == (b.data_ptr(), b.shape, b.stride()):
            return True  # one tensor's memory under both names (a tied model's state dict, or torch.load of one)
        return torch.equal(a, b) or (a.shape == b.shape and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True))
    for tied in tied_names(model):
        saved = [weights[name] for name in tied if name in weights]
        if not all(same(saved[0], w) for w in saved[1:]):
            raise ValueError(f"{source}'s {' and '.join(tied)} differ, where {type(model).__name__} ties them into one "
                             f"tensor: {fix}")


def refuse_untied_state_dict(module, state_dict, prefix, *args):
    """A load_state_dict pre-hook (GPT registers it): refuse_untied for a state dict loaded by hand, such as minGPT's,
    whose output head is a matrix of its own; strict=False, which lets its attn.bias masks pass, would otherwise load
    its token embedding or its head into the one tied tensor, whichever came last."""
    weights = {name[len(prefix):]: w for name, w in state_dict.items() if name.startswith(prefix)}
    refuse_untied(module, weights, 'the state dict', "it comes from a model with an output head of its own, such as "
                  "minGPT's, which this model cannot hold: train this one, or build that model and load it there")
