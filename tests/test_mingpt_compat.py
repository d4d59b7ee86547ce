"""What code written for Karpathy's minGPT finds here, where the other test files do not already check it."""
import pytest
import torch

pytest.importorskip('transformers')
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

from mingpt.model import GPT  # noqa: E402


@pytest.mark.parametrize('repo, weights', [('models--gpt2', 'model.safetensors'),
                                           ('models--openai-community--gpt2', 'pytorch_model.bin')])
def test_from_pretrained_reads_the_weights_transformers_left_in_its_cache_offline(tmp_path, monkeypatch, no_network,
                                                                                   repo, weights):
    """minGPT's from_pretrained called transformers, which keeps GPT-2 in its hub cache: offline (a cluster's compute
    node) that cache was enough, here it was ignored and the call failed on the download. The cache is laid out as
    transformers leaves it: refs/main names the revision, snapshots/<revision> holds links to the blobs."""
    monkeypatch.setenv('HF_HOME', str(tmp_path / 'hf'))
    monkeypatch.delenv('HF_HUB_CACHE', raising=False)
    monkeypatch.delenv('HUGGINGFACE_HUB_CACHE', raising=False)
    monkeypatch.delenv('MINGPT_DATA_DIR', raising=False)
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path / 'cache'))
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=4, n_embd=32, n_positions=64, vocab_size=101)).eval()
    repo = tmp_path / 'hf' / 'hub' / repo
    hf.save_pretrained(repo / 'blobs')
    if weights == 'pytorch_model.bin':  # what transformers downloaded before the hub had safetensors
        torch.save(hf.state_dict(), repo / 'blobs' / weights)
    (repo / 'refs').mkdir()
    (repo / 'refs' / 'main').write_text('0123abc')
    snapshot = repo / 'snapshots' / '0123abc'
    snapshot.mkdir(parents=True)
    for name in ('config.json', weights):
        (snapshot / name).symlink_to(repo / 'blobs' / name)
    model = GPT.from_pretrained('gpt2')
    idx = torch.randint(101, (2, 16))
    torch.testing.assert_close(model(idx)[0], hf(idx).logits, rtol=0, atol=1e-5)
