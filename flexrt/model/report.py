"""The operator table of a model as text (``FFModel.summary``, ``flexrt show``) and as JSON.

Entry points: ``format_table``, ``table_json``.
"""

from __future__ import annotations

from typing import Any, Optional

from flexrt.ir.pcg import PCG
from flexrt.ir.summary import OpRow, Totals, format_count, op_table, totals

HEADER = ("name", "type", "output shape", "params", "FLOPs (fwd)")


def _params(n: int) -> str:
    return "-" if n == 0 else format_count(n)


def _flops(n: int) -> str:
    return "-" if n == 0 else format_count(n)


def totals_text(t: Totals) -> str:
    """'operators: 5   parameters: 407.1 k (407,050)   forward: 26.0 MFLOPs'."""
    return (f"operators: {t.operators}   parameters: {format_count(t.params)} ({t.params:,})   "
            f"forward: {format_count(t.flops, 'FLOPs')}")


def format_table(pcg: PCG, title: Optional[str] = None) -> str:
    """One row per operator (inputs included, weights folded into the operators that own them),
    then the totals."""
    rows = op_table(pcg)
    cells = [HEADER] + [(r.name, r.op, ", ".join(r.outputs), _params(r.params), _flops(r.flops)) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    right = (False, False, False, True, True)

    def line(c) -> str:
        return "  ".join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(c, widths, right)).rstrip()

    out = [] if title is None else [title]
    out.append(line(cells[0]))
    out.append("  ".join("-" * w for w in widths))
    out += [line(c) for c in cells[1:]]
    out.append("")
    out.append(totals_text(totals(pcg, rows)))
    return "\n".join(out)


def row_json(pcg: PCG, row: OpRow) -> dict[str, Any]:
    return {
        "id": row.id, "name": row.name, "op": row.op,
        "outputs": [{"dims": list(s.sizes), "dtype": s.dtype.name} for s in pcg.output_shapes(row.id)],
        "params": row.params, "flops": row.flops,
    }


def table_json(pcg: PCG) -> dict[str, Any]:
    """``{"operators": [...], "totals": {"operators", "parameters", "flops_forward"}}`` with exact integers."""
    rows = op_table(pcg)
    t = totals(pcg, rows)
    return {"operators": [row_json(pcg, r) for r in rows],
            "totals": {"operators": t.operators, "parameters": t.params, "flops_forward": t.flops}}
