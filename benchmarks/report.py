"""Text and numbers from the benchmark records: progress lines, tables, the byte model and
the issue's target ratios."""

import math

SYSTEMS = ("jaxsparse", "scipy-dia", "scipy-csr", "jax-bcsr", "jax-bcoo", "dense-jnp")
VALUE_BYTES = INDEX_BYTES = 4  # float32 values, int32 indices
TARGET_ROWS = 1_000_000

NOTES = [
    "times are medians of warm calls; first calls (compilation for jax) are reported apart",
    "speedup = best peer's median / jaxsparse's median (> 1: jaxsparse faster)",
    "GB/s from the byte model: CSR nnz*(v+i) + (m+1)*i + n*k*v + m*k*v; "
    "DIA ndiag*n*v + n*k*v + m*k*v (v = i = 4 bytes)",
    "gradient step = one jitted jax.vjp: Y, and the gradients in the values and X along a "
    "cotangent W",
    "scipy has no autodiff: its gradient step is not timed",
    "gradient_loop = time per gradient step inside a jitted lax.fori_loop of 20 steps",
    "loop = time per product inside a jitted lax.fori_loop of 20 products (buffers reused); "
    "scipy, outside JAX, is compared by its single call there",
    "dense-jnp only where the dense matrix takes < 1 GB",
]


def model_bytes(record: dict) -> int:
    m, n, k = record["rows"], record["cols"], record["k"]
    dense = (n + m) * k * VALUE_BYTES
    if record["format"] == "dia":
        return record["ndiag"] * n * VALUE_BYTES + dense
    return record["nnz"] * (VALUE_BYTES + INDEX_BYTES) + (m + 1) * INDEX_BYTES + dense


def gradient_model_bytes(record: dict) -> int:
    """The gradient step's bytes in the same model: the forward product's, and the
    gradients' pass reading the structure, the values, W and X once and writing the values'
    gradient and dX once (DIA: 2 * ndiag*n*v + (m + 2n)*k*v; CSR: nnz*(2v + i) + (m+1)*i
    + (m + 2n)*k*v). Its ratio to model_bytes is the least gradient step / forward a
    kernel running both at one bandwidth can reach."""
    m, n, k = record["rows"], record["cols"], record["k"]
    dense = (m + 2 * n) * k * VALUE_BYTES
    if record["format"] == "dia":
        gradients = 2 * record["ndiag"] * n * VALUE_BYTES + dense
    else:
        gradients = record["nnz"] * (2 * VALUE_BYTES + INDEX_BYTES) + (m + 1) * INDEX_BYTES + dense
    return model_bytes(record) + gradients


def progress_line(record: dict) -> str:
    case = (
        f"{record['format']}:{record['matrix']:<15} rows={record['rows']:>8} "
        f"k={record['k']:>2} {record['op']:<8} {record['system']:<10}"
    )
    if not record["ok"]:
        return f"{case} FAILED: {record['error']}"
    return (
        f"{case} median {record['median_s'] * 1e3:9.3f} ms  "
        f"first call {record['first_call_s'] * 1e3:8.1f} ms  ({record['repeats']} repeats)"
    )


def header(env: dict) -> str:
    lines = [
        f"jaxsparse benchmark, {env['date']}, {env['machine']}",
        f"python {env['python']}, jax {env['jax']} ({', '.join(env['jax_devices'])}), "
        f"numpy {env['numpy']}, scipy {env['scipy']}, dtype {env['dtype']}",
    ]
    if env["environment"]:
        settings = ", ".join(f"{k}={v}" for k, v in env["environment"].items())
        lines.append(f"environment: {settings}")
    else:
        lines.append("environment: no OPENBLAS_*, GLIBC_TUNABLES, XLA_FLAGS set")
    return "\n".join(lines)


def _cases(records):
    keys = []
    for r in records:
        key = (r["op"], r["format"], r["matrix"], r["rows"], r["k"])
        if key not in keys:
            keys.append(key)
    return keys


def _lookup(records):
    return {(r["op"], r["format"], r["matrix"], r["rows"], r["k"], r["system"]): r for r in records}


def _time(table, key, system):
    record = table.get((*key, system))
    if record is None and key[0] == "loop":  # scipy has no loop: its single call
        record = table.get(("forward", *key[1:], system))
    if record is None:
        return None
    return record["median_s"] if record["ok"] else math.nan


def speedup(table, key):
    """Best peer's median over jaxsparse's, or None."""
    ours = _time(table, key, "jaxsparse")
    peers = [
        t for s in SYSTEMS[1:] if (t := _time(table, key, s)) is not None and not math.isnan(t)
    ]
    if not ours or math.isnan(ours) or not peers:
        return None
    return min(peers) / ours


def tables(records, bandwidth, skipped) -> str:
    table = _lookup(records)
    lines = [
        f"\nstreaming bandwidth: numpy a + b (preallocated output, 3 x "
        f"{bandwidth['bytes_per_array'] / 1e6:.0f} MB moved) "
        f"{bandwidth['numpy_add_gbs']:.1f} GB/s; "
        f"jitted a + b (fresh output buffer) {bandwidth['jax_add_new_output_gbs']:.1f} GB/s",
        *(f"note: {n}" for n in NOTES),
    ]
    for op in ("forward", "loop", "gradient", "gradient_loop"):
        keys = [key for key in _cases(records) if key[0] == op]
        if not keys:
            continue
        lines.append(f"\n== {op}: median time [ms] ==")
        head = f"{'matrix':<20} {'rows':>8} {'nnz':>10} {'k':>3}"
        head += "".join(f" {s:>10}" for s in SYSTEMS) + f" {'speedup':>8} {'GB/s':>6}"
        lines.append(head)
        for key in keys:
            record = table.get((*key, "jaxsparse"), {})
            nnz = next(r["nnz"] for r in records if r["rows"] == key[3] and r["matrix"] == key[2])
            row = f"{key[1] + ':' + key[2]:<20} {key[3]:>8} {nnz:>10} {key[4]:>3}"
            for s in SYSTEMS:
                t = _time(table, key, s)
                row += f" {'-':>10}" if t is None else f" {t * 1e3:>10.3f}"
            ratio = speedup(table, key)
            row += f" {ratio:>8.2f}" if ratio else f" {'-':>8}"
            if record.get("ok") and op in ("forward", "loop"):
                row += f" {model_bytes(record) / record['median_s'] / 1e9:>6.1f}"
            lines.append(row)
        lines.append(f"\n== {op}: first call (compilation + one run) [ms] ==")
        jax_systems = [s for s in SYSTEMS if s.startswith(("jax", "dense"))]
        lines.append(
            f"{'matrix':<20} {'rows':>8} {'k':>3}" + "".join(f" {s:>10}" for s in jax_systems)
        )
        for key in keys:
            row = f"{key[1] + ':' + key[2]:<20} {key[3]:>8} {key[4]:>3}"
            for s in jax_systems:
                r = table.get((*key, s))
                ok = r is not None and r["ok"]
                row += f" {r['first_call_s'] * 1e3:>10.1f}" if ok else f" {'-':>10}"
            lines.append(row)
    failed = [r for r in records if not r["ok"]]
    if failed:
        lines.append("\nfailed or wrong (not timed):")
        lines += [
            f"  {r['op']} {r['format']}:{r['matrix']} rows={r['rows']} k={r['k']} "
            f"{r['system']}: {r['error']}"
            for r in failed
        ]
    if skipped:
        lines.append("\nskipped:")
        lines += [f"  {s}" for s in skipped]
    return "\n".join(lines)


def _geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


# The k = 1 CSR matrices: the 5-point stencil, uniform 8 per row, power-law rows.
CSR_K1_TARGET_MATRICES = ("poisson2d-5pt", "random-8", "power-law")


def targets(records, bandwidth) -> dict:
    """The issue's targets, at the largest sizes (>= 1e6 rows) present in `records`, for
    the single call ("forward") and per product in the jitted loop ("loop")."""
    table = _lookup(records)
    out = {"dia": [], "csr": [], "gradient_over_forward": []}
    for key in _cases(records):
        op, fmt, matrix, rows, k = key
        ours = _time(table, key, "jaxsparse")
        if op not in ("forward", "loop") or rows < TARGET_ROWS or not ours or math.isnan(ours):
            continue
        record = table[(*key, "jaxsparse")]
        common = {"op": op, "matrix": matrix, "rows": rows, "k": k}
        fraction = model_bytes(record) / ours / 1e9 / bandwidth["numpy_add_gbs"]
        if fmt == "dia":
            out["dia"].append(
                {
                    **common,
                    "vs_scipy_dia": _ratio(table, key, ("scipy-dia",), ours),
                    "vs_scipy_csr": _ratio(table, key, ("scipy-csr",), ours),
                    "bandwidth_fraction": fraction,
                }
            )
        else:
            peers = ("scipy-csr",) if k == 1 else ("scipy-csr", "jax-bcsr")
            out["csr"].append(
                {
                    **common,
                    "vs_peers": _ratio(table, key, peers, ours),
                    "bandwidth_fraction": fraction,
                }
            )
    # The gradient step over the forward product: single calls, and per step over per
    # product in the jitted loops ("loop").
    for key in _cases(records):
        if key[0] not in GRADIENT_OVER_FORWARD:
            continue
        step = _time(table, key, "jaxsparse")
        forward = _time(table, (GRADIENT_OVER_FORWARD[key[0]], *key[1:]), "jaxsparse")
        record = table[(*key, "jaxsparse")]
        if step and forward and not math.isnan(step) and not math.isnan(forward):
            out["gradient_over_forward"].append(
                {
                    "op": "loop" if key[0] == "gradient_loop" else "forward",
                    "format": key[1],
                    "matrix": key[2],
                    "rows": key[3],
                    "k": key[4],
                    "ratio": step / forward,
                    "floor": gradient_model_bytes(record) / model_bytes(record),
                }
            )
    out["csr_k1_geomean"] = {
        op: _geomean(
            [
                c["vs_peers"]
                for c in out["csr"]
                if c["k"] == 1 and c["op"] == op and c["matrix"] in CSR_K1_TARGET_MATRICES
            ]
        )
        for op in ("forward", "loop")
    }
    return out


# Gradient-step op -> the forward op it is compared with.
GRADIENT_OVER_FORWARD = {"gradient": "forward", "gradient_loop": "loop"}


def _ratio(table, key, peers, ours):
    times = [t for s in peers if (t := _time(table, key, s)) and not math.isnan(t)]
    return min(times) / ours if times else None


def targets_text(t: dict) -> str:
    lines = ["\n== targets (>= 1e6 rows; ratio > 1: jaxsparse faster) =="]
    for c in t["dia"]:
        target = {1: "1.5", 8: "2"}.get(c["k"], "-")
        lines.append(
            f"DIA {c['op']:<7} {c['matrix']:<15} rows={c['rows']:>8} k={c['k']:>2}: "
            f"vs scipy DIA {_fmt(c['vs_scipy_dia'])} (target {target} in the loop), "
            f"vs scipy CSR {_fmt(c['vs_scipy_csr'])}, "
            f"bandwidth {100 * c['bandwidth_fraction']:.0f}% of streaming"
            + (" (target 75% in the loop)" if c["k"] == 1 else "")
        )
    for c in t["csr"]:
        peers, target = ("scipy", "1.2") if c["k"] == 1 else ("faster of scipy, BCSR", "1.5")
        lines.append(
            f"CSR {c['op']:<7} {c['matrix']:<15} rows={c['rows']:>8} k={c['k']:>2}: vs {peers} "
            f"{_fmt(c['vs_peers'])} (target {target}), "
            f"bandwidth {100 * c['bandwidth_fraction']:.0f}% of streaming"
        )
    for op, g in t["csr_k1_geomean"].items():
        lines.append(
            f"CSR k=1 geometric mean vs scipy ({', '.join(CSR_K1_TARGET_MATRICES)}), {op}: "
            f"{_fmt(g)} (target 1.5)"
        )
    for op in ("forward", "loop"):
        ratios = [r for r in t["gradient_over_forward"] if r.get("op", "forward") == op]
        for fmt in ("dia", "csr"):
            values = [r["ratio"] for r in ratios if r["format"] == fmt]
            big = [r["ratio"] for r in ratios if r["format"] == fmt and r["rows"] >= TARGET_ROWS]
            floors = sorted(r["floor"] for r in ratios if r["format"] == fmt)
            if values:
                lines.append(
                    f"gradient step / forward ({'single call' if op == 'forward' else op}), "
                    f"{fmt.upper()}: median {sorted(values)[len(values) // 2]:.2f}, "
                    f"max {max(values):.2f}"
                    + (f", at >= 1e6 rows max {max(big):.2f}" if big else "")
                    + f" (target <= 2.5; byte-model floor median {floors[len(floors) // 2]:.2f}, "
                    f"{floors[0]:.2f}-{floors[-1]:.2f})"
                )
    lines.append("gradient step / forward at >= 1e6 rows, single call / loop (byte-model floor):")
    ratios = {
        (r["format"], r["matrix"], r["k"], r["op"]): r
        for r in t["gradient_over_forward"]
        if r["rows"] >= TARGET_ROWS
    }
    for (fmt, matrix, k, op), r in sorted(ratios.items()):
        if op == "forward" and (loop := ratios.get((fmt, matrix, k, "loop"))):
            lines.append(
                f"  {fmt.upper()} {matrix:<15} k={k:>2}: {r['ratio']:.2f} / {loop['ratio']:.2f} "
                f"({r['floor']:.2f})"
            )
    return "\n".join(lines)


def _fmt(value):
    return "-" if value is None else f"{value:.2f}x"
