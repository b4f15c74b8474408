"""Checks of LaTeX text shared by the tests of the docs pages and of the notebook reprs."""


def balanced(tex: str) -> bool:
    """Every ``{`` closed by a ``}`` after it (escaped braces ``\\{``, ``\\}`` not counted)."""
    depth = 0
    for ch in tex.replace(r"\{", "").replace(r"\}", ""):
        depth += (ch == "{") - (ch == "}")
        if depth < 0:
            return False
    return depth == 0
