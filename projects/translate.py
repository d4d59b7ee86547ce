"""
Trains the encoder-decoder transformer of "Attention is all you need" (mingpt/seq2seq.py) to translate, reports
exact-match accuracy on held-out sentences, prints examples, saves a checkpoint and draws a cross-attention map:

    python projects/translate.py                                   # dates in many human formats -> ISO 8601
    python projects/translate.py --sample.checkpoint=out/translate/model.pt --sample.text="3rd of March 2021"
    python projects/translate.py --data.path=pairs.tsv             # any parallel corpus: source TAB target per line
    python projects/translate.py --data.path=pairs.tsv --data.tokenizer=bpe --data.vocab_size=2000

The default task is generated in code, so it runs offline: "the 3rd of March, 2021", "03/03/2021",
"Wednesday, March 3, 2021" -> "2021-03-03". The held-out dates never occur in training, in any format. With
--data.path data.n_test pairs, drawn by a seeded shuffle, are held out; the vocabulary is the corpus's
characters, or a byte-level BPE trained on its training lines with mingpt.bpe.train_bpe; BLEU is reported when
the sacrebleu package is installed. work_dir gets model.pt (weights, config, tokenizer), metrics.jsonl,
translations.tsv (every held-out pair: source, reference, prediction, correct) and translate_attention.png: for the
longest held-out sentence, the last decoder layer's cross-attention, heads averaged. There is no val loss:
eval.interval sets how often exact match is measured, and trainer.eval_interval and trainer.eval_iters, listed
below, are refused.
"""
import csv
import datetime
import hashlib
import os
import random
import shlex
import sys

import torch

from mingpt.bpe import Encoder, train_bpe
from mingpt.checkpoint import model_state, no_checkpoint, save_checkpoint
from mingpt.checks import check_options_before_data
from mingpt.data import CharTokenizer, fetch, read_text
from mingpt.plot import new_figure, readable, save
from mingpt.seq2seq import Transformer
from mingpt.trainer import Trainer
from mingpt.utils import (CfgNode as CN, ConfigError, check_range, eval_mode, need_work_dir, atomic_write,
                          refuse_ignored, run_cli, set_from_data, set_seed)

SPECIALS = ('<pad>', '<bos>', '<eos>')  # ids 0, 1, 2 of a character vocabulary


def get_config():
    C = CN()
    C.system = CN()
    C.system.seed = 3407
    C.system.work_dir = './out/translate'
    C.data = CN()
    C.data.path = None  # a TSV file of source TAB target lines; None: the dates task, generated here
    C.data.tokenizer = 'char'  # 'char' (one token per character) or 'bpe' (byte-level BPE trained on the corpus)
    C.data.vocab_size = 1000  # of the BPE: 256 bytes + merges + 3 special tokens
    C.data.n_train = 100_000  # dates generated to train on
    C.data.n_test = 1000  # held-out pairs for the exact-match accuracy
    C.model = Transformer.get_default_config()
    C.model.model_type = 'transformer-micro'
    # no dropout: training reads each generated date about twice at most; for a real corpus, the paper's 0.1
    C.model.embd_pdrop = C.model.resid_pdrop = C.model.attn_pdrop = 0.0
    C.model.pad_token_id = C.model.bos_token_id = C.model.eos_token_id = None  # the vocabulary's, set below
    C.trainer = Trainer.get_default_config()
    C.trainer.max_iters = 2000
    C.trainer.batch_size = 128
    C.trainer.lr_schedule = 'inverse_sqrt'  # the paper's: warmup, then decay as 1/sqrt(iteration)
    C.trainer.learning_rate = 2e-3  # the peak, reached after warmup_iters
    C.trainer.warmup_iters = 100
    C.trainer.betas = (0.9, 0.98)  # the paper's Adam (its eps, 1e-9, is torch's 1e-8 here: see mingpt/seq2seq.py)
    C.trainer.weight_decay = 0.0
    C.trainer.checkpoint_interval = 500  # ckpt.pt, to resume from
    C.eval = CN()
    C.eval.interval = 500  # iterations between exact-match measurements on the held-out pairs
    C.eval.examples = 8  # held-out translations printed at the end (the wrong ones first)
    C.eval.num_beams = 1  # 1: greedy decoding; more: beam search, in the final report (every eval.interval: greedy)
    C.eval.attention_text = ''  # the sentence whose cross-attention is drawn; '': the longest held-out one
    C.sample = CN()
    C.sample.checkpoint = None  # a saved model.pt: translate sample.text with it and exit, without training
    C.sample.text = 'the 3rd of March, 2021'  # sentences to translate, separated by '|'
    return C


# ---- the dates task ----

MONTHS = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October',
          'November', 'December']
WEEKDAYS = ['Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday', 'Sunday']
# {d} day, {dd} two-digit day, {do} ordinal day, {m}/{mm} month number, {M} month name, {Mon} its first three
# letters, {Y} year, {W} weekday; a slash is the US order (month first), a dot the European one (day first)
FORMATS = ['{do} of {M} {Y}', 'the {do} of {M}, {Y}', '{M} {do}, {Y}', '{M} {d}, {Y}', '{d} {M} {Y}',
           '{dd} {Mon} {Y}', '{Mon} {d} {Y}', '{d}-{Mon}-{Y}', '{dd}.{mm}.{Y}', '{d}.{m}.{Y}', '{mm}/{dd}/{Y}',
           '{m}/{d}/{Y}', '{Y}/{mm}/{dd}', '{Y}{mm}{dd}', '{W}, {M} {d}, {Y}', '{W} {do} {Mon} {Y}', '{Y}-{mm}-{dd}']
FIRST, LAST = datetime.date(1900, 1, 1).toordinal(), datetime.date(2099, 12, 31).toordinal()
MAX_TEST = (LAST - FIRST + 1) // 2  # held-out pairs: at least half the days stay to train on


def ordinal(n):
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, ..., 21st."""
    return f"{n}{'th' if 11 <= n % 100 <= 13 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def write_date(date, fmt, case):
    """The date in a human format: fmt from FORMATS, case 'as is', 'lower' or 'upper'."""
    text = fmt.format(d=date.day, dd=f'{date.day:02d}', do=ordinal(date.day), m=date.month, mm=f'{date.month:02d}',
                      M=MONTHS[date.month - 1], Mon=MONTHS[date.month - 1][:3], Y=date.year,
                      W=WEEKDAYS[date.weekday()])
    return text.lower() if case == 'lower' else text.upper() if case == 'upper' else text


def date_pairs(n, rng, exclude=frozenset()):
    """n (human date, ISO 8601 date) pairs of random dates from 1900 to 2099, none of whose days is in exclude."""
    pairs = []
    while len(pairs) < n:
        day = rng.randint(FIRST, LAST)
        if day in exclude:
            continue
        date = datetime.date.fromordinal(day)
        case = rng.choice(['as is'] * 4 + ['lower', 'upper'])
        pairs.append((write_date(date, rng.choice(FORMATS), case), date.isoformat()))
    return pairs


def dates_task(n_train, n_test, seed):
    """(train, test) pairs; the test dates are held out: no training pair is one of those days in any format."""
    rng = random.Random(seed)
    test = date_pairs(n_test, rng)
    held_out = {datetime.date.fromisoformat(iso).toordinal() for _, iso in test}
    return date_pairs(n_train, rng, held_out), test


def read_pairs(path, n_test, seed):
    """(train, test) pairs of a TSV parallel corpus: source TAB target per line, repeated pairs kept once; n_test
    pairs held out at random."""
    pairs = []
    for number, line in enumerate(read_text(path).split('\n'), 1):  # not splitlines: U+2028 and kin are text
        if line.strip():
            parts = line.split('\t')
            if len(parts) != 2:
                raise ValueError(f"{path}, line {number}: expected source TAB target, found {len(parts)} field(s)")
            pairs.append((parts[0].strip(), parts[1].strip()))
    if not pairs:
        raise ValueError(f"{path} holds no pair: write one source TAB target per line")
    unique = list(dict.fromkeys(pairs))  # a pair both held out and trained on would inflate the exact match
    if len(unique) < len(pairs):
        print(f"note: {path} repeats {len(pairs) - len(unique)} pair(s): each is kept once")
    pairs = unique
    if len(pairs) <= n_test:
        raise ConfigError(f"{path} has {len(pairs)} pairs, not more than data.n_test={n_test}: lower data.n_test")
    random.Random(seed).shuffle(pairs)
    return pairs[n_test:], pairs[:n_test]


# ---- tokens ----

class Vocabulary:
    """Text <-> ids for both languages, with the special tokens pad, bos and eos: one token per character (ids
    0, 1, 2 are the special tokens), or a byte-level BPE (the special tokens get its last ids). `record` is what a
    checkpoint stores to rebuild it."""

    def __init__(self, record):
        self.record = record
        if record['kind'] == 'char':
            self.tokenizer = CharTokenizer(list(SPECIALS) + record['chars'])
            self.special_ids = dict(zip(SPECIALS, range(3)))
        else:
            self.tokenizer = Encoder(record['encoder'], [tuple(m) for m in record['merges']])
            self.special_ids = {s: self.tokenizer.special_tokens[s] for s in SPECIALS}

    @classmethod
    def train(cls, kind, texts, vocab_size):
        if kind == 'char':
            return cls({'kind': 'char', 'chars': sorted(set(''.join(texts)))})
        encoder = train_bpe('\n'.join(texts), vocab_size, special_tokens=SPECIALS)
        return cls({'kind': 'bpe', 'encoder': encoder.encoder, 'merges': [list(m) for m in encoder.bpe_merges]})

    def __len__(self):
        return len(self.tokenizer)

    def encode(self, text):
        """The ids of text, followed by eos."""
        return self.tokenizer.encode(text) + [self.special_ids['<eos>']]

    def decode(self, ids):
        specials = set(self.special_ids.values())
        return self.tokenizer.decode([i for i in ids if i not in specials])

    def batch(self, texts):
        """(B, S) ids of the texts, each followed by eos and padded at the end with pad."""
        rows = [self.encode(t) for t in texts]
        out = torch.full((len(rows), max(map(len, rows))), self.special_ids['<pad>'], dtype=torch.long)
        for i, row in enumerate(rows):
            out[i, :len(row)] = torch.tensor(row)
        return out


class PairDataset(torch.utils.data.Dataset):
    """(source ids, target ids) of each pair, both ending in eos and padded to the longest of the set."""

    def __init__(self, pairs, vocab):
        self.pairs = pairs
        self.src = vocab.batch([s for s, _ in pairs])
        self.tgt = vocab.batch([t for _, t in pairs])

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        return self.src[i], self.tgt[i]


# ---- what the script reports ----

def translations(model, vocab, sources, num_beams=1, batch_size=500):
    """Yield the model's translation of each source sentence, in order: batch_size sentences at a time, or one at a
    time with beam search (which decodes one source at a time anyway), so that a Ctrl-C can say which one it
    stopped."""
    device = next(model.parameters()).device
    batch_size = 1 if num_beams > 1 else batch_size
    with eval_mode(model):
        for start in range(0, len(sources), batch_size):
            batch = sources[start:start + batch_size]
            try:
                targets = model.translate(vocab.batch(batch).to(device), num_beams=num_beams)
            except KeyboardInterrupt:
                what = (f"sentence {start + 1} of {len(sources)}, {batch[0]!r}" if len(batch) == 1 else
                        f"sentences {start + 1} to {start + len(batch)} of {len(sources)}")
                print(f"(stopped while translating {what})", file=sys.stderr)
                raise
            yield from (vocab.decode(ids) for ids in targets)


def translate(model, vocab, sources, num_beams=1, batch_size=500):
    """The model's translations of a list of source sentences."""
    return list(translations(model, vocab, sources, num_beams, batch_size))


def exact_match(model, vocab, pairs, num_beams=1):
    """(fraction of pairs translated exactly, the translations)."""
    hyps = translate(model, vocab, [s for s, _ in pairs], num_beams)
    return sum(h == t for h, (_, t) in zip(hyps, pairs)) / len(pairs), hyps


def print_examples(pairs, hyps, n):
    """n held-out translations, the wrong ones first."""
    order = sorted(range(len(pairs)), key=lambda i: hyps[i] == pairs[i][1])
    for i in order[:n]:
        mark = 'ok ' if hyps[i] == pairs[i][1] else 'BAD'
        print(f"  {mark} {pairs[i][0]!r} -> {hyps[i]!r}" + ('' if mark == 'ok ' else f" (expected {pairs[i][1]!r})"))


def write_translations(pairs, hyps, path):
    """A TSV file of the held-out translations, in the held-out order, to quote from and to count errors in: a header,
    then source, reference, prediction and correct (1 or 0) per pair. Written with the csv module: a field holding
    a tab, a newline or a double quote (a BPE model may write them) is put in double quotes, as spreadsheets and
    pandas.read_csv(path, sep='\\t') expect."""
    def write(tmp):
        with open(tmp, 'w', encoding='utf-8', newline='') as f:
            out = csv.writer(f, delimiter='\t', lineterminator='\n')
            out.writerow(['source', 'reference', 'prediction', 'correct'])
            out.writerows([source, target, hyp, int(hyp == target)] for (source, target), hyp in zip(pairs, hyps))
    atomic_write(path, write)
    print(f"wrote {path}: the {len(pairs)} held-out translations")


def bleu(hyps, refs):
    """Corpus BLEU through sacrebleu when it is installed, else None."""
    try:
        import sacrebleu
    except ImportError:
        return None
    return sacrebleu.corpus_bleu(hyps, [refs]).score


def token_label(vocab, i):
    """A token as a plot shows it: a special token by its name, any other as plot.readable shows it (a space as an
    open box, a BPE token's bytes that are part of a character escaped)."""
    name = next((s for s, j in vocab.special_ids.items() if j == i), None)
    return name or readable(vocab.tokenizer.decode_bytes([i]))


def draw_cross_attention(model, vocab, source, path):
    """A PNG of the last decoder layer's cross-attention (heads averaged) while the model writes its translation of
    source: one row per target token, one column per source token."""
    device = next(model.parameters()).device
    src = vocab.batch([source]).to(device)
    n = model.longest_translation  # a translation that long ran out of room before EOS
    with eval_mode(model):
        written = model.translate(src, n)[0]
    tgt = torch.tensor([written + [model.config.eos_token_id] * (len(written) < n)], device=device)
    weights = model.cross_attention_maps(src, tgt)[-1][0].mean(0).cpu().numpy()  # (T, S)
    src_labels, tgt_labels = ([token_label(vocab, i) for i in ids[0].tolist()] for ids in (src, tgt))
    try:  # at least 6 x 3 inches: a short sentence's cells leave no room for the title and the axis labels
        fig = new_figure(max(6.0, 0.3 * len(src_labels) + 2), max(3.0, 0.3 * len(tgt_labels) + 1.5))
    except RuntimeError as e:  # no matplotlib: training goes on without the picture
        print(f"no cross-attention PNG: {e}")
        return
    ax = fig.add_subplot()
    image = ax.imshow(weights, cmap='viridis', vmin=0, vmax=1)
    ax.set_xticks(range(len(src_labels)), src_labels, fontsize=8)
    ax.set_yticks(range(len(tgt_labels)), tgt_labels, fontsize=8)
    ax.set_xlabel('source tokens (keys, values: the encoder)')
    ax.set_ylabel('target tokens written')
    # over the figure, not the axes: a short sentence's axes are narrower than the title
    fig.suptitle(f"cross-attention (last decoder layer, heads averaged):\n{source!r} -> "
                 f"{vocab.decode(tgt[0].tolist())!r}", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.03, label='attention weight')
    print(f"wrote {save(fig, path, dpi=120)}")


def saved_vocabulary(ckpt, path, vocab_size):
    """The Vocabulary that a checkpoint of this project records, for its model of vocab_size tokens; a record of
    another shape (a damaged or hostile file) is refused by name."""
    try:
        vocab = Vocabulary(ckpt.get('vocabulary'))
        vocab.decode(range(len(vocab)))  # every id has text: characters that are strings, a BPE's whole encoder
    except (KeyError, TypeError, ValueError) as e:  # not a dict, a key missing, or other data under one
        raise ValueError(f"{path} was not loaded: its 'vocabulary' should hold kind 'char' and its 'chars', or kind "
                         f"'bpe' and a byte-level BPE's 'encoder' and 'merges' with {', '.join(SPECIALS)} in it "
                         f"({type(e).__name__}: {e}); the file is damaged or not translate.py's") from None
    if len(vocab) != vocab_size:  # ids past the model's would fail in its embedding
        raise ValueError(f"{path} was not loaded: its vocabulary has {len(vocab)} tokens and its model {vocab_size}; "
                         "the two do not belong together")
    return vocab


def encoded(vocab, option, texts):
    """Each text's ids with its eos; a character that a character vocabulary lacks is refused naming the option that
    gave the text."""
    try:
        return [vocab.encode(text) for text in texts]
    except ValueError as e:
        raise ConfigError(f"{option}: {e}") from None


def translate_from_checkpoint(config):
    sources = [s.strip() for s in config.sample.text.split('|')]
    if not all(sources):
        raise ConfigError(f"sample.text={config.sample.text!r} holds an empty sentence: give text to translate, "
                          "several separated by '|'")
    path = config.sample.checkpoint
    if not os.path.exists(path):  # from_checkpoint's message knows neither this project's command nor its options
        raise no_checkpoint(path, "train one first (python projects/translate.py writes out/translate/model.pt, or "
                                  "model.pt in its --system.work_dir), and give its path with --sample.checkpoint=PATH")
    model, ckpt = Transformer.from_checkpoint(path)
    vocab = saved_vocabulary(ckpt, config.sample.checkpoint, model.config.vocab_size)
    n, longest = max((len(ids), s) for ids, s in zip(encoded(vocab, 'sample.text', sources), sources))
    if n > model.config.block_size:  # the data set it: no option makes it larger
        raise ConfigError(f"sample.text {longest!r} is {n} tokens with its eos, longer than the model's block_size "
                          f"({model.config.block_size}, the longest sentence of the data it was trained on): shorten "
                          "it, or train on data with longer sentences")
    # each printed as it comes: with beam search, those done before a Ctrl-C are not lost
    for source, target in zip(sources, translations(model, vocab, sources, config.eval.num_beams)):
        print(f"{source!r} -> {target!r}", flush=True)


def check_options(config):
    """Refuse, before any work, the options this project cannot run with."""
    D, E = config.data, config.eval
    refuse_ignored('trainer', config.trainer, get_config().trainer, ('eval_interval', 'eval_iters'),
                   "the trainer's val loss needs a val set, which this project has not; its exact match on the "
                   "held-out pairs is measured every eval.interval iterations: give --eval.interval=N instead")
    for key, value in (('data.n_train', D.n_train), ('data.n_test', D.n_test), ('eval.interval', E.interval),
                       ('eval.num_beams', E.num_beams), ('trainer.max_iters', config.trainer.max_iters)):
        check_range(key, value, 1, integer=True)
    check_range('eval.examples', E.examples, 0, integer=True)
    if not D.path:
        check_range('data.n_test', D.n_test, 1, MAX_TEST, integer=True)
    else:  # the corpus gives every pair not held out to training
        refuse_ignored('data', D, get_config().data, ['n_train'], "n_train is how many dates the default task "
                       "generates; with data.path every pair not held out (data.n_test of them) is trained on: to "
                       "train on fewer, give a file of fewer pairs")
    if D.tokenizer not in ('char', 'bpe'):
        raise ConfigError(f"data.tokenizer must be 'char' or 'bpe', not {D.tokenizer!r}")
    if D.tokenizer == 'char':
        refuse_ignored('data', D, get_config().data, ['vocab_size'], "data.tokenizer='char' takes every character "
                       "of the pairs; vocab_size is the size of a byte-level BPE: add --data.tokenizer=bpe")
    else:  # before the pairs are read; a whole float (300.0, from Python) as train_bpe's int
        D.vocab_size = check_range('data.vocab_size', D.vocab_size, 1, integer=True)
        if D.vocab_size < 256 + len(SPECIALS):
            raise ConfigError(f"data.vocab_size={D.vocab_size} is too small: a byte-level BPE's vocabulary counts the "
                              f"256 byte tokens, the merges and the {len(SPECIALS)} special tokens, so it must be at "
                              f"least {256 + len(SPECIALS)}")


def resume_records(config, vocab, pairs):
    """(checkpoint_extras, must_match) for the Trainer: a resume must see the same data, as another seed or size
    would put training pairs among the held-out ones."""
    D = config.data
    data = {'path': D.path, 'seed': config.system.seed, 'n_train': None if D.path else D.n_train, 'n_test': D.n_test}
    extras = {'data': data, 'vocabulary': vocab.record}
    must_match = ['data?', 'vocabulary']  # '?': a checkpoint older than the record (data: 2026-11-22) goes unchecked
    if D.path:  # the file at that path, edited, would hold out other pairs (recorded since 2026-11-23)
        extras['corpus'] = {'pairs': len(pairs), 'sha256': hashlib.sha256(repr(pairs).encode()).hexdigest()[:12]}
        must_match.append('corpus?')
    return extras, must_match


def main(argv):
    config = get_config()
    config.merge_from_args(argv, usage=__doc__)
    check_options(config)
    D, E = config.data, config.eval
    set_seed(config.system.seed)
    if config.sample.checkpoint:
        refuse_ignored('model', config.model, get_config().model, list(config.model.to_dict()),
                       "sample.checkpoint brings its own model; leave them out")
        translate_from_checkpoint(config)
        return

    # before the pairs are read and the vocabulary trained, so a typo is told at once
    check_options_before_data(Transformer, config.model)
    Trainer.check_options(config.trainer)
    # a relative path is looked for here, then under $MINGPT_DATA_DIR and the cache, as every project's data.path
    train_pairs, test_pairs = (read_pairs(fetch(D.path, path=D.path), D.n_test, config.system.seed) if D.path else
                               dates_task(D.n_train, D.n_test, config.system.seed))
    # a character vocabulary must know the held-out pairs' characters too; a byte-level BPE encodes any text
    texts = [text for pair in train_pairs + (test_pairs if D.tokenizer == 'char' else []) for text in pair]
    vocab = Vocabulary.train(D.tokenizer, texts, D.vocab_size)
    train_dataset, test_dataset = PairDataset(train_pairs, vocab), PairDataset(test_pairs, vocab)
    set_from_data(config.model, 'model', vocab_size=len(vocab),
                  block_size=max(t.size(1) for d in (train_dataset, test_dataset) for t in (d.src, d.tgt)),
                  **{f'{s[1:-1]}_token_id': i for s, i in vocab.special_ids.items()})
    model = Transformer(config.model)
    attention_source = E.attention_text or max((s for s, _ in test_pairs), key=len)
    n = len(encoded(vocab, 'eval.attention_text', [attention_source])[0])  # checked now, not after the training
    if n > config.model.block_size:
        raise ConfigError(f"eval.attention_text is {n} tokens with its eos, longer than the model's block_size "
                          f"({config.model.block_size}): shorten it")

    extras, must_match = resume_records(config, vocab, train_pairs + test_pairs)
    # the report's files are the replaced run's until this one's end: run() removes them where it does not go on with it
    trainer = Trainer(config.trainer, model, train_dataset, checkpoint_extras=extras, run_config=config,
                      must_match=must_match, run_files=['translations.tsv', 'translate_attention.png'])
    # checked now, not after the training
    need_work_dir(trainer.config.work_dir, "the trained model and its attention picture are saved in work_dir")

    def batch_end_callback(trainer):
        if trainer.iter_num % E.interval == 0 and trainer.steps_done != config.trainer.max_iters:
            accuracy = exact_match(model, vocab, test_pairs)[0]  # greedy: beam search takes one source at a time
            print(f"\niter {trainer.iter_num}: train loss {trainer.loss.item():.4f}, held-out exact match "
                  f"{accuracy:.4f}")

    trainer.set_callback('on_batch_end', batch_end_callback)
    trainer.run()
    if trainer.rank == 0:  # under torchrun one process reports and writes, the others hold the same model
        report(model, vocab, test_pairs, config, trainer.config.work_dir, attention_source)


def report(model, vocab, test_pairs, config, work_dir, attention_source):
    """After training: exact match (and BLEU on a corpus) on the held-out pairs, examples, the file of every held-out
    translation, the checkpoint, the cross-attention PNG."""
    accuracy, hyps = exact_match(model, vocab, test_pairs, config.eval.num_beams)
    print(f"exact match on {len(test_pairs)} held-out pairs: {accuracy:.4f}")
    score = bleu(hyps, [t for _, t in test_pairs]) if config.data.path else None
    if config.data.path:
        print(f"BLEU: {score:.2f}" if score is not None else "BLEU: skipped (pip install sacrebleu to report it)")
    print_examples(test_pairs, hyps, config.eval.examples)
    write_translations(test_pairs, hyps, os.path.join(work_dir, 'translations.tsv'))
    path = os.path.join(work_dir, 'model.pt')
    save_checkpoint({**model_state(model), 'config': config.to_dict(), 'vocabulary': vocab.record,
                     'iter_num': config.trainer.max_iters, 'exact_match': accuracy, 'bleu': score}, path)
    print(f"saved {path}; translate with {shlex.quote(f'--sample.checkpoint={path}')} --sample.text=...")
    draw_cross_attention(model, vocab, attention_source, os.path.join(work_dir, 'translate_attention.png'))


if __name__ == '__main__':
    run_cli(main)
