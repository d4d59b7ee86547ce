r"""
Sentiment classification with a GPT: pretrain a small language model, then fine-tune it as a classifier on SST-2
(movie-review sentences labelled negative / positive), and compare with the same classifier trained from scratch
and with GPT-2 fine-tuned the same way.

The stage comes first on the command line (or as --system.stage=...); each writes to out/sentiment/<stage> unless
--system.work_dir says otherwise. The nano recipe of the README (about 11 minutes on 2 CPU cores):

    python projects/sentiment.py pretrain --data.text=text/gutenberg/2600-0.txt --trainer.max_iters=300 \
        --system.work_dir=out/sentiment/pretrain-book    # an LM on a book (under $MINGPT_DATA_DIR, or any path)
    python projects/sentiment.py pretrain --system.init=out/sentiment/pretrain-book/model.pt
                                                         # then on the SST-2 training sentences
    python projects/sentiment.py finetune --system.init=out/sentiment/pretrain/model.pt
    python projects/sentiment.py finetune --system.work_dir=out/sentiment/scratch   # the same classifier, from scratch
    python projects/sentiment.py finetune --system.init=gpt2 --trainer.learning_rate=3e-5 \
        --system.work_dir=out/sentiment/gpt2             # GPT-2 (a hub id or a Hugging Face directory)
    python projects/sentiment.py evaluate                      # dev accuracy of out/sentiment/finetune/model.pt
    python projects/sentiment.py evaluate --system.work_dir=out/sentiment/gpt2   # of that run's model.pt
    python projects/sentiment.py predict "a gorgeous , witty , seductive movie ."
    python projects/sentiment.py predict -- "-- not a dull moment --"   # after --, only sentences

Pretraining stages chain through --system.init, in any order, but end on the reviews: an LM continued on a book
after the SST-2 sentences forgets them (its loss on SST-2 text goes up), and the trainer, which keeps the model of
lowest loss on SST-2 text (the unlabelled GLUE test sentences), then keeps the one from before the book.

How a sentence is classified (GPT-style): its tokens, then `classifier.suffix` (default <|endoftext|>, the token
that separates texts during pretraining), go through the GPT; the final hidden state at the last real token feeds
a linear head. Padding (id -1, on the right) never reaches the head and, the attention being causal, cannot change
the states before it. `classifier.head=label_words` initialises the head from the LM's output embeddings of two
label words, so before any fine-tuning it scores a sentence by the LM's own next-token logits for those words.

Tokens: `data.tokenizer=bpe` is GPT-2's byte-level BPE with the vocabulary cut down to the ids that occur in the
SST-2 training sentences (others read as <|unk|>): a 48-wide model cannot afford 50,257 x 48 embeddings. `gpt2` is
the full GPT-2 vocabulary (GPT-2 weights bring it, and a checkpoint its own: another one asked for is refused);
`char` is one token per character.
"""
import json
import os
import re
import zipfile
from pathlib import Path

import torch
import torch.nn as nn
from torch.nn import functional as F

from mingpt.bpe import ENDOFTEXT
from mingpt.checkpoint import (checked_config, load_checkpoint, load_weights, no_checkpoint, parameters_on_meta,
                               refuse_non_tensors, with_options)
from mingpt.checks import DROPOUT_OPTIONS, check_options_before_data
from mingpt.data import TokenDataset, book_body, encode_text, fetch, find_local, read_corpus, read_text
from mingpt.model import GPT
from mingpt.pretrained import Vocabulary  # the vocabularies this project records
from mingpt.trainer import Trainer
from mingpt.utils import (CfgNode as CN, ConfigError, check_range, eval_mode, plural, refuse_ignored, resolve_device,
                          run_cli, set_from_data, set_seed, warn_caller, write_text_atomically)

STAGES = ('pretrain', 'finetune', 'evaluate', 'predict')
SST2_ZIP_URL = 'https://dl.fbaipublicfiles.com/glue/data/SST-2.zip'
SST2_MAX_BYTES = 64 << 20  # the largest file of GLUE's zip that is read, train.tsv, has 3.8 MB
# the README's book, Project Gutenberg #2600 (War and Peace), as GITenberg keeps it at a fixed commit: (url, sha256)
BOOKS = {'text/gutenberg/2600-0.txt': ('https://raw.githubusercontent.com/GITenberg/War-and-Peace_2600/'
                                       'fa22ab90f00f627e83d14acabe32d91602d2365d/2600-0.txt',
                                       '6cbcc5ca5e590fb9ace161a5b93e4ecf280d7118104be0d63b686c004cfa70ae')}
LABELS = ('negative', 'positive')


def get_config(stage='finetune'):
    """The options and their defaults; the trainer's (iterations, learning rate, ...) depend on the stage."""
    C = CN()
    C.system = CN()
    C.system.stage = stage  # pretrain | finetune | evaluate | predict (or give it first, without --)
    C.system.seed = 3407
    C.system.work_dir = None  # default: ./out/sentiment/<stage>
    # the weights to start from: None (random), a checkpoint of this project (model.pt), or, for fine-tuning,
    # a GPT-2 hub id ('gpt2', ...) or a Hugging Face directory (GPT.from_pretrained)
    C.system.init = None
    # evaluate / predict: the classifier; default model.pt of --system.work_dir, else ./out/sentiment/finetune/model.pt
    C.system.checkpoint = None
    C.data = CN()
    C.data.sst2_dir = None  # a folder with train.tsv, dev.tsv; default $MINGPT_DATA_DIR/sentiment/sst2, cache, download
    # pretrain: a text file (e.g. a book; a path, or one under $MINGPT_DATA_DIR such as text/gutenberg/2600-0.txt)
    # or a folder of .txt files (e.g. text/gutenberg, read one after another); None = the SST-2 training sentences
    C.data.text = None
    C.data.lowercase = True  # lower-case the pretraining text, as SST-2 is
    C.data.tokenizer = 'bpe'  # bpe (GPT-2 BPE, vocabulary of SST-2 train) | gpt2 (all 50,257 ids) | char
    C.data.block_size = 64  # tokens per window (pretrain) and per sentence (finetune; longer ones are cut)
    C.data.train_limit = None  # use only the first N training sentences (quick experiments, tests)
    C.data.dev_limit = None  # only the first N dev sentences (evaluate, finetune), or test ones (pretrain's val text)
    C.model = GPT.get_default_config()
    C.model.model_type = 'gpt-nano'
    C.classifier = CN()
    C.classifier.head = 'linear'  # linear | label_words
    C.classifier.label_words = (' negative', ' positive')  # label_words head: one word (one token) per class
    C.classifier.suffix = ENDOFTEXT  # appended to every sentence; the head reads the state at its last token
    C.classifier.trainable_blocks = -1  # -1: train everything; 0: only the head; N: also ln_f and the last N blocks
    C.classifier.dropout = 0.1
    C.classifier.lm_loss_weight = 0.0  # > 0 adds this times the LM loss on the sentences while fine-tuning (GPT-1)
    # the trainer does the files (--help lists its options): metrics.jsonl, model.pt, ckpt.pt every
    # checkpoint_interval iterations (--trainer.resume=True continues from it). Every eval_interval iterations,
    # pretrain: the LM's loss on the (unlabelled) SST-2 test sentences, model.pt the best by it;
    # finetune: dev accuracy and loss, printed, written to eval.json and added to metrics.jsonl (dev_accuracy,
    # dev_loss), model.pt the latest (no choosing on dev)
    C.trainer = Trainer.get_default_config()
    C.trainer.batch_size = 64
    C.trainer.learning_rate = 1e-3
    C.trainer.lr_schedule = 'cosine'
    C.trainer.eval_iters = 10
    if stage == 'pretrain':
        C.trainer.max_iters = 800
        C.trainer.warmup_iters = 50
        C.trainer.eval_interval = C.trainer.checkpoint_interval = 200
    else:
        C.trainer.max_iters = 1500
        C.trainer.warmup_iters = 100
        C.trainer.eval_interval = C.trainer.checkpoint_interval = 250
    if stage in ('evaluate', 'predict'):
        C.data.block_size = C.data.tokenizer = None  # the classifier's own: sentences are read as in its fine-tuning
    C.predict = CN()
    C.predict.text = None  # predict: a sentence (or give the sentences after the stage on the command line)
    return C


# ----------------------------------------------------------------------------------------------------------------
# the classifier

class GPTClassifier(nn.Module):
    """A GPT whose final hidden state at each sentence's last real token goes through a linear head.

    forward(idx, targets=None): idx (B, T) holds token ids, right-padded with -1; targets (B,) class ids.
    Returns (logits (B, n_classes), loss)."""

    def __init__(self, gpt, n_classes=2, dropout=0.1, label_ids=None, lm_loss_weight=0.0):
        super().__init__()
        self.gpt = gpt
        self.lm_loss_weight = lm_loss_weight
        self.config = gpt.config  # the trainer saves it beside the weights (model_config) and counts FLOPs by it
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(gpt.config.n_embd, n_classes)
        with torch.no_grad():
            if label_ids is not None:  # the LM's own next-token logits for the label words, to start with
                self.head.weight.copy_(gpt.lm_head.weight[list(label_ids)])
            else:
                nn.init.normal_(self.head.weight, std=0.02)
            nn.init.zeros_(self.head.bias)

    def forward(self, idx, targets=None):
        lengths = (idx >= 0).sum(dim=1)
        if (lengths == 0).any():
            raise ValueError("a row of idx holds no tokens (only padding, -1)")
        idx = idx[:, :int(lengths.max())]  # drop the columns that are padding in every row
        h = self.gpt.hidden_states(idx.clamp(min=0))  # (B, T, n_embd)
        last = h[torch.arange(idx.size(0), device=idx.device), lengths - 1]  # the state after the whole sentence
        logits = self.head(self.dropout(last))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float(), targets)
            if self.lm_loss_weight and self.training:
                # GPT-1's auxiliary objective: keep predicting the next token of the sentence while fine-tuning
                real = idx[:, 1:] >= 0
                lm_logits = self.gpt.lm_head(h[:, :-1][real])
                loss = loss + self.lm_loss_weight * F.cross_entropy(lm_logits.float(), idx[:, 1:][real])
        return logits, loss

    def freeze(self, trainable_blocks):
        """Train only the head (0), or the head, ln_f and the last N blocks (N); -1 trains everything. The frozen
        layers are a fixed feature extractor, so they stay in eval mode (no dropout) while the rest trains."""
        if trainable_blocks < 0:
            return
        blocks = self.gpt.transformer.h
        if trainable_blocks > len(blocks):
            raise ConfigError(f"classifier.trainable_blocks={trainable_blocks} but the model has {len(blocks)} blocks")
        self.gpt.requires_grad_(False).eval()  # the trainer keeps a submodule's eval mode
        if trainable_blocks > 0:
            blocks[len(blocks) - trainable_blocks:].requires_grad_(True).train(self.training)
            self.gpt.transformer.ln_f.requires_grad_(True).train(self.training)
        trained = sum(p.numel() for p in self.parameters() if p.requires_grad)  # the GPT printed only its total
        print(f"training {trained:,} of the {sum(p.numel() for p in self.parameters()):,} parameters "
              f"(classifier.trainable_blocks={trainable_blocks})")

    def configure_optimizers(self, train_config):
        """AdamW over the trainable parameters, weight decay on matrices only (as GPT.configure_optimizers)."""
        return GPT.configure_optimizers(self, train_config)


@torch.no_grad()
def predict_proba(model, dataset, device, batch_size=256):
    """Class probabilities (N, n_classes) for every example of a SentenceDataset."""
    probs = []
    with eval_mode(model):
        for i in range(0, len(dataset), batch_size):
            logits, _ = model(dataset.x[i:i + batch_size].to(device))
            probs.append(F.softmax(logits.float(), dim=-1).cpu())
    return torch.cat(probs)


def evaluate(model, dataset, device, work_dir, **extra):
    """Dev accuracy (printed with the loss), per-class precision, recall and F1 and the confusion matrix (rows: the
    true label, columns: the prediction), all written to eval.json."""
    probs = predict_proba(model, dataset, device)
    pred = probs.argmax(dim=-1)
    loss = -probs[torch.arange(len(pred)), dataset.y].clamp(min=1e-12).log().mean().item()
    n = len(LABELS)
    confusion = torch.zeros(n, n, dtype=torch.long)  # rows: true label, columns: predicted
    confusion.index_put_((dataset.y, pred), torch.ones_like(pred), accumulate=True)
    accuracy = confusion.diag().sum().item() / len(pred)
    report = {'accuracy': accuracy, 'loss': loss, 'n': len(pred), **extra, 'labels': list(LABELS), 'classes': {}}
    for c, name in enumerate(LABELS):
        tp, predicted, true = confusion[c, c].item(), confusion[:, c].sum().item(), confusion[c].sum().item()
        report['classes'][name] = {'precision': tp / max(predicted, 1), 'recall': tp / max(true, 1),
                                   'f1': 2 * tp / max(predicted + true, 1)}  # 2PR / (P + R), 0 when tp is 0
    report['confusion_matrix'] = confusion.tolist()
    print(f"dev accuracy: {accuracy:.4f} (dev loss {loss:.4f})")
    write_text_atomically(os.path.join(work_dir, 'eval.json'), json.dumps(report, indent=2))
    return report


# ----------------------------------------------------------------------------------------------------------------
# tokens and data

def read_sst2(split, sst2_dir=None, limit=None):
    """(sentences, labels) of SST-2's train, dev or test split (test: labels None, GLUE keeps them). The file
    <split>.tsv comes from sst2_dir, else $MINGPT_DATA_DIR/sentiment/sst2 or the cache, else from GLUE's SST-2.zip
    (downloaded once into the cache)."""
    name = f'{split}.tsv'
    try:
        source = fetch(f'sentiment/sst2/{name}', path=Path(sst2_dir).expanduser() / name if sst2_dir else None)
        lines = read_text(source).splitlines()  # a byte-order mark dropped, a file not in UTF-8 named
    except FileNotFoundError:
        if sst2_dir:
            raise FileNotFoundError(f"data.sst2_dir={str(sst2_dir)!r} holds no {name}: give the folder of SST-2's "
                                    "train.tsv, dev.tsv and test.tsv (unzipped GLUE SST-2.zip)") from None
        source = fetch('sentiment/SST-2.zip', SST2_ZIP_URL, local_copy='unzip it and pass the folder of its train.tsv '
                       'and dev.tsv with --data.sst2_dir=DIR')
        try:
            with zipfile.ZipFile(source) as z:
                member = z.getinfo(f'SST-2/{name}')
                if member.file_size > SST2_MAX_BYTES:  # read whole, a zip bomb's would fill the memory
                    raise zipfile.BadZipFile(f"its {name} unpacks to {member.file_size:,} bytes")
                lines = z.read(member).decode('utf-8').splitlines()
        except (zipfile.BadZipFile, KeyError) as e:
            raise ValueError(f"{source} is not GLUE's SST-2.zip ({e}); delete it, and it is downloaded again") from None
    expected = ['index', 'sentence'] if split == 'test' else ['sentence', 'label']
    if not lines or lines[0].split('\t') != expected:
        raise ValueError(f"{source} ({name}) is not SST-2's {split} file: its first line should be "
                         f"{'<TAB>'.join(expected)!r}, got {lines[0][:60] if lines else '(empty file)'!r}")
    rows = [line.split('\t') for line in lines[1:] if line.strip()][:limit]
    if not rows:
        raise ValueError(f"{source} ({name}) holds no sentences, only its header line")
    if split == 'test':
        return [row[-1].strip() for row in rows], None
    for n, row in enumerate(rows, start=2):
        if row[-1] not in ('0', '1'):
            raise ValueError(f"{source} ({name}), line {n}: the label must be 0 or 1, got {row[-1]!r}")
    return [row[0].strip() for row in rows], [int(row[-1]) for row in rows]


def book_paragraphs(text, lowercase=True):
    """The paragraphs of a plain-text book, hard line wraps joined. From Project Gutenberg files (one, or several
    put one after another) only each book's body is kept: headers, licences and any text outside them are dropped."""
    text = book_body(text.replace('\r\n', '\n'))
    paragraphs = [' '.join(p.split()) for p in re.split(r'\n\s*\n', text)]
    return [p.lower() if lowercase else p for p in paragraphs if p]


class SentenceDataset(torch.utils.data.Dataset):
    """Classifier examples: a sentence's ids and the suffix, right-padded with -1 to block_size, and its label. The
    sentence is stripped, as read_sst2 strips SST-2's: a space before the suffix would be a token of its own."""

    def __init__(self, sentences, labels, tokenizer, suffix, block_size):
        suffix_ids = tokenizer.encode(suffix)
        room = block_size - len(suffix_ids)
        if room < 1:
            raise ConfigError(f"classifier.suffix {suffix!r} takes {len(suffix_ids)} of the {block_size} tokens of "
                              "data.block_size: no room is left for the sentence; raise block_size or shorten the "
                              "suffix")
        self.x = torch.full((len(sentences), block_size), -1, dtype=torch.long)
        self.cut = 0  # how many sentences were longer than block_size allows, and were cut
        for n, s in enumerate(sentences):
            ids = tokenizer.encode(' ' + s.strip())
            self.cut += len(ids) > room
            ids = ids[:room] + suffix_ids
            self.x[n, :len(ids)] = torch.tensor(ids)
        self.y = torch.tensor(labels, dtype=torch.long)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def note_cut(dataset, what, block_size):
    """Says when sentences were cut: the classifier never reads their ends, which can turn a prediction."""
    if dataset.cut:
        print(f"note: {dataset.cut} {what} are longer than block_size {block_size} and were cut")


# ----------------------------------------------------------------------------------------------------------------
# building models and checkpoints

def load_lm(config, tokenizer_texts):
    """(gpt, tokenizer) to start from: a checkpoint of this project, GPT-2 weights, or a new model."""
    init = config.system.init
    if init and Path(init).is_file():
        # the checkpoint's shape and tokenizer (said, and recorded in config.json), this run's dropout
        ckpt = load_checkpoint(init)
        shape, state, tokenizer = saved_gpt(ckpt, init)
        check_shape_asked(config.model, shape, init)
        check_tokenizer_asked(config.data, tokenizer.kind, init)
        shape.merge_from_dict({k: getattr(config.model, k) for k in DROPOUT_OPTIONS})
        config.model = shape
        with parameters_on_meta():  # no random initialisation, and no second copy: the weights come from the file
            gpt = GPT(shape)
        load_weights(gpt, state)
        # how long it trained: a run stopped early leaves the model.pt of its first evaluation, after 1 iteration
        n = ckpt.get('iter_num')
        trained = f" (after {n:,} {plural(n, 'iteration')})" if isinstance(n, int) else ''
        print(f"starting from {init}{trained}: its model ({shape.n_layer} layers, {shape.n_head} heads, "
              f"{shape.n_embd} wide) and its {tokenizer.kind} tokenizer; --data.tokenizer does not apply")
        config.data.tokenizer = tokenizer.kind
        fit_context(config.data, gpt, init)
        return gpt, tokenizer
    if init and str(init).endswith(('.pt', '.pth')):  # a checkpoint's path, not a hub id: it does not exist
        raise no_checkpoint(init, "run the stage that writes it first (python projects/sentiment.py pretrain writes "
                                  "out/sentiment/pretrain/model.pt, or model.pt in its --system.work_dir), or give "
                                  "GPT-2: a hub id or a Hugging Face directory")
    if init:  # a GPT-2 hub id or a Hugging Face directory
        check_tokenizer_asked(config.data, 'gpt2', init)  # before the weights are read (or downloaded)
        gpt, tokenizer = GPT.from_pretrained(init), Vocabulary('gpt2')
        check_shape_asked(config.model, gpt.config, init)
        gpt = with_options(gpt, **{k: getattr(config.model, k) for k in DROPOUT_OPTIONS})
        gpt.train()  # from_pretrained gives it in eval mode, for sampling: without dropout
        if gpt.config.vocab_size != tokenizer.vocab_size:
            raise ConfigError(f"{init} has a vocabulary of {gpt.config.vocab_size} tokens, not GPT-2's "
                              f"{tokenizer.vocab_size}: sentiment.py fine-tunes GPT-2 weights with GPT-2's tokenizer")
        if config.data.tokenizer != 'gpt2':
            print(f"GPT-2 weights: using the full GPT-2 vocabulary (data.tokenizer 'gpt2', not "
                  f"{config.data.tokenizer!r})")
            config.data.tokenizer = 'gpt2'
        fit_context(config.data, gpt, init)
        return gpt, tokenizer
    tokenizer = Vocabulary.build(config.data.tokenizer, tokenizer_texts)
    set_from_data(config.model, 'model', vocab_size=tokenizer.vocab_size, block_size=config.data.block_size,
                  data=config.data)
    return GPT(config.model), tokenizer


def fit_context(data, gpt, init):
    """data.block_size cut to the context of the model init brings (one pretrained on 32-token windows, say), and
    said: it was cut silently, and config.json recorded the longer one as the run's."""
    if data.block_size > gpt.block_size:
        print(f"note: data.block_size={data.block_size} is longer than the context of {init} ({gpt.block_size} "
              f"tokens): windows and sentences are cut to {gpt.block_size}")
        data.block_size = gpt.block_size


def saved_gpt(ckpt, path):
    """(config, weights, vocabulary) of the GPT in a checkpoint of this project (a language model, or a classifier's
    gpt.*), the config checked against the weights before the model is built: a config can ask for any size, which
    takes minutes to build or more memory than there is (n_layer=10**6)."""
    vocabulary = saved_vocabulary(ckpt, path)
    weights = ckpt.get('model')
    refuse_non_tensors(weights, f"{path}'s 'model'", "a model's weights")
    if 'classifier' in ckpt:  # a fine-tuned classifier: its GPT, without its head
        weights = {k[len('gpt.'):]: v for k, v in weights.items() if k.startswith('gpt.')}
    try:
        config = checked_config(GPT, ckpt, weights, path)
    except ConfigError as e:
        raise ValueError(f"{path} does not hold a GPT that this code can build ({e})") from None
    if config.vocab_size != vocabulary.vocab_size:  # ids past the model's would fail in its embedding
        raise ValueError(f"{path} was not loaded: its vocabulary has {vocabulary.vocab_size} tokens and its model "
                         f"{config.vocab_size}; the two do not belong together")
    return config, weights, vocabulary


def saved_vocabulary(ckpt, path):
    """The Vocabulary a checkpoint of this project records (its 'tokenizer'); another project's checkpoint, or a
    record of another shape (a damaged or hostile file), is refused by name."""
    record = ckpt.get('tokenizer')
    if record is None or isinstance(record, dict) and set(record) != {'kind', 'tokens'}:
        # e.g. chargpt's: its vocabulary has neither the <|endoftext|> suffix nor an unknown token for SST-2's text
        raise ValueError(f"{path} was not written by projects/sentiment.py (it records no vocabulary of this "
                         "project's); give one of its pretrain or finetune checkpoints (or, to fine-tune, GPT-2: a "
                         "hub id or a Hugging Face directory). To start from an LM of your own text (chargpt's "
                         "Tiny Shakespeare, say), pretrain it here: python projects/sentiment.py pretrain "
                         "--data.text=tinyshakespeare/input.txt, then finetune "
                         "--system.init=out/sentiment/pretrain/model.pt")
    return Vocabulary.from_record(record, path)


def check_shape_asked(model, shape, init, note=' (only the dropouts apply)'):
    """--system.init (or the classifier evaluated) brings its own model: a size asked for on the command line
    (--model.model_type or n_layer, n_head, n_embd) that it does not have would be ignored, so it is refused."""
    preset = model.model_type if model.model_type != get_config().model.model_type else None  # not the default
    asked = {**GPT.PRESETS.get(preset, {}), **{k: v for k, v in model.to_dict().items()
                                                if k in ('n_layer', 'n_head', 'n_embd') and v is not None}}
    refuse_other(asked, shape, 'model', init, note)


def check_tokenizer_asked(data, kind, init):
    """--system.init brings its own tokenizer (`kind`): the default gives way to it, but another one asked for on the
    command line would be ignored, so it is refused."""
    if data.tokenizer not in (get_config().data.tokenizer, kind):
        raise ConfigError(f"{init} brings its own tokenizer ({kind}), so data.tokenizer={data.tokenizer!r} cannot be "
                          "chosen; leave --data.tokenizer out")


def refuse_other(asked, saved, section, source, note=''):
    """source (a checkpoint) brings its own `section` options (saved, a CfgNode): a value asked for on the command
    line (asked: key -> value) that differs from the saved one would be ignored, so it is refused."""
    differ = [f"{section}.{k}={v!r} (it has {getattr(saved, k)!r})" for k, v in asked.items() if v != getattr(saved, k)]
    if differ:
        raise ConfigError(f"{source} brings its own {section}, so {', '.join(differ)} cannot be chosen; leave "
                          f"--{section}.* out{note}")


def load_classifier(config, device):
    """(classifier, tokenizer, checkpoint) of config.system.checkpoint, built by make_classifier from the options it
    was fine-tuned with (--classifier.* options, model sizes and a data.tokenizer that differ are refused);
    config.data.block_size and tokenizer become the ones it was fine-tuned with."""
    path = config.system.checkpoint
    if not os.path.exists(path):  # load_checkpoint's message knows neither this project's command nor its options
        raise no_checkpoint(path, "fine-tune a classifier first (python projects/sentiment.py finetune writes "
                                  "out/sentiment/finetune/model.pt), or name another run with --system.work_dir=DIR "
                                  "or a checkpoint file with --system.checkpoint=PATH")
    ckpt = load_checkpoint(path, map_location='cpu')
    if not isinstance(ckpt.get('classifier'), dict):  # the options it was fine-tuned with
        raise ValueError(f"{path} is not a sentiment classifier; fine-tune one first "
                         "(python projects/sentiment.py finetune ...)")
    C = get_config().classifier
    default = C.to_dict()
    C.merge_from_dict(ckpt['classifier'])
    refuse_other({k: v for k, v in config.classifier.to_dict().items() if v != default[k]}, C, 'classifier', path)
    shape, _, tokenizer = saved_gpt(ckpt, path)
    check_shape_asked(config.model, shape, path, note='')
    with parameters_on_meta():  # as load_lm's
        model = make_classifier(C, GPT(shape), tokenizer)
    load_weights(model, ckpt['model'])
    try:  # the block_size it was fine-tuned with: it cut the sentences so
        trained = min(int(ckpt['config']['data']['block_size']), model.gpt.block_size)
    except (KeyError, TypeError, ValueError):  # a run record older than that, or damaged: the model's context
        trained = model.gpt.block_size
    set_from_data(config.data, 'data', fix='the classifier reads sentences as in its fine-tuning', source=path,
                  block_size=trained, tokenizer=tokenizer.kind)
    return model.to(device).eval(), tokenizer, ckpt


# ----------------------------------------------------------------------------------------------------------------
# the stages

def pretrain(config):
    D = config.data
    sentences, _ = read_sst2('train', D.sst2_dir, D.train_limit)
    val_split = 'test'  # the LM's val text: GLUE's test sentences (unlabelled, never scored here), else the dev ones
    try:
        val_sentences, _ = read_sst2(val_split, D.sst2_dir, D.dev_limit)
    except (FileNotFoundError, RuntimeError):  # RuntimeError: GLUE's zip could not be downloaded
        print("no SST-2 test.tsv: the LM's val loss is on the dev sentences (their text only, not their labels)")
        val_split = 'dev'
        val_sentences, _ = read_sst2(val_split, D.sst2_dir, D.dev_limit)
    gpt, tokenizer = load_lm(config, sentences)
    if D.text:  # a path, or one relative to $MINGPT_DATA_DIR / the cache (e.g. text/gutenberg/2600-0.txt)
        url, sha256 = BOOKS.get(D.text, (None, None))
        if url is None:  # not one of the README's books: a file (or a folder of .txt files) of one's own
            path = fetch(D.text, path=D.text, folder=True)
        else:
            path = find_local(D.text) or fetch(D.text, url, sha256=sha256,
                                               local_copy='pass its path with --data.text=FILE')
        texts = book_paragraphs(read_corpus(path), D.lowercase)
        if not texts:
            raise ValueError(f"{D.text} holds no text to pretrain on")
    else:
        texts = sentences

    def one_text(texts):  # the texts one after another, each after an <|endoftext|>, as GPT-2 was trained
        return ''.join(ENDOFTEXT + ' ' + t for t in texts)

    # a large text is tokenized once, into the cache; a resume or a later run on it reads the ids back
    ids = encode_text(one_text(texts), tokenizer, tokenizer.state(), Path(D.text or 'sst2-train').name)
    unk = (ids == tokenizer.unk).sum()  # gpt2's unk is None: no id equals it
    print(f"pretraining on {len(texts):,} texts, {len(ids):,} tokens ({unk / len(ids):.1%} outside the vocabulary)")
    block_size = config.data.block_size  # load_lm fits it to a model brought

    def windows(ids, what):  # TokenDataset's error does not say which text is too short
        try:
            return TokenDataset(ids, block_size, tokenizer.vocab_size)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
    train_set = windows(ids, f"the pretraining text, {D.text or f'SST-2 train (data.train_limit={D.train_limit})'}")
    val_set = windows(tokenizer.encode(one_text(val_sentences)),
                      f"the val text, SST-2's {val_split} sentences (data.dev_limit={D.dev_limit})")
    # a resume must see the same text and tokenizer
    extras = {'data': {k: getattr(D, k) for k in ('text', 'lowercase', 'train_limit')}, 'tokenizer': tokenizer.state()}
    trainer = Trainer(config.trainer, gpt, train_set, val_dataset=val_set, run_config=config,
                      checkpoint_extras=extras, must_match=['data?', 'tokenizer'])  # data?: older ones lack it
    trainer.add_callback('on_eval_end', lambda trainer: print(
        f"\niter {trainer.iter_num}: train loss {trainer.loss.item():.4f}, val loss {trainer.val_loss:.4f}"))
    trainer.run()


def make_classifier(C, gpt, tokenizer):
    """The classifier that the options C (config.classifier) describe, on gpt; for fine-tuning and for reading a
    fine-tuned one back (load_classifier)."""
    label_ids = None
    if C.head == 'label_words':
        if len(C.label_words) != len(LABELS):
            raise ConfigError(f"classifier.label_words must be {len(LABELS)} words, one per class "
                              f"({', '.join(LABELS)}), not {C.label_words!r}")
        label_ids = [tokenizer.encode(w) for w in C.label_words]
        bad = [f"{w!r} is {len(i)} tokens" if len(i) != 1 else f"{w!r} is not in the vocabulary (the unknown token)"
               for w, i in zip(C.label_words, label_ids) if len(i) != 1 or i[0] == tokenizer.unk]
        if bad:
            # a cut vocabulary (bpe, char) holds only what its sentences held: data.train_limit cuts it too; gpt2's
            # holds every word, and --system.init brings its own, which data.tokenizer cannot change
            choose = ("words that are one GPT-2 token (with a leading space)" if tokenizer.kind == 'gpt2' else
                      "words that occur in the sentences its vocabulary was built from (with a leading space for "
                      "bpe, single characters for char), or the gpt2 tokenizer, which holds every GPT-2 token "
                      "(data.tokenizer=gpt2; with --system.init, a model pretrained with it)")
            raise ConfigError(f"classifier.label_words must be one token each in the {tokenizer.kind} vocabulary: "
                              f"{'; '.join(bad)}. Choose {choose}")
        label_ids = [i[0] for i in label_ids]
    elif C.head != 'linear':
        raise ConfigError(f"classifier.head must be 'linear' or 'label_words', not {C.head!r}")
    return GPTClassifier(gpt, len(LABELS), C.dropout, label_ids, C.lm_loss_weight)


def finetune(config):
    train_sentences, train_labels = read_sst2('train', config.data.sst2_dir, config.data.train_limit)
    dev_sentences, dev_labels = read_sst2('dev', config.data.sst2_dir, config.data.dev_limit)
    gpt, tokenizer = load_lm(config, train_sentences)
    model = make_classifier(config.classifier, gpt, tokenizer)
    model.freeze(config.classifier.trainable_blocks)
    block_size = config.data.block_size  # load_lm fits it to a model brought
    train_set = SentenceDataset(train_sentences, train_labels, tokenizer, config.classifier.suffix, block_size)
    dev_set = SentenceDataset(dev_sentences, dev_labels, tokenizer, config.classifier.suffix, block_size)
    note_cut(dev_set, 'dev sentences', block_size)
    # no val_dataset: the trainer would keep the model of lowest dev loss, and choosing a model by the set we report
    # on flatters it. model.pt is the latest (written every checkpoint_interval iterations and at the end).
    # run_files: a replaced run's eval.json must not outlive it beside this run's files (run() removes it)
    trainer = Trainer(config.trainer, model, train_set, run_config=config, must_match=['tokenizer', 'classifier'],
                      checkpoint_extras={'classifier': config.classifier.to_dict(), 'tokenizer': tokenizer.state()},
                      run_files=['eval.json'])

    def on_batch_end(trainer):
        T = config.trainer
        if T.eval_interval and trainer.iter_num % T.eval_interval == 0 or trainer.steps_done == T.max_iters:
            print(f"\niter {trainer.iter_num}: train loss {trainer.loss.item():.4f}")
            # iter_num in eval.json counts iterations done, as the checkpoints do
            report = evaluate(model, dev_set, trainer.device, trainer.config.work_dir, iter_num=trainer.steps_done)
            # also on this step's line of metrics.jsonl: eval.json keeps only the latest, and runs compare by curves
            trainer.metrics.update(dev_accuracy=report['accuracy'], dev_loss=report['loss'])

    trainer.add_callback('on_batch_end', on_batch_end)
    trainer.run()


def run_evaluate(config):
    device = resolve_device(config.trainer.device, 'trainer.device')
    model, tokenizer, ckpt = load_classifier(config, device)
    sentences, labels = read_sst2('dev', config.data.sst2_dir, config.data.dev_limit)
    dataset = SentenceDataset(sentences, labels, tokenizer, ckpt['classifier']['suffix'], config.data.block_size)
    note_cut(dataset, 'dev sentences', config.data.block_size)
    return evaluate(model, dataset, device, config.system.work_dir, checkpoint=str(config.system.checkpoint),
                    iter_num=ckpt.get('iter_num'))


def run_predict(config, sentences):
    device = resolve_device(config.trainer.device, 'trainer.device')
    model, tokenizer, ckpt = load_classifier(config, device)
    dataset = SentenceDataset(sentences, [0] * len(sentences), tokenizer, ckpt['classifier']['suffix'],
                              config.data.block_size)
    note_cut(dataset, 'sentences', config.data.block_size)
    for s, p in zip(sentences, predict_proba(model, dataset, device)):
        c = int(p.argmax())
        print(f"{LABELS[c]} ({p[c]:.3f})\t{s}")


def check_options(config):
    """The project's options, checked before any data is read, so a typo is told at once."""
    D, C = config.data, config.classifier
    # at least one token of a sentence, and the suffix; None (evaluate, predict): the classifier's own
    check_range('data.block_size', D.block_size, 2, integer=True, none_ok=config.system.stage in STAGES[2:])
    check_range('data.train_limit', D.train_limit, 1, integer=True, none_ok=True)
    check_range('data.dev_limit', D.dev_limit, 1, integer=True, none_ok=True)
    check_range('classifier.dropout', C.dropout, 0, 1, high_open=True)
    check_range('classifier.lm_loss_weight', C.lm_loss_weight, 0)
    check_range('classifier.trainable_blocks', C.trainable_blocks, -1, integer=True)
    check_model_options(config)
    if config.system.stage in STAGES[:2]:  # the stages that train
        Trainer.check_options(config.trainer)


def check_model_options(config):
    """The model's options, before any data is read: a typo (--model.model_type=gpt-nanoo) is told at once. A new
    model's are checked whole, with the sizes the data sets standing in as 1. A model that system.init (or the
    classifier evaluated) brings keeps its own options: its sizes, which check_shape_asked compares with those asked
    for (here only the preset's name is checked, which it would take for no preset and pass over), and the dropouts
    for training on; any other option given would do nothing, and is refused."""
    M, init, training = config.model, config.system.init, config.system.stage in STAGES[:2]
    shape = {}
    if init or not training:  # a model brought
        shape = dict(model_type=M.model_type or get_config().model.model_type, n_layer=None, n_head=None, n_embd=None)
        kept = [*shape, *(DROPOUT_OPTIONS if training else ())]
        source = (f"system.init={init!r}" if training
                  else f"the classifier {config.system.stage} reads (system.checkpoint)")  # evaluate or predict
        refuse_ignored('model', M, get_config().model, [k for k in M.to_dict() if k not in kept],
                       f"{source} brings its own model, with its own options (sizes given must be its own"
                       f"{'; the dropouts apply' if training else ''}): leave them out")
    check_options_before_data(GPT, M, **shape)


def parse_args(argv):
    """The stage's config with argv's options applied (work_dir and checkpoint filled in), and predict's
    sentences."""
    after = argv.index('--') if '--' in argv else len(argv)  # after '--' every argument is a sentence ('--great')
    argv, sentences = argv[:after], argv[after + 1:]
    argv = get_config().normalize_args(argv)  # '--key value' -> '--key=value': a value is not a sentence
    option = [a.startswith('--') or a == '-h' for a in argv]  # not '-lrb- ...': SST-2 writes brackets so
    positional = [a for a, o in zip(argv, option) if not o]  # the stage, then predict's sentences
    argv = [a for a, o in zip(argv, option) if o]
    flags = [a.split('=', 1)[1] for a in argv if a.startswith('--system.stage=')]  # then every positional is a sentence
    stage = flags[-1] if flags else positional.pop(0) if positional else 'finetune'
    if stage not in STAGES:
        raise ConfigError(f"unknown stage {stage!r}; choose one of {', '.join(STAGES)} (the first argument, "
                          "or --system.stage=...)")
    config = get_config(stage)
    config.merge_from_args(argv, usage=f"{__doc__}\nDefaults below are the {stage} stage's (e.g. python "
                                       "projects/sentiment.py pretrain --help).")
    check_options(config)
    positional += sentences
    if config.predict.text:
        positional.insert(0, config.predict.text)
    if positional and stage != 'predict':
        raise ConfigError(f"unexpected arguments {positional}: only predict takes sentences; options are "
                          "--section.key=value (--help lists them)")
    if stage == 'predict' and not all(s.strip() for s in positional or ['']):
        raise ConfigError('predict needs a sentence (not an empty one): python projects/sentiment.py predict "what a '
                          'lovely film ."')
    run = config.system.work_dir  # evaluate / predict read the classifier of this run, when one is named
    config.system.work_dir = run or os.path.join('out', 'sentiment', stage)
    if stage in ('evaluate', 'predict'):
        finetuned = run or os.path.join('out', 'sentiment', 'finetune')
        config.system.checkpoint = config.system.checkpoint or os.path.join(finetuned, 'model.pt')
    elif config.system.checkpoint is not None:  # kept, config.json would name another run's classifier as this one's
        warn_caller(f"system.checkpoint={config.system.checkpoint} is ignored: {stage} writes its own model.pt in "
                    f"{config.system.work_dir}, only evaluate and predict read one (to start from weights, give "
                    "--system.init=PATH)")
        config.system.checkpoint = None
    return config, positional


def main(argv):
    config, sentences = parse_args(argv)
    set_seed(config.system.seed)
    stage = config.system.stage
    if stage == 'predict':
        return run_predict(config, sentences)
    if stage == 'pretrain':
        return pretrain(config)
    if stage == 'finetune':
        return finetune(config)
    return run_evaluate(config)


if __name__ == '__main__':
    run_cli(main)
