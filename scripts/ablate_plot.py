"""scripts/ablate_plot.py: scripts/ablate --plot DIR: the table's numbers as bars, one bar a
variant (in the matrix's order), one panel a column: the pipeline bubble (runs: the measured
mean, plans: the simulation's), the largest total memory of any rank, and the step time
(runs: measured; plans: the time model's, with a hardware profile). A panel with nothing in
it is left out; a failed variant has no bar. Written to DIR/ablate.png (the path printed)."""
import os
import sys

from ablate_rows import MIB


def ensure_matplotlib(script, argv):
    """Before any run: matplotlib importable here, or this script again under Debian's
    python3 when it has it (as scripts/plot does); else one line and exit 2."""
    try:
        import matplotlib  # noqa: F401
        return
    except ImportError:
        pass
    debian = "/usr/bin/python3"
    if (os.path.exists(debian) and not os.environ.get("PARALAB_PLOT_REEXEC") and
            os.path.realpath(sys.executable) != os.path.realpath(debian)):
        os.environ["PARALAB_PLOT_REEXEC"] = "1"  # once: no loop if it lacks it too
        os.execv(debian, [debian, os.path.abspath(script)] + argv)
    print("ablate: error: --plot needs matplotlib: sudo apt-get install python3-matplotlib "
          "(scripts/setup.sh installs it)", file=sys.stderr)
    sys.exit(2)


def panels(rows, plan_mode):
    """[(title, unit, [(variant, value)])] for the columns some variant has."""
    ok = [r for r in rows if not r["error"]]
    out = []
    bubble = [(r["variant"], 100 * r["bubble"]) for r in ok if r.get("bubble") is not None]
    if bubble:
        out.append(("bubble, " + ("simulated" if plan_mode else "measured (mean of the steps)"),
                    "% of the step", bubble))
    memory = [(r["variant"], r["mem_total"] / MIB) for r in ok if r.get("mem_total") is not None]
    if memory:
        out.append(("memory, the largest rank's total (peak)", "MiB", memory))
    key = "projected_step_ms" if plan_mode else "step_ms"
    step = [(r["variant"], r[key]) for r in ok if r.get(key) is not None]
    if step:
        out.append(("step, " + ("projected" if plan_mode else "measured"), "ms", step))
    return out


def plot_rows(rows, plan_mode, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    shown = panels(rows, plan_mode)
    if not shown:
        print("ablate: --plot: no variant has a number to draw", file=sys.stderr)
        return 0
    n = max(len(p[2]) for p in shown)
    fig, axes = plt.subplots(1, len(shown), figsize=(max(4, 0.7 * n + 2) * len(shown), 4),
                             squeeze=False)
    for ax, (title, unit, bars) in zip(axes[0], shown):
        names = [b[0] for b in bars]
        values = [b[1] for b in bars]
        ax.bar(range(len(values)), values, color="#4e79a7")
        for i, v in enumerate(values):
            ax.text(i, v, f"{v:.3g}", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = os.path.join(out, "ablate.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(path)
    return 0
