"""The chart of a fleet summary (``summary.png``): the trials behind each host's verdict.

:func:`draw_chart` draws the rows of :func:`cuda13_upgrade.summary.summary_rows` as a
matplotlib ``Figure`` (no pyplot state), :func:`render_chart` writes it as a PNG;
matplotlib is imported only when a chart is drawn. Throughput in tokens per second
(tok/s) per trial.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

#: Pixels per inch of the chart; its size in pixels is :func:`chart_size_px`.
CHART_DPI = 100


def plain_median(values: list[float]) -> float:
    """The median of ``values`` (tok/s): the middle one, or the mean of the two middle ones."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _chart_groups(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str | None]]:
    """(row, profile) pairs drawn as bar groups; (row, None) for a row without profiles."""
    groups: list[tuple[dict[str, Any], str | None]] = []
    for row in rows:
        names = list(row.get("profiles") or {})
        groups += [(row, name) for name in names] or [(row, None)]
    return groups


def chart_size_px(rows: list[dict[str, Any]]) -> tuple[int, int]:
    """Width and height in pixels of the chart :func:`render_chart` draws for ``rows``.

    One bar group per host and profile (one per host without profiles):
    ``6.4 in`` wide up to 6 groups, then ``0.8 in`` more per group, at most
    ``40 in``; ``4.8 in`` high, ``6.0 in`` once the labels turn vertical
    (more than 12 groups); :data:`CHART_DPI` pixels per inch.
    """
    width_in, height_in = _chart_size_in(len(_chart_groups(rows)))
    return round(width_in * CHART_DPI), round(height_in * CHART_DPI)


def _chart_size_in(n_groups: int) -> tuple[float, float]:
    width = min(40.0, max(6.4, 1.6 + 0.8 * n_groups))
    height = 6.0 if n_groups > 12 else 4.8
    return width, height


def render_chart(rows: list[dict[str, Any]], path: str | Path, *, title: str | None = None) -> Path:
    """Draw the PNG chart of :func:`draw_chart` to ``path`` and return the path.
    Raises ``OSError`` when it cannot be written and ``ImportError`` without
    matplotlib."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = draw_chart(rows, title=title)
    FigureCanvasAgg(fig)
    out = Path(path)
    fig.savefig(out, format="png", dpi=CHART_DPI)
    return out


def draw_chart(rows: list[dict[str, Any]], *, title: str | None = None) -> Any:
    """The trials behind each verdict, as a matplotlib ``Figure`` (no pyplot state).

    ``rows`` as :func:`cuda13_upgrade.summary.summary_rows` returns them. Each host and profile is a
    group of two columns: "before" (the old stack's baseline trials) and
    "after" (the new stack's trials; for a host that rolled back before the
    new stack was measured, the old stack's re-measurement, hatched). Each
    column is a box of its trials (quartiles, whiskers to min and max) with
    every trial drawn as a point and the median as a black bar labelled with
    its value; the tolerance band spans from the baseline median down by the
    profile's tolerance (a new median below it regresses). A group with
    nothing measured is labelled with the host's decision. The figure is
    :func:`chart_size_px` pixels at :data:`CHART_DPI`.

    Artists carry a ``gid`` for reading the plotted data back:
    ``trials:<host>:<profile>:<before|after>`` (points, y = tok/s),
    ``median:...`` (the median bar), ``band:<host>:<profile>`` (the band).
    """
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    groups = _chart_groups(rows)
    width_in, height_in = _chart_size_in(len(groups))
    fig = Figure(figsize=(width_in, height_in), dpi=CHART_DPI, layout="constrained")
    ax = fig.add_subplot()
    colors = {
        "before": "#7f7f7f",
        "after": "#2b8cbe",
        "regressed": "#d7301f",
        "rollback": "#fdae6b",
        "band": "#fee391",
    }
    col_w = 0.38
    vertical = len(groups) > 12  # many groups: one rotated "host profile" label each
    labels = []
    top = 0.0
    bottom = math.inf
    for i, (row, name) in enumerate(groups):
        labels.append(f"{row.get('host')} {name}" if vertical and name else (name or ""))
        p = (row.get("profiles") or {}).get(name) if name else None
        trials = (p or {}).get("trials") or {}
        columns = []
        before = list(trials.get("baseline") or ([p["before"]] if p and p.get("before") is not None else []))
        if before:
            columns.append(("before", i - col_w / 2, before, colors["before"], None))
        after = list(trials.get("candidate") or ([p["after"]] if p and p.get("after") is not None else []))
        if after:
            color = colors["regressed"] if p and p.get("verdict") == "regressed" else colors["after"]
            columns.append(("after", i + col_w / 2, after, color, None))
        else:
            back = list(
                trials.get("rollback")
                or ([p["after_rollback"]] if p and p.get("after_rollback") is not None else [])
            )
            if back:
                columns.append(("after", i + col_w / 2, back, colors["rollback"], "//"))
        host_profile = f"{row.get('host')}:{name}"
        tolerance = (p or {}).get("tolerance_pct")
        if p and p.get("before") is not None and tolerance is not None:
            low = p["before"] * (1 - tolerance / 100.0)
            band = ax.fill_between(
                [i - 0.45, i + 0.45], low, p["before"], color=colors["band"], alpha=0.6, linewidth=0, zorder=0
            )
            band.set_gid(f"band:{host_profile}")
            bottom = min(bottom, low)
        for side, x, values, color, hatch in columns:
            boxes = ax.boxplot(
                [values],
                positions=[x],
                widths=col_w * 0.8,
                whis=(0, 100),
                patch_artist=True,
                showfliers=False,
                medianprops={"color": "black", "linewidth": 0},
                manage_ticks=False,
            )
            for box in boxes["boxes"]:
                box.set(facecolor=color, alpha=0.45, hatch=hatch, edgecolor="#333333", linewidth=0.5)
            jitter = [
                x + (k - (len(values) - 1) / 2) * min(0.02, col_w * 0.6 / max(len(values), 1))
                for k in range(len(values))
            ]
            points = ax.scatter(
                jitter, values, s=9, color=color, edgecolor="#222222", linewidths=0.3, zorder=3
            )
            points.set_gid(f"trials:{host_profile}:{side}")
            median = plain_median(values)
            (bar,) = ax.plot(
                [x - col_w * 0.45, x + col_w * 0.45], [median, median], color="black", linewidth=1.6, zorder=4
            )
            bar.set_gid(f"median:{host_profile}:{side}")
            ax.annotate(
                f"{median:.1f}",
                (x, max(values)),
                ha="center",
                va="bottom",
                fontsize=7,
                xytext=(0, 2),
                textcoords="offset points",
            )
            top = max(top, max(values))
            bottom = min(bottom, min(values))
        if not columns:
            ax.annotate(
                str(row.get("decision") or row.get("status")),
                (i, 0),
                xycoords=("data", "axes fraction"),
                ha="center",
                va="bottom",
                rotation=90,
                fontsize=8,
                color="#555555",
                xytext=(0, 4),
                textcoords="offset points",
            )
    if top > 0:
        span = max(top - bottom, top * 0.02)
        ax.set_ylim(max(0.0, bottom - span * 0.25), top + span * 0.3)
    else:
        ax.set_ylim(0, 1.0)
    ax.set_xticks(range(len(groups)), labels, fontsize=7 if vertical else 8)
    if vertical:
        ax.tick_params(axis="x", labelrotation=90)
    else:
        # Host names once per host, under its profiles (matplotlib's nested
        # tick labels: a secondary axis), with a line between hosts.
        spans: list[tuple[str, int, int]] = []
        for i, (row, _) in enumerate(groups):
            host = str(row.get("host"))
            if spans and spans[-1][0] == host:
                spans[-1] = (host, spans[-1][1], i)
            else:
                spans.append((host, i, i))
        hosts_axis = ax.secondary_xaxis(location=0)
        centers = [(first + last) / 2 for _, first, last in spans]
        hosts_axis.set_xticks(centers, [f"\n{h}" for h, _, _ in spans], fontsize=8)
        hosts_axis.tick_params(axis="x", length=0, pad=6)
        for _, _, last in spans[:-1]:
            ax.axvline(last + 0.5, color="#cccccc", linewidth=0.8)
    ax.set_xlim(-0.6, max(len(groups), 1) - 0.4)
    ax.set_ylabel("throughput per trial (tok/s)")
    fig.suptitle(title or "Decode throughput before and after the CUDA 13 upgrade", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    fig.legend(
        handles=[
            Patch(facecolor=colors["before"], alpha=0.45, label="before (old stack)"),
            Patch(facecolor=colors["after"], alpha=0.45, label="after (new stack, kept)"),
            Patch(facecolor=colors["regressed"], alpha=0.45, label="after (new stack, regressed)"),
            Patch(facecolor=colors["rollback"], alpha=0.45, hatch="//", label="after rollback (old stack)"),
            Patch(facecolor=colors["band"], alpha=0.6, label="tolerance below the old median"),
            Line2D([], [], color="black", linewidth=1.6, label="median"),
        ],
        fontsize=7,
        ncols=3,
        loc="outside lower center",
        frameon=False,
    )
    if top == 0:
        ax.text(
            0.5,
            0.5,
            "no throughput measured in this run",
            transform=ax.transAxes,
            ha="center",
            va="center",
            color="#555555",
        )
    return fig
