"""The fast decode path, kept apart from model.py's reading order (nanochat's engine.py is the precedent): a KV
cache of fixed size, written at a slot held in a tensor, so that every decode step has the same shapes and
torch.compile compiles it once (on CUDA as a CUDA graph, mode='reduce-overhead').

    from mingpt.engine import Engine
    out = Engine(model, compile=True).generate(idx, 100, attention_mask=mask)  # GPT.generate's arguments

The prompt goes through the model's own cached forward (GPT.next_token_logits); its keys and values are copied into
the fixed buffers, and each new token attends over the whole buffer with a mask that hides the slots not yet
written and the padding. Past block_size the engine hands over to GPT.generate_stream, whose sliding window
recomputes the last block_size tokens every step (eager: each window is a new shape). model.generate stays the
default and the plain path; the engine gives the same tokens.
"""
import torch

from mingpt.sampling import sample_next

SLOTS = 64  # buffer lengths are rounded up to a multiple of this, so prompts of similar lengths share one compile


class StaticKVCache:
    """One layer's keys and values in buffers of a fixed length, written at slot `at` (a (1,) tensor that all
    layers share and the engine advances): the shapes never change, so neither does the compiled step."""

    def __init__(self, batch_size, n_head, length, head_dim, at, device, dtype):
        # zeros, not empty: a hidden slot gets attention weight 0, and 0 times a NaN left in memory is NaN
        self.k = torch.zeros(batch_size, n_head, length, head_dim, device=device, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        self.at = at
        for buffer in (self.k, self.v):
            torch._dynamo.mark_static_address(buffer)  # a CUDA graph reads them in place instead of copying them

    def fill(self, prompt_cache):
        """Copy the prompt's keys and values (from GPT.new_caches' KVCache) into the first slots."""
        T = prompt_cache.len
        self.k[:, :, :T], self.v[:, :, :T] = prompt_cache.k[:, :, :T], prompt_cache.v[:, :, :T]

    def append(self, k, v):
        """Write the new token's key and value (B, nh, 1, hd) at slot `at`; return the whole buffers (B, nh, S, hd)."""
        self.k.index_copy_(2, self.at, k)
        self.v.index_copy_(2, self.at, v)
        return self.k, self.v


def decode_step(model, token, caches, keep, n_pad):
    """Logits (B, vocab_size) of the token after `token` (B, 1), which goes to slot caches[0].at. keep (B, S) is
    False on the prompt's padding; n_pad (B, 1) counts it, so a row's positions start at its first real token."""
    at, tf = caches[0].at, model.transformer
    x = tf.drop(tf.wte(token) + tf.wpe(at - n_pad))  # (B, 1, n_embd)
    slots = torch.arange(keep.size(1), device=keep.device)
    mask = (keep & (slots <= at))[:, None, None, :]  # (B, 1, 1, S): real tokens written so far, never the future
    for block, cache in zip(tf.h, caches):
        x = block(x, mask, cache)
    return model.lm_head(tf.ln_f(x)[:, -1])


class Engine:
    """Generation over a fixed-size KV cache. compile: False (eager), True (torch.compile; on CUDA with CUDA graphs),
    or a dict of torch.compile's options (e.g. dict(backend='aot_eager'))."""

    def __init__(self, model, compile=False):
        self.model = model
        self.step = decode_step
        self.cuda_graphs = False
        if compile:
            cuda = model.lm_head.weight.is_cuda
            options = compile if isinstance(compile, dict) else dict(mode='reduce-overhead' if cuda else None)
            self.cuda_graphs = options.get('mode') == 'reduce-overhead'
            self.step = torch.compile(decode_step, fullgraph=True, dynamic=False, **options)
        self.caches = []

    def buffers(self, batch_size, length):
        """The per-layer StaticKVCaches for this shape, kept between calls: a CUDA graph records their addresses."""
        c, p = self.model.config, self.model.lm_head.weight
        shape = (batch_size, c.n_head, length, c.n_embd // c.n_head)
        if not self.caches or self.caches[0].k.shape != shape or self.caches[0].k.dtype != p.dtype:
            at = torch.zeros(1, dtype=torch.long, device=p.device)
            self.caches = [StaticKVCache(*shape[:3], shape[3], at, p.device, p.dtype) for _ in range(c.n_layer)]
        return self.caches

    def prefill(self, idx, attention_mask, length):
        """Run the prompt (B, T) through the model, fill the buffers; return its next-token logits, keep and n_pad."""
        B, T = idx.shape
        prompt_caches = self.model.new_caches(B, T)
        logits = self.model.next_token_logits(idx, prompt_caches, attention_mask)
        caches = self.buffers(B, length)
        for cache, prompt_cache in zip(caches, prompt_caches):
            cache.fill(prompt_cache)
        caches[0].at.fill_(T)
        keep = torch.ones(B, length, dtype=torch.bool, device=idx.device)
        if attention_mask is None:
            return logits, keep, torch.zeros(B, 1, dtype=torch.long, device=idx.device)
        keep[:, :T] = attention_mask.bool()
        return logits, keep, T - attention_mask.sum(1, keepdim=True)

    def next_tokens(self, idx, max_new_tokens, attention_mask, sampling):
        """Each step's next tokens (B, 1): from the fixed buffers while the sequence fits the model's context, then
        from GPT.generate_stream's sliding window."""
        T, block_size = idx.size(1), self.model.block_size
        if max_new_tokens < 1:
            return
        length = min(-(-(T + max_new_tokens - 1) // SLOTS) * SLOTS, block_size)  # the last token is never fed
        logits, keep, n_pad = self.prefill(idx, attention_mask, length)
        at = self.caches[0].at
        new = []
        for slot in range(T, T + max_new_tokens):
            new.append(sample_next(logits.float(), **sampling))
            yield new[-1]
            if slot == T + max_new_tokens - 1 or slot == length:
                break
            if self.cuda_graphs:
                torch.compiler.cudagraph_mark_step_begin()  # the last step's logits are used up: overwrite them
            logits = self.step(self.model, new[-1], self.caches, keep, n_pad)
            at += 1
        rest = max_new_tokens - len(new)
        if rest:  # past block_size: every position shifts each step, as in GPT.generate
            seq = torch.cat([idx, *new], dim=1)[:, -block_size:]
            if attention_mask is not None:
                new_mask = attention_mask.new_ones(idx.size(0), len(new))
                attention_mask = torch.cat([attention_mask, new_mask], dim=1)[:, -block_size:]
            yield from self.model.generate_stream(seq, rest, attention_mask=attention_mask, **sampling)

    @torch.no_grad()
    def generate_stream(self, idx, max_new_tokens, temperature=1.0, do_sample=False, top_k=None, top_p=None,
                        eos_token_id=None, generator=None, attention_mask=None):
        """GPT.generate_stream's tokens, one (B, 1) step at a time, through the fixed-size cache."""
        idx, attention_mask = self.model.check_prompt(idx, attention_mask)
        sampling = dict(temperature=temperature, do_sample=do_sample, top_k=top_k, top_p=top_p, generator=generator)
        done = torch.zeros(idx.size(0), 1, dtype=torch.bool, device=idx.device)
        for nxt in self.next_tokens(idx, max_new_tokens, attention_mask, sampling):
            if eos_token_id is not None:
                nxt = nxt.masked_fill(done, eos_token_id)
                done |= nxt == eos_token_id
            yield nxt
            if done.all():
                return

    def warm_up(self, idx, max_new_tokens, attention_mask=None):
        """Compile the step for this batch's shape (and on CUDA, record its graph) before anything is timed."""
        for _ in zip(range(4), self.generate_stream(idx, max_new_tokens, attention_mask=attention_mask)):
            pass

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, do_sample=False, top_k=None, top_p=None,
                 eos_token_id=None, generator=None, attention_mask=None):
        """GPT.generate's result: the prompt as given, then each row's new tokens."""
        steps = self.generate_stream(idx, max_new_tokens, temperature, do_sample, top_k, top_p, eos_token_id,
                                     generator, attention_mask)
        return torch.cat([idx, *steps], dim=1)
