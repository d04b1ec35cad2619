"""Control characters out of text fields (NUL and friends break Parquet readers, terminals and tokenizers)."""
from __future__ import annotations

import re

# C0 controls but tab/newline/carriage return, DEL; for one-line fields also tab/newlines and C1 controls
_TEXT_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_LINE_BREAKS = re.compile(r"[\t\n\r\x0b\x0c\x1c-\x1f\x85\u2028\u2029]")
_LINE_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\ufffd]")


def strip_controls(value: str | None, one_line: bool = False) -> str | None:
    """``value`` without control characters (None stays None).

    Args:
        one_line: a metadata field such as a title: tabs and line breaks become a space, the other
            C0/C1 controls and U+FFFD (what an HTML parser makes of a NUL) are removed, and runs of
            whitespace collapse to one space; otherwise (a body text) NUL and the other C0
            controls except tab, newline and carriage return are removed, and C1 controls are kept
            (the cleaning stage's mojibake rule reads them).
    """
    if value is None:
        return None
    if one_line:
        return " ".join(_LINE_CONTROLS.sub("", _LINE_BREAKS.sub(" ", value)).split())
    return _TEXT_CONTROLS.sub("", value)
