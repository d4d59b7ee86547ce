"""
Generate text from a GPT: OpenAI's GPT-2 (downloaded once), a Hugging Face GPT-2 directory, or a checkpoint that
projects/chargpt.py saved (then with its character vocabulary). The text is printed as it is generated.

    python projects/generate.py --prompt "The meaning of life is"
    python projects/generate.py --model=gpt2-medium --prompt "Once upon a time" --top_p=0.9 --num_samples=3
    python projects/generate.py --model=out/chargpt/model.pt --prompt "ROMEO:" --max_new_tokens=500
    python projects/generate.py --prompt_file=prompt.txt --num_beams=5 --max_new_tokens=40
    python projects/generate.py --help

Options are written --section.key=value as in every project; a key that is unique may be given alone
(--prompt "..." is --sample.prompt="..."). Sampling is the default (temperature, top_k, top_p); --greedy picks the
most probable token each step; --num_beams=k > 1 runs beam search (the k most probable sequences; printed at the
end, since the best beam is known only then). Generated text goes to stdout, everything else to stderr.
"""
import codecs
import contextlib
import sys
import time
from pathlib import Path

import torch

from mingpt.data import CharTokenizer
from mingpt.model import GPT
from mingpt.sampling import beam_search
from mingpt.utils import CfgNode as CN, ConfigError, set_seed


def get_config():
    C = CN()
    C.system = CN()
    C.system.seed = 1337
    C.system.device = 'auto'  # 'auto' (cuda if available), 'cpu', 'cuda', 'cuda:1', 'mps'
    C.model = 'gpt2'  # a hub id (gpt2, gpt2-medium, gpt2-large, gpt2-xl), an HF directory, or a .pt checkpoint
    C.sample = CN()
    C.sample.prompt = ''  # empty: start from <|endoftext|> (GPT-2) or a newline (character models)
    C.sample.prompt_file = None  # read the prompt from this file instead
    C.sample.max_new_tokens = 100
    C.sample.num_samples = 1
    C.sample.temperature = 1.0
    C.sample.top_k = None  # sample only among the k most probable tokens
    C.sample.top_p = None  # sample only among the most probable tokens that hold probability p (nucleus)
    C.sample.greedy = False  # always the most probable token (no randomness)
    C.sample.num_beams = 1  # > 1: beam search with this many beams
    C.sample.stop_at_eos = True  # stop a sample when GPT-2 writes <|endoftext|>
    return C


class Tokens:
    """The model's tokenizer behind one interface: text -> ids, and ids -> text for streaming, where a GPT-2 token
    may hold part of a UTF-8 character (an emoji is often 2-3 tokens): bytes are held back until the character is
    complete, so the stream never prints a replacement character that the finished text would not contain."""

    def __init__(self, chars=None):
        if chars is not None:
            self.char = CharTokenizer(chars)
            self.eos = None
        else:
            from mingpt.bpe import ENDOFTEXT_ID, get_encoder
            self.bpe = get_encoder()
            self.eos = ENDOFTEXT_ID
        self.is_char = chars is not None

    def encode(self, text):
        return self.char.encode(text) if self.is_char else self.bpe.encode(text, allowed_special=True)

    def start(self):
        """The ids of an empty prompt."""
        if not self.is_char:
            return [self.eos]
        if '\n' in self.char.stoi:
            return [self.char.stoi['\n']]
        raise ConfigError("this character model needs a prompt (--prompt=...): its vocabulary has no newline to "
                          "start from")

    def to_bytes(self, ids):
        return self.char.decode(ids).encode('utf-8') if self.is_char else self.bpe.decode_bytes(ids)

    def stream(self):
        """A fresh incremental decoder: .decode(bytes) returns the complete characters so far."""
        return codecs.getincrementaldecoder('utf-8')(errors='replace')


def load(name, device):
    """(model, Tokens) for a hub id, a Hugging Face directory, or a mingpt checkpoint file."""
    with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the generated text
        if Path(name).is_file():
            model, ckpt = GPT.from_checkpoint(name)
            if 'vocab' in ckpt:
                tokens = Tokens(chars=ckpt['vocab'])
            elif model.config.vocab_size == 50257:
                tokens = Tokens()
            else:
                raise ValueError(f"{name} holds no 'vocab' (a chargpt checkpoint has one) and its vocabulary of "
                                 f"{model.config.vocab_size} is not GPT-2's, so its tokens cannot be read")
        else:
            model = GPT.from_pretrained(name)
            if model.config.vocab_size != 50257:
                raise ValueError(f"{name} has a vocabulary of {model.config.vocab_size} tokens, not GPT-2's 50257, "
                                 "so GPT-2's tokenizer cannot read it")
            tokens = Tokens()
    return model.to(device).eval(), tokens


def main(argv):
    config = get_config()
    if '--help' in argv or '-h' in argv:
        print(__doc__)
    config.merge_from_args(argv)
    S = config.sample
    device = config.system.device
    if device == 'auto':
        device = 'cuda' if torch.cuda.is_available() else 'cpu'
    model, tokens = load(config.model, device)

    prompt = Path(S.prompt_file).read_text(encoding='utf-8') if S.prompt_file else S.prompt
    ids = tokens.encode(prompt) if prompt else tokens.start()
    if len(ids) > model.block_size:
        print(f"(the prompt has {len(ids)} tokens; keeping the last {model.block_size}, the model's context)",
              file=sys.stderr)
        ids = ids[-model.block_size:]
    idx = torch.tensor([ids], dtype=torch.long, device=device)
    eos = tokens.eos if S.stop_at_eos else None
    out = sys.stdout
    set_seed(config.system.seed)

    n_tokens, t0 = 0, time.perf_counter()
    if S.num_beams > 1:
        seqs, scores = beam_search(model, idx, S.max_new_tokens, S.num_beams, eos_token_id=eos)
        for i, (seq, score) in enumerate(list(zip(seqs, scores))[:S.num_samples]):
            new = seq[len(ids):].tolist()
            if eos is not None and eos in new:
                new = new[:new.index(eos)]
            n_tokens = n_tokens or len(new)  # the best beam's
            if S.num_samples > 1:
                print(f"--- beam {i + 1} (log-prob {score.item():.2f}) ---", file=sys.stderr, flush=True)
            out.write(prompt + tokens.to_bytes(new).decode('utf-8', errors='replace') + '\n')
    else:
        if S.greedy and S.num_samples > 1:
            print("(greedy decoding gives the same text every time: one sample)", file=sys.stderr)
            S.num_samples = 1
        for i in range(S.num_samples):
            if S.num_samples > 1:
                print(f"--- sample {i + 1} ---", file=sys.stderr, flush=True)
            out.write(prompt)
            out.flush()
            decoder = tokens.stream()
            for nxt in model.generate_stream(idx, S.max_new_tokens, temperature=S.temperature,
                                             do_sample=not S.greedy, top_k=S.top_k, top_p=S.top_p, eos_token_id=eos):
                n_tokens += 1
                token = nxt.item()
                if token == eos:
                    break
                out.write(decoder.decode(tokens.to_bytes([token])))
                out.flush()
            out.write(decoder.decode(b'', final=True) + '\n')
    seconds = time.perf_counter() - t0
    beams = f", beam search with {S.num_beams} beams" if S.num_beams > 1 else ''
    print(f"({n_tokens} tokens in {seconds:.2f} s: {n_tokens / seconds:.1f} tokens/s on {device}{beams})",
          file=sys.stderr)


if __name__ == '__main__':
    try:
        main(sys.argv[1:])
    except (ConfigError, ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
