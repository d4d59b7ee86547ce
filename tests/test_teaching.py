"""The teaching pictures (mingpt.plot, projects/attention.py) and the ablation (projects/ablation.py), on tiny
models: what each figure holds is checked against numbers computed here by hand. The exam is test_exam.py, which
needs no matplotlib."""
import json
import math
import os
import re
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import args_txt_words, load_project
from mingpt.bpe import train_bpe
from mingpt.checkpoint import model_state, save_checkpoint
from mingpt.model import GPT, sinusoidal_positions
from mingpt.pretrained import load_model_and_tokenizer
from mingpt.utils import ConfigError

pytest.importorskip('matplotlib')
from mingpt import plot  # noqa: E402

TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
        "First Citizen:\nYou are all resolved rather to die than to famish?\n\n") * 40
PROMPT = 'First Citizen:\nBefore we proceed any further, hear me'  # 52 characters, more than a grid panel labels


def image_axes(fig):
    """The heat-map panels of a figure (colour bars aside), in drawing order."""
    return [ax for ax in fig.axes if ax.images and not ax.get_label() == '<colorbar>']


def tiny_gpt(**kw):
    torch.manual_seed(0)
    config = GPT.get_default_config()
    config.merge_from_dict(dict(model_type=None, n_layer=2, n_head=3, n_embd=24, vocab_size=40, block_size=64, **kw))
    return GPT(config).eval()


@pytest.fixture(scope='module')
def ablation_dir(tmp_path_factory):
    """The ablation, run once on tiny settings: four chargpt runs whose checkpoints the other tests draw too."""
    tmp = tmp_path_factory.mktemp('ablation')
    (tmp / 'text.txt').write_text(TEXT)
    # (the text lacks the characters of chargpt's default prompt: no sample is drawn, so it is not checked)
    load_project('ablation').main(ablation_args(tmp))
    return tmp


def ablation_args(work_dir):
    return [f'--system.work_dir={work_dir}', f'--data.path={work_dir / "text.txt"}', '--data.block_size=64',
            '--trainer.batch_size=4', '--trainer.max_iters=3', '--trainer.eval_interval=2', '--trainer.eval_iters=1',
            '--trainer.quiet=True']


# ---- attention maps ----

def test_readable_shows_spaces_newlines_and_controls():
    assert plot.readable(' a\n\tb\x01') == '\u2423a\u21b5\u21e5b\\x01'
    # a BPE token's bytes: those that are part of a character as escapes, not each as the same U+FFFD
    assert [plot.readable(b) for b in (b' \xc3', b'\xa9', 'é'.encode())] == ['\u2423\\xc3', '\\xa9', 'é']


def without_a_font_for(monkeypatch, code_point):
    """As on a machine where no installed font draws code_point (one without CJK fonts, say)."""
    fonts = {name: chars - {code_point} for name, chars in plot.installed_fonts().items()}
    monkeypatch.setattr(plot, 'installed_fonts', lambda: fonts)


def glyphs_missing_when_drawn(fig):
    """matplotlib's own check: the 'Glyph ... missing from font(s)' warnings it gives as it draws fig."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        plot.png_bytes(fig)
    return [str(w.message) for w in caught if 'missing from font' in str(w.message)]


def test_characters_beyond_the_default_font_are_drawn_by_an_installed_font_or_named_by_code_point(monkeypatch):
    """Japanese, Devanagari or emoji tokens were drawn in matplotlib's default font, which lacks them: each label
    a box, alike for every character. '\u1d81' is in the STIX fonts that come with matplotlib, not in its default
    DejaVu Sans: it is drawn, in STIX. '\u543e' is in no font (made so here): its labels name its code point, and
    one warning says what to install."""
    without_a_font_for(monkeypatch, 0x543e)
    with pytest.warns(UserWarning, match="no installed font draws \u543e, .* install a font that has them") as caught:
        fig = plot.attention_figure(torch.rand(2, 2, 3, 3).softmax(-1), ['a', '\u1d81', '\u543e'], title='\u1d81\u543e')
    assert "writes them as code points ('\\u543e'):" in str(caught[0].message)  # its own, not a fixed example
    assert glyphs_missing_when_drawn(fig) == []
    panel = image_axes(fig)[2]  # bottom left: its labels are drawn
    assert [t.get_text() for t in panel.get_yticklabels()] == ['a', '\u1d81', '\\u543e']
    assert [t.get_text() for t in panel.get_xticklabels()] == ['a', '\u1d81', '\\u543e']
    assert fig.get_suptitle() == '\u1d81\\u543e'


def test_the_missing_font_warning_names_the_first_ten_characters_of_a_long_prompt(monkeypatch):
    """A long prompt in a script no installed font has listed every one of its characters on one line."""
    text = ''.join(map(chr, range(0x5400, 0x5400 + 40)))
    fonts = {name: chars - set(map(ord, text)) for name, chars in plot.installed_fonts().items()}
    monkeypatch.setattr(plot, 'installed_fonts', lambda: fonts)
    with pytest.warns(UserWarning) as caught:
        plot.drawable([text])
    assert str(caught[0].message).startswith(f"no installed font draws {' '.join(text[:10])} and 30 more, so the "
                                             "picture writes them as code points ('\\u5400' '\\u5401' '\\u5402' ...)")


def test_grid_has_one_panel_per_layer_and_head_labelled_with_the_tokens():
    model = tiny_gpt()
    tokens = [f't{i}' for i in range(40)]
    maps = model.attention_maps(torch.randint(40, (1, 40)))  # 2 layers of (1, 3, 40, 40)
    fig = plot.attention_figure([m[0] for m in maps], tokens, title='a title')
    panels = image_axes(fig)
    assert len(panels) == 2 * 3
    assert [ax.get_title() for ax in panels[:3]] == ['head 0', 'head 1', 'head 2']
    assert [panels[0].get_ylabel(), panels[3].get_ylabel()] == ['layer 0', 'layer 1']
    bars = [ax for ax in fig.axes if ax.get_label() == '<colorbar>']
    assert len(bars) == 1 and 'attention weight' in bars[0].get_ylabel() and fig.get_suptitle() == 'a title'
    numbered = image_axes(plot.attention_figure([m[0] for m in maps], tokens, layers=[4, 7], heads=[0, 2, 5]))
    assert [ax.get_title() for ax in numbered[:3]] == ['head 0', 'head 2', 'head 5']
    assert [numbered[0].get_ylabel(), numbered[3].get_ylabel()] == ['layer 4', 'layer 7']
    # the numbers as a tensor or an array, as a notebook has them at hand, label the maps alike
    as_tensors = image_axes(plot.attention_figure([m[0] for m in maps], tokens, layers=torch.tensor([4, 7]),
                                                  heads=np.array([0, 2, 5])))
    assert [ax.get_title() for ax in as_tensors[:3]] == ['head 0', 'head 2', 'head 5']
    assert [as_tensors[0].get_ylabel(), as_tensors[3].get_ylabel()] == ['layer 4', 'layer 7']
    with pytest.raises(TypeError, match="'float' object cannot be interpreted as an integer"):  # was 'layer 4'
        plot.attention_figure([m[0] for m in maps], tokens, layers=[4.5, 7])
    fig.canvas.draw()  # tick labels are made when the figure is drawn
    for axis in (panels[3].xaxis, panels[3].yaxis):  # the bottom-left panel: keys along x, queries along y
        ticks = axis.get_ticklocs()
        shown = [t.get_text() for t in axis.get_ticklabels()]
        assert 10 < len(ticks) < 40 and ticks[-1] == len(tokens) - 1  # thinned, evenly, down to the last token
        assert shown == [tokens[int(t)] for t in ticks]
    assert all(t.get_rotation() == 90 for t in panels[3].get_xticklabels())


def test_the_axes_say_when_only_some_tokens_are_labelled():
    """A grid of a 57-token prompt labels every 3rd token; nothing said so, and 'R E \u21b5 t o' read as the prompt's
    first five tokens. The labels end at the last token, whose row predicts the next one (from token 0 they left it
    unlabelled)."""
    tokens = [f't{i}' for i in range(57)]
    fig = plot.attention_figure(torch.rand(2, 3, 57, 57).softmax(-1), tokens)
    fig.canvas.draw()
    ticks = image_axes(fig)[0].get_yticks()
    step = int(ticks[1] - ticks[0])
    assert step > 1 and list(ticks) == list(range(56 % step, 57, step))
    note = f'1 token in {step} labelled'
    assert note in fig.get_supxlabel() and note in fig.get_supylabel()
    one = plot.attention_figure(torch.rand(1, 1, 57, 57).softmax(-1), tokens)  # drawn large: every token labelled
    one.canvas.draw()
    assert len(image_axes(one)[0].get_yticks()) == 57 and 'labelled' not in one.get_supxlabel() + one.get_supylabel()


def test_a_long_title_fits_a_one_column_grid():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    title = 'attention in out/chargpt/model.pt, 57 tokens: "' + plot.readable('ROMEO:\nBut soft, what light ' * 2) + '"'
    fig = plot.attention_figure(torch.rand(3, 1, 9, 9).softmax(-1), list('abcdefghi'), title, [0, 1, 2], [1])
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    suptitle = next(t for t in fig.texts if t.get_text() == fig.get_suptitle())
    box = suptitle.get_window_extent(canvas.get_renderer())
    assert 0 <= box.x0 and box.x1 <= fig.bbox.x1 and '\n' in fig.get_suptitle()  # it was cut off on both sides


def test_a_title_of_wide_characters_fits_the_figure():
    """Emoji, Chinese and Japanese characters are about twice as wide as Latin ones, and Chinese and Japanese put no
    spaces between words: a title of them, wrapped as if each were Latin, ran off both sides of the figure. The
    emoji are in matplotlib's default font, so its measure of the drawn title is the reference; Japanese, which
    may have no font here, is checked in columns: each line half as many characters, none lost."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    emoji = '\U0001f600' * 150
    fig = plot.attention_figure(torch.rand(1, 1, 30, 30).softmax(-1), ['a'] * 30, title=emoji)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    suptitle = next(t for t in fig.texts if t.get_text() == fig.get_suptitle())
    box = suptitle.get_window_extent(canvas.get_renderer())
    assert 0 <= box.x0 and box.x1 <= fig.bbox.x1
    assert fig.get_suptitle().replace('\n', '')[:-1] in emoji  # its start, cut, and no character lost between
    japanese = '\u732b\u304c\u3044\u308b' * 40  # 160 characters, no space
    lines = plot.wrapped(japanese, 64)
    assert list(map(len, lines)) == [32] * 5 and ''.join(lines) == japanese
    # never inside what is drawn as one character: it was cut before a ZWJ, a skin tone, a second accent
    for one in ('\U0001f469\u200d\U0001f4bb', '\U0001f44d\U0001f3fd', 'e\u0301\u0323', '\U0001f1ef\U0001f1f5'):
        for width in range(2, 12):
            lines = plot.wrapped(one * 20, width)
            assert ''.join(lines) == one * 20 and all(lines), width
            assert all(line == one * line.count(one) for line in lines), (width, lines)


def test_a_long_prompts_title_is_cut_to_three_lines_and_leaves_the_maps_their_room():
    """A 700-token prompt's title wrapped to 40 lines over a 2 x 2 grid: matplotlib gave up its layout ('axes sizes
    collapsed to zero') and the title covered the maps. The tokens are along the axes; the title keeps three lines."""
    import warnings
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    prompt = plot.readable(TEXT[:2500])
    title = f'attention in hf, 700 tokens: "{prompt}"'
    fig = plot.attention_figure(torch.rand(2, 2, 9, 9).softmax(-1), list('abcdefghi'), title)
    lines = fig.get_suptitle().split('\n')
    assert len(lines) == 3 and lines[-1].endswith('\u2026')
    assert title.startswith(lines[0]) and lines[-1][:-1] in title  # the title's start, as it was, then the cut
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # 'constrained_layout not applied' is a warning
        FigureCanvasAgg(fig).draw()
    suptitle = next(t for t in fig.texts if t.get_text() == fig.get_suptitle())
    top = suptitle.get_window_extent().y0
    assert all(0 < ax.get_window_extent().y1 <= top and ax.get_window_extent().height > 50 for ax in image_axes(fig))
    short = plot.attention_figure(torch.rand(1, 1, 3, 3), list('abc'), 'attention in x, 3 tokens: "abc"')
    assert short.get_suptitle() == 'attention in x, 3 tokens: "abc"'  # a short title is left whole


def test_drawn_rows_sum_to_one_and_layer_0_matches_the_formula():
    model = tiny_gpt()
    idx = torch.randint(40, (1, 9))
    maps = torch.cat(model.attention_maps(idx))  # (2, 3, 9, 9)
    fig = plot.attention_figure(maps, list('abcdefghi'))
    drawn = np.ma.stack([ax.images[0].get_array() for ax in image_axes(fig)])  # (6, 9, 9), the future masked
    assert (np.ma.getmaskarray(drawn) == np.triu(np.ones((9, 9), bool), 1)).all()
    np.testing.assert_allclose(drawn.filled(0).sum(-1), 1, atol=1e-6)
    norm = image_axes(fig)[0].images[0].norm  # the colour of a weight is its square root: 0.25 is drawn half-way
    np.testing.assert_allclose(norm(np.array([0, 0.04, 0.25, 1])), [0, 0.2, 0.5, 1])
    # layer 0 by hand: softmax(q k^T / sqrt(head size)) over the past, from the first block's own weights
    h = model.transformer.h[0]
    x = h.ln_1(model.transformer.wte(idx) + model.transformer.wpe(torch.arange(9)))[0]
    q, k, _ = h.attn.c_attn(x).split(24, dim=1)
    for head in range(3):
        qh, kh = q[:, head * 8:(head + 1) * 8], k[:, head * 8:(head + 1) * 8]
        scores = (qh @ kh.T / math.sqrt(8)).masked_fill(torch.ones(9, 9).triu(1).bool(), float('-inf'))
        np.testing.assert_allclose(drawn[head].filled(0), scores.softmax(-1).detach().numpy(), atol=1e-5)


def test_one_map_is_drawn_large_with_every_token():
    tokens = list(PROMPT)
    weights = torch.rand(len(tokens), len(tokens)).tril().softmax(-1)
    fig = plot.attention_figure(weights[None, None], tokens, layers=[2], heads=[1])
    (panel,) = image_axes(fig)
    assert panel.get_title() == 'layer 2, head 1' and fig.get_figwidth() > 8
    fig.canvas.draw()
    assert [t.get_text() for t in panel.get_yticklabels()] == [plot.readable(t) for t in tokens]


def test_without_matplotlib_every_picture_says_how_to_get_it(monkeypatch):
    for name in ('matplotlib', 'matplotlib.figure', 'matplotlib.colors'):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    with pytest.raises(RuntimeError, match="drawing needs matplotlib, which is not installed: pip install"):
        plot.attention_figure(torch.rand(1, 1, 3, 3), ['a', 'b', 'c'])
    with pytest.raises(RuntimeError, match="drawing needs matplotlib"):
        plot.positions_figure(sinusoidal_positions(4, 2))


def test_a_matplotlib_that_fails_to_import_is_not_called_missing(monkeypatch):
    """A matplotlib newer than the numpy beside it raises ImportError('Matplotlib requires numpy>=1.25; you have
    1.24.4') on import: 'not installed, pip install matplotlib' sent the student to a pip that says it is."""
    real_import = __import__

    def old_numpy(name, *args, **kwargs):
        if name.startswith('matplotlib'):
            raise ImportError('Matplotlib requires numpy>=1.25; you have 1.24.4')
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr('builtins.__import__', old_numpy)
    with pytest.raises(RuntimeError, match=r"drawing needs matplotlib, which is installed but failed to import: "
                                           r"Matplotlib requires numpy>=1\.25; you have 1\.24\.4$"):
        plot.attention_figure(torch.rand(1, 1, 3, 3), ['a', 'b', 'c'])


def test_a_figure_shows_itself_in_a_notebook():
    """A notebook cell ending with a figure showed only '<Figure size 700x420 with 1 Axes>' unless %matplotlib inline
    had run: IPython draws what has a _repr_png_, and no pyplot backend had taken on a figure made without pyplot."""
    import pickle
    import struct
    fig = plot.positions_figure(sinusoidal_positions(8, 4))
    png = fig._repr_png_()
    assert png.startswith(b'\x89PNG\r\n\x1a\n')
    width, height = struct.unpack('>II', png[16:24])  # the PNG header's size: the whole figure
    assert (width, height) == (round(fig.get_figwidth() * fig.dpi), round(fig.get_figheight() * fig.dpi))
    assert pickle.loads(pickle.dumps(fig))._repr_png_().startswith(b'\x89PNG')  # still a figure one can pickle


def test_the_plot_command_reads_only_the_arguments_it_is_given(monkeypatch):
    """plot.main() in a notebook parsed the kernel's sys.argv and stopped the cell with 'unrecognized arguments: -f',
    an option nobody typed. Like every project's main, it takes its arguments as a list."""
    monkeypatch.setattr(sys, 'argv', ['ipykernel_launcher.py', '-f', '/root/.local/share/jupyter/runtime/k.json'])
    with pytest.raises(TypeError, match="argv"):
        plot.main()


def test_maps_and_tokens_must_agree():
    with pytest.raises(ValueError, match='do not fit 3 tokens: give maps \\(n_layer, n_head, T, T\\) and T tokens$'):
        plot.attention_figure(torch.rand(1, 1, 4, 4), ['a', 'b', 'c'])


def test_the_models_own_maps_of_a_batch_are_refused_naming_the_row_to_pass():
    """attention_figure(model.attention_maps(idx), tokens), a student's first try, said only 'give maps (n_layer,
    n_head, T, T)': the model's maps carry a batch dimension, which the message now names with the fix."""
    maps = [torch.rand(1, 2, 3, 3) for _ in range(2)]  # 2 layers of (B=1, n_head=2, T, T)
    with pytest.raises(ValueError, match=r"do not fit 3 tokens: give maps \(n_layer, n_head, T, T\) and T tokens: "
                                         r"GPT.attention_maps\(idx\) gives each layer's \(batch, n_head, T, T\), so "
                                         r"pass one prompt's maps, \[m\[0\] for m in maps\]$"):
        plot.attention_figure(maps, ['a', 'b', 'c'])
    pytest.importorskip('matplotlib')
    assert plot.attention_figure([m[0] for m in maps], ['a', 'b', 'c']) is not None


# ---- loss curves ----

def test_the_smoothed_train_loss_does_not_trail_a_falling_loss(tmp_path):
    """--smooth=0.9 drew a moving average that trails the loss by about 9 iterations: on a falling loss it ran above
    every raw point, and above a val loss equal to the train loss (0.13 nats above on a 200-iteration chargpt run)."""
    line = [4.0 - 0.01 * i for i in range(200)]  # a loss falling along a straight line, val loss the same
    noisy = [x + (0.1 if i % 2 else -0.1) for i, x in enumerate(line)]  # and the batches' noise about it
    records = [{'iter': i, 'loss': x, **({'val_loss': line[i]} if i % 50 == 0 else {})} for i, x in enumerate(noisy)]
    (tmp_path / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in records))
    ax = plot.loss_figure([tmp_path / 'metrics.jsonl'], smooth=0.9, labels=['run']).axes[0]
    drawn = next(line.get_ydata() for line in ax.get_lines() if line.get_label() == 'run train')
    inner = slice(50, 150)  # away from the ends, where a smoothing has only one side to average
    np.testing.assert_allclose(drawn[inner], line[inner], atol=0.02)  # on the line, the noise averaged out
    assert np.mean(np.array(plot.ema(noisy, 0.9))[inner] - line[inner]) > 0.08  # the forward average alone: 9 x 0.01
    np.testing.assert_allclose(plot.smoothed(line, 0.9)[inner], line[inner], atol=1e-3)  # the ends' pull fades as 0.9^k
    assert plot.smoothed([5.0] * 4, 0.5) == [5.0] * 4


def test_a_folder_without_metrics_names_the_runs_in_it_or_what_to_give(tmp_path):
    """`python -m mingpt.plot out/ablation`, the ablation's folder, stopped at "[Errno 2] No such file or directory:
    'out/ablation/metrics.jsonl'": its runs, one folder each, hold the metrics. The message now names them."""
    for name in ('relu', 'gpt2'):
        (tmp_path / name).mkdir()
        (tmp_path / name / 'metrics.jsonl').write_text(json.dumps({'iter': 0, 'loss': 1.0}) + '\n')
    runs = f"{tmp_path / 'gpt2'} {tmp_path / 'relu'}"  # in the order of their names
    with pytest.raises(FileNotFoundError, match=f"^{re.escape(str(tmp_path))} holds no metrics.jsonl, but runs in it "
                                                f"do: give the runs, {re.escape(runs)}$"):
        plot.loss_figure(tmp_path)
    assert plot.loss_figure([tmp_path / 'gpt2', tmp_path / 'relu']) is not None
    (tmp_path / 'empty').mkdir()  # a run that has not logged a step yet, or a folder that is no run
    with pytest.raises(FileNotFoundError, match=r"^\S+empty holds no metrics.jsonl: give a run's work_dir \(the "
                                                r"trainer writes metrics.jsonl there as a run starts\) or "
                                                r"the metrics.jsonl itself$"):
        plot.main([str(tmp_path / 'empty'), '-o', str(tmp_path / 'loss.png')])


def test_a_run_name_beyond_the_default_font_is_drawn_or_named_by_code_point(tmp_path, monkeypatch):
    """A run in a folder named in Japanese had a legend of boxes: its name, as the attention labels above."""
    without_a_font_for(monkeypatch, 0x543e)
    (tmp_path / '\u543e').mkdir()
    (tmp_path / '\u543e' / 'metrics.jsonl').write_text(json.dumps({'iter': 0, 'loss': 1.0}) + '\n')
    with pytest.warns(UserWarning, match="no installed font draws \u543e,") as caught:
        plot.plot([tmp_path / '\u543e' / 'metrics.jsonl'], tmp_path / 'loss.png')  # three calls deep in plot.py
    assert caught.pop(UserWarning).filename == __file__
    with pytest.warns(UserWarning, match="no installed font draws \u543e,"):
        fig = plot.loss_figure([tmp_path / '\u543e' / 'metrics.jsonl'], title='\u1d81')
    assert glyphs_missing_when_drawn(fig) == []
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ['\\u543e train'] and ax.get_title() == '\u1d81'
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # a newline is laid out, not a character a font lacks; a label may be a number
        fig = plot.loss_figure([tmp_path / '\u543e' / 'metrics.jsonl'], labels=[0.001], title='lr 3e-4\nvs 1e-3')
    ax = fig.axes[0]
    assert ax.get_title() == 'lr 3e-4\nvs 1e-3'
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ['0.001 train']


def test_a_font_file_that_cannot_be_read_is_passed_over(tmp_path, monkeypatch):
    """A font removed or changed since matplotlib listed it broke every picture with a character beyond the default
    font (FT_Open_Face failed), where matplotlib's own font search passes it over."""
    import dataclasses

    from matplotlib import font_manager
    (tmp_path / 'broken.ttf').write_bytes(b'not a font')
    entries = font_manager.fontManager.ttflist
    broken = dataclasses.replace(entries[0], fname=str(tmp_path / 'broken.ttf'), name='Broken Sans')
    monkeypatch.setattr(font_manager.fontManager, 'ttflist', [broken, *entries])
    plot.installed_fonts.cache_clear()
    try:
        assert 'Broken Sans' not in plot.installed_fonts() and plot.drawable(['\u1d81'])[0] == ['\u1d81']
    finally:
        plot.installed_fonts.cache_clear()


def test_a_matplotlib_older_than_3_8_is_named_with_the_fix(monkeypatch):
    """Tick labels take a list of fonts from matplotlib 3.8 on; an older one failed in the middle of a picture."""
    import matplotlib
    monkeypatch.setattr(matplotlib, '__version__', '3.7.2')
    with pytest.raises(RuntimeError, match=r"needs matplotlib 3.8 or later, not 3.7.2: pip install -U matplotlib"):
        plot.attention_figure(torch.rand(1, 1, 3, 3), ['a', 'b', 'c'])


def test_a_log_loss_axis_is_labelled_with_numbers_and_has_grid_lines(tmp_path):
    """--logy over losses from 4.2 to 2.6 labelled the axis '3 x 10^0' and '4 x 10^0', and drew no horizontal grid
    line: there is no power of ten between them to put one on."""
    (tmp_path / 'metrics.jsonl').write_text(''.join(json.dumps({'iter': i, 'loss': 4.2 - 0.008 * i}) + '\n'
                                                    for i in range(201)))
    ax = plot.loss_figure([tmp_path / 'metrics.jsonl'], logy=True).axes[0]
    ax.figure.canvas.draw()
    shown = {float(t.get_text()): t.get_position()[1] for t in ax.get_yticklabels(minor=True) if t.get_text()}
    assert {3.0, 4.0} <= set(shown) and all(value == at for value, at in shown.items())  # each number at its height
    assert all(tick.gridline.get_visible() for tick in ax.yaxis.get_minor_ticks())


def test_a_log_loss_axis_below_1_is_labelled_with_plain_numbers(tmp_path):
    """--logy labelled losses below 1 (adder, translate) '3e-01', '4e-01'."""
    path = tmp_path / 'metrics.jsonl'
    path.write_text(''.join(json.dumps({'iter': i, 'loss': 0.9 * (1 / 3) ** (i / 99)}) + '\n' for i in range(100)))
    ax = plot.loss_figure([path], logy=True).axes[0]
    ax.figure.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() + ax.get_yticklabels(minor=True) if t.get_text()]
    assert labels and all('e' not in t and float(t) <= 1 for t in labels), labels


def test_a_non_finite_loss_blanks_only_its_own_point_of_the_smoothed_curve():
    """A diverged step (loss NaN or inf) was carried by the backward pass into every point before it as well."""
    values = [4.0, 3.9, 3.8, float('nan'), 3.6, 3.5, float('inf'), 3.4]
    out = plot.smoothed(values, 0.5)
    assert [math.isfinite(o) for o in out] == [math.isfinite(v) for v in values]
    assert out[:3] == pytest.approx(plot.smoothed(values[:3], 0.5))  # each finite stretch as if smoothed alone
    assert out[4:6] == pytest.approx(plot.smoothed(values[4:6], 0.5))


def write_runs(folder, runs):
    """A metrics.jsonl per run as sentiment's finetune writes one: every step's loss, and at every second step the
    callback's dev_accuracy and dev_loss on the same line. runs: {name: the dev accuracies}; returns the folders."""
    for name, accuracies in runs.items():
        (folder / name).mkdir()
        records = [{'iter': i, 'loss': 0.7 - 0.01 * i, 'lr': 1e-3,
                    **({'dev_accuracy': accuracies[i // 2], 'dev_loss': 1 - accuracies[i // 2]} if i % 2 == 0 else {})}
                   for i in range(2 * len(accuracies) - 1)]
        (folder / name / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in records))
    return [folder / name for name in runs]


def test_a_metric_is_drawn_per_run_with_the_numbers_of_its_file(tmp_path):
    """`python -m mingpt.plot` drew only loss and val_loss, on an axis of 'nats per token': a callback's numbers
    (sentiment's dev accuracy) could be compared only by reading the JSON."""
    runs = write_runs(tmp_path, {'scratch': [0.5, 0.625, 0.75], 'pretrained': [0.5, 0.6875, 0.8125]})
    ax = plot.metric_figure(runs, 'dev_accuracy', title='SST-2 dev').axes[0]
    drawn = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()}
    in_file = {run.name: tuple(map(list, zip(*[(r['iter'], r['dev_accuracy'])
                                                for r in map(json.loads, (run / 'metrics.jsonl').open())
                                                if 'dev_accuracy' in r]))) for run in runs}
    assert drawn == in_file == {'scratch': ([0, 2, 4], [0.5, 0.625, 0.75]),
                                'pretrained': ([0, 2, 4], [0.5, 0.6875, 0.8125])}
    assert all(line.get_marker() == 'o' for line in ax.get_lines())  # a point where it was measured
    assert len({line.get_color() for line in ax.get_lines()}) == 2  # a colour per run
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ('iteration', 'dev_accuracy', 'SST-2 dev')
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ['scratch', 'pretrained']
    ax = plot.metric_figure(runs[0] / 'metrics.jsonl', 'lr', labels='a', logy=True).axes[0]  # the trainer's own
    assert list(ax.get_lines()[0].get_ydata()) == [1e-3] * 5 and ax.get_yscale() == 'log'


def test_a_metric_a_file_lacks_is_refused_naming_the_ones_it_holds(tmp_path):
    runs = write_runs(tmp_path, {'scratch': [0.5, 0.75]})
    (tmp_path / 'lm').mkdir()  # a pretraining run: its callback wrote no accuracy
    (tmp_path / 'lm' / 'metrics.jsonl').write_text(json.dumps({'iter': 0, 'loss': 9.4, 'val_loss': 9.4}) + '\n')
    with pytest.raises(ValueError, match=r"^\S+scratch/metrics.jsonl holds no 'dev_acc': its lines hold dev_accuracy, "
                                         r"dev_loss, loss, lr; draw one of those$"):
        plot.metric_figure(runs, 'dev_acc')
    with pytest.raises(ValueError, match=r"lm/metrics.jsonl holds no 'dev_accuracy': its lines hold loss, val_loss;"):
        plot.metric_figure([runs[0], tmp_path / 'lm'], 'dev_accuracy')


def test_the_plot_command_draws_a_metric_into_a_file_named_after_it(tmp_path, monkeypatch, capsys):
    runs = [str(run) for run in write_runs(tmp_path, {'scratch': [0.5, 0.75], 'pretrained': [0.5, 0.875]})]
    monkeypatch.chdir(tmp_path)
    plot.main(runs + ['--metric=dev_accuracy'])
    assert capsys.readouterr().out == 'wrote dev_accuracy.png\n'
    assert (tmp_path / 'dev_accuracy.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    drawn = []
    monkeypatch.setattr(plot, 'save', lambda fig, path, dpi=100: drawn.append((fig, path)) or path)
    plot.main(runs + ['--metric', 'dev_loss', '--labels', 'a', 'b'])
    fig, path = drawn[-1]
    ax = fig.axes[0]
    assert path == 'dev_loss.png' and ax.get_ylabel() == 'dev_loss'
    assert [(line.get_label(), list(line.get_ydata())) for line in ax.get_lines()] == [('a', [0.5, 0.25]),
                                                                                      ('b', [0.5, 0.125])]
    with pytest.raises(ValueError, match=r"^smooth=0.9 smooths the loss curves' train loss; metric='dev_loss' is "
                                         r"drawn as measured: leave smooth \(--smooth\) out$"):
        plot.main(runs + ['--metric=dev_loss', '--smooth=0.9'])
    with open(runs[0] + '/metrics.jsonl', 'a') as f:
        f.write(json.dumps({'iter': 3, 'loss': 0.6, 'eval/acc': 0.5}) + '\n')
    plot.main(runs[:1] + ['--metric=eval/acc'])
    assert drawn[-1][1] == 'eval_acc.png'  # a callback's name with a slash is not taken for a folder


# ---- positions ----


def test_cosine_similarity_of_the_sinusoidal_table_by_hand():
    n, d = 40, 16
    sim = plot.cosine_similarity(sinusoidal_positions(n, d))
    # sin(a)sin(b) + cos(a)cos(b) = cos(a - b), and each position's encoding has squared length d/2, so the
    # similarity of positions p and q is the mean over the d/2 frequencies w_i = 1/10000^(2i/d) of cos((p - q) w_i)
    w = [10000 ** (-2 * i / d) for i in range(d // 2)]
    by_hand = np.array([[sum(math.cos((p - q) * wi) for wi in w) / (d / 2) for q in range(n)] for p in range(n)])
    np.testing.assert_allclose(sim, by_hand, atol=1e-5)
    np.testing.assert_allclose(np.diag(sim), 1, atol=1e-6)
    np.testing.assert_allclose(sim, sim.T)
    table = np.random.default_rng(0).normal(size=(5, 7))  # any table: the textbook dot / (norm * norm)
    naive = [[a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) for b in table] for a in table]
    np.testing.assert_allclose(plot.cosine_similarity(table), naive)


def test_a_tables_colours_span_its_own_largest_value():
    learned = torch.randn(16, 8, dtype=torch.bfloat16) * 3  # a model's table, in bf16, of any scale
    sinusoidal, wpe = (ax.images[0] for ax in image_axes(plot.positions_figure(sinusoidal_positions(16, 8),
                                                                               learned))[:2])
    limit = learned.float().abs().max().item()
    assert wpe.get_clim() == pytest.approx((-limit, limit)) and sinusoidal.get_clim() == pytest.approx((-1, 1))
    np.testing.assert_array_equal(wpe.get_array(), learned.float().numpy())


def test_positions_figure_puts_the_tables_and_their_similarities_side_by_side():
    sinusoidal, learned = sinusoidal_positions(32, 8), torch.randn(32, 8)
    fig = plot.positions_figure(sinusoidal, learned)
    panels = image_axes(fig)
    assert [ax.get_title() for ax in panels] == ['sinusoidal table', 'learned (wpe) table',
                                                 'sinusoidal: cosine similarity', 'learned (wpe): cosine similarity']
    np.testing.assert_allclose(panels[0].images[0].get_array(), sinusoidal)
    np.testing.assert_allclose(panels[3].images[0].get_array(), plot.cosine_similarity(learned))
    assert len(image_axes(plot.positions_figure(sinusoidal))) == 2  # no learned table: one column
    wpe = torch.nn.Embedding(32, 8).weight  # a model's table as it is: a parameter that requires grad
    np.testing.assert_allclose(image_axes(plot.positions_figure(sinusoidal, wpe))[1].images[0].get_array(),
                               wpe.detach().numpy())


# ---- projects/attention.py ----

def test_attention_project_draws_a_chargpt_checkpoint(ablation_dir, tmp_path, capsys):
    attention = load_project('attention')
    model = str(ablation_dir / 'gpt2' / 'model.pt')
    attention.main([f'--model={model}', f'--prompt={PROMPT}', f'--out={tmp_path / "grid.png"}'])
    attention.main([f'--model={model}', f'--prompt={PROMPT}', '--layer=2', '--head=0', f'--out={tmp_path / "one.png"}'])
    attention.main([f'--model={model}', '--positions', f'--out={tmp_path / "positions.png"}'])
    for name in ('grid', 'one', 'positions'):
        assert (tmp_path / f'{name}.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    P = attention.get_config().plot
    P.prompt = 'F'
    assert attention.draw_attention(*load_model_and_tokenizer(model), P, 'x').get_suptitle() == \
        'attention in x, 1 token: "F"'  # not '1 tokens'
    with pytest.raises(ConfigError, match=r'plot.head=3 is out of range'):
        attention.main([f'--model={model}', '--prompt=First', '--head=3'])  # gpt-nano has heads 0, 1, 2
    with pytest.raises(ConfigError, match=r'plot.layer=3 is out of range: it must be None or an integer >= 0 and '
                                          r'<= 2'):
        attention.main([f'--model={model}', '--prompt=First', '--layer=3'])
    with pytest.raises(ConfigError, match=r"1 to 64 tokens, the model's context \(block_size\): shorten it"):
        attention.main([f'--model={model}', f'--prompt={PROMPT * 2}'])
    with pytest.raises(ConfigError, match=r"plot.prompt is 0 tokens long; it must be 1 to 64 tokens.*: give some text"):
        attention.main([f'--model={model}', '--prompt='])
    model, _ = load_model_and_tokenizer(str(ablation_dir / 'sinusoidal' / 'model.pt'))
    capsys.readouterr()
    fig = attention.draw_positions(model, 'out/ablation/sinusoidal/model.pt')
    assert len(image_axes(fig)) == 2  # the sinusoidal column alone, under a title that names no learned table
    assert 'uses sinusoidal positions: there is no learned table' in capsys.readouterr().out
    assert 'learned' not in fig.get_suptitle() and 'out/ablation/sinusoidal/model.pt' in fig.get_suptitle()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    title = next(t for t in fig.texts if t.get_text() == fig.get_suptitle())
    box = title.get_window_extent(canvas.get_renderer())
    assert 0 <= box.x0 and box.x1 <= fig.bbox.x1  # one column is narrower than the title: it was cut off both sides


def test_attention_project_names_the_prompt_a_character_model_cannot_read(ablation_dir):
    """A model trained on Japanese, drawn without --prompt, refused ' ,:?BEMOR...' without saying where they came
    from: the default prompt, which the student never typed. (The text here lacks 'R', 'O', 'M' and 'E'.)"""
    attention = load_project('attention')
    model = f'--model={ablation_dir / "gpt2" / "model.pt"}'
    with pytest.raises(ConfigError, match=r"^plot.prompt \(the default prompt, .* --prompt=\.\.\.\): characters "
                                          r"'.*EMOR.*' are not in the vocabulary"):
        attention.main([model])
    with pytest.raises(ConfigError, match=r"^plot.prompt: characters 'R' are not in the vocabulary"):
        attention.main([model, '--prompt=First R'])


def test_attention_project_draws_the_layer_and_head_asked_for(ablation_dir):
    attention = load_project('attention')
    model, tokenizer = load_model_and_tokenizer(str(ablation_dir / 'gpt2' / 'model.pt'))  # 3 layers, 3 heads
    maps = model.attention_maps(torch.tensor([tokenizer.encode('First')]))
    for layer, head, n_panels in ((None, None, 9), (1, None, 3), (None, 2, 3), (1, 2, 1)):
        P = attention.get_config().plot
        P.prompt, P.layer, P.head = 'First', layer, head
        fig = attention.draw_attention(model, tokenizer, P, 'gpt2')
        panels = image_axes(fig)
        assert len(panels) == n_panels and fig.get_suptitle() == 'attention in gpt2, 5 tokens: "First"'
        if n_panels == 1:
            assert panels[0].get_title() == 'layer 1, head 2'
            np.testing.assert_allclose(panels[0].images[0].get_array().filled(0), maps[1][0, 2], atol=1e-6)


def test_attention_project_draws_the_sinusoidal_table_beside_the_learned_one(ablation_dir, tmp_path, monkeypatch):
    attention = load_project('attention')
    model, _ = load_model_and_tokenizer(str(ablation_dir / 'gpt2' / 'model.pt'))
    panels = image_axes(attention.draw_positions(model, 'gpt2'))
    assert len(panels) == 4
    np.testing.assert_allclose(panels[0].images[0].get_array(), sinusoidal_positions(64, 48))
    np.testing.assert_allclose(panels[1].images[0].get_array(), model.transformer.wpe.weight.detach())
    monkeypatch.chdir(tmp_path)  # the default picture goes to out/, named by what it shows
    attention.main([f'--model={ablation_dir / "gpt2" / "model.pt"}', '--positions'])
    assert os.listdir(tmp_path / 'out') == ['positions.png']


def test_attention_project_draws_a_hugging_face_directory_with_its_tokenizer(tmp_path):
    encoder = train_bpe(TEXT, 300)
    encoder.save(tmp_path)  # GPT-2's files under Hugging Face's names: vocab.json and merges.txt
    os.replace(tmp_path / 'encoder.json', tmp_path / 'vocab.json')
    os.replace(tmp_path / 'vocab.bpe', tmp_path / 'merges.txt')
    config = GPT.get_default_config()
    config.merge_from_dict(dict(model_type=None, n_layer=2, n_head=2, n_embd=16, vocab_size=300, block_size=32))
    GPT(config).save_pretrained(tmp_path)
    attention = load_project('attention')
    model, tokenizer = load_model_and_tokenizer(str(tmp_path))
    assert tokenizer.encoder == encoder.encoder and model.config.n_layer == 2
    attention.main([f'--model={tmp_path}', '--prompt=Before we proceed', f'--out={tmp_path / "hf.png"}'])
    assert (tmp_path / 'hf.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    # 'é' is two byte tokens of this vocabulary (its text has no 'é'): labelled by their bytes, which tell them apart
    P = attention.get_config().plot
    P.prompt = 'Before é'
    fig = attention.draw_attention(model, tokenizer, P, 'hf')
    fig.canvas.draw()
    assert [t.get_text() for t in image_axes(fig)[0].get_yticklabels()][-3:] == ['\u2423', '\\xc3', '\\xa9']


# ---- projects/ablation.py ----

def table_rows(path):
    """The rows of an ablation's results.md, under its header and rule: {variant: [its cells, stripped]}."""
    rows = [line.split('|')[1:-1] for line in path.read_text().splitlines() if line.startswith('| ')][2:]
    return {r[0].strip(): [c.strip() for c in r] for r in rows}


def test_ablation_writes_one_row_per_variant_and_the_loss_curves(ablation_dir):
    rows = list(table_rows(ablation_dir / 'results.md').values())
    assert [r[0].strip() for r in rows] == ['gpt2', 'post-norm', 'relu', 'sinusoidal']
    params = {r[0].strip(): int(r[2].replace(',', '')) for r in rows}
    # gpt-nano, n_embd 48: sinusoidal positions drop wpe (64 x 48), post-norm drops the final layer norm (2 x 48)
    assert params['gpt2'] - params['sinusoidal'] == 64 * 48
    assert params['gpt2'] - params['post-norm'] == 2 * 48 and params['relu'] == params['gpt2']
    for variant, row, switch in zip(params, rows, [{}, {'norm': 'post'}, {'activation': 'relu'},
                                                    {'pos_embd': 'sinusoidal'}]):
        metrics = plot.read_metrics(ablation_dir / variant / 'metrics.jsonl')
        assert float(row[3]) == pytest.approx([r['val_loss'] for r in metrics if 'val_loss' in r][-1], abs=1e-4)
        assert [r['iter'] for r in metrics] == [0, 1, 2]  # the same iterations
        config = json.loads((ablation_dir / variant / 'config.json').read_text())
        assert config['system']['seed'] == 3407
        assert {k: config['model'][k] for k in ('norm', 'activation', 'pos_embd')} == {
            'norm': 'pre', 'activation': 'gelu', 'pos_embd': 'learned', **switch}
    config = json.loads((ablation_dir / 'config.json').read_text())  # the table's own options, beside it
    assert config['ablation'] == {'variants': ['gpt2', 'post-norm', 'relu', 'sinusoidal'], 'seeds': [3407]}
    assert config['trainer']['max_iters'] == 3 and (ablation_dir / 'args.txt').exists()
    png = (ablation_dir / 'loss.png').read_bytes()
    assert png[:8] == b'\x89PNG\r\n\x1a\n' and len(png) > 10_000


def test_each_ablation_run_records_the_chargpt_command_that_redoes_it(ablation_dir, tmp_path):
    """A run's args.txt is the chargpt command printed for it, not the ablation's: pasted back (in another work_dir),
    it trains the same run."""
    folder, _, (python, script, *args) = args_txt_words((ablation_dir / 'relu' / 'args.txt').read_text())
    assert (folder, python, Path(script).name) == (os.getcwd(), 'python', 'chargpt.py')
    assert f'--system.work_dir={ablation_dir / "relu"}' in args and '--model.activation=relu' in args
    load_project('chargpt').main([*args, f'--system.work_dir={tmp_path / "again"}'])
    runs = (ablation_dir / 'relu', tmp_path / 'again')
    losses = [[r['loss'] for r in plot.read_metrics(run / 'metrics.jsonl')] for run in runs]
    assert losses[0] == losses[1]


def test_ablation_refuses_what_it_would_ignore(tmp_path):
    ablation = load_project('ablation')
    for args, message in [(["--variants=('postnorm',)"], 'post-norm'),
                          (["--variants=('relu', 'relu')"], r"must not repeat one"),
                          (['--system.seed=5'], r"give --seeds=5 instead of --system.seed"),
                          # refused before the first run trains, not when its turn comes
                          (['--seeds=(1, 2.5)', '--trainer.max_iters=1'], r"ablation.seeds=2.5 is not a whole number"),
                          (['--seeds=(1, -1)', '--trainer.max_iters=1'], r"ablation.seeds=-1 is out of range"),
                          (['--sample.checkpoint=x.pt'], r"the ablation trains; to sample a run's model, use chargpt"),
                          (['--system.init=gpt2'], r"system.init='gpt2': the ablation trains a new model of each "
                                                   r"variant; to go on from a trained one, use chargpt"),
                          ([f'--trainer.work_dir={tmp_path / "x"}'],  # inside tmp_path: nothing may appear
                           r"give --system.work_dir=DIR, not --trainer.work_dir")]:
        with pytest.raises(ConfigError, match=message):
            ablation.main([f'--system.work_dir={tmp_path}', *args])
    assert not os.listdir(tmp_path)


def test_a_resumed_ablation_reads_its_finished_runs_and_starts_a_killed_one_again(ablation_dir, tmp_path):
    work = tmp_path / 'ablation'
    shutil.copytree(ablation_dir, work)
    (work / 'sinusoidal' / 'ckpt.pt').unlink()  # as if the last run was killed before its first checkpoint
    finished = (work / 'gpt2' / 'ckpt.pt').read_bytes()
    load_project('ablation').main(ablation_args(work) + ['--trainer.resume=True'])
    assert (work / 'gpt2' / 'ckpt.pt').read_bytes() == finished  # read, not trained again
    before, after = table_rows(ablation_dir / 'results.md'), table_rows(work / 'results.md')
    assert {v: row[:5] for v, row in after.items()} == {v: row[:5] for v, row in before.items()}  # same losses
    times = [row[5] for row in after.values()]
    assert times[:3] == ['-', '-', '-'] and times[3].isdigit()  # the runs read back were not timed; the last was


def test_ablation_returns_the_curves_it_wrote_a_short_one_not_smoothed_past_its_end(ablation_dir, tmp_path):
    """main returns the figure of loss.png, so that a notebook cell shows it. An average over 10 iterations would
    lift the end of a 3-iteration curve above the losses it had: each train curve is the raw losses, alone."""
    work = tmp_path / 'ablation'
    shutil.copytree(ablation_dir, work)
    (work / 'loss.png').unlink()
    fig = load_project('ablation').main(ablation_args(work) + ['--trainer.resume=True'])  # finished runs, read back
    plot.save(fig, tmp_path / 'again.png', dpi=120)
    assert (tmp_path / 'again.png').read_bytes() == (work / 'loss.png').read_bytes()  # the figure written
    ax, = fig.axes
    # the title names the seeds: with --seeds=1,2 it said 'same seed'
    assert ax.get_title() == 'ablation: chargpt gpt-nano, seeds 3407, same data and iterations'
    variants = ['gpt2', 'post-norm', 'relu', 'sinusoidal']
    assert [line.get_label() for line in ax.lines] == [f'{v} {curve}' for v in variants for curve in ('train', 'val')]
    for variant, train in zip(variants, ax.lines[::2]):  # no faint raw curve under a smoothed one
        assert list(train.get_ydata()) == [r['loss'] for r in plot.read_metrics(work / variant / 'metrics.jsonl')]


def test_ablation_without_matplotlib_stops_before_training(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, 'matplotlib.figure', None)  # as if not installed
    with pytest.raises(RuntimeError, match="drawing needs matplotlib"):
        load_project('ablation').main(ablation_args(tmp_path))
    assert not os.listdir(tmp_path)


def test_ablation_runs_pass_on_only_what_differs_from_chargpt_and_overwrite(tmp_path):
    ablation = load_project('ablation')
    config = ablation.get_config()
    config.merge_from_args([f'--system.work_dir={tmp_path}', "--variants=('gpt2', 'relu')", '--trainer.overwrite=True'])
    plan = list(ablation.runs(config))
    assert [name for _, name, _ in plan] == ['gpt2', 'relu']
    for (_, name, args), extra in zip(plan, [[], ['--model.activation=relu']]):
        assert sorted(args) == sorted([f'--system.work_dir={tmp_path / name}', '--data.block_size=64',
                                       '--model.model_type=gpt-nano', '--trainer.batch_size=32',
                                       '--trainer.checkpoint_interval=50', '--trainer.eval_interval=50',
                                       '--trainer.max_iters=500', '--trainer.overwrite=True', '--sample.length=0',
                                       *extra])
    config.ablation.seeds = (1, 2.0)  # a whole float is the integer seed chargpt takes
    assert [args[0] for _, _, args in ablation.runs(config)] == ['--system.seed=1', '--system.seed=2'] * 2


def test_a_runs_result_is_its_last_val_loss_not_its_best(tmp_path):
    """The table reports the val loss after the last iteration, as its header says: the same for every variant."""
    model = tiny_gpt()
    save_checkpoint(model_state(model), tmp_path / 'model.pt')
    records = [{'iter': 0, 'loss': 3.0, 'val_loss': 2.0}, {'iter': 1, 'loss': 2.5},
               {'iter': 2, 'loss': 2.0, 'val_loss': 1.5}, {'iter': 3, 'loss': 1.9, 'val_loss': 1.8}]
    (tmp_path / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in records))
    params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    assert load_project('ablation').result_of(tmp_path, 12.0) == {'val_loss': 1.8, 'params': params, 'seconds': 12.0}


def test_ablation_table_averages_seeds_and_compares_with_gpt2_by_hand():
    ablation = load_project('ablation')
    config = ablation.get_config()
    config.ablation.seeds = (1, 2)
    results = {'gpt2': [{'val_loss': 2.0, 'params': 1000, 'seconds': 10.0},
                        {'val_loss': 2.2, 'params': 1000, 'seconds': None}],
               'relu': [{'val_loss': 2.5, 'params': 1000, 'seconds': 30.0},
                        {'val_loss': 2.3, 'params': 1000, 'seconds': 20.0}]}
    rows = [line for line in ablation.table(config, results).splitlines() if line.startswith('| ')][2:]
    assert rows == ['| gpt2 | (GPT-2) | 1,000 | 2.1000 (2.0000 to 2.2000) |  | 10 |',
                    '| relu | activation=relu | 1,000 | 2.4000 (2.3000 to 2.5000) | +0.3000 | 25 |']  # relu is worse
