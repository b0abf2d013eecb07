"""GGUF block types: qkv's dequantization equals the `gguf` package's
(gguf.quants.dequantize, llama.cpp's own Python reader) bit for bit.

Two routes of qkv are held to it: the reference (qkv::dequantize_row, which
GgufFile::load and load_gguf(exact=True) read) and the active kernel table
(QuantizedWeight::dequantize, the weights the quantized linear layers use).
On the real Gemma 3 270M Q4_K_M file: whole tensors of each type it holds
(Q5_0, Q4_K, Q6_K, Q8_0) in two layers, and the first rows of every
quantized tensor. On a file written here: each supported block type the
Gemma file lacks as well, quantized by gguf.quants.quantize where the
package can, else random blocks with random finite fp16 scales (signs,
subnormals and zeros included).
"""

import pathlib
import struct

import numpy as np
import pytest

from qkv import _core

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType

GEMMA3_GGUF = pathlib.Path(__file__).resolve().parents[2] / "models" / "gemma-3-270m-q4_k_m.gguf"
needs_gemma3 = pytest.mark.skipif(
    not GEMMA3_GGUF.exists(),
    reason=f"{GEMMA3_GGUF} is missing: run scripts/fetch_model.sh to fetch Gemma 3 270M")

SUPPORTED = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_NL]
ROUTES = [False, True]  # kernels=False: the reference; True: the active kernel table


def assert_bit_equal(ours, ref, what):
    assert ours.dtype == np.float32 and ours.shape == ref.shape, (what, ours.shape, ref.shape)
    bits, ref_bits = ours.view(np.uint32), ref.astype(np.float32).view(np.uint32)
    differ = np.flatnonzero(bits != ref_bits)
    assert differ.size == 0, (f"{what}: {differ.size} of {bits.size} weights differ, first at "
                              f"{differ[0]}: {ours.ravel()[differ[0]]!r} vs "
                              f"{ref.ravel()[differ[0]]!r}")


class Tensor:
    """One tensor of a GGUF file: name, ggml type, ggml dims, its blocks as uint8 rows."""

    def __init__(self, name, tensor_type, shape, data):
        self.name, self.tensor_type, self.shape, self.data = name, tensor_type, shape, data


def read_tensors(path):
    """The tensors of a GGUF file (v2/v3, little-endian), read here rather than by
    gguf.GGUFReader, which takes most of a minute on Gemma's 262,144-token vocabulary."""
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    buf = memoryview(raw)
    pos = 0

    def take(fmt):
        nonlocal pos
        values = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return values if len(values) > 1 else values[0]

    def string():
        nonlocal pos
        n = take("Q")
        pos += n
        return bytes(buf[pos - n:pos]).decode()

    sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
             12: "d"}

    def value(kind):
        if kind == 8:
            return string()
        if kind == 9:
            element, count = take("IQ")
            if element in sizes:
                return take(f"{count}{sizes[element]}") if count else ()
            return [value(element) for _ in range(count)]
        return take(sizes[kind])

    assert take("I") == 0x46554747, "not a GGUF file"
    version, n_tensors, n_kv = take("IQQ")
    assert version in (2, 3)
    metadata = {}
    for _ in range(n_kv):
        key = string()
        metadata[key] = value(take("I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        dims = take(f"{take('I')}Q")
        dims = list(dims) if isinstance(dims, tuple) else [dims]
        infos.append((name, dims, gguf.GGMLQuantizationType(take("I")), take("Q")))
    alignment = metadata.get("general.alignment", 32)
    start = (pos + alignment - 1) // alignment * alignment
    tensors = []
    for name, dims, qtype, offset in infos:
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        rows = int(np.prod(dims[1:], dtype=np.int64))
        row_bytes = dims[0] // block * size
        data = raw[start + offset:start + offset + rows * row_bytes].reshape(rows, row_bytes)
        tensors.append(Tensor(name, qtype, dims, data))
    return tensors


@pytest.fixture(scope="module")
def gemma3():
    if not GEMMA3_GGUF.exists():
        pytest.skip(f"{GEMMA3_GGUF} is missing")
    return read_tensors(GEMMA3_GGUF)


@needs_gemma3
def test_gemma3_holds_the_types_it_should(gemma3):
    types = {t.tensor_type for t in gemma3}
    assert types == {Q.F32, Q.Q5_0, Q.Q4_K, Q.Q6_K, Q.Q8_0}


@needs_gemma3
@pytest.mark.parametrize("kernels", ROUTES)
def test_gemma3_whole_tensors(gemma3, kernels):
    seen = set()
    for t in gemma3:
        if t.tensor_type == Q.F32 or not t.name.startswith(("blk.0.", "blk.17.")):
            continue
        seen.add(t.tensor_type)
        ours = _core.gguf_dequantize(str(GEMMA3_GGUF), t.name, kernels)
        ref = gguf.quants.dequantize(t.data, t.tensor_type)
        assert_bit_equal(ours, ref, f"{t.name} ({t.tensor_type.name}, kernels={kernels})")
    assert seen == {Q.Q5_0, Q.Q4_K, Q.Q6_K, Q.Q8_0}


@needs_gemma3
@pytest.mark.parametrize("kernels", ROUTES)
def test_gemma3_first_rows_of_every_tensor(gemma3, kernels):
    rows = 16
    for t in gemma3:
        if t.tensor_type == Q.F32:
            continue
        blocks = np.ascontiguousarray(t.data[:rows])
        cols = int(t.shape[0])
        ours = _core.dequantize_blocks(int(t.tensor_type), blocks.tobytes(), blocks.shape[0],
                                       cols, kernels)
        ref = gguf.quants.dequantize(blocks, t.tensor_type)
        assert_bit_equal(ours, ref, f"{t.name} ({t.tensor_type.name}, kernels={kernels})")


def random_half_scales(rng, count, signed):
    """fp16 scales: mostly normal (2^-14 .. 2^-2), some subnormal, some zero."""
    values = np.ldexp(rng.uniform(1.0, 2.0, count), rng.integers(-14, -1, count))
    kind = rng.random(count)
    values[kind < 0.1] = 0.0
    subnormal = (kind >= 0.1) & (kind < 0.2)
    values[subnormal] = rng.integers(1, 1024, int(subnormal.sum())) * 2.0**-24
    if signed:
        values *= rng.choice([-1.0, 1.0], count)
    halves = values.astype(np.float16)
    assert np.all(np.isfinite(halves))
    return halves.view(np.uint8).reshape(count, 2)


# Byte offsets of each block's fp16 scales: (offset, signed).
SCALES = {Q.Q4_0: [(0, True)], Q.Q4_1: [(0, True), (2, True)], Q.Q5_0: [(0, True)],
          Q.Q5_1: [(0, True), (2, True)], Q.Q8_0: [(0, True)], Q.Q4_K: [(0, False), (2, False)],
          Q.Q5_K: [(0, False), (2, False)], Q.Q6_K: [(208, True)], Q.IQ4_NL: [(0, True)]}


def random_blocks(rng, qtype, rows, cols):
    """Random bytes, with random finite fp16 scales where the format has them."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    count = rows * cols // block
    b = rng.integers(0, 256, (count, size), dtype=np.uint8)
    for offset, signed in SCALES[qtype]:
        b[:, offset:offset + 2] = random_half_scales(rng, count, signed)
    return b.reshape(rows, cols // block * size)


def synthetic(rng, qtype, rows, cols):
    """Blocks of `qtype`: gguf.quants.quantize of awkward floats where the package can."""
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x[0] = 0.0  # an all-zero row (d = 0)
    x[1] = 0.5  # a constant row
    x[2] *= 1e-6  # small values (subnormal fp16 scales)
    x[3] = np.round(x[3] * 4) / 4
    try:
        return gguf.quants.quantize(x, qtype), "quantized"
    except NotImplementedError:
        return random_blocks(rng, qtype, rows, cols), "random"


@pytest.fixture(scope="module")
def synthetic_file(tmp_path_factory):
    """A GGUF file with, per supported type, a quantized tensor and a random-block tensor."""
    rng = np.random.default_rng(39)
    rows, cols = 12, 512
    path = tmp_path_factory.mktemp("blocks") / "blocks.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    tensors = {}
    for qtype in SUPPORTED:
        for name, blocks in [(f"{qtype.name}.synthetic", synthetic(rng, qtype, rows, cols)[0]),
                             (f"{qtype.name}.random", random_blocks(rng, qtype, rows, cols))]:
            w.add_tensor(name, blocks, raw_dtype=qtype)
            tensors[name] = (qtype, blocks)
    w.add_tensor("unsupported", random_blocks_q2_k(rng), raw_dtype=Q.Q2_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, tensors


def random_blocks_q2_k(rng):
    return rng.integers(0, 256, (2, 84), dtype=np.uint8)


@pytest.mark.parametrize("kernels", ROUTES)
@pytest.mark.parametrize("qtype", SUPPORTED, ids=lambda q: q.name)
def test_synthetic_blocks_of_each_type(synthetic_file, qtype, kernels):
    path, tensors = synthetic_file
    for kind in ["synthetic", "random"]:
        name = f"{qtype.name}.{kind}"
        blocks = tensors[name][1]
        ref = gguf.quants.dequantize(blocks, qtype)
        assert_bit_equal(_core.gguf_dequantize(str(path), name, kernels), ref,
                         f"{name} from the file, kernels={kernels}")
        ours = _core.dequantize_blocks(int(qtype), blocks.tobytes(), blocks.shape[0],
                                       ref.shape[1], kernels)
        assert_bit_equal(ours, ref, f"{name} as bytes, kernels={kernels}")


def test_the_synthetic_blocks_reach_what_they_should(synthetic_file):
    # Q5_0's q = 16 with d < 0 gives −0: the sign of zero is compared too.
    _, tensors = synthetic_file
    ref = gguf.quants.dequantize(tensors["Q5_0.random"][1], Q.Q5_0)
    assert np.any((ref == 0) & np.signbit(ref))
    # gguf 0.19 quantizes the legacy types; the others are random blocks.
    assert synthetic(np.random.default_rng(0), Q.Q5_1, 4, 32)[1] == "quantized"


def test_unsupported_type_is_refused_by_name(synthetic_file):
    path, _ = synthetic_file
    with pytest.raises(TypeError) as e:
        _core.gguf_dequantize(str(path), "unsupported")
    message = str(e.value)
    for part in ['tensor "unsupported" is Q2_K', "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K "
                 "and IQ4_NL only"]:
        assert part in message, message
    with pytest.raises(ValueError, match="ggml type 10 is not a supported block format"):
        _core.dequantize_blocks(int(Q.Q2_K), bytes(84), 1, 256)
    with pytest.raises(ValueError, match="Q5_K weight is 1 rows x 1 blocks x 176 bytes"):
        _core.dequantize_blocks(int(Q.Q5_K), bytes(175), 1, 256)
