"""Terminal and markdown drawing of the ``cross_rank`` section (registered with gpuprof.render.sections).

Paths come from the user's file system and may hold markup or control
characters: everything goes through gpuprof.render.safe / markdown helpers.
"""

from __future__ import annotations

from typing import Any

from gpuprof.render.markdown import md_escape, md_table
from gpuprof.render.safe import clip
from gpuprof.render.sections import register_section, section_dict
from gpuprof.units import fmt_bytes, fmt_gbps, fmt_pct, fmt_us

__all__ = ["cross_rank_terminal", "cross_rank_markdown"]

_RANK_HEAD = ["rank", "step", "compute", "comm", "exposed comm", "wait", "data loading", "host", "sync",
              "unrecorded", "collectives/step"]
_COLL_HEAD = ["collective", "per step", "mean time", "mean size", "bytes/step", "bus bandwidth"]
_ARR_HEAD = ["# in step", "collective", "steps", "last to arrive", "of steps", "others wait (median)",
             "of it before the step"]


def _rank_rows(d: dict[str, Any]) -> list[list[str]]:
    slow = set(d["stragglers"])
    return [[f"{r['rank']}{' (straggler)' if r['rank'] in slow else ''}", fmt_us(r["step_us"]), fmt_us(r["compute_us"]),
             fmt_us(r["comm_us"]), fmt_us(r["exposed_comm_us"]), fmt_us(r["wait_us"]), fmt_us(r["data_loading_us"]),
             fmt_us(r["host_us"]), fmt_us(r["sync_us"]), fmt_us(r["unrecorded_us"]), f"{r['collectives_per_step']:.1f}"]
            for r in d["ranks"]]


def _coll_rows(d: dict[str, Any]) -> list[list[str]]:
    return [[c["type"], f"{c['per_step']:.1f}", fmt_us(c["mean_us"]),
             fmt_bytes(c["mean_bytes"]) if c["mean_bytes"] is not None else "-",
             fmt_bytes(c["bytes_per_step"]) if c["bytes_per_step"] is not None else "-",
             fmt_gbps(c["bus_gbps"]) if c["bus_gbps"] is not None else "-"] for c in d["collectives"]]


def _arrival_rows(d: dict[str, Any]) -> list[list[str]]:
    rows = (d.get("arrivals") or {}).get("collectives", [])
    return [[str(r["position"]), r["type"], str(r["steps"]), ", ".join(map(str, r["last"])),
             f"{r['last_share']:.0%}", fmt_us(r["others_wait_us"]), fmt_us(r["before_step_us"])] for r in rows]


_PATH_HEAD = ["kind", "name", "rank", "per step", "of the step"]
_PATH_TOP = 8  # the largest parts of the job's path, then the rest summed (as the per-trace table)


def _path_rows(d: dict[str, Any]) -> list[list[str]]:
    """The job's critical path (docs/critical-path.md): its largest parts, then one row for the rest."""
    from gpuprof.render.critpath import PATH_LABELS

    cp = d.get("critical_path")
    if not cp or cp["length_us"] <= 0 or not cp["parts"]:
        return []
    length = cp["length_us"]
    labels = {**PATH_LABELS, "rank_wait": "rank wait"}
    rows = [[labels.get(p["kind"], p["kind"]), p["name"], "-" if p["rank"] is None else str(p["rank"]), fmt_us(p["us"]),
             fmt_pct(p["us"] / length)] for p in cp["parts"][:_PATH_TOP]]
    rest = sum(p["us"] for p in cp["parts"][_PATH_TOP:])
    if len(cp["parts"]) > _PATH_TOP and rest > 0:
        rows.append(["", f"{len(cp['parts']) - _PATH_TOP} more parts", "", fmt_us(rest), fmt_pct(rest / length)])
    return rows


def _path_title(d: dict[str, Any]) -> str:
    cp = d["critical_path"]
    ranks = ", ".join(f"rank {r['rank']} {fmt_us(r['us'])}" for r in cp["ranks"][:4])
    more = f", {len(cp['ranks']) - 4} more ranks" if len(cp["ranks"]) > 4 else ""
    return (f"{fmt_us(cp['length_us'])} per step over {cp['steps']} steps (the ranks' paths joined at their "
            f"collectives); time on it: {ranks}{more}")


def _headline(d: dict[str, Any]) -> str:
    world = f" of {d['world_size']}" if d["world_size"] else ""
    text = (f"{len(d['ranks'])} ranks{world}, backend {d['backend'] or 'unknown'}, "
            f"median step {fmt_us(d['step_us'])}")
    if d["stragglers"]:
        text += (f"; straggler: rank {', '.join(map(str, d['stragglers']))} (the others wait "
                 f"{fmt_us(d['others_wait_us'])} per step for it"
                 + (f"; its excess: {d['straggler_cause']} +{fmt_us(d['straggler_excess_us'])})"
                    if d["straggler_cause"] else ")"))
    return text


def cross_rank_terminal(console: Any, section: Any) -> None:
    """The section at ``console.width``: the tables of :mod:`gpuprof.render.layout`, which keep every
    number whole and show each rank as a block of ``header value`` pairs when the columns do not fit."""
    from rich.text import Text

    from gpuprof.render.layout import emit_table, wrap_text

    d = section_dict(section)
    for i, line in enumerate(wrap_text("Cross-rank: " + clip(_headline(d)), console.width)):
        console.print(Text(line, style="bold" if i == 0 else ""), no_wrap=True, crop=False)

    def table(title: str, head: list[str], rows: list[list[str]]) -> None:
        emit_table(console, title, [(c, "left" if i == 0 else "right") for i, c in enumerate(head)], rows)

    table("per rank, mean per step", _RANK_HEAD, _rank_rows(d))
    if d["collectives"]:
        table("collectives (time: fastest rank of each)", _COLL_HEAD, _coll_rows(d))
    if _arrival_rows(d):
        table("arrival order: who the others waited for, by collective in the step", _ARR_HEAD, _arrival_rows(d))
    if _path_rows(d):
        table("job critical path: " + _path_title(d), _PATH_HEAD, _path_rows(d))
    for n in d["notes"]:
        for line in wrap_text("note: " + clip(n), console.width):
            console.print(Text(line, style="dim"), no_wrap=True, crop=False)


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    return md_table(head, [[md_escape(c) for c in r] for r in rows])


def cross_rank_markdown(section: Any) -> str:
    d = section_dict(section)
    parts = ["## Cross-rank", md_escape(_headline(d)), "**Per rank** (mean per step)",
             _md_table(_RANK_HEAD, _rank_rows(d))]
    if d["collectives"]:
        parts += ["**Collectives** (time: the fastest rank of each)", _md_table(_COLL_HEAD, _coll_rows(d))]
    if _arrival_rows(d):
        parts += ["**Arrival order** (who the others waited for, by collective in the step)",
                  _md_table(_ARR_HEAD, _arrival_rows(d))]
    if _path_rows(d):
        parts += [f"**Job critical path**: {md_escape(_path_title(d))}",
                  _md_table(_PATH_HEAD, _path_rows(d))]
    parts += [f"_note: {md_escape(clip(n))}_" for n in d["notes"]]
    return "\n\n".join(parts) + "\n"


def _summaries_line(section: Any) -> str:
    # the ranks are summaries (msgspec structs) in a live report, dicts in one read back from JSON
    ranks = [r.get("rank") if isinstance(r, dict) else getattr(r, "rank", None) for r in section_dict(section)["ranks"]]
    return (f"rank summaries of {len(ranks)} rank{'s' if len(ranks) != 1 else ''} ({', '.join(map(str, ranks))}) "
            "are in the JSON report, for a later cross-rank merge (docs/distributed.md)")


def summaries_terminal(console: Any, section: Any) -> None:
    from rich.markup import escape

    console.print(f"[dim]{escape(clip(_summaries_line(section)))}[/dim]")


def summaries_markdown(section: Any) -> str:
    return f"_{md_escape(_summaries_line(section))}_\n"


register_section("cross_rank", terminal=cross_rank_terminal, markdown=cross_rank_markdown)
register_section("rank_summaries", terminal=summaries_terminal, markdown=summaries_markdown)
