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


def plot(records: list[dict], path: str) -> None:
    """Forward products as solid lines; jaxsparse's gradient step dashed."""
    timed = [r for r in records if r.get("median_s") is not None]
    kinds = sorted({(r["format"], r["matrix"]) for r in timed})
    ks = sorted({r["k"] for r in timed})
    if not kinds:
        return
    fig, axes = plt.subplots(
        len(kinds), len(ks), figsize=(3.2 * len(ks), 2.2 * len(kinds)), squeeze=False
    )
    for row, (fmt, matrix) in enumerate(kinds):
        for col, k in enumerate(ks):
            ax = axes[row][col]
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
                        ax.loglog(xs, ys, style, color=color, marker=".", label=label, lw=1)
            ax.set_title(f"{fmt.upper()} {matrix}, k={k}", fontsize=8)
            ax.tick_params(labelsize=6)
            ax.grid(True, which="major", lw=0.3)
            if col == 0:
                ax.set_ylabel("median time [s]", fontsize=7)
            if row == len(kinds) - 1:
                ax.set_xlabel("rows", fontsize=7)
    legend = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    labels, handles = list(legend), list(legend.values())
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=7)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / len(kinds)))
    fig.savefig(path, dpi=40)
    plt.close(fig)
