"""The README stays true: every project command it prints (and every one in a project's --help text) names
options that project has, and its Python examples run as written, with only the substitutions listed below."""
import ast
import json
import re
import shlex
from pathlib import Path

import pytest
import torch

from conftest import data_dir, load_project
from mingpt.utils import ConfigError

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / 'README.md').read_text()
PROJECTS = sorted(p.stem for p in (ROOT / 'projects').glob('*.py'))
# up to a backtick or a line's end; a line ending in a backslash goes on on the next
COMMAND = re.compile(r"(?:python|torchrun[^`\n]*?) projects/(\w+)\.py((?:[^`\n\\]|\\\n|\\)*)")


def commands():
    """(where, project, args) for every project command in the README and in the projects' docstrings."""
    texts = [('README.md', README)] + [(f'projects/{p}.py', load_project(p).__doc__) for p in PROJECTS]
    return [(where, m.group(1), shlex.split(m.group(2).replace('\\\n', ' '), comments=True))
            for where, text in texts for m in COMMAND.finditer(text)]


def parse(project, args):
    """The project's config after its command line, read as its main() reads it."""
    module = load_project(project)
    if project == 'sentiment':  # the stage comes first, and predict takes sentences
        return module.parse_args(args)[0]
    config = module.get_config()
    config.merge_from_args(args)
    return config


def test_the_readme_and_docstrings_print_many_commands():
    found = commands()
    assert len(found) > 50 and {project for _, project, _ in found} == set(PROJECTS)


@pytest.mark.parametrize('where, project, args', commands(), ids=lambda v: shlex.join(v) if isinstance(v, list) else v)
def test_a_printed_command_takes_these_options(where, project, args):
    if args == ['--help']:
        with pytest.raises(SystemExit) as e:
            parse(project, args)
        assert e.value.code == 0
        return
    config = parse(project, args)
    if project == 'sentiment' and args and not args[0].startswith('--'):
        assert config.system.stage == args[0]


def test_options_a_table_row_names_belong_to_its_project():
    rows = [line for line in README.splitlines() if line.startswith('| `python projects/')]
    assert len(rows) >= len(PROJECTS)
    for row in rows:
        project = COMMAND.search(row).group(1)
        config = load_project(project).get_config()
        for name in re.findall(r"`(--\w+)`", row):  # a bare name: the one option of that name, in any section
            path = config.normalize_args([name])[0][2:].split('=')[0]
            assert path in set(config._leaf_paths()), f"{project} has no option {name}"


def test_the_tour_of_the_files_names_every_module_and_project():
    tour = README.split('## A tour of the files', 1)[1]
    for path in sorted((ROOT / 'mingpt').glob('*.py')) + sorted((ROOT / 'projects').glob('*.py')):
        assert path.name in tour, f"the README's tour of the files does not name {path.parent.name}/{path.name}"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README, flags=re.S)


# what a test cannot do as printed (no internet, no minutes to spare), and what stands in for it
SUBSTITUTIONS = [
    ("train_config.max_iters = 1000", "train_config.max_iters = 3"),
    ("GPT.from_pretrained('gpt2')", "GPT.from_pretrained(GPT2_DIR)"),  # a random GPT-2 in Hugging Face's layout
    ("Engine(model, compile=True)", "Engine(model, compile=False)"),  # compiling takes half a minute on CPU
]


class Windows(torch.utils.data.Dataset):
    """Random (x, y) pairs of 128 token ids under 65, y being x shifted by one."""

    def __init__(self):
        self.data = torch.randint(65, (400,), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.data) - 128

    def __getitem__(self, i):
        return self.data[i:i + 128], self.data[i + 1:i + 129]


def test_the_readmes_python_examples_run(tmp_path, monkeypatch):
    from mingpt.model import GPT
    data_dir('gpt2', 'encoder.json')  # BPETokenizer() reads GPT-2's vocabulary from $MINGPT_DATA_DIR
    shakespeare = data_dir('tinyshakespeare', 'input.txt')
    config = GPT.get_default_config()
    config.merge_from_dict(dict(n_layer=1, n_head=2, n_embd=16, vocab_size=50257, block_size=128))
    gpt2_dir = GPT(config).save_pretrained(tmp_path / 'gpt2')
    (tmp_path / 'input.txt').write_text(shakespeare.read_text()[:100_000])  # for train_bpe's example
    monkeypatch.chdir(tmp_path)  # the examples write my-gpt2/ and my_tokenizer/ here

    code = '\n'.join(python_blocks())
    for printed, stand_in in SUBSTITUTIONS:
        assert code.count(printed) == 1, f"the README no longer says {printed!r}: update SUBSTITUTIONS"
        code = code.replace(printed, stand_in)
    x, y = Windows()[0]
    namespace = dict(train_dataset=Windows(), idx=x[None, :16], targets=y[None, :16], GPT2_DIR=gpt2_dir)
    torch.manual_seed(0)
    exec(compile(code, 'README.md', 'exec'), namespace)

    assert namespace['trainer'].iter_num == 3 and namespace['loss'].item() > 0
    assert namespace['seqs'].size(0) == 4  # beam search's beams
    # the batch of two prompts: every row continues as it would alone, and the engine gives the same tokens
    model, idx, out, lengths = (namespace[k] for k in ('model', 'idx', 'out', 'lengths'))
    assert out.shape == (2, 5 + 100) and lengths.tolist() == [5, 1] and torch.equal(namespace['fast'], out)
    for row, length in enumerate(lengths.tolist()):
        alone = model.generate(idx[row:row + 1, :length], 100)[0]
        assert torch.equal(out[row, 5:], alone[length:]), f"row {row} continues otherwise than alone"
    assert (tmp_path / 'my-gpt2' / 'model.safetensors').exists()
    assert (tmp_path / 'my_tokenizer' / 'vocab.bpe').exists()
    assert namespace['tok'].encoder.encode_and_show_work(' naïve')['parts'][0]['token_translated'] == 'ĠnaÃ¯ve'


def test_the_quickstart_pastes_into_a_laptops_shell():
    """macOS's zsh passes a '# comment' on to the command as arguments (unless setopt interactivecomments), and
    Windows' cmd.exe takes no single quotes: the Quickstart's commands hold no comment, and every pip install of an
    extra (README, docstrings, messages) double-quotes it, which every shell reads (a bare .[test] zsh globs)."""
    quickstart = README.split('## Quickstart', 1)[1].split('```bash\n', 1)[1].split('```', 1)[0]
    assert 'pip install' in quickstart and '#' not in quickstart, quickstart
    texts = [README] + [p.read_text() for folder in ('mingpt', 'projects') for p in (ROOT / folder).glob('*.py')]
    extras = [m for text in texts for m in re.findall(r"pip install [^\n`]*?-e (['\"]?\.\[\w+\]['\"]?)", text)]
    assert len(extras) >= 4 and all(re.fullmatch(r'"\.\[\w+\]"', e) for e in extras), extras


def printed_defaults():
    """(option, default) from the README's two tables of defaults: the Trainer's options, whose cell lists one
    default per option named (a default said in words, such as lr/10, is left out), and the switchable parts."""
    found = []
    for row in README.splitlines():
        cells = [c.strip() for c in row.strip('|').split(' | ')]
        if len(cells) != 3 or not cells[0].startswith('`'):
            continue
        names = re.findall(r"`([\w.]+)`", cells[0])
        if len(names) == 1 and names[0].startswith('model.'):  # a switch: its GPT-2 default opens the cell
            found.append((names[0], ast.literal_eval(re.match(r"`([^`]+)`", cells[1]).group(1))))
            continue
        defaults = [d.strip() for d in cells[1].split(',')]
        if len(defaults) != len(names):
            continue
        for name, printed in zip(names, defaults):
            if re.fullmatch(r"`\w+`", printed):  # a string
                found.append((f'trainer.{name}', printed.strip('`')))
            elif re.fullmatch(r"-?[\d.e-]+|None|True|False", printed):
                found.append((f'trainer.{name}', ast.literal_eval(printed)))
    return found


def test_the_tables_of_defaults_give_the_configs_defaults():
    from mingpt.model import GPT
    from mingpt.trainer import Trainer
    configs = dict(trainer=Trainer.get_default_config().to_dict(), model=GPT.get_default_config().to_dict())
    found = printed_defaults()
    assert len(found) >= 14, found  # both tables were found
    for option, printed in found:
        section, key = option.split('.')
        assert configs[section][key] == printed, f"the README gives {option} the default {printed!r}, the code " \
                                                 f"{configs[section][key]!r}"


def test_the_ablation_tables_parameter_counts_are_its_models():
    """The README's ablation table: each variant's 'parameters' is the size of the model that ablation.py builds for
    it with its defaults on Tiny Shakespeare's characters."""
    from mingpt.model import GPT
    ablation = load_project('ablation')
    vocab_size = len(set(data_dir('tinyshakespeare', 'input.txt').read_text()))
    table = README.split('### An ablation anyone can rerun', 1)[1].split('\n\n| variant |', 1)[1].split('\n\n', 1)[0]
    rows = [[c.strip() for c in row.strip('|').split('|')] for row in table.splitlines()[2:]]
    assert [row[0] for row in rows] == list(ablation.VARIANTS)
    for variant, _, printed, *_ in rows:
        config = ablation.get_config()
        config.merge_from_dict({'model': {'vocab_size': vocab_size, 'block_size': config.data.block_size}})
        config.merge_from_dict({'model': {k.split('.')[1]: v for k, v in ablation.VARIANTS[variant].items()}})
        assert GPT(config.model).num_parameters() == int(printed.replace(',', '')), variant


def test_a_help_text_names_the_trainer_options_its_project_refuses():
    """--help lists every trainer option with a value; one that a project always refuses (no val set: no val loss to
    evaluate) is said to be refused there, not left to read as the value it runs with."""
    found = 0
    for project in PROJECTS:
        module = load_project(project)
        source = (ROOT / 'projects' / f'{project}.py').read_text()
        for names in re.findall(r"refuse_ignored\('trainer', config\.trainer, get_config\(\)\.trainer, \(([^)]*)\)",
                                source):
            for name in re.findall(r"'(\w+)'", names):
                with pytest.raises(ConfigError, match='would do nothing here'):
                    module.main([f'--trainer.{name}=7'])
                assert f'trainer.{name}' in module.__doc__, f"{project}'s --help does not say it refuses {name}"
                found += 1
    assert found >= 4, found  # adder's and translate's eval_interval and eval_iters


def test_the_readmes_redo_of_a_notebook_run_starts_it_anew_after_a_resume():
    """The README's main(args_of(json.load(open('config.json'))) + [...]) redoes a run in another folder. A resumed
    run's config.json holds trainer.resume=True, which in a fresh folder only finds no checkpoint: args_of leaves
    it out, so the redo starts anew, for a run resumed or not."""
    import json
    from mingpt.utils import args_of
    recipe = re.search(r"`main\(mingpt\.utils\.args_of\(json\.load\(open\('config\.json'\)\)\) \+\s+(\[[^\]]*\])\)`",
                       README)
    assert recipe, "the README no longer prints the redo of a notebook run"
    for resume in (None, True):
        run = load_project('chargpt').get_config()
        run.trainer.resume = resume
        saved = json.loads(json.dumps(run.to_dict()))  # as the run's config.json reads back
        again = parse('chargpt', args_of(saved) + ast.literal_eval(recipe.group(1)))
        assert not again.trainer.resume and again.system.work_dir == 'out/again', (resume, again.trainer.resume)


def test_the_readmes_offline_stand_in_for_gpt2_is_read_as_gpt2(tmp_path, monkeypatch):
    """Offline, the README's python -c line makes the folder that its sentiment command fine-tunes in GPT-2's place:
    Hugging Face's layout, with GPT-2's vocabulary (sentiment.py refuses any other with GPT-2's tokenizer)."""
    from mingpt.model import GPT
    line = re.search(r'^python -c "(.*)"$', README, re.M)
    assert line, "the README no longer prints the stand-in for GPT-2's weights"
    folder = re.search(r"save_pretrained\('([\w-]+)'\)", line.group(1)).group(1)
    assert f'--system.init={folder} ' in README
    monkeypatch.chdir(tmp_path)
    exec(line.group(1), {})
    model = GPT.from_pretrained(folder)
    assert model.config.vocab_size == 50257 and model.config.n_layer == 3


def test_the_plot_commands_printed_run_on_runs_of_those_names(tmp_path, monkeypatch):
    """Every `python -m mingpt.plot` command of the README and of plot.py's docstring draws, once the runs it names
    exist (each with a loss, a val loss and sentiment's dev accuracy); the README names --metric with one."""
    pytest.importorskip('matplotlib')
    import glob

    from mingpt import plot
    printed = re.findall(r"python -m mingpt\.plot ([^`\n)]*)", README + plot.__doc__)
    assert any('--metric=' in command for command in printed)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(plot, 'save', lambda fig, path, dpi=100: path)  # what is drawn, not the PNG
    record = json.dumps({'iter': 0, 'loss': 1.0, 'val_loss': 1.0, 'dev_accuracy': 0.5}) + '\n'
    for command in printed:
        args = shlex.split(command)
        for before, arg in zip([None] + args, args):
            if arg.startswith('-') or before in ('-o', '--out'):
                continue
            run = Path(arg.replace('*', 'run'))  # out/ablation/*/: a run in the ablation's folder
            metrics = run if run.suffix == '.jsonl' else run / 'metrics.jsonl'
            metrics.parent.mkdir(parents=True, exist_ok=True)
            metrics.write_text(record)
        plot.main([path for arg in args for path in (sorted(glob.glob(arg)) if '*' in arg else [arg])])


def test_the_readmes_prose_lines_fit_in_120_characters():
    """A paragraph's line of 142 characters (the notebook paragraph's) wraps in an editor and in a terminal's
    `less`; commands in code blocks and table rows may run longer, as one line each is copied or read as a row."""
    long, fenced = [], False
    for number, line in enumerate(README.splitlines(), 1):
        fenced ^= line.lstrip().startswith('```')
        if not fenced and not line.lstrip().startswith(('|', '```')) and len(line) > 120:
            long.append(f"README.md:{number} ({len(line)} characters)")
    assert not long, long
