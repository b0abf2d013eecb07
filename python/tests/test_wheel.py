"""The wheel installs and works in a fresh virtual environment with only pip.

Slow (it builds the library once more, ~10 min on 2 cores), so it runs only when asked:
    QKV_TEST_WHEEL=1 pytest python/tests/test_wheel.py          # builds dist/ first
    QKV_WHEEL=dist/qkv-...whl pytest python/tests/test_wheel.py  # tests a built wheel
numpy comes from QKV_WHEEL_FIND_LINKS (a folder with a numpy wheel, for offline
runs) or is downloaded once with `pip download`; everything is then installed
with `pip install --no-index`, so nothing but the wheel and numpy is used.
"""
import os
import pathlib
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not (os.environ.get("QKV_TEST_WHEEL") == "1" or os.environ.get("QKV_WHEEL")),
    reason="slow: set QKV_TEST_WHEEL=1 (build and test) or QKV_WHEEL=path/to/qkv.whl")

# Libraries a manylinux wheel may take from the system (PEP 600's list).
SYSTEM_LIBS = ("linux-vdso", "libc.so", "libm.so", "libstdc++.so", "libgcc_s.so",
               "libpthread.so", "libdl.so", "librt.so", "ld-linux")


# What the fresh environment's commands see: no PYTHONPATH pointing at the checkout.
CLEAN_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/")}


def run(cmd, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, (f"{' '.join(map(str, cmd))} failed ({result.returncode}):\n"
                                    f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    given = os.environ.get("QKV_WHEEL")
    if given:
        path = pathlib.Path(given).resolve()
        assert path.is_file(), f"QKV_WHEEL={given} does not exist"
        return path
    dist = tmp_path_factory.mktemp("dist")
    run([str(ROOT / "scripts" / "build_wheel.sh")], cwd=ROOT,
        env={**os.environ, "PYTHON": sys.executable, "QKV_DIST": str(dist)})
    wheels = sorted(dist.glob("qkv-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    links = os.environ.get("QKV_WHEEL_FIND_LINKS")
    if not links:
        links = tmp_path_factory.mktemp("wheels")
        try:
            run([sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--no-deps",
                 f"numpy=={np.__version__}", "-d", str(links)])
        except AssertionError as error:
            pytest.skip(f"no numpy wheel: set QKV_WHEEL_FIND_LINKS to a folder with one ({error})")
    env_dir = tmp_path_factory.mktemp("venv")
    run([sys.executable, "-m", "venv", str(env_dir)])
    python = env_dir / "bin" / "python"
    run([str(python), "-m", "pip", "install", "--no-index", "--find-links", str(links),
         "--disable-pip-version-check", str(wheel), "numpy"], env=CLEAN_ENV)
    return python


def test_the_wheel_carries_license_stubs_and_its_libraries(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE")
               for n in names), names
    assert "qkv/py.typed" in names and "qkv/_core.pyi" in names
    assert sum(n.startswith("qkv/_core.") and n.endswith(".so") for n in names) == 1
    bundled = [n for n in names if n.startswith("qkv.libs/")]
    assert any("openblas" in n for n in bundled), bundled
    assert "manylinux" in wheel.name
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "License-Expression: MIT" in text or "License: MIT" in text


def test_core_needs_only_system_libraries(venv):
    core = run([str(venv), "-c", "import qkv._core as c; print(c.__file__)"], cwd="/",
               env=CLEAN_ENV).strip()
    unresolved, foreign = [], []
    for line in run(["ldd", core], env=CLEAN_ENV).splitlines():
        name = line.split()[0]
        if "not found" in line:
            unresolved.append(name)
        elif "=>" in line and not name.startswith(SYSTEM_LIBS) and "qkv.libs" not in line:
            foreign.append(line.strip())
    assert not unresolved, unresolved
    assert not foreign, f"libraries from the system that the wheel should carry: {foreign}"


def test_sdpa_and_modules_in_the_fresh_environment(venv):
    script = textwrap.dedent("""
        import numpy as np, qkv
        rng = np.random.default_rng(0)
        q, k, v = (rng.standard_normal((2, 3, 5, 8)).astype(np.float32) for _ in range(3))
        out = qkv.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        s = q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2) / np.sqrt(8)
        s = np.where(np.tril(np.ones((5, 5), bool)), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
        assert np.abs(out - p @ v).max() < 1e-5, np.abs(out - p @ v).max()
        mha = qkv.nn.MultiheadAttention(16, 4, batch_first=True).eval()
        y, w = mha(*(rng.standard_normal((2, 5, 16)).astype(np.float32),) * 3)
        assert y.shape == (2, 5, 16) and w.shape == (2, 5, 5)
        print("kernel", qkv.runtime.last_sdpa_kernel(), "file", qkv.__file__)
    """)
    printed = run([str(venv), "-c", script], cwd="/", env=CLEAN_ENV)
    assert "site-packages" in printed  # the installed copy, not the checkout


def test_sentence_encoder_in_the_fresh_environment(venv):
    model = ROOT / "models" / "all-MiniLM-L6-v2"
    if not model.is_dir():
        pytest.skip("models/all-MiniLM-L6-v2 is missing; scripts/setup.sh fetches it")
    script = textwrap.dedent(f"""
        import numpy as np, qkv
        e = qkv.SentenceEncoder({str(model)!r}).encode(
            ["Zhang San works in Hangzhou.", "Who works in Hangzhou? Zhang San does.",
             "The cat sleeps on the sofa."])
        assert e.shape == (3, 384), e.shape
        assert np.allclose(np.linalg.norm(e, axis=1), 1, atol=1e-5)
        assert e[0] @ e[1] > e[0] @ e[2] + 0.2, (e[0] @ e[1], e[0] @ e[2])
        print("ok")
    """)
    assert "ok" in run([str(venv), "-c", script], cwd="/", env=CLEAN_ENV)


def test_the_wheel_puts_the_qkv_command_on_path(venv):
    # The console script runs the tool the wheel carries, with its bundled libraries.
    qkv = venv.parent / "qkv"
    assert qkv.is_file(), "the wheel installed no `qkv` script"
    version = run([str(qkv), "--version"], env=CLEAN_ENV)
    assert "0.1.0" in version, version
    listed = run([str(qkv), "bench", "--list"], env=CLEAN_ENV)
    assert "sdpa/fwd" in listed, listed
    # `qkv serve` runs the qkv-serve executable the wheel carries beside qkv.
    serve_help = run([str(qkv), "serve", "--help"], env=CLEAN_ENV)
    assert "--parallel" in serve_help, serve_help
