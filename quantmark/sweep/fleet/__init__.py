"""Sweeps across a fleet of machines on Ray: the driver (``dispatch``), the task a node runs
(``task``) and the command that starts a node with its facts as resources (``node``).

Nothing here is imported unless a sweep names ``--cluster`` or the user runs ``run.py node``.
"""
