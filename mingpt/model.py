"""The GPT language model, top to bottom: attention, MLP, block, GPT, and generation.

References: OpenAI's GPT-2 (Radford et al. 2019) and Hugging Face's GPT2LMHeadModel, whose parameter names we keep
so that GPT-2 checkpoints map one to one onto this model.
"""
import math

import torch
import torch.nn as nn
from torch.nn import functional as F

from mingpt.sampling import sample_next
from mingpt.utils import CfgNode as CN, ConfigError, load_checkpoint


class KVCache:
    """Keys and values of the tokens already seen, for one layer: a new token attends to them instead of
    recomputing them, so each generated token costs the same whatever the context length."""

    def __init__(self, batch_size, n_head, max_len, head_dim, device, dtype):
        self.k = torch.zeros(batch_size, n_head, max_len, head_dim, device=device, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        self.len = 0

    def append(self, k, v):
        """Store the new keys/values (B, nh, T, hd) and return all of them so far."""
        end = self.len + k.size(2)
        self.k[:, :, self.len:end] = k
        self.v[:, :, self.len:end] = v
        self.len = end
        return self.k[:, :, :end], self.v[:, :, :end]


class CausalSelfAttention(nn.Module):
    """Multi-head masked self-attention: each position mixes the values of itself and the positions before it."""

    def __init__(self, config):
        super().__init__()
        if config.n_embd % config.n_head != 0:
            raise ConfigError(f"n_embd ({config.n_embd}) must be a multiple of n_head ({config.n_head})")
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # query, key, value for all heads, in that order
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)  # mixes the heads' outputs back into the residual
        self.attn_pdrop = config.attn_pdrop
        self.attn_dropout = nn.Dropout(config.attn_pdrop)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)
        self.explicit = config.attn_impl == 'explicit'
        self.weights = None  # the last attention weights (B, nh, T, T), kept only when keep_weights is set
        self.keep_weights = False

    def forward(self, x, cache=None):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        # heads: split the channels into n_head independent (B, nh, T, hd) attention problems
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if cache is not None:
            k, v = cache.append(k, v)
        if self.explicit or self.keep_weights:
            y = self.explicit_attention(q, k, v)
        else:
            y = self.sdpa_attention(q, k, v)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # heads side by side again
        return self.resid_dropout(self.c_proj(y))

    @staticmethod
    def causal_mask(Tq, Tk, device):
        """True where query i (the last Tq of Tk positions) may look at key j: j <= i, never the future."""
        return torch.ones(Tq, Tk, dtype=torch.bool, device=device).tril(diagonal=Tk - Tq)

    def explicit_attention(self, q, k, v):
        """Scaled dot-product attention written out: softmax(Q K^T / sqrt(d) + causal mask) V."""
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att.masked_fill(~self.causal_mask(q.size(2), k.size(2), q.device), float('-inf'))
        att = F.softmax(att, dim=-1)
        if self.keep_weights:
            self.weights = att.detach()
        return self.attn_dropout(att) @ v

    def sdpa_attention(self, q, k, v):
        """The same computation through PyTorch's fused kernels (flash / memory-efficient where available)."""
        Tq, Tk = q.size(2), k.size(2)
        dropout_p = self.attn_pdrop if self.training else 0.0
        if Tq == Tk:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
        # decoding with a cache: a single new query may see every key; several need the offset causal mask
        mask = None if Tq == 1 else self.causal_mask(Tq, Tk, q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


class MLP(nn.Module):
    """Position-wise feed-forward network: widen 4x, GELU, project back."""

    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.gelu = nn.GELU(approximate='tanh')  # GPT-2's GELU is the tanh approximation
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """A transformer block, pre-LN as GPT-2: layer norm before each sub-layer, its output added to the residual."""

    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x, cache=None):
        x = x + self.attn(self.ln_1(x), cache)  # residual connection around attention
        x = x + self.mlp(self.ln_2(x))  # and around the MLP
        return x


class GPT(nn.Module):
    """GPT Language Model"""

    PRESETS = {
        # names and sizes as in minGPT; n_layer, n_head, n_embd
        'openai-gpt': dict(n_layer=12, n_head=12, n_embd=768),  # 117M params
        'gpt2': dict(n_layer=12, n_head=12, n_embd=768),  # 124M params
        'gpt2-medium': dict(n_layer=24, n_head=16, n_embd=1024),  # 350M params
        'gpt2-large': dict(n_layer=36, n_head=20, n_embd=1280),  # 774M params
        'gpt2-xl': dict(n_layer=48, n_head=25, n_embd=1600),  # 1558M params
        'gopher-44m': dict(n_layer=8, n_head=16, n_embd=512),
        'gpt-mini': dict(n_layer=6, n_head=6, n_embd=192),
        'gpt-micro': dict(n_layer=4, n_head=4, n_embd=128),
        'gpt-nano': dict(n_layer=3, n_head=3, n_embd=48),
    }

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
        return C

    def __init__(self, config):
        super().__init__()
        self._resolve_sizes(config)
        self.config = config
        self.block_size = config.block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),  # token embedding
            wpe=nn.Embedding(config.block_size, config.n_embd),  # learned positional encoding
            drop=nn.Dropout(config.embd_pdrop),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied: the output head reads tokens like the input does

        # GPT-2's initialisation: N(0, 0.02), and residual projections scaled by 1/sqrt(2 * n_layer) so the
        # residual stream's variance does not grow with depth
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith('c_proj.weight'):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))
        print("number of parameters: %.2fM" % (self.num_parameters() / 1e6,))

    @classmethod
    def _resolve_sizes(cls, config):
        if config.vocab_size is None or config.block_size is None:
            raise ConfigError("model config needs vocab_size and block_size (e.g. from the dataset: "
                              "config.model.vocab_size = train_dataset.get_vocab_size())")
        sizes = (config.n_layer, config.n_head, config.n_embd)
        if config.model_type is not None:
            preset = tuple(cls.PRESETS.get(config.model_type, {}).values())
            if any(s is not None for s in sizes) and sizes != preset:
                raise ConfigError(f"give either model_type ({config.model_type!r}) or n_layer/n_head/n_embd, "
                                  "not both: set model_type=None to use explicit sizes")
            if config.model_type not in cls.PRESETS:
                raise ConfigError(f"unknown model_type {config.model_type!r}; presets are: "
                                  f"{', '.join(cls.PRESETS)} (or set model_type=None and n_layer/n_head/n_embd)")
            config.merge_from_dict(cls.PRESETS[config.model_type])
        elif any(s is None for s in sizes):
            raise ConfigError("give either model_type (one of: " + ', '.join(cls.PRESETS) + ") or all of "
                              f"n_layer, n_head, n_embd (got n_layer={sizes[0]}, n_head={sizes[1]}, n_embd={sizes[2]})")
        if getattr(config, 'attn_impl', 'sdpa') not in ('sdpa', 'explicit'):
            raise ConfigError(f"attn_impl must be 'sdpa' or 'explicit', not {config.attn_impl!r}")
        if not hasattr(config, 'attn_impl'):  # a config made by minGPT's own get_default_config
            config.attn_impl = 'sdpa'

    @classmethod
    def from_checkpoint(cls, path, map_location='cpu'):
        """Rebuild a model saved by the trainer or a project; returns (model, checkpoint dict)."""
        checkpoint = load_checkpoint(path, map_location)
        model = cls(CN(**checkpoint['model_config']))
        model.load_state_dict(checkpoint['model'])
        return model, checkpoint

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            torch.nn.init.ones_(module.weight)
            torch.nn.init.zeros_(module.bias)

    def num_parameters(self):
        return sum(p.numel() for p in self.parameters())  # parameters() counts the tied matrix once

    def configure_optimizers(self, train_config):
        """AdamW with weight decay on the weight matrices only (not biases or layer norm gains)."""
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": train_config.weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        device = next(self.parameters()).device.type
        fused = device in ('cuda', 'cpu')  # one kernel for the whole update instead of one per tensor
        return torch.optim.AdamW(groups, lr=train_config.learning_rate, betas=train_config.betas, fused=fused)

    def hidden_states(self, idx, caches=None):
        """The final hidden state (after ln_f) of every position: (B, T, n_embd). `caches` (from new_caches)
        hold the keys/values of earlier tokens; idx then holds only the new ones."""
        B, T = idx.size()
        start = caches[0].len if caches else 0
        if start + T > self.block_size:
            raise ValueError(f"cannot forward a sequence of length {start + T}: the model's context (block_size) "
                             f"is {self.block_size}; crop the input to its last {self.block_size} tokens")
        pos = torch.arange(start, start + T, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for i, block in enumerate(self.transformer.h):
            x = block(x, caches[i] if caches else None)
        return self.transformer.ln_f(x)

    def forward(self, idx, targets=None):
        logits = self.lm_head(self.hidden_states(idx))
        loss = None
        if targets is not None:  # -1 marks positions that do not count (padding)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    @torch.no_grad()
    def attention_maps(self, idx):
        """Attention weights of every layer for idx, a list of (B, n_head, T, T) tensors (for plots and teaching)."""
        attns = [block.attn for block in self.transformer.h]
        for a in attns:
            a.keep_weights = True
        try:
            self.hidden_states(idx)
        finally:
            for a in attns:
                a.keep_weights = False
        weights = [a.weights for a in attns]
        for a in attns:
            a.weights = None
        return weights

    def new_caches(self, batch_size):
        p = self.lm_head.weight
        hd = self.config.n_embd // self.config.n_head
        return [KVCache(batch_size, self.config.n_head, self.block_size, hd, p.device, p.dtype)
                for _ in range(self.config.n_layer)]

    @torch.no_grad()
    def generate_stream(self, idx, max_new_tokens, temperature=1.0, do_sample=False, top_k=None, top_p=None,
                        eos_token_id=None, generator=None):
        """Yield the next token of every row, (B, 1), one step at a time. A row that has emitted eos_token_id
        keeps yielding eos_token_id (padding) until all rows have, and then the stream stops."""
        B, T = idx.size()
        if T > self.block_size:
            raise ValueError(f"the prompt has {T} tokens but the model's context (block_size) is {self.block_size}; "
                             f"shorten it, e.g. idx[:, -{self.block_size}:]")
        if T == 0:
            raise ValueError("the prompt is empty; give at least one token (e.g. a start or newline token)")
        caches = self.new_caches(B)
        logits = self.lm_head(self.hidden_states(idx, caches)[:, -1, :])
        done = torch.zeros(B, 1, dtype=torch.bool, device=idx.device)
        window = idx
        for _ in range(max_new_tokens):
            nxt = sample_next(logits.float(), temperature, do_sample, top_k, top_p, generator)
            if eos_token_id is not None:
                nxt = nxt.masked_fill(done, eos_token_id)
                done |= nxt == eos_token_id
            yield nxt
            if eos_token_id is not None and done.all():
                return
            window = torch.cat([window, nxt], dim=1)[:, -self.block_size:]
            if caches[0].len < self.block_size:
                logits = self.lm_head(self.hidden_states(nxt, caches)[:, -1, :])
            else:
                # past block_size every position shifts by one, so the cached keys are stale: recompute the window
                logits = self.lm_head(self.hidden_states(window)[:, -1, :])

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, do_sample=False, top_k=None, top_p=None,
                 eos_token_id=None, generator=None):
        """Take a conditioning sequence of indices idx (LongTensor of shape (b,t)) and complete the sequence
        max_new_tokens times, feeding the predictions back into the model each time. Most likely you'll want
        to make sure to be in model.eval() mode of operation for this."""
        steps = list(self.generate_stream(idx, max_new_tokens, temperature, do_sample, top_k, top_p,
                                          eos_token_id, generator))
        return torch.cat([idx] + steps, dim=1)
