"""One page to share: ``gpuprof analyze ... --html`` and ``gpuprof diff ... --html`` (docs/views.md, "HTML pages")."""
