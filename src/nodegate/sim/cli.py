"""``nodegate sim``: build the simulator, list scenarios and faults, run a command on a board.

Module level imports argparse only (the CLI registry contract); the handlers import the rest.
"""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sim",
        help="simulated GPU node (NVML library, scenarios, faults)",
        description="Run commands against a simulated GPU board: a libnvidia-ml.so.1 that the "
        "real pynvml loads, driven by a scenario plus faults.",
    )
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])
    sub = parser.add_subparsers(dest="sim_command", metavar="SUBCOMMAND")

    p_build = sub.add_parser("build", help="compile libnvidia-ml.so.1 into the cache")
    p_build.add_argument("--force", action="store_true", help="rebuild even if cached")
    p_build.set_defaults(func=cmd_build)

    p_list = sub.add_parser("scenarios", help="list shipped scenarios and the fault catalog")
    p_list.set_defaults(func=cmd_scenarios)

    p_run = sub.add_parser(
        "run",
        help="run CMD with the simulated board active",
        description="SPEC is scenario[+fault@target...] (e.g. h100-hgx+nvlink-down@gpu3.link5"
        "+xid79@gpu6) or a path to a scenario YAML.",
    )
    p_run.add_argument("spec", metavar="SPEC", help="scenario[+fault@target...] or a "
                       "scenario YAML file")
    p_run.add_argument("--state-dir", help="keep the board state here instead of a temp dir")
    p_run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                       help="the command to run with the board active, after --")
    p_run.set_defaults(func=cmd_run)

    p_env = sub.add_parser("env", help="prepare a board in DIR and print its env as shell lines")
    p_env.add_argument("spec", metavar="SPEC", help="scenario[+fault@target...] or a "
                       "scenario YAML file")
    p_env.add_argument("state_dir", metavar="DIR", help="where the board state is kept")
    p_env.set_defaults(func=cmd_env)

    p_imp = sub.add_parser("import", help="turn an `nvidia-smi -q -x` capture into a scenario")
    p_imp.add_argument("capture", metavar="CAPTURE.xml",
                       help="the output of `nvidia-smi -q -x` on a real node")
    p_imp.add_argument("-o", "--output", required=True, metavar="SCENARIO.yaml",
                       help="the scenario file to write (required)")
    p_imp.add_argument("--name", help="scenario name (default: from the output file name)")
    p_imp.add_argument("--allow-partial", action="store_true",
                       help="import a capture listing fewer <gpu> elements than attached_gpus")
    p_imp.set_defaults(func=cmd_import)


def cmd_build(args: argparse.Namespace) -> int:
    from nodegate.sim.build import LIBRARY_NAME, ensure_built

    print(ensure_built(force=args.force) / LIBRARY_NAME)
    return 0


def cmd_scenarios(args: argparse.Namespace) -> int:
    from nodegate.sim import faults, scenario

    print("scenarios:")
    for name, path in scenario.shipped().items():
        board = scenario.load_file(path)
        print(f"  {name:<22} {board.get('description', '')}")
    print("faults:")
    for fault in faults.CATALOG.values():
        print(f"  {fault.usage():<28} {fault.description}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    import os
    import subprocess
    import tempfile
    from pathlib import Path

    from nodegate.errors import ConfigError
    from nodegate.sim.runtime import prepare

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise ConfigError("nothing to run: nodegate sim run SPEC -- CMD ARGS...", key="CMD")

    def run_in(state_dir: Path) -> int:
        env = dict(os.environ)
        env.update(prepare(args.spec, state_dir))
        try:
            return subprocess.run(cmd, env=env, check=False).returncode
        except FileNotFoundError as exc:
            raise ConfigError(f"command not found: {cmd[0]}", key="CMD") from exc

    if args.state_dir:
        return run_in(Path(args.state_dir))
    with tempfile.TemporaryDirectory(prefix="nodegate-sim-") as tmp:
        return run_in(Path(tmp))


def cmd_env(args: argparse.Namespace) -> int:
    import shlex
    from pathlib import Path

    from nodegate.sim.runtime import prepare

    for key, value in prepare(args.spec, Path(args.state_dir)).items():
        print(f"export {key}={shlex.quote(value)}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from pathlib import Path

    from nodegate.sim.capture import import_capture

    out = Path(args.output)
    name = args.name or out.stem
    import_capture(Path(args.capture), out, name=name, allow_partial=args.allow_partial)
    print(f"wrote {out}")
    return 0
