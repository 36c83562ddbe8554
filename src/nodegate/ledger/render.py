"""Text views of the ledger's answers (``queries``); ``--json`` prints the dicts as they are."""

from __future__ import annotations

from typing import Any


def _verdicts(counts: dict[str, int]) -> str:
    return ", ".join(f"{count} {verdict}" for verdict, count in sorted(counts.items())) or "none"


def _failure(item: dict[str, Any]) -> str:
    return (f"    {item['finished_at']} {item['host']} {item['level']}: {item['check']}"
            f"[{item['entity']}] {item['verdict']} (measured {item['measured']}, threshold "
            f"{item['threshold']})")


def gpu_text(data: dict[str, Any]) -> str:
    lines = [f"GPU {data['serial']} (uuid {data['uuid'] or '-'}): "
             f"{len(data['hosts'])} host(s), {data['runs']['count']} run(s) "
             f"({_verdicts(data['runs']['verdicts'])})", "  placements:"]
    lines += [f"    {p['from']} .. {p['to']}  {p['host']} {p['slot']} bus {p['bus_id'] or '-'}"
              f" (machine {p['machine']})" for p in data["placements"]]
    lines.append(f"  failures ({len(data['failures'])} shown):")
    lines += [_failure(item) for item in data["failures"]]
    lines.append(f"  remediations: {len(data['remediations'])}")
    lines += [f"    {e['at']} {e['detail'].get('action')} -> {e['detail'].get('outcome')}"
              for e in data["remediations"]]
    lines.append(f"  RMA: {len(data['rma'])}")
    lines += [f"    {e['at']} {e['detail'].get('reason')}" for e in data["rma"]]
    return "\n".join(lines)


def node_text(data: dict[str, Any]) -> str:
    lines = [f"Node {data['name']}: {len(data['machines'])} machine(s)"]
    for machine in data["machines"]:
        names = ", ".join(f"{n['name']} ({n['from']} .. {n['to']})" for n in machine["names"])
        lines += [f"  machine {machine['machine']}: names {names}",
                  f"    boots: {len(machine['boots'])}; cards: "
                  f"{len({c['serial'] for c in machine['cards']})}; runs: "
                  f"{machine['runs']['count']} ({_verdicts(machine['runs']['verdicts'])})"]
        lines += [f"    {run['finished_at']} {run['level']} {run['verdict']} driver "
                  f"{run['driver'] or '-'} {run['report']}"
                  for run in machine["runs"]["latest"][:10]]
        lines.append(f"    failures ({len(machine['failures'])} shown):")
        lines += ["  " + _failure(item) for item in machine["failures"]]
        lines += [f"    ERROR unreadable report {u['report']}: {u['error']}"
                  for u in machine["unreadable"]]
        lines += [f"    event {e['at']} {e['kind']}" for e in machine["events"]]
    return "\n".join(lines)
