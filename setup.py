from setuptools import setup

setup(
    name='mingpt',
    version='0.1.0',
    description='A minimal, readable and fast GPT in PyTorch, drop-in compatible with minGPT',
    packages=['mingpt'],
    python_requires='>=3.10',
    install_requires=['torch', 'numpy', 'regex', 'requests', 'tqdm'],
    extras_require={
        # the reference libraries the tests compare against, and matplotlib for the pictures' tests
        'test': ['pytest', 'transformers', 'tiktoken', 'safetensors', 'matplotlib'],
        # loss curves, attention maps, positional encodings (mingpt.plot, projects/attention.py, ablation.py)
        'plot': ['matplotlib'],
    },
)
