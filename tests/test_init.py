import ast
import importlib
import re
from pathlib import Path

import pytest
import torch

import mingpt


@pytest.mark.parametrize('old', ['2.4.1', '2.3.1+cpu', '1.13.1', '2.1.0'])
def test_an_older_torch_is_refused_at_import_naming_both_versions(monkeypatch, old):
    """torch 2.1-2.4 would import mingpt and then fail inside GPT() (nn.Module.register_load_state_dict_pre_hook) or a
    run (AdamW(fused=True) on CPU, torch.amp.GradScaler), with an error that does not say the version is the cause."""
    monkeypatch.setattr(torch, '__version__', old)
    with pytest.raises(ImportError, match=rf"mingpt needs torch >= 2\.5, but torch {re.escape(old)} is installed: "
                                          r"upgrade it with pip install 'torch>=2\.5'"):
        importlib.reload(mingpt)
    monkeypatch.undo()
    importlib.reload(mingpt)  # the installed torch passes, and the package is whole again


@pytest.mark.parametrize('new', ['2.5.0', '2.5.0a0+git1234abc', '2.10.0', '3.0.0', torch.__version__])
def test_torch_2_5_and_newer_pass_the_check_as_numbers_not_strings(new):
    mingpt.check_torch(new)  # '2.10.0' < '2.5' as strings


def test_setup_py_declares_the_torch_that_the_import_checks():
    setup = ast.parse((Path(__file__).parents[1] / 'setup.py').read_text())
    call = next(n for n in ast.walk(setup) if isinstance(n, ast.Call) and getattr(n.func, 'id', '') == 'setup')
    requires = ast.literal_eval(next(k.value for k in call.keywords if k.arg == 'install_requires'))
    assert f"torch>={'.'.join(map(str, mingpt.TORCH_NEEDED))}" in requires
