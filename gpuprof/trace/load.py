"""Load PyTorch profiler traces fast and in bounded memory.

The pipeline, one module per job:

* :mod:`gpuprof.trace.source`: the file's JSON text as a stream of blocks
  (plain or gzip, a file or a pipe);
* :mod:`gpuprof.trace.chunks`: the text cut into chunks of whole events;
* :mod:`gpuprof.trace.decode`: each chunk decoded by msgspec into the
  structs of :mod:`gpuprof.trace.raw`, errors made one line;
* :mod:`gpuprof.trace.normalise`: raw events made compact
  :class:`~gpuprof.trace.model.Event` records, metadata read.

The JSON text of a chunk is dropped before the next one is read, so peak
memory is one chunk plus the compact events, whatever the file size.
"""

from __future__ import annotations

import os
import sys
from typing import Union

from gpuprof.errors import InputError
from gpuprof.inputs import Opened
from gpuprof.redact import scrub
from gpuprof.remote import local_or_url
from gpuprof.trace.chunks import Progress, Text, event_chunks, read_head, read_rest
from gpuprof.trace.decode import chunk_decoder, decode_header, decode_last, decode_whole
from gpuprof.trace.model import Trace
from gpuprof.trace.normalise import Builder
from gpuprof.trace.source import Source

__all__ = ["load_trace"]


def load_trace(path: Union[str, os.PathLike[str]], progress: Progress | None = None, opened: Opened | None = None) -> Trace:
    """Load one trace file into a :class:`Trace` (events sorted by time).

    ``progress``: called with (bytes read, total bytes) as the file is read.
    ``opened``: an input already being read (a pipe whose first bytes were
    sniffed, see :func:`gpuprof.inputs.open_input`).

    Raises :class:`~gpuprof.errors.InputError` with a one-line reason for
    anything that is not a readable PyTorch profiler trace.
    """
    p = local_or_url(path)
    src = Source(p, opened)
    builder = Builder(scrub(str(p)))  # the trace's name in every report and view: a URL's secrets masked
    builder.trace.file_bytes = src.size
    try:
        _read_all(src, builder, progress)
    finally:
        src.close()
    trace = builder.finish()
    trace.json_bytes = src.text_bytes
    if trace.num_events == 0:
        raise InputError(p, "trace has no events (traceEvents is empty)")
    return trace


def _read_all(src: Source, builder: Builder, progress: Progress | None) -> None:
    buf, events_at, list_format = read_head(src)
    if events_at is None:
        # Small or odd file: decode it whole; the decoder says what is wrong.
        decode_whole(src.path, buf + read_rest(src), builder, list_format=False)
        return
    head = buf[:events_at]  # "{...,"traceEvents": [" or "["
    text = Text(buf, events_at)
    first_chunk = True
    for _ in event_chunks(src, text, chunk_decoder(src.path, builder, list_format), progress):
        if first_chunk:
            # The keys before the events (devices, rank, ...), read once the
            # first chunk has shown that the events start where they seemed to.
            top = decode_header(src.path, head, list_format)
            if top is not None:
                builder.metadata(top)
            first_chunk = False
    decode_last(src.path, head if first_chunk else None, text.rest(), builder, list_format, text.offset + text.pos)
    if progress is not None:
        progress(src.size, src.size)


if __name__ == "__main__":  # pragma: no cover - manual timing aid
    import time

    for arg in sys.argv[1:]:
        t0 = time.perf_counter()
        tr = load_trace(arg)
        print(arg, tr.num_events, tr.kept_events, f"{time.perf_counter() - t0:.2f}s")
