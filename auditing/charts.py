"""Pictures for the auditor's pages, drawn on the server as SVG: no script, no CDN, printable.

Every text that comes from a record is escaped; links go to the records' admin pages.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from .selectors import TreeNode
from .signatures import INVALID

# Outcome -> colour, in stacking order (bottom first).
OUTCOME_COLOURS = {
    "executed": "#2e7d32",
    "failed": "#ef6c00",
    "rejected": "#c62828",
    "validated": "#1565c0",
    "accepted": "#90a4ae",
}
FONT = "font-family='system-ui, -apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif'"


def _text(x: float, y: float, text: str, *, size: int = 12, anchor: str = "start", weight: str = "normal",
          fill: str = "#333", extra: str = "") -> str:
    return (f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size}' text-anchor='{anchor}' font-weight='{weight}' "
            f"fill='{fill}' {extra}>{escape(text)}</text>")


def envelope_chart(days: list[date], series: dict[str, list[int]], *, stacked: tuple[str, ...] = (
        "executed", "failed", "rejected", "validated")) -> SafeString:
    """Stacked bars of envelope outcomes per day, with a legend; ``accepted`` (an envelope on its way
    to executed or failed) is drawn as a thin marker beside each bar."""
    width, height, left, bottom, top = 920, 300, 48, 40, 36
    plot_w, plot_h = width - left - 16, height - bottom - top
    totals = [sum(series[name][i] for name in stacked) for i in range(len(days))]
    peak = max(totals + series.get("accepted", [0]) + [1])
    step = max(1, -(-peak // 4))  # four gridlines, rounded up
    scale_max = step * 4
    slot = plot_w / max(1, len(days))
    bar_w = slot * 0.6
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' role='img' aria-labelledby='chart-title' width='{width}' "
             f"height='{height}' viewBox='0 0 {width} {height}' {FONT} class='agp-chart'>",
             "<title id='chart-title'>Action envelopes per day by outcome</title>"]
    for n in range(5):
        y = top + plot_h - plot_h * n / 4
        parts.append(f"<line x1='{left}' y1='{y:.1f}' x2='{left + plot_w}' y2='{y:.1f}' stroke='#e0e0e0'/>")
        parts.append(_text(left - 6, y + 4, str(step * n), size=11, anchor="end", fill="#666"))
    for i, day in enumerate(days):
        x = left + slot * i + (slot - bar_w) / 2
        y = top + plot_h
        for name in stacked:
            count = series[name][i]
            if not count:
                continue
            h = plot_h * count / scale_max
            y -= h
            parts.append(f"<rect x='{x:.1f}' y='{y:.1f}' width='{bar_w:.1f}' height='{h:.1f}' "
                         f"fill='{OUTCOME_COLOURS[name]}' class='bar bar-{name}' data-day='{day.isoformat()}' "
                         f"data-count='{count}'><title>{escape(f'{day:%d %b}: {count} {name}')}</title></rect>")
        accepted = series.get("accepted", [0] * len(days))[i]
        if accepted:
            ya = top + plot_h - plot_h * accepted / scale_max
            parts.append(f"<line x1='{x + bar_w + 2:.1f}' y1='{ya:.1f}' x2='{x + bar_w + 2:.1f}' "
                         f"y2='{top + plot_h:.1f}' stroke='{OUTCOME_COLOURS['accepted']}' stroke-width='3'>"
                         f"<title>{escape(f'{day:%d %b}: {accepted} accepted')}</title></line>")
        if totals[i]:
            parts.append(_text(x + bar_w / 2, y - 4, str(totals[i]), size=10, anchor="middle", fill="#444"))
        parts.append(_text(x + bar_w / 2, top + plot_h + 16, f"{day:%d %b}", size=10, anchor="middle", fill="#555"))
    legend_x = left
    for name in (*stacked, "accepted"):
        parts.append(f"<rect x='{legend_x}' y='10' width='12' height='12' fill='{OUTCOME_COLOURS[name]}'/>")
        total = sum(series.get(name, []))
        label = f"{name} ({total})" if name != "accepted" else f"accepted for execution ({total})"
        parts.append(_text(legend_x + 16, 20, label, size=12))
        legend_x += 28 + 7 * len(label)
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every record text above went through escape()


@dataclass
class _Placed:
    node: TreeNode
    x: float
    y: float


NODE_W, NODE_H, GAP_X, GAP_Y, MARGIN = 230, 92, 26, 56, 16


def _layout(root: TreeNode) -> list[_Placed]:
    """Leaves side by side in depth-first order; a parent centred over its children."""
    placed: list[_Placed] = []
    next_slot = [0]

    def visit(node: TreeNode, depth: int) -> float:
        if node.children:
            centres = [visit(child, depth + 1) for child in node.children]
            x = (centres[0] + centres[-1]) / 2
        else:
            x = next_slot[0] * (NODE_W + GAP_X)
            next_slot[0] += 1
        placed.append(_Placed(node, x, (depth + 1) * (NODE_H + GAP_Y)))
        return x

    visit(root, 0)
    return placed


def _spend(link) -> str:
    if link.spend_amount is None:
        return "no spend authority"
    return f"spend ≤ {link.spend_amount.normalize():f} {link.spend_currency}"


def _clip(text: str, length: int) -> str:
    """Text that fits its box: the long ids agents get are cut with an ellipsis (the full one is a tooltip)."""
    return text if len(text) <= length else text[:length - 1] + "…"


def delegation_tree_svg(*, root_principal: str, root: TreeNode, focus_id: str,
                        link_for: Callable[[object], str]) -> SafeString:
    """The tree as boxes (one per link: the delegate, the link's id, scope, spend limit, hops left,
    status and signature) under the root principal; revoked links dashed and red."""
    placed = _layout(root)
    width = max(p.x for p in placed) + NODE_W + 2 * MARGIN
    height = max(p.y for p in placed) + NODE_H + 2 * MARGIN
    position = {p.node.link.delegation_id: p for p in placed}
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' role='img' aria-labelledby='tree-title' width='{width:.0f}' "
             f"height='{height:.0f}' viewBox='0 0 {width:.0f} {height:.0f}' {FONT} class='agp-tree'>",
             f"<title id='tree-title'>{escape(f'Delegations from {root_principal}')}</title>"]
    root_x = position[root.link.delegation_id].x + MARGIN
    parts.append(f"<rect x='{root_x:.1f}' y='{MARGIN}' width='{NODE_W}' height='{NODE_H - 40}' rx='8' "
                 f"fill='#263238' class='principal'/>")
    parts.append(_text(root_x + NODE_W / 2, MARGIN + 22, _clip(root_principal, 26), size=14, anchor="middle",
                       weight="bold", fill="#fff", extra=f"data-full='{escape(root_principal)}'"))
    parts.append(_text(root_x + NODE_W / 2, MARGIN + 40, "root principal", size=11, anchor="middle", fill="#cfd8dc"))
    edges, boxes = [], []
    for p in placed:
        link = p.node.link
        x, y = p.x + MARGIN, p.y + MARGIN - 40
        parent = position.get(link.parent_id) if link.parent_id else None
        px, py = ((parent.x + MARGIN + NODE_W / 2, parent.y + MARGIN - 40 + NODE_H) if parent
                  else (root_x + NODE_W / 2, MARGIN + NODE_H - 40))
        revoked = link.status == "revoked"
        stroke = "#c62828" if revoked else "#78909c"
        dash = " stroke-dasharray='6 4'" if revoked else ""
        mid = (py + y) / 2
        edges.append(f"<path d='M{px:.1f},{py:.1f} C{px:.1f},{mid:.1f} {x + NODE_W / 2:.1f},{mid:.1f} "
                     f"{x + NODE_W / 2:.1f},{y:.1f}' fill='none' stroke='{stroke}' stroke-width='2'{dash} "
                     f"class='edge{' revoked' if revoked else ''}'/>")
        focus = link.delegation_id == focus_id
        fill = "#ffebee" if revoked else "#eceff1" if p.node.expired else "#ffffff"
        border = "#c62828" if revoked else "#ff8f00" if focus else "#90a4ae"
        state = "REVOKED" if revoked else "expired" if p.node.expired else "active"
        signature = p.node.signature
        sig_mark = "✓ signed" if signature.state == "verified" else "✗ SIGNATURE INVALID" \
            if signature.state == INVALID else "unsigned"
        boxes.append(f"<a href='{escape(link_for(link))}' class='link{' focus' if focus else ''}"
                     f"{' revoked' if revoked else ''}' data-delegation='{escape(link.delegation_id)}'>")
        boxes.append(f"<rect x='{x:.1f}' y='{y:.1f}' width='{NODE_W}' height='{NODE_H}' rx='6' fill='{fill}' "
                     f"stroke='{border}' stroke-width='{3 if focus else 1.5}'{dash}/>")
        boxes.append(f"<title>{escape(f'{link.delegator_agent} → {link.delegate_agent} ({link.delegation_id})')}"
                     f"</title>")
        boxes.append(_text(x + 10, y + 18, _clip(link.delegate_agent, 19), size=13, weight="bold"))
        boxes.append(_text(x + NODE_W - 8, y + 18, state, size=10, anchor="end", weight="bold",
                           fill="#c62828" if revoked else "#607d8b"))
        boxes.append(_text(x + 10, y + 34, _clip(f"scope: {', '.join(link.authority_scope or [])}", 36), size=11))
        boxes.append(_text(x + 10, y + 50, f"{_spend(link)} · hops left {link.max_hops_remaining}", size=11))
        boxes.append(_text(x + 10, y + 66, _clip(link.delegation_id, 36), size=10, fill="#546e7a"))
        boxes.append(_text(x + 10, y + 82, sig_mark, size=10,
                           fill="#c62828" if signature.state == INVALID else "#2e7d32"))
        boxes.append("</a>")
    parts.extend(edges)
    parts.extend(boxes)
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every record text above went through escape()
