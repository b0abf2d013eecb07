"""Hostile or missing model files give the right Python exception with a short
message: FileNotFoundError (an OSError) for a missing folder or file,
ValueError for JSON nested 100,000 deep or holding 1e400, never RuntimeError
or a crash."""
import pathlib
import shutil

import pytest

import qkv
import qkv.models
import qkv.text

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "all-MiniLM-L6-v2"
needs_model = pytest.mark.skipif(not (MODEL / "model.safetensors").exists(),
                                 reason="run scripts/fetch_model.sh")

DEEP = "[" * 100_000 + "]" * 100_000


def raises(kind, load, *parts):
    with pytest.raises(Exception) as info:
        load()
    error = info.value
    assert isinstance(error, kind), f"{type(error).__name__}: {error}"
    assert not isinstance(error, RuntimeError) or isinstance(error, OSError)
    message = str(error)
    assert len(message) < 500, message
    assert "json.exception" not in message, message
    for part in parts:
        assert part in message, message
    return error


def test_missing_folder_is_file_not_found(tmp_path):
    absent = tmp_path / "absent"
    raises(FileNotFoundError, lambda: qkv.SentenceEncoder(absent), "absent")
    raises(FileNotFoundError, lambda: qkv.models.BertModel.from_pretrained(absent), "absent")
    raises(FileNotFoundError, lambda: qkv.text.WordPieceTokenizer.from_json(absent / "t.json"),
           "t.json")
    raises(FileNotFoundError, lambda: qkv.models.DecoderModel.load(absent / "m.safetensors"),
           "m.safetensors")
    # A file where a folder should be: still an OSError.
    (tmp_path / "file").write_text("x")
    raises(OSError, lambda: qkv.SentenceEncoder(tmp_path / "file"), "not a directory")


def test_missing_config_is_file_not_found(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{}")
    raises(FileNotFoundError, lambda: qkv.SentenceEncoder(tmp_path), "config.json")
    raises(FileNotFoundError, lambda: qkv.models.BertModel.from_pretrained(tmp_path),
           "config.json")


def test_deeply_nested_json_is_a_value_error(tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text('{"model": ' + DEEP + "}")
    raises(ValueError, lambda: qkv.text.WordPieceTokenizer.from_json(path), "tokenizer.json",
           "64 levels")
    (tmp_path / "config.json").write_text(DEEP)
    raises(ValueError, lambda: qkv.SentenceEncoder(tmp_path), "config.json", "64 levels")
    raises(ValueError, lambda: qkv.models.DecoderModelConfig.from_json(DEEP), "64 levels")


def test_huge_numbers_are_value_errors(tmp_path):
    (tmp_path / "config.json").write_text('{"vocab_size": 1e400}')
    raises(ValueError, lambda: qkv.models.BertModel.from_pretrained(tmp_path), "config.json",
           "1e400")
    path = tmp_path / "tokenizer.json"
    path.write_text('{"truncation": {"max_length": 1e400}}')
    raises(ValueError, lambda: qkv.text.WordPieceTokenizer.from_json(path), "1e400")


@needs_model
def test_config_larger_than_the_weights_fails_fast(tmp_path):
    config = (MODEL / "config.json").read_text()
    assert '"num_hidden_layers": 6' in config
    for value in ("1000000", "1e12"):
        folder = tmp_path / value
        folder.mkdir()
        (folder / "config.json").write_text(
            config.replace('"num_hidden_layers": 6', f'"num_hidden_layers": {value}'))
        shutil.copy(MODEL / "tokenizer.json", folder / "tokenizer.json")
        (folder / "model.safetensors").symlink_to(MODEL / "model.safetensors")
        raises(ValueError, lambda: qkv.SentenceEncoder(folder), "num_hidden_layers")
