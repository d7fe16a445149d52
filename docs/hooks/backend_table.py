"""An mkdocs hook: the backends page's tables rendered from `jaxsparse._backend` at build
time, so the site never holds a copy of the table that can drift from the code.

A page writes `{{ backend_table }}` or `{{ export_table }}` where a table goes.
"""

import jaxsparse._backend as backend

REQUESTS = backend.BACKENDS


def _families(names) -> str:
    return ", ".join(f"`{name}`" for name in names) if names else "error"


def backend_table() -> str:
    """What each request runs on each platform: the families in order of preference."""
    rows = ["| platform | " + " | ".join(f'`"{r}"`' for r in REQUESTS) + " |"]
    rows.append("|---" * (len(REQUESTS) + 1) + "|")
    for platform in backend.PLATFORMS:
        cells = [_families(backend.PREFERENCES.get((r, platform), ())) for r in REQUESTS]
        rows.append(f"| {platform} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def export_table() -> str:
    """The families `"auto"` keeps when `jax.export` lowers a program, per platform."""
    rows = ['| platform | `"auto"` exports |', "|---|---|"]
    for platform in backend.PLATFORMS:
        rows.append(f"| {platform} | {_families(backend.EXPORTABLE.get(platform, ()))} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **kwargs) -> str:
    return markdown.replace("{{ backend_table }}", backend_table()).replace(
        "{{ export_table }}", export_table()
    )
