"""
Looks inside a GPT: for a prompt, draws the attention weights of every layer and head as one PNG grid (row i of a
map is query token i, spreading its attention over the keys j <= i; each row sums to 1), or one map large. With
--positions it draws the positional encodings instead: the sinusoidal table of "Attention is all you need" and the
model's learned table (wpe) side by side, each with the cosine similarity between its positions.

    python projects/attention.py --model=out/chargpt/model.pt --prompt="ROMEO: But soft, what light"
    python projects/attention.py --model=out/chargpt/model.pt --layer=1 --head=2     # one map, large
    python projects/attention.py --model=out/chargpt/model.pt --layer=1              # every head of one layer
    python projects/attention.py --model=gpt2 --prompt="The cat sat on the mat because it" --out=out/gpt2.png
    python projects/attention.py --model=out/chargpt/model.pt --positions     # out/positions.png

--model takes a checkpoint of projects/chargpt.py (model.pt or ckpt.pt; characters or a BPE vocabulary, as it
records) or of sentiment.py's pretrain (out/sentiment/pretrain/model.pt; a token outside its vocabulary is drawn as
U+FFFD), a GPT-2 hub id (gpt2, gpt2-medium, ...) or a Hugging Face GPT-2 directory (its own vocab.json and
merges.txt if it has them, else GPT-2's). Layers and heads count from 0. Needs matplotlib: pip install -e ".[plot]".
From Python, main([...]) returns the picture too: a notebook cell that ends with it shows it.
"""
import os

import torch

from mingpt.model import sinusoidal_positions
from mingpt.plot import attention_figure, positions_figure, readable, save
from mingpt.pretrained import load_model_and_tokenizer, warn_if_unknown
from mingpt.utils import CfgNode as CN, ConfigError, check_range, plural, refuse_ignored, run_cli


def get_config():
    C = CN()
    # a chargpt checkpoint, a GPT-2 hub id or a Hugging Face GPT-2 directory
    C.model = './out/chargpt/model.pt'
    C.plot = CN()
    C.plot.prompt = "ROMEO:\nBut soft, what light through yonder window breaks?"
    C.plot.layer = None  # draw only this layer (a row of the grid); with head, one map
    C.plot.head = None  # draw only this head (a column of the grid)
    C.plot.positions = False  # draw the positional encodings instead of attention
    C.plot.out = None  # the PNG to write; default out/attention.png (or out/positions.png)
    return C


def draw_attention(model, tokenizer, P, name):
    """The attention grid of the prompt, cut to the layer and head asked for."""
    try:
        ids = tokenizer.encode(P.prompt)
    except ValueError as e:  # characters outside a character vocabulary
        default = (" (the default prompt, Shakespeare's: give one in your text's characters with --prompt=...)"
                   if P.prompt == get_config().plot.prompt else '')
        raise ConfigError(f"plot.prompt{default}: {e}") from None
    warn_if_unknown(tokenizer, ids)
    if not 1 <= len(ids) <= model.block_size:
        fix = "shorten it (a map of a long prompt is hard to read anyway)" if ids else "give some text"
        raise ConfigError(f"plot.prompt is {len(ids)} tokens long; it must be 1 to {model.block_size} tokens, the "
                          f"model's context (block_size): {fix}")
    n_layer, n_head = model.config.n_layer, model.config.n_head
    check_range('plot.layer', P.layer, 0, n_layer - 1, integer=True, none_ok=True)
    check_range('plot.head', P.head, 0, n_head - 1, integer=True, none_ok=True)
    maps = torch.cat(model.attention_maps(torch.tensor([ids])))  # (n_layer, n_head, T, T)
    layers = range(n_layer) if P.layer is None else [P.layer]
    heads = range(n_head) if P.head is None else [P.head]
    # a byte-level BPE token may be part of a character: its bytes, which readable() labels as such
    tokens = [tokenizer.decode_bytes([i]) for i in ids]
    title = f'attention in {name}, {len(ids)} {plural(len(ids), "token")}: "{readable(P.prompt)}"'
    return attention_figure(maps[list(layers)][:, list(heads)], tokens, title, list(layers), list(heads))


def draw_positions(model, name):
    """The sinusoidal table of the model's size beside its learned one (if it has one: a sinusoidal model has none)."""
    wpe = model.transformer.wpe
    learned = wpe.weight.detach() if model.config.pos_embd == 'learned' else None
    if learned is None:
        print(f"{name} uses {model.config.pos_embd} positions: there is no learned table to draw beside them")
    table = sinusoidal_positions(model.block_size, model.config.n_embd)
    whose = f'learned: {name}' if learned is not None else f'{name} uses {model.config.pos_embd} positions'
    return positions_figure(table, learned, f'positional encodings, {model.block_size} positions x '
                                            f'{model.config.n_embd} dimensions ({whose})')


def main(argv):
    config = get_config()
    config.merge_from_args(argv, usage=__doc__)
    P = config.plot
    if P.positions:
        refuse_ignored('plot', P, get_config().plot, ['prompt', 'layer', 'head'],
                       "plot.positions draws the positional encodings, not the attention of a prompt; leave them out")
    model, tokenizer = load_model_and_tokenizer(config.model)
    if P.positions:
        fig = draw_positions(model, config.model)
    else:
        fig = draw_attention(model, tokenizer, P, config.model)
    out = P.out or os.path.join('out', 'positions.png' if P.positions else 'attention.png')
    print(f"wrote {save(fig, out)}")
    return fig  # a notebook cell that ends with attention.main([...]) shows the picture


if __name__ == '__main__':
    run_cli(main)
