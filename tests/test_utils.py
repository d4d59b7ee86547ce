import json

import pytest

from mingpt.utils import CfgNode as CN, ConfigError, load_checkpoint, save_checkpoint, setup_logging


def make():
    C = CN()
    C.trainer = CN(batch_size=64, learning_rate=3e-4, betas=(0.9, 0.95), compile=False, device='auto')
    C.model = CN(model_type='gpt-mini', n_layer=None)
    return C


def test_merge_from_args_parses_literals_and_keeps_strings():
    C = make()
    C.merge_from_args(['--trainer.batch_size=32', '--trainer.learning_rate=1e-3', '--trainer.betas=(0.8, 0.9)',
                       '--trainer.compile=True', '--trainer.device=cuda:1', '--model.n_layer=4',
                       '--model.model_type=None'])
    assert C.trainer.batch_size == 32 and C.trainer.learning_rate == 1e-3
    assert C.trainer.betas == (0.8, 0.9) and C.trainer.compile is True
    assert C.trainer.device == 'cuda:1' and C.model.n_layer == 4 and C.model.model_type is None


def test_int_is_fine_for_float_and_string_default_keeps_digits():
    C = make()
    C.merge_from_args(['--trainer.learning_rate=1', '--trainer.device=123'])
    assert C.trainer.learning_rate == 1.0 and isinstance(C.trainer.learning_rate, float)
    assert C.trainer.device == '123'


def test_unknown_key_names_key_and_lists_valid_keys():
    with pytest.raises(ConfigError) as e:
        make().merge_from_args(['--trainer.bach_size=32'])
    msg = str(e.value)
    assert "trainer.bach_size" in msg and "batch_size" in msg and "learning_rate" in msg
    with pytest.raises(ConfigError, match="valid keys here are: model, trainer"):
        make().merge_from_args(['--trainr.batch_size=32'])


@pytest.mark.parametrize('arg, fragment', [
    ('--trainer.batch_size=big', "'trainer.batch_size' expects a value of type int"),
    ('--trainer.batch_size=2.5', "got 2.5"),
    ('--trainer.compile=1', "expects a value of type bool"),
    ('--trainer.betas=0.9', "expects a value of type tuple"),
])
def test_wrong_type_names_key_type_and_value(arg, fragment):
    with pytest.raises(ConfigError, match=fragment):
        make().merge_from_args([arg])


def test_space_separated_values_flags_and_unique_short_keys():
    C = make()
    C.merge_from_args(['--trainer.batch_size', '32', '--compile', '--learning_rate', '0.01', '--model_type=gpt2'])
    assert C.trainer.batch_size == 32 and C.trainer.compile is True and C.trainer.learning_rate == 0.01
    assert C.model.model_type == 'gpt2'
    C.model.batch_size = 1  # now 'batch_size' is ambiguous: the short form is an unknown key
    with pytest.raises(ConfigError, match="unknown config key 'batch_size'"):
        C.merge_from_args(['--batch_size=3'])


def test_malformed_argument_and_section_assignment():
    with pytest.raises(ConfigError, match="--section.key=value"):
        make().merge_from_args(['trainer.batch_size=32'])
    with pytest.raises(ConfigError, match="is a section"):
        make().merge_from_args(['--trainer=3'])


def test_help_prints_config_and_exits(capsys):
    with pytest.raises(SystemExit) as e:
        make().merge_from_args(['--help'])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "batch_size: 64" in out and "model_type: 'gpt-mini'" in out


def test_merge_from_dict_nested_and_checked():
    C = make()
    C.merge_from_dict({'trainer': {'batch_size': 8}})
    assert C.trainer.batch_size == 8
    with pytest.raises(ConfigError, match="trainer.nope"):
        C.merge_from_dict({'trainer': {'nope': 1}})


def test_str_and_to_dict():
    C = make()
    assert C.to_dict()['trainer']['batch_size'] == 64
    assert "trainer:\n    batch_size: 64" in str(C)


def test_setup_logging(tmp_path):
    C = CN(system=CN(work_dir=str(tmp_path / 'run')), x=CN(a=1))
    setup_logging(C)
    assert json.load(open(tmp_path / 'run' / 'config.json'))['x'] == {'a': 1}
    assert (tmp_path / 'run' / 'args.txt').exists()


def test_checkpoint_roundtrip_and_clear_errors(tmp_path):
    import torch
    path = tmp_path / 'ck.pt'
    save_checkpoint({'model': {'w': torch.ones(3)}, 'vocab': ['a', 'b']}, path)
    assert load_checkpoint(path)['vocab'] == ['a', 'b']
    assert [p.name for p in tmp_path.iterdir()] == ['ck.pt']  # no temporary file left behind
    data = path.read_bytes()
    (tmp_path / 'trunc.pt').write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError, match="truncated"):
        load_checkpoint(tmp_path / 'trunc.pt')
    torch.save({'state_dict': {}}, tmp_path / 'foreign.pt')
    with pytest.raises(ValueError, match="not a mingpt checkpoint"):
        load_checkpoint(tmp_path / 'foreign.pt')
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / 'missing.pt')
