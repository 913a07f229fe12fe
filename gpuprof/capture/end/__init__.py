"""The end of a recorded window or of the run: analyse, merge, publish, gather.

Everything here works from the frozen run object the live session builds
(:class:`gpuprof.capture.run.RunFacts`) and the session's output sinks
(:class:`gpuprof.capture.end.publish.Outputs`); nothing here imports or
touches the :class:`~gpuprof.capture.session.Profiler`.
"""
