"""Trace side: reading (``source``), cutting into chunks (``chunks``), decoding (``decode``, into
``raw``), normalising (``normalise``) and the pipeline (``load``); Kineto vocabulary (``vocab``), the
model and its payload accessors (``model``), interval maths (``intervals``) and metrics (``metrics``).
Nothing here imports torch."""
