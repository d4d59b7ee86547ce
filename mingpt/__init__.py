"""mingpt: a minimal, readable and fast GPT in PyTorch."""
from mingpt.model import GPT
from mingpt.trainer import Trainer
from mingpt.utils import CfgNode, set_seed

__all__ = ['GPT', 'Trainer', 'CfgNode', 'BPETokenizer', 'set_seed']


def __getattr__(name):
    # mingpt.BPETokenizer is imported on first use, so that `python -m mingpt.bpe` does not find bpe half-imported
    if name == 'BPETokenizer':
        from mingpt.bpe import BPETokenizer
        return BPETokenizer
    raise AttributeError(f"module 'mingpt' has no attribute {name!r}")
