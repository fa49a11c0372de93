"""The documentation site: Sphinx with MyST Markdown, built strictly (`make docs`, part of `make test`).

Every docs/*.md page is in the site (the index's toctree globs them), so a page added by anyone needs no list
entry; a broken link, a missing page or a page outside the toctree is a warning, and -W makes it an error.
"""

from typing import Any

project = "Treadle"
author = "Treadle"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "README.md"]
myst_heading_anchors = 3  # [text](page.md#a-heading) links are checked like page links
myst_enable_extensions = ["colon_fence"]
html_theme = "alabaster"
html_title = "Treadle"
html_theme_options = {"nosidebar": False, "show_relbars": True}
html_static_path: list[str] = []
# an example with an ellipsis is not strict JSON: shown plain, not a failure
suppress_warnings = ["misc.highlighting_failure"]

# The HTTP API page lists every operation of the OpenAPI document, rendered at build time from
# schemas/openapi.json (which a test keeps equal to what the gateway serves), so the list cannot drift.
OPERATIONS_MARKER = "<!-- openapi-operations -->"


def _operations_table() -> str:
    import json
    from pathlib import Path

    document = json.loads((Path(__file__).resolve().parent.parent / "schemas" / "openapi.json").read_text())
    rows = ["| method and path | operation id | tag | summary |", "|---|---|---|---|"]
    for path, item in document["paths"].items():
        for method in ("get", "post", "put", "patch", "delete"):
            if (operation := item.get(method)) is not None:
                summary = (operation.get("summary") or "").replace("|", "\\|")
                tag = ", ".join(operation.get("tags", []))
                rows.append(f"| `{method.upper()} {path}` | `{operation['operationId']}` | {tag} | {summary} |")
    return "\n".join(rows)


def _render_operations(app: Any, docname: str, source: list[str]) -> None:
    if OPERATIONS_MARKER in source[0]:
        source[0] = source[0].replace(OPERATIONS_MARKER, _operations_table())


def setup(app: Any) -> dict[str, bool]:
    app.connect("source-read", _render_operations)
    return {"parallel_read_safe": True}
