"""The capture's growth check (GP640) tells one-time growth from a leak: the first optimizer step's state and
the first backward's gradients are one jump, not steady growth."""

from __future__ import annotations

from gpuprof.capture.config import CheckOptions
from gpuprof.capture.memory import growth_finding

MiB = 1 << 20


def test_a_one_time_jump_is_no_leak_and_steady_growth_is() -> None:
    opts = CheckOptions()
    base = 500 * MiB
    skip = opts.leak_skip_steps
    n = skip + max(opts.leak_min_steps, 8) + 4
    # steps after the first full step: +300 MiB once (Adam's state, the gradients), then flat with noise
    one_time = [base + (300 * MiB if i > skip + 1 else 0) + (i % 2) * MiB for i in range(n)]
    assert growth_finding(one_time, "cuda", opts) is None
    steady = [base + i * 8 * MiB for i in range(n)]  # 8 MiB kept every step
    f = growth_finding(steady, "cuda", opts)
    assert f is not None and f.evidence[0].extra["growth_kind"] == "steady"
    assert f.evidence[0].value == 8 * MiB
