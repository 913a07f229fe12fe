"""gpuprof inside training frameworks that own the loop.

* :mod:`gpuprof.integrations.lightning`: ``GpuprofCallback`` for a Lightning ``Trainer``;
* :mod:`gpuprof.integrations.transformers`: ``GpuprofCallback`` for ``transformers.Trainer``
  (``Seq2SeqTrainer``, TRL's trainers).

Each drives the same capture as ``gpuprof.profile`` (same arguments, same files
and report) from the framework's hooks; a plain Accelerate loop uses
``gpuprof.profile`` itself. See ``docs/integrations.md``. Importing this
package imports no framework (nor torch): each module imports its own.
"""

from __future__ import annotations

__all__: list[str] = []
