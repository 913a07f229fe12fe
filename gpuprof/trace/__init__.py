"""Trace side: loading (``load``), Kineto vocabulary (``vocab``), the model (``model``),
interval maths (``intervals``) and metrics (``metrics``). Nothing here imports torch."""
