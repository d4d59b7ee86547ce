"""The fast decode path, kept apart from model.py's reading order (nanochat's engine.py is the precedent).

    from mingpt.engine import Engine
    out = Engine(model, compile=True).generate(idx, 100, attention_mask=mask)  # GPT.generate's arguments

GPT's own generation loop (GPT.generate and generate_stream: the same code, so the same tokens) runs over the
engine's next_token_logits. The prompt goes through the model's cached forward, and its keys and values fill a KV
cache of fixed size (prompt plus new tokens, rounded up); each new token is then written at a slot held in a tensor
and attends over the whole buffer, with a mask that hides the slots not yet written and the padding. Past block_size
the model's sliding window takes over, eager: every window is new, as every position shifts.

Why fixed sizes: every decode step has the same shapes, so torch.compile compiles it once (a batch of another shape
compiles it again, with dynamic shapes for every shape after it). On CUDA the step is a CUDA graph. On CPU inductor
freezes the weights into the step as constants, prepacked for its GEMM kernels (one more copy of them in memory): an
engine serves the weights it was compiled with and refuses to run after they change.
"""
import functools
import types

import torch

from mingpt.model import GPT, KVCache
from mingpt.utils import plural

SLOTS = 64  # buffer lengths are rounded up to a multiple of this, so prompts of similar lengths share one compile


class StaticKVCache:
    """One layer's keys and values in buffers of a fixed length, written at slot `at` (a (1,) tensor that all
    layers share): the shapes never change, so neither does the compiled step.

    `len` counts the tokens written as model.KVCache's does, at every point a module can read it (attention typed in
    with rotary positions reads them from it): the prompt's after prefill; in a step, its slot, plus one once this
    layer has appended its token. The count lives on the host, set by the engine between steps: the step itself only
    stores a constant, so the compiled graph never depends on it (a module that reads it makes it an input of the
    graph, which CUDA graphs record again for each value)."""

    def __init__(self, batch_size, n_head, length, head_dim, at, device, dtype):
        # zeros, not empty: a hidden slot gets attention weight 0, and 0 times a NaN left in memory is NaN
        self.k = torch.zeros(batch_size, n_head, length, head_dim, device=device, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        self.at = at
        self.start(0)
        for buffer in (self.k, self.v):
            torch._dynamo.mark_static_address(buffer)  # a CUDA graph reads them in place instead of copying them

    @property
    def len(self):
        return self.written + self.new

    def start(self, written):
        """Before a step, whose token goes to slot `written`, or after the prompt, of `written` tokens."""
        self.written, self.new = written, 0

    def append(self, k, v):
        """Write the new token's key and value (B, nh, 1, hd) at slot `at`; return the whole buffers (B, nh, S, hd)."""
        self.k.index_copy_(2, self.at, k.to(self.k.dtype))  # under autocast k and v come in bf16/fp16
        self.v.index_copy_(2, self.at, v.to(self.v.dtype))
        self.new = 1  # a constant stored, not the count read: the step's graph stays the same at every token
        return self.k, self.v

    def select(self, rows):
        """KVCache.select, which beam search calls to continue each beam from its parent's rows: new buffers of
        another batch size at every step, where the engine's are fixed (a compiled step, a CUDA graph)."""
        raise TypeError("beam_search reorders the KV caches' rows at every step, which an Engine's fixed buffers do "
                        "not allow: call beam_search(model, ...) with the model itself")


class PromptCache(KVCache):
    """The model's KVCache over a StaticKVCache's buffers, with none of its own: the prompt's cached forward writes
    its keys and values straight into the buffers' first slots."""

    def __init__(self, cache):
        self.k, self.v, self.len = cache.k, cache.v, 0

    def append(self, k, v):
        heads, given = self.k.size(1), k.size(1)
        if given != heads:  # KVCache would spread one head over all of them, then a step fail deep inside
            raise ValueError(f"the attention gives keys and values of {given} {plural(given, 'head')} for its {heads} "
                             f"query heads (config.n_head): an Engine's buffers hold {heads}, one per query head, so "
                             "multi-query or grouped-query attention does not fit them; generate with model.generate")
        return super().append(k, v)


def decode_step(model, token, caches, keep, n_pad):
    """Logits (B, vocab_size) of the token after `token` (B, 1), which goes to slot caches[0].at. keep (B, S) is
    False on the prompt's padding; n_pad (B, 1) counts it, so a row's positions start at its first real token."""
    at = caches[0].at
    x = model.embed(token, at - n_pad)  # (B, 1, n_embd)
    slots = torch.arange(keep.size(1), device=keep.device)
    mask = (keep & (slots <= at))[:, None, None, :]  # (B, 1, 1, S): real tokens written so far, never the future
    for block, cache in zip(model.transformer.h, caches):
        x = block(x, mask, cache)
    return model.lm_head(model.transformer.ln_f(x)[:, -1])


class Engine:
    """GPT's own generation loop (GPT.generate_stream and GPT.generate, the same code) over this engine's
    new_caches and next_token_logits: fixed-size buffers and one decode step per token. compile: False (eager),
    True (torch.compile: on CUDA with CUDA graphs, on CPU with max-autotune and the weights frozen in), or a dict
    of torch.compile's options (dict(backend='aot_eager')). One generation at a time: a stream started over
    another stops the older one (they would share the buffers)."""

    def __init__(self, model, compile=False):
        cls = type(getattr(model, '_orig_mod', model))  # torch.compile(model)'s wrapper has no such methods of its own
        own = [f for f in ('hidden_states', 'next_token_logits') if getattr(cls, f) is not getattr(GPT, f)]
        if own:  # a subclass's own code, which decode_step would pass by: other tokens than model.generate's
            raise ValueError(f"{type(model).__name__} has its own {' and '.join(own)}, which the engine's decode step "
                             "does not run (it repeats GPT's): generate with model.generate, or make the change in "
                             "the blocks or embed, which the step calls")
        self.model, self.block_size, self.check_prompt = model, model.block_size, model.check_prompt
        self.step = decode_step
        self.cuda_graphs = False
        self.frozen_weights = None  # the weights' version counters, once they are frozen into the compiled step
        if compile:
            cuda = model.lm_head.weight.is_cuda
            default = dict(mode='reduce-overhead' if cuda else 'max-autotune-no-cudagraphs')
            options = compile if isinstance(compile, dict) else default
            self.cuda_graphs = options.get('mode') == 'reduce-overhead'
            self.step = torch.compile(own_copy(decode_step), fullgraph=True, **options)
            if not cuda and options.get('backend', 'inductor') == 'inductor':
                self.step = functools.partial(run_frozen, self.step)
                self.frozen_weights = weight_versions(model)
        self.caches = self.generating = []
        self.keep = self.n_pad = None  # the prompt's padding, set by prefill

    generate_stream = GPT.generate_stream
    generate = GPT.generate

    def new_caches(self, batch_size, max_len):
        """Empty StaticKVCaches for max_len tokens, rounded up to a multiple of SLOTS (at most block_size). The
        buffers are kept from call to call while the shape stays: a CUDA graph records their addresses."""
        if self.frozen_weights is not None and weight_versions(self.model) != self.frozen_weights:
            raise RuntimeError("the model's weights changed after this Engine compiled its decode step, which "
                               "holds them as constants on CPU: build a new Engine(model, compile=True) to generate "
                               "with them")
        c, p = self.model.config, self.model.lm_head.weight
        length = min(-(-max_len // SLOTS) * SLOTS, self.block_size)
        shape = (batch_size, c.n_head, length, c.n_embd // c.n_head)
        old = self.caches[0].k if self.caches else None
        if old is None or (old.shape, old.dtype, old.device) != (shape, p.dtype, p.device):
            with torch.inference_mode(False):  # kept between calls: usable in and out of inference mode
                at = torch.zeros(1, dtype=torch.long, device=p.device)
                self.caches = [StaticKVCache(*shape[:3], shape[3], at, p.device, p.dtype) for _ in range(c.n_layer)]
        for cache in self.caches:
            cache.start(0)
        self.generating = list(self.caches)  # a list of its own per generation: the stream it serves is known by it
        return self.generating

    def next_token_logits(self, seq, caches, attention_mask=None):
        """GPT.next_token_logits for seq (B, T), the whole sequence so far: the prompt goes through the model and
        fills the buffers, then each token they have not seen through one decode step (in generate, the one just
        chosen). Past the buffers (only at block_size) the model's sliding window takes over."""
        if caches is not self.generating:  # the buffers, and the prompt's padding, are another generation's now
            raise RuntimeError("this Engine has started another generation since this one: an Engine serves one "
                               "generation at a time; give each stream its own Engine(model, ...)")
        T, S, seen = seq.size(1), caches[0].k.size(2), caches[0].len
        if T > S:
            return self.model.next_token_logits(seq, None, attention_mask)
        if seen == 0:
            return self.prefill(seq, caches, attention_mask)
        if T <= seen:  # no token to run the step on; the model's caches refuse it too
            raise ValueError(f"this Engine's buffers hold {seen} tokens and seq has {T}: pass the whole sequence so "
                             "far, ending in the tokens not passed before (e.g. the token just chosen)")
        for t in range(seen, T):
            caches[0].at.fill_(t)  # the token's slot: its index in seq, the prompt's padding included
            for cache in caches:
                cache.start(t)
            if self.cuda_graphs:
                torch.compiler.cudagraph_mark_step_begin()  # the last step's logits are used up: overwrite them
            # a copy with its own strides: a column's stride is T, a new one each step, and dynamo guards on strides
            token = seq[:, t:t + 1].clone(memory_format=torch.contiguous_format)
            logits = self.step(self.model, token, caches, self.keep, self.n_pad)
        return logits

    def prefill(self, idx, caches, attention_mask):
        """The prompt (B, T) through the model's own cached forward, its KVCaches writing the keys and values straight
        into the buffers' first T slots: caches of their own held a second copy of them, to be copied over."""
        B, T = idx.shape
        logits = self.model.next_token_logits(idx, [PromptCache(cache) for cache in caches], attention_mask)
        for cache in caches:
            cache.start(T)
        self.keep = torch.ones(B, caches[0].k.size(2), dtype=torch.bool, device=idx.device)
        self.n_pad = torch.zeros(B, 1, dtype=torch.long, device=idx.device)
        if attention_mask is not None:
            self.keep[:, :T] = attention_mask.bool()
            self.n_pad = T - attention_mask.long().sum(1, keepdim=True)
        return logits

    def warm_up(self, idx, max_new_tokens, attention_mask=None):
        """Compile the step for this batch's shape (and on CUDA, record its graph) before anything is timed."""
        for _ in zip(range(4), self.generate_stream(idx, max_new_tokens, attention_mask=attention_mask)):
            pass


def run_frozen(step, *args):
    """Call the compiled step with inductor's freezing on, for the compile that a first call or a new shape starts:
    the weights are folded in as constants, prepacked for inductor's CPU GEMM kernels (max-autotune's choice)."""
    with torch._inductor.config.patch(freezing=True):
        return step(*args)


def own_copy(fn):
    """fn with a code object of its own. Dynamo keeps compiled code per code object, and its guards do not see a
    frozen weight change: without a copy, a new Engine on a retrained model would reuse an older Engine's step."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def weight_versions(model):
    """Where each parameter's data lives and its version counter: an in-place change (an optimizer step,
    load_state_dict) moves the counter, and `p.data = ...` the address."""
    return [(p.data_ptr(), p._version) for p in model.parameters()]
