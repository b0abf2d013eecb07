"""Embedding a corpus on Ray: text files in, Parquet out, SentenceEncoder in actors.

    from qkv.ray_embed import embed_corpus
    # Joins the Ray cluster of ray.init() if called before, else starts a local one.
    # One actor per CPU of the cluster, unless concurrency=N says otherwise.
    embed_corpus(["corpus/"], "embeddings/", model="models/all-MiniLM-L6-v2")

or from a shell (`python -m qkv.ray_embed --help`):

    python -m qkv.ray_embed corpus/ -o embeddings/

Ray Data reads the files (local paths, directories or any URI pyarrow
understands, e.g. s3://), splits them into lines as `qkv embed -f` does, hands
batches of lines to `concurrency` actors that each hold one qkv.SentenceEncoder,
and writes Parquet files with one row per non-blank line:

    path       string                    the file the line came from
    line       int64                     0-based index of the line in that file
                                          (blank lines are counted, not written)
    text       string                    the line, without its "\\n" (or "\\r\\n")
    embedding  fixed_size_list<float>[D] as `qkv embed` computes it

Rows are written in input order (file by file, line by line); (path, line)
identifies a row whatever reads it back. The model directory must exist at the
same path on every node of the cluster. Needs `pip install "ray[data]"`
(requirements.txt pins the tested version); qkv imports Ray only here.
"""

import argparse
import os
import pathlib
import sys
import time

import numpy as np

from ._hf_cache import resolve_model_dir
from .sentence_encoder import SentenceEncoder

__all__ = ["POOLINGS", "embed_corpus", "embed_texts", "split_lines"]

POOLINGS = ("mean", "cls", "max")

# What `qkv embed` counts as a blank line (tools/sentence_input.h): these only.
_BLANK = b" \t\v\f\r"

# Rows per Parquet file, at least: ~77 MB of 384-d float32 embeddings.
_MIN_ROWS_PER_FILE = 50_000


def split_lines(data, path="<bytes>", errors="strict"):
    """(line indices [int64], texts) of the non-blank lines of `data` (bytes),
    exactly as `qkv embed -f FILE` reads a file: lines end at "\\n" only (a
    "\\r" or U+2028 inside a line stays there), one trailing "\\r" is dropped,
    lines of spaces, tabs, "\\v", "\\f" and "\\r" only are skipped, and the
    index counts every line (0 = the first).

    The bytes must be UTF-8: with errors="strict" (the default) a line that is
    not raises ValueError naming `path`, the line and the byte; errors="replace"
    puts U+FFFD in place of the bad bytes instead.
    """
    if errors not in ("strict", "replace"):
        raise ValueError(f"split_lines(): errors must be \"strict\" or \"replace\", got {errors!r}")
    indices, texts = [], []
    for i, raw in enumerate(bytes(data).split(b"\n")):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if not raw.strip(_BLANK):
            continue
        try:
            texts.append(raw.decode("utf-8", errors))
        except UnicodeDecodeError as e:
            raise ValueError(
                f"{path}: line {i + 1} is not UTF-8: byte {e.start + 1} of the line is "
                f"{raw[e.start:e.start + 1]!r} ({e.reason}); convert the file to UTF-8 "
                f"(iconv) or pass errors=\"replace\" (--errors replace)") from None
        indices.append(i)
    return np.asarray(indices, dtype=np.int64), texts


def embed_texts(encoder, texts, batch_size=32, pooling=None, normalize=None):
    """[N, D] float32 embeddings of `texts` by `encoder` (a qkv.SentenceEncoder),
    as `qkv embed --pooling P --normalize/--no-normalize` computes them.

    pooling: "mean", "cls" (the first token) or "max" over the real tokens;
    None = the model's own (its 1_Pooling/config.json). normalize: True/False
    to L2-normalise or not; None = as the model's modules.json says.
    """
    if pooling is not None and pooling not in POOLINGS:
        raise ValueError(f"embed_texts(): pooling must be one of {list(POOLINGS)} or None, "
                         f"got {pooling!r}")
    if normalize is not None and not isinstance(normalize, (bool, np.bool_)):
        raise TypeError(f"embed_texts(): normalize must be True, False or None, got {normalize!r}")
    texts = list(texts)
    if not texts:
        return np.zeros((0, encoder.dimension), dtype=np.float32)
    pooling = encoder.pooling if pooling is None else pooling
    normalize = encoder.normalize if normalize is None else bool(normalize)
    if pooling == encoder.pooling and (normalize or not encoder.normalize):
        # The model's own path; it normalises already when its modules.json says so.
        return encoder.encode(texts, batch_size=batch_size,
                              normalize_embeddings=normalize and not encoder.normalize)
    # Another pooling, or no normalisation where the model normalises: pool the
    # last hidden state of each text's real tokens ([CLS] ... [SEP]) here.
    tokens = encoder.encode(texts, batch_size=batch_size, output_value="token_embeddings")
    if pooling == "cls":
        out = np.stack([t[0] for t in tokens]).astype(np.float64)
    elif pooling == "max":
        out = np.stack([t.max(axis=0) for t in tokens]).astype(np.float64)
    elif pooling == "mean":
        out = np.stack([t.astype(np.float64).mean(axis=0) for t in tokens])
    elif pooling == "mean_sqrt_len_tokens":  # sentence-transformers': sum / sqrt(tokens)
        out = np.stack([t.astype(np.float64).sum(axis=0) / np.sqrt(len(t)) for t in tokens])
    else:
        raise ValueError(f"embed_texts(): the model pools by {pooling!r}, which only "
                         f"normalize=None or True supports here")
    if normalize:  # as torch.nn.functional.normalize: x / max(‖x‖, 1e-12)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
    return out.astype(np.float32)


class _Embedder:
    """The actor of the embedding stage: one SentenceEncoder, loaded once."""

    def __init__(self, model_dir, precision, batch_size, threads, pooling, normalize):
        from . import runtime

        self._runtime = runtime
        self._threads = threads
        runtime.set_num_threads(threads)
        self._encoder = SentenceEncoder(model_dir, precision)
        self._batch_size = batch_size
        self._pooling = pooling
        self._normalize = normalize

    def __call__(self, batch):
        import pyarrow as pa

        # OpenMP's thread count is per calling thread: set it where the work runs.
        self._runtime.set_num_threads(self._threads)
        texts = batch.column("text").to_pylist()
        e = embed_texts(self._encoder, texts, self._batch_size, self._pooling, self._normalize)
        values = pa.array(e.reshape(-1), type=pa.float32())
        embedding = pa.FixedSizeListArray.from_arrays(values, e.shape[1])
        return batch.append_column("embedding", embedding)


def _lines_of_files(batch, errors):
    """Stage 1 (tasks): rows of files (bytes, path) -> rows of lines (path, line, text)."""
    import pyarrow as pa

    paths, lines, texts = [], [], []
    for data, path in zip(batch.column("bytes").to_pylist(), batch.column("path").to_pylist()):
        indices, file_texts = split_lines(data, path, errors)
        paths.extend([path] * len(file_texts))
        lines.append(indices)
        texts.extend(file_texts)
    line = np.concatenate(lines) if lines else np.zeros(0, dtype=np.int64)
    return pa.table({"path": pa.array(paths, type=pa.string()),
                     "line": pa.array(line, type=pa.int64()),
                     "text": pa.array(texts, type=pa.string())})


def _positive_int(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"embed_corpus(): {name} must be a positive integer, got {value!r}")
    return int(value)


def _is_uri(path):
    return "://" in str(path)


def _check_inputs(input_paths):
    """The input paths as strings; local ones must exist."""
    if isinstance(input_paths, (str, os.PathLike)):
        input_paths = [input_paths]
    paths = [os.fspath(p) for p in input_paths]
    if not paths:
        raise ValueError("embed_corpus(): input_paths is empty: give text files or directories")
    for p in paths:
        if not _is_uri(p) and not os.path.exists(p):
            raise FileNotFoundError(f"embed_corpus(): input path '{p}' does not exist")
    return [p if _is_uri(p) else os.path.abspath(p) for p in paths]


def _check_output(output_dir, overwrite):
    """The output directory as a string; a local one must be empty unless overwrite."""
    out = os.fspath(output_dir)
    if _is_uri(out):
        return out
    if os.path.exists(out) and not os.path.isdir(out):
        raise FileExistsError(f"embed_corpus(): output_dir '{out}' is a file, not a directory")
    if os.path.isdir(out) and os.listdir(out) and not overwrite:
        raise FileExistsError(f"embed_corpus(): output_dir '{out}' is not empty; pass "
                              f"overwrite=True (--overwrite) to replace what it holds")
    # Created now, so that a path under a regular file or without write
    # permission fails here and not after Ray has embedded the whole corpus.
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise type(e)(e.errno, f"embed_corpus(): cannot create output_dir '{out}': "
                      f"{e.strerror}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise PermissionError(f"embed_corpus(): output_dir '{out}' is not writable")
    return os.path.abspath(out)


def _check_capacity(ray, concurrency, threads_per_actor):
    """The number of actors: `concurrency`, or as many as the cluster holds when
    None. Refuses a pool that the cluster cannot hold: Ray would wait forever."""
    cpus = ray.cluster_resources().get("CPU", 0)
    if concurrency is None:
        concurrency = max(1, int(cpus // threads_per_actor))
    if concurrency * threads_per_actor > cpus:
        raise ValueError(f"embed_corpus(): concurrency={concurrency} actors of "
                         f"threads_per_actor={threads_per_actor} CPUs need "
                         f"{concurrency * threads_per_actor} CPUs; the Ray cluster has {cpus:g}")
    return concurrency


def embed_corpus(input_paths, output_dir, model="models/all-MiniLM-L6-v2", *, batch_size=32,
                 concurrency=None, threads_per_actor=1, normalize=None, pooling=None,
                 precision="float32", lines_per_call=1024, overwrite=False, errors="strict",
                 show_progress=True, address=None):
    """Embeds every non-blank line of the text files `input_paths` (files,
    directories of files, or URIs) with qkv.SentenceEncoder on Ray, and writes
    Parquet files (columns path, line, text, embedding; see the module's doc)
    into `output_dir` (a local directory, created; or a URI). Returns the
    number of rows written.

    model: a sentence-transformers model directory (on every node) or a
    Hugging Face id in the local cache. batch_size: texts per forward pass (as
    `qkv embed --batch-size`). concurrency: the number of actors, each with
    one encoder and `threads_per_actor` CPUs (qkv threads); None = as many as
    the cluster's CPUs hold. normalize,
    pooling: as embed_texts() (None = the model's). precision: "float32" (as
    `qkv embed`), "bfloat16" or "int8". lines_per_call: lines handed to an
    actor at a time (the encoder sorts them by length: more lines, less
    padding). overwrite: replace what output_dir holds (else it must be empty
    or absent). errors: "strict" or "replace", for lines that are not UTF-8.

    Uses the Ray cluster this process is connected to; else joins the one at
    `address` ("auto": the one `ray start` began on this machine) or, when
    None, starts a local one with every CPU, and shuts down what it started
    before returning. Raises ValueError when concurrency * threads_per_actor
    exceeds the cluster's CPUs (Ray would wait for them forever), and the
    error of the first line that fails (e.g. ValueError for one that is not
    UTF-8).
    """
    batch_size = _positive_int(batch_size, "batch_size")
    if concurrency is not None:
        concurrency = _positive_int(concurrency, "concurrency")
    threads_per_actor = _positive_int(threads_per_actor, "threads_per_actor")
    lines_per_call = _positive_int(lines_per_call, "lines_per_call")
    if pooling is not None and pooling not in POOLINGS:
        raise ValueError(f"embed_corpus(): pooling must be one of {list(POOLINGS)} or None, "
                         f"got {pooling!r}")
    if normalize is not None and not isinstance(normalize, (bool, np.bool_)):
        raise TypeError(f"embed_corpus(): normalize must be True, False or None, "
                        f"got {normalize!r}")
    if errors not in ("strict", "replace"):
        raise ValueError(f"embed_corpus(): errors must be \"strict\" or \"replace\", "
                         f"got {errors!r}")
    paths = _check_inputs(input_paths)
    out = _check_output(output_dir, overwrite)
    # The actors may start in another directory: give them an absolute path,
    # and load the model here once so that a bad one fails before Ray starts.
    model_dir = str(pathlib.Path(resolve_model_dir(model, None)).resolve())
    dimension = SentenceEncoder(model_dir, precision).dimension

    try:
        import ray
        import ray.data
    except ImportError:
        raise ImportError("qkv.ray_embed needs Ray Data: pip install \"ray[data]\" "
                          "(requirements.txt pins the tested version)") from None
    started = not ray.is_initialized()
    if started:
        # Ray would report usage statistics over the network unless told not to.
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        ray.init(address=address, include_dashboard=False)
    try:
        concurrency = _check_capacity(ray, concurrency, threads_per_actor)
        try:
            _run_pipeline(ray, paths, out, model_dir, precision, batch_size, concurrency,
                          threads_per_actor, pooling, normalize, lines_per_call, overwrite,
                          errors, show_progress)
        except Exception as e:
            # Ray wraps an error of ours in a task (a line that is not UTF-8) in
            # its own exceptions, with Ray's frames: raise ours, as it was.
            original = _our_error(e)
            if original is None:
                raise
            raise original from None
    finally:
        if started:
            ray.shutdown()
    rows = _count_rows(out)
    if rows == 0:
        _write_empty_table(out, dimension)
    return rows


def _our_error(e):
    """The ValueError, TypeError or OSError raised in a task, inside Ray's wrappers."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if type(e) in (ValueError, TypeError, FileNotFoundError, OSError):
            return e
        e = getattr(e, "cause", None) or e.__cause__
    return None


def _count_rows(out):
    """Rows in the Parquet files of `out` (0 when the corpus had no lines)."""
    import pyarrow.dataset

    try:
        return pyarrow.dataset.dataset(out, format="parquet").count_rows()
    except FileNotFoundError:
        return 0


def _schema(dimension):
    """The columns of the module's doc."""
    import pyarrow as pa

    return pa.schema([("path", pa.string()), ("line", pa.int64()), ("text", pa.string()),
                      ("embedding", pa.list_(pa.float32(), dimension))])


def _write_empty_table(out, dimension):
    """A corpus without lines still gives a Parquet file with the columns, so
    that a reader of `out` finds the schema (Ray writes no file for no rows)."""
    import pyarrow.fs
    import pyarrow.parquet as pq

    fs, root = pyarrow.fs.FileSystem.from_uri(out if _is_uri(out) else os.path.abspath(out))
    fs.create_dir(root, recursive=True)
    name, partial = f"{root}/part-empty.parquet", f"{root}/.part-empty.parquet.partial"
    pq.write_table(_schema(dimension).empty_table(), partial, filesystem=fs)
    fs.move(partial, name)  # atomic on a local file system: no half-written file


def _run_pipeline(ray, paths, out, model_dir, precision, batch_size, concurrency,
                  threads_per_actor, pooling, normalize, lines_per_call, overwrite, errors,
                  show_progress):
    """read -> split into lines -> cut into blocks -> embed in actors -> Parquet."""
    context = ray.data.DataContext.get_current()
    saved = (context.execution_options.preserve_order, context.enable_progress_bars,
             context.raise_original_map_exception)
    context.execution_options.preserve_order = True  # rows in input order
    context.enable_progress_bars = bool(show_progress)
    # A line that is not UTF-8 raises our ValueError, not Ray's UserCodeException.
    context.raise_original_map_exception = True
    try:
        ds = ray.data.read_binary_files(paths, include_paths=True)
        ds = ds.map_batches(_lines_of_files, batch_format="pyarrow", fn_kwargs={"errors": errors})
        # A file is one block; cut it so that every actor gets a share. The
        # lines are materialised (in the object store, spilled to disk when
        # large) before the actors start: a pool holding every CPU would
        # otherwise starve these 1-CPU tasks (Ray Data waits for them forever).
        ds = ds.repartition(target_num_rows_per_block=lines_per_call).materialize()
        ds = ds.map_batches(
            _Embedder, batch_size=lines_per_call, batch_format="pyarrow",
            concurrency=concurrency, num_cpus=threads_per_actor,
            fn_constructor_kwargs={"model_dir": model_dir, "precision": precision,
                                   "batch_size": batch_size, "threads": threads_per_actor,
                                   "pooling": pooling, "normalize": normalize})
        # A local output_dir was checked empty; a URI must not exist yet.
        mode = ray.data.SaveMode.OVERWRITE if overwrite else \
            ray.data.SaveMode.CREATE if _is_uri(out) else ray.data.SaveMode.APPEND
        ds.write_parquet(out, min_rows_per_file=_MIN_ROWS_PER_FILE, mode=mode,
                         ray_remote_args={"num_cpus": 0})
    finally:
        (context.execution_options.preserve_order, context.enable_progress_bars,
         context.raise_original_map_exception) = saved


def _parser():
    p = argparse.ArgumentParser(
        prog="python -m qkv.ray_embed",
        description="Embed every non-blank line of text files with qkv's SentenceEncoder "
        "on Ray (Ray Data reads the files, actors embed, Parquet files come out: one "
        "row per line with its path, line index, text and embedding). The lines and "
        "embeddings are those of `qkv embed -f FILE`.",
        epilog="Examples:\n"
        "  python -m qkv.ray_embed corpus.txt -o embeddings/   # a local Ray, every CPU\n"
        "  python -m qkv.ray_embed corpus/ -o embeddings/ --concurrency 2   # two actors\n"
        "  python -m qkv.ray_embed s3://bucket/texts/ -o s3://bucket/embeddings/ "
        "--address auto\n"
        "Read the result with pandas.read_parquet('embeddings/') or "
        "pyarrow.dataset.dataset('embeddings/'). See docs/ray.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="text files or directories of them (local paths or URIs), one text a line")
    p.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="directory for the Parquet files (must be empty, or --overwrite)")
    p.add_argument("--model", default="models/all-MiniLM-L6-v2", metavar="DIR",
                   help="sentence-transformers model directory, on every node (default: "
                   "%(default)s; scripts/fetch_model.sh fetches it)")
    p.add_argument("--batch-size", type=int, default=32, metavar="N",
                   help="texts per forward pass (default: %(default)s)")
    p.add_argument("--concurrency", type=int, metavar="N",
                   help="embedding actors (default: as many as the cluster's CPUs hold)")
    p.add_argument("--threads-per-actor", type=int, default=1, metavar="N",
                   help="CPUs (qkv threads) per actor (default: %(default)s)")
    p.add_argument("--lines-per-call", type=int, default=1024, metavar="N",
                   help="lines handed to an actor at a time (default: %(default)s)")
    p.add_argument("--pooling", choices=POOLINGS,
                   help="pool the token vectors by mean, cls or max (default: the model's)")
    norm = p.add_mutually_exclusive_group()
    norm.add_argument("--normalize", dest="normalize", action="store_true", default=None,
                      help="L2-normalise every embedding (default: as the model says)")
    norm.add_argument("--no-normalize", dest="normalize", action="store_false",
                      help="keep the pooled vectors as they are")
    p.add_argument("--precision", default="float32", choices=("float32", "bfloat16", "int8"),
                   help="arithmetic of the layers (default: %(default)s, as qkv embed)")
    p.add_argument("--errors", default="strict", choices=("strict", "replace"),
                   help="a line that is not UTF-8 stops the run (strict, the default) or "
                   "has its bad bytes replaced by U+FFFD")
    p.add_argument("--overwrite", action="store_true",
                   help="replace what the output directory holds")
    p.add_argument("--address", metavar="ADDR",
                   help="Ray cluster to join ('auto': the one `ray start` began on this "
                   "machine); default: start a local one with every CPU")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def main(argv=None):
    args = _parser().parse_args(argv)
    start = time.perf_counter()
    try:
        rows = embed_corpus(args.inputs, args.output, args.model, batch_size=args.batch_size,
                            concurrency=args.concurrency,
                            threads_per_actor=args.threads_per_actor, normalize=args.normalize,
                            pooling=args.pooling, precision=args.precision,
                            lines_per_call=args.lines_per_call, overwrite=args.overwrite,
                            errors=args.errors, show_progress=not args.quiet,
                            address=args.address)
    except (ValueError, TypeError, OSError, ImportError) as e:
        print(f"python -m qkv.ray_embed: {e}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - start
    print(f"wrote {rows} embeddings to {args.output} in {seconds:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
