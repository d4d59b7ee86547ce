"""Guards on the hot paths: how often one training or decoding step makes the host wait for the device.

On a GPU the host queues kernels and runs ahead of them. Reading a result on the host (.item(), bool(t), a Python
`if` on a tensor, .tolist(), nonzero(), whose output size depends on the data) waits until every queued kernel has
run, and so does torch.tensor(python_data, device=...) (a copy from pageable memory); the GPU then idles while Python
catches up. There is no GPU here, but the same reads run through PyTorch's dispatcher on CPU, where the profiler sees
them. Each test pins the waits of one step and says why each is needed: a new .item() in a hot path fails here,
named with the function it is in.
"""
import json
import os
import re
from collections import Counter

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from conftest import load_project
from test_ddp import torchrun_ok
from test_engine import inductor_missing
from mingpt.data import CharTokenizer, TokenDataset
from mingpt.engine import Engine
from mingpt.model import GPT
from mingpt.sampling import beam_search
from mingpt.seq2seq import Transformer
from mingpt.trainer import Trainer

# ops whose result the host reads: on a GPU the host waits for the device to get there
READS = {'aten::_local_scalar_dense': 'item', 'aten::nonzero': 'nonzero', 'aten::equal': 'equal',
         'aten::masked_select': 'masked_select', 'aten::_unique2': 'unique', 'aten::unique_consecutive': 'unique',
         'aten::unique_dim': 'unique'}
# torch.tensor(data, device=...), new_tensor and as_tensor of Python data: a copy from the host's memory, which waits
# (the same op on CPU under t[i] = value, a fill on a GPU, is not counted); and a Python list as an index, t[:, [1, 2]],
# which becomes a tensor on the host that is copied to the device the same way (told by its shape: not a scalar)
FROM_HOST = 'aten::lift_fresh'
FROM_HOST_CALL = re.compile(r'<built-in method (tensor|new_tensor|as_tensor) of')
# .tolist() and .numpy() read a tensor without an op on CPU; on a GPU they copy it to the host first
PYTHON_READS = re.compile(r'<built-in method (tolist|numpy) of Tensor')
# reads inside these ops' CPU kernels, which their GPU kernels do on the device: a device-side assert, and AdamW's
# step count and learning rate
CPU_KERNEL_ONLY = {'aten::_assert_async', 'aten::_fused_adamw_', 'aten::_fused_adam_'}
HOST_SIDE = 'torch/utils/data/'  # the DataLoader's batches are made on the host, then copied to the device unwaited
MINGPT_FUNCTION = re.compile(r'mingpt/(\w+)\.py\(\d+\): (\w+)')  # a Python frame of the profiler's, in mingpt/


def kind(event):
    if event.name in READS:
        return READS[event.name]
    if event.name == FROM_HOST and event.parent is not None and FROM_HOST_CALL.match(event.parent.name):
        return 'from host'
    inputs = getattr(event.extra_fields, 'inputs', [])  # a torch op's arguments (tensors with their sizes)
    if event.name == FROM_HOST and inputs and getattr(inputs[0], 'sizes', None):
        return 'list index'
    match = PYTHON_READS.match(event.name)
    return match and match[1]


def ancestors(event):
    while event.parent is not None:
        event = event.parent
        yield event


def tree(events):
    """Every event of the profiler's tree, where the Python frames (calls of functions, and of built-ins such as
    tolist) are the parents of the ops they run. profile.events() holds those frames in torch 2.13, not in 2.11 (which
    keeps them in its chrome trace alone); the tree has them in both."""
    for event in events:
        yield event
        yield from tree(event.children)


def where(event):
    """The innermost function of mingpt the event ran in, as 'module.function'."""
    for frame in ancestors(event):
        match = MINGPT_FUNCTION.search(frame.name)
        if match:
            return f'{match[1]}.{match[2]}'
    return 'outside mingpt'


class HostWaits(Counter):
    """Counts each wait of the code run inside it as 'kind in module.function', e.g. 'item in checks.check_prompt'."""

    def __enter__(self):
        self.profiler = profile(activities=[ProfilerActivity.CPU], with_stack=True, record_shapes=True)
        self.profiler.__enter__()
        return self

    def __exit__(self, *exc):
        self.profiler.__exit__(*exc)
        results = self.profiler.profiler.kineto_results
        if not hasattr(results, 'experimental_event_tree'):  # a private API, which a later torch may rename
            raise RuntimeError(f"torch {torch.__version__}'s profiler has no kineto_results.experimental_event_tree(), "
                               "which these tests read the Python frames of each wait from; update tree() here")
        for event in tree(results.experimental_event_tree()):
            if not kind(event) or any(kind(a) for a in ancestors(event)):  # an item() inside nonzero() is one wait
                continue
            if any(a.name in CPU_KERNEL_ONLY or HOST_SIDE in a.name for a in ancestors(event)):
                continue
            self[f'{kind(event)} in {where(event)}'] += 1


def gpt(**overrides):
    C = GPT.get_default_config()
    C.merge_from_dict(dict(n_layer=2, n_head=2, n_embd=16, vocab_size=11, block_size=32, **overrides))
    torch.manual_seed(0)
    return GPT(C)


# ---- training ----

def test_gpt_forward_and_backward_never_wait():
    # the loss stays on the device: cross_entropy's ignore_index needs no count of the targets on the host
    m = gpt()
    x, y = torch.randint(11, (2, 8)), torch.randint(-1, 11, (2, 8))
    with HostWaits() as forward:
        _, loss = m(x, y)
    with HostWaits() as backward:
        loss.backward()
    assert forward == {} and backward == {}


def transformer(**overrides):
    C = Transformer.get_default_config()
    C.merge_from_dict(dict(model_type='transformer-nano', vocab_size=11, block_size=8, **overrides))
    torch.manual_seed(0)
    return Transformer(C)


# a batch of translate.py's shape: source and target end in EOS (2), padded with PAD (0) past the longest row
SRC = torch.tensor([[5, 6, 7, 2, 0, 0], [5, 6, 2, 0, 0, 0]])
TGT = torch.tensor([[8, 9, 2, 0, 0, 0], [8, 2, 0, 0, 0, 0]])
# in one read: the columns of src and of tgt that are not padding in every row (forward drops the others, so
# the host needs their number), and whether a source or a target row holds padding only (refused: NaN attention or loss)
SEQ2SEQ_FORWARD_WAITS = {'tolist in seq2seq.forward': 1}


def test_seq2seq_forward_waits_once():
    m = transformer()
    with HostWaits() as waits:
        m(SRC, TGT)
    assert waits == SEQ2SEQ_FORWARD_WAITS


def test_seq2seq_training_iteration_waits_once():
    """translate.py's training step: the forward's one read; backward, clipping and AdamW's step read nothing."""
    C = Trainer.get_default_config()
    C.merge_from_dict(dict(batch_size=2, max_iters=4, log_interval=100, quiet=True, device='cpu'))
    trainer = Trainer(C, transformer(), torch.utils.data.TensorDataset(SRC, TGT))
    steady, = iteration_waits(trainer, 1)
    assert steady == SEQ2SEQ_FORWARD_WAITS


def chargpt_trainer(log_interval, max_iters, **options):
    """chargpt's default config (trainer, model options, a val set) with the trainer's options, at sizes that train in
    a blink; no work_dir (the run config is not passed), so no files."""
    C = load_project('chargpt').get_config()
    text = "to be or not to be, that is the question. " * 8
    tokenizer = CharTokenizer.from_text(text)
    ids = tokenizer.encode(text)
    C.model.merge_from_dict(dict(model_type=None, n_layer=1, n_head=2, n_embd=8, vocab_size=len(tokenizer),
                                 block_size=8))
    C.trainer.merge_from_dict(dict(batch_size=4, max_iters=max_iters, log_interval=log_interval, quiet=True, **options))
    return Trainer(C.trainer, GPT(C.model), TokenDataset(ids[:300], 8), val_dataset=TokenDataset(ids[300:], 8))


def iteration_waits(trainer, *iterations):
    """Runs trainer and returns the waits of each of the iterations, from the start of its optimization step to the
    start of the next: the step, its evaluation, callbacks and files, and zero_grad. Every rank counts its own (under
    DDP callbacks run on rank 0 only, so they cannot start the count). The last iteration has no next step to end
    its count: it is refused, not counted as no wait."""
    if max(iterations) >= trainer.config.max_iters - 1:
        raise ValueError(f"iteration_waits counts up to iteration {trainer.config.max_iters - 2} of this trainer, the "
                         f"last with a step after it; asked for {max(iterations)}")
    waits = {i: HostWaits() for i in iterations}
    step = trainer._optimization_step

    def counted_step(*args):
        if trainer.iter_num - 1 in waits:
            waits[trainer.iter_num - 1].__exit__(None, None, None)
        if trainer.iter_num in waits:
            waits[trainer.iter_num].__enter__()
        return step(*args)
    trainer._optimization_step = counted_step
    trainer.run()
    return [waits[i] for i in iterations]


# the trainer's options that change the step: micro-steps (DDP's no_sync on all but the last), autocast, float16's
# gradient scaler (on CPU too; it unscales before clipping, and with a fused AdamW passes found_inf to the optimizer's
# kernel instead of reading it on the host), clipping off (the gradient norm is then not measured)
OPTIONS = {'plain': {}, 'grad_accum_steps=2': dict(grad_accum_steps=2), 'bfloat16': dict(dtype='bfloat16'),
           'float16': dict(dtype='float16'), 'float16 unclipped': dict(dtype='float16', grad_norm_clip=None),
           'unclipped': dict(grad_norm_clip=None)}


@pytest.mark.parametrize('options', OPTIONS.values(), ids=OPTIONS)
def test_training_iteration_waits_only_to_log(options):
    trainer = chargpt_trainer(log_interval=4, max_iters=6, **options)
    # iteration 2: not the first, not evaluated (eval_interval 500, and max_iters 6 is not yet reached), not logged;
    # chargpt's log_interval is the trainer's default, 1: every iteration is logged like iteration 4 here
    steady, logged = iteration_waits(trainer, 2, 4)
    assert trainer.scaler.is_enabled() == (options.get('dtype') == 'float16')  # the setting is the one pinned
    assert steady == {}
    assert logged == {
        # metrics.jsonl's loss, gradient norm (with clipping on) and tokens/s (the tokens read, counted on the device),
        # in one read
        'tolist in trainer._measure': 1,
    }


def test_float16_with_an_unfused_optimizer_waits_for_the_scaler():
    """GradScaler skips a step whose gradients overflowed: a fused optimizer (GPT's AdamW on CUDA and CPU) is given the
    overflow flag to skip on the device, any other makes the host read it (on MPS, where AdamW is not fused, or with
    a configure_optimizers of one's own). SGD, whose step reads nothing else, shows the scaler's wait alone."""
    trainer = chargpt_trainer(log_interval=4, max_iters=6, dtype='float16')
    trainer.model.configure_optimizers = lambda config: torch.optim.SGD(trainer.model.parameters(), lr=0.1)
    steady, logged = iteration_waits(trainer, 2, 4)
    assert steady == {'item in trainer._optimization_step': 1}  # in scaler.step: was any gradient inf or NaN?
    assert logged == {'item in trainer._optimization_step': 1, 'tolist in trainer._measure': 1}


def test_a_callback_that_prints_the_loss_now_and_then_waits_only_then():
    """minGPT's idiom, if trainer.iter_num % 100 == 0: print(trainer.loss.item()): the other 99 steps do not wait (the
    loss stays on the device until it is read), nor does running a callback (the random states it is run on a copy
    of are the host's, and the model's modes are the modules' flags)."""
    trainer = chargpt_trainer(log_interval=2, max_iters=8)

    def on_batch_end(t):
        if t.iter_num % 3 == 0:
            print(f"iter {t.iter_num}: train loss {t.loss.item():.4f}")
    trainer.add_callback('on_batch_end', on_batch_end)
    neither, logged, printed, both = iteration_waits(trainer, 1, 2, 3, 6)
    assert neither == {}
    assert logged == {'tolist in trainer._measure': 1}
    assert printed == {'item in trainer.trigger_callbacks': 1}  # the callback's own .item(), in the loop's frame
    # the trainer's read and the callback's: the second finds the device done already, with nothing queued since
    assert both == {'tolist in trainer._measure': 1, 'item in trainer.trigger_callbacks': 1}


DDP_WAITS = """
import json, os, sys
sys.path[:0] = [{tests!r}, os.path.dirname({tests!r})]  # this checkout's tests and mingpt
from test_hotpath import chargpt_trainer, iteration_waits
waits = [iteration_waits(chargpt_trainer(log_interval=4, max_iters=6, device='cpu', grad_accum_steps=accum), 2, 4)
         for accum in (1, 2)]
with open(os.path.join({out!r}, f"rank{{os.environ['RANK']}}.json"), 'w') as f:
    json.dump(waits, f)
"""


def test_ddp_iteration_waits_only_on_rank_0_to_log(tmp_path):
    """Two processes under torchrun on CPU (gloo), with and without micro-steps (no_sync on all but the last)."""
    script = tmp_path / 'ddp_waits.py'
    script.write_text(DDP_WAITS.format(tests=os.path.dirname(os.path.abspath(__file__)), out=str(tmp_path)))
    torchrun_ok(script, {**os.environ, 'OMP_NUM_THREADS': '1'}, timeout=120)
    for rank in range(2):
        for accum, (steady, logged) in zip((1, 2), json.loads((tmp_path / f'rank{rank}.json').read_text())):
            # the loss all-reduced at every step (a callback on rank 0 may read it at any step) is a collective,
            # queued on the device with NCCL, as the gradients' all-reduce
            assert steady == {}, (rank, accum)
            # rank 0 reads its numbers for metrics.jsonl and the bar; the other ranks write neither, so they go on
            assert logged == ({'tolist in trainer._measure': 1} if rank == 0 else {}), (rank, accum)


# ---- decoding ----

def stream_step_waits(generator, **kw):
    """The waits of one generate_stream step after the prompt's: one new token through the model, then its choice."""
    idx = torch.randint(1, 11, (2, 5))
    stream = generator.generate_stream(idx, 4, **kw)
    next(stream), next(stream)  # the prompt's step, then one with the KV cache filled
    with HostWaits() as waits:
        next(stream)
    return waits


STEPS = [dict(), dict(do_sample=True, top_k=5, top_p=0.9), dict(attention_mask=torch.tensor([[0, 1, 1, 1, 1]] * 2))]


@pytest.mark.parametrize('kw', STEPS, ids=['greedy', 'top_k and top_p', 'attention_mask'])
@pytest.mark.parametrize('engine', [False, True], ids=['model', 'engine'])
def test_decode_step_never_waits(engine, kw):
    # the chosen token goes back into the model as a tensor; nothing on the way is read on the host (the engine's
    # slot is a tensor filled in place, and top-p cuts by a mask, not by an index list)
    m = gpt().eval()
    assert stream_step_waits(Engine(m) if engine else m, **kw) == {}


# the engine's decode step eager, compiled by dynamo alone (its graph run op by op), and by inductor (on CPU, C++)
ENGINE_COMPILES = {'eager': False, 'aot_eager': dict(backend='aot_eager'), 'inductor': True}


@pytest.mark.parametrize('compile', ENGINE_COMPILES.values(), ids=ENGINE_COMPILES)
def test_engine_generation_waits_once_whatever_its_length(compile):
    # a whole generation, so that every host-side line around the step counts too (the slot, the caches' count,
    # the token's copy): 8 new tokens wait as often as 4, only for the prompt's check
    if compile is True and inductor_missing():
        pytest.skip(inductor_missing())
    engine = Engine(gpt().eval(), compile=compile)
    idx = torch.randint(1, 11, (2, 5))
    engine.generate(idx, 8)  # compiled for these shapes before anything is counted
    with HostWaits() as four:
        engine.generate(idx, 4)
    with HostWaits() as eight:
        engine.generate(idx, 8)
    assert four == eight == {'item in checks.check_prompt': 1}


@pytest.mark.parametrize('engine', [False, True], ids=['model', 'engine'])
def test_decode_step_with_eos_waits_once(engine):
    m = gpt().eval()
    assert stream_step_waits(Engine(m) if engine else m, eos_token_id=0) == {
        # done.all(): the stream stops once every row has ended, so the host must know whether they have
        'item in model.generate_stream': 1,
    }


def test_beam_search_step_waits():
    m = gpt().eval()
    idx = torch.randint(1, 11, (1, 5))
    with HostWaits() as two_steps:
        beam_search(m, idx, 2, num_beams=3)
    with HostWaits() as three_steps:
        beam_search(m, idx, 3, num_beams=3)
    assert three_steps - two_steps == {
        # the best candidates with any tied to the last: how many tie is known only on the device
        'nonzero in sampling.best_extensions': 1,
        # in one read, what the host decides with: the scores that go on (whether any do, and the early stop) and
        # the best candidates (which finish, at eos); the rows and tokens that go on stay on the device
        'tolist in sampling.best_extensions': 1,
    }


def test_beam_search_finishes_beams_without_copying_from_the_host():
    """A beam that ends is kept with its eos as a tensor filled on the device, not one made from a Python list."""
    m = gpt().eval()
    idx = torch.randint(1, 11, (1, 5))
    eos = m.generate(idx, 1)[0, -1].item()  # the likeliest first token: beams end at every step
    with HostWaits() as waits:
        seqs, _ = beam_search(m, idx, 4, num_beams=3, eos_token_id=eos)
    assert (seqs[:, 5] == eos).any()
    assert waits['from host in sampling.beam_search'] == 2  # the end ids and the scores returned, once per search


def test_beam_search_stops_early_without_reading_the_device():
    """The early stop (enough finished beams beat every live one) compared with the live scores' max().item(), where
    the same scores are on the host already."""
    m = gpt().eval()
    idx = torch.randint(1, 11, (1, 5))
    eos = m.generate(idx, 1)[0, -1].item()  # the likeliest first token: it ends the beam at once
    with HostWaits() as waits:
        seqs, _ = beam_search(m, idx, 3, num_beams=1, eos_token_id=eos)
    assert seqs[0, 5] == eos and 'item in sampling.beam_search' not in waits


def test_seq2seq_decode_step_never_waits():
    # the next token's logits from the decoder's caches; PAD and BOS are ruled out column by column (a list index
    # would be copied to the device at every step)
    C = Transformer.get_default_config()
    C.merge_from_dict(dict(model_type='transformer-nano', vocab_size=11, block_size=8))
    m = Transformer(C).eval()
    memory, memory_mask = m.encode(torch.tensor([[5, 6, 7, 2]]))
    caches = m.new_caches(memory, memory_mask, 8)
    seq = torch.tensor([[1, 5]])
    m.next_token_logits(seq[:, :1], caches)  # BOS into the caches
    with torch.no_grad(), HostWaits() as waits:
        m.next_token_logits(seq, caches)
    assert waits == {}


def test_seq2seq_greedy_translation_waits_once_per_token():
    m = transformer().eval()
    with HostWaits() as three:
        assert [len(t) for t in m.translate(SRC, max_new_tokens=3)] == [3, 3]  # no row ends early: every step counts
    with HostWaits() as six:
        assert [len(t) for t in m.translate(SRC, max_new_tokens=6)] == [6, 6]
    # done.all(): decoding stops once every row has written EOS, which only the device knows
    assert six - three == {'item in model.generate_stream': 3}
    assert three == {
        'item in model.generate_stream': 3,
        'from host in model.generate_stream': 1,  # the end id as a tensor, once per generation
        # before decoding, in one read: src's ids outside the vocabulary (refused before the embedding reads them),
        # its columns that are not padding in every row, and its rows of padding only (refused); after decoding, the
        # translations of the whole batch
        'tolist in seq2seq.translate': 2,
    }


def test_seq2seq_beam_translation_waits_twice_per_token_and_source():
    m = transformer().eval()
    with HostWaits() as three:
        assert [len(t) for t in m.translate(SRC, max_new_tokens=3, num_beams=3)] == [3, 3]  # none ends early
    with HostWaits() as six:
        assert [len(t) for t in m.translate(SRC, max_new_tokens=6, num_beams=3)] == [6, 6]
    # beam search keeps the beams of one source: each source's step waits twice, as test_beam_search_step_waits says
    per_step = {'nonzero in sampling.best_extensions': 1, 'tolist in sampling.best_extensions': 1}
    assert six - three == {k: 2 * 3 * n for k, n in per_step.items()}  # 2 sources, 3 more steps
    assert three == {
        **{k: 2 * 3 * n for k, n in per_step.items()},
        # once per source: its end id as a tensor and its beams' scores to the device (the live beams' scores
        # come back with best_extensions' read of each step)
        'from host in sampling.beam_search': 2 * 2,
        # as greedy's: the source's checks before decoding, and the best beam of every source in one read after
        'tolist in seq2seq.translate': 2,
    }


def test_prompt_checks_wait_once_each():
    # once per generation, not per step: a prompt of ids outside the vocabulary, or a mask of other values than 0
    # and 1 or of a row without a token, must be refused before the embedding reads it (a device-side assert)
    m = gpt().eval()
    idx, mask = torch.randint(1, 11, (2, 5)), torch.tensor([[0, 1, 1, 1, 1]] * 2)
    with HostWaits() as plain:
        m.generate(idx, 0)
    with HostWaits() as masked:
        m.generate(idx, 0, attention_mask=mask)
    assert plain == {'item in checks.check_prompt': 1}  # every id within the vocabulary
    assert masked == {'item in checks.check_prompt': 3}  # and the mask: only 0 and 1, a 1 in every row
