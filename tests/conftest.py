"""Shared test helpers. Tests that need the offline data files call data_dir() (or use the data_root fixture):
with $MINGPT_DATA_DIR unset the test is skipped, saying why, except under CI=true, where it fails instead, so
a CI run cannot pass by skipping everything."""
import errno
import importlib.util
import os
import re
import shlex
import sys
import zipfile
from pathlib import Path

# The suite compares numbers computed on the CPU in float32, as CI does: with a GPU in sight, the trainer's and the
# projects' device 'auto' would move their models there and change them. So the tests, and the processes they start,
# see no GPU unless MINGPT_TEST_GPU=1, which runs the tests of GPU code (python -m pytest -q tests -k cuda). Set
# before torch is imported, which may look for GPUs then.
if os.environ.get('MINGPT_TEST_GPU') != '1':
    os.environ['CUDA_VISIBLE_DEVICES'] = ''

import pytest  # noqa: E402
import torch  # noqa: E402

from mingpt.utils import RECORDED_VARIABLES  # noqa: E402

# torch 2.9 and newer set the float32 matmul precision per backend (torch.backends.cuda.matmul.fp32_precision); the
# tests of that API skip on an older torch
PER_BACKEND = hasattr(getattr(torch.backends.mkldnn, 'matmul', None), 'fp32_precision')


def pytest_configure(config):
    # torch's own: its first torch.compile imports torch.utils.mkldnn, which uses torch.jit.script_method (14 lines of
    # noise under whichever test compiles first)
    config.addinivalue_line('filterwarnings', 'ignore:`torch.jit.script_method` is deprecated:DeprecationWarning')


def data_dir(*parts):
    """Path of $MINGPT_DATA_DIR (joined with `parts`, e.g. data_dir('gpt2', 'vocab.bpe')); skips the calling test
    when the variable is unset or the file is missing, or fails it when the environment has CI=true."""
    root = os.environ.get('MINGPT_DATA_DIR')
    if not root:
        reason = 'MINGPT_DATA_DIR is not set; point it at the offline test data (e.g. ../shared/data)'
    else:
        path = Path(root).expanduser().joinpath(*parts)
        if path.exists():
            return path
        reason = f'{path} does not exist; MINGPT_DATA_DIR={root} lacks this file'
    if os.environ.get('CI', '').lower() == 'true':
        pytest.fail(reason + ' (CI=true: data-dependent tests must run)')
    pytest.skip(reason)


@pytest.fixture
def data_root():
    """The test-data folder ($MINGPT_DATA_DIR) as a Path; see data_dir."""
    return data_dir()


@pytest.fixture(scope='session', autouse=True)
def own_cache(tmp_path_factory):
    """A cache folder of the tests' own, from before any module's fixtures run: what the projects save there (the
    tokens of every text they train on) stays out of the user's ~/.cache/mingpt. A test may set MINGPT_CACHE_DIR.
    Hugging Face's hub cache, which from_pretrained also reads, is an empty folder: a gpt2 the user downloaded with
    transformers would answer the tests that a hub id is downloaded or refused offline."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv('MINGPT_CACHE_DIR', str(tmp_path_factory.mktemp('cache')))
        mp.setenv('HF_HUB_CACHE', str(tmp_path_factory.mktemp('hf_hub')))
        yield


@pytest.fixture
def no_network(monkeypatch):
    """Every download fails as on a machine without a network (a name that does not resolve)."""
    import requests

    import mingpt.data

    def offline(url, **kw):
        raise requests.ConnectionError('Name or service not known')
    monkeypatch.setattr(mingpt.data.requests, 'get', offline)


def perturb_norms(m):
    """Random layer norm gains and biases: at init (1, 0) every layer norm computes the same, so a block that used
    another of its norms would pass."""
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.LayerNorm):
                mod.weight.add_(torch.randn_like(mod.weight) * 0.5)
                mod.bias.add_(torch.randn_like(mod.bias) * 0.5)
    return m


def deflate(path):
    """Rewrite the zip archive at path (torch.save's format) with its members compressed, as torch.save never
    writes them."""
    with zipfile.ZipFile(path) as z:
        members = {name: z.read(name) for name in z.namelist()}
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_DEFLATED) as z:
        for name, body in members.items():
            z.writestr(name, body)


def full_disk_at(name):
    """A stand-in for Path.write_text that fails as a full disk does, half-way through writing a file whose name
    starts with `name` (as its temporary file's does: name.tmp<pid>); other files are written."""
    write_text = Path.write_text

    def write(path, text, **kw):
        if not Path(path).name.startswith(name):
            return write_text(path, text, **kw)
        write_text(path, text[:len(text) // 2], **kw)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return write


def load_project(name, folder='projects'):
    """Import projects/<name>.py (or <folder>/<name>.py) as a module (the projects are scripts, not a package)."""
    path = Path(__file__).resolve().parent.parent / folder / f'{name}.py'
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def refusal_of_a_pickled_path(load, path):
    """The message of load(path) refusing a file that holds a pickled Path, checked to end with the torch.load advice
    for one who trusts the file."""
    with pytest.raises(ValueError) as refused:
        load(path)
    message = str(refused.value)
    assert re.search(r"it holds a Python object \(pathlib\.(_local\.)?PosixPath\) .* If you trust whoever made it, "
                     r"load it yourself: torch.load\(path, weights_only=False\)$", message), message
    return message


def args_txt_words(line):
    """A command line of args.txt, `cd FOLDER && [NAME=value ...] python SCRIPT ARGS`, as (FOLDER, the variables it
    sets, the words from python on); the variables are checked to be this process's own."""
    cd, folder, and_, *words = shlex.split(line)
    assert (cd, and_) == ('cd', '&&'), line
    settings = {}
    while re.fullmatch(r'[A-Z_]+=.*', words[0], re.S):
        name, value = words.pop(0).split('=', 1)
        settings[name] = value
    assert settings == {name: os.environ[name] for name in RECORDED_VARIABLES if name in os.environ}, line
    return folder, settings, words


def started_as_script(monkeypatch, argv):
    """sys.argv and __main__ as `python SCRIPT ARGS` leaves them: setup_logging records a command only where __main__
    is a file. Under pytest-xdist __main__ is the worker's, which has none (pytest's own has one)."""
    monkeypatch.setattr('sys.argv', argv)
    monkeypatch.setattr(sys.modules['__main__'], '__file__', __file__, raising=False)
