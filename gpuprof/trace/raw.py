"""The slice of the Kineto/Chrome trace JSON that gpuprof decodes.

These msgspec Structs name only the fields the analysis needs; msgspec skips
every other key at C speed, so a trace is never materialised as dicts. Field
types are lenient where real traces disagree (``tid`` is an int in current
traces and a string in 2021 ones; ``pid`` is ``"Spans"`` on marker events).

Arg names are the raw Kineto spellings; :mod:`gpuprof.trace.vocab` turns the
several spellings of one thing (``External id`` / ``external id``) into one.
"""

from __future__ import annotations

from typing import Annotated, Any, Union

import msgspec

__all__ = ["RawArgs", "RawEvent", "RawDeviceProps", "RawDistributedInfo", "RawTrace", "Id"]

# an id the analysis keeps in int64 columns (external ids, correlations, devices, streams): one beyond int64
# (no profiler writes one) is refused by the decoder, a one-line error naming the field, not an overflow later
Id = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class RawArgs(msgspec.Struct, gc=False):
    external_id: Union[Id, str, None] = msgspec.field(name="External id", default=None)
    external_id_lc: Union[Id, str, None] = msgspec.field(name="external id", default=None)
    correlation: Union[Id, str, None] = None
    device: Union[Id, str, None] = None
    stream: Union[Id, str, None] = None
    bytes: Union[int, float, None] = None
    # undecoded (msgspec.Raw, empty: absent): the normaliser decodes each distinct text once
    # (gpuprof.trace.normalise); decoding every operator's list of strings cost more than the rest
    # of its args, for a handful of distinct values
    input_type: msgspec.Raw = msgspec.field(name="Input type", default=msgspec.Raw())
    call_stack: Union[str, None] = msgspec.field(name="Call stack", default=None)
    # autograd's sequence number: written only for an operator that recorded an autograd node
    # (grad mode on, an input requiring grad). Only the key's presence is read (OP_AUTOGRAD), so
    # the value stays undecoded (empty: absent): nothing is decoded per op, and no value
    # (1e400, a string) can make the trace unreadable
    seq_nr: msgspec.Raw = msgspec.field(name="Sequence number", default=msgspec.Raw())
    # collectives (kept only for communication events, see gpuprof.trace.collectives):
    # "Input Dims" stays undecoded bytes (msgspec.Raw, pointing into the chunk: see
    # gpuprof.trace.decode), so the ops that are not collectives pay almost
    # nothing and an odd value there (1e400) never makes the trace unreadable.
    # Any: these come from strangers and only gpuprof.trace.collectives reads them, checking
    # each type there; a value of an unexpected type must not make the whole trace unreadable
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=msgspec.Raw())  # empty: absent
    # recorded FLOPs and convolution arguments (read only for ops, see Builder._op_more): undecoded, so
    # an odd value never makes the trace unreadable and ops without them pay nothing.
    # "kernel_flop": written by Inductor on a Triton kernel's launch range (torch.compile with
    # benchmark_kernel) and by torch._inductor.analysis.profile_analysis --augment_trace;
    # "Concrete Inputs": the scalar and list arguments (record_shapes, torch >= 2.1)
    kernel_flop: msgspec.Raw = msgspec.field(name="kernel_flop", default=msgspec.Raw())
    concrete_inputs: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=msgspec.Raw())
    collective_name: Any = msgspec.field(name="Collective name", default=None)
    in_msg_nelems: Any = msgspec.field(name="In msg nelems", default=None)
    out_msg_nelems: Any = msgspec.field(name="Out msg nelems", default=None)
    comm_dtype: Any = msgspec.field(name="dtype", default=None)
    group_size: Any = msgspec.field(name="Group size", default=None)
    pg_name: Any = msgspec.field(name="Process Group Name", default=None)
    # kernel launch configuration (Kineto writes them on kernel events; read for the kernel view).
    # grid and block stay undecoded (empty: absent): the normaliser decodes each distinct text once
    # (decoding two lists per kernel in place was a sixth of the decoder's time on the 200 MB benchmark
    # traces, issue 44), and, as with Input Dims, a value no decoder reads (1e400) counts as absent
    grid: msgspec.Raw = msgspec.field(default=msgspec.Raw())
    block: msgspec.Raw = msgspec.field(default=msgspec.Raw())
    registers: Union[int, float, None] = msgspec.field(name="registers per thread", default=None)
    occupancy: Union[int, float, None] = msgspec.field(name="est. achieved occupancy %", default=None)
    # [memory] instant events
    mem_bytes: Union[int, float, None] = msgspec.field(name="Bytes", default=None)
    total_allocated: Union[int, float, None] = msgspec.field(name="Total Allocated", default=None)
    total_reserved: Union[int, float, None] = msgspec.field(name="Total Reserved", default=None)
    device_id: Union[int, str, None] = msgspec.field(name="Device Id", default=None)
    device_type: Union[int, str, None] = msgspec.field(name="Device Type", default=None)
    addr: Union[int, str, None] = msgspec.field(name="Addr", default=None)
    # metadata events (ph == "M")
    name: Union[str, int, None] = None
    labels: Union[str, None] = None


class RawEvent(msgspec.Struct, gc=False):
    ph: Union[str, None] = None
    cat: Union[str, None] = None
    name: Union[str, int, float, None] = None
    pid: Union[int, str, float, None] = None
    tid: Union[int, str, float, None] = None
    ts: Union[float, None] = None
    dur: Union[float, None] = None
    args: Union[RawArgs, None] = None


class RawDeviceProps(msgspec.Struct, gc=False):
    id: Union[int, str, None] = None
    name: Union[str, None] = None
    totalGlobalMem: Union[int, float, None] = None
    computeMajor: Union[int, str, None] = None
    computeMinor: Union[int, str, None] = None
    numSms: Union[int, None] = None
    # 2021 test_resources schema ("computeProperties")
    major: Union[int, None] = None
    minor: Union[int, None] = None
    multiProcessorCount: Union[int, None] = None


class RawDistributedInfo(msgspec.Struct, gc=False):
    rank: Union[int, str, None] = None
    world_size: Union[int, str, None] = None
    backend: Union[str, None] = None


class RawTrace(msgspec.Struct, gc=False):
    traceEvents: Union[list[RawEvent], None] = None
    deviceProperties: Union[list[RawDeviceProps], None] = None
    computeProperties: Union[list[RawDeviceProps], None] = None
    distributedInfo: Union[RawDistributedInfo, None] = None
    baseTimeNanoseconds: Union[int, float, None] = None
    with_stack: Union[int, bool, None] = None
    profile_memory: Union[int, bool, None] = None
