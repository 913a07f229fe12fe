"""``gpuprof try``: run the unchanged job with each suggested setting and measure what it changes (docs/try.md)."""
