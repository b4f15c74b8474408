"""The spelling tables of the formula language (:mod:`derivations.parsing.formula_syntax`): which Unicode
characters, LaTeX commands, function names and decorations it reads, and how a written name becomes the one
plain identifier it stands for. Nothing here evaluates anything; every table is a closed lookup.

Names. ``W_{K}`` and ``W_K`` are ``W_K``; ``W_{O,h}`` is ``W_O_h``; a decoration becomes a suffix at the end
of the name, whatever the spelling: ``\\bar C_Q``, ``\\bar{C}_Q``, ``\\overline{C_Q}``, ``C̄_Q`` and ``C_Qbar``
are all ``C_Qbar`` (the name the rule modules print), ``\\hat m`` is ``mhat``, ``\\tilde W`` is ``Wtilde``,
and an optimum mark ``W^*``, ``W^\\star``, ``W^⋆`` is ``Wstar`` (``\\Delta W_Q^\\star`` is ``dW_Qstar``).
:func:`alternatives` lists the other spellings a derivation may use for the same name (``G_tilde``,
``Cbar_Q``, ``G_O1`` for ``G_O_1``), tried only when the name itself is unknown.
"""

from __future__ import annotations

import re

#: characters replaced before tokenizing (Σ is decided in context by the tokenizer: a sum or the matrix Σ)
UNICODE = {"ε": " epsilon ", "ϵ": " epsilon ", "λ": " lambda ", "η": " eta ", "α": " alpha ", "β": " beta ",
           "γ": " gamma ", "μ": " mu ", "τ": " tau ", "ρ": " rho ", "θ": " theta ", "κ": " kappa ", "ν": " nu ",
           "δ": " delta ", "σ": " sigma ", "∑": " \\sum ", "⊗": " \\otimes ", "≔": ":=", "≥": ">=", "≤": "<=",
           "⋆": "\\star ", "½": "(1/2)", "−": "-", "·": "*", "⋅": "*", "×": "*", "ᵀ": ".T", "⊤": "T",
           "⁻ᵀ": "^(-T)", "⟨": "<", "⟩": ">", "‖": "||", "∗": "*", "Δ": "\\Delta "}

#: LaTeX Greek letters read as names (``\\Sigma`` is the diagonal matrix of an SVD where one is in scope)
GREEK = {"varepsilon": "epsilon", "epsilon": "epsilon", "lambda": "lambda", "eta": "eta", "alpha": "alpha",
         "beta": "beta", "gamma": "gamma", "mu": "mu", "sigma": "sigma", "tau": "tau", "rho": "rho",
         "delta": "delta", "theta": "theta", "kappa": "kappa", "nu": "nu", "Sigma": "Sigma"}

#: LaTeX commands that only change the typesetting (dropped)
DROP = {"left", "right", "big", "Big", "bigl", "bigr", "Bigl", "Bigr", "bigg", "Bigg", "biggl", "biggr",
        "displaystyle", "mathbf", "boldsymbol", "bm", "limits", "nolimits", "mathop"}

#: decorations: LaTeX command or combining character -> the suffix it adds to the name
DECORATIONS = {"bar": "bar", "overline": "bar", "hat": "hat", "widehat": "hat", "tilde": "tilde",
               "widetilde": "tilde"}
COMBINING = {"\u0304": "bar", "\u0305": "bar", "\u0302": "hat", "\u0303": "tilde"}
STAR = "star"  # the suffix of an optimum mark W^*, W^\star

#: relations in a sum's subscript (``\\sum_{i>r}``) -> one of = > >= < <=
RELATIONS = {"=": "=", ">": ">", ">=": ">=", "<": "<", "<=": "<=", "\\le": "<=", "\\leq": "<=", "\\ge": ">=",
             "\\geq": ">=", "\\lt": "<", "\\gt": ">", "\\leqslant": "<=", "\\geqslant": ">="}

SUM_TERMS = 3  # terms of a sum over heads with no numeric bounds (\sum_h X_h): h = 1, 2, 3
MAX_SUM_TERMS = 16  # numeric bounds beyond this many terms are refused

#: the functions of the language (``trace`` and ``Tr`` are ``tr``; ``svd`` only on the right of a definition)
FUNCTIONS = ("msign", "inv", "sqrtm", "tr", "trace", "blockdiag", "sqrt", "transpose", "min", "max", "rank",
             "kron", "vec", "matrix_power", "svd")
ALIASES = {"Tr": "tr", "trace": "tr", "matrix_rank": "rank"}

#: module paths of NumPy, JAX and SciPy spellings (``jnp.linalg.inv(X)``): the path -> the function
_MODULES = ("np", "numpy", "jnp", "jax.numpy")
DOTTED = {f"{m}.{path}": fn for m in _MODULES for path, fn in (
    ("linalg.inv", "inv"), ("linalg.matrix_power", "matrix_power"), ("linalg.matrix_rank", "rank"),
    ("trace", "tr"), ("kron", "kron"), ("transpose", "transpose"), ("sqrt", "sqrt"), ("minimum", "min"),
    ("maximum", "max"))}
DOTTED.update({f"{m}.linalg.{fn}": fn for m in ("scipy", "jax.scipy") for fn in ("inv", "sqrtm")})
DOTTED.update({"scipy.linalg.kron": "kron", "math.sqrt": "sqrt"})
#: module paths refused with a reason instead of "unknown function"
DOTTED_REFUSED = {f"{m}.linalg.svd": f"{m}.linalg.svd returns (U, S, Vh) with S a vector; write U, Σ, V = svd(G)"
                  for m in _MODULES}
DOTTED_REFUSED.update({f"{m}.linalg.pinv": "the pseudo-inverse is not in the language; write inv(X^T X) X^T for "
                                           "a matrix X of full column rank" for m in _MODULES})

#: words that end an expression and start a definition clause (``… where L = G G^T``)
WHERE_WORDS = ("where", "with")


def normalize_name(text: str) -> str:
    """The plain identifier of a name token: braces dropped (``W_{K}`` → ``W_K``, ``W_{O,h}`` → ``W_O_h``),
    combining decorations moved to the end (``C̄_Q`` → ``C_Qbar``), ``eps``/``lam`` spelled out."""
    suffix = ""
    for mark, word in COMBINING.items():
        if mark in text:
            text = text.replace(mark, "")
            suffix += word
    name = re.sub(r"\{([^{}]*)\}", lambda m: "_".join(p.strip() for p in m.group(1).split(",")), text)
    name = {"eps": "epsilon", "lam": "lambda"}.get(name, name)
    return name + suffix


def decorate(name: str, word: str) -> str:
    """``name`` with a decoration suffix (``C_Q``, ``bar`` → ``C_Qbar``)."""
    return name + word


_SUFFIXES = ("bar", "hat", "tilde", STAR)


def alternatives(name: str) -> list[str]:
    """Other spellings of ``name`` a derivation may print: ``Gtilde`` ↔ ``G_tilde``, ``C_Qbar`` ↔ ``Cbar_Q``,
    ``G_O_1`` → ``G_O1`` (an index joined to the name)."""
    out = []
    for word in _SUFFIXES:
        if name.endswith(word) and len(name) > len(word):
            stem = name[: -len(word)]
            if not stem.endswith("_"):
                out.append(f"{stem}_{word}")
            base, sep, rest = stem.partition("_")
            if sep:
                out.append(f"{base}{word}_{rest}")
    base, sep, rest = name.partition("_")
    for word in _SUFFIXES:
        if sep and base.endswith(word) and len(base) > len(word):
            out.append(f"{base[: -len(word)]}_{rest}{word}")
    parts = name.split("_")
    if len(parts) > 2 and parts[-1].isdigit():
        out.append("_".join(parts[:-2]) + "_" + parts[-2] + parts[-1])
    return [o for o in out if o != name]


__all__ = ["ALIASES", "COMBINING", "DECORATIONS", "DOTTED", "DOTTED_REFUSED", "DROP", "FUNCTIONS", "GREEK",
           "MAX_SUM_TERMS", "RELATIONS", "STAR", "SUM_TERMS", "UNICODE", "WHERE_WORDS", "alternatives", "decorate",
           "normalize_name"]
