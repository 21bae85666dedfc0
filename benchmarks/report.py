"""Write a benchmark result (from silvanforge.bench.run) as JSON, Markdown and plots."""

from __future__ import annotations

import json
import os

from silvanforge.bench import markdown


def write(result: dict, out: str, log=print) -> list[str]:
    """Write results.json, results.md and, with matplotlib, the plots; return the paths."""
    os.makedirs(out, exist_ok=True)
    paths = [os.path.join(out, "results.json"), os.path.join(out, "results.md")]
    with open(paths[0], "w") as fh:
        json.dump(result, fh, indent=1, allow_nan=False, default=_finite)
    with open(paths[1], "w") as fh:
        fh.write("# SilvanForge against its peers\n\n" + _settings(result) + "\n"
                 + markdown(result))
    try:
        import matplotlib
    except ImportError:
        log("matplotlib is not installed: no plots")
        return paths
    matplotlib.use("Agg")
    paths += _plot_speedup(result, out) + [_plot_compile(result, out)]
    return paths


def _finite(value):
    raise TypeError(f"not JSON: {value!r}")


def _settings(result: dict) -> str:
    s = result["settings"]
    return (f"Medians of {s['rounds']} interleaved rounds (best of {s['repeat']} each), "
            f"each timing loop taking up to {s.get('distinct_batches', 1)} distinct batches "
            "of rows in turn; "
            f"{s['cpus']} CPUs; OMP_WAIT_POLICY={s.get('omp_wait_policy')}; outputs "
            f"checked against silvanforge.reference (rtol {s['rtol']}, atol {s['atol']}) "
            f"before timing. Memory: {s['memory']}.\n")


def speedups(result: dict, threads: int) -> dict[str, list[tuple[int, float]]]:
    """Per model, (batch, best peer's time / SilvanForge's) for one thread count.

    >>> r = {"rows": [{"model": "m", "batch": 8, "threads": 1, "engine": "silvanforge",
    ...                "ratio_to_best_peer": 0.5}]}
    >>> speedups(r, 1)
    {'m': [(8, 2.0)]}
    """
    out: dict[str, list[tuple[int, float]]] = {}
    for row in result["rows"]:
        if (row["engine"] == "silvanforge" and row["threads"] == threads
                and row.get("ratio_to_best_peer")):
            out.setdefault(row["model"], []).append((row["batch"],
                                                     1 / row["ratio_to_best_peer"]))
    return out


def _plot_speedup(result: dict, out: str) -> list[str]:
    import matplotlib.pyplot as plt

    paths = []
    for threads in result["settings"]["threads"]:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for model, points in speedups(result, threads).items():
            batches, values = zip(*sorted(points))
            ax.plot(batches, values, marker="o", label=model)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set(xscale="log", yscale="log", xlabel="batch size (rows)",
               ylabel="speed-up over the best peer",
               title=f"SilvanForge vs the fastest other engine, {threads} thread(s)")
        ax.legend(fontsize=7)
        path = os.path.join(out, f"speedup_{threads}t.png")
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    return paths


def _plot_compile(result: dict, out: str) -> str:
    import matplotlib.pyplot as plt

    seen: dict[tuple[str, str], float] = {}
    for row in result["rows"]:
        seen.setdefault((row["model"], row["engine"]), row["compile_s"])
    models = list(dict.fromkeys(m for m, _ in seen))
    engines = list(dict.fromkeys(e for _, e in seen))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / max(len(engines), 1)
    for i, engine in enumerate(engines):
        xs = [j + i * width for j, m in enumerate(models) if (m, engine) in seen]
        ax.bar(xs, [seen[(m, engine)] for m in models if (m, engine) in seen], width,
               label=engine)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(models))], models, rotation=30,
                  ha="right", fontsize=7)
    ax.set(yscale="log", ylabel="compile / convert time (s)",
           title="Preparation time per engine")
    ax.legend(fontsize=7)
    path = os.path.join(out, "compile_time.png")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
