"""The safe expression language of search-space files."""

from __future__ import annotations

import pytest

from tuner.expr import MAX_LENGTH, Expr, ExprError

KNOWN = {"ep_size", "enable_eplb", "proto", "lo", "hi", "name"}
ENV = {"ep_size": 4, "enable_eplb": True, "proto": None, "lo": 8, "hi": 16, "name": "tp8"}


def ev(text: str, env: dict | None = None):
    return Expr.parse(text, known=KNOWN).evaluate(ENV if env is None else env)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ep_size > 1", True),
        ("not (enable_eplb and ep_size == 1)", True),
        ("enable_eplb and ep_size", 4),  # Python's value semantics, not just bools
        ("proto or 'Simple'", "Simple"),
        ("1 < ep_size <= 4", True),
        ("1 < ep_size < 4", False),
        ("ep_size in (1, 2, 4)", True),
        ("ep_size not in [1, 2]", True),
        ("name in ['tp8', 'pp8']", True),
        ("proto is None", True),
        ("proto is not None", False),
        ("None is proto", True),
        ("lo + hi * 2 - 1", 39),
        ("hi / lo", 2.0),
        ("hi // 3", 5),
        ("hi % 3", 1),
        ("-lo + +hi", 8),
        ("'a' if ep_size > 2 else 'b'", "a"),
        ("min(lo, hi) + max(lo, hi, 20)", 28),
        ("abs(-3) + int('4') + float(1) + len(name)", 11.0),
        ("(-1, 2.5, 'x', None, True)", (-1, 2.5, "x", None, True)),
        ("  ep_size == 4  ", True),  # YAML often leaves surrounding spaces
        ("proto is None or proto == 'LL'", True),
    ],
)
def test_evaluates_the_whitelist(text, expected):
    assert ev(text) == expected


def test_names_records_the_parameters_read():
    assert Expr.parse("lo is None or hi is None or lo <= hi", known=KNOWN).names == {"lo", "hi"}
    assert Expr.parse("min(1, 2) == 1", known=KNOWN).names == frozenset()


def test_compile_once_evaluate_many():
    expr = Expr.parse("ep_size > 1", known=KNOWN)
    assert [expr({"ep_size": v}) for v in (1, 2, 8)] == [False, True, True]


def test_and_or_short_circuit_so_none_is_safe():
    # the right side would raise TypeError (None <= 8) if it were evaluated
    assert ev("proto is not None and proto <= 8") is False
    assert ev("proto is None or proto <= 8") is True


@pytest.mark.parametrize(
    ("text", "fragment", "column"),
    [
        ("__import__('os')", "call to '__import__' is not allowed", 1),
        ("ep_size.__class__", "attribute access", 8),
        ("  ep_size.real", "attribute access", 10),
        ("lambda: 1", "lambda", 1),
        ("[x for x in (1, 2)]", "list comprehension", 1),
        ("{x for x in (1, 2)}", "set comprehension", 1),
        ("(x for x in (1, 2))", "generator expression", 1),
        ("2 ** 999999999", "'**'", 1),
        ("ep_size[0]", "subscripting", 8),
        ("{'a': 1}", "dict display", 1),
        ("f'{ep_size}'", "f-string", 1),
        ("(lo := 3)", "assignment expression", 2),
        ("lo << 2", "'<<'", 1),
        ("~lo", "bitwise inversion", 1),
        ("ep_size is 4", "'is' / 'is not' may only compare with None", 1),
        ("open('/etc/passwd')", "call to 'open' is not allowed", 1),
        ("min(lo, key=abs)", "keyword arguments are not allowed", 9),
        ("min(*(1, 2))", "starred expression", 5),
        ("(lambda: 1)()", "call of a computed function", 1),
        ("b'x'", "bytes literal", 1),
        ("1j", "complex literal", 1),
        ("(1, lo)", "tuple and list items must be literals", 5),
        ("ep_size ==", "syntax error", None),
    ],
)
def test_rejects_everything_else_naming_construct_and_column(text, fragment, column):
    with pytest.raises(ExprError) as info:
        Expr.parse(text, known=KNOWN)
    assert fragment in str(info.value)
    if column is not None:
        assert info.value.column == column
        assert str(info.value).startswith(f"col {column}: ")


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ExprError) as info:
        Expr.parse("ep > 1", known=KNOWN)
    message = str(info.value)
    assert "unknown name 'ep'" in message
    assert "enable_eplb, ep_size, hi, lo, name, proto" in message


def test_function_names_are_not_values():
    with pytest.raises(ExprError, match="functions may only be called"):
        Expr.parse("len", known=KNOWN)


def test_without_known_names_any_name_parses_but_needs_a_value():
    expr = Expr.parse("x + 1")
    assert expr({"x": 1}) == 2
    with pytest.raises(ExprError, match="no value for 'x'"):
        expr({})


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("lo / 0", "ZeroDivisionError"),
        ("proto < 3", "TypeError"),
        ("int('x')", "ValueError"),
        ("'ab' * 100000", "longer than"),
        ("(1, 2) * 50000", "longer than"),
        ("max()", "TypeError"),
    ],
)
def test_evaluation_errors_are_expr_errors(text, fragment):
    expr = Expr.parse(text, known=KNOWN)
    with pytest.raises(ExprError) as info:
        expr(ENV)
    assert fragment in str(info.value)
    assert repr(text) in str(info.value)  # names the expression


def test_resource_limits():
    with pytest.raises(ExprError, match="longer than"):
        Expr.parse("1 + " * MAX_LENGTH + "1")
    with pytest.raises(ExprError, match=r"nested too deeply|syntax error"):
        Expr.parse("(" * 900 + "1" + ")" * 900)
    with pytest.raises(ExprError, match="empty"):
        Expr.parse("   ")
    with pytest.raises(ExprError, match="must be a string"):
        Expr.parse(3)  # type: ignore[arg-type]


def test_list_literals_are_fresh_each_time():
    expr = Expr.parse("[1, 2]")
    first = expr({})
    first.append(3)
    assert expr({}) == [1, 2]
