"""Checkpoint files (mingpt/checkpoint.py): the ways on that its messages, and pretrained.py's, name, followed as
written. Saving, loading and rebuilding themselves are tested in test_utils.py, test_model.py and test_generate.py."""
import importlib
import re

import pytest
import torch

from mingpt.checkpoint import load_checkpoint
from mingpt.model import GPT

NAMED_FUNCTION = re.compile(r'mingpt\.(\w+)\.(save_checkpoint|model_state)\b')


def named(message):
    """The functions of mingpt's modules that message names as mingpt.<module>.<name>, imported as a reader would."""
    found = NAMED_FUNCTION.findall(message)
    assert found, message
    return {name: getattr(importlib.import_module(f'mingpt.{module}'), name) for module, name in found}


def tiny(**options):
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type=None, n_layer=1, n_head=2, n_embd=8, vocab_size=11, block_size=6, **options))
    return GPT(C)


def test_a_state_dict_alone_is_refused_with_a_way_to_save_it_that_works(tmp_path):
    """A bare state dict is refused with how to save a model that from_checkpoint rebuilds; the functions it named,
    mingpt.utils.save_checkpoint and mingpt.utils.model_state, had moved to mingpt.checkpoint."""
    model = tiny()
    torch.save(model.state_dict(), tmp_path / 'weights.pt')
    with pytest.raises(ValueError, match='it holds only weights') as refused:
        load_checkpoint(tmp_path / 'weights.pt')
    way = named(str(refused.value))
    way['save_checkpoint'](way['model_state'](model), tmp_path / 'model.pt')
    rebuilt, _ = GPT.from_checkpoint(tmp_path / 'model.pt')
    assert all(torch.equal(w, rebuilt.state_dict()[k]) for k, w in model.state_dict().items())


class Headed(GPT):
    def __init__(self, config):
        super().__init__(config)
        self.value_head = torch.nn.Linear(config.n_embd, 1)


@pytest.mark.parametrize('model', [lambda: tiny(pos_embd='sinusoidal'), lambda: Headed(tiny().config)],
                         ids=['another architecture', 'weights added'])
def test_save_pretrained_refuses_a_model_gpt2_has_no_layout_for_naming_a_save_that_works(tmp_path, model):
    """save_pretrained of a model that is not GPT-2's says to save it with the trainer's checkpoint instead, naming
    the function (mingpt.utils.save_checkpoint, which had moved to mingpt.checkpoint)."""
    model = model()
    with pytest.raises(ValueError, match="save it with the trainer's checkpoint") as refused:
        model.save_pretrained(tmp_path / 'hf')
    from mingpt.checkpoint import model_state
    named(str(refused.value))['save_checkpoint'](model_state(model), tmp_path / 'model.pt')
    assert load_checkpoint(tmp_path / 'model.pt')['model_class'] == type(model).__name__
