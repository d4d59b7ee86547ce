"""The course's exam: each answer that mingpt gives (parameters, FLOPs, one forward pass, sampling, beam search,
BPE) against the answer worked by hand, in plain Python and NumPy that never calls the code under test."""
import math
import re

import numpy as np
import pytest
import torch

from mingpt.bpe import train_bpe
from mingpt.data import TokenDataset
from mingpt.model import GPT, causal_mask, sinusoidal_positions
from mingpt.sampling import beam_search, sampling_probs
from mingpt.trainer import Trainer, flops_per_token


def preset(model_type, vocab_size, block_size):
    config = GPT.get_default_config()
    config.merge_from_dict(dict(model_type=model_type, vocab_size=vocab_size, block_size=block_size))
    with torch.device('meta'):  # sizes only: no memory, no initialisation
        return GPT(config)


def parameters_by_hand(V, T, L, C):
    """Each term by name: a Linear(n, m) has n x m weights and m biases, a LayerNorm(C) a gain and a bias of C each;
    the head is the token embedding (tied), counted once."""
    block = dict(ln_1=2 * C, c_attn=C * 3 * C + 3 * C, attn_c_proj=C * C + C, ln_2=2 * C, c_fc=C * 4 * C + 4 * C,
                 mlp_c_proj=4 * C * C + C)
    return dict(wte=V * C, wpe=T * C, blocks=L * sum(block.values()), ln_f=2 * C)


@pytest.mark.parametrize('model_type, V, T, L, C, printed', [('gpt-nano', 65, 128, 3, 48, '0.09M'),
                                                              ('gpt2', 50257, 1024, 12, 768, '124.44M')])
def test_parameter_count_term_by_term_by_hand(model_type, V, T, L, C, printed, capsys):
    """gpt-nano: wte 65 x 48 = 3,120; wpe 128 x 48 = 6,144; per block 96 + 7,056 + 2,352 + 96 + 9,408 + 9,264 =
    28,272, times 3 = 84,816; ln_f 96: 94,176 in all. gpt2: 38,597,376 + 786,432 + 85,054,464 + 1,536 = 124,439,808."""
    hand = parameters_by_hand(V, T, L, C)
    model = preset(model_type, V, T)
    assert f'number of parameters: {printed}\n' in capsys.readouterr().out
    found = dict.fromkeys(hand, 0)
    for name, p in model.named_parameters():  # the tied lm_head.weight is wte's tensor: it is not listed again
        found['blocks' if '.h.' in name else name.split('.')[1]] += p.numel()
    assert found == hand and model.num_parameters() == sum(hand.values())
    assert sum(hand.values()) == {'gpt-nano': 94_176, 'gpt2': 124_439_808}[model_type]


def test_flops_per_token_and_mfu_by_hand(monkeypatch):
    """PaLM's 6N + 12 L T C, N without the position table (a lookup, no matmul). gpt-nano at T = 128:
    6 x (94,176 - 6,144) + 12 x 3 x 128 x 48 = 528,192 + 221,184 = 749,376. gpt2 at T = 1024: 6 x 123,653,376 +
    12 x 12 x 1024 x 768 = 855,166,464 (nanoGPT's 6N with N = 123.65M). MFU: FLOPs per token x tokens/s of all the
    GPUs, over their peak: 749,376 x 1e6 / (2 x 100e12) = 0.00374688."""
    for (model_type, V, T, L, C), want in ((('gpt-nano', 65, 128, 3, 48), 749_376),
                                           (('gpt2', 50257, 1024, 12, 768), 855_166_464)):
        hand = parameters_by_hand(V, T, L, C)
        assert 6 * (sum(hand.values()) - hand['wpe']) + 12 * L * T * C == want
        assert flops_per_token(preset(model_type, V, T), T) == want
    config = GPT.get_default_config()
    config.merge_from_dict(dict(model_type='gpt-nano', vocab_size=65, block_size=128))
    trainer = Trainer(Trainer.get_default_config(), GPT(config), TokenDataset(list(range(65)) * 4, 128))
    trainer.device_type, trainer.world_size = 'cuda', 2  # as on two GPUs of a peak of 100 TFLOP/s each
    monkeypatch.setattr('mingpt.trainer.peak_flops', lambda device: 100e12)
    assert trainer._mfu(1e6, 128) == pytest.approx(0.00374688, rel=1e-12)


def forward_by_hand(W, idx, targets, norm, activation, pos_embd):
    """One layer, one head, on len(idx) tokens, from the weights W (numpy, by parameter name), step by step."""
    T, C = len(idx), W['transformer.wte.weight'].shape[1]
    w = {k.removeprefix('transformer.h.0.'): v for k, v in W.items()}

    def layer_norm(x, name):  # over the channels, eps 1e-5, then gain and bias
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-5) * w[f'{name}.weight'] + w[f'{name}.bias']

    def linear(x, name):
        return x @ w[f'{name}.weight'].T + w[f'{name}.bias']

    def attention(x):
        q, k, v = np.split(linear(x, 'attn.c_attn'), 3, axis=1)  # (T, C) each
        scores = q @ k.T / math.sqrt(C)  # one head: its size is C
        scores[np.triu_indices(T, 1)] = -np.inf  # the causal mask: no query sees a later key
        weights = np.exp(scores - scores.max(1, keepdims=True))
        weights /= weights.sum(1, keepdims=True)
        return linear(weights @ v, 'attn.c_proj')

    def mlp(x):
        h = linear(x, 'mlp.c_fc')
        if activation == 'gelu':  # GPT-2's tanh approximation
            h = 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
        else:
            h = np.maximum(h, 0)
        return linear(h, 'mlp.c_proj')

    if pos_embd == 'learned':
        x = W['transformer.wte.weight'][idx] + W['transformer.wpe.weight'][:T]
    else:  # PE(p, 2i) = sin(p / 10000^(2i/C)), PE(p, 2i+1) = cos(the same); the tokens scaled by sqrt(C)
        angle = np.array([[p / 10000 ** (2 * (i // 2) / C) for i in range(C)] for p in range(T)])
        x = W['transformer.wte.weight'][idx] * math.sqrt(C) + np.where(np.arange(C) % 2, np.cos(angle), np.sin(angle))
    if norm == 'pre':
        x = x + attention(layer_norm(x, 'ln_1'))
        x = x + mlp(layer_norm(x, 'ln_2'))
        x = layer_norm(x, 'transformer.ln_f')
    else:  # Add & Norm; the last layer norm is then the block's
        x = layer_norm(x + attention(x), 'ln_1')
        x = layer_norm(x + mlp(x), 'ln_2')
    logits = x @ W['transformer.wte.weight'].T  # the tied head
    top = logits.max(1)
    log_sum_exp = top + np.log(np.exp(logits - top[:, None]).sum(1))
    return logits, np.mean(log_sum_exp - logits[np.arange(T), targets])  # cross-entropy, averaged over positions


@pytest.mark.parametrize('norm', ['pre', 'post'])
@pytest.mark.parametrize('activation', ['gelu', 'relu'])
@pytest.mark.parametrize('pos_embd', ['learned', 'sinusoidal'])
def test_one_forward_of_one_layer_one_head_on_three_tokens_by_hand(norm, activation, pos_embd):
    config = GPT.get_default_config()
    config.merge_from_dict(dict(model_type=None, n_layer=1, n_head=1, n_embd=4, vocab_size=7, block_size=3,
                                norm=norm, activation=activation, pos_embd=pos_embd))
    torch.manual_seed(0)
    model = GPT(config).eval().double()
    with torch.no_grad():  # weights of order 1 everywhere (layer norms' gains and biases too), so every step counts
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.7)
    W = {name: p.detach().numpy() for name, p in model.named_parameters()}
    idx, targets = [2, 5, 1], [5, 1, 6]
    logits, loss = model(torch.tensor([idx]), torch.tensor([targets]))
    hand_logits, hand_loss = forward_by_hand(W, idx, targets, norm, activation, pos_embd)
    np.testing.assert_allclose(logits[0].detach().numpy(), hand_logits, atol=1e-6, rtol=0)
    assert loss.item() == pytest.approx(hand_loss, abs=1e-6)


def test_the_causal_mask_and_an_odd_sinusoidal_table_by_hand():
    # 2 new queries after 3 cached keys: query 0 is position 3 and sees keys 0-3, query 1 sees all 5
    assert causal_mask(2, 5).int().tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert causal_mask(3, 3).int().tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    # d = 5: frequencies 1, 10000^-0.4 = 0.025119, 10000^-0.8 = 0.000631; the fifth column is a sine
    pe = sinusoidal_positions(3, 5)
    np.testing.assert_allclose(pe[1], [0.841471, 0.540302, 0.025116, 0.999685, 0.000631], atol=1e-6)
    np.testing.assert_allclose(pe[2], [0.909297, -0.416147, 0.050217, 0.998738, 0.001262], atol=1e-6)


def test_temperature_top_k_and_top_p_on_five_logits_by_hand():
    """Logits 2, 1, 0, -1, -2: e^0, e^-1, ... = 1, 0.3679, 0.1353, 0.0498, 0.0183, sum 1.5713."""
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, -2.0]])
    for options, hand in [({}, [0.6364, 0.2341, 0.0861, 0.0317, 0.0117]),
                          # halved: 1, 0.6065, 0.3679, 0.2231, 0.1353, sum 2.3329
                          (dict(temperature=2.0), [0.4287, 0.2600, 0.1577, 0.0956, 0.0580]),
                          # the first three: 1, 0.3679, 0.1353, sum 1.5032
                          (dict(top_k=3), [0.6652, 0.2447, 0.0900, 0, 0]),
                          # 0.6364 < 0.8, 0.6364 + 0.2341 = 0.8705 >= 0.8: two tokens, 1 / 1.3679 and 0.3679 / 1.3679
                          (dict(top_p=0.8), [0.7311, 0.2689, 0, 0, 0]),
                          # doubled: 4, 2, 0 -> 0.8668, 0.1173, 0.0159 after top-k; 0.8668 < 0.9: two tokens again
                          (dict(temperature=0.5, top_k=3, top_p=0.9), [0.8808, 0.1192, 0, 0, 0])]:
        np.testing.assert_allclose(sampling_probs(logits, **options)[0], hand, atol=1e-4, err_msg=str(options))


class Bigram:
    """A hand-made 4-token language model: the next token's probabilities depend on the last token alone."""
    block_size = 8

    def __init__(self, probs):
        self.logprobs = torch.tensor(probs).log()

    def check_prompt(self, idx, attention_mask, eos_token_id):
        return idx, attention_mask

    def new_caches(self, batch_size, max_len):
        return []  # nothing to cache

    def next_token_logits(self, seq, caches, attention_mask):
        return self.logprobs[seq[:, -1]]


def test_two_beams_on_a_hand_made_model_by_hand():
    model = Bigram([[0.1, 0.4, 0.3, 0.2],  # after token 0
                    [0.25, 0.25, 0.25, 0.25],  # after 1
                    [0.05, 0.05, 0.9, 0.0],  # after 2
                    [0.7, 0.1, 0.1, 0.1]])  # after 3
    # step 1 from prompt 0: the two best are 1 (0.4) and 2 (0.3); 3 (0.2) is dropped
    seqs, scores = beam_search(model, torch.tensor([[0]]), 1, num_beams=2)
    assert seqs.tolist() == [[0, 1], [0, 2]] and scores.exp().tolist() == pytest.approx([0.4, 0.3])
    # step 2: 0.4 x 0.25 = 0.1 for each token after 1; 0.3 x 0.9 = 0.27 for 2 after 2. Greedy would take 1 then 0
    # (0.1); beam search finds 0.27. The second beam is 1, 0 (of the four ties at 0.1, the lowest id, as argmax)
    seqs, scores = beam_search(model, torch.tensor([[0]]), 2, num_beams=2)
    assert seqs.tolist() == [[0, 2, 2], [0, 1, 0]] and scores.exp().tolist() == pytest.approx([0.27, 0.1])
    # beam search is a search of 2 beams, not of all: 3, 0 has 0.2 x 0.7 = 0.14 > 0.1, but 3 left at step 1
    assert 0.2 * 0.7 > scores[1].exp().item()


def test_bpe_first_merges_and_their_counts_by_hand(capsys):
    """'the cat sat. the hat sat. the cat ate.' in GPT-2's words: the, ' cat' x2, ' sat' x2, '.' x3, ' the' x2,
    ' hat', ' ate'. 'a'+'t' is in ' cat' (2), ' sat' (2), ' hat' and ' ate': 6. Then 't'+'h' and 'h'+'e' tie at 3
    (the + ' the' x2); the tie goes to the pair that comes first in the text, 't'+'h' at 0; then 'th'+'e' (3). Every
    pair left occurs twice at most: ' '+'c' (at 3, the first), ' c'+'at', ' '+'s', ' s'+'at', ' '+'the'; then
    ' '+'h' (at 16), the first pair of count 1."""
    encoder = train_bpe('the cat sat. the hat sat. the cat ate.', 256 + 9 + 1, show=True)
    hand = [('a', 't', 6), ('t', 'h', 3), ('th', 'e', 3), (' ', 'c', 2), (' c', 'at', 2), (' ', 's', 2),
            (' s', 'at', 2), (' ', 'the', 2), (' ', 'h', 1)]
    shown = re.findall(r"merge \d+: '(.*?)' \+ '(.*?)' -> .* \(count (\d+)\)", capsys.readouterr().out)
    assert [(a, b, int(n)) for a, b, n in shown] == hand
    assert encoder.bpe_merges == [(a.replace(' ', '\u0120'), b.replace(' ', '\u0120')) for a, b, _ in hand]
