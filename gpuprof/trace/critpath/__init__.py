"""The critical path of a step and the what-if replay (docs/critical-path.md).

``graph`` builds the dependency graph of the recorded steps from the shared
columns; ``path`` walks it back from each step's end; ``replay`` recomputes the
steps with one cause removed; ``whatif`` maps findings to removals.
"""
