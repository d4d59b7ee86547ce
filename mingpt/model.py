"""The GPT language model, top to bottom as the lecture draws it: token embedding and positional encoding,
causal self-attention (query, key, value; heads; scaled dot-product; causal mask), the MLP, the block (layer norm,
residual), the GPT head and its loss, then generation with a KV cache.

References: OpenAI's GPT-2 (Radford et al. 2019), whose parameter names (wte, wpe, h, c_attn, c_proj, ln_f) we keep
so that its checkpoints map one to one (see pretrained.py), and "Attention is all you need" (Vaswani et al. 2017)
for the switchable parts: sinusoidal positions, post-norm ("Add & Norm") and ReLU.
"""
import copy
import math

import torch
import torch.nn as nn
from torch.nn import functional as F

from mingpt import checks
from mingpt.checkpoint import rebuild_model, refuse_untied_state_dict
from mingpt.sampling import end_ids, sample_next, warn_if_ignored
from mingpt.utils import CfgNode as CN, check_range, eval_mode, other_rank


# ---- token embedding and positional encoding, the first layers of the stack ----

def sinusoidal_positions(n_positions, dim):
    """The fixed table of "Attention is all you need": PE(pos, 2i) = sin(pos / 10000^(2i/d)),
    PE(pos, 2i+1) = cos(pos / 10000^(2i/d)). Each dimension pair is a wave of its own wavelength."""
    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]  # (n_positions, 1)
    freq = 10000 ** (-torch.arange(0, dim, 2, dtype=torch.float32) / dim)  # 1 / 10000^(2i/d), (ceil(d/2),)
    pe = torch.zeros(n_positions, dim)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq[:dim // 2])  # an odd dim has one cos column fewer than sin
    return pe


class SinusoidalPositions(nn.Module):
    """Looks positions up in the sinusoidal table: a buffer, not a parameter, so it is never trained or saved."""

    def __init__(self, n_positions, dim):
        super().__init__()
        self.register_buffer('table', sinusoidal_positions(n_positions, dim), persistent=False)

    def forward(self, pos):
        return self.table[pos]


def layer_stack(config, blocks):
    """The layers in the order the input meets them: token embedding, positional encoding (GPT.embed adds the two),
    the blocks (Block, below) and the final layer norm. GPT's `transformer`, and seq2seq.py's encoder and decoder."""
    return nn.ModuleDict(dict(
        wte=nn.Embedding(config.vocab_size, config.n_embd),  # token embedding
        wpe=(nn.Embedding(config.block_size, config.n_embd) if config.pos_embd == 'learned'  # positional encoding
             else SinusoidalPositions(config.block_size, config.n_embd)),
        drop=Dropout(config.embd_pdrop),
        h=nn.ModuleList(blocks),
        # pre-norm leaves the residual stream unnormalised; post-norm's last block already ends in a layer norm
        ln_f=nn.LayerNorm(config.n_embd) if config.norm == 'pre' else nn.Identity(),
    ))


# ---- attention ----

def causal_mask(Tq, Tk, device=None):
    """True where query i (the last Tq of Tk positions) may look at key j: j <= i, never the future."""
    return torch.ones(Tq, Tk, dtype=torch.bool, device=device).tril(diagonal=Tk - Tq)


def padded_causal_mask(attention_mask, T):
    """(B, 1, T, S) mask for the last T of S positions, from attention_mask (B, S), 1 on real tokens: a query
    looks at the real tokens of its past, and always at itself (so a padding query's softmax is never empty)."""
    S = attention_mask.size(1)
    i = torch.arange(S - T, S, device=attention_mask.device)[:, None]  # the queries' positions
    j = torch.arange(S, device=attention_mask.device)  # the keys'
    past_tokens = (j <= i) & attention_mask.bool()[:, None, :]  # (B, T, S)
    return (past_tokens | (j == i))[:, None]


class CausalSelfAttention(nn.Module):
    """Multi-head attention: each position mixes the values of the positions it may look at, weighted by how well
    its query matches their keys. As GPT uses it, masked (causal) self-attention: a position sees itself and the
    past. The encoder-decoder transformer (seq2seq.py) reuses it with causal=False (the encoder sees both
    directions) and with a `context` to attend to (cross-attention: queries from the decoder, keys and values
    from the encoder)."""

    def __init__(self, config, causal=True):
        super().__init__()
        self.n_head, self.n_embd, self.causal = config.n_head, config.n_embd, causal
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # query, key, value for all heads, stacked
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)  # mixes the heads' outputs back into the residual
        self.attn_dropout = Dropout(config.attn_pdrop)  # nn.Dropout, faster on CPU (at the end of this file)
        self.resid_dropout = Dropout(config.resid_pdrop)
        self.attn_impl = config.attn_impl
        self.keep_weights = False  # attention_maps sets it; the weights of the last forward are then kept here
        self.weights = None

    def forward(self, x, context=None, mask=None, cache=None):
        """x (B, T, C) -> (B, T, C). `context` (B, S, C): what keys and values are read from (default x itself),
        or their pair (key, value) from context_keys_values, computed once and reused at every decoding step.
        `mask` (B or 1, 1, T or 1, S), True where a query may look at a key: padding and the causal mask together;
        None means the causal mask (or no mask, if not causal). `cache` (a KVCache, defined after GPT) holds
        the keys and values of earlier tokens; x is then only the new ones."""
        B, T, C = x.size()  # batch, tokens, channels (C = n_embd, the paper's d_model)
        if context is None:
            q, k, v = self.c_attn(x).split(C, dim=2)
        else:  # cross-attention: the same stacked weights, the query read from x, key and value from context
            q = F.linear(x, self.c_attn.weight[:C], self.c_attn.bias[:C])
            k, v = context if isinstance(context, tuple) else self.context_keys_values(context)
        # heads: split the channels into nh = n_head independent attention problems of hd = C / nh channels each,
        # q (B, nh, T, hd) and k, v (B, nh, S, hd), S the length of what is attended to
        q, k, v = (t.view(B, -1, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if cache is not None:
            k, v = cache.append(k, v)  # (B, nh, S, hd): the cached keys/values, then the new ones
        y = self.attention(q, k, v, mask)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C): the heads side by side again
        return self.resid_dropout(self.c_proj(y))

    def context_keys_values(self, context):
        """The keys and values (B, S, C) that cross-attention reads from context (B, S, C). A decoder computes them
        once per source sentence and passes them as `context` at every step, instead of once per generated token."""
        C = self.n_embd
        return F.linear(context, self.c_attn.weight[C:], self.c_attn.bias[C:]).split(C, dim=2)

    def attention(self, q, k, v, mask):
        """Scaled dot-product attention, by the formula or by PyTorch's fused kernels (the same numbers). The formula
        runs when asked for (attn_impl='explicit'), for attention maps, and in CPU training with dropout, where SDPA
        falls back to the same math unfused and is slower; SDPA elsewhere (flash attention on a GPU in 16 bits)."""
        Tq, Tk = q.size(2), k.size(2)
        causal = self.causal and mask is None  # a mask the caller gives already holds the causal part
        dropout_p = self.attn_dropout.p if self.attn_dropout.training else 0.0  # as the formula's attn_dropout
        if self.attn_impl == 'explicit' or self.keep_weights or (dropout_p > 0 and q.is_cpu):
            return self.explicit_attention(q, k, v, causal_mask(Tq, Tk, q.device) if causal else mask)
        if causal and Tq > 1 and Tq != Tk:  # after a cache: SDPA's is_causal would match queries to the first keys
            mask = causal_mask(Tq, Tk, q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                              is_causal=causal and Tq == Tk)

    def explicit_attention(self, q, k, v, mask):
        """softmax(Q K^T / sqrt(d_k)) V as on the slides, d_k the head size; mask (False: may not look) becomes -inf."""
        att = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, nh, T, S): how well each query matches each key
        if mask is not None:
            att.masked_fill_(~mask, float('-inf'))  # in place, no copy of the scores; softmax gives these exactly 0
        att = F.softmax(att, dim=-1)  # each query's weights are >= 0 (0 on masked keys) and sum to 1
        if self.keep_weights:
            self.weights = att.detach()
        att = self.attn_dropout(att)
        return att @ v  # (B, nh, T, hd): each query's weighted mix of the values


@torch.no_grad()
def kept_weights(model, attns, forward):
    """The attention weights that each of attns (CausalSelfAttention modules of model) computes during forward(),
    with model in eval mode (no dropout) whichever mode it is in: for attention maps."""
    try:
        for a in attns:
            a.keep_weights = True
        with eval_mode(model):
            forward()
        return [a.weights for a in attns]
    finally:
        for a in attns:
            a.keep_weights, a.weights = False, None


# ---- the MLP, the block ----

class MLP(nn.Module):
    """Position-wise feed-forward network: widen 4x, a non-linearity, project back."""

    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        # GPT-2's GELU is the tanh approximation; "Attention is all you need" used ReLU
        self.act = nn.GELU(approximate='tanh') if config.activation == 'gelu' else nn.ReLU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)
        self.dropout = Dropout(config.resid_pdrop)

    def forward(self, x):
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


def add_and_norm(x, sublayer, ln, norm):
    """The residual connection around a sub-layer, with its layer norm before it (norm='pre', GPT-2:
    x + f(LN(x))) or after the sum (norm='post', the original "Add & Norm": LN(x + f(x)))."""
    return ln(x + sublayer(x)) if norm == 'post' else x + sublayer(ln(x))


class Block(nn.Module):
    """A transformer block: attention, then the MLP, each inside a residual connection with a layer norm."""

    def __init__(self, config):
        super().__init__()
        self.norm = config.norm
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x, mask=None, cache=None):
        x = add_and_norm(x, lambda h: self.attn(h, mask=mask, cache=cache), self.ln_1, self.norm)
        return add_and_norm(x, self.mlp, self.ln_2, self.norm)


# ---- GPT ----

class GPT(nn.Module):
    """The GPT language model: embeddings, n_layer blocks, a final layer norm, and lm_head, the head that scores
    every token of the vocabulary as the next one."""

    PRESETS = {
        # names and sizes as in minGPT; n_layer, n_head, n_embd
        'openai-gpt': dict(n_layer=12, n_head=12, n_embd=768),  # 117M params
        'gpt2': dict(n_layer=12, n_head=12, n_embd=768),  # 124M params
        'gpt2-medium': dict(n_layer=24, n_head=16, n_embd=1024),  # 355M params
        'gpt2-large': dict(n_layer=36, n_head=20, n_embd=1280),  # 774M params
        'gpt2-xl': dict(n_layer=48, n_head=25, n_embd=1600),  # 1558M params
        'gopher-44m': dict(n_layer=8, n_head=16, n_embd=512),
        'gpt-mini': dict(n_layer=6, n_head=6, n_embd=192),
        'gpt-micro': dict(n_layer=4, n_head=4, n_embd=128),
        'gpt-nano': dict(n_layer=3, n_head=3, n_embd=48),
    }
    CHOICES = dict(attn_impl=('sdpa', 'explicit'), pos_embd=('learned', 'sinusoidal'), norm=('pre', 'post'),
                   activation=('gelu', 'relu'))

    @staticmethod
    def get_default_config():
        C = CN()
        # either model_type (a preset name) or n_layer, n_head and n_embd must be given
        C.model_type = None
        C.n_layer = None
        C.n_head = None
        C.n_embd = None
        # these options must be filled in externally
        C.vocab_size = None
        C.block_size = None
        # dropout hyperparameters
        C.embd_pdrop = 0.1
        C.resid_pdrop = 0.1
        C.attn_pdrop = 0.1
        # 'sdpa' (PyTorch's fused kernels) or 'explicit' (softmax(QK^T/sqrt(d))V written out, for teaching)
        C.attn_impl = 'sdpa'
        # the parts a lecture switches; GPT-2's choice first: 'learned' or 'sinusoidal' positions, layer norm
        # 'pre' (before each sub-layer) or 'post' (after the residual sum), 'gelu' or 'relu'
        C.pos_embd = 'learned'
        C.norm = 'pre'
        C.activation = 'gelu'
        return C

    def __init__(self, config):
        super().__init__()
        self.check_config(config)
        # its own copy: the caller may change theirs for another model (a notebook's next cell)
        self.config = copy.deepcopy(config)
        self.block_size = config.block_size
        self.transformer = layer_stack(config, [Block(config) for _ in range(config.n_layer)])
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied (one tensor): the head reads tokens as the input does
        self.register_load_state_dict_pre_hook(refuse_untied_state_dict)  # refuses a head apart from wte (minGPT's)

        # GPT-2's initialisation: N(0, 0.02), and residual projections scaled by 1/sqrt(2 * n_layer) so the
        # residual stream's variance does not grow with depth
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith('c_proj.weight'):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))
        if not other_rank():  # under torchrun every process builds the model: one line, not one per process
            print("number of parameters: %.2fM" % (self.num_parameters() / 1e6,))

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            module.reset_parameters()  # gain 1, bias 0, where it has them (a LayerNorm(n, bias=False) has no bias)

    def embed(self, idx, pos):
        """Token embedding plus positional encoding: (B, T) token ids at positions pos -> (B, T, n_embd)."""
        tok = self.transformer.wte(idx)
        if self.config.pos_embd == 'sinusoidal':  # as the paper does: the fixed table's amplitude 1 would drown
            tok = tok * math.sqrt(self.config.n_embd)  # token embeddings initialised at 0.02
        return self.transformer.drop(tok + self.transformer.wpe(pos))

    def hidden_states(self, idx, caches=None, attention_mask=None):
        """The final hidden state of every position of idx (B, T), after the last layer norm (ln_f), as Hugging
        Face's last hidden state: (B, T, n_embd). `caches` (from new_caches) hold the keys/values of earlier tokens;
        idx then holds only the new ones. `attention_mask` (B, cached + T), 1 on real tokens and 0 on padding:
        padding is never attended to, and positions count from each row's first real token. (For a probe of every
        layer's states, hook the modules: transformer.drop gives the embeddings, transformer.h[i] block i's output,
        before any ln_f, e.g. with register_forward_hook; during cached generation a hook sees the new tokens only.)"""
        start = caches[0].len if caches else 0  # the tokens the caches have seen
        checks.check_input(idx, start, attention_mask, self.block_size)
        T = idx.size(1)
        mask = None
        if attention_mask is None:
            pos = torch.arange(start, start + T, device=idx.device)  # (T,)
        else:
            # (B, T): the number of real tokens before each (long(): any 0/1 dtype), so padding does not count
            pos = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, start:]
            mask = padded_causal_mask(attention_mask, T)
        try:
            x = self.embed(idx, pos)
        except IndexError:  # raised on CPU; on a GPU an id out of range stops the kernel (a device-side assert)
            raise checks.embedding_error(idx, self.config.vocab_size) from None
        for i, block in enumerate(self.transformer.h):
            x = block(x, mask, caches[i] if caches else None)
        return self.transformer.ln_f(x)

    def forward(self, idx, targets=None):
        logits = self.lm_head(self.hidden_states(idx))  # (B, T, vocab_size): a score for every possible next token
        loss = None
        if targets is not None:  # the next token at each position; -1 marks one that does not count (padding)
            checks.check_targets(idx, targets)
            try:
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1).long(), ignore_index=-1)
            except IndexError:  # raised on CPU, as the embedding's (a GPU stops at a device-side assert)
                raise checks.targets_error(targets, self.config.vocab_size) from None
        return logits, loss

    def attention_maps(self, idx, attention_mask=None):
        """Attention weights of every layer for idx, a list of (B, n_head, T, T) tensors (for plots and teaching).
        They are the model's in eval mode, without dropout, whichever mode it is in. attention_mask (B, T), 1 on
        real tokens and 0 on padding, as in hidden_states: no real token's weight falls on padding."""
        return kept_weights(self, [block.attn for block in self.transformer.h],
                            lambda: self.hidden_states(idx, attention_mask=attention_mask))

    # ---- generation ----

    def new_caches(self, batch_size, max_len=None):
        """One empty KVCache (below, after GPT) per layer, for up to max_len tokens (default block_size)."""
        p = self.lm_head.weight
        hd = self.config.n_embd // self.config.n_head
        return [KVCache(batch_size, self.config.n_head, max_len or self.block_size, hd, p.device, p.dtype)
                for _ in range(self.config.n_layer)]

    def check_prompt(self, idx, attention_mask=None, eos_token_id=None):
        """Check a prompt (B, T) and the end token's id (checks.py says what is refused), and warn if dropout is on;
        return the prompt with its attention_mask, each row's padding moved to its front (left padding), so every
        row's newest token is last and the sliding window drops padding before text."""
        checks.check_prompt(idx, attention_mask, eos_token_id, self.block_size, self.config.vocab_size)
        checks.warn_if_dropout_on(self)
        if attention_mask is None:
            return idx, None
        order = attention_mask.argsort(dim=1, stable=True)  # zeros (padding) first, tokens in their order
        return idx.gather(1, order), attention_mask.gather(1, order)

    def next_token_logits(self, seq, caches=None, attention_mask=None):
        """Logits (B, vocab_size) of the token after each row of seq (B, T), the whole sequence so far. With caches,
        only the tokens they have not seen go through the model. Past block_size the window of the last block_size
        tokens slides: every position shifts, so the cached keys are stale and the window is recomputed."""
        if seq.size(1) > self.block_size:
            seq, caches = seq[:, -self.block_size:], None
            attention_mask = None if attention_mask is None else attention_mask[:, -self.block_size:]
        seen = caches[0].len if caches else 0
        checks.check_new_tokens(seq, seen)
        return self.lm_head(self.hidden_states(seq[:, seen:], caches, attention_mask)[:, -1])

    @torch.no_grad()
    def generate_stream(self, idx, max_new_tokens, temperature=1.0, do_sample=False, top_k=None, top_p=None,
                        eos_token_id=None, generator=None, attention_mask=None):
        """Yield the next token of every row, (B, 1), one step at a time. A row that has emitted eos_token_id (or any
        of a list of ids, as Hugging Face's generate takes) keeps yielding it (the first of the list) as padding until
        all rows have, and then the stream stops. attention_mask (B, T), 1 on real tokens and 0 on padding, lets rows
        of different lengths share a batch (left or right padded): each row then continues as it would alone."""
        idx, attention_mask = self.check_prompt(idx, attention_mask, eos_token_id)
        max_new_tokens = check_range('max_new_tokens', max_new_tokens, low=0, integer=True)  # 20.0 as 20
        if not do_sample:
            warn_if_ignored(temperature, top_k, top_p)
        if eos_token_id is not None:  # the end ids (k,), as ints: 20.0 as 20
            ends = torch.as_tensor(end_ids(eos_token_id), dtype=torch.long, device=idx.device)
        # the KV cache: after the prompt, each step sends only the token just chosen through the model
        caches = self.new_caches(idx.size(0), min(idx.size(1) + max_new_tokens, self.block_size))
        done = torch.zeros(idx.size(0), 1, dtype=torch.bool, device=idx.device)
        for _ in range(max_new_tokens):
            logits = self.next_token_logits(idx, caches, attention_mask)
            # float: softmax and top-p's running sum in full precision, whatever the model's dtype (e.g. bf16)
            nxt = sample_next(logits.float(), temperature, do_sample, top_k, top_p, generator)  # (B, 1)
            if eos_token_id is not None:
                nxt = torch.where(done, ends[0], nxt)  # a finished row is padded with the (first) end id
                done |= (nxt == ends).any(dim=1, keepdim=True)  # (B, 1): the row's token is one of the end ids
            yield nxt
            if eos_token_id is not None and done.all():  # reading `done` waits for the GPU: only if rows can end
                return
            idx = torch.cat([idx, nxt], dim=1)
            if attention_mask is not None:
                attention_mask = torch.cat([attention_mask, torch.ones_like(nxt)], dim=1)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, do_sample=False, top_k=None, top_p=None,
                 eos_token_id=None, generator=None, attention_mask=None):
        """Continue each prompt of idx (B, T), token ids, by max_new_tokens tokens, each fed back in to choose the
        next; returns (B, T + new tokens), the prompt as given (see attention_mask in generate_stream) first. Call
        model.eval() first: in training mode dropout makes the choices random (warned of).

        Greedy (the most likely token) unless do_sample, which draws from softmax(logits / temperature), cut to the
        top_k tokens and/or to the top_p of probability (nucleus); generator seeds the draws (without do_sample those
        three are ignored, with a warning, and refused where sampling refuses them). A row that has emitted
        eos_token_id (or any of a list of ids) is padded with it, and generation stops early once every row has."""
        steps = self.generate_stream(idx, max_new_tokens, temperature=temperature, do_sample=do_sample, top_k=top_k,
                                     top_p=top_p, eos_token_id=eos_token_id, generator=generator,
                                     attention_mask=attention_mask)
        return torch.cat([idx, *steps], dim=1)  # a padded prompt as given, each row's new tokens after it

    # ---- configuration, optimizer, checkpoints ----

    # fill in the sizes of a preset and the defaults a minGPT-made config lacks; refuse what cannot work
    check_config = classmethod(checks.check_model_config)

    def num_parameters(self):
        return sum(p.numel() for p in self.parameters())  # parameters() counts the tied matrix once

    def configure_optimizers(self, train_config):
        """AdamW with weight decay on the 2-D weights, matmuls' and embeddings' (as nanoGPT; minGPT spares the
        embeddings), not on biases, layer norm gains or any other parameter of fewer than 2 dimensions; frozen
        parameters (requires_grad=False) are left out. It reads only self.parameters(), so any module can use it:
        GPT.configure_optimizers(classifier, train_config)."""
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": train_config.weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        device = next(self.parameters()).device.type
        fused = device in ('cuda', 'cpu')  # one kernel for the whole update instead of one per tensor
        return torch.optim.AdamW(groups, lr=train_config.learning_rate, betas=train_config.betas, fused=fused)

    @classmethod
    def from_checkpoint(cls, path, map_location='cpu', dtype=torch.float32):
        """Rebuild a model saved by the trainer or a project, on the device map_location reads its weights to (as
        torch.load); returns (model in eval mode, checkpoint dict). Its parameters are in dtype, as from_pretrained's
        ('auto': the dtype its weights were saved in, such as a bfloat16 model's, with no float32 copy)."""
        return rebuild_model(cls, path, map_location, dtype)

    # ---- GPT-2's released weights, in Hugging Face's layout (pretrained.py, which holds the download code) ----

    @classmethod
    def from_pretrained(cls, name_or_path, dtype=torch.float32):
        """GPT-2 with its trained weights: a hub id ('gpt2', 'gpt2-medium', 'gpt2-large', 'gpt2-xl'), downloaded
        once into the cache, or a directory in Hugging Face's layout (config.json plus model.safetensors or
        pytorch_model.bin, or the .index.json of their shards; e.g. written by save_pretrained). Returned in eval mode,
        its parameters in dtype (torch.bfloat16 halves the memory of float32, converted as it loads; 'auto': the dtype
        it was saved in)."""
        from mingpt.pretrained import load_gpt2
        return load_gpt2(cls, name_or_path, dtype)

    def save_pretrained(self, save_directory, eos_token_id=None):
        """Write config.json, generation_config.json and model.safetensors in Hugging Face's GPT-2 layout, readable by
        transformers' GPT2LMHeadModel.from_pretrained and by GPT.from_pretrained. A model that is not GPT-2 (another
        option, other weights, or a forward pass changed here) is refused before anything is written. eos_token_id
        (or a list of ids) is where transformers' generate stops: a vocabulary of your own passes its tokenizer's
        <|endoftext|> (tok.eot_token_id); left out, GPT-2's 50256, where the vocabulary has that id."""
        from mingpt.pretrained import save_gpt2
        return save_gpt2(self, save_directory, eos_token_id)


# ---- the KV cache, for generation ----

class KVCache:
    """Keys and values of the tokens already seen, for one layer: a new token attends to them instead of
    recomputing them, so it alone goes through the matmuls; only attention's reads grow with the context."""

    def __init__(self, batch_size, n_head, max_len, head_dim, device, dtype):
        # only the first `len` positions are ever read, so the rest needs no initialising
        self.k = torch.empty(batch_size, n_head, max_len, head_dim, device=device, dtype=dtype)
        self.v = torch.empty_like(self.k)
        self.len = 0

    def append(self, k, v):
        """Store the new keys/values (B, nh, T, hd) and return all of them so far."""
        checks.check_cache_fits(self, k)
        end = self.len + k.size(2)
        self.k[:, :, self.len:end] = k
        self.v[:, :, self.len:end] = v
        self.len = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def select(self, rows):
        """Keep (and duplicate) the given batch rows: in beam search each kept sequence continues from its
        parent's keys and values."""
        self.k, self.v = self.k[rows], self.v[rows]


# ---- one speed trick, out of the reader's way ----

class Dropout(nn.Dropout):
    """nn.Dropout (zero each element with probability p, scale the rest by 1/(1-p)) with its mask drawn by
    torch.rand on CPU (kept where rand >= p), faster there than nn.Dropout's Bernoulli sampler (the README's benchmarks
    say how much), in float32, as bfloat16's coarse draws would drop another fraction. Elsewhere it is nn.Dropout."""

    def forward(self, x):
        if not (self.training and 0 < self.p < 1 and x.is_cpu):
            return super().forward(x)
        return x * torch.rand_like(x, dtype=torch.float32).ge_(self.p).to(x.dtype).div_(1 - self.p)
