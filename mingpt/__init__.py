"""mingpt: a minimal, readable and fast GPT in PyTorch."""
import re

import torch

# the oldest torch with every API mingpt calls (nn.Module.register_load_state_dict_pre_hook, which GPT() calls, came
# last, in 2.5); on an older one a run would fail deep inside, so it is refused here, before anything else is imported
TORCH_NEEDED = (2, 5)


def check_torch(version):
    """Raise an ImportError naming the installed and the needed version if torch `version` is older than
    TORCH_NEEDED. Read as numbers: '2.10.0' is newer than '2.5', and a build of 2.5 ('2.5.0a0+git...') is 2.5."""
    if tuple(int(n) for n in re.match(r'(\d+)\.(\d+)', version).groups()) < TORCH_NEEDED:
        needed = '.'.join(map(str, TORCH_NEEDED))
        raise ImportError(f"mingpt needs torch >= {needed}, but torch {version} is installed: upgrade it with "
                          f"pip install 'torch>={needed}' (or in a virtual environment, to leave the system's alone)")


check_torch(torch.__version__)

from mingpt.model import GPT  # noqa: E402 (after the check, which names an old torch before it breaks an import)
from mingpt.trainer import Trainer  # noqa: E402
from mingpt.utils import CfgNode, set_seed  # noqa: E402

__all__ = ['GPT', 'Trainer', 'CfgNode', 'BPETokenizer', 'set_seed']


def __getattr__(name):
    # mingpt.BPETokenizer is imported on first use, so that `python -m mingpt.bpe` does not find bpe half-imported
    if name == 'BPETokenizer':
        from mingpt.bpe import BPETokenizer
        return BPETokenizer
    raise AttributeError(f"module 'mingpt' has no attribute {name!r}")
