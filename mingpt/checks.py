"""What a user hands the model, checked: its config, token ids, a prompt, targets, a KV cache's new keys. Each check
refuses by name what would otherwise fail deep inside (an embedding's "index out of range in self", a shape error
in attention, a device-side assert on a GPU) and says the fix. They live here so that model.py reads as the lecture
draws it."""
import torch
import torch.nn as nn

from mingpt.sampling import end_ids
from mingpt.utils import CfgNode, ConfigError, check_range, plural, warn_caller

# a model config's dropout probabilities: the options a brought model (system.init) takes from this run's config
DROPOUT_OPTIONS = ('embd_pdrop', 'resid_pdrop', 'attn_pdrop')


def check_model_config(cls, config):
    """GPT.check_config, and seq2seq's Transformer's: fill in the sizes of a preset of cls.PRESETS and the defaults
    of cls.get_default_config() that config lacks; reject what cannot work, such as a value outside cls.CHOICES."""
    defaults = cls.get_default_config()
    defaults.check_known(config, 'model')  # a key no model reads, e.g. a typo (n_layers)
    defaults.fill_missing(config)
    if config.vocab_size is None or config.block_size is None:
        raise ConfigError("model config needs vocab_size and block_size (e.g. from the dataset: "
                          "config.model.vocab_size = train_dataset.get_vocab_size())")
    sizes = dict(n_layer=config.n_layer, n_head=config.n_head, n_embd=config.n_embd)
    if config.model_type is not None:
        if any(s is not None for s in sizes.values()) and sizes != cls.PRESETS.get(config.model_type):
            raise ConfigError(f"give either model_type ({config.model_type!r}) or n_layer/n_head/n_embd "
                              f"({'/'.join(map(str, sizes.values()))}), not both (a config that {cls.__name__}() has "
                              "filled from a preset holds both): set model_type=None to use these sizes, or the sizes "
                              "to None")
        if config.model_type not in cls.PRESETS:
            raise ConfigError(f"unknown model_type {config.model_type!r}; presets are: "
                              f"{', '.join(cls.PRESETS)} (or set model_type=None and n_layer/n_head/n_embd)")
        config.merge_from_dict(cls.PRESETS[config.model_type])
    elif any(s is None for s in sizes.values()):
        raise ConfigError("give either model_type (one of: " + ', '.join(cls.PRESETS) + ") or all of "
                          f"n_layer, n_head, n_embd (got {', '.join(f'{k}={v}' for k, v in sizes.items())})")
    for key in ('n_layer', 'n_head', 'n_embd', 'vocab_size', 'block_size'):  # a whole float (10.0) as torch's int
        setattr(config, key, check_range(f'model.{key}', getattr(config, key), low=1, integer=True))
    if config.n_embd % config.n_head != 0:  # the heads split the channels
        lower = config.n_embd - config.n_embd % config.n_head
        near = f"{lower} or {lower + config.n_head}" if lower else str(config.n_head)
        raise ConfigError(f"model.n_embd={config.n_embd} must be a multiple of model.n_head={config.n_head} (each "
                          f"head takes n_embd / n_head of the channels): e.g. {near}")
    for key in DROPOUT_OPTIONS:
        setattr(config, key, check_range(f'model.{key}', getattr(config, key), low=0, high=1, high_open=True))
    for key, choices in cls.CHOICES.items():
        if getattr(config, key) not in choices:
            raise ConfigError(f"model.{key} must be one of {', '.join(map(repr, choices))}, "
                              f"not {getattr(config, key)!r}")


def check_options_before_data(cls, config, **data_sizes):
    """A project's model options checked as cls.check_config (GPT's or seq2seq's Transformer's) checks them, before
    the data is read: a typo (--model.model_type=gpt-nanoo) is told at once, not after the text is tokenized. The
    sizes the data decides, vocab_size and block_size, stand in as 1 unless given; config is left as it is."""
    cls.check_config(CfgNode(**{**config.to_dict(), 'vocab_size': 1, 'block_size': 1, **data_sizes}))


def check_token_ids(idx, name='idx'):
    """Refuse, by name, an idx that nn.Embedding cannot index with, and say the fix."""
    if not isinstance(idx, torch.Tensor):  # else "'list' object has no attribute 'dim'"
        raise TypeError(f"{name} must be a tensor of token ids, (batch, tokens), got a {type(idx).__name__}: "
                        f"torch.tensor({name}) converts a list of lists of ids (or a numpy array)")
    if idx.dim() != 2 or idx.dtype not in (torch.long, torch.int):
        hint = ''
        if idx.dim() == 1:
            hint = f': a single sequence is {name}[None]'
        elif idx.dim() == 2 and not (idx.is_floating_point() or idx.dtype == torch.bool):  # e.g. uint16 from a file
            hint = f': {name}.long() converts them'
        raise ValueError(f"{name} must be (batch, tokens) int64 or int32 token ids, got {idx.dtype} of shape "
                         f"{tuple(idx.shape)}{hint}")


def vocabulary_error(name, ids, vocab_size, fix):
    """The error for ids outside the vocabulary, with their range (read from the device only now, to say it)."""
    return ValueError(f"{name} holds token ids from {ids.min().item()} to {ids.max().item()}, outside the model's "
                      f"vocabulary of {vocab_size}: {fix}")


def embedding_error(idx, vocab_size):
    """The error for token ids the embedding could not look up (its IndexError, raised on CPU)."""
    return vocabulary_error('idx', idx, vocab_size, "set model.vocab_size from the data (e.g. "
                            "train_dataset.get_vocab_size()), or encode with the model's tokenizer")


def check_input(idx, cached, attention_mask, block_size):
    """GPT.hidden_states' input: token ids idx (B, T) after `cached` tokens, all within the context, and an
    attention_mask, if any, with one 0/1 for every token, the cached ones too. The ids' values are not read here:
    that would make a GPU wait at every forward; the embedding's IndexError is turned into vocabulary_error."""
    check_token_ids(idx)
    B, T = idx.shape
    if cached + T > block_size:
        raise ValueError(f"cannot forward a sequence of length {cached + T}: the model's context (block_size) is "
                         f"{block_size}; crop the input to its last {block_size} tokens, or build the model with "
                         f"block_size >= {cached + T} (to train on a dataset's windows)")
    if attention_mask is not None and attention_mask.shape != (B, cached + T):
        raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}; for {B} rows of {cached} cached "
                         f"and {T} new tokens it must be {(B, cached + T)}")


def check_prompt(idx, attention_mask, eos_token_id, block_size, vocab_size):
    """What generation is given: a prompt (B, T) of token ids that fits the context, its attention_mask (1 on real
    tokens, 0 on padding, at least one real token a row), and end ids within the vocabulary."""
    check_token_ids(idx)
    if idx.size(1) == 0:
        raise ValueError(f"the prompt must have at least one token, got shape {tuple(idx.shape)} (e.g. start from "
                         "a newline or start-of-text token)")
    if idx.size(0) == 0:  # no row to continue (and the range check's message takes the min of the ids)
        raise ValueError(f"the prompt is a batch of no rows, shape {tuple(idx.shape)}: give at least one prompt")
    if idx.size(1) > block_size:
        raise ValueError(f"the prompt has {idx.size(1)} tokens but the model's context (block_size) is "
                         f"{block_size}; shorten it, e.g. idx[:, -{block_size}:]")
    if ((idx < 0) | (idx >= vocab_size)).any():  # one read of the device for the whole check
        raise vocabulary_error('the prompt', idx, vocab_size, "encode it with the model's tokenizer")
    one = not isinstance(eos_token_id, (list, tuple, torch.Tensor))  # one id may be None (no end), one of many not
    for eos in end_ids(eos_token_id):  # a row ends at any of them
        check_range('eos_token_id', eos, 0, vocab_size - 1, integer=True, none_ok=one)
    if attention_mask is None:
        return
    if attention_mask.shape != idx.shape:
        raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)} but the prompt has "
                         f"{tuple(idx.shape)}: give one 0/1 per token (1 on real tokens, 0 on padding)")
    if ((attention_mask != 0) & (attention_mask != 1)).any():  # e.g. a float mask of -inf, or token ids
        raise ValueError("attention_mask must hold only 0 (padding) and 1 (real tokens)")
    empty_rows = (attention_mask == 0).all(dim=1)
    if empty_rows.any():  # such a row would be continued from no text at all, its padding's embedding alone
        empty = empty_rows.nonzero()[:, 0].tolist()
        raise ValueError(f"attention_mask marks no real token in prompt {plural(len(empty), 'row')} "
                         f"{', '.join(map(str, empty))}: every row needs at least one 1; drop the empty rows, or "
                         "start them from a token (e.g. newline or <|endoftext|>) marked 1")


def check_targets(idx, targets):
    """Refuse targets that are not one next token per position of idx; warn of idx itself as its targets."""
    if targets is idx:  # Hugging Face's labels=input_ids, which its model shifts: trains to copy the input
        warn_caller("targets is idx itself: targets are the next token at each position, the ids shifted by "
                    "one (idx = ids[:, :-1], targets = ids[:, 1:]), not Hugging Face's labels")
    if targets.shape not in (idx.shape, (idx.numel(),)):  # flattened (B*T,) too, as minGPT took them
        raise ValueError(f"targets must have idx's shape {tuple(idx.shape)}, the next token at each position, "
                         f"got {tuple(targets.shape)}")


def targets_error(targets, vocab_size):
    """The error for targets the loss could not look up (cross_entropy's IndexError, raised on CPU)."""
    return ValueError(f"targets hold ids from {targets.min().item()} to {targets.max().item()}: each must be a token "
                      f"id below vocab_size={vocab_size}, or -1 for a position that does not count (where Hugging "
                      "Face's labels have -100: targets.masked_fill(targets == -100, -1))")


def check_new_tokens(seq, seen):
    """next_token_logits' sequence must end in tokens the caches have not seen (else an index error on the hidden
    states of no new tokens)."""
    if seq.size(1) <= seen:
        raise ValueError(f"the caches have seen {seen} tokens and seq has {seq.size(1)}: pass the whole sequence "
                         "so far, ending in the tokens the caches have not seen (e.g. the token just chosen)")


def check_cache_fits(cache, k):
    """A KVCache takes new keys k (B, nh, T, hd) only for its rows and within its length (else a shape error deep
    inside attention)."""
    rows, room = cache.k.size(0), cache.k.size(2)
    if cache.len + k.size(2) > room or k.size(0) != rows:
        raise ValueError(f"this KV cache holds {rows} rows of up to {room} tokens and has {cache.len}; {k.size(2)} "
                         f"more of {k.size(0)} rows do not fit: make the caches with new_caches(batch_size, max_len) "
                         "for the whole sequence")


def warn_if_dropout_on(model):
    """Warn of generating (or translating) with a model whose dropout is on, in training mode (a model is built in
    training mode): every token would be chosen by a randomly thinned network, greedy decoding included. Each
    dropout's own mode counts, as it is the one that drops (a model in training with its dropouts in eval is not)."""
    if any(isinstance(m, nn.Dropout) and m.training and m.p > 0 for m in model.modules()):
        warn_caller("dropout is on while the model generates (it is in training mode), so its choices are random "
                    "and worse: call model.eval() first (and model.train() before training on)")
