"""GPT-2's released weights in Hugging Face's layout: load them into a GPT (GPT.from_pretrained) and write a GPT
back (GPT.save_pretrained). The parameter names map one to one; four matrices are transposed, because GPT-2
stores them as Conv1D (in, out) where nn.Linear keeps (out, in). A model is written only if it computes what
GPT2LMHeadModel will compute from its weights: gpt2_logits, GPT-2 from its equations, is what it is checked against.

And a trained model with its tokenizer, for the projects that sample from it or draw it: load_model_and_tokenizer
reads GPT-2 or a checkpoint a project wrote, with the tokenizer it records (tokenizer_record)."""
import json
import math
import numbers
import os
import re
from pathlib import Path

import torch
from torch.nn import functional as F

from mingpt.bpe import ENDOFTEXT, ENDOFTEXT_ID, GPT2_PATTERN, Encoder, find_vocabulary, get_encoder, token_bytes
from mingpt.checks import DROPOUT_OPTIONS
from mingpt.checkpoint import (LFS_POINTER, STACK_LAYER, check_dtype, file_kind, load_checkpoint, load_refused,
                               load_weights, no_checkpoint, numbered_blocks, parameters_on_meta, refuse_compressed,
                               refuse_non_tensors, stored_dtype)
from mingpt.data import CharTokenizer, DownloadError, data_roots, fetch, offline_error
from mingpt.utils import (ConfigError, atomic_write, eval_mode, json_object, matmul_precision, plural, warn_caller,
                          write_failed)

HF_MODELS = ('gpt2', 'gpt2-medium', 'gpt2-large', 'gpt2-xl')
HF_URL = 'https://huggingface.co/{name}/resolve/main/{file}'
HF_CONV1D = ('attn.c_attn.weight', 'attn.c_proj.weight', 'mlp.c_fc.weight', 'mlp.c_proj.weight')  # (in, out)
HF_BUFFERS = ('.attn.bias', '.attn.masked_bias')  # HF's causal mask constants, not parameters
HF_LAYER = re.compile(r'(?:transformer\.)?h\.(\d+)\.')  # a weight of block i, in either key layout
# the weights' file, first found first read; the .index.json names the shards of weights saved in several files
HF_WEIGHTS = ('model.safetensors', 'pytorch_model.bin', 'model.safetensors.index.json', 'pytorch_model.bin.index.json')


def gpt2_weight_shapes(config):
    """{name: shape} of GPT-2's weights in our model of config's sizes, nn.Linear's (out, in), the tied lm_head aside:
    3 * n_embd outputs for query, key and value, 4 * n_embd inside the MLP."""
    C = config.n_embd
    block = {'ln_1.weight': (C,), 'ln_1.bias': (C,), 'attn.c_attn.weight': (3 * C, C), 'attn.c_attn.bias': (3 * C,),
             'attn.c_proj.weight': (C, C), 'attn.c_proj.bias': (C,), 'ln_2.weight': (C,), 'ln_2.bias': (C,),
             'mlp.c_fc.weight': (4 * C, C), 'mlp.c_fc.bias': (4 * C,), 'mlp.c_proj.weight': (C, 4 * C),
             'mlp.c_proj.bias': (C,)}
    return {'transformer.wte.weight': (config.vocab_size, C), 'transformer.wpe.weight': (config.block_size, C),
            'transformer.ln_f.weight': (C,), 'transformer.ln_f.bias': (C,),
            **{f'transformer.h.{i}.{k}': shape for i in range(config.n_layer) for k, shape in block.items()}}


def load_gpt2(cls, name_or_path, dtype=torch.float32):
    """A `cls` (GPT) model with GPT-2's weights from a hub id or a Hugging Face directory, its parameters in dtype;
    sizes from config.json. dtype='auto' takes the dtype config.json names (save_pretrained writes the model's), else
    the one the weights are stored in, as transformers' from_pretrained(dtype='auto') does. Weights that GPT-2 has
    not (a layer or probe added to model.py) keep their initial values, with a warning. The weights are held once:
    read, then made the model's own as they are converted."""
    check_dtype(dtype)
    config_path, weights_path = _hf_files(name_or_path)
    config, saved_dtype = _config_from_hf(cls.get_default_config(), config_path)
    if dtype == 'auto':
        dtype = _named_dtype(saved_dtype, config_path)  # None where config.json names none: the weights' own
    weights = _read_hf_weights(weights_path, dtype)
    # as transformers' 'auto' reads a config without a dtype: the first floating-point weight's
    dtype = dtype or stored_dtype(weights)
    _check_hf_sizes(config, weights, weights_path)  # before the model of config.json's sizes is built
    with parameters_on_meta():  # no memory, no random initialisation: the weights come from the file
        model = cls(config).to(dtype)
    _load_hf_weights(model, weights, weights_path)
    return model.eval()


def _hf_files(name_or_path):
    """(config.json, weights file) for a hub id or a directory in Hugging Face's layout."""
    folder = Path(name_or_path).expanduser()
    # a folder named like a hub id ('gpt2') is the model only if it holds a config.json
    if folder.is_dir() and (name_or_path not in HF_MODELS or (folder / 'config.json').exists()):
        weights = [folder / f for f in HF_WEIGHTS if (folder / f).is_file()]
        if not (folder / 'config.json').is_file() or not weights:
            raise _not_a_hf_directory(folder)
        return folder / 'config.json', weights[0]
    if name_or_path in HF_MODELS:
        ours = [root / 'hf' / name_or_path for root in data_roots()]  # a copy of mingpt's own comes first
        snapshot = _hf_hub_snapshot(name_or_path)
        if snapshot and not any((f / 'config.json').exists() and (f / 'model.safetensors').exists() for f in ours):
            return _hf_files(str(snapshot))
        # offline, a copy got elsewhere is used as a folder: both files, in one folder
        files = ('config.json', 'model.safetensors')
        own = (f"in a folder of your own, passed instead of {name_or_path!r} (GPT.from_pretrained(folder), a "
               "project's --model or --system.init)")
        try:
            return tuple(fetch(f'hf/{name_or_path}/{f}', url=HF_URL.format(name=name_or_path, file=f),
                               local_copy=f"put it with the other of {' and '.join(files)} {own}") for f in files)
        except DownloadError as e:
            raise offline_error(e, files, f'hf/{name_or_path}', own,
                                [f"Hugging Face's cache ({_hf_hub_cache()})"]) from None
    there = f"{folder} is a file: give the directory that holds it" if folder.is_file() else "no such directory exists"
    if folder.is_file() and folder.suffix in ('.pt', '.pth'):  # the directory would be refused too: a run's folder
        there = f"{folder} is a mingpt checkpoint, not Hugging Face weights: GPT.from_checkpoint(path) reads it"
    raise ValueError(f"unknown pretrained model {name_or_path!r}: give one of {', '.join(HF_MODELS)} or a directory "
                     f"holding config.json and model.safetensors (or pytorch_model.bin); {there}")


def _not_a_hf_directory(folder):
    """The error for a folder without config.json or a weights file: what it has, and what may stand in their place
    (a mingpt checkpoint, the folder a zip file unpacked into, a link to nothing, a folder)."""
    has = sorted(name for name in os.listdir(folder) if not name.startswith('.'))  # not .lock, .git, .DS_Store
    has = ', '.join(has[:10]) + (f" and {len(has) - 10} more" if len(has) > 10 else '') if has else 'nothing'
    ours = sorted(str(p) for p in folder.glob('*.pt'))  # a run's folder: the checkpoint is a file in it
    ours = (f"; a mingpt checkpoint is a file: pass {' or '.join(ours)} (to GPT.from_checkpoint, or a project's "
            "--model or --system.init)") if ours else ''
    inner = sorted(str(p.parent) for p in folder.glob('*/config.json'))  # a zip file unpacked into its own folder
    inner = f"; {inner[0]} holds a config.json: pass that folder" if inner else ''
    names = [folder / name for name in ('config.json', *HF_WEIGHTS)]
    links = [f"{p.name} is a link to {os.readlink(p)}, which does not exist"
             for p in names if p.is_symlink() and not p.exists()]
    folders = [f"{p.name} is a folder" for p in names if p.is_dir()]
    # Hugging Face's cache links each file to its blob: cp -r copies the links, which then lead nowhere
    copied = " (a folder copied out of Hugging Face's cache keeps its links: copy it with cp -rL)" if links else ''
    broken = f"; but {', '.join(links + folders)}{copied}" if links or folders else ''
    return FileNotFoundError(f"{folder} is not a Hugging Face GPT-2 directory: it needs config.json and "
                             "model.safetensors or pytorch_model.bin (or the .index.json of their shards); it has "
                             f"{has}{ours}{inner}{broken}")


def _hf_hub_cache():
    """The folder of Hugging Face's download cache, as huggingface_hub finds it."""
    home = os.environ.get('HF_HOME') or os.path.join(os.environ.get('XDG_CACHE_HOME') or '~/.cache', 'huggingface')
    return Path(os.environ.get('HF_HUB_CACHE') or os.environ.get('HUGGINGFACE_HUB_CACHE')
                or os.path.join(home, 'hub')).expanduser()


def _hf_hub_snapshot(name):
    """The folder of hub id `name`'s config.json and weights in Hugging Face's own download cache, where transformers
    (and so minGPT's from_pretrained, which called it) left them, or None: read there, they need no download."""
    for folder in (f'models--{name}', f'models--openai-community--{name}'):  # the id as asked for, and as renamed
        repo = _hf_hub_cache() / folder
        ref = repo / 'refs' / 'main'  # names the revision the last download saved
        snapshot = repo / 'snapshots' / ref.read_text().strip() if ref.is_file() else None
        if snapshot and (snapshot / 'config.json').is_file() and any((snapshot / f).is_file() for f in HF_WEIGHTS):
            return snapshot
    return None


def _config_from_hf(C, config_path):
    """(our config, the dtype it names or None) from Hugging Face's GPT-2 config.json; refuses variants this model
    does not implement."""
    try:
        hf = json.loads(Path(config_path).read_text())
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError included; RecursionError: nested too deep
        raise ValueError(f"cannot read {config_path} as JSON ({e}): not a Hugging Face config.json") from None
    if not isinstance(hf, dict):
        raise ValueError(f"{config_path} holds a JSON {type(hf).__name__}, not a GPT-2 config (an object)")
    if hf.get('model_type', 'gpt2') != 'gpt2':
        raise ValueError(f"{config_path} describes a {hf['model_type']!r} model; only GPT-2 checkpoints load here")
    missing = [k for k in ('n_layer', 'n_head', 'n_embd', 'vocab_size', 'n_positions') if k not in hf]
    if missing:
        raise ValueError(f"{config_path} lacks {', '.join(missing)}: not a GPT-2 config.json")
    unsupported = {k: hf[k] for k, ok in [('activation_function', ('gelu_new', 'gelu_pytorch_tanh')),
                                         ('n_inner', (None, 4 * hf['n_embd'])), ('layer_norm_epsilon', (1e-5,)),
                                         ('scale_attn_weights', (True,)), ('scale_attn_by_inverse_layer_idx', (False,)),
                                         ('tie_word_embeddings', (True,))]
                   if k in hf and hf[k] not in ok}
    if unsupported:
        raise ValueError(f"{config_path} asks for a GPT-2 variant this model does not implement: {unsupported}")
    C.model_type = None
    C.n_layer, C.n_head, C.n_embd = hf['n_layer'], hf['n_head'], hf['n_embd']
    C.vocab_size, C.block_size = hf['vocab_size'], hf['n_positions']
    for k in DROPOUT_OPTIONS:
        setattr(C, k, hf.get(k, getattr(C, k)))
    return C, hf.get('dtype', hf.get('torch_dtype'))  # transformers 5 writes dtype; 4 wrote torch_dtype


def _named_dtype(name, config_path):
    """The torch dtype config.json names ('bfloat16'), None where it names none."""
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if name is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ValueError(f"{config_path} gives dtype {name!r}, not a floating-point torch dtype such as 'float32' or "
                         "'bfloat16': correct it there, or pass a dtype (e.g. torch.float32) instead of 'auto'")
    return dtype


def _read_hf_weights(path, dtype=None):
    """The state dict in a model.safetensors or pytorch_model.bin (or in the shards an .index.json names), read as
    what its first bytes say it is (a safetensors file renamed pytorch_model.bin loads); a safetensors file's
    floating-point tensors in dtype, each converted as it is read (torch.save's file is read whole first)."""
    if path.name.endswith('.index.json'):
        return _read_hf_shards(path, dtype)
    safetensors = _weights_format(path) == 'safetensors'
    if not safetensors:
        refuse_compressed(path)  # torch.save's zip archive stores its members as they are
    try:
        if safetensors:
            weights = read_safetensors(path, dtype)
        else:
            weights = torch.load(path, map_location='cpu', weights_only=True)
    except Exception as e:
        rebuild = ("Its tensors load once saved beside it as model.safetensors, which GPT.from_pretrained(folder) "
                   "reads first: mingpt.pretrained.write_safetensors({k: v for k, v in state.items() if "
                   "isinstance(v, torch.Tensor)}, folder / 'model.safetensors'), where state is the dict that "
                   "torch.load gives. ")
        # read_safetensors' own errors name the file already
        what = str(e) if str(path) in str(e) else f"cannot read {path} ({type(e).__name__}: {e})"
        raise load_refused(path, e, "the tensors of GPT-2's weights", rebuild,
                           f"{what}; the file is truncated or corrupt: delete it and download or save it "
                           "again") from None
    refuse_non_tensors(weights, path, "GPT-2 weights")  # torch.load gives any plain data a .bin holds
    return weights


def _read_hf_shards(index, dtype=None):
    """The state dict of weights saved in several files (transformers' save_pretrained splits those past its
    max_shard_size, 5 GB in transformers 4: gpt2-xl in float32), each read as _read_hf_weights reads a whole one:
    the index's weight_map names each weight's file, beside the index."""
    weight_map = json_object(index, 'the model').get('weight_map')
    if not (isinstance(weight_map, dict) and weight_map and all(isinstance(f, str) for f in weight_map.values())):
        raise ValueError(f"{index} has no weight_map (each weight's name to the file of its shard): the file is "
                         "damaged or not a shard index; download or save the model again")
    weights = {}
    for shard in dict.fromkeys(weight_map.values()):  # each file once, in the index's order
        path = index.parent / shard
        if Path(shard).name != shard or not shard.endswith(('.safetensors', '.bin')) or not path.is_file():
            raise ValueError(f"{index} names the shard {shard!r}, which is not a weights file in {index.parent}: "
                             "the folder is incomplete; download or save the model again")
        weights.update(_read_hf_weights(path, dtype))
        lacks = sorted(name for name, f in weight_map.items() if f == shard and name not in weights)
        if lacks:
            raise ValueError(f"{path} lacks {len(lacks)} of the weights {index.name} puts there, e.g. {lacks[:3]}: "
                             "the shard is not the one the index was written with; download or save the model again")
    return weights


def _weights_format(path):
    """'torch' (torch.save's file) or 'safetensors', by the file's first bytes (checkpoint.file_kind): torch.load of
    anything else gave errors such as 'KeyError: 101' or advised weights_only=False. Anything else is refused, saying
    what it is."""
    kind, what = file_kind(path)
    if kind in ('zip', 'torch'):
        return 'torch'
    # read_safetensors says why one is not whole; a pointer is not one cut short, to delete and download again
    if kind == 'safetensors' or path.suffix == '.safetensors' and what != LFS_POINTER:
        return 'safetensors'
    raise ValueError(f"{path} was not loaded: it is {what}; GPT-2's weights are a file that torch.save or "
                     "save_pretrained wrote")


def _check_hf_sizes(C, weights, path):
    """Refuse a config.json whose sizes the weights have not, e.g. gpt2's weights beside distilgpt2's config.json.
    Checked before the model is built: a config.json can ask for any size (10**7 layers took minutes to build,
    then failed for want of memory)."""
    n_layer, missing = numbered_blocks(weights, HF_LAYER)
    if missing:
        held = n_layer - missing
        raise ValueError(f"{path} holds weights of {held} {plural(held, 'layer')} numbered up to {n_layer - 1}, so "
                         f"{missing} have none; the file is incomplete or not a GPT-2 checkpoint")
    if n_layer != C.n_layer:
        raise ValueError(f"{path} holds {n_layer} layers but config.json says n_layer={C.n_layer!r}; the weights "
                         "and config.json do not belong together")
    wte = weights.get('transformer.wte.weight', weights.get('wte.weight', weights.get('lm_head.weight')))  # tied
    wpe = weights.get('transformer.wpe.weight', weights.get('wpe.weight'))
    for name, w, key, size in (('wte', wte, 'vocab_size', C.vocab_size), ('wpe', wpe, 'n_positions', C.block_size)):
        if w is None:
            raise ValueError(f"{path} has no {name}.weight: the file is incomplete or not a GPT-2 checkpoint")
        if tuple(w.shape) != (size, C.n_embd):
            raise ValueError(f"{path} holds {name}.weight of shape {tuple(w.shape)} but config.json says {key}="
                             f"{size!r}, n_embd={C.n_embd!r}; the weights and config.json do not belong together")


def _load_hf_weights(model, weights, path):
    """Load a Hugging Face GPT-2 state dict (read from path) into model, built inside parameters_on_meta; weights
    is emptied, each tensor dropped as it is converted. Accepts the hub's base-model keys ('h.0.attn...', with the
    attn.bias buffers) and GPT2LMHeadModel's ('transformer.h.0.attn...', lm_head tied: usually omitted, sometimes
    stored instead of wte)."""
    ours = model.state_dict()  # names and shapes (on the meta device)
    gpt2 = set(gpt2_weight_shapes(model.config))
    head, wte = weights.pop('lm_head.weight', None), weights.get('transformer.wte.weight', weights.get('wte.weight'))
    if head is not None and wte is None:  # the tied matrix stored once, as the head (safetensors' save_model does)
        weights['transformer.wte.weight'] = head
    elif head is not None and not torch.equal(head, wte):
        raise ValueError(f"{path}: lm_head.weight differs from wte.weight; this GPT ties them, so an untied head "
                         "cannot be loaded")
    state = {}
    for key in list(weights):
        w = weights.pop(key)
        name = key if key.startswith('transformer.') else 'transformer.' + key
        if name.endswith(HF_BUFFERS):
            continue
        if name in gpt2 and name not in ours:  # e.g. a layer norm's bias, where model.py now has RMSNorm
            raise ValueError(f"{path} holds GPT-2's {key!r}, which this model has not (changed in model.py?): "
                             "GPT-2's weights load into GPT-2's own layers; train the changed model from scratch")
        if name not in ours:
            raise ValueError(f"{path}: unexpected key {key!r}; is this a GPT-2 checkpoint?")
        if name.endswith(HF_CONV1D):
            w = w.t().contiguous()  # HF's Conv1D stores (in, out); nn.Linear wants (out, in)
        if w.shape != ours[name].shape:
            transposed = ' (transposed from Conv1D)' if name.endswith(HF_CONV1D) else ''
            if transposed and w.t().shape == ours[name].shape:  # e.g. torch.save(model.state_dict()) of a GPT
                raise ValueError(f"{path}: {key!r} is stored (out, in), as nn.Linear keeps it in a GPT's own "
                                 "state_dict, not (in, out) as Hugging Face's Conv1D: write the folder with "
                                 "model.save_pretrained(folder) (GPT2LMHeadModel reads it too), or load such a file "
                                 "with model.load_state_dict(torch.load(file))")
            raise ValueError(f"{path}: key {key!r} has shape {tuple(w.shape)}{transposed} but the model built from "
                             f"config.json expects {tuple(ours[name].shape)}; the "
                             "weights and config.json do not belong together")
        state[name] = w
    state['lm_head.weight'] = state['transformer.wte.weight']  # tied (_check_hf_sizes saw a wte)
    missing = sorted(set(ours) - set(state))
    added = [k for k in missing if k not in gpt2]  # e.g. a probe or a layer a student put in model.py
    if added:  # as in Hugging Face: GPT-2's weights load, the new ones keep their initialisation, for training
        warn_caller(f"the model has {len(added)} weights that GPT-2 has not, e.g. {added[:3]} (added to "
                    f"model.py?): {path} has nothing for them, so they keep their initial values")
        missing = [k for k in missing if k not in added]
    if missing:
        raise ValueError(f"{path} lacks {len(missing)} of the model's weights, e.g. {missing[:3]}; the file is "
                         "incomplete or not a GPT-2 checkpoint")
    if added:  # their initial values, from a model built for real (this once, a second copy of the weights)
        initial = type(model)(model.config).state_dict()
        state.update({k: initial[k] for k in added})
    load_weights(model, state)


def save_gpt2(model, save_directory, eos_token_id=None):
    """GPT.save_pretrained: its three files, each written atomically, once every check has passed (another
    architecture option, weights of other names or shapes, a forward pass changed in model.py, an eos_token_id that
    is not one of its tokens: see config_end_ids)."""
    c = model.config
    eos = config_end_ids(eos_token_id, c.vocab_size)
    instead = "save it with the trainer's checkpoint (mingpt.checkpoint.save_checkpoint) instead"
    variant = {k: getattr(c, k) for k in ('pos_embd', 'norm', 'activation') if getattr(c, k) != model.CHOICES[k][0]}
    if variant:
        raise ValueError(f"only GPT-2's own architecture has a Hugging Face layout; this model has {variant}: "
                         f"{instead}")
    shapes, weights = gpt2_weight_shapes(c), model.state_dict()
    gpt2, ours = set(shapes), set(weights) - {'lm_head.weight'}
    if ours != gpt2:  # GPT2LMHeadModel would drop the weights it has not and make up the missing ones
        raise ValueError(f"only GPT-2's own weights have a Hugging Face layout; this model adds "
                         f"{sorted(ours - gpt2)[:3] or 'none'} and lacks {sorted(gpt2 - ours)[:3] or 'none'} (changed "
                         f"in model.py?): {instead}")
    other = [f"{k} is {tuple(w.shape)}, GPT-2's {shapes[k]}" for k, w in weights.items()
             if k in shapes and w.shape != shapes[k]]
    if other:  # GPT2LMHeadModel would refuse to load them
        raise ValueError(f"only GPT-2's own shapes have a Hugging Face layout; {len(other)} of this model's weights "
                         f"differ, e.g. {'; '.join(other[:2])} (changed in model.py? e.g. one key/value head, a wider "
                         f"MLP): {instead}")
    head, wte = weights['lm_head.weight'], weights['transformer.wte.weight']
    if not torch.equal(head, wte):  # GPT2LMHeadModel would read wte as the head
        raise ValueError("this model's output head (lm_head.weight) differs from its token embedding (transformer."
                         "wte.weight): GPT-2 ties them into one matrix, and Hugging Face's layout holds that one alone "
                         f"(GPT2LMHeadModel would read wte as the head): {instead}")
    check_computes_gpt2(model)
    hf = dict(model_type='gpt2', architectures=['GPT2LMHeadModel'], vocab_size=c.vocab_size,
              n_positions=c.block_size, n_embd=c.n_embd, n_layer=c.n_layer, n_head=c.n_head, n_inner=None,
              activation_function='gelu_new', layer_norm_epsilon=1e-5, initializer_range=0.02,
              embd_pdrop=c.embd_pdrop, resid_pdrop=c.resid_pdrop, attn_pdrop=c.attn_pdrop,
              tie_word_embeddings=True)
    # the weights' dtype, as transformers 5 writes it (4 wrote torch_dtype): from_pretrained(dtype='auto') loads in it
    hf['dtype'] = str(weights['transformer.wte.weight'].dtype).removeprefix('torch.')
    # as GPT-2's <|endoftext|>, the token that ends a text also starts one: transformers' generate starts from it
    # when given no prompt
    ids = dict(bos_token_id=eos[0] if isinstance(eos, list) else eos, eos_token_id=eos)
    hf.update(ids)
    folder = Path(save_directory)
    # transformers' generate reads the ids from generation_config.json where there is one: an earlier save's would
    # override config.json's. Its other settings (do_sample, top_k...) are kept
    generation = {**json_object(folder / 'generation_config.json', 'the model'), **ids}
    # views of the model's own tensors: write_safetensors copies each (transposed, to the CPU) only as it writes it,
    # where copying them all first held a second copy of the four Conv1D matrices, most of the model
    tensors = {k: v.t() if k.endswith(HF_CONV1D) else v
               for k, v in model.state_dict().items() if k != 'lm_head.weight'}  # tied to wte: stored once
    folder.mkdir(parents=True, exist_ok=True)

    def as_json(value):
        return lambda tmp: Path(tmp).write_text(json.dumps(value, indent=2) + '\n', encoding='utf-8')

    def safetensors_file(tmp):
        write_safetensors(tensors, tmp, metadata={'format': 'pt'})

    # config.json, which makes a folder a model's, renamed last
    write_together(folder, {'config.json': as_json(hf), 'generation_config.json': as_json(generation),
                            'model.safetensors': safetensors_file})
    return folder


def write_together(folder, writes):
    """Write the files of writes ({name: write(tmp)}) into folder, each atomically (atomic_write), every one of them
    before any replaces the file there: a failed write (a full disk) leaves the earlier save whole, where one at a
    file written after the weights left the new weights beside the earlier config.json. Each file's atomic_write
    holds the next ones' inside it, so the last is renamed first and the first last."""
    (name, write), *rest = writes.items()

    def write_all(tmp):
        try:
            write(tmp)
        except OSError as e:  # a full disk's '[Errno 28] No space left on device' names no file
            raise write_failed(folder / name, e) from e
        if rest:
            write_together(folder, dict(rest))
    atomic_write(folder / name, write_all)


def config_end_ids(eos_token_id, vocab_size):
    """save_pretrained's eos_token_id as config.json holds it: the id that ends a text, or a list of such ids
    (transformers' generate stops at any of them), each a token of the vocabulary. None: GPT-2's <|endoftext|>,
    50256, where the vocabulary has that id, else none (a smaller vocabulary has no such token we know of)."""
    if eos_token_id is None:
        return ENDOFTEXT_ID if vocab_size > ENDOFTEXT_ID else None
    given = eos_token_id
    if isinstance(eos_token_id, torch.Tensor):  # as generate takes it: 0-d, one id; 1-d, a list (floats refused below)
        eos_token_id = eos_token_id.tolist()
    several = isinstance(eos_token_id, (list, tuple))
    ids = list(eos_token_id) if several else [eos_token_id]
    if not ids or not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) and 0 <= i < vocab_size
                          for i in ids):  # numbers.Integral: numpy's integers too
        raise ValueError(f"eos_token_id={given!r} should be a token id of this model's vocabulary of "
                         f"{vocab_size} tokens (0 to {vocab_size - 1}), or a non-empty list of them: give the id its "
                         "tokenizer ends a text with (a BPETokenizer's eot_token_id), or leave it out for GPT-2's "
                         "<|endoftext|>; nothing was written")
    return [int(i) for i in ids] if several else int(ids[0])


def gpt2_logits(weights, n_head, idx):
    """GPT-2 written from its equations and its weights alone (a state dict in our names), as Hugging Face's
    GPT2LMHeadModel computes it: the logits (B, T, vocab_size) for token ids idx (B, T). Each weight is used in
    float32 as it is needed (a copy of one matrix at a time), so a half-precision model is read in float32."""
    def w(name): return weights[name].float()
    def layer_norm(x, name): return F.layer_norm(x, x.shape[-1:], w(name + '.weight'), w(name + '.bias'), eps=1e-5)
    def linear(x, name): return F.linear(x, w(name + '.weight'), w(name + '.bias'))
    (B, T), wte = idx.shape, weights['transformer.wte.weight']
    future = torch.ones(T, T, dtype=torch.bool, device=idx.device).triu(1)  # key j > query i: the causal mask
    x = wte[idx].float() + weights['transformer.wpe.weight'][:T].float()  # token + learned position embeddings
    for i in range(numbered_blocks(weights, STACK_LAYER)[0]):
        b = f'transformer.h.{i}.'
        q, k, v = (t.view(B, T, n_head, -1).transpose(1, 2)  # (B, nh, T, hd)
                   for t in linear(layer_norm(x, b + 'ln_1'), b + 'attn.c_attn').split(wte.size(1), dim=2))
        att = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(future, float('-inf')).softmax(-1)
        x = x + linear((att @ v).transpose(1, 2).reshape(B, T, -1), b + 'attn.c_proj')
        x = x + linear(F.gelu(linear(layer_norm(x, b + 'ln_2'), b + 'mlp.c_fc'), approximate='tanh'), b + 'mlp.c_proj')
    return layer_norm(x, 'transformer.ln_f') @ wte.float().T  # the head is tied to wte


@torch.no_grad()
def check_computes_gpt2(model, tokens=16):
    """Refuse a model whose weights are GPT-2's by name but whose forward pass is not GPT-2's (model.py changed by
    hand: post-norm typed into Block.forward, RoPE, no positions, ReLU): GPT2LMHeadModel would run GPT-2 on those
    weights and compute other logits, silently. Costs one forward of `tokens` tokens, and gpt2_logits'."""
    device = model.lm_head.weight.device
    g = torch.Generator().manual_seed(0)  # the same tokens each time, and the global random state left alone
    idx = torch.randint(model.config.vocab_size, (1, min(tokens, model.block_size)), generator=g).to(device)
    # TF32 (the trainer's tf32) would round float32 matmuls to 10 bits, autocast to 16
    with matmul_precision('ieee'), eval_mode(model), torch.autocast(device.type, enabled=False):
        ours = model.forward(idx)[0].float()  # forward: not a compiled model's wrapper, nor a probe's hooks
        theirs = gpt2_logits(model.state_dict(), model.config.n_head, idx)
    # rounding moves the logits by a few eps of the weights' dtype, more with depth; a changed forward pass by
    # percents (in bfloat16, whose 16 eps are 1/8, only the larger changes are caught)
    tolerance = max(1e-3, 16 * max(torch.finfo(p.dtype).eps for p in model.parameters()))
    err, scale = (ours - theirs).abs().max().item(), theirs.abs().max().item()
    if not err <= tolerance * scale:  # NaN too
        raise ValueError(f"this model does not compute GPT-2's function of its weights (changed in model.py?): its "
                         f"logits differ by {err:.3g} (of {scale:.3g}) from GPT-2's on the same weights, which Hugging "
                         "Face's GPT2LMHeadModel would compute from the folder; nothing was written. Save it with the "
                         "trainer's checkpoint (mingpt.checkpoint.save_checkpoint) instead")


# ---- the safetensors format: 8 bytes n (little-endian), n bytes of JSON header, the tensors' bytes ----

SAFETENSORS_DTYPES = {'F64': torch.float64, 'F32': torch.float32, 'F16': torch.float16, 'BF16': torch.bfloat16,
                      'I64': torch.int64, 'I32': torch.int32, 'I16': torch.int16, 'I8': torch.int8, 'U8': torch.uint8,
                      'BOOL': torch.bool}


def read_safetensors(path, dtype=None):
    """{name: tensor} from a .safetensors file, floating-point tensors in dtype if given (each converted as it is
    read: the file's float32 is held for one tensor at a time). Its header maps each name to its dtype, shape and the
    [begin, end) of its bytes in the data after the header; '__metadata__' holds free-form strings."""
    with open(path, 'rb') as f:
        size, start = os.fstat(f.fileno()).st_size, f.read(8)
        n = int.from_bytes(start, 'little')
        if len(start) < 8 or 8 + n > size:
            what = file_kind(path)[1]  # a clone without git-lfs holds pointers, said as checkpoint.py says them
            why = f"it is {what}" if what == LFS_POINTER else f"its {size} bytes cannot hold the header"
            raise ValueError(f"{path} is not a safetensors file: {why}")
        header = json.loads(f.read(n))
        header.pop('__metadata__', None)
        data_size, tensors = size - 8 - n, {}
        for name, t in header.items():  # the whole header is checked before a byte of the data is read
            if t['dtype'] not in SAFETENSORS_DTYPES:
                raise ValueError(f"tensor {name!r} has dtype {t['dtype']}; this reader knows "
                                 f"{', '.join(SAFETENSORS_DTYPES)}")
            (begin, end), numel = t['data_offsets'], math.prod(t['shape'])
            if not 0 <= begin <= end <= data_size or end - begin != numel * SAFETENSORS_DTYPES[t['dtype']].itemsize:
                raise ValueError(f"tensor {name!r} {t['shape']} lies at bytes {begin}..{end} of {data_size}")
        # the tensors must lie one after another over the data, as the safetensors library requires
        covered, whole = 0, True
        for begin, end in sorted(t['data_offsets'] for t in header.values()):
            whole = begin == covered
            if not whole:
                break
            covered = end
        if not whole or covered != data_size:
            raise ValueError(f"the tensors do not lie one after another over the {data_size} bytes after the header "
                             f"(from byte {covered}: a gap, an overlap or bytes appended); the safetensors library "
                             "refuses it too")
        for name, t in header.items():
            stored, shape, (begin, end) = SAFETENSORS_DTYPES[t['dtype']], t['shape'], t['data_offsets']
            # each into memory of its own, which the model can keep: a tensor converted later frees its bytes
            tensor = torch.empty(math.prod(shape), dtype=stored)
            f.seek(8 + n + begin)
            f.readinto(tensor.view(torch.uint8).numpy())
            tensor = tensor.reshape(shape)
            tensors[name] = tensor.to(dtype) if dtype is not None and tensor.is_floating_point() else tensor
    return tensors


def write_safetensors(tensors, path, metadata=None):
    """Write {name: tensor} as read_safetensors (and Hugging Face's safetensors library) reads it."""
    names = {v: k for k, v in SAFETENSORS_DTYPES.items()}
    unknown = sorted({str(t.dtype) for t in tensors.values() if t.dtype not in names})
    if unknown:
        raise ValueError(f"safetensors has no name for {', '.join(unknown)} here; convert those tensors first")
    # widest items first, as the library does, so that every tensor's bytes start aligned to its item size
    tensors = dict(sorted(tensors.items(), key=lambda kv: (-kv[1].element_size(), kv[0])))
    header, offset = ({'__metadata__': metadata} if metadata else {}), 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        header[name] = {'dtype': names[t.dtype], 'shape': list(t.shape), 'data_offsets': [offset, offset + nbytes]}
        offset += nbytes
    head = json.dumps(header, separators=(',', ':')).encode()
    head += b' ' * (-len(head) % 8)  # pad with spaces so that the data starts 8-byte aligned
    with open(path, 'wb') as f:
        f.write(len(head).to_bytes(8, 'little') + head)
        for t in tensors.values():
            f.write(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())


# ---- a trained model with its tokenizer ----

def tokenizer_record(tokenizer):
    """What a checkpoint stores of its tokenizer, so that the checkpoint alone can be sampled from: a CharTokenizer's
    characters ('vocab') or a byte-level BPE Encoder's whole vocabulary ('tokenizer')."""
    if isinstance(tokenizer, CharTokenizer):
        return {'vocab': tokenizer.chars}
    if isinstance(tokenizer, Encoder):
        tokenizer.check_recordable('a checkpoint')
        record = {'kind': 'bpe', 'encoder': tokenizer.encoder, 'merges': tokenizer.bpe_merges}
        if tokenizer.pat is None:  # trained without pre-tokenising (GPT-2's regex is the default)
            record['pretokenize'] = False
        return {'tokenizer': record}
    raise TypeError(f"cannot record a {type(tokenizer).__name__}: give a CharTokenizer or a bpe.Encoder")


def tokenizer_of(checkpoint, path='this checkpoint'):
    """The tokenizer a checkpoint (read from path) records (see tokenizer_record; sentiment.py's LMs record a
    Vocabulary's state()), or None if it records none. A record of another shape, from a damaged or foreign file, is
    refused naming the file and the key."""
    if 'vocab' in checkpoint:
        chars = checkpoint['vocab']
        if not (isinstance(chars, list) and all(isinstance(c, str) for c in chars)):
            raise ValueError(f"{path} was not loaded: its 'vocab' should hold the model's characters, a list of "
                             f"strings, not {chars!r:.60}; the file is damaged or not a chargpt checkpoint")
        return CharTokenizer(chars)
    if 'tokenizer' not in checkpoint:
        return None
    record = checkpoint['tokenizer']
    if not isinstance(record, dict):
        raise ValueError(f"{path} was not loaded: its 'tokenizer' should hold a dict (a byte-level BPE's 'encoder' "
                         f"and 'merges'), not {record!r:.60}; the file is damaged or not a chargpt checkpoint")
    if record == {'kind': 'gpt2', 'tokens': None}:  # sentiment.py's full GPT-2 vocabulary: GPT-2's own tokenizer
        return get_encoder()
    if set(record) == {'kind', 'tokens'}:  # sentiment.py's cut-down vocabularies (Vocabulary.state())
        return Vocabulary.from_record(record, path)
    if not {'encoder', 'merges'} <= set(record):
        raise ValueError(f"{path} was not loaded: its 'tokenizer' (with {', '.join(map(repr, record))}) is neither a "
                         "byte-level BPE's ('encoder' and 'merges') nor sentiment.py's ('kind' and 'tokens'); the file "
                         "is damaged or was written by another program")
    pattern = GPT2_PATTERN if record.get('pretokenize', True) else None
    try:
        return Encoder(record['encoder'], record['merges'], pattern=pattern)
    except (ValueError, TypeError) as e:  # TypeError: merges that are not pairs of strings
        raise ValueError(f"{path} was not loaded: its 'tokenizer' is not a byte-level BPE vocabulary ({e}); the file "
                         "is damaged or not a chargpt checkpoint") from None


class Vocabulary:
    """Text <-> ids of sentiment.py's language models, which record Vocabulary.state() in their checkpoints. 'gpt2':
    GPT-2's BPE ids as they are. 'bpe': GPT-2's BPE cut down to the ids `tokens` (those that occur in the training
    sentences), renumbered 0..n-1; 'char': one id per character of `tokens`. The two cut vocabularies read every other
    token as one unknown id, n, which decodes to U+FFFD (the replacement character, as CharTokenizer's unknown id), and
    end with <|endoftext|>, n+1. In every kind the string <|endoftext|> in a text is that one token."""
    KINDS = ('bpe', 'gpt2', 'char')

    def __init__(self, kind, tokens=None):
        if kind not in self.KINDS:
            raise ConfigError(f"data.tokenizer must be one of {', '.join(self.KINDS)}, not {kind!r}")
        self.kind, self.tokens = kind, tokens
        self.bpe = get_encoder() if kind != 'char' else None
        self.cut = None if kind == 'gpt2' else CharTokenizer(tokens, unknown=True)  # ids 0..n-1, then unknown: n
        if self.cut is None:
            self.vocab_size, self.eot, self.unk = len(self.bpe), ENDOFTEXT_ID, None
        else:
            self.unk, self.eot, self.vocab_size = len(tokens), len(tokens) + 1, len(tokens) + 2
            piece = str.encode if kind == 'char' else self.bpe.decode_bytes  # a token's UTF-8 bytes
            self.pieces = [piece(t) for t in tokens] + ['\ufffd'.encode(), ENDOFTEXT.encode()]  # by id

    @classmethod
    def build(cls, kind, texts):
        """The vocabulary of `kind` that holds what occurs in texts."""
        if kind == 'char':
            return cls(kind, sorted(set(''.join(texts))))
        if kind == 'bpe':
            bpe = get_encoder()
            return cls(kind, sorted({i for t in texts for i in bpe.encode(' ' + t)}))
        return cls(kind)

    @classmethod
    def from_record(cls, record, path):
        """The Vocabulary of a checkpoint's record (state()); a record of another shape is refused naming path."""
        kind, tokens = (record.get('kind'), record.get('tokens')) if isinstance(record, dict) else (None, None)
        listed = isinstance(tokens, list)
        fits = {'gpt2': tokens is None,  # what build lists, kind by kind
                'char': listed and all(type(t) is str for t in tokens),
                'bpe': listed and all(type(t) is int and 0 <= t <= ENDOFTEXT_ID for t in tokens)}
        if not (isinstance(kind, str) and fits.get(kind)):
            raise ValueError(f"{path} was not loaded: its 'tokenizer' should hold the kind of vocabulary "
                             f"({', '.join(cls.KINDS)}) and its tokens (a list of characters for char, of GPT-2 ids "
                             f"for bpe, None for gpt2), not {record!r:.80}; the file is damaged")
        return cls(kind, tokens)

    def __len__(self):
        return self.vocab_size

    def state(self):
        return {'kind': self.kind, 'tokens': self.tokens}

    def encode(self, text):
        ids = []
        for i, part in enumerate(text.split(ENDOFTEXT)):
            if i:
                ids.append(self.eot)
            symbols = part if self.kind == 'char' else self.bpe.encode(part)
            ids += symbols if self.cut is None else self.cut.encode(symbols)
        return ids

    def decode_bytes(self, ids):
        """The UTF-8 bytes of ids (a list, a 1-D tensor, or one id), as Encoder.decode_bytes gives them: a BPE token
        may hold part of a character."""
        return self.bpe.decode_bytes(ids) if self.cut is None else token_bytes(ids, self.pieces)

    def decode(self, ids):
        """The text of ids; bytes that are not valid UTF-8 (a character cut between BPE tokens) become U+FFFD."""
        return self.decode_bytes(ids).decode('utf-8', errors='replace')


def warn_if_unknown(tokenizer, ids, what='the prompt'):
    """Warn where ids hold a cut Vocabulary's unknown token, which stands for every token outside it: sentiment.py's
    language models know the lowercased SST-2 sentences, so a capital or a newline reads as unknown."""
    n = ids.count(tokenizer.unk) if isinstance(tokenizer, Vocabulary) and tokenizer.unk is not None else 0
    if n:
        warn_caller(f"{n} of {what}'s {len(ids)} tokens are outside the model's vocabulary and read as its one unknown "
                    "token (shown as \ufffd): it learned lowercase text, such as SST-2's sentences")


def training_note(checkpoint, path):
    """'(path: trained for N iterations, val loss L)' for a checkpoint the trainer wrote (a model.pt is the model of
    its best val loss, so perhaps not of the run's last iteration), or None where checkpoint does not say (GPT-2's
    weights, a checkpoint saved by hand)."""
    n, loss = (checkpoint or {}).get('iter_num'), (checkpoint or {}).get('val_loss')
    if not isinstance(n, int) or isinstance(n, bool):
        return None
    loss = f", val loss {loss:.4f}" if isinstance(loss, float) else ''
    return f"({path}: trained for {n:,} {plural(n, 'iteration')}{loss})"


def hf_generation_ids(name):
    """(bos_token_id, [eos_token_id, ...]) of the Hugging Face folder `name`, as transformers' generate reads them:
    from its generation_config.json where it has that file (which then stands for config.json's ids, whole), else
    from its config.json. generate starts from bos when given no prompt, and a row ends at any of the end ids. None
    and [] where the folder names none, or name is not a folder (a hub id's are GPT-2's <|endoftext|>, a checkpoint's
    its tokenizer's)."""
    folder = Path(os.path.expanduser(name))
    if not (folder / 'config.json').is_file():
        return None, []
    path = next(p for p in (folder / 'generation_config.json', folder / 'config.json') if p.is_file())
    config = json_object(path, 'the model')
    bos, eos = config.get('bos_token_id'), config.get('eos_token_id')
    ends = eos if isinstance(eos, list) else [] if eos is None else [eos]
    for key, ids in (('bos_token_id', [] if bos is None else [bos]), ('eos_token_id', ends)):
        if any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
            several = ' or a list of them' if key == 'eos_token_id' else ''
            raise ValueError(f"{path}'s {key} is {config[key]!r}, not a token id (an int{several}); correct it or "
                             "save the model again")
    return bos, ends


def refuse_classifier(path):
    """Refuse a sentiment classifier (sentiment.py finetune) as what it is, naming the language model to give: its
    GPT ends in the classifier's head, which gives two class scores, not the next token."""
    checkpoint = load_checkpoint(path, mmap=True)  # mapped: only its small entries are read
    if not isinstance(checkpoint.get('classifier'), dict):
        return
    try:  # the run's options: the LM it started from
        init = checkpoint['config']['system']['init']
    except (KeyError, TypeError):  # a checkpoint saved by hand, or damaged
        init = None
    lm = f"the one it was fine-tuned from, {init}" if str(init).endswith(('.pt', '.pth')) else "one"
    raise ValueError(f"{path} is a sentiment classifier (sentiment.py finetune), not a language model: it gives two "
                     f"class scores, not the next token. To sample from or look at a language model, give a "
                     f"pretrain's model.pt ({lm}; python projects/sentiment.py pretrain writes "
                     "out/sentiment/pretrain/model.pt)") from None


def load_model_and_tokenizer(name, dtype=torch.float32, with_note=False):
    """(model in eval mode and in dtype, tokenizer) from a checkpoint file a project wrote, with the tokenizer it
    records (dtype 'auto': the dtype of its weights, as from_pretrained's); or GPT-2 from a hub id or a Hugging Face
    directory (converted to dtype as it loads), with the directory's tokenizer if it has one (tokenizer.json, or
    vocab.json and merges.txt).
    Otherwise the tokenizer is GPT-2's, and the model's vocabulary must be GPT-2's 50257 tokens. A vocabulary padded
    past the tokenizer's (nanoGPT pads GPT-2's 50257 tokens to 50304) keeps only the tokenizer's ids: sampling could
    give the others, which have no text. with_note=True adds a third value: how long a checkpoint trained
    (training_note), None for GPT-2 or a checkpoint saved by hand."""
    from mingpt.model import GPT
    name = os.path.expanduser(name)  # as from_pretrained does: '~/my-gpt2' found its weights but not its tokenizer
    if str(name).endswith(('.pt', '.pth')) and not Path(name).exists():
        raise no_checkpoint(name, "train one first (e.g. python projects/chargpt.py writes out/chargpt/model.pt), or "
                                  "give a GPT-2 hub id or a Hugging Face directory")
    check_dtype(dtype)
    if Path(name).is_file():
        try:
            model, checkpoint = GPT.from_checkpoint(name, dtype=dtype)
        except ValueError:
            refuse_classifier(name)  # a classifier's message names the LM to give instead
            raise
        tokenizer = tokenizer_of(checkpoint, name)
    else:
        model, tokenizer, checkpoint = GPT.from_pretrained(name, dtype), None, None
        # a Hugging Face directory may bring its tokenizer (tokenizer.json or vocab.json and merges.txt); absolute,
        # as get_encoder takes the directory 'gpt2' for GPT-2's vocabulary, not a ./gpt2 model's own
        if (Path(name) / 'config.json').is_file() and find_vocabulary(name):
            tokenizer = get_encoder(directory=Path(name).absolute())
    n = model.config.vocab_size
    if tokenizer is None:
        if n != ENDOFTEXT_ID + 1:  # sampling could give ids GPT-2's tokenizer cannot read (checked before its fetch)
            raise ValueError(f"{name} records no tokenizer and its vocabulary of {n} tokens is not GPT-2's "
                             f"{ENDOFTEXT_ID + 1}: give a chargpt checkpoint (it records its tokenizer) or a Hugging "
                             "Face directory with its tokenizer.json, or vocab.json and merges.txt")
        tokenizer = get_encoder()
    elif len(tokenizer) > n:
        raise ValueError(f"{name} has a vocabulary of {n} tokens, fewer than the {len(tokenizer)} of its tokenizer: "
                         "the two do not belong together")
    elif (kept := len(tokenizer)) < n:  # the output head, tied to the token embedding, keeps its first rows
        print(f"(the model's {n} tokens are padded past its tokenizer's {kept}: keeping the first {kept})")
        model.lm_head.weight = model.transformer.wte.weight = torch.nn.Parameter(model.lm_head.weight[:kept])
        model.config.vocab_size = kept
    # from_checkpoint and from_pretrained both return the model in eval mode
    return (model, tokenizer, training_note(checkpoint, name)) if with_note else (model, tokenizer)
