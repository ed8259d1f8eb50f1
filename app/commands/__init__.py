"""Headless subcommands, one module each (``probe.py``, ...), discovered by ``app.cli``.

A command module defines ``register(subparsers)``, which adds its parser and sets
``func=run`` where ``run(args) -> int`` returns the exit code. Keep module-level imports light
(argparse, the standard library): heavy ones belong inside ``run`` so ``--help`` and the TUI start fast.
Modules whose name starts with ``_`` are helpers, not commands.
"""
