"""``run.py node --head | --address HEAD:6379``: this machine as a Ray node for
``run.py sweep --cluster``, its facts as the resources ``--place`` rules select."""

from __future__ import annotations

import argparse

from quantmark.sweep.fleet.ray_node import start

NAME = "node"
HELP = "start this machine as a Ray node for run.py sweep --cluster and recommend --cluster"
DESCRIPTION = ("Start this machine as a Ray node for run.py sweep --cluster and recommend "
               "--cluster, with its architecture, instruction sets, core, board and the SUTs "
               "it can run as resources that --place rules select.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--head", action="store_true", help="start the cluster's head here")
    parser.add_argument("--address", help="join the cluster whose head is HEAD:PORT")
    parser.add_argument("--port", type=int, default=6379, help="the head's port (default 6379)")
    parser.add_argument("--name", help="this node's name in reports and --place node= "
                                       "(default: the host name)")
    parser.add_argument("--no-cells", action="store_true",
                        help="coordinate only: run no cells on this machine")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the ray start command and its resources, start nothing")
    parser.add_argument("ray_args", nargs="*", metavar="-- RAY_START_ARGS",
                        help="more ray start flags after --, e.g. -- --num-gpus=1")


def main(args: argparse.Namespace) -> int:
    """Ray's exit code."""
    return start(args)
