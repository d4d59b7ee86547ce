from setuptools import setup

setup(
    name='mingpt',
    version='0.1.0',
    description='A minimal, readable and fast GPT in PyTorch, drop-in compatible with minGPT',
    packages=['mingpt'],
    python_requires='>=3.10',
    # the oldest that mingpt runs on: torch 2.5 for nn.Module.register_load_state_dict_pre_hook (mingpt/__init__.py
    # refuses older), numpy 1.24 for its ValueError on ragged sequences, which TokenDataset turns into advice
    install_requires=['torch>=2.5', 'numpy>=1.24', 'regex', 'requests', 'tqdm'],
    extras_require={
        # the reference libraries the tests compare against, and matplotlib for the pictures' tests
        'test': ['pytest', 'transformers', 'tiktoken', 'safetensors', 'matplotlib>=3.8'],
        # loss curves, attention maps, positional encodings (mingpt.plot, projects/attention.py, ablation.py)
        'plot': ['matplotlib>=3.8'],  # 3.8: tick labels take a font family list
    },
)
