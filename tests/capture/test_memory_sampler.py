"""Host RSS sampling during capture is throttled by time, and keeps each sample's step."""

from __future__ import annotations

import os
import time

import pytest

import gpuprof.capture.memory as M


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc/self/statm (Linux)")
def test_rss_sampled_at_most_every_interval(monkeypatch):
    s = M.MemorySampler(cuda=False)
    assert s.available
    for _ in range(1000):  # far faster than RSS_INTERVAL_S per step
        s.sample()
    assert s.rss_steps[0] == 0 and 1 <= len(s.rss) < 1000
    time.sleep(M.RSS_INTERVAL_S * 1.2)
    s.sample()
    assert s.rss_steps[-1] == 1000 and s.rss_by_step()[1000] > 0  # the step after a pause is sampled
    s.close()

    monkeypatch.setattr(M, "RSS_INTERVAL_S", 0.0)
    every = M.MemorySampler(cuda=False)
    for _ in range(50):
        every.sample()
    assert list(every.rss_steps) == list(range(50)) and all(v > 0 for v in every.rss)
    every.close()
