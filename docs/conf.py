"""The documentation site: Sphinx with MyST Markdown, built strictly (`make docs`, part of `make test`).

Every docs/*.md page is in the site (the index's toctree globs them), so a page added by anyone needs no list
entry; a broken link, a missing page or a page outside the toctree is a warning, and -W makes it an error.
"""

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
