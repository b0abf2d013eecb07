"""The README's examples run as they are written."""
import pathlib
import runpy

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"


def test_hello_attention_example_runs(capsys):
    runpy.run_path(str(EXAMPLES / "hello_attention.py"), run_name="__main__")
    assert "output (2, 10, 64) weights (2, 10, 10)" in capsys.readouterr().out
