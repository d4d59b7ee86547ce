"""projects/sentiment.py: the classifier (padding invariance, label-word head, freezing), the SST-2 files, and every
stage end to end on a slice of SST-2 with tiny models."""
import json
import math
import re
import zipfile
from pathlib import Path

import pytest
import torch

import mingpt.data
from conftest import data_dir, load_project
from mingpt.bpe import get_encoder, train_bpe
from mingpt.checkpoint import load_checkpoint, save_checkpoint
from mingpt.data import CharTokenizer
from mingpt.model import GPT
from mingpt.pretrained import tokenizer_record
from mingpt.utils import ConfigError, args_of

sentiment = load_project('sentiment')


def tiny_gpt(vocab_size=50, block_size=16, n_layer=2):
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type=None, n_layer=n_layer, n_head=2, n_embd=16, vocab_size=vocab_size,
                           block_size=block_size, embd_pdrop=0.0, resid_pdrop=0.0, attn_pdrop=0.0))
    return GPT(C)


def test_padding_never_changes_a_prediction():
    torch.manual_seed(0)
    model = sentiment.GPTClassifier(tiny_gpt()).eval()
    torch.nn.init.normal_(model.head.weight)  # a head that is not almost zero, so the logits differ by sentence
    sentences = [[5, 7, 0], [3, 1, 4, 1, 5, 9, 2, 6], [8]]  # id 0 is a token like any other, not padding
    alone = [model(torch.tensor([s]))[0][0] for s in sentences]  # no padding at all
    batch = torch.full((len(sentences), 16), -1)  # padded to block_size, beside longer and shorter sentences
    for i, s in enumerate(sentences):
        batch[i, :len(s)] = torch.tensor(s)
    batched = model(batch)[0]
    for i, a in enumerate(alone):
        torch.testing.assert_close(batched[i], a, atol=1e-5, rtol=1e-5)
        assert batched[i].argmax() == a.argmax()
    # the padding's value never matters: only where the sentence ends
    other = batch.clone()
    other[other < 0] = -7
    torch.testing.assert_close(model(other)[0], batched)
    with pytest.raises(ValueError, match='only padding'):
        model(torch.full((1, 4), -1))


def test_label_word_head_starts_as_the_lms_next_token_logits():
    torch.manual_seed(0)
    gpt = tiny_gpt().eval()
    model = sentiment.GPTClassifier(gpt, dropout=0.0, label_ids=[11, 22]).eval()
    idx = torch.tensor([[5, 7, 0, -1, -1]])  # the head reads the state after the last real token, here id 0
    lm_logits, _ = gpt(idx[:, :3])
    torch.testing.assert_close(model(idx)[0][0], lm_logits[0, -1, [11, 22]])


def test_auxiliary_lm_loss_counts_only_real_next_tokens():
    torch.manual_seed(0)
    gpt = tiny_gpt()
    model = sentiment.GPTClassifier(gpt, dropout=0.0, lm_loss_weight=0.5)
    idx, y = torch.tensor([[5, 7, 9, -1], [3, 4, 0, 6]]), torch.tensor([0, 1])
    logits, loss = model(idx, y)
    lm = torch.nn.functional.cross_entropy(
        torch.cat([gpt(idx[:1, :3])[0][0, :2], gpt(idx[1:])[0][0, :3]]), torch.tensor([7, 9, 4, 0, 6]))
    torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(logits, y) + 0.5 * lm)
    model.eval()  # evaluation scores the classifier alone
    torch.testing.assert_close(model(idx, y)[1], torch.nn.functional.cross_entropy(logits, y))


class Examples:
    """What evaluate reads of a dataset: its inputs x, labels y and length."""

    def __init__(self, x, y):
        self.x, self.y = torch.tensor(x), torch.tensor(y)

    def __len__(self):
        return len(self.y)


def test_evaluation_report_by_hand(tmp_path):
    """Five examples, true labels 0 0 0 1 1, predicted 0 1 1 1 0, each with probability 0.8."""
    class Fixed(torch.nn.Module):
        def forward(self, idx):
            return torch.tensor([[0.8, 0.2], [0.2, 0.8]]).log()[idx[:, 0]], None

    report = sentiment.evaluate(Fixed(), Examples([[0], [1], [1], [1], [0]], [0, 0, 0, 1, 1]), 'cpu', tmp_path)
    assert report['confusion_matrix'] == [[1, 2], [1, 1]]  # rows: the true label; columns: the prediction
    assert report['accuracy'] == pytest.approx(2 / 5)
    # F1 = 2TP / (2TP + FP + FN): negative 2 / (2 + 1 + 2), positive 2 / (2 + 2 + 1)
    assert report['classes'] == {
        'negative': {'precision': pytest.approx(1 / 2), 'recall': pytest.approx(1 / 3), 'f1': pytest.approx(2 / 5)},
        'positive': {'precision': pytest.approx(1 / 3), 'recall': pytest.approx(1 / 2), 'f1': pytest.approx(2 / 5)}}
    assert report['loss'] == pytest.approx(-(2 * math.log(0.8) + 3 * math.log(0.2)) / 5)
    assert json.loads((tmp_path / 'eval.json').read_text())['confusion_matrix'] == [[1, 2], [1, 1]]


@pytest.mark.parametrize('blocks, trainable', [
    (-1, None),  # everything
    (0, {'head.weight', 'head.bias'}),
    (1, {'head.weight', 'head.bias', 'gpt.transformer.ln_f.weight', 'gpt.transformer.ln_f.bias'}),
])
def test_freezing(blocks, trainable, capsys):
    model = sentiment.GPTClassifier(tiny_gpt(n_layer=3))
    capsys.readouterr()
    model.freeze(blocks)
    got = {n for n, p in model.named_parameters() if p.requires_grad}
    if blocks == 0:  # a linear probe is told how few parameters it trains: the head's n_embd x 2 weights and 2 biases
        total = sum(p.numel() for p in model.parameters())
        n_embd = model.config.n_embd
        assert capsys.readouterr().out == (f"training {n_embd * 2 + 2:,} of the {total:,} parameters "
                                           "(classifier.trainable_blocks=0)\n")
    if trainable is None:
        assert got == {n for n, _ in model.named_parameters()}
    else:
        last_block = {n for n in got if n.startswith('gpt.transformer.h.')}
        assert got - last_block == trainable
        assert all(n.startswith('gpt.transformer.h.2.') for n in last_block) and bool(last_block) == (blocks > 0)
    # the frozen layers run without dropout, in eval mode, while the trainable ones and the head's dropout train
    frozen = {n for n, m in model.named_modules() if n.startswith('gpt') and not m.training}
    if blocks < 0:
        assert not frozen
    else:
        assert 'gpt' in frozen and 'gpt.transformer.drop' in frozen and 'dropout' not in frozen
        assert ('gpt.transformer.h.2.attn.attn_dropout' in frozen) == (blocks == 0)
        assert 'gpt.transformer.h.1.mlp.dropout' in frozen
    with pytest.raises(ConfigError, match='trainable_blocks'):
        model.freeze(4)


def test_a_linear_probe_trains_on_the_features_without_dropout(tmp_path):
    """The trainer keeps the frozen GPT in eval mode: every step sees the same features for the same sentence."""
    gpt = tiny_gpt(n_layer=2)
    for m in gpt.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.1
    model = sentiment.GPTClassifier(gpt)
    model.freeze(0)
    idx = torch.randint(0, model.config.vocab_size, (4, 8))
    seen = []
    config = sentiment.Trainer.get_default_config()
    config.merge_from_dict(dict(max_iters=3, batch_size=4, quiet=True, work_dir=str(tmp_path)))
    trainer = sentiment.Trainer(config, model, torch.utils.data.TensorDataset(idx, torch.tensor([0, 1, 0, 1])))
    trainer.add_callback('on_batch_end', lambda t: seen.append(model.gpt.hidden_states(idx)))
    trainer.run()
    assert model.training and all(torch.equal(seen[0], h) for h in seen[1:])


def test_read_sst2_and_its_errors(tmp_path):
    (tmp_path / 'dev.tsv').write_text('sentence\tlabel\nit \'s a charming journey . \t1\ndull . \t0\n')
    assert sentiment.read_sst2('dev', tmp_path) == (["it 's a charming journey .", 'dull .'], [1, 0])
    assert sentiment.read_sst2('dev', tmp_path, limit=1) == (["it 's a charming journey ."], [1])
    (tmp_path / 'test.tsv').write_text('index\tsentence\n0\tno label here . \n')
    assert sentiment.read_sst2('test', tmp_path) == (['no label here .'], None)
    (tmp_path / 'train.tsv').write_text('text\tlabel\nsomething\t1\n')
    with pytest.raises(ValueError, match="sentence<TAB>label"):
        sentiment.read_sst2('train', tmp_path)
    for bad in ('positive', '2'):
        (tmp_path / 'train.tsv').write_text(f'sentence\tlabel\nfine . \t1\nfine . \t{bad}\n')
        with pytest.raises(ValueError, match=f"train.tsv\\), line 3: the label must be 0 or 1, got '{bad}'"):
            sentiment.read_sst2('train', tmp_path)
    with pytest.raises(FileNotFoundError):
        sentiment.read_sst2('dev', tmp_path / 'nowhere')
    (tmp_path / 'dev.tsv').write_text('sentence\tlabel\ndull . \t0\n\n')  # a blank last line is no sentence
    assert sentiment.read_sst2('dev', tmp_path) == (['dull .'], [0])
    (tmp_path / 'dev.tsv').write_text('index\tsentence\n0\tno label here . \n')  # the test split's layout
    with pytest.raises(ValueError, match=r"is not SST-2's dev file: its first line should be 'sentence<TAB>label'"):
        sentiment.read_sst2('dev', tmp_path)
    (tmp_path / 'dev.tsv').write_text('sentence\tlabel\n')
    with pytest.raises(ValueError, match=r"dev.tsv\) holds no sentences, only its header line"):
        sentiment.read_sst2('dev', tmp_path)


def test_read_sst2_from_windows_editors(tmp_path):
    """A train.tsv saved on Windows: a byte-order mark and CRLF (Notepad's UTF-8) read as the plain file; a cp1252 file
    (Excel's 'Text (Tab delimited)') is named, as every text file that is not UTF-8 is."""
    (tmp_path / 'train.tsv').write_text('sentence\tlabel\nun film tr\xe8s r\xe9ussi\t1\n', encoding='utf-8-sig',
                                        newline='\r\n')
    assert sentiment.read_sst2('train', tmp_path) == (['un film tr\xe8s r\xe9ussi'], [1])
    (tmp_path / 'train.tsv').write_text('sentence\tlabel\nun film tr\xe8s r\xe9ussi\t1\n', encoding='cp1252')
    with pytest.raises(ValueError, match=r"train.tsv is not UTF-8 text \(byte 25 cannot be decoded"):
        sentiment.read_sst2('train', tmp_path)


def test_sst2_falls_back_to_glues_zip(tmp_path, monkeypatch):
    """No SST-2 anywhere: GLUE's zip is downloaded (here: faked) into the cache once, and read from there."""
    monkeypatch.delenv('MINGPT_DATA_DIR', raising=False)
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path / 'cache'))
    downloads = []

    def fake_download(url, dest, sha256=None, quiet=False, local_copy=None):
        downloads.append(url)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(dest, 'w') as z:
            for split in ('train', 'dev', 'test'):
                z.writestr(f'SST-2/{split}.tsv', f'sentence\tlabel\n{split} sentence . \t1\n')
        return dest

    monkeypatch.setattr(mingpt.data, 'download', fake_download)
    assert sentiment.read_sst2('dev') == (['dev sentence .'], [1])
    assert sentiment.read_sst2('train') == (['train sentence .'], [1])
    assert downloads == [sentiment.SST2_ZIP_URL]  # the second split came from the cached zip
    assert (tmp_path / 'cache' / 'sentiment' / 'SST-2.zip').exists()
    (tmp_path / 'cache' / 'sentiment' / 'SST-2.zip').write_text('<html>an error page</html>')
    with pytest.raises(ValueError, match=r"SST-2.zip is not GLUE's SST-2.zip \(.*\); delete it, and it is downloaded"):
        sentiment.read_sst2('dev')


def test_a_zip_whose_member_would_unpack_beyond_any_sst2_file_is_refused_unread(tmp_path, monkeypatch):
    """A zip bomb in the cache: 775 KB that unpacked to 400 MB took 8.4 GB of memory to read 10 sentences."""
    monkeypatch.delenv('MINGPT_DATA_DIR', raising=False)
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path))
    (tmp_path / 'sentiment').mkdir()
    with zipfile.ZipFile(tmp_path / 'sentiment' / 'SST-2.zip', 'w', zipfile.ZIP_DEFLATED) as z:
        z.writestr('SST-2/dev.tsv', b'sentence\tlabel\n' + b'a fine film .\t1\n' * (sentiment.SST2_MAX_BYTES // 16))
    with pytest.raises(ValueError, match=r"SST-2.zip is not GLUE's SST-2.zip \(its dev.tsv unpacks to 67,108,879 "
                                         r"bytes\); delete it, and it is downloaded again"):
        sentiment.read_sst2('dev', limit=10)


def test_pretrain_without_test_split_offline_uses_the_dev_sentences(tmp_path, monkeypatch, capsys):
    data_dir('gpt2', 'encoder.json')
    sst2 = tmp_path / 'data' / 'sentiment' / 'sst2'
    sst2.mkdir(parents=True)
    for split in ('train', 'dev'):
        (sst2 / f'{split}.tsv').write_text('sentence\tlabel\n' + 'a fine film . \t1\nso dull . \t0\n' * 40)
    (tmp_path / 'data' / 'gpt2').symlink_to(data_dir('gpt2'))
    monkeypatch.setenv('MINGPT_DATA_DIR', str(tmp_path / 'data'))
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path / 'cache'))

    def offline(url, dest, sha256=None, quiet=False, local_copy=None):
        raise RuntimeError(f'could not download {url}')
    monkeypatch.setattr(mingpt.data, 'download', offline)
    sentiment.main(['pretrain', f'--system.work_dir={tmp_path / "run"}', '--trainer.max_iters=1'] + TINY)
    assert "no SST-2 test.tsv: the LM's val loss is on the dev sentences" in capsys.readouterr().out


def test_a_text_too_short_for_one_window_is_named_with_its_limit(tmp_path, monkeypatch):
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path / 'cache'))
    args = ['pretrain', f'--data.sst2_dir={data_dir("sentiment", "sst2")}', '--trainer.max_iters=1'] + TINY
    with pytest.raises(ValueError, match=r"^the val text, SST-2's test sentences \(data.dev_limit=1\): the token"):
        sentiment.main(args + [f'--system.work_dir={tmp_path / "a"}', '--data.dev_limit=1'])
    with pytest.raises(ValueError, match=r"^the pretraining text, SST-2 train \(data.train_limit=1\): the token"):
        sentiment.main(args + [f'--system.work_dir={tmp_path / "b"}', '--data.train_limit=1'])


def test_a_model_block_size_names_the_data_option_that_sets_it(tmp_path, monkeypatch):
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path / 'cache'))
    with pytest.raises(ConfigError, match=r"model.block_size=48 cannot be chosen here: the data sets it \(to 32\); "
                                          r"leave it out, and give --data.block_size=48 instead$"):
        sentiment.main(['finetune', f'--data.sst2_dir={data_dir("sentiment", "sst2")}', '--model.block_size=48',
                        f'--system.work_dir={tmp_path / "run"}'] + TINY)


def test_the_readmes_book_is_downloaded_from_its_pinned_copy(tmp_path, monkeypatch):
    sst2, book = data_dir('sentiment', 'sst2'), data_dir('text', 'gutenberg', '2600-0.txt')
    monkeypatch.setenv('MINGPT_DATA_DIR', str(tmp_path / 'nothing'))
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path / 'cache'))
    asked = []

    def offline(url, dest, sha256=None, quiet=False, local_copy=None):
        asked.append((url, sha256))
        raise RuntimeError(f'could not download {url}; {local_copy}')
    monkeypatch.setattr(mingpt.data, 'download', offline)
    with pytest.raises(RuntimeError, match='could not download .*; pass its path with --data.text=FILE'):
        sentiment.main(['pretrain', f'--system.work_dir={tmp_path / "run"}', '--data.text=text/gutenberg/2600-0.txt',
                        f'--data.sst2_dir={sst2}', '--data.tokenizer=char'] + TINY)
    assert asked == [sentiment.BOOKS['text/gutenberg/2600-0.txt']]
    # the pinned copy is the one the tests read
    assert mingpt.data.sha256_of(book) == asked[0][1]


def test_a_text_of_ones_own_that_is_missing_is_named_as_missing(tmp_path, monkeypatch):
    """Not one of the README's books, so nothing to download: the message says the file given does not exist, not
    to pass a path with --data.text (which the user just did)."""
    sst2 = data_dir('sentiment', 'sst2')
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path / 'cache'))
    with pytest.raises(FileNotFoundError, match=r"^missing\.txt does not exist \(nor under .*\); pass the path of an "
                                                r"existing file or folder$"):
        sentiment.main(['pretrain', f'--system.work_dir={tmp_path / "run"}', '--data.text=missing.txt',
                        f'--data.sst2_dir={sst2}', '--data.tokenizer=char'] + TINY)


def test_an_sst2_dir_without_the_split_names_the_option_and_the_files(tmp_path):
    (tmp_path / 'train.tsv').write_text('sentence\tlabel\n')  # a file where the folder belongs
    for wrong in (tmp_path, tmp_path / 'train.tsv'):
        with pytest.raises(FileNotFoundError, match=re.escape(f"data.sst2_dir={str(wrong)!r} holds no dev.tsv: give "
                                                              "the folder of SST-2's train.tsv, dev.tsv and test.tsv")):
            sentiment.read_sst2('dev', wrong)


def test_offline_without_sst2_names_the_option_for_a_local_copy(tmp_path, no_network, monkeypatch):
    monkeypatch.setenv('MINGPT_DATA_DIR', str(tmp_path / 'nothing'))
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path / 'cache'))
    with pytest.raises(RuntimeError, match=r'could not download .*SST-2\.zip .* get the file elsewhere and unzip it '
                                           r'and pass the folder of its train\.tsv and dev\.tsv with '
                                           r'--data\.sst2_dir=DIR, or place it at'):
        sentiment.main(['pretrain', f'--system.work_dir={tmp_path / "run"}'] + TINY)


def test_vocabularies_cut_renumber_and_mark_unknown_tokens():
    data_dir('gpt2', 'encoder.json')
    chars = sentiment.Vocabulary.build('char', ['ab', 'ba c'])
    assert chars.tokens == [' ', 'a', 'b', 'c'] and (chars.unk, chars.eot, chars.vocab_size) == (4, 5, 6)
    assert chars.encode('cab!<|endoftext|>a') == [3, 1, 2, 4, 5, 1]
    bpe = sentiment.Vocabulary.build('bpe', ['a good film'])
    gpt2 = sentiment.Vocabulary('gpt2')
    full = gpt2.encode(' a good film')
    assert bpe.tokens == sorted(full) and bpe.encode(' a good film') == [bpe.tokens.index(i) for i in full]
    assert bpe.encode(' bad<|endoftext|>') == [bpe.unk, bpe.eot]
    assert gpt2.encode('<|endoftext|>') == [gpt2.eot] and gpt2.vocab_size == gpt2.eot + 1
    assert sentiment.Vocabulary(**bpe.state()).encode(' film') == bpe.encode(' film')



def test_a_cut_vocabulary_decodes_what_it_encodes_and_the_unknown_id_as_a_mark():
    """Vocabulary had no decode: the LM sentiment.py pretrains could not be sampled from or drawn."""
    data_dir('gpt2', 'encoder.json')
    chars = sentiment.Vocabulary.build('char', ['a fine film .'])  # ' .aefilmn': 9 characters, unknown 9, eot 10
    bpe = sentiment.Vocabulary.build('bpe', ['a fine film .', 'très bien'])
    for vocabulary, known in ((chars, 'fine a film .'), (bpe, ' a fine film . très bien')):
        ids = vocabulary.encode(known + '<|endoftext|>')
        assert vocabulary.unk not in ids and vocabulary.decode(ids) == known + '<|endoftext|>'
        assert vocabulary.decode(torch.tensor(ids)) == vocabulary.decode(ids)  # as generate gives them
    assert chars.decode(chars.encode('a dull film!')) == 'a \ufffd\ufffdll film\ufffd'  # d, u and ! are unknown
    assert bpe.encode(' a dull film') == [*bpe.encode(' a'), bpe.unk, *bpe.encode(' film')]
    assert bpe.decode(bpe.encode(' a dull film')) == ' a\ufffd film'  # ' dull', one GPT-2 token, is one unknown id
    gpt2 = get_encoder()
    assert bpe.decode_bytes(bpe.encode(' très')) == gpt2.decode_bytes(gpt2.encode(' très'))  # bytes, token by token
    with pytest.raises(ValueError, match=r"cannot decode ids \[11\]: this vocabulary's ids are ints in 0\.\.10"):
        chars.decode([0, 11])


def test_a_training_stage_names_no_classifier_and_a_redone_run_not_the_first_ones():
    """parse_args filled system.checkpoint in every stage, so finetune's config.json named its model.pt (pretrain's
    out/sentiment/finetune/model.pt), and a finetune redone elsewhere with args_of(config.json) kept the first run's:
    its config.json named the old classifier, which evaluate then read for the new run."""
    for stage in ('pretrain', 'finetune'):
        assert sentiment.parse_args([stage, '--system.work_dir=out/a'])[0].system.checkpoint is None
    first = sentiment.get_config('finetune').to_dict()
    first['system'].update(work_dir='out/a', checkpoint='out/a/model.pt')  # as config.json recorded it before
    with pytest.warns(UserWarning, match='system.checkpoint=out/a/model.pt is ignored: finetune writes its own '
                                         'model.pt in out/b, only evaluate and predict read one'):
        again = sentiment.parse_args(args_of(first) + ['--system.work_dir=out/b'])[0]
    assert again.system.checkpoint is None
    evaluate = sentiment.parse_args(args_of(again.to_dict()) + ['--system.stage=evaluate'])[0]
    assert evaluate.system.checkpoint == 'out/b/model.pt'


def test_command_line_errors():
    with pytest.raises(ConfigError, match='unknown stage'):
        sentiment.main(['pretrian'])
    for sentences in ([], [''], ['a fine film', ' ']):
        with pytest.raises(ConfigError, match='needs a sentence'):
            sentiment.main(['predict', *sentences])
    # evaluate / predict read the classifier of the run that --system.work_dir names (and write beside it)
    for args, checkpoint, work_dir in [([], 'out/sentiment/finetune/model.pt', 'out/sentiment/evaluate'),
                                       (['--system.work_dir=out/gpt2'], 'out/gpt2/model.pt', 'out/gpt2'),
                                       (['--system.checkpoint=c.pt'], 'c.pt', 'out/sentiment/evaluate')]:
        config = sentiment.parse_args(['evaluate', *args])[0]
        assert (config.system.checkpoint, config.system.work_dir) == (checkpoint, work_dir)
    # SST-2 writes brackets as -lrb- / -rrb-: a sentence may start with '-', only '--' starts an option
    assert sentiment.parse_args(['predict', '-lrb- a great film -rrb- .', '--system.seed=1'])[1] == \
        ['-lrb- a great film -rrb- .']
    # after '--' every argument is a sentence, even one that starts with '--' or is '-h'
    assert sentiment.parse_args(['predict', '--system.seed=1', '--', '-- great --', '-h'])[1] == ['-- great --', '-h']
    with pytest.raises(SystemExit) as e:
        sentiment.parse_args(['predict', '-h'])
    assert e.value.code == 0
    with pytest.raises(ConfigError, match='only predict'):
        sentiment.main(['evaluate', 'a sentence'])
    # checked before any data is read: a sentence needs one token and the suffix; dropout 1 would drop everything
    with pytest.raises(ConfigError, match=r'data.block_size=1 is out of range: it must be an integer >= 2'):
        sentiment.main(['finetune', '--data.block_size=1', '--data.sst2_dir=/nowhere'])
    with pytest.raises(ConfigError, match=r'classifier.dropout=1.0 is out of range: it must be a number >= 0 and < 1'):
        sentiment.main(['finetune', '--classifier.dropout=1', '--data.sst2_dir=/nowhere'])
    for option, message in (('--data.train_limit=0', 'data.train_limit=0 is out of range'),
                            ('--classifier.lm_loss_weight=-1', 'classifier.lm_loss_weight=-1.0 is out of range'),
                            ('--classifier.trainable_blocks=-2', 'classifier.trainable_blocks=-2 is out of range')):
        with pytest.raises(ConfigError, match=message):
            sentiment.main(['finetune', option, '--data.sst2_dir=/nowhere'])


@pytest.mark.parametrize('args, says', [
    (['finetune', '--model.model_type=gpt-nanoo'], r"unknown model_type 'gpt-nanoo'; presets are: "),
    (['pretrain', '--model.norm=postt'], r"model.norm must be one of 'pre', 'post', not 'postt'"),
    (['finetune', '--model.model_type=None', '--model.n_layer=2', '--model.n_head=3', '--model.n_embd=16'],
     r"model.n_embd=16 must be a multiple of model.n_head=3"),
    # a model brought by system.init or the classifier evaluated: a misspelt preset was taken for none, and passed
    (['finetune', '--system.init=gone.pt', '--model.model_type=gpt-mcro'], r"unknown model_type 'gpt-mcro'"),
    (['evaluate', '--system.checkpoint=gone.pt', '--model.model_type=gpt-mcro'], r"unknown model_type 'gpt-mcro'"),
    # and an option it would not take was passed over: a fine-tuning from a checkpoint trained pre-norm, GELU
    (['finetune', '--system.init=gone.pt', '--model.norm=post'], r"model.norm='post' would do nothing here: "
                                                                 r"system.init='gone.pt' brings its own model"),
    (['evaluate', '--model.activation=relu', '--model.attn_pdrop=0.2'],
     r"model.attn_pdrop=0.2, model.activation='relu' would do nothing here: the classifier evaluate reads"),
    (['finetune', '--trainer.dtype=bfloat'], r"trainer.dtype must be one of"),  # the trainer's options too
])
def test_a_model_option_is_refused_before_any_data_is_read(args, says, monkeypatch):
    monkeypatch.setattr(sentiment, 'read_sst2', lambda *a, **k: pytest.fail("SST-2 was read first"))
    with pytest.raises(ConfigError, match=says):
        sentiment.main(args)


TINY = ['--model.model_type=None', '--model.n_layer=2', '--model.n_head=2', '--model.n_embd=16',
        '--data.block_size=32', '--data.train_limit=300', '--data.dev_limit=40', '--trainer.batch_size=8',
        '--trainer.quiet=True', '--trainer.eval_iters=2']


def test_stages_end_to_end(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default work_dirs are relative
    sst2 = data_dir('sentiment', 'sst2')
    common = TINY + [f'--data.sst2_dir={sst2}']
    pre, book, fine = tmp_path / 'pretrain', tmp_path / 'book', tmp_path / 'finetune'
    # pretrain on the SST-2 sentences, then continue on a (tiny) book
    sentiment.main(['pretrain', f'--system.work_dir={pre}', '--trainer.max_iters=3'] + common)
    assert (pre / 'model.pt').exists() and (pre / 'metrics.jsonl').exists()
    for option, differs in (('--data.lowercase=False', 'lowercase=True there, False here'),
                            ('--data.train_limit=200', 'train_limit=300 there, 200 here')):
        with pytest.raises(ConfigError, match=rf"its data is not this run's \({differs}\)"):
            sentiment.main(['pretrain', f'--system.work_dir={pre}', '--trainer.max_iters=4', '--trainer.resume=True']
                           + common + [option])
    (tmp_path / 'empty.txt').write_text('\n\n')
    with pytest.raises(ValueError, match=r"empty.txt holds no text to pretrain on"):
        sentiment.main(['pretrain', f'--system.work_dir={tmp_path / "e"}', f'--data.text={tmp_path / "empty.txt"}']
                       + common)
    text = tmp_path / 'book.txt'
    text.write_text('\ufeffheader\r\n*** START OF THIS BOOK ***\r\nIt is a truth universally\r\nacknowledged.\r\n\r\n'
                    + 'A second paragraph, with a film in it.\r\n\r\n' * 20 + '*** END OF THIS BOOK ***\r\nlicence')
    sentiment.main(['pretrain', f'--system.work_dir={book}', f'--system.init={pre / "model.pt"}',
                    f'--data.text={text}', '--trainer.max_iters=3'] + common)
    out = capsys.readouterr().out
    assert 'pretraining on 21 texts' in out and (book / 'model.pt').exists()
    # fine-tune the pretrained LM, with the label-word head, on sentences cut shorter than the model's context;
    # every file goes where trainer.work_dir says; the checkpoint's model (2 layers) is used, and said
    sentiment.main(['finetune', f'--trainer.work_dir={fine}', f'--system.init={book / "model.pt"}',
                    '--classifier.head=label_words', '--classifier.label_words=(" bad", " good")',
                    '--trainer.max_iters=4', '--trainer.eval_interval=2'] + common + ['--data.block_size=12'])
    out = capsys.readouterr().out
    assert out.count('dev accuracy: ') == 3  # iterations 0, 2, 3
    iters = torch.load(book / 'model.pt', weights_only=True)['iter_num']  # the best by val loss: how long it trained
    assert (f"starting from {book / 'model.pt'} (after {iters} iterations): its model (2 layers, 2 heads, 16 wide) and "
            "its bpe tokenizer; --data.tokenizer does not apply") in out
    assert json.loads((fine / 'config.json').read_text())['model']['n_layer'] == 2  # what was used
    report = json.loads((fine / 'eval.json').read_text())
    assert set(report) >= {'accuracy', 'classes', 'confusion_matrix'} and report['n'] == 40
    assert sum(map(sum, report['confusion_matrix'])) == 40 and not (tmp_path / 'out').exists()
    assert set(report['classes']['positive']) == {'precision', 'recall', 'f1'}
    assert report['iter_num'] == torch.load(fine / 'model.pt', weights_only=True)['iter_num'] == 4
    # evaluate and predict from the saved classifier: sentences are cut as in its fine-tuning
    evaluate = ['evaluate', f'--system.checkpoint={fine / "model.pt"}', f'--system.work_dir={tmp_path / "ev"}',
                f'--data.sst2_dir={sst2}', '--data.dev_limit=40']
    sentiment.main(evaluate)
    out = capsys.readouterr().out
    assert f"dev accuracy: {report['accuracy']:.4f}" in out
    with pytest.raises(ConfigError, match=r"data.block_size=32 cannot be chosen here: .*model.pt sets it \(to 12\); "
                                          r"leave it out, and the classifier reads sentences as in its fine-tuning"):
        sentiment.main(evaluate + ['--data.block_size=32'])
    # '--key value' options, after the sentences or between them
    sentiment.main(['predict', 'a gorgeous film .', 'dull and lifeless .', '--system.checkpoint',
                    str(fine / 'model.pt'), '--trainer.device', 'cpu'])
    lines = [line for line in capsys.readouterr().out.splitlines() if '\t' in line]  # one per sentence
    assert len(lines) == 2 and lines[0].endswith('\ta gorgeous film .') and lines[1].endswith('\tdull and lifeless .')
    assert lines[0].split()[0] in ('positive', 'negative')



@pytest.mark.parametrize('kind', ['char', 'bpe'])
def test_generate_and_attention_read_the_pretrained_lm_and_name_it_for_the_classifier(kind, tmp_path, monkeypatch,
                                                                                     capsys):
    """generate.py and attention.py refused a pretrain's model.pt: its vocabulary was one only sentiment.py read.
    They read it now, with the ids sentiment.py trained it on; the classifier fine-tuned from it is refused, naming
    it."""
    from mingpt.pretrained import load_model_and_tokenizer
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path / 'cache'))
    sst2 = data_dir('sentiment', 'sst2')
    common = TINY + [f'--data.sst2_dir={sst2}', '--trainer.max_iters=2']
    pre, fine = tmp_path / 'pretrain' / 'model.pt', tmp_path / 'finetune' / 'model.pt'
    sentiment.main(['pretrain', f'--system.work_dir={pre.parent}', f'--data.tokenizer={kind}'] + common)
    model, tokenizer = load_model_and_tokenizer(str(pre))
    trained = sentiment.saved_vocabulary(load_checkpoint(pre), pre)  # as pretrain and finetune read it
    text = ' ' + sentiment.read_sst2('train', sst2, 1)[0][0]  # a sentence pretrain read: all its tokens are known
    sentence, symbols = text + '<|endoftext|>', text if kind == 'char' else get_encoder().encode(text)
    by_hand = [trained.tokens.index(s) for s in symbols] + [len(trained.tokens) + 1]  # the kept tokens, then eot
    assert tokenizer.encode(sentence) == trained.encode(sentence) == by_hand
    assert tokenizer.decode(by_hand) == sentence and len(tokenizer) == model.config.vocab_size
    generate = load_project('generate')
    generate.main([f'--model={pre}', '--max_new_tokens=5', '--system.device=cpu', '--num_samples=2'])
    assert capsys.readouterr().err.count('--- sample') == 2
    load_project('attention').main([f'--model={pre}', f"--prompt={' ' + ' '.join(text.split()[:3])}",
                                    f'--out={tmp_path / "a.png"}'])  # its first words: known tokens
    assert (tmp_path / 'a.png').stat().st_size > 0
    # a capital is outside a vocabulary of lowercased text: it reads as the unknown token, which is said
    with pytest.warns(UserWarning, match=r"1 of the prompt's [35] tokens are outside the model's vocabulary and read "
                                         r"as its one unknown token"):
        load_project('attention').main([f'--model={pre}', '--prompt=a A a', f'--out={tmp_path / "b.png"}'])
    with pytest.warns(UserWarning, match=r"1 of the prompt's [12] tokens are outside the model's vocabulary"):
        generate.main([f'--model={pre}', '--prompt=A', '--max_new_tokens=2', '--system.device=cpu'])
    sentiment.main(['finetune', f'--system.work_dir={fine.parent}', f'--system.init={pre}'] + common)
    with pytest.raises(ValueError, match=rf"{re.escape(str(fine))} is a sentiment classifier \(sentiment.py "
                                         rf"finetune\), not a language model: .* give a pretrain's model.pt \(the "
                                         rf"one it was fine-tuned from, {re.escape(str(pre))};"):
        load_model_and_tokenizer(str(fine))


def spy_on_pretraining(tmp_path, monkeypatch):
    """(sst2 folder, seen): two training sentences, ' a b' and ' b a', and two test ones; pretrain's data sets, as
    lists of ids, go into seen['train'] and seen['val'] instead of training."""
    sst2 = tmp_path / 'sst2'
    sst2.mkdir()
    (sst2 / 'train.tsv').write_text('sentence\tlabel\na b \t1\nb a \t0\n')
    (sst2 / 'test.tsv').write_text('index\tsentence\n0\tb b\n1\ta a\n')  # GLUE's unlabelled test sentences
    seen = {}

    class Spy(sentiment.Trainer):  # sees the data sets, trains nothing
        def __init__(self, config, model, train_dataset, val_dataset=None, **kwargs):
            seen.update(train=train_dataset.tokens.tolist(), val=val_dataset.tokens.tolist())

        def add_callback(self, *args):
            pass

        def run(self):
            pass
    monkeypatch.setattr(sentiment, 'Trainer', Spy)
    return sst2, seen


def test_pretraining_reads_each_text_after_an_endoftext_and_validates_on_the_test_sentences(tmp_path, monkeypatch):
    sst2, seen = spy_on_pretraining(tmp_path, monkeypatch)
    sentiment.main(['pretrain', f'--data.sst2_dir={sst2}', '--data.tokenizer=char', '--data.block_size=4',
                    f'--system.work_dir={tmp_path / "run"}'])
    space, a, b, eot = 0, 1, 2, 4  # the training sentences' characters ' ', 'a', 'b', then unknown (3) and eot
    assert seen['train'] == [eot, space, a, space, b, eot, space, b, space, a]  # ' a b', ' b a': each after eot
    assert seen['val'] == [eot, space, b, space, b, eot, space, a, space, a]


def test_pretraining_tokenizes_a_text_once_and_later_runs_read_the_tokens_back(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path / 'cache'))
    sst2, seen = spy_on_pretraining(tmp_path, monkeypatch)
    book = tmp_path / 'book.txt'
    book.write_text('B a\nb!\n\nA  a\n')  # two paragraphs, lower-cased, each line's break a space
    args = ['pretrain', f'--data.sst2_dir={sst2}', '--data.tokenizer=char', '--data.block_size=4',
            f'--data.text={book}']
    sentiment.main(args + [f'--system.work_dir={tmp_path / "first"}'])
    [saved] = (tmp_path / 'cache' / 'tokens').iterdir()
    assert f"tokenizing book.txt into {saved}" in capsys.readouterr().out
    space, a, b, unknown, eot = 0, 1, 2, 3, 4
    assert seen['train'] == [eot, space, b, space, a, space, b, unknown, eot, space, a, space, a]
    seen.clear()
    sentiment.main(args + [f'--system.work_dir={tmp_path / "second"}'])
    assert f"reading the tokens of book.txt saved in {saved}" in capsys.readouterr().out
    assert seen['train'] == [eot, space, b, space, a, space, b, unknown, eot, space, a, space, a]


def test_pretraining_on_a_folder_reads_its_text_files_in_name_order(tmp_path, monkeypatch, capsys):
    """--data.text=FOLDER (e.g. text/gutenberg) pretrains on its .txt files one after another, as chargpt's
    --data.path does: each paragraph a text of its own, whatever file it came from; other files are not read."""
    sst2, seen = spy_on_pretraining(tmp_path, monkeypatch)
    books = tmp_path / 'books'
    books.mkdir()
    (books / 'b.txt').write_text('A  a\n')
    (books / 'a.txt').write_text('B a\nb!\n')  # first by name
    (books / 'notes.md').write_text('b b b\n')
    sentiment.main(['pretrain', f'--data.sst2_dir={sst2}', '--data.tokenizer=char', '--data.block_size=4',
                    f'--data.text={books}', f'--system.work_dir={tmp_path / "run"}'])
    assert "reading 2 .txt files of " in capsys.readouterr().out
    space, a, b, unknown, eot = 0, 1, 2, 3, 4
    assert seen['train'] == [eot, space, b, space, a, space, b, unknown, eot, space, a, space, a]


def test_a_finetune_that_does_not_go_on_with_work_dirs_run_starts_without_its_eval_json(tmp_path, monkeypatch):
    """A fresh (or overwriting) finetune stopped before its first evaluation left the replaced run's eval.json beside
    its own config.json, as the adder's best.pt was: run() now removes it. Here a fresh run finds one alone."""
    (tmp_path / 'eval.json').write_text("the replaced run's")

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(sentiment, 'evaluate', stopped)  # at the end's evaluation, after run() has started
    with pytest.raises(KeyboardInterrupt):
        sentiment.main(['finetune', f'--system.work_dir={tmp_path}', '--data.tokenizer=char', '--trainer.max_iters=1',
                        f'--data.sst2_dir={data_dir("sentiment", "sst2")}'] + TINY)
    assert not (tmp_path / 'eval.json').exists() and (tmp_path / 'config.json').exists()


def test_finetune_from_scratch_with_characters_and_resume(tmp_path, capsys):
    sst2 = data_dir('sentiment', 'sst2')
    args = ['finetune', f'--system.work_dir={tmp_path}', '--data.tokenizer=char', '--trainer.checkpoint_interval=2',
            '--classifier.lm_loss_weight=0.5',
            '--classifier.trainable_blocks=1', f'--data.sst2_dir={sst2}'] + TINY
    sentiment.main(args + ['--trainer.max_iters=2', '--trainer.eval_interval=0'])  # 0: only at the end
    sentiment.main(args + ['--trainer.max_iters=4', '--trainer.resume=True'])
    out = capsys.readouterr().out
    assert 'resuming from' in out and 'dev accuracy: ' in out and 'training ' in out  # how many parameters train
    records = [json.loads(line) for line in (tmp_path / 'metrics.jsonl').read_text().splitlines()]
    assert [r['iter'] for r in records] == [0, 1, 2, 3]
    # each evaluation's dev numbers are on its step's line too (eval.json keeps only the last): at the ends, 2 and 4
    assert [sorted({'dev_accuracy', 'dev_loss'} & r.keys()) for r in records] == [[], ['dev_accuracy', 'dev_loss']] * 2
    report = json.loads((tmp_path / 'eval.json').read_text())
    assert (records[-1]['dev_accuracy'], records[-1]['dev_loss']) == (report['accuracy'], report['loss'])
    sentiment.main(['evaluate', f'--system.checkpoint={tmp_path / "model.pt"}', f'--system.work_dir={tmp_path / "ev"}',
                    f'--data.sst2_dir={sst2}', '--data.dev_limit=8'])
    out = capsys.readouterr().out
    assert 'dev accuracy: ' in out and 'training ' not in out  # evaluate trains nothing, and said it trained some
    # another classifier option is refused for what it is, not as other data or another tokenizer
    with pytest.raises(ConfigError, match=r"its classifier is not this run's \(dropout=0.1 there, 0.2 here\), so the "
                                          r"model was trained with other data, tokenizer or options; resume"):
        sentiment.main(args + ['--trainer.max_iters=6', '--trainer.resume=True', '--classifier.dropout=0.2'])


def test_gpt2_weights_fine_tune_in_train_mode_with_this_runs_dropout(tmp_path):
    """from_pretrained gives GPT-2 in eval mode, and the trainer keeps a submodule's mode: the whole fine-tune ran
    without dropout. And --model.attn_pdrop, said to apply, was GPT-2's config.json's 0.1."""
    transformers = pytest.importorskip('transformers')
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, n_positions=32))
    hf.save_pretrained(tmp_path / 'tiny-gpt2')
    for asked in (0.1, 0.0):  # GPT-2's own, and another
        config = sentiment.parse_args(['finetune', f'--system.init={tmp_path / "tiny-gpt2"}',
                                       f'--model.attn_pdrop={asked}'])[0]
        gpt, _ = sentiment.load_lm(config, [])
        assert gpt.training and all(m.training for m in gpt.modules())
        assert gpt.transformer.h[0].attn.attn_dropout.p == asked and gpt.transformer.h[0].mlp.dropout.p == 0.1
        assert torch.equal(gpt.lm_head.weight, hf.lm_head.weight)


def test_finetune_gpt2_from_a_hugging_face_directory(tmp_path, capsys):
    """GPT-2 the same way, on a small random GPT-2 saved by transformers (the real one is 500 MB)."""
    sst2 = data_dir('sentiment', 'sst2')
    transformers = pytest.importorskip('transformers')
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_head=2, n_embd=16, n_positions=64))
    hf.save_pretrained(tmp_path / 'tiny-gpt2')
    sentiment.main(['finetune', f'--system.init={tmp_path / "tiny-gpt2"}', f'--system.work_dir={tmp_path / "ft"}',
                    '--data.train_limit=64', '--data.dev_limit=16', '--trainer.batch_size=8', '--trainer.max_iters=2',
                    '--trainer.quiet=True', '--trainer.eval_iters=1', f'--data.sst2_dir={sst2}'])
    out = capsys.readouterr().out
    assert "data.tokenizer 'gpt2'" in out and 'dev accuracy: ' in out
    ckpt = torch.load(tmp_path / 'ft' / 'model.pt', weights_only=True)
    assert ckpt['tokenizer']['kind'] == 'gpt2' and ckpt['model_config']['vocab_size'] == 50257
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=1000))
    hf.save_pretrained(tmp_path / 'other-vocab')
    with pytest.raises(ConfigError, match="has a vocabulary of 1000 tokens, not GPT-2's 50257"):
        sentiment.main(['finetune', f'--system.init={tmp_path / "other-vocab"}', f'--system.work_dir={tmp_path / "o"}',
                        f'--data.sst2_dir={sst2}'])


def classifier_checkpoint(path, tokenizer, block_size=16, trained_block_size=None, dropout=0.1):
    """A fine-tuned classifier's checkpoint as finetune writes it (random weights), and the classifier."""
    torch.manual_seed(0)
    model = sentiment.GPTClassifier(tiny_gpt(tokenizer.vocab_size, block_size), dropout=dropout)
    config = sentiment.get_config('finetune')
    config.data.block_size = trained_block_size or block_size
    config.classifier.dropout = dropout
    save_checkpoint({'model': model.state_dict(), 'model_config': model.gpt.config.to_dict(), 'iter_num': 5,
                     'classifier': config.classifier.to_dict(), 'tokenizer': tokenizer.state(),
                     'config': config.to_dict()}, path)
    return model


def test_a_fine_tuned_classifier_starts_a_new_run_with_its_gpt_and_this_runs_dropout(tmp_path):
    tokenizer = sentiment.Vocabulary.build('char', ['a fine film'])
    classifier = classifier_checkpoint(tmp_path / 'model.pt', tokenizer)
    config = sentiment.get_config('finetune')
    config.system.init, config.model.resid_pdrop = str(tmp_path / 'model.pt'), 0.3
    gpt, got = sentiment.load_lm(config, ['other sentences'])
    assert gpt.state_dict().keys() == classifier.gpt.state_dict().keys()
    for key, value in classifier.gpt.state_dict().items():
        assert torch.equal(gpt.state_dict()[key], value), key
    assert got.state() == tokenizer.state() and config.data.tokenizer == 'char'
    assert gpt.config.resid_pdrop == gpt.transformer.h[0].attn.resid_dropout.p == 0.3  # the checkpoint had 0.0


def test_a_checkpoints_model_is_its_tensors_built_without_a_random_initialisation(tmp_path, monkeypatch):
    """load_lm and load_classifier built a randomly initialised GPT, then copied the checkpoint's weights into it: two
    copies of the weights, and random numbers drawn for nothing. The model holds the tensors read, lm_head still
    tied to wte."""
    classifier_checkpoint(tmp_path / 'model.pt', sentiment.Vocabulary.build('char', ['a fine film']))
    read = []

    def load_and_keep(*args, **kwargs):
        read.append(load_checkpoint(*args, **kwargs))
        return read[-1]
    monkeypatch.setattr(sentiment, 'load_checkpoint', load_and_keep)
    for stage in ('finetune', 'evaluate'):
        config = sentiment.get_config(stage)
        config.system.init = config.system.checkpoint = str(tmp_path / 'model.pt')
        random_state = torch.get_rng_state()
        model = sentiment.load_lm(config, [])[0] if stage == 'finetune' else sentiment.load_classifier(config, 'cpu')[0]
        assert torch.equal(torch.get_rng_state(), random_state)
        prefix = 'gpt.' if stage == 'finetune' else ''  # load_lm reads the classifier's gpt alone
        for name, p in model.named_parameters():
            assert p.data_ptr() == read[-1]['model'][prefix + name].data_ptr(), name
        gpt = model if stage == 'finetune' else model.gpt
        assert gpt.lm_head.weight is gpt.transformer.wte.weight


def test_a_block_size_longer_than_the_starting_models_context_is_cut_to_it_and_said(tmp_path, capsys):
    """finetune --system.init=<a model of 16 tokens' context> with the default data.block_size, 64, read 16 tokens
    without a word, and its config.json recorded 64."""
    tokenizer = sentiment.Vocabulary.build('char', ['a fine film'])
    classifier_checkpoint(tmp_path / 'model.pt', tokenizer, block_size=16)
    for asked, read in ((64, 16), (8, 8)):
        config = sentiment.get_config('finetune')
        config.system.init, config.data.block_size = str(tmp_path / 'model.pt'), asked
        sentiment.load_lm(config, [])
        assert config.data.block_size == read
        said = capsys.readouterr().out
        assert ("data.block_size=64 is longer than the context of" in said) == (asked > read)


def test_a_tokenizer_asked_for_that_the_starting_weights_do_not_have_is_refused(tmp_path):
    """finetune --system.init=<a char-vocabulary checkpoint, or GPT-2> --data.tokenizer=bpe ran with the weights'
    own tokenizer, the option ignored with a note; model sizes asked for were already refused."""
    tokenizer = sentiment.Vocabulary.build('char', ['a fine film'])
    classifier_checkpoint(tmp_path / 'model.pt', tokenizer)
    for init, kind, other in ((str(tmp_path / 'model.pt'), 'char', 'gpt2'), ('gpt2', 'gpt2', 'char')):
        config = sentiment.get_config('finetune')
        config.system.init = init
        config.data.tokenizer = other
        with pytest.raises(ConfigError, match=rf"brings its own tokenizer \({kind}\), so data.tokenizer='{other}' "
                                              r"cannot be chosen; leave --data.tokenizer out"):
            sentiment.load_lm(config, [])  # GPT-2's weights are not read: refused first
    config = sentiment.get_config('finetune')
    config.system.init = str(tmp_path / 'model.pt')  # the default tokenizer gives way, as does the same one
    for asked in ('bpe', 'char'):
        config.data.tokenizer = asked
        assert sentiment.load_lm(config, [])[1].state() == tokenizer.state() and config.data.tokenizer == 'char'


@pytest.mark.parametrize('key, value, saved', [('n_layer', 10 ** 6, 2), ('n_embd', 2 ** 30, 16)])
@pytest.mark.parametrize('stage', ['finetune', 'evaluate'])
def test_a_checkpoint_whose_model_config_its_weights_do_not_fit_is_refused_before_the_gpt_is_built(
        tmp_path, monkeypatch, stage, key, value, saved):
    """load_lm and load_classifier built GPT(model_config) unchecked: n_layer=10**6 was still building after 20 s."""
    tokenizer = sentiment.Vocabulary.build('char', ['a fine film'])
    classifier_checkpoint(tmp_path / 'model.pt', tokenizer)
    ckpt = torch.load(tmp_path / 'model.pt', weights_only=True)
    ckpt['model_config'][key] = value
    save_checkpoint(ckpt, tmp_path / 'bad.pt')
    config = sentiment.get_config(stage)
    config.system.init = config.system.checkpoint = str(tmp_path / 'bad.pt')
    monkeypatch.setattr(GPT, '__init__', lambda self, config: pytest.fail('the model was built'))
    with pytest.raises(ValueError, match=rf"bad.pt was not loaded: its model_config asks for {key}={value} \(its "
                                         rf"weights: {saved}\)"):
        sentiment.load_lm(config, []) if stage == 'finetune' else sentiment.load_classifier(config, 'cpu')
    del ckpt['model_config']
    save_checkpoint(ckpt, tmp_path / 'bad.pt')
    with pytest.raises(ValueError, match=r"bad.pt does not hold a GPT that this code can build \(it has no "
                                         r"model_config\)"):
        sentiment.load_lm(config, []) if stage == 'finetune' else sentiment.load_classifier(config, 'cpu')


@pytest.mark.parametrize('record, says', [
    (5, r"its 'tokenizer' should hold the kind of vocabulary \(bpe, gpt2, char\) and its tokens .*, not 5"),
    ({'kind': 'char', 'tokens': None}, r"its 'tokenizer' should hold .*, not \{'kind': 'char', 'tokens': None\}"),
    ({'kind': 'bpe', 'tokens': 5}, r"its 'tokenizer' should hold .*, not \{'kind': 'bpe', 'tokens': 5\}"),
    ({'kind': 'evil', 'tokens': ['a']}, r"its 'tokenizer' should hold the kind of vocabulary \(bpe, gpt2, char\)"),
    ({'kind': 'char', 'tokens': list('a fin')}, r"its vocabulary has 7 tokens and its model 10; the two do not "
                                                r"belong together")])
@pytest.mark.parametrize('stage', ['finetune', 'evaluate'])
def test_a_checkpoints_vocabulary_of_another_shape_is_refused_by_name(tmp_path, stage, record, says):
    """Vocabulary(**ckpt['tokenizer']) was a bare TypeError for a damaged record (or, for an unknown kind, blamed
    --data.tokenizer), and tokens the model has not failed in its embedding."""
    tokenizer = sentiment.Vocabulary.build('char', ['a fine film'])  # 8 characters, unknown and eot: 10 tokens
    classifier_checkpoint(tmp_path / 'model.pt', tokenizer)
    ckpt = torch.load(tmp_path / 'model.pt', weights_only=True)
    save_checkpoint({**ckpt, 'tokenizer': record}, tmp_path / 'bad.pt')
    config = sentiment.get_config(stage)
    config.system.init = config.system.checkpoint = str(tmp_path / 'bad.pt')
    with pytest.raises(ValueError, match=r"bad.pt was not loaded: " + says):
        sentiment.load_lm(config, []) if stage == 'finetune' else sentiment.load_classifier(config, 'cpu')


def test_a_classifier_whose_options_are_not_a_dict_is_not_a_classifier(tmp_path):
    """'classifier': 5 was a bare AttributeError ('int' object has no attribute 'items')."""
    classifier_checkpoint(tmp_path / 'model.pt', sentiment.Vocabulary.build('char', ['a fine film']))
    save_checkpoint({**torch.load(tmp_path / 'model.pt', weights_only=True), 'classifier': 5}, tmp_path / 'bad.pt')
    config = sentiment.get_config('evaluate')
    config.system.checkpoint = tmp_path / 'bad.pt'
    with pytest.raises(ValueError, match=r"bad.pt is not a sentiment classifier; fine-tune one first"):
        sentiment.load_classifier(config, 'cpu')


@pytest.mark.parametrize('run', [5, {'data': 5}, {'data': {'block_size': 'long'}}, {}])
def test_a_classifier_with_a_damaged_run_record_cuts_at_its_models_context(tmp_path, run):
    """'config': 5 (the run's options, which only say where fine-tuning cut sentences) was a bare AttributeError."""
    classifier_checkpoint(tmp_path / 'model.pt', sentiment.Vocabulary.build('char', ['a fine film']), block_size=16)
    save_checkpoint({**torch.load(tmp_path / 'model.pt', weights_only=True), 'config': run}, tmp_path / 'bad.pt')
    config = sentiment.get_config('evaluate')
    config.system.checkpoint = tmp_path / 'bad.pt'
    sentiment.load_classifier(config, 'cpu')
    assert config.data.block_size == 16


def test_a_classifier_cuts_sentences_at_its_models_context(tmp_path):
    tokenizer = sentiment.Vocabulary.build('char', ['a fine film'])
    classifier_checkpoint(tmp_path / 'model.pt', tokenizer, block_size=16, trained_block_size=64)
    config = sentiment.get_config('evaluate')  # fine-tuned with data.block_size 64 on a model of context 16
    config.system.checkpoint = tmp_path / 'model.pt'
    model, _, ckpt = sentiment.load_classifier(config, 'cpu')
    assert config.data.block_size == 16 and ckpt['iter_num'] == 5 and not model.training


def test_evaluate_refuses_classifier_options_the_checkpoint_does_not_have(tmp_path):
    tokenizer = sentiment.Vocabulary.build('char', ['a fine film'])
    classifier_checkpoint(tmp_path / 'model.pt', tokenizer, dropout=0.2)
    config = sentiment.get_config('evaluate')
    config.system.checkpoint = tmp_path / 'model.pt'
    config.classifier.dropout = 0.2  # the checkpoint's own, not the default: fine
    assert sentiment.load_classifier(config, 'cpu')[0].dropout.p == 0.2
    config.classifier.dropout = 0.3
    with pytest.raises(ConfigError, match=r"classifier.dropout=0.3 \(it has 0.2\) cannot be chosen"):
        sentiment.load_classifier(config, 'cpu')
    config.classifier.dropout = 0.1  # the default: not asked for
    config.classifier.suffix = ' .'  # it read its sentences with <|endoftext|> after them
    with pytest.raises(ConfigError, match=r"model.pt brings its own classifier, so classifier.suffix=' .' \(it has "
                                          r"'<\|endoftext\|>'\) cannot be chosen; leave --classifier.\* out"):
        sentiment.load_classifier(config, 'cpu')


def test_evaluate_refuses_a_tokenizer_or_size_the_checkpoint_does_not_have(tmp_path):
    """evaluate --data.tokenizer=char or --model.n_layer=5 printed the checkpoint's own accuracy, the option ignored
    without a word (block_size and the classifier options were refused)."""
    tokenizer = sentiment.Vocabulary.build('char', ['a fine film'])
    classifier_checkpoint(tmp_path / 'model.pt', tokenizer)
    for stage in ('evaluate', 'predict'):
        config = sentiment.get_config(stage)
        config.system.checkpoint = tmp_path / 'model.pt'
        config.data.tokenizer = 'char'  # its own: fine
        sentiment.load_classifier(config, 'cpu')
        config.data.tokenizer = 'bpe'
        with pytest.raises(ConfigError, match=r"data.tokenizer='bpe' cannot be chosen here: .*model.pt sets it \(to "
                                              r"'char'\); leave it out, and the classifier reads sentences as in"):
            sentiment.load_classifier(config, 'cpu')
        config = sentiment.get_config(stage)
        config.system.checkpoint = tmp_path / 'model.pt'
        config.model.n_layer = 5
        with pytest.raises(ConfigError, match=r"model.pt brings its own model, so model.n_layer=5 \(it has 2\) cannot "
                                              r"be chosen; leave --model.\* out$"):
            sentiment.load_classifier(config, 'cpu')


def test_a_long_sentence_keeps_its_start_and_the_suffix():
    tokenizer = sentiment.Vocabulary.build('char', ['abcdef'])
    data = sentiment.SentenceDataset(['abcdef', 'ab'], [1, 0], tokenizer, '<|endoftext|>', block_size=4)
    eot = tokenizer.eot
    assert data.x.tolist() == [tokenizer.encode(' ab') + [eot], tokenizer.encode(' ab') + [eot]]
    assert data.cut == 1 and data.y.tolist() == [1, 0]
    with pytest.raises(ConfigError, match=r"'<\|endoftext\|>' takes 1 of the 1 tokens of data.block_size: no room"):
        sentiment.SentenceDataset(['ab'], [1], tokenizer, '<|endoftext|>', block_size=1)


def test_a_sentence_is_read_as_stripped_as_sst2s():
    # predict's sentences (a copy of a dev line keeps its trailing space) must read as read_sst2's stripped ones
    tokenizer = sentiment.Vocabulary.build('char', ['a film .'])
    data = sentiment.SentenceDataset([' a film . \n', 'a film .'], [1, 1], tokenizer, '<|endoftext|>', block_size=16)
    assert data.x[0].tolist() == data.x[1].tolist()


def test_the_docstrings_gpt2_recipe_is_the_readmes():
    # the docstring's copy of the README's recipe lacked the README's learning rate for GPT-2 (3e-5, not 1e-3)
    readme = (Path(__file__).resolve().parent.parent / 'README.md').read_text()

    def gpt2_recipe(text):
        line = re.search(r'finetune (--system\.init=gpt2 .*?)(#|$)', text.replace('\\\n', ' '), re.M).group(1)
        return sorted(line.split())
    assert gpt2_recipe(sentiment.__doc__) == gpt2_recipe(readme)


def test_label_words_must_be_known_single_tokens():
    data_dir('gpt2', 'encoder.json')
    tokenizer = sentiment.Vocabulary.build('bpe', ['a bad film'])
    config = sentiment.get_config('finetune')
    config.classifier.head = 'label_words'
    gpt = tiny_gpt(tokenizer.vocab_size)
    config.classifier.label_words = (' bad', ' film')
    assert sentiment.make_classifier(config.classifier, gpt, tokenizer).head.weight.shape == (2, 16)
    config.classifier.label_words = (' bad', ' good')  # one GPT-2 token, but not one of the training sentences'
    # each word that fails is named with its reason, and the message says what to choose instead
    with pytest.raises(ConfigError, match=r"bpe vocabulary: ' good' is not in the vocabulary \(the unknown token\)\. "
                                          r"Choose words that occur in the sentences its vocabulary was built from"
                                          r".*data.tokenizer=gpt2; with --system.init, a model pretrained with it"):
        sentiment.make_classifier(config.classifier, gpt, tokenizer)
    config.classifier.label_words = (' badfilm', ' bad')
    with pytest.raises(ConfigError, match=r"' badfilm' is 2 tokens\. Choose"):
        sentiment.make_classifier(config.classifier, gpt, tokenizer)
    # gpt2's vocabulary holds every word: it is not told to take the gpt2 tokenizer it has
    gpt2 = sentiment.Vocabulary.build('gpt2', [])
    with pytest.raises(ConfigError, match=r"gpt2 vocabulary: ' badfilm' is 2 tokens\. Choose words that are one "
                                          r"GPT-2 token \(with a leading space\)$"):
        sentiment.make_classifier(config.classifier, tiny_gpt(gpt2.vocab_size), gpt2)
    config.classifier.label_words = (' bad',)
    with pytest.raises(ConfigError, match=r"must be 2 words, one per class \(negative, positive\), not \(' bad',\)"):
        sentiment.make_classifier(config.classifier, gpt, tokenizer)
    config.classifier.head = 'mlp'
    with pytest.raises(ConfigError, match=r"classifier.head must be 'linear' or 'label_words', not 'mlp'"):
        sentiment.make_classifier(config.classifier, gpt, tokenizer)


def test_a_file_of_several_gutenberg_books_keeps_every_books_body():
    """Books put one after another (cat 1342-0.txt 2701-0.txt > books.txt) each keep their body: only the first
    book's was kept, the rest of the file silently dropped."""
    def book(n):
        return (f'header {n}\r\n*** START OF BOOK {n} ***\r\nBody {n},\r\nwrapped.\r\n*** END OF BOOK {n} ***\r\n'
                'licence\r\n')
    assert sentiment.book_paragraphs(book(1) + book(2) + book(3)) == ['body 1, wrapped.', 'body 2, wrapped.',
                                                                       'body 3, wrapped.']
    assert sentiment.book_paragraphs('No markers.\n\nTwo paragraphs.', lowercase=False) == ['No markers.',
                                                                                             'Two paragraphs.']


def test_a_book_keeps_its_case_when_asked(tmp_path, monkeypatch):
    book = tmp_path / 'book.txt'
    book.write_text('It is a Truth universally\nacknowledged.\n\nSecond paragraph.\n')
    seen = []

    class Stop(Exception):
        pass

    def spy(ids, *args):
        seen.append(ids)
        raise Stop
    monkeypatch.setattr(sentiment, 'TokenDataset', spy)
    for lowercase in (True, False):
        with pytest.raises(Stop):
            sentiment.main(['pretrain', f'--system.work_dir={tmp_path / "run"}', f'--data.text={book}',
                            f'--data.lowercase={lowercase}', '--data.tokenizer=gpt2',
                            f'--data.sst2_dir={data_dir("sentiment", "sst2")}'] + TINY)
    texts = [sentiment.Vocabulary('gpt2').bpe.decode(ids.tolist()) for ids in seen]  # the train ids, a uint16 array
    assert texts == ['<|endoftext|> it is a truth universally acknowledged.<|endoftext|> second paragraph.',
                     '<|endoftext|> It is a Truth universally acknowledged.<|endoftext|> Second paragraph.']


def test_a_sure_wrong_prediction_has_a_large_finite_loss(tmp_path):
    class Sure(torch.nn.Module):  # class 0 with probability 1 - e^-200, which is 1 in float32
        def forward(self, idx):
            return torch.tensor([[0.0, -200.0]]).expand(len(idx), 2), None
    report = sentiment.evaluate(Sure(), Examples([[0], [0]], [0, 1]), 'cpu', tmp_path)
    assert report['loss'] == pytest.approx(-math.log(1e-12) / 2)  # the wrong one counts as probability 1e-12


def test_prediction_prints_the_likelier_label_and_keeps_the_models_mode(tmp_path, capsys):
    tokenizer = sentiment.Vocabulary.build('char', ['a fine film, a dull one'])
    classifier_checkpoint(tmp_path / 'model.pt', tokenizer)
    config = sentiment.get_config('predict')
    config.system.checkpoint = tmp_path / 'model.pt'
    model, _, _ = sentiment.load_classifier(config, 'cpu')
    torch.nn.init.normal_(model.head.weight)  # so that the two sentences get different predictions
    sentences = ['a fine film', 'a dull one']
    data = sentiment.SentenceDataset(sentences, [0, 0], tokenizer, '<|endoftext|>', config.data.block_size)
    model.train()
    probs = sentiment.predict_proba(model, data, 'cpu')
    assert model.training  # left as it was
    capsys.readouterr()
    want = []
    for sentence, p in zip(sentences, probs):
        c = int(p.argmax())
        want.append(f"{sentiment.LABELS[c]} ({p[c]:.3f})\t{sentence}")
    save_checkpoint({**torch.load(tmp_path / 'model.pt', weights_only=True), 'model': model.state_dict()},
                    tmp_path / 'model.pt')  # with the new head
    for args in (['predict', *sentences], ['--system.stage=predict', *sentences],
                 ['predict', f'--predict.text={sentences[0]}', sentences[1]]):
        sentiment.main(args + [f'--system.checkpoint={tmp_path / "model.pt"}'])
        assert capsys.readouterr().out.splitlines()[-2:] == want, args


def test_prediction_says_when_a_sentence_was_cut_to_the_classifiers_context(tmp_path, capsys):
    """A sentence longer than block_size is read only up to it: its end, 'but awful', was dropped unsaid."""
    tokenizer = sentiment.Vocabulary.build('char', ['a fine film, but awful'])
    classifier_checkpoint(tmp_path / 'model.pt', tokenizer, block_size=16)
    checkpoint = f'--system.checkpoint={tmp_path / "model.pt"}'
    sentiment.main(['predict', 'a fine film', checkpoint])
    assert 'cut' not in capsys.readouterr().out
    sentiment.main(['predict', 'a fine film, but awful', 'a fine film', checkpoint])
    assert 'note: 1 sentences are longer than block_size 16 and were cut' in capsys.readouterr().out


def test_evaluate_and_predict_without_a_classifier_say_how_to_make_or_name_one(tmp_path, monkeypatch):
    """It said 'train first or pass the path of a saved checkpoint', naming neither the stage that trains one nor
    the options that pass one."""
    monkeypatch.chdir(tmp_path)
    how = (r": fine-tune a classifier first \(python projects/sentiment.py finetune writes "
           r"out/sentiment/finetune/model.pt\), or name another run with --system.work_dir=DIR or a checkpoint file "
           r"with --system.checkpoint=PATH$")
    for argv in (['evaluate'], ['predict', 'a fine film .']):
        with pytest.raises(FileNotFoundError, match=rf"^no checkpoint at out/sentiment/finetune/model.pt \(a path "
                                                     rf"from this folder, {re.escape(str(tmp_path))}\){how}"):
            sentiment.main(argv)
    with pytest.raises(FileNotFoundError, match=rf"^no checkpoint at {re.escape(str(tmp_path / 'run'))}/model.pt{how}"):
        sentiment.main(['evaluate', f'--system.work_dir={tmp_path / "run"}'])


def test_a_missing_init_checkpoint_is_named_as_one_not_as_an_unknown_gpt2(tmp_path, monkeypatch):
    """finetune --system.init=out/sentiment/pretrain/model.pt before pretraining said "unknown pretrained model
    'out/sentiment/pretrain/model.pt': give one of gpt2, gpt2-medium, ...", as if it were a hub id."""
    monkeypatch.chdir(tmp_path)
    for stage, init in (('finetune', 'out/sentiment/pretrain/model.pt'), ('pretrain', 'out/x/model.pth')):
        config = sentiment.get_config(stage)
        config.system.init = init
        with pytest.raises(FileNotFoundError, match=rf"^no checkpoint at {init} \(a path from this folder, "
                                                     rf"{re.escape(str(tmp_path))}\): run the stage that writes it "
                                                     r"first \(python projects/sentiment.py pretrain writes "
                                                     r"out/sentiment/pretrain/model.pt, or model.pt in its "
                                                     r"--system.work_dir\), or give GPT-2: a hub id or a Hugging "
                                                     r"Face directory$"):
            sentiment.load_lm(config, [])


def test_evaluate_needs_a_classifier_and_finetune_a_checkpoint_of_this_project(tmp_path):
    C = GPT.get_default_config()
    C.merge_from_dict(dict(model_type='gpt-nano', vocab_size=10, block_size=16))
    save_checkpoint({'model': GPT(C).state_dict(), 'model_config': C.to_dict()}, tmp_path / 'lm.pt')
    config = sentiment.get_config('evaluate')
    config.system.checkpoint = tmp_path / 'lm.pt'
    with pytest.raises(ValueError, match=r"lm.pt is not a sentiment classifier; fine-tune one first"):
        sentiment.load_classifier(config, 'cpu')
    config = sentiment.get_config('finetune')
    config.system.init = str(tmp_path / 'lm.pt')
    for record in ({}, tokenizer_record(CharTokenizer('abc')), tokenizer_record(train_bpe('a cat sat ' * 9, 258))):
        save_checkpoint({'model': GPT(C).state_dict(), 'model_config': C.to_dict(), **record}, tmp_path / 'lm.pt')
        with pytest.raises(ValueError, match=r"lm.pt was not written by projects/sentiment.py \(it records no "
                                             r"vocabulary of this project's\).* pretrain it here: python "
                                             r"projects/sentiment.py pretrain --data.text=tinyshakespeare/input.txt, "
                                             r"then finetune --system.init=out/sentiment/pretrain/model.pt"):
            sentiment.load_lm(config, [])
    vocabulary = {'kind': 'char', 'tokens': list('abcdefgh')}  # 10 tokens with unknown and eot, as the model
    save_checkpoint({'model': GPT(C).state_dict(), 'model_config': C.to_dict(), 'tokenizer': vocabulary},
                    tmp_path / 'lm.pt')
    config.model.merge_from_dict(dict(model_type=None, n_layer=3, n_head=3, n_embd=48))  # the checkpoint's: fine
    assert sentiment.load_lm(config, [])[0].config.n_layer == 3
    config.model.merge_from_dict(dict(n_layer=5, n_embd=48))  # would be ignored, so refused
    with pytest.raises(ConfigError, match=r"lm.pt brings its own model, so model.n_layer=5 \(it has 3\) cannot be "
                                          r"chosen; leave --model.\* out \(only the dropouts apply\)"):
        sentiment.load_lm(config, [])
    config.model.merge_from_dict(dict(model_type='gpt-mini', n_layer=None, n_head=None, n_embd=None))
    with pytest.raises(ConfigError, match=r"model.n_layer=6 \(it has 3\), model.n_head=6 \(it has 3\), "
                                          r"model.n_embd=192 \(it has 48\) cannot be chosen"):
        sentiment.load_lm(config, [])


def test_a_checkpoints_context_caps_the_windows_and_the_sentences(tmp_path, capsys, monkeypatch):
    sst2 = data_dir('sentiment', 'sst2')
    monkeypatch.chdir(tmp_path)  # the default work_dirs are out/sentiment/<stage>
    tokenizer = sentiment.Vocabulary.build('char', ['a fine film'])
    classifier_checkpoint(tmp_path / 'classifier.pt', tokenizer, block_size=16)
    args = [f'--system.init={tmp_path / "classifier.pt"}', f'--data.sst2_dir={sst2}', *TINY, '--data.block_size=64',
            '--trainer.max_iters=1']
    sentiment.main(['pretrain'] + args)
    sentiment.main(['finetune'] + args)
    out = capsys.readouterr().out
    assert 'dev sentences are longer than block_size 16 and were cut' in out
    for stage in ('pretrain', 'finetune'):
        assert (tmp_path / 'out' / 'sentiment' / stage / 'model.pt').exists()


def test_starting_from_a_checkpoint_says_how_long_it_trained_where_it_records_that(tmp_path, capsys):
    """A run stopped early leaves the model.pt of its first evaluation, after 1 iteration: the note says so. A
    checkpoint that records no iter_num (saved from a notebook) is started from without a note of '(after None
    iterations)'."""
    tokenizer = sentiment.Vocabulary.build('char', ['a fine film'])
    path = tmp_path / 'model.pt'
    classifier_checkpoint(path, tokenizer)  # iter_num 5
    config = sentiment.get_config('finetune')
    config.system.init = str(path)
    sentiment.load_lm(config, [])
    assert f"starting from {path} (after 5 iterations): its model (" in capsys.readouterr().out
    checkpoint = torch.load(path, weights_only=True)
    save_checkpoint({**checkpoint, 'iter_num': 1}, path)  # a run stopped before its second evaluation
    config = sentiment.get_config('finetune')
    config.system.init = str(path)
    sentiment.load_lm(config, [])
    assert f"starting from {path} (after 1 iteration): its model (" in capsys.readouterr().out
    checkpoint = torch.load(path, weights_only=True)
    del checkpoint['iter_num']
    save_checkpoint(checkpoint, path)
    config = sentiment.get_config('finetune')
    config.system.init = str(path)
    sentiment.load_lm(config, [])
    assert f"starting from {path}: its model (" in capsys.readouterr().out
