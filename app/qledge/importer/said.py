"""A sentence of the import report that also carries a stable code (pure, no imports:
the source readers and the planner both use it)."""

from __future__ import annotations


class Said(str):
    """An English sentence of the report that also carries its stable `code` and the
    `params` a translation needs (report.as_json sends both: the panel says it in the
    reader's language from i18n.js `imp.why.<code>`). Params are names and numbers the
    report shows anyway (a label, a path in scripts/), never a value."""

    code: str
    params: dict[str, str]

    def __new__(cls, code: str, english: str, **params: str) -> Said:
        self = super().__new__(cls, english)
        self.code = code
        self.params = params
        return self


said = Said
