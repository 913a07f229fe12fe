"""The memory viewer page of one snapshot, built in a child process of the TensorBoard plugin.

``python -m gpuprof.tbplugin.memchild FD NAME``: reads the snapshot (or
trace) from the inherited descriptor ``FD`` (opened by the plugin inside the
logdir, see :mod:`gpuprof.tbplugin.safeopen`), names it ``NAME`` in the page
and in errors, and writes the HTML page to standard output. Bad input: one
line on standard error, exit 2.

Why a child: a snapshot is a pickle, and the C unpickler sizes its memo
table from a 4-byte index before any check runs (a 9-byte file asks for
gigabytes). ``gpuprof memory`` caps its own address space while it
unpickles (:mod:`gpuprof.memory.snapshot.safeload`), which it can do only in a
process whose only thread is its own: TensorBoard's server is not one. Here
the cap applies, and the plugin kills the child when its time budget ends,
so a hostile snapshot costs neither TensorBoard's memory nor its worker.
"""

from __future__ import annotations

import os
import sys

from gpuprof.errors import GpuprofError

__all__ = ["main"]


def main(argv: list[str]) -> int:
    from gpuprof.inputs import Opened, Prefixed
    from gpuprof.memory.analysis import MemoryOptions, analyze_memory
    from gpuprof.memory.html import build_page_data, render_html
    from gpuprof.memory.load import load_memory

    fd, name = int(argv[0]), argv[1]
    raw = os.fdopen(fd, "rb")
    try:
        head = raw.read(64)
        opened = Opened(name, Prefixed(head, raw), head, os.fstat(fd).st_size)
        data = load_memory(name, opened=opened)
        _, findings, analyses = analyze_memory(data, MemoryOptions())
        page = render_html(build_page_data(data, analyses, findings))
    except GpuprofError as err:
        print(" ".join(str(err).split()), file=sys.stderr)
        return 2
    sys.stdout.buffer.write(page.encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
