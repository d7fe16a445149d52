"""An mkdocs hook: the backends page's tables rendered from `jaxsparse._families` and
`jaxsparse._backend` at build time, so the site never holds a copy of a table that can
drift from the code.

A page writes `{{ backend_table }}`, `{{ export_table }}` or `{{ family_table }}` where a
table goes.
"""

import jaxsparse._backend as backend
from jaxsparse._families import FAMILIES, PLATFORMS

REQUESTS = backend.BACKENDS


def _families(names) -> str:
    return ", ".join(f"`{name}`" for name in names) if names else "error"


def backend_table() -> str:
    """What each request runs on each platform: the families in order of preference."""
    rows = ["| platform | " + " | ".join(f'`"{r}"`' for r in REQUESTS) + " |"]
    rows.append("|---" * (len(REQUESTS) + 1) + "|")
    for platform in PLATFORMS:
        cells = [_families(backend.PREFERENCES[r, platform]) for r in REQUESTS]
        rows.append(f"| {platform} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def export_table() -> str:
    """The families `"auto"` keeps when `jax.export` lowers a program, per platform."""
    rows = ['| platform | `"auto"` exports |', "|---|---|"]
    for platform in PLATFORMS:
        exported = [
            f for f in backend.PREFERENCES["auto", platform] if platform in FAMILIES[f].exports
        ]
        rows.append(f"| {platform} | {_families(exported)} |")
    return "\n".join(rows)


def family_table() -> str:
    """Each family: what it is, the formats it computes, and its files."""
    rows = ["| family | what | formats | files |", "|---|---|---|---|"]
    for family in FAMILIES.values():
        formats = ", ".join(name.upper() for name in family.formats)
        rows.append(f"| `{family.name}` | {family.summary} | {formats} | {family.files} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **kwargs) -> str:
    for name, table in (
        ("backend_table", backend_table),
        ("export_table", export_table),
        ("family_table", family_table),
    ):
        markdown = markdown.replace("{{ " + name + " }}", table())
    return markdown
