"""mingpt.data stopped part way, as an impatient user stops it: Ctrl-C (KeyboardInterrupt) or SIGTERM during a
download, in-process and in a real process, and the run after it; a token cache cut short; a compressed text."""
import bz2
import gzip
import hashlib
import http.server
import lzma
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import data_dir, load_project
from mingpt import data

BODY = bytes(range(256)) * 1024  # 256 KiB: four chunks of download's 64 KiB
CHUNK = 1 << 16


class SlowFile(http.server.BaseHTTPRequestHandler):
    """Serves BODY a chunk at a time, `pause` seconds apart, from the byte a Range header asks for (as GitHub and
    Hugging Face do); notes each request's Range."""
    pause, ranges = 0.0, []

    def do_GET(self):
        asked = self.headers.get('Range')
        self.ranges.append(asked)
        start = int(re.fullmatch(r'bytes=(\d+)-', asked).group(1)) if asked else 0
        self.send_response(206 if asked else 200)
        if asked:
            self.send_header('Content-Range', f'bytes {start}-{len(BODY) - 1}/{len(BODY)}')
        self.send_header('Content-Length', str(len(BODY) - start))
        self.end_headers()
        for i in range(start, len(BODY), CHUNK):
            self.wfile.write(BODY[i:i + CHUNK])
            self.wfile.flush()
            time.sleep(self.pause)

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture
def server():
    """The URL of BODY on a local server (no network), and its handler class, to set the pause and read the ranges."""
    handler = type('Handler', (SlowFile,), {'ranges': []})
    httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    httpd.handle_error = lambda request, address: None  # a client that hung up (the point of these tests)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f'http://127.0.0.1:{httpd.server_port}/f.bin', handler
    httpd.shutdown()
    httpd.server_close()


def test_ctrl_c_in_a_download_says_the_bytes_are_kept_and_the_next_run_resumes(tmp_path, server, monkeypatch,
                                                                                capsys):
    """A Ctrl-C after the first chunk said only 'interrupted': that the .part is kept and resumed went unsaid, and a
    user stopping a 6 GB download would delete the cache to be safe, or expect to start over."""
    url, handler = server

    class StoppedAfterOneChunk(data.tqdm):
        def update(self, n=1):
            super().update(n)
            raise KeyboardInterrupt
    monkeypatch.setattr(data, 'tqdm', StoppedAfterOneChunk)
    dest, part = tmp_path / 'f.bin', tmp_path / 'f.bin.part'
    with pytest.raises(KeyboardInterrupt):
        data.download(url, dest, sha256=hashlib.sha256(BODY).hexdigest())
    assert not dest.exists() and part.read_bytes() == BODY[:CHUNK]
    assert f"stopped downloading f.bin: the 65,536 bytes so far are kept in {part}, and the next run resumes from " \
        "there" in capsys.readouterr().err
    monkeypatch.undo()
    data.download(url, dest, sha256=hashlib.sha256(BODY).hexdigest(), quiet=True)
    assert dest.read_bytes() == BODY and not part.exists()
    assert handler.ranges == [None, f'bytes={CHUNK}-']  # the second run asked only for the rest


def test_ctrl_c_before_any_byte_says_nothing_of_a_part(tmp_path, monkeypatch, capsys):
    def stopped(url, **kwargs):  # e.g. while connecting to a slow server
        raise KeyboardInterrupt
    monkeypatch.setattr(data.requests, 'get', stopped)
    with pytest.raises(KeyboardInterrupt):
        data.download('https://example.org/f.bin', tmp_path / 'f.bin')
    assert capsys.readouterr().err == '' and not any(tmp_path.iterdir())


@pytest.mark.parametrize('sig, code, word', [(signal.SIGINT, 130, 'interrupted'), (signal.SIGTERM, 143, 'terminated')])
def test_a_download_stopped_by_a_signal_in_a_real_process_is_resumed_by_the_next(tmp_path, server, sig, code, word):
    """A command (under run_cli, as every project) downloading from a slow server gets Ctrl-C or a job scheduler's
    SIGTERM once its .part holds a chunk: it exits with the shell's code, a short note and no traceback, and the
    same command run again downloads only the rest."""
    url, handler = server
    handler.pause = 0.5
    dest, part = tmp_path / 'f.bin', tmp_path / 'f.bin.part'
    command = [sys.executable, '-c', "import sys; from mingpt.data import download; from mingpt.utils import run_cli; "
               f"run_cli(lambda argv: download({url!r}, {str(dest)!r}, sha256={hashlib.sha256(BODY).hexdigest()!r}))"]
    env = {**os.environ, 'PYTHONPATH': str(Path(__file__).parents[1])}
    run = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 60
    while not (part.exists() and part.stat().st_size) and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.02)
    run.send_signal(sig)
    err = run.communicate(timeout=60)[1]
    assert run.returncode == code, err
    kept = part.stat().st_size
    assert 0 < kept < len(BODY) and not dest.exists()
    assert f"the {kept:,} bytes so far are kept in {part}, and the next run resumes" in err
    assert f"{word} (every file written is whole)" in err and 'Traceback' not in err
    handler.pause = 0.0
    again = subprocess.run(command, stderr=subprocess.PIPE, text=True, env=env, timeout=60)
    assert again.returncode == 0, again.stderr
    assert dest.read_bytes() == BODY and not part.exists() and handler.ranges == [None, f'bytes={kept}-']


def test_a_token_cache_stopped_part_way_leaves_no_file_and_the_next_run_tokenizes_it_whole(tmp_path, monkeypatch,
                                                                                           capsys):
    """Ctrl-C while a text is tokenized into the cache, a piece at a time: no half token file that a later run would
    read back as the text's tokens, no temporary file left; the next run's tokens are the whole text's."""
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path))
    text = 'to be, or not to be: that is the question\n' * 100
    tokenizer = data.CharTokenizer.from_text(text)
    pieces = []

    class StoppedInTheSecondPiece(data.CharTokenizer):
        def encode(self, piece):
            pieces.append(piece)
            if len(pieces) == 2:
                raise KeyboardInterrupt
            return super().encode(piece)
    with pytest.raises(KeyboardInterrupt):
        data.encode_text(text, StoppedInTheSecondPiece(tokenizer.chars), 'chars', 'hamlet.txt', piece_size=1000)
    assert list((tmp_path / 'tokens').glob('*')) == []  # nothing of the first piece's ids is kept
    tokens = data.encode_text(text, tokenizer, 'chars', 'hamlet.txt', piece_size=1000)
    assert tokens.tolist() == tokenizer.encode(text) and len(list((tmp_path / 'tokens').iterdir())) == 1
    capsys.readouterr()


@pytest.mark.parametrize('size', [0, 1001, 2098, 2102])  # bytes, of 2,100: none, an odd number, an id less or more
def test_a_token_cache_cut_short_is_refused_and_names_the_file_to_delete(tmp_path, monkeypatch, capsys, size):
    """A token file cut short (a partial copy of the cache, a disk error) was read back as the tokens of a shorter
    text, and the run trained on part of it with no word; an odd number of bytes gave numpy's 'not a multiple of
    the data-type size', which chargpt explained as characters outside the vocabulary."""
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path))
    text = 'to be, or not to be: that is the question\n' * 25  # 1,050 characters, 2,100 bytes of ids
    tokenizer = data.CharTokenizer.from_text(text)
    data.encode_text(text, tokenizer, 'chars', 'hamlet.txt')
    [saved] = (tmp_path / 'tokens').iterdir()
    assert data.encode_text(text, tokenizer, 'chars', 'hamlet.txt').tolist() == tokenizer.encode(text)
    os.truncate(saved, size)
    with pytest.raises(RuntimeError, match=f"the tokens of hamlet.txt saved in {re.escape(str(saved))} are damaged "
                                           rf"\(cut short, say\): the file holds {size:,} bytes, where its 1,050 ids "
                                           r"take 2,100; delete it, and the next run tokenizes the text again"):
        data.encode_text(text, tokenizer, 'chars', 'hamlet.txt')
    saved.unlink()
    assert data.encode_text(text, tokenizer, 'chars', 'hamlet.txt').tolist() == tokenizer.encode(text)
    # a file of the user's beside it whose name holds no count (a copy kept as .old.) is not taken for the cache
    [saved] = (tmp_path / 'tokens').iterdir()
    saved.rename(saved.with_name(saved.name.replace('.1050.', '.old.')))
    assert data.encode_text(text, tokenizer, 'chars', 'hamlet.txt').tolist() == tokenizer.encode(text)
    capsys.readouterr()


def test_the_tokens_of_an_empty_text_are_saved_and_read_back_as_none(tmp_path, monkeypatch, capsys):
    """An empty text's token file holds 0 bytes, which numpy cannot memory-map ('cannot mmap an empty file'): the
    run after the one that saved it read no ids back, as the first did, not that error."""
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path))
    tokenizer = data.CharTokenizer(list('ab'))
    for _ in range(2):  # saved, then read back
        ids = data.encode_text('', tokenizer, 'chars', 'empty.txt')
        assert ids.tolist() == [] and ids.dtype == 'uint16'
    assert [p.stat().st_size for p in (tmp_path / 'tokens').iterdir()] == [0]
    capsys.readouterr()


class ZSTD:
    """zstd's own command, as a compressor module (Python has none of its own before 3.14)."""

    @staticmethod
    def compress(text):
        return subprocess.run(['zstd', '-q', '-c'], input=text, capture_output=True, check=True).stdout


@pytest.mark.parametrize('name, compressor, says', [
    ('input.txt.gz', gzip, 'is gzip-compressed, not text: decompress it first (gunzip -k '),
    ('input.txt.bz2', bz2, 'is bzip2-compressed, not text: decompress it first (bunzip2 -k '),
    ('input.txt.xz', lzma, 'is xz-compressed, not text: decompress it first (unxz -k '),
    pytest.param('input.txt.zst', ZSTD, 'is zstd-compressed, not text: decompress it first (unzstd ',
                 marks=pytest.mark.skipif(not shutil.which('zstd'), reason="zstd's command is not installed")),
])
def test_a_compressed_text_is_named_as_such_with_the_command_that_decompresses_it(tmp_path, name, compressor, says):
    """A corpus shipped compressed (input.txt.gz) was 'not a text file (it holds NUL bytes, as a checkpoint, an
    archive or an image does): give the path of a text file', which neither named the format nor the way out."""
    path = tmp_path / name
    path.write_bytes(compressor.compress(b'First Citizen:\nBefore we proceed any further, hear me speak.\n' * 100))
    with pytest.raises(ValueError, match=re.escape(f"{path} {says}{path}) and give the path of the text file")):
        data.read_text(path)


def test_ctrl_c_once_the_part_is_made_but_before_its_first_byte_says_nothing_of_bytes_kept(tmp_path, server,
                                                                                            monkeypatch, capsys):
    """A Ctrl-C once the server has answered but before its first chunk (a slow link) leaves an empty .part: a note
    that 'the 0 bytes so far are kept' and resumed would promise a resume of nothing."""
    url, _ = server

    class StoppedBeforeAnyChunk(data.tqdm):
        def __init__(self, *args, **kwargs):
            raise KeyboardInterrupt
    monkeypatch.setattr(data, 'tqdm', StoppedBeforeAnyChunk)
    with pytest.raises(KeyboardInterrupt):
        data.download(url, tmp_path / 'f.bin')
    assert (tmp_path / 'f.bin.part').read_bytes() == b'' and capsys.readouterr().err == ''


def test_the_byte_order_marks_of_files_put_one_after_another_are_not_read_as_text(tmp_path):
    """`cat a.txt b.txt > all.txt` of files that Notepad saved (a byte-order mark each, CRLF lines) kept b.txt's mark,
    U+FEFF, at the start of its first line: a character of the vocabulary that the model learned to write there. A
    U+FEFF inside a line, where it may be meant as a zero-width no-break space, is kept."""
    first, second = 'First Citizen:\nBefore we proceed\n', 'Second Citizen:\nSpeak,\ufeffspeak.\n'
    files = [('\ufeff' + text.replace('\n', '\r\n')).encode('utf-8') for text in (first, second)]
    (tmp_path / 'all.txt').write_bytes(b''.join(files))
    # each file as read alone, one after the other: second's U+FEFF inside a line too
    assert data.read_text(tmp_path / 'all.txt') == first + second


def gutenberg_file(body):
    """The bytes of a Project Gutenberg file holding `body`: a byte-order mark, a header, CRLF lines, a licence."""
    return ('\ufeffThe Project Gutenberg EBook #1\n\n*** START OF THIS PROJECT GUTENBERG EBOOK X ***\n' + body +
            '*** END OF THIS PROJECT GUTENBERG EBOOK X ***\n\n1.E.1. #@ licence terms\n').replace('\n', '\r\n').encode()


def test_chargpt_trains_on_every_txt_file_of_a_folder_each_cut_to_its_book(tmp_path, monkeypatch, capsys):
    """`--data.path=<a folder of books>` was refused ('is a folder; pass the path of a file in it'), and `cat` of
    Gutenberg files into one kept the second book's header and licence only where book_body could not tell them
    apart. Now the folder is the corpus: its .txt files in the order of their names, each cut to its book, a blank
    line between them; hidden files, other files and subfolders are not read; the output names what was read."""
    chargpt = load_project('chargpt')
    pride, whale, notes = 'It is a truth universally acknowledged.\n' * 20, 'Call me Ishmael.\n' * 30, 'my notes.\n'
    books = tmp_path / 'data' / 'text' / 'books'
    (books / 'old').mkdir(parents=True)
    (books / '2701-0.txt').write_bytes(gutenberg_file(whale))
    (books / '1342-0.txt').write_bytes(gutenberg_file(pride))
    (books / 'notes.txt').write_bytes(('\ufeff' + notes).encode())  # not a Gutenberg file: read whole, as Notepad's
    (books / '._1342-0.txt').write_bytes(b'\x00\x05\x16\x07\x00\x02\xff')  # a Mac's resource fork: not text
    (books / 'README.md').write_text('About these books #@')
    (books / 'old' / 'draft.txt').write_text('An old draft #@')
    seen = {}

    class Spy(chargpt.Trainer):
        def run(self):
            seen.update(train=self.train_dataset, val=self.val_dataset)
    monkeypatch.setattr(chargpt, 'Trainer', Spy)
    monkeypatch.setenv('MINGPT_DATA_DIR', str(tmp_path / 'data'))  # the folder's path is relative to it
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path / 'cache'))
    monkeypatch.chdir(tmp_path)
    chargpt.main(['--data.path=text/books', '--data.val_fraction=0.25', '--data.block_size=4', '--sample.length=0',
                  '--system.work_dir=run', '--model.model_type=gpt-nano'])
    corpus = pride + '\n\n' + whale + '\n\n' + notes
    decode = data.CharTokenizer.from_text(corpus).decode  # the books' characters only: no U+FEFF, '#' nor '@'
    assert decode(seen['train'].tokens) + decode(seen['val'].tokens) == corpus
    assert (f"reading 3 .txt files of {books}, in this order: 1342-0.txt, 2701-0.txt, notes.txt ({len(corpus):,} "
            "characters of text, Project Gutenberg headers and licences cut from 2)") in capsys.readouterr().out


@pytest.mark.parametrize('count, names', [(1, 'p0.txt'), (7, 'p0.txt, p1.txt, p2.txt, p3.txt, p4.txt and 2 more')])
def test_a_folder_read_names_its_files_and_no_more_than_five(tmp_path, capsys, count, names):
    for i in range(count):
        (tmp_path / f'p{i}.txt').write_text('a line\n')
    text = data.read_corpus(tmp_path)
    assert text == '\n\n'.join(['a line\n'] * count)
    assert capsys.readouterr().out == (f"reading {count} .txt file{'s' if count > 1 else ''} of {tmp_path}, in this "
                                       f"order: {names} ({len(text):,} characters of text)\n")


def test_a_folder_reads_its_text_files_whatever_the_case_of_their_extension(tmp_path, capsys):
    # Windows and old DOS tools write BOOK.TXT: it was skipped, and a folder of them refused with 'no .txt file'
    (tmp_path / 'B.TXT').write_text('upper\n')
    (tmp_path / 'a.txt').write_text('lower\n')
    (tmp_path / 'c.Txt').write_text('mixed\n')
    assert data.read_corpus(tmp_path) == 'upper\n\n\nlower\n\n\nmixed\n'  # in name order: capitals sort first
    assert 'in this order: B.TXT, a.txt, c.Txt (' in capsys.readouterr().out


def test_a_folder_with_no_txt_file_is_refused_by_name(tmp_path, monkeypatch):
    chargpt = load_project('chargpt')
    (tmp_path / 'empty').mkdir()
    (tmp_path / 'books' / 'sub').mkdir(parents=True)  # one with a .txt file in a subfolder, and a compressed one
    (tmp_path / 'books' / 'sub' / 'book.txt').write_text('A book one folder down.\n')
    (tmp_path / 'books' / 'book.txt.gz').write_bytes(b'\x1f\x8b')
    for folder in ('empty', 'books'):
        with pytest.raises(FileNotFoundError, match=re.escape(
                f"{tmp_path / folder} is a folder with no .txt file in it (only those directly in it are read, not "
                "its subfolders'); put the text files to train on there, or pass a file's path")):
            chargpt.main([f'--data.path={tmp_path / folder}', f'--system.work_dir={tmp_path / "run"}'])


def test_the_tokens_of_a_folder_are_read_back_only_while_its_files_are_the_same(tmp_path, monkeypatch, capsys):
    """The token cache of a folder is keyed by its text: a file changed, added or removed is tokenized anew, and a
    folder back as it was reads its saved tokens."""
    monkeypatch.setenv('MINGPT_CACHE_DIR', str(tmp_path / 'cache'))
    books = tmp_path / 'books'
    books.mkdir()
    tokenizer = data.CharTokenizer(sorted(set('abc\n')))

    def tokens(expected):
        ids = data.encode_text(data.read_corpus(books), tokenizer, 'chars', books.name)
        assert tokenizer.decode(ids) == expected  # never a stale file's tokens
        return sorted(p.name for p in (tmp_path / 'cache' / 'tokens').iterdir())

    (books / 'a.txt').write_text('aaa\n')
    (books / 'b.txt').write_text('bbb\n')
    first = tokens('aaa\n\n\nbbb\n')
    assert len(first) == 1 and tokens('aaa\n\n\nbbb\n') == first  # the same folder: read back
    (books / 'b.txt').write_text('bcb\n')  # changed, same length
    assert len(tokens('aaa\n\n\nbcb\n')) == 2
    (books / 'c.txt').write_text('ccc\n')  # added
    assert len(tokens('aaa\n\n\nbcb\n\n\nccc\n')) == 3
    (books / 'c.txt').unlink()  # removed: back as it was
    assert len(tokens('aaa\n\n\nbcb\n')) == 3
    (books / 'a.txt').rename(books / 'd.txt')  # renamed: the files come in another order
    assert len(tokens('bcb\n\n\naaa\n')) == 4
    capsys.readouterr()


def test_the_three_gutenberg_books_read_as_a_folder_are_their_bodies_one_after_another(capsys):
    """The real folder, against the lines between each file's START and END lines found by hand: no header, no
    licence, no byte-order mark (each file starts with one), no carriage return."""
    folder = data_dir('text', 'gutenberg')
    books = []
    for name in ('1342-0.txt', '2600-0.txt', '2701-0.txt'):
        lines = (folder / name).read_bytes().decode('utf-8').split('\r\n')
        start = next(i for i, line in enumerate(lines) if line.startswith('*** START OF'))
        end = next(i for i, line in enumerate(lines) if line.startswith('*** END OF'))
        books.append('\n'.join(lines[start + 1:end]) + '\n')
    text = data.read_corpus(folder)
    assert text == '\n\n'.join(books) and '\ufeff' not in text and '\r' not in text
    assert f"reading 3 .txt files of {folder}, in this order: 1342-0.txt, 2600-0.txt, 2701-0.txt ({len(text):,} " \
        "characters of text, Project Gutenberg headers and licences cut from 3)" in capsys.readouterr().out


def test_a_download_error_crosses_a_process_boundary_whole():
    """DownloadError's url, reason and kept were required arguments, so pickle (a DataLoader worker's or a
    multiprocessing error sent back) could not rebuild it from its message: a TypeError in place of the error."""
    e = data.DownloadError('could not download u (r)', 'u', 'r', ' kept')
    again = pickle.loads(pickle.dumps(e))
    assert (type(again), str(again), again.url, again.reason, again.kept) == (data.DownloadError, str(e), 'u', 'r',
                                                                              ' kept')
