"""Where files come from, and the datasets several projects share.

Look-up order for a data file (see fetch): an explicit path, $MINGPT_DATA_DIR/<relative path> (laid out like the
project's shared data folder: tinyshakespeare/input.txt, gpt2/encoder.json, ...), the cache ($MINGPT_CACHE_DIR or
~/.cache/mingpt), and only then a download.
"""
import codecs
import glob
import hashlib
import json
import os
import re
import sys
import time
import unicodedata
from pathlib import Path

import numpy as np
import requests
import torch
from tqdm.auto import tqdm

from mingpt.utils import atomic_write, check_range, make_folder, other_rank

# seconds a process under torchrun waits for the first process's download to make progress (requests' own
# timeouts, 30 s to connect and 30 s to answer, come before the first byte)
WAIT_FOR_DOWNLOAD_S = 120
TINY_SHAKESPEARE_URL = 'https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt'
TINY_SHAKESPEARE_SHA256 = '86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed'  # as widely pinned


def env_folder(name):
    """The folder that the environment variable `name` names, None where it is unset or empty. Quotation marks around
    it are refused: Windows' cmd keeps them as part of the value (set MINGPT_DATA_DIR="C:\\My Data"), which named a
    folder that nothing held, or made one named '"' in the current folder."""
    value, quotes = os.environ.get(name, ''), '"\''
    if value and (value[0] in quotes or value[-1] in quotes):
        raise ValueError(f"{name}={value} has quotation marks around it, which cmd's set keeps as part of the value: "
                         f"set it without them (set {name}={value.strip(quotes)}), or as set \"{name}=...\"")
    return Path(value).expanduser() if value else None


def cache_dir():
    if folder := env_folder('MINGPT_CACHE_DIR'):
        return folder
    try:
        return Path.home() / '.cache' / 'mingpt'
    except RuntimeError:  # no HOME and no user entry, as in a container run under an arbitrary user id
        raise RuntimeError("cannot find the home folder, where the download cache goes (~/.cache/mingpt): set "
                           "MINGPT_CACHE_DIR to a folder that can be written") from None


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):
            h.update(chunk)
    return h.hexdigest()


def download(url, dest, sha256=None, quiet=False, local_copy='pass its path'):
    """Download url to dest with a progress bar. Bytes go to dest + '.part' (resumed if a previous try left one)
    and are renamed into place only when complete and, if sha256 is given (or the server publishes it, as Hugging
    Face does), verified: dest never holds half a file.
    An https download redirected to plain http is refused.
    local_copy says, when the download fails, how to use a copy got elsewhere (e.g. 'pass its path with
    --data.path=FILE'). Under torchrun the first process of a machine downloads and the others wait for dest: all at
    once, they appended to one .part (a file too long, kept in the cache) or found it renamed away (a crash)."""
    dest = Path(dest)
    part = dest.with_name(dest.name + '.part')
    if int(os.environ.get('WORLD_SIZE', 1)) > 1 and int(os.environ.get('LOCAL_RANK', 0)) > 0:  # torchrun's
        return wait_for_download(url, dest, part)
    have = part.stat().st_size if part.exists() else 0
    headers = {'Range': f'bytes={have}-'} if have else {}
    stale = False
    try:
        r = requests.get(url, stream=True, timeout=30, headers=headers,
                         hooks={'response': refuse_plain_http} if url.startswith('https://') else {})
        sha256 = sha256 or published_sha256(r)
        if r.status_code == 416 and have:  # nothing past the .part's end: complete, if the file has its length
            r.close()
            stale = r.headers.get('content-range') != f'bytes */{have}'  # longer: the file changed, or two
            if stale:  # downloads appended to one .part; start over
                part.unlink()
        else:
            r.raise_for_status()
            if have and r.status_code != 206:  # the server ignored the range: start over
                have = 0
            length = r.headers.get('content-length', '')  # for the bar only: a proxy may send anything there
            total = int(length) + have if length.isdigit() else None
            make_folder(dest.parent)  # only now: a failed request leaves no empty folders
            with open(part, 'ab' if have else 'wb') as f, tqdm(
                    total=total, initial=have, unit='B', unit_scale=True, unit_divisor=1024,
                    desc=f'downloading {dest.name} to {dest.parent}', disable=quiet) as bar:
                for chunk in r.iter_content(chunk_size=1 << 16):  # small: the bar moves on a slow link too
                    f.write(chunk)
                    bar.update(len(chunk))
                f.flush()
                os.fsync(f.fileno())
    except OSError as e:  # requests' errors are OSErrors too
        kept = f" The partial download is kept at {part} and resumed next time." if part.exists() else ''
        if not isinstance(e, requests.RequestException):  # the cache cannot be written: read-only, or full
            raise OSError(f"cannot save the download of {url} in {dest.parent} ({e}); set MINGPT_CACHE_DIR to a "
                          f"folder that can be written and has room for it, or get the file elsewhere and "
                          f"{local_copy}.{kept}") from None
        problem = data_dir_problem()
        typo = f" (it is {env_folder('MINGPT_DATA_DIR')}, {problem})" if problem else ''
        where = dest.relative_to(cache_dir()) if dest.is_relative_to(cache_dir()) else dest.name  # as in the cache
        reason = f"{type(e).__name__}: {e}"
        raise DownloadError(f"could not download {url} ({reason}). Check the network, or get the file elsewhere and "
                            f"{local_copy}, or place it at {dest}, or set MINGPT_DATA_DIR to a folder that holds it as "
                            f"{where}{typo}.{kept}", url, reason, kept) from None
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM under run_cli: what came is kept, and a user should know
        if part.exists() and part.stat().st_size:
            print(f"stopped downloading {dest.name}: the {part.stat().st_size:,} bytes so far are kept in {part}, "
                  "and the next run resumes from there", file=sys.stderr)
        raise
    if stale:
        return download(url, dest, sha256, quiet, local_copy)
    if sha256 is not None:
        got = sha256_of(part)
        if got != sha256.lower():  # hex digits in either case (PowerShell's Get-FileHash prints capitals)
            part.unlink()
            raise RuntimeError(f"download of {url} is corrupt: sha256 {got}, expected {sha256}; it was deleted, "
                               "try again")
    os.replace(part, dest)
    return dest


class DownloadError(RuntimeError):
    """A download that failed on the way (no network, an HTTP error). Beside the message: url, reason (the error met)
    and kept (a sentence on the partial download kept, or ''), for a caller that says the ways on in its own words."""
    def __init__(self, message, url=None, reason=None, kept=''):  # defaults: pickle rebuilds it from the message
        super().__init__(message)
        self.url, self.reason, self.kept = url, reason, kept


def data_dir_problem():
    """'which does not exist' (or 'a file, not a folder') where MINGPT_DATA_DIR names no folder, else ''."""
    env = env_folder('MINGPT_DATA_DIR')
    if env is None or env.is_dir():
        return ''
    return 'a file, not a folder' if env.is_file() else 'which does not exist'


def offline_error(e, files, relfolder, elsewhere, looked_also=()):
    """The error for files read together (GPT-2's tokenizer; a model's config and weights) where one of them could not
    be downloaded (e, a DownloadError): what failed, the folders a copy was looked for in (and the places looked_also
    names), and the ways on: all the files in one of those folders, or `elsewhere` (another way to use a copy)."""
    env, cache, problem = env_folder('MINGPT_DATA_DIR'), cache_dir() / relfolder, data_dir_problem()
    # a MINGPT_DATA_DIR that names no folder (misspelt, or a file's path) is a place neither to look nor to put
    looked = ([f"{env / relfolder} ($MINGPT_DATA_DIR)"] if env and not problem else []) + \
        [f"{cache} (the download cache)", *looked_also]
    put = (f"{env / relfolder}/ or {cache}/" if env and not problem else
           f"{cache}/ (or {relfolder}/ in a folder that MINGPT_DATA_DIR names)")
    places = f"{', '.join(looked[:-1])} or {looked[-1]}" if len(looked) > 1 else looked[0]
    if problem:
        places += f"; MINGPT_DATA_DIR names {env}, {problem}: correct it (misspelt?) or unset it"
    return DownloadError(f"could not download {e.url} ({e.reason}), and found no copy in {places}. Check the "
                         f"network, or get {' and '.join(files)} elsewhere and put "
                         f"{'it' if len(files) == 1 else 'both' if len(files) == 2 else 'all'} in {put}, or "
                         f"{elsewhere}.{e.kept}", e.url, e.reason, e.kept)


def refuse_plain_http(response, **kwargs):
    """requests' hook on each answer to an https download, redirects included: refuse one that came over plain http
    (a redirect from https to http, by a proxy or a mirror), where anyone on the way could change the file."""
    if not response.url.startswith('https://'):
        response.close()
        raise requests.RequestException(f"redirected to {response.url}, plain http, where anyone on the way could "
                                        "change the file: refused")


def published_sha256(response):
    """The sha256 that Hugging Face publishes for a large (LFS) file, in the X-Linked-Etag header of its redirect to
    the file's storage; None where no answer has one (a small file's etag is git's sha1 of it, 40 digits)."""
    for answer in (*response.history, response):
        tag = answer.headers.get('X-Linked-Etag', '').strip('"')
        if re.fullmatch(r'[0-9a-f]{64}', tag):
            return tag
    return None


def wait_for_download(url, dest, part):
    """dest, once the first process of this machine (LOCAL_RANK 0) has downloaded it. A RuntimeError, as a failed
    download, once its .part has not grown for WAIT_FOR_DOWNLOAD_S seconds: that process failed, or went on without
    the file (sentiment falls back to dev.tsv when SST-2.zip cannot be downloaded), and this one waited for ever."""
    seen, since = None, time.monotonic()
    while not dest.exists():
        try:
            size = part.stat().st_size
        except FileNotFoundError:  # not started, or renamed into place since dest.exists()
            size = None
        if size != seen:
            seen, since = size, time.monotonic()
        elif time.monotonic() - since > WAIT_FOR_DOWNLOAD_S:
            raise RuntimeError(f"could not download {url}: the first process of this machine (LOCAL_RANK 0) "
                               f"downloads it for the others, but {dest} has not appeared and nothing has been "
                               f"downloaded for {WAIT_FOR_DOWNLOAD_S} s; see that process's error, or place the file "
                               f"at {dest}")
        time.sleep(1)
    return dest


def data_roots():
    """Where data files are looked for, in order: $MINGPT_DATA_DIR (if set), then the download cache."""
    folder = env_folder('MINGPT_DATA_DIR')
    return ([folder] if folder else []) + [cache_dir()]


def find_local(path):
    """path if it exists, else the same relative path under one of data_roots(); None if it is nowhere."""
    p = Path(path).expanduser()
    return next((q for q in [p] + [root / p for root in data_roots()] if q.exists()), None)


def fetch(relpath, url=None, path=None, sha256=None, local_copy='pass its path', folder=False):
    """Return a local path for the data file `relpath` (e.g. 'tinyshakespeare/input.txt'), downloading it into the
    cache once if it is nowhere else. `path`, when given, wins and must exist: a file, or one under $MINGPT_DATA_DIR
    or the cache (e.g. 'text/gutenberg/2600-0.txt'); with folder=True it may be a folder too (e.g. 'text/gutenberg',
    for read_corpus). local_copy: how a user passes `path`, for the errors (e.g. 'pass its path with
    --data.path=FILE')."""
    if path:
        found = find_local(path)
        if found is None:
            # a relative path is also looked for under the data roots; an absolute one only where it says
            roots = [] if Path(path).expanduser().is_absolute() else data_roots()
            nor = f" (nor under {' or '.join(map(str, roots))})" if roots else ''
            what = 'file or folder' if folder else 'file'
            raise FileNotFoundError(f"{path} does not exist{nor}; pass the path of an existing {what}")
        if found.is_dir() and not folder:
            raise IsADirectoryError(f"{path} is a folder; pass the path of a file in it")
        return found
    candidates = [root / relpath for root in data_roots()]
    for p in candidates:
        if p.exists():
            return p
    if url is None:
        raise FileNotFoundError(f"{relpath} not found (looked in: {', '.join(map(str, candidates))}) and there is "
                                f"no known download address; {local_copy} or set MINGPT_DATA_DIR")
    return download(url, cache_dir() / relpath, sha256=sha256, local_copy=local_copy)


def read_text(path):
    """The contents of a UTF-8 text file, without a leading byte-order mark (Windows editors and Project Gutenberg
    write one; it is not text), nor one at the start of a line, where `cat a.txt b.txt > all.txt` puts b.txt's (as a
    zero-width no-break space, U+FEFF has nothing to join there); any other encoding is a ValueError that names the
    file."""
    try:
        with open(path, encoding='utf-8-sig') as f:
            return f.read().replace('\n\ufeff', '\n')
    except IsADirectoryError:
        raise IsADirectoryError(f"{path} is a folder, not a text file; pass the path of a file in it") from None
    except UnicodeDecodeError as e:
        raise not_utf8(path, e) from None


def book_body(text):
    """The books of a Project Gutenberg file (one, or several put one after another), each the text between its
    '*** START OF' and '*** END OF' lines; any other text as it is. The header and the licence at the end are not the
    book's writing, and the licence alone is a quarter of a short book's last 10%, its val split. Books are put one
    after another with a blank line between them, as paragraphs."""
    bodies = re.findall(r'^\*\*\* ?START OF[^\n]*\n(.*?)^\*\*\* ?END OF', text, re.M | re.S)
    return '\n\n'.join(bodies) if bodies else text


def read_corpus(path):
    """The text to train a language model on, cut to the books of any Project Gutenberg file (book_body): a text
    file's, or every .txt file's of a folder (not of its subfolders), in the order of their names, at least one
    blank line between one file's text and the next's. Says what it read: which files, and how much of them is text."""
    path = Path(path)
    if not path.is_dir():
        text = read_text(path)
        if len(body := book_body(text)) < len(text):
            print(f"{path.name} is a Project Gutenberg book: training on its text, {len(body):,} of the file's "
                  f"{len(text):,} characters (not its header and licence)")
        return body
    files = corpus_files(path)
    bodies, books = [], 0
    for file in files:  # one file's whole text at a time, not all of them and all their bodies
        text = read_text(file)
        bodies.append(book_body(text))
        books += len(bodies[-1]) < len(text)
    text = '\n\n'.join(bodies)
    names = ', '.join(p.name for p in files[:5]) + (f' and {len(files) - 5} more' if len(files) > 5 else '')
    cut = f", Project Gutenberg headers and licences cut from {books}" if books else ''
    print(f"reading {len(files)} .txt file{'s' if len(files) > 1 else ''} of {path}, in this order: {names} "
          f"({len(text):,} characters of text{cut})")
    return text


def corpus_files(path):
    """The files read_corpus reads for path, in its order: the file itself, or a folder's .txt files."""
    path = Path(path)
    if not path.is_dir():
        return [path]
    # as the shell's *.txt, in upper case too (BOOK.TXT from Windows): no hidden files, such as the ._ files of a Mac's
    # copy to a USB stick (not text)
    files = sorted(p for p in path.iterdir()
                   if p.suffix.lower() == '.txt' and p.is_file() and not p.name.startswith('.'))
    if not files:
        raise FileNotFoundError(f"{path} is a folder with no .txt file in it (only those directly in it are read, "
                                "not its subfolders'); put the text files to train on there, or pass a file's path")
    return files


# (first bytes, what the file is, the command that decompresses it) of the usual compressed formats of one file; not
# zip's, which torch.save's checkpoints and Word's files start with too (the NUL-bytes message covers those)
COMPRESSED = [(b'\x1f\x8b', 'gzip-compressed', 'gunzip -k'), (b'BZh', 'bzip2-compressed', 'bunzip2 -k'),
              (b'\xfd7zXZ\x00', 'xz-compressed', 'unxz -k'), (b'\x28\xb5\x2f\xfd', 'zstd-compressed', 'unzstd')]


def not_utf8(path, error):
    """The ValueError for a file that is not UTF-8 (error: its UnicodeDecodeError): what it is, where its first bytes
    tell, and how to convert it (iconv needs -f, the encoding to convert from: it otherwise assumes the locale's)."""
    with open(path, 'rb') as f:
        head = f.read(8192)
    compressed = next((c for c in COMPRESSED if head.startswith(c[0])), None)
    if compressed:  # a corpus is often shipped compressed (text.txt.gz)
        return ValueError(f"{path} is {compressed[1]}, not text: decompress it first ({compressed[2]} {path}) and give "
                          "the path of the text file that makes")
    utf16 = head[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
    if not utf16 and b'\0' in head:  # no text in an 8-bit encoding holds a NUL byte
        return ValueError(f"{path} is not a text file (it holds NUL bytes, as a checkpoint, an archive or an image "
                          "does): give the path of a text file")
    if utf16:  # Notepad's 'Unicode', and Windows PowerShell's > and Out-File
        what, encoding = "UTF-16 text (it starts with UTF-16's byte-order mark), not UTF-8", 'utf-16'
    else:
        what, encoding = (f"not UTF-8 text (byte {error.start} cannot be decoded: {error.reason}; Windows' 'ANSI' "
                          "files are cp1252)"), 'cp1252'
    return ValueError(f"{path} is {what}; save it as UTF-8 (in an editor: Save As, encoding UTF-8) or convert it, "
                      f"e.g. iconv -f {encoding} -t utf-8 FILE > NEW.txt")


def encode_text(text, tokenizer, identity, name, piece_size=1 << 20):
    """tokenizer.encode(text) as a read-only memory map of a file in cache_dir()/tokens: encoded once, a piece at a
    time under a progress bar, then read back by every later call with the same text and tokenizer (a resume, another
    run). The file's name holds the sha256 of the text and of `identity` (anything JSON that tells this tokenizer
    from others, such as the record a checkpoint keeps of it), so a changed text or vocabulary is never read as the
    old one; `name` (e.g. the text file's) starts it, and the number of ids ends it, so a file cut short (a partial
    copy, a disk error) is refused, not read as a shorter text. An id takes 2 bytes (4 in a vocabulary of more than
    65,536 tokens), not a Python int's 8 in a list and 8 more in an array; the file holds nothing else."""
    dtype = np.dtype(np.uint16 if len(tokenizer) <= 1 << 16 else np.uint32)
    text_hash = hashlib.sha256(text.encode('utf-8')).hexdigest()
    vocab_hash = hashlib.sha256(json.dumps(identity, sort_keys=True).encode('utf-8')).hexdigest()
    start = name.encode('utf-8')[:190].decode('utf-8', 'ignore')  # a file name holds 255 bytes, .tmp<pid> included
    folder, key = cache_dir() / 'tokens', f'{start}.{text_hash[:12]}.{vocab_hash[:12]}'
    cached = re.compile(re.escape(key) + r'\.(\d+)\.' + dtype.name)  # key.<number of ids>.uint16
    saved = next((p for p in folder.glob(f'{glob.escape(key)}.*') if cached.fullmatch(p.name)), None)
    if saved:
        print(f"reading the tokens of {name} saved in {saved}")
        count = int(cached.fullmatch(saved.name)[1])
        if saved.stat().st_size != count * dtype.itemsize:
            raise RuntimeError(f"the tokens of {name} saved in {saved} are damaged (cut short, say): the file holds "
                               f"{saved.stat().st_size:,} bytes, where its {count:,} ids take "
                               f"{count * dtype.itemsize:,}; delete it, and the next run tokenizes the text again")
        return np.memmap(saved, dtype=dtype, mode='r') if count else np.zeros(0, dtype)
    try:
        make_folder(folder)  # first: a cache that cannot be written fails before a long tokenization, not after
        pieces = []
        # under torchrun every process tokenizes; one bar is enough
        with tqdm(total=len(text), unit='char', unit_scale=True, desc=f'tokenizing {name}',
                  disable=other_rank()) as bar:
            # a BPE vocabulary without a pre-tokeniser (pat None) merges across white space: one piece
            for piece in [text] if getattr(tokenizer, 'pat', '') is None else text_pieces(text, piece_size):
                pieces.append(np.array(tokenizer.encode(piece), dtype=dtype))  # 2 bytes an id until they are written
                bar.update(len(piece))
        count = sum(map(len, pieces))
        saved = folder / f'{key}.{count}.{dtype.name}'
        print(f"tokenizing {name} into {saved}, which later runs on this text with this tokenizer read back")

        def write(tmp):
            with open(tmp, 'wb') as f:
                for ids in pieces:  # piece by piece: no second copy of them all
                    ids.tofile(f)
        atomic_write(saved, write)
    except OSError as e:  # e.g. a home folder that is read-only, or full
        raise OSError(f"cannot save the tokens in {folder} ({e}); set MINGPT_CACHE_DIR to a folder that can be "
                      "written and has room for them") from None
    return np.memmap(saved, dtype=dtype, mode='r') if count else np.zeros(0, dtype)


def text_pieces(text, size):
    """The text in pieces of about `size` characters, each cut just before a space or a newline that follows a
    non-space character: no character, nor any pre-token of GPT-2's regex, spans such a cut, so the pieces' ids,
    one after another, are the whole text's."""
    start, non_space_then_space = 0, re.compile(r'\S[ \n]')
    while start < len(text):
        cut = non_space_then_space.search(text, start + size)
        end = cut.start() + 1 if cut else len(text)
        yield text[start:end]
        start = end


class CharTokenizer:
    """A character-level vocabulary: each distinct character of the training text is one token. With unknown=True
    one more id, len(chars), stands for every symbol outside the vocabulary, where encode would otherwise refuse the
    text; then encode also renumbers other hashable symbols, such as the ids of a larger vocabulary (decode and the
    refusal need characters)."""

    def __init__(self, chars, unknown=False):
        self.chars = list(chars)
        self.stoi = {ch: i for i, ch in enumerate(self.chars)}  # string to index, and back, as minGPT names them
        self.itos = dict(enumerate(self.chars))
        self.unknown = unknown

    @classmethod
    def from_text(cls, text):
        return cls(sorted(set(text)))

    def __len__(self):
        return len(self.chars) + 1 if self.unknown else len(self.chars)

    def encode(self, text):
        if self.unknown:
            return [self.stoi.get(c, len(self.chars)) for c in text]
        unknown = sorted(set(text) - self.stoi.keys())
        if unknown:
            # e.g. a composed 'ê' (NFC, as most keyboards type it) where the text trained on had e and a combining ^
            forms = ('NFC', 'NFD') if isinstance(text, str) else ()  # (not a list of symbols, such as '<pad>')
            form = next((f for f in forms if set(unicodedata.normalize(f, text)) <= self.stoi.keys()), None)
            fix = (f"they are in another Unicode form than the vocabulary's: unicodedata.normalize({form!r}, text) "
                   "gives its characters" if form else "remove or replace them")
            raise ValueError(f"characters {on_circle(unknown)!r} are not in the vocabulary of this model "
                             f"({len(self.chars)} characters: {on_circle(self.chars)!r}); {fix}")
        return [self.stoi[c] for c in text]

    def decode(self, ids):
        """The text of ids (or of one id, as Encoder.decode takes it); the unknown id (with unknown=True) reads as
        U+FFFD, the replacement character."""
        ids = ids.tolist() if hasattr(ids, 'tolist') else ids  # a tensor or array (one id: an int)
        try:
            ids = [ids] if isinstance(ids, int) else [int(i) for i in ids]
        except (TypeError, ValueError):  # a row of ids each: int() of a row is torch's 'only one element tensors'
            raise ValueError(f"decode takes one sequence of token ids, not {ids!r:.60}: decode a batch (generate's "
                             "output, batch x tokens) a row at a time, e.g. decode(out[0])") from None
        bad = [i for i in ids if not 0 <= i < len(self)]
        if bad:
            raise ValueError(f"cannot decode ids {bad[:5]}: this vocabulary's ids are 0..{len(self) - 1}")
        return ''.join(self.chars[i] if i < len(self.chars) else '\ufffd' for i in ids)

    def decode_bytes(self, ids):
        """The text of ids as UTF-8 bytes, as a byte-level BPE's decode_bytes gives them (generate.py streams them,
        the pictures label tokens with them)."""
        return self.decode(ids).encode('utf-8')


def on_circle(chars):
    """chars as one string to show, each combining mark (an accent, a Devanagari vowel sign) on a dotted circle,
    not piled onto the character shown before it."""
    return ''.join('\u25cc' + c if len(c) == 1 and unicodedata.combining(c) else c for c in chars)


class CharDataset(torch.utils.data.Dataset):
    """Every block_size-long window of a text, as (x, y) character ids with y one step ahead of x. The text's ids are
    held in 1 byte each (4 in a vocabulary of more than 256 characters), encoded a piece at a time: a list of the
    whole text's ids, then int64s, took 16 bytes a character (1.6 GB for a 100 MB text)."""

    def __init__(self, data, block_size, tokenizer=None):
        self.tokenizer = tokenizer or CharTokenizer.from_text(data)
        self.block_size = check_range('block_size', block_size, low=1, integer=True)
        dtype = torch.uint8 if len(self.tokenizer) <= 256 else torch.int32
        piece = 1 << 16  # characters encoded at a time: a list of their ids takes 8 bytes each
        self.data = torch.cat([torch.tensor(self.tokenizer.encode(data[i:i + piece]), dtype=dtype)
                               for i in range(0, len(data), piece)] or [torch.zeros(0, dtype=dtype)])
        if len(self.data) <= block_size:
            raise ValueError(f"the text has {len(self.data)} characters, too few for one window of block_size "
                             f"{block_size} plus its target; use more text or a smaller block_size")

    def get_vocab_size(self):
        return len(self.tokenizer)

    def get_block_size(self):
        return self.block_size

    def __len__(self):
        return len(self.data) - self.block_size

    def __getitem__(self, idx):
        chunk = self.data[idx:idx + self.block_size + 1].long()  # a copy: masking y in place leaves the text as it is
        return chunk[:-1], chunk[1:].clone()  # y apart from x: masking y (y[:k] = -1) must not change x


class TokenDataset(torch.utils.data.Dataset):
    """Every block_size-long window of a token array, as (x, y) ids with y one step ahead of x; the trainer draws
    windows at random. `tokens` is the path of a file of uint16 ids (GPT-2's 50257 ids fit in 16 bits: half the
    bytes of int32), memory-mapped so that a corpus larger than memory opens at once and the OS reads in only the
    windows drawn; or any in-memory sequence of ids (list, numpy array, tensor)."""

    def __init__(self, tokens, block_size, vocab_size=None):
        self.path = None
        if isinstance(tokens, (str, os.PathLike)):
            self.path = os.fspath(tokens)
            if os.path.getsize(self.path) % 2 or not os.path.getsize(self.path):
                raise ValueError(f"{self.path} is empty or has an odd number of bytes, so it is not a file of uint16 "
                                 "token ids (write one with TokenDataset.write)")
            self.tokens = np.memmap(self.path, dtype=np.uint16, mode='r')
        else:
            one = ("tokens must be one sequence of ids: join the sequences (games, poems) into one, a separator id "
                   "(an end of text) between them, e.g. with np.concatenate")
            try:
                self.tokens = np.asarray(tokens.cpu() if isinstance(tokens, torch.Tensor) else tokens)
            except ValueError:  # numpy's 'inhomogeneous shape': sequences of different lengths
                raise ValueError(one) from None
            if self.tokens.ndim != 1:  # rows of a 2-D array would be read as tokens, windows of rows as sequences
                raise ValueError(f"{one}; these have the shape {self.tokens.shape}")
        self.block_size = check_range('block_size', block_size, low=1, integer=True)
        self.vocab_size = vocab_size
        if len(self.tokens) <= block_size:
            raise ValueError(f"the token array has {len(self.tokens)} tokens, too few for one window of block_size "
                             f"{block_size} plus its target; use more data or a smaller block_size")
        if self.path is None:  # in memory, so a check is cheap; it spares the model's cryptic "index out of range"
            self._check_ids()

    def _check_ids(self):
        if not np.issubdtype(self.tokens.dtype, np.integer):
            raise ValueError(f"token ids must be integers, not {self.tokens.dtype}")
        if self.tokens.min() < 0:
            raise ValueError(f"token ids must be >= 0; these include {self.tokens.min()}")
        if self.vocab_size is not None and self.tokens.max() >= self.vocab_size:
            raise ValueError(f"token id {self.tokens.max()} is outside the vocabulary (vocab_size={self.vocab_size}: "
                             f"ids 0..{self.vocab_size - 1}); pass the right vocab_size or fix the ids")

    @staticmethod
    def write(path, ids):
        """Save token ids as the uint16 file TokenDataset reads (atomically: a temporary file, then a rename)."""
        ids = np.asarray(ids)
        if ids.size and (ids.min() < 0 or ids.max() >= 2 ** 16):
            raise ValueError(f"token ids must lie in [0, 65535] to be stored as uint16; got {ids.min()}..{ids.max()}")
        atomic_write(path, ids.astype(np.uint16).tofile)
        return Path(path)

    def get_vocab_size(self):
        if self.vocab_size is None:  # one pass over the data; pass vocab_size to skip it for a large corpus
            self.vocab_size = int(self.tokens.max()) + 1
        return self.vocab_size

    def get_block_size(self):
        return self.block_size

    def __len__(self):
        return len(self.tokens) - self.block_size

    def __getitem__(self, idx):
        if not 0 <= idx < len(self):
            raise IndexError(f"window {idx} out of range for {len(self)} windows")
        chunk = torch.from_numpy(self.tokens[idx:idx + self.block_size + 1].astype(np.int64))
        # a file's ids are checked as its windows are read (a pass up front would read a whole large corpus): else
        # the model meets an id past its vocabulary, a device-side assert on a GPU (ids in memory were checked at once)
        if self.path is not None and self.vocab_size is not None and chunk.max() >= self.vocab_size:
            raise ValueError(f"{self.path} holds token id {chunk.max().item()} (in window {idx}), outside the "
                             f"vocabulary (vocab_size={self.vocab_size}: ids 0..{self.vocab_size - 1}); pass the "
                             "right vocab_size or fix the file")
        return chunk[:-1], chunk[1:].clone()  # y apart from x: masking targets in place (y[:k] = -1) must not change x

    def __getstate__(self):
        # sent to DataLoader workers: pickling the memmap would copy the whole file, so reopen it there instead
        state = dict(self.__dict__)
        if self.path is not None:
            state['tokens'] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        if self.path is not None:
            self.tokens = np.memmap(self.path, dtype=np.uint16, mode='r')
