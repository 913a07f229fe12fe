"""Start TensorBoard with gpuprof's plugin loaded programmatically (a worktree run, where the entry point is absent).

    python launch_tb.py --logdir DIR --port N [--path_prefix /p] ...   (TensorBoard's own flags)

Installed packages get the plugin through the ``tensorboard_plugins`` entry
point instead, and the tests run ``python -m tensorboard.main`` then.
"""

import sys

from tensorboard import default, program

from gpuprof.tbplugin.plugin import GpuprofPlugin


def main() -> None:
    plugins = [p for p in default.get_plugins() if getattr(p, "plugin_name", None) != "gpuprof"]
    tb = program.TensorBoard(plugins=plugins + [GpuprofPlugin])
    tb.configure(argv=[sys.argv[0], *sys.argv[1:]])
    sys.exit(tb.main())


if __name__ == "__main__":
    main()
