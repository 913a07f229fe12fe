"""The memory finding codes (GP510-GP522), declared as :class:`~gpuprof.codespec.CodeSpec`.

Their thresholds are options (``gpuprof memory FILE --option GP510.capacity_threshold=0.8``);
:class:`gpuprof.memory.analysis.MemoryOptions` and :class:`gpuprof.memory.diff.DiffOptions`
take their defaults from here, so each default is written once. The long
form of each code is its row in ``docs/memory.md``. Imports nothing heavy.
"""

from __future__ import annotations

from gpuprof.codespec import CodeSpec, Option
from gpuprof.findings import Severity

__all__ = ["MEMORY_CODES"]

_W, _I, _E = Severity.WARNING, Severity.INFO, Severity.ERROR


def _m(code: str, name: str, severity: Severity, title: str, bad: str, good: str, *options: Option,
       note: str = "", module: str = "gpuprof.memory.analysis", **kw: object) -> CodeSpec:
    return CodeSpec(code, name, severity, title, "memory", options=options, bad_example=bad, good_example=good,
                    docs_page="memory.md", severity_note=note, module=module, **kw)  # type: ignore[arg-type]


MEMORY_CODES: tuple[CodeSpec, ...] = (
    _m("GP510", "near-capacity", _W, "peak reserved memory is close to the device's capacity",
       """
        model = GPT(n_layer=48).cuda()
        for x, y in loader:                      # batch_size=64: 76 of 80 GB reserved at the peak
            model(x, y).backward(); opt.step(); opt.zero_grad()
       """,
       """
        for x, y in loader:                      # batch_size=32 with 2 accumulation steps
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x, y) / 2
            loss.backward()
       """,
       Option("capacity_threshold", 0.90, "warn when peak reserved is at least this share of the device memory")),
    _m("GP511", "fragmentation", _W, "reserved memory that no request can use: free but split into pieces",
       """
        for n in seq_lengths:                    # every step a different shape: blocks split differently
            out = model(torch.randn(64, n, 1024, device="cuda"))
       """,
       """
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"   # before the first CUDA call
        for n in seq_lengths:
            out = model(torch.randn(64, n, 1024, device="cuda"))
       """,
       Option("fragmentation_ratio", 0.20, "without an OOM: report free memory in split segments (fragmented, "
              "not simply cached) above this share of reserved (info)"),
       Option("fragmentation_min_bytes", 256 << 20, "ignore less fragmented free memory than this", "bytes"),
       note="warning or info"),
    _m("GP512", "out-of-memory", _E, "an allocation failed (CUDA out of memory)",
       """
        losses = []
        for x, y in loader:
            loss = model(x, y); loss.backward()
            losses.append(loss)                  # keeps every step's graph alive until CUDA runs out
       """,
       """
        losses = []
        for x, y in loader:
            loss = model(x, y); loss.backward()
            losses.append(loss.item())           # a float: the graph is freed every step
       """,
       Option("growth_spread", 0.75, "OOM advice: a site whose live blocks span this share of the history "
              "keeps references across iterations"),
       Option("growth_min_blocks", 4, "... and holds at least this many blocks")),
    _m("GP513", "record-stream-pending", _W, "freed blocks kept waiting on other streams (record_stream)",
       """
        with torch.cuda.stream(side):
            buf = big.to("cuda", non_blocking=True)
        buf.record_stream(torch.cuda.current_stream())   # its memory waits for both streams
        del buf
       """,
       """
        with torch.cuda.stream(side):
            buf = big.to("cuda", non_blocking=True)
        torch.cuda.current_stream().wait_stream(side)    # order the streams; no record_stream
        del buf
       """,
       Option("pending_share", 0.05, "warn when bytes waiting on other streams reach this share of the peak "
              "allocated (info below)"),
       Option("pending_min_bytes", 16 << 20, "ignore less waiting memory than this", "bytes"),
       note="warning or info"),
    _m("GP514", "dominant-holder", _I, "one allocation site holds most of the memory at the peak",
       """
        acts = [layer(x) for layer in model.layers]      # every layer's output kept: 70 % of the peak
       """,
       """
        for layer in model.layers:                       # or torch.utils.checkpoint per block
            x = layer(x)
       """,
       Option("holder_share", 0.50, "report the top allocation site when it holds this share of the peak")),
    _m("GP515", "history-truncated", _I, "part of the peak was allocated before the recorded history",
       """
        model = build().cuda(); opt = make_opt(model)
        torch.cuda.memory._record_memory_history()       # weights and optimizer state: sites unknown
       """,
       """
        torch.cuda.memory._record_memory_history(max_entries=100_000)
        model = build().cuda(); opt = make_opt(model)    # every allocation has its site
       """,
       Option("history_share", 0.10, "report when this share of the peak was allocated before the history")),
    _m("GP520", "site-growth", _W, "an allocation site holds more memory in B than in A (diff)",
       """
        cache = {}
        for i, (x, y) in enumerate(loader):
            cache[i] = model.encoder(x)          # grows every step: snapshot B holds more than A
       """,
       """
        for x, y in loader:
            feats = model.encoder(x)             # freed when the next step overwrites it
       """,
       Option("min_growth", 16 << 20, "report a site that grew by at least this much", "bytes"),
       Option("max_findings", 5, "GP520 findings at most (the table ranks every site)"),
       module="gpuprof.memory.diff"),
    _m("GP522", "one-time-growth", _I, "a site grew between A and B once, not per step (diff): not a leak",
       """
        out = model(x); out.sum().backward()      # snapshot A: forward and backward only
        opt.step()                                # snapshot B: Adam's state appears (2x the parameters)
       """,
       """
        opt = torch.optim.AdamW(model.parameters(), fused=True)  # the state is expected; shard or shrink it
        # (ZeRO/FSDP, 8-bit optimizers) if it does not fit, rather than hunting a leak
       """,
       module="gpuprof.memory.diff"),
    _m("GP521", "steady-growth", _W, "allocated memory grows from step to step (diff of one trace)",
       """
        total = 0
        for x, y in loader:
            loss = model(x, y); loss.backward()
            total += loss                        # a tensor: each step's graph stays referenced
       """,
       """
        total = 0.0
        for x, y in loader:
            loss = model(x, y); loss.backward()
            total += loss.item()
       """,
       Option("min_steps", 3, "profiler step ends needed to call growth steady"),
       module="gpuprof.memory.diff"),
)
