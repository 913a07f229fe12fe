"""gpuprof's TensorBoard dashboard (``tensorboard --logdir LOGDIR``, tab *gpuprof*). See docs/tensorboard.md.

TensorBoard loads :class:`gpuprof.tbplugin.plugin.GpuprofPlugin` through the
``tensorboard_plugins`` entry point. The modules split the work:
:mod:`~gpuprof.tbplugin.runs` finds runs from file names,
:mod:`~gpuprof.tbplugin.store` runs analyses on a worker with a cache,
:mod:`~gpuprof.tbplugin.data` builds the JSON from gpuprof's analysis and
report JSON, :mod:`~gpuprof.tbplugin.page` is the inert page, and
:mod:`~gpuprof.tbplugin.plugin` the HTTP routes. Only ``plugin`` imports
TensorBoard; nothing here imports torch.
"""

PLUGIN_NAME = "gpuprof"
