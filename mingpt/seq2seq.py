"""The encoder-decoder transformer of "Attention is all you need" (Vaswani et al. 2017), built from model.py's pieces.

The encoder reads the source sentence with self-attention that sees both directions. The decoder writes the target
one token at a time: masked (causal) self-attention over the target so far, then cross-attention (queries from the
decoder, keys and values from the encoder's output), then the MLP; each sub-layer inside "Add & Norm" (model.py's
add_and_norm). The padding mask (key_padding_mask) keeps the encoder's self-attention and the cross-attention off the
source's padding. The generator head turns the decoder's last hidden state into next-token logits. Training is
teacher forcing: the decoder reads BOS followed by the target and predicts the target followed by EOS, all positions
at once.

As in the paper: token embeddings scaled by sqrt(n_embd), the decoder's embedding tied to the generator head, and
by default sinusoidal positional encoding, post-norm, ReLU and label smoothing 0.1, which the config switches
(pos_embd, norm, activation, label_smoothing; share_embeddings ties the encoder's embedding too).
Decoding (greedy, or beam search with sampling.beam_search) keeps a KV cache of the decoder's self-attention and
computes the encoder's keys and values once per source sentence. The paper's learning-rate schedule (warmup, then
decay as 1/sqrt(step)) and Adam's betas (0.9, 0.98) are the Trainer's: lr_schedule='inverse_sqrt' and betas, which
projects/translate.py sets. Adam's eps is torch's 1e-8, not the paper's 1e-9: it differs only for a weight whose
gradients are about that small.
"""
import copy
import math

import torch
import torch.nn as nn
from torch.nn import functional as F

from mingpt.checkpoint import rebuild_model, refuse_untied_state_dict
from mingpt.checks import check_model_config, check_token_ids, vocabulary_error, warn_if_dropout_on
from mingpt.model import GPT, Block, CausalSelfAttention, KVCache, add_and_norm, kept_weights, layer_stack
from mingpt.sampling import beam_search
from mingpt.utils import ConfigError, check_range, other_rank, warn_caller


def key_padding_mask(ids, pad_token_id):
    """(B, 1, 1, S) attention mask from ids (B, S): every query may look at the real tokens, never at padding."""
    return (ids != pad_token_id)[:, None, None, :]


def kept_columns(ids, pad_token_id):
    """How many columns of ids (B, T) to keep: 1 + the last where some row has a real token (0 if none); the padding
    after it changes no output, it only costs time. A tensor on ids' device: reading it makes the host wait for the
    device, so a caller may read it together with other numbers."""
    real = (ids != pad_token_id).any(0)  # the columns where some row has a real token
    positions = torch.arange(1, len(real) + 1, device=ids.device)
    return (real * positions).max() if len(real) else positions.new_zeros(())


def padding_only_rows(ids, pad_token_id):
    """How many rows of ids (B, T) hold padding only, as a tensor on ids' device (read when needed, as above)."""
    return (ids == pad_token_id).all(dim=1).sum()


def outside_vocabulary(ids, vocab_size):
    """How many of ids are not token ids below vocab_size, as a tensor on ids' device (read when needed, as above)."""
    return ((ids < 0) | (ids >= vocab_size)).sum()


def encoder_block(config):
    """An encoder layer: GPT's block, with self-attention that sees both directions (no causal mask)."""
    block = Block(config)
    block.attn.causal = False
    return block


class DecoderBlock(Block):
    """A decoder layer: GPT's block (masked self-attention over the target so far, the MLP) with cross-attention to
    the encoder's output between the two; each sub-layer inside a residual connection with a layer norm (names as
    in Hugging Face's GPT-2 with cross-attention)."""

    def __init__(self, config):
        super().__init__(config)
        self.ln_cross_attn = nn.LayerNorm(config.n_embd)
        self.crossattention = CausalSelfAttention(config, causal=False)

    def forward(self, x, memory, memory_mask, cache=None):
        """memory: the encoder's output (B, S, C), or its (key, value) pair; memory_mask (B, 1, 1, S) hides the
        source's padding. cache: the KVCache of this layer's self-attention, when decoding step by step."""
        x = add_and_norm(x, lambda h: self.attn(h, cache=cache), self.ln_1, self.norm)
        x = add_and_norm(x, lambda h: self.crossattention(h, context=memory, mask=memory_mask), self.ln_cross_attn,
                         self.norm)
        return add_and_norm(x, self.mlp, self.ln_2, self.norm)


class DecoderCache:
    """What one decoder layer keeps while decoding: a KVCache of its own earlier tokens, and the keys and values its
    cross-attention reads from the encoder's output, computed once per source sentence, with the source's mask."""

    def __init__(self, block, memory, memory_mask, max_len):
        c = block.attn
        self.self_attn = KVCache(memory.size(0), c.n_head, max_len, c.n_embd // c.n_head, memory.device, memory.dtype)
        self.memory = block.crossattention.context_keys_values(memory)
        self.memory_mask = memory_mask

    @property
    def len(self):
        return self.self_attn.len

    def select(self, rows):
        """Keep (and duplicate) the given batch rows, as beam search asks of a KVCache."""
        self.self_attn.select(rows)
        self.memory = tuple(t[rows] for t in self.memory)
        self.memory_mask = self.memory_mask[rows]


class Transformer(nn.Module):
    """The encoder-decoder transformer. forward(src, tgt) -> (logits, loss), as the Trainer expects of a model."""

    PRESETS = {
        # n_layer (encoder layers, and as many decoder layers), n_head, n_embd; the MLP is 4 * n_embd wide
        # the paper's base model: 63M parameters with 37k tokens and share_embeddings=True (the paper says 65M)
        'transformer-base': dict(n_layer=6, n_head=8, n_embd=512),
        'transformer-big': dict(n_layer=6, n_head=16, n_embd=1024),  # the paper's big model
        'transformer-mini': dict(n_layer=3, n_head=4, n_embd=128),  # small presets that train on a CPU
        'transformer-micro': dict(n_layer=2, n_head=4, n_embd=64),
        'transformer-nano': dict(n_layer=1, n_head=2, n_embd=32),
    }
    CHOICES = dict(GPT.CHOICES, share_embeddings=(False, True))

    @staticmethod
    def get_default_config():
        C = GPT.get_default_config()
        # the paper's choices (GPT's are 'learned', 'pre' and 'gelu')
        C.pos_embd = 'sinusoidal'
        C.norm = 'post'
        C.activation = 'relu'
        # one vocabulary for source and target; True: the encoder's token embedding is the decoder's too (which
        # is always the generator head's), one matrix as in the paper
        C.share_embeddings = False
        # the loss's target: 1 - 0.1 on the right token, plus 0.1 spread evenly over all tokens, PAD and BOS too (as
        # the paper's own code, tensor2tensor, spreads it over all but the right one; decoding never writes them)
        C.label_smoothing = 0.1
        C.pad_token_id = 0
        C.bos_token_id = 1
        C.eos_token_id = 2
        return C

    # the same checks and loading as GPT's, over this class's defaults, presets and choices
    check_config = classmethod(check_model_config)
    from_checkpoint = classmethod(rebuild_model)
    configure_optimizers = GPT.configure_optimizers
    num_parameters = GPT.num_parameters

    def __init__(self, config):
        super().__init__()
        self.check_config(config)
        self.check_special_tokens(config)
        # its own copy: the caller may change theirs for another model (a notebook's next cell)
        self.config = copy.deepcopy(config)
        self.encoder = layer_stack(config, [encoder_block(config) for _ in range(config.n_layer)])
        self.decoder = layer_stack(config, [DecoderBlock(config) for _ in range(config.n_layer)])
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)  # the generator
        # the Annotated Transformer's initialisation: Xavier uniform for every matrix
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        self.decoder.wte.weight = self.lm_head.weight  # tied: the generator reads tokens as the decoder does
        if config.share_embeddings:
            self.encoder.wte.weight = self.lm_head.weight
        self.register_load_state_dict_pre_hook(refuse_untied_state_dict)  # a state dict whose tied weights differ
        if not other_rank():  # as GPT: one line under torchrun, not one per process
            print("number of parameters: %.2fM" % (self.num_parameters() / 1e6,))

    @staticmethod
    def check_special_tokens(config):
        """The options GPT's config has not: pad, bos and eos ids, and label smoothing."""
        ids = {k: getattr(config, k) for k in ('pad_token_id', 'bos_token_id', 'eos_token_id')}
        if len(set(ids.values())) < 3 or not all(isinstance(i, int) and 0 <= i < config.vocab_size
                                                 for i in ids.values()):
            raise ConfigError(f"model.pad_token_id, bos_token_id and eos_token_id must be three different token ids "
                              f"below vocab_size={config.vocab_size}, got {ids}")
        check_range('model.label_smoothing', config.label_smoothing, 0, 1, high_open=True)

    def check_ids(self, name, ids, values=True):
        """Refuse, by name, what is not a batch of token ids of this model: else the error comes from deep inside
        (an embedding's 'index out of range in self' on CPU, a device-side assert on a GPU). values=False checks the
        shape alone: comparing every id would make the GPU wait for it at each training step."""
        check_token_ids(ids, name)
        if values:
            self.check_vocabulary(name, ids, outside_vocabulary(ids, self.config.vocab_size))

    def check_vocabulary(self, name, ids, n_outside):
        """Refuse ids outside the vocabulary, with their range (read only then). n_outside: how many there are, a
        number or a tensor (whose bool() reads the device)."""
        if n_outside:
            raise vocabulary_error(name, ids, self.config.vocab_size, "set model.vocab_size from the data, and pad "
                                   f"with pad_token_id={self.config.pad_token_id} (not -1 or -100)")

    def embed(self, stack, idx, start=0):
        """Token embedding times sqrt(n_embd) (as in the paper, so that the positional encoding does not drown it),
        plus the positional encoding of positions start, start + 1, ..."""
        if start + idx.size(1) > self.config.block_size:
            raise ValueError(f"a sequence of {start + idx.size(1)} tokens is longer than the model's block_size "
                             f"({self.config.block_size}); shorten it, or train a model with a larger block_size")
        pos = torch.arange(start, start + idx.size(1), device=idx.device)
        return stack.drop(stack.wte(idx) * math.sqrt(self.config.n_embd) + stack.wpe(pos))

    def check_sources(self, n_padding_only):
        """Refuse source rows of padding only: every key hidden, their encoder states (and the loss) would be NaN or
        arbitrary. n_padding_only: how many there are, a number or a tensor (whose bool() reads the device)."""
        if n_padding_only:
            raise ValueError(f"a source row holds only padding (pad_token_id={self.config.pad_token_id}): give each "
                             "source at least one token, such as EOS")

    def check_targets(self, n_padding_only):
        """Refuse target rows of padding only: a target ends in EOS (an empty translation is EOS alone). Such a row
        teaches nothing, and a batch of them leaves no token to average the loss over: NaN, which training would
        spread into every weight. n_padding_only: as check_sources'."""
        if n_padding_only:
            raise ValueError(f"a target row holds only padding (pad_token_id={self.config.pad_token_id}): end each "
                             "target with EOS (eos_token_id), an empty one too")

    def encode(self, src, check=True):
        """The encoder's output (B, S, C) for source ids src (B, S), padded at the end with pad_token_id, and the
        mask (B, 1, 1, S) that keeps attention off that padding. check=False: the caller has run check_sources."""
        mask = key_padding_mask(src, self.config.pad_token_id)
        if check:
            self.check_sources(padding_only_rows(src, self.config.pad_token_id))
        x = self.embed(self.encoder, src)
        for block in self.encoder.h:
            x = block(x, mask)
        return self.encoder.ln_f(x), mask

    def decode(self, tgt, memory, memory_mask):
        """The decoder's last hidden states (B, T, C) for the target so far tgt (B, T), all positions at once."""
        x = self.embed(self.decoder, tgt)
        for block in self.decoder.h:
            x = block(x, memory, memory_mask)
        return self.decoder.ln_f(x)

    def forward(self, src, tgt):
        """Teacher forcing: the decoder reads BOS + tgt[:-1] and predicts tgt (B, T), the target sentence followed
        by EOS and padded with pad_token_id (padding does not count in the loss). Returns (logits, loss): logits
        (B, T', vocab_size), T' leaving out the trailing padding columns that every row of tgt shares (kept_columns),
        so compare them with tgt[:, :T']."""
        c = self.config
        for name, ids in (('src', src), ('tgt', tgt)):
            self.check_ids(name, ids, values=False)
        if src.size(0) != tgt.size(0):
            raise ValueError(f"src has {src.size(0)} rows and tgt {tgt.size(0)}: give one target per source")
        pad = c.pad_token_id
        # the four numbers the host needs, read from the device at once (each read waits for the device to finish
        # all it was given): the columns of src and of tgt to keep (kept_columns), the rows of padding only of each
        needed = [kept_columns(src, pad), kept_columns(tgt, pad), padding_only_rows(src, pad),
                  padding_only_rows(tgt, pad)]
        src_len, tgt_len, empty_sources, empty_targets = torch.stack(needed).tolist()
        self.check_sources(empty_sources)
        self.check_targets(empty_targets)
        try:
            memory, memory_mask = self.encode(src[:, :src_len], check=False)
            target = tgt[:, :tgt_len]
            tgt_in = torch.cat([torch.full_like(target[:, :1], c.bos_token_id), target[:, :-1]], dim=1)  # shifted
            logits = self.lm_head(self.decode(tgt_in, memory, memory_mask))
            loss = F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=pad,
                                   label_smoothing=c.label_smoothing)
        except IndexError:  # an id outside the vocabulary, raised on CPU (a GPU stops at a device-side assert)
            for name, ids in (('src', src), ('tgt', tgt)):
                self.check_ids(name, ids)  # says which, and what to do
            raise
        return logits, loss

    def cross_attention_maps(self, src, tgt):
        """Cross-attention weights of every decoder layer while it predicts tgt from src: a list of (B, n_head, T, S)
        tensors, row t the source positions the decoder looked at to write tgt[t]. They are the model's in eval
        mode, without dropout, whichever mode it is in. T and S leave out trailing padding columns that every row
        shares (kept_columns), as forward's logits do."""
        return kept_weights(self, [block.crossattention for block in self.decoder.h], lambda: self(src, tgt))

    # ---- decoding ----

    def new_caches(self, memory, memory_mask, max_len):
        """One DecoderCache per decoder layer, for up to max_len target tokens."""
        return [DecoderCache(block, memory, memory_mask, max_len) for block in self.decoder.h]

    def next_token_logits(self, seq, caches):
        """Logits (B, vocab_size) of the token after each row of seq (B, T), the target so far (from BOS); only the
        tokens the caches have not seen go through the decoder. PAD and BOS get -inf: they are never a target's
        next token, yet label smoothing gives them some probability, and a decoded PAD or BOS would vanish from the
        text without a trace (so greedy and beam search choose among the other tokens, renormalised)."""
        c = self.config
        start = caches[0].len
        x = self.embed(self.decoder, seq[:, start:], start)
        for block, cache in zip(self.decoder.h, caches):
            x = block(x, cache.memory, cache.memory_mask, cache.self_attn)
        logits = self.lm_head(self.decoder.ln_f(x[:, -1]))
        logits[:, c.pad_token_id] = -math.inf  # one column at a time: a list as the index ([pad, bos]) would be
        logits[:, c.bos_token_id] = -math.inf  # copied to the device at every step, which waits for the device
        return logits

    @torch.no_grad()
    def greedy(self, memory, memory_mask, max_new_tokens):
        """The most probable token at each step, for every encoded source at once: (B, 1 + n) ids from BOS; a row
        that has written EOS is padded with EOS until all rows have. It is GPT's generation loop without sampling
        (model.py's generate_stream), run on the decoder conditioned on the sources."""
        c = self.config
        bos = torch.full((memory.size(0), 1), c.bos_token_id, dtype=torch.long, device=memory.device)
        steps = GPT.generate_stream(SourceConditioned(self, memory, memory_mask), bos, max_new_tokens,
                                    eos_token_id=c.eos_token_id)
        return torch.cat([bos, *steps], dim=1)

    @torch.no_grad()
    def beam(self, memory, memory_mask, max_new_tokens, num_beams, length_penalty=0.0):
        """The best beam of sampling.beam_search for every encoded source: (B, 1 + max_new_tokens) ids from BOS, a
        beam that ended early padded with EOS. One source at a time, as beam_search keeps the beams of one prompt."""
        c = self.config
        bos = torch.full((1, 1), c.bos_token_id, dtype=torch.long, device=memory.device)
        best = []
        for i in range(len(memory)):
            one_source = SourceConditioned(self, memory[i:i + 1], memory_mask[i:i + 1])
            beams, _ = beam_search(one_source, bos, max_new_tokens, num_beams, c.eos_token_id, length_penalty)
            best.append(beams[0])  # beams come best first
        return torch.stack(best)

    @property
    def longest_translation(self):
        """translate's default max_new_tokens: the longest target training can show has block_size - 1 tokens and EOS
        (at block_size 1, EOS alone: one token to write); the decoder could read one more."""
        return max(1, self.config.block_size - 1)

    @torch.no_grad()
    def translate(self, src, max_new_tokens=None, num_beams=1, length_penalty=0.0):
        """Translate a batch of source sentences src (B, S), each padded at the end with pad_token_id: greedy
        (num_beams=1) or beam search, whose finished beams length_penalty ranks (see sampling.beam_search). Returns B
        lists of target ids, without BOS and EOS. max_new_tokens defaults to longest_translation."""
        c = self.config
        max_new_tokens = self.longest_translation if max_new_tokens is None else max_new_tokens
        if not 1 <= max_new_tokens <= c.block_size:
            raise ValueError(f"max_new_tokens must be 1 to block_size = {c.block_size}, got {max_new_tokens}")
        num_beams = check_range('num_beams', num_beams, low=1, integer=True)  # 4.0 and numpy's 4 as 4
        check_range('length_penalty', length_penalty)
        if num_beams == 1 and length_penalty != 0:  # a warning, as Hugging Face's: a grid search may pass both
            warn_caller(f"length_penalty={length_penalty!r} ranks beam search's finished beams, but num_beams=1 "
                        "decodes greedily, which has none to rank: it is ignored (give num_beams > 1 for it to count)")
        self.check_ids('src', src, values=False)  # the shape; the values below
        warn_if_dropout_on(self)
        pad = c.pad_token_id
        # as in forward, what the host needs in one read: the ids outside the vocabulary (before the embedding meets
        # them), the columns of src to keep, and the source rows of padding only
        needed = [outside_vocabulary(src, c.vocab_size), kept_columns(src, pad), padding_only_rows(src, pad)]
        n_outside, src_len, n_padding_only = torch.stack(needed).tolist()
        self.check_vocabulary('src', src, n_outside)
        self.check_sources(n_padding_only)
        memory, memory_mask = self.encode(src[:, :src_len], check=False)
        if num_beams == 1:
            rows = self.greedy(memory, memory_mask, max_new_tokens)
        else:
            rows = self.beam(memory, memory_mask, max_new_tokens, num_beams, length_penalty)
        return [cut_at_eos(row[1:], c.eos_token_id) for row in rows.tolist()]  # one read for the batch, not one a row


def cut_at_eos(ids, eos_token_id):
    """The ids before the first EOS: greedy and beam search pad a row that has ended with more EOS."""
    return ids[:ids.index(eos_token_id)] if eos_token_id in ids else ids


class SourceConditioned:
    """The decoder with the source sentences encoded, seen as a language model over target sentences: what GPT's
    generate_stream and sampling.beam_search ask of a model (block_size, check_prompt, new_caches,
    next_token_logits)."""

    def __init__(self, model, memory, memory_mask):
        self.model, self.memory, self.memory_mask = model, memory, memory_mask
        self.block_size = model.config.block_size

    def check_prompt(self, idx, attention_mask=None, eos_token_id=None):
        return idx, attention_mask

    def new_caches(self, batch_size, max_len):
        return self.model.new_caches(self.memory.expand(batch_size, -1, -1), self.memory_mask, max_len)

    def next_token_logits(self, seq, caches, attention_mask=None):
        return self.model.next_token_logits(seq, caches)
