"""The GPT language model, top to bottom: attention, MLP, block, GPT, and generation.

References: OpenAI's GPT-2 (Radford et al. 2019) and Hugging Face's GPT2LMHeadModel, whose parameter names we keep
so that GPT-2 checkpoints map one to one onto this model.
"""
import json
import math
import os
from pathlib import Path

import torch
import torch.nn as nn
from torch.nn import functional as F

from mingpt.data import fetch
from mingpt.sampling import sample_next
from mingpt.utils import CfgNode as CN, ConfigError, atomic_write, load_checkpoint


class KVCache:
    """Keys and values of the tokens already seen, for one layer: a new token attends to them instead of
    recomputing them, so each generated token costs the same whatever the context length."""

    def __init__(self, batch_size, n_head, max_len, head_dim, device, dtype):
        # only the first `len` positions are ever read, so the rest needs no initialising
        self.k = torch.empty(batch_size, n_head, max_len, head_dim, device=device, dtype=dtype)
        self.v = torch.empty_like(self.k)
        self.len = 0

    def append(self, k, v):
        """Store the new keys/values (B, nh, T, hd) and return all of them so far."""
        end = self.len + k.size(2)
        self.k[:, :, self.len:end] = k
        self.v[:, :, self.len:end] = v
        self.len = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def select(self, rows):
        """Keep (and duplicate) the given batch rows: in beam search each kept sequence continues from its
        parent's keys and values. Only the filled part is copied."""
        for name in ('k', 'v'):
            old = getattr(self, name)
            new = old.new_empty((len(rows),) + old.shape[1:])
            new[:, :, :self.len] = old[rows, :, :self.len]
            setattr(self, name, new)


class Linear(nn.Linear):
    """nn.Linear (same parameters, same result) with a faster CPU path for the few rows of generation, where each
    new token reads every weight from memory once. MKL streams an (in, out) matrix, GPT-2's own Conv1D layout, much
    faster than nn.Linear's (out, in) one: so on CPU in eval mode the weight's memory holds W^T (still seen as
    (out, in), through a transposed view), and each thread multiplies its slice of the input features by its block
    of rows, the partial products then summed (GPT-2 124M generates 1.25x faster on 2 cores than with (out, in)
    blocks). train() restores the (out, in) layout, which PyTorch's fused optimizer needs to be fast. From ~100
    rows on (training, long prompts) MKL's own threading wins, so only up to FEW_ROWS rows take this path."""

    FEW_ROWS = 64

    def train(self, mode=True):
        super().train(mode)
        inference = not mode and self.weight.is_cpu
        if inference != self.weight.t().is_contiguous():
            with torch.no_grad():  # the same Parameter (optimizers and tied modules keep it), its memory relaid
                self.weight.data = self.weight.t().contiguous().t() if inference else self.weight.contiguous()
        return self

    def forward(self, x):
        rows, threads = x.numel() // self.in_features, torch.get_num_threads()
        if not x.is_cpu or threads == 1 or rows > self.FEW_ROWS or self.in_features % threads:
            return F.linear(x, self.weight, self.bias)  # training and long prompts leave here, first thing
        w_t = self.weight.t()  # (in, out)
        if not w_t.is_contiguous():  # (out, in) memory: train mode, or a weight assigned by hand
            return F.linear(x, self.weight, self.bias)
        k = self.in_features // threads  # each thread's slice of the input features
        parts = torch.bmm(x.reshape(rows, threads, k).transpose(0, 1), w_t.view(threads, k, self.out_features))
        y = parts.sum(0)
        if self.bias is not None:
            y += self.bias  # in place, so y keeps its dtype (bf16 under autocast), as F.linear's output does
        return y.view(*x.shape[:-1], self.out_features)


class Dropout(nn.Dropout):
    """nn.Dropout: zero each element with probability p, scale the rest by 1/(1-p). On CPU the mask is drawn
    with torch.rand, twice as fast as the Bernoulli sampler F.dropout uses; drawing masks is a fifth of a small
    model's training step there."""

    def forward(self, x):
        if not (self.training and 0 < self.p < 1 and x.is_cpu):
            return super().forward(x)
        return x * torch.rand_like(x).ge_(self.p).div_(1 - self.p)  # keep where rand >= p: probability 1-p


class CausalSelfAttention(nn.Module):
    """Multi-head masked self-attention: each position mixes the values of itself and the positions before it."""

    def __init__(self, config):
        super().__init__()
        if config.n_embd % config.n_head != 0:
            raise ConfigError(f"n_embd ({config.n_embd}) must be a multiple of n_head ({config.n_head})")
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.c_attn = Linear(config.n_embd, 3 * config.n_embd)  # query, key, value for all heads, in that order
        self.c_proj = Linear(config.n_embd, config.n_embd)  # mixes the heads' outputs back into the residual
        self.attn_dropout = Dropout(config.attn_pdrop)
        self.resid_dropout = Dropout(config.resid_pdrop)
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
        # with dropout, SDPA on CPU falls back to this same math unfused; the explicit path is faster there
        unfused = self.training and self.attn_dropout.p > 0 and x.is_cpu
        if self.explicit or self.keep_weights or unfused:
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
        """Scaled dot-product attention written out: softmax(Q K^T / sqrt(d) + M) V, where the causal mask M is
        -inf where a query would see the future (so softmax gives it weight 0) and 0 elsewhere."""
        B, nh, Tq, hd = q.size()
        Tk = k.size(2)
        M = torch.zeros(Tq, Tk, device=q.device, dtype=q.dtype)
        M.masked_fill_(~self.causal_mask(Tq, Tk, q.device), float('-inf'))
        # M + (Q K^T) / sqrt(d) for all B * nh heads in one fused op (baddbmm: beta * M + alpha * Q @ K^T)
        att = torch.baddbmm(M, q.reshape(B * nh, Tq, hd), k.reshape(B * nh, Tk, hd).transpose(1, 2),
                            alpha=1 / math.sqrt(hd))
        att = F.softmax(att, dim=-1).view(B, nh, Tq, Tk)
        if self.keep_weights:
            self.weights = att.detach()
        return self.attn_dropout(att) @ v

    def sdpa_attention(self, q, k, v):
        """The same computation through PyTorch's fused kernels (flash / memory-efficient where available)."""
        Tq, Tk = q.size(2), k.size(2)
        dropout_p = self.attn_dropout.p if self.training else 0.0
        if Tq == Tk:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
        # decoding with a cache: a single new query may see every key; several need the offset causal mask
        mask = None if Tq == 1 else self.causal_mask(Tq, Tk, q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


class MLP(nn.Module):
    """Position-wise feed-forward network: widen 4x, GELU, project back."""

    def __init__(self, config):
        super().__init__()
        self.c_fc = Linear(config.n_embd, 4 * config.n_embd)
        self.gelu = nn.GELU(approximate='tanh')  # GPT-2's GELU is the tanh approximation
        self.c_proj = Linear(4 * config.n_embd, config.n_embd)
        self.dropout = Dropout(config.resid_pdrop)

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
            drop=Dropout(config.embd_pdrop),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd),
        ))
        self.lm_head = Linear(config.n_embd, config.vocab_size, bias=False)
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
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
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
        for step in range(max_new_tokens):
            nxt = sample_next(logits.float(), temperature, do_sample, top_k, top_p, generator)
            if eos_token_id is not None:
                nxt = nxt.masked_fill(done, eos_token_id)
                done |= nxt == eos_token_id
            yield nxt
            if step == max_new_tokens - 1 or (eos_token_id is not None and done.all()):
                return  # no forward for a token nobody will read
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

    # ---- GPT-2 weights in Hugging Face's layout: the names map one to one, four matrices are transposed ----

    @classmethod
    def from_pretrained(cls, name_or_path):
        """GPT-2 with its trained weights: a hub id ('gpt2', 'gpt2-medium', 'gpt2-large', 'gpt2-xl'), downloaded
        once into the cache, or a directory in Hugging Face's layout (config.json plus model.safetensors or
        pytorch_model.bin, e.g. written by save_pretrained). Sizes come from config.json. Returned in eval mode."""
        config_path, weights_path = _hf_files(name_or_path)
        model = cls(_config_from_hf(cls.get_default_config(), config_path))
        _load_hf_weights(model, weights_path)
        return model.eval()

    def save_pretrained(self, save_directory):
        """Write config.json and model.safetensors in Hugging Face's GPT-2 layout, readable by transformers'
        GPT2LMHeadModel.from_pretrained and by GPT.from_pretrained. Each file is written atomically."""
        from safetensors.torch import save_file
        c = self.config
        hf = dict(model_type='gpt2', architectures=['GPT2LMHeadModel'], vocab_size=c.vocab_size,
                  n_positions=c.block_size, n_embd=c.n_embd, n_layer=c.n_layer, n_head=c.n_head, n_inner=None,
                  activation_function='gelu_new', layer_norm_epsilon=1e-5, initializer_range=0.02,
                  embd_pdrop=c.embd_pdrop, resid_pdrop=c.resid_pdrop, attn_pdrop=c.attn_pdrop,
                  tie_word_embeddings=True)
        # GPT-2's vocabulary: <|endoftext|> begins and ends texts; another vocabulary has no such token we know of
        eot = GPT2_EOT if c.vocab_size > GPT2_EOT else None
        hf.update(bos_token_id=eot, eos_token_id=eot)
        tensors = {k: (v.t() if k.endswith(HF_CONV1D) else v).detach().cpu().contiguous()
                   for k, v in self.state_dict().items() if k != 'lm_head.weight'}  # tied to wte: stored once
        folder = Path(save_directory)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(folder / 'model.safetensors', lambda tmp: save_file(tensors, tmp, metadata={'format': 'pt'}))
        atomic_write(folder / 'config.json', lambda tmp: Path(tmp).write_text(json.dumps(hf, indent=2) + '\n'))
        return folder


HF_MODELS = ('gpt2', 'gpt2-medium', 'gpt2-large', 'gpt2-xl')
HF_URL = 'https://huggingface.co/{name}/resolve/main/{file}'
HF_CONV1D = ('attn.c_attn.weight', 'attn.c_proj.weight', 'mlp.c_fc.weight', 'mlp.c_proj.weight')  # (in, out)
HF_BUFFERS = ('.attn.bias', '.attn.masked_bias')  # HF's causal mask constants, not parameters
GPT2_EOT = 50256


def _hf_files(name_or_path):
    """(config.json, weights file) for a hub id or a directory in Hugging Face's layout."""
    folder = Path(name_or_path).expanduser()
    if folder.is_dir():
        weights = [folder / f for f in ('model.safetensors', 'pytorch_model.bin') if (folder / f).exists()]
        if not (folder / 'config.json').exists() or not weights:
            sharded = any(folder.glob('*.index.json')) * ' (sharded checkpoints, *.index.json, are not supported)'
            raise FileNotFoundError(f"{folder} is not a Hugging Face GPT-2 directory{sharded}: it needs config.json "
                                    f"and model.safetensors or pytorch_model.bin; it has {sorted(os.listdir(folder))}")
        return folder / 'config.json', weights[0]
    if name_or_path in HF_MODELS:
        return tuple(fetch(f'hf/{name_or_path}/{f}', url=HF_URL.format(name=name_or_path, file=f))
                     for f in ('config.json', 'model.safetensors'))
    raise ValueError(f"unknown pretrained model {name_or_path!r}: give one of {', '.join(HF_MODELS)} or a directory "
                     "holding config.json and model.safetensors (or pytorch_model.bin); no such directory exists")


def _config_from_hf(C, config_path):
    """Our config from Hugging Face's GPT-2 config.json; refuses variants this model does not implement."""
    hf = json.loads(Path(config_path).read_text())
    if hf.get('model_type', 'gpt2') != 'gpt2':
        raise ValueError(f"{config_path} describes a {hf['model_type']!r} model; only GPT-2 checkpoints load here")
    missing = [k for k in ('n_layer', 'n_head', 'n_embd', 'vocab_size', 'n_positions') if k not in hf]
    if missing:
        raise ValueError(f"{config_path} lacks {', '.join(missing)}: not a GPT-2 config.json")
    unsupported = {k: hf[k] for k, ok in [('activation_function', ('gelu_new', 'gelu_pytorch_tanh')),
                                         ('n_inner', (None, 4 * hf['n_embd'])), ('layer_norm_epsilon', (1e-5,)),
                                         ('scale_attn_weights', (True,)), ('scale_attn_by_inverse_layer_idx', (False,))]
                   if k in hf and hf[k] not in ok}
    if unsupported:
        raise ValueError(f"{config_path} asks for a GPT-2 variant this model does not implement: {unsupported}")
    C.model_type = None
    C.n_layer, C.n_head, C.n_embd = hf['n_layer'], hf['n_head'], hf['n_embd']
    C.vocab_size, C.block_size = hf['vocab_size'], hf['n_positions']
    for k in ('embd_pdrop', 'resid_pdrop', 'attn_pdrop'):
        setattr(C, k, hf.get(k, getattr(C, k)))
    return C


def _load_hf_weights(model, path):
    """Copy a Hugging Face GPT-2 state dict into model. Accepts the hub's base-model keys ('h.0.attn...', with the
    attn.bias buffers) and GPT2LMHeadModel's ('transformer.h.0.attn...', lm_head tied and usually omitted)."""
    try:
        if path.suffix == '.safetensors':
            from safetensors.torch import load_file
            weights = load_file(path)
        else:
            weights = torch.load(path, map_location='cpu', weights_only=True)
    except Exception as e:
        raise ValueError(f"cannot read {path} ({type(e).__name__}: {str(e)[:200]}): the file is truncated or "
                         "corrupt; delete it and download or save it again") from None
    ours = model.state_dict()
    done = {'lm_head.weight'}  # tied to transformer.wte.weight
    for key, w in weights.items():
        name = key if key.startswith('transformer.') or key == 'lm_head.weight' else 'transformer.' + key
        if name.endswith(HF_BUFFERS):
            continue
        if name == 'lm_head.weight':
            wte = weights.get('transformer.wte.weight', weights.get('wte.weight'))
            if wte is not None and not torch.equal(w, wte):
                raise ValueError(f"{path}: lm_head.weight differs from wte.weight; this GPT ties them, so an untied "
                                 "head cannot be loaded")
            continue
        if name not in ours:
            raise ValueError(f"{path}: unexpected key {key!r}; is this a GPT-2 checkpoint?")
        if name.endswith(HF_CONV1D):
            w = w.t()  # HF's Conv1D stores (in, out); nn.Linear wants (out, in)
        if w.shape != ours[name].shape:
            transposed = ' (transposed from Conv1D)' * name.endswith(HF_CONV1D)
            raise ValueError(f"{path}: key {key!r} has shape {tuple(w.shape)}{transposed} but the model built from "
                             f"config.json expects {tuple(ours[name].shape)}; the "
                             "weights and config.json do not belong together")
        with torch.no_grad():
            ours[name].copy_(w)
        done.add(name)
    missing = sorted(set(ours) - done)
    if missing:
        raise ValueError(f"{path} lacks {len(missing)} of the model's weights, e.g. {missing[:3]}; the file is "
                         "incomplete or not a GPT-2 checkpoint")

