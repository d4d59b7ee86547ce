"""mingpt.data stopped part way, as an impatient user stops it: Ctrl-C (KeyboardInterrupt) or SIGTERM during a
download, in-process and in a real process, and the run after it; a token cache cut short; a compressed text."""
import bz2
import gzip
import hashlib
import http.server
import lzma
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

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
