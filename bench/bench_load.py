"""
The memory it takes to load a model: GPT.from_pretrained (a Hugging Face folder, as model.safetensors and as
pytorch_model.bin) and GPT.from_checkpoint (the trainer's model.pt), against Hugging Face's
GPT2LMHeadModel.from_pretrained on the same folders; and both loaders asked for bfloat16.

Each load runs in a process of its own, in turns, over several rounds. A process's peak resident memory
(ru_maxrss) after the load and one short forward pass (which touches every weight, memory-mapped or not), minus its
peak after its imports, is the load's peak; printed as MiB, median and spread (min-max over rounds), and as a ratio
to Hugging Face's on the same file format. The model is GPT-2 124M with random weights (475 MiB in float32), saved
once into a temporary folder.

    python bench/bench_load.py               # 3 rounds
    python bench/bench_load.py --rounds 1    # checks that it runs

Memory peaks do not depend on what else the machine runs; nothing here is timed.
"""
import argparse
import datetime
import json
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from workers import run_worker

LOADERS = {  # name: (loader, file it reads, the Hugging Face loader it is compared with)
    'mingpt from_pretrained, model.safetensors': ('mingpt', 'safetensors', 'HF, model.safetensors'),
    'mingpt from_pretrained, pytorch_model.bin': ('mingpt', 'bin', 'HF, pytorch_model.bin'),
    'mingpt from_checkpoint, model.pt': ('mingpt', 'checkpoint', 'HF, model.safetensors'),
    'mingpt from_pretrained bfloat16, model.safetensors':
        ('mingpt-bf16', 'safetensors', 'HF bfloat16, model.safetensors'),
    'HF, model.safetensors': ('hf', 'safetensors', None),
    'HF, pytorch_model.bin': ('hf', 'bin', None),
    'HF bfloat16, model.safetensors': ('hf-bf16', 'safetensors', None),
}


def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def worker(loader, fmt, folder):
    """Runs in its own process: load, one forward pass, print the peak memory above the imports' as JSON."""
    dtype = torch.bfloat16 if loader.endswith('-bf16') else torch.float32
    if loader.startswith('hf'):
        from transformers import GPT2LMHeadModel
    else:
        from mingpt.model import GPT
    before = peak_mb()
    path = Path(folder) / fmt
    if loader.startswith('hf'):
        model = GPT2LMHeadModel.from_pretrained(path, dtype=dtype)
    elif fmt == 'checkpoint':
        model, _ = GPT.from_checkpoint(path / 'model.pt')
    else:
        model = GPT.from_pretrained(path, dtype=dtype)
    with torch.no_grad():
        model(torch.zeros(1, 8, dtype=torch.long))
    print(json.dumps(peak_mb() - before))


def make_files(folder):
    """GPT-2 124M with random weights, in each format the loaders read."""
    from transformers import GPT2Config, GPT2LMHeadModel
    from mingpt.model import GPT
    from mingpt.checkpoint import model_state, save_checkpoint
    hf = GPT2LMHeadModel(GPT2Config())
    hf.save_pretrained(folder / 'safetensors')
    (folder / 'bin').mkdir()
    (folder / 'bin' / 'config.json').write_text((folder / 'safetensors' / 'config.json').read_text())
    torch.save(hf.state_dict(), folder / 'bin' / 'pytorch_model.bin')
    (folder / 'checkpoint').mkdir()
    save_checkpoint(model_state(GPT.from_pretrained(folder / 'safetensors')), folder / 'checkpoint' / 'model.pt')


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--worker', nargs=3, metavar=('LOADER', 'FORMAT', 'FOLDER'), help=argparse.SUPPRESS)
    p.add_argument('--make', metavar='FOLDER', help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(*args.worker)
    if args.make:
        return make_files(Path(args.make))
    print(f"{datetime.date.today()}, torch {torch.__version__}, GPT-2 124M (random weights, 475 MiB in float32); "
          f"{args.rounds} rounds, each load in its own process, in turns\n")
    with tempfile.TemporaryDirectory() as folder:
        # in a process of its own: a child starts with its parent's ru_maxrss, which must stay below its imports'
        subprocess.run([sys.executable, __file__, '--make', folder], check=True, capture_output=True)
        mb = {name: [] for name in LOADERS}
        for r in range(args.rounds):
            for name in (list(LOADERS) if r % 2 == 0 else list(LOADERS)[::-1]):
                loader, fmt, _ = LOADERS[name]
                mb[name].append(run_worker([sys.executable, __file__, '--worker', loader, fmt, folder], name))
    print("| loader | peak MiB above the imports (median, spread) | ratio to HF's |")
    print("|---|---|---|")
    for name, (_, _, reference) in LOADERS.items():
        median = statistics.median(mb[name])
        ratio = f"{median / statistics.median(mb[reference]):.2f}x ({reference})" if reference else ''
        print(f"| {name} | {median:,.0f} ({min(mb[name]):,.0f}-{max(mb[name]):,.0f}) | {ratio} |")


if __name__ == '__main__':
    main()
