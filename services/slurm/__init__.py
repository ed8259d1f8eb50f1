"""Reading a Slurm cluster through its login node: the user's jobs, their nodes, finished jobs' states and
the nodes' health. Everything runs as short commands over the pod connection (``Connection.run``); the
parsers (``parse.py``) are pure and tolerate any output.
"""
