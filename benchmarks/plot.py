"""The results plot: time against rows, one panel per matrix kind (rows) and k (columns)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {
    "jaxsparse": "black",
    "scipy-dia": "tab:orange",
    "scipy-csr": "tab:red",
    "jax-bcsr": "tab:blue",
    "jax-bcoo": "tab:cyan",
    "dense-jnp": "tab:gray",
}


PLOTTED_KS = (1, 8)  # k = 64 is in the JSON and the table; its few sizes crowd the plot
COLUMNS = 5


def plot(records: list[dict], path: str) -> None:
    """One panel per (matrix kind, k): forward products solid, jaxsparse's gradient dashed."""
    timed = [r for r in records if r.get("median_s") is not None and r["k"] in PLOTTED_KS]
    panels = sorted({(r["format"], r["matrix"], r["k"]) for r in timed})
    if not panels:
        return
    rows = -(-len(panels) // COLUMNS)
    fig, axes = plt.subplots(rows, COLUMNS, figsize=(3.3 * COLUMNS, 2.6 * rows), squeeze=False)
    for ax, (fmt, matrix, k) in zip(axes.flat, panels, strict=False):
        case = [r for r in timed if (r["format"], r["matrix"], r["k"]) == (fmt, matrix, k)]
        for system, color in COLORS.items():
            for op, style in (("forward", "-"), ("gradient", "--")):
                if op == "gradient" and system != "jaxsparse":
                    continue
                points = sorted(
                    (r["rows"], r["median_s"])
                    for r in case
                    if r["system"] == system and r["op"] == op
                )
                if points:
                    xs, ys = zip(*points, strict=True)
                    label = system if op == "forward" else "jaxsparse grad step"
                    ax.loglog(xs, ys, style, color=color, marker=".", label=label, lw=1.2)
        ax.set_title(f"{fmt.upper()} {matrix}, k={k}", fontsize=10)
        ax.tick_params(labelsize=8)
        ax.grid(True, which="major", lw=0.3)
        ax.set_xlabel("rows", fontsize=8)
        ax.set_ylabel("median time [s]", fontsize=8)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    legend = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    fig.legend(list(legend.values()), list(legend), loc="upper center", ncol=len(legend))
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / rows))
    fig.savefig(path, dpi=55)
    plt.close(fig)
