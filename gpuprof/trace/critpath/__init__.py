"""The critical path of a step and the what-if replay (docs/critical-path.md).

``graph`` builds the dependency graph of the recorded steps from the shared
columns; ``path`` walks it back from each step's end; ``replay`` recomputes the
steps with one cause removed; ``margin`` says, where a rule's cost and the replay
disagree, which to believe. What removing each rule's cause means is the rule's
own declaration (``Rule.what_if``, :mod:`gpuprof.rules.whatif`).
"""
