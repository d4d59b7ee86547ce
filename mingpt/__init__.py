"""mingpt: a minimal, readable and fast GPT in PyTorch."""
from mingpt.bpe import BPETokenizer
from mingpt.model import GPT
from mingpt.trainer import Trainer
from mingpt.utils import CfgNode, set_seed

__all__ = ['GPT', 'Trainer', 'CfgNode', 'BPETokenizer', 'set_seed']
