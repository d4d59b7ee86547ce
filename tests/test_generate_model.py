"""Generation from Python: model.generate, generate_stream, the Engine's generate and beam_search, and the checks
they share on the prompt (GPT.check_prompt)."""
import pytest
import torch

from mingpt.engine import Engine
from mingpt.model import GPT
from mingpt.sampling import beam_search


@pytest.fixture(scope='module')
def model():
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=11, block_size=16))
    torch.manual_seed(0)
    return GPT(C).eval()


PROMPT = torch.tensor([[1, 2, 3], [0, 0, 0], [4, 5, 6], [0, 0, 0]])
MASK = torch.tensor([[1, 1, 1], [0, 0, 0], [0, 1, 1], [0, 0, 0]])  # rows 1 and 3: padding only


@pytest.mark.parametrize('generate, rows', [
    (lambda m: m.generate(PROMPT, 3, attention_mask=MASK), 'rows 1, 3'),
    (lambda m: next(m.generate_stream(PROMPT, 3, do_sample=True, attention_mask=MASK)), 'rows 1, 3'),
    (lambda m: Engine(m).generate(PROMPT, 3, attention_mask=MASK), 'rows 1, 3'),
    (lambda m: beam_search(m, PROMPT[1:2], 3, 2, attention_mask=MASK[1:2]), 'row 0'),  # one prompt
], ids=['generate', 'generate_stream', 'Engine.generate', 'beam_search'])
def test_a_prompt_row_of_padding_only_is_refused_by_name(model, generate, rows):
    with pytest.raises(ValueError, match=f"attention_mask marks no real token in prompt {rows}: every row needs"):
        generate(model)


def test_a_row_of_one_real_token_among_padding_continues_as_it_would_alone(model):
    idx, mask = torch.tensor([[1, 2, 3], [0, 0, 7]]), torch.tensor([[1, 1, 1], [0, 0, 1]])
    out = model.generate(idx, 4, attention_mask=mask)
    assert out[1, 3:].tolist() == model.generate(torch.tensor([[7]]), 4)[0, 1:].tolist()
