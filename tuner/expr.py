"""A small, safe expression language for search-space files.

Search-space files carry conditions (a parameter's ``when``) and constraints
(``not (enable_eplb and ep_size == 1)``). They are user text, so they are never handed
to ``eval``: :meth:`Expr.parse` parses them with :func:`ast.parse` and compiles the
tree into a closure that interprets a fixed whitelist of constructs. Anything outside
it fails at load time with an :class:`ExprError` that names the construct and its
column, so a bad file is reported before a study starts, not in the middle of one.

Allowed: literals (int, float, str, bool, None), names bound to parameter values,
``and``/``or``/``not``, comparisons (``== != < <= > >= in``, ``not in``, chained;
``is``/``is not`` only against ``None``), ``+ - * / // %``, unary ``-``/``+``,
``x if c else y``, tuples and lists of literals, and calls to ``min``, ``max``,
``abs``, ``int``, ``float`` and ``len``. ``**`` is left out on purpose: it is the
easy way to make an expression that never finishes.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any

#: Longest expression text accepted; deeply nested input could exhaust the parser's stack.
MAX_LENGTH = 2000
#: Longest string or sequence a ``*`` may build (``"x" * 10**9`` would exhaust memory).
MAX_SEQUENCE_LENGTH = 10_000

FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "abs": abs,
    "int": int,
    "float": float,
    "len": len,
}

_LITERAL_TYPES = (int, float, str, bool, type(None))

_BINARY: dict[type[ast.operator], tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Add: ("+", operator.add),
    ast.Sub: ("-", operator.sub),
    ast.Mult: ("*", operator.mul),
    ast.Div: ("/", operator.truediv),
    ast.FloorDiv: ("//", operator.floordiv),
    ast.Mod: ("%", operator.mod),
}

_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}

#: Names of constructs people are likely to try, for the error message.
_CONSTRUCT_NAMES: dict[type[ast.AST], str] = {
    ast.Attribute: "attribute access",
    ast.Subscript: "subscripting",
    ast.Lambda: "lambda",
    ast.ListComp: "list comprehension",
    ast.SetComp: "set comprehension",
    ast.DictComp: "dict comprehension",
    ast.GeneratorExp: "generator expression",
    ast.Dict: "dict display",
    ast.Set: "set display",
    ast.JoinedStr: "f-string",
    ast.NamedExpr: "assignment expression (:=)",
    ast.Starred: "starred expression",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield from",
    ast.Slice: "slice",
}

_Evaluator = Callable[[Mapping[str, Any]], Any]


class ExprError(ValueError):
    """An expression that cannot be parsed, uses a construct outside the whitelist,
    names an unknown parameter, or fails while being evaluated."""

    def __init__(self, message: str, *, column: int | None = None, text: str | None = None):
        self.column = column
        self.text = text
        self.reason = message
        where = f"col {column}: " if column is not None else ""
        super().__init__(f"{where}{message}")


class _Compiler:
    """Turns an AST into nested closures, checking every node against the whitelist."""

    def __init__(self, known: frozenset[str] | None, offset: int = 0):
        self.known = known
        self.offset = offset
        self.names: set[str] = set()

    def _col(self, node: ast.AST) -> int:
        """1-based column of ``node`` in the text as the user wrote it."""
        return getattr(node, "col_offset", 0) + 1 + self.offset

    def compile(self, node: ast.AST) -> _Evaluator:
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            what = _CONSTRUCT_NAMES.get(type(node), type(node).__name__)
            column = self._col(node)
            if isinstance(node, ast.Attribute | ast.Subscript) and node.value.end_col_offset is not None:
                column = node.value.end_col_offset + 1 + self.offset  # at the '.' or '['
            raise ExprError(f"{what} is not allowed in expressions", column=column)
        return method(node)

    def _Constant(self, node: ast.Constant) -> _Evaluator:
        value = node.value
        if not isinstance(value, _LITERAL_TYPES):
            raise ExprError(f"{type(value).__name__} literal is not allowed", column=self._col(node))
        return lambda env: value

    def _Name(self, node: ast.Name) -> _Evaluator:
        name = node.id
        if self.known is not None and name not in self.known:
            known = ", ".join(sorted(self.known)) or "(none)"
            hint = " (functions may only be called)" if name in FUNCTIONS else ""
            raise ExprError(f"unknown name {name!r}{hint}; known names: {known}", column=self._col(node))
        self.names.add(name)

        def lookup(env: Mapping[str, Any]) -> Any:
            try:
                return env[name]
            except KeyError:
                raise ExprError(f"no value for {name!r}", column=self._col(node)) from None

        return lookup

    def _BoolOp(self, node: ast.BoolOp) -> _Evaluator:
        parts = [self.compile(v) for v in node.values]
        if isinstance(node.op, ast.And):

            def and_(env: Mapping[str, Any]) -> Any:
                value = None
                for part in parts:
                    value = part(env)
                    if not value:
                        return value
                return value

            return and_

        def or_(env: Mapping[str, Any]) -> Any:
            value = None
            for part in parts:
                value = part(env)
                if value:
                    return value
            return value

        return or_

    def _UnaryOp(self, node: ast.UnaryOp) -> _Evaluator:
        operand = self.compile(node.operand)
        if isinstance(node.op, ast.Not):
            return lambda env: not operand(env)
        if isinstance(node.op, ast.USub):
            return lambda env: -operand(env)
        if isinstance(node.op, ast.UAdd):
            return lambda env: +operand(env)
        raise ExprError("bitwise inversion (~) is not allowed", column=self._col(node))

    def _BinOp(self, node: ast.BinOp) -> _Evaluator:
        entry = _BINARY.get(type(node.op))
        if entry is None:
            symbol = {
                ast.Pow: "**",
                ast.MatMult: "@",
                ast.LShift: "<<",
                ast.RShift: ">>",
                ast.BitOr: "|",
                ast.BitAnd: "&",
                ast.BitXor: "^",
            }.get(type(node.op), "?")
            raise ExprError(f"operator {symbol!r} is not allowed", column=self._col(node))
        symbol, func = entry
        left, right = self.compile(node.left), self.compile(node.right)

        def binop(env: Mapping[str, Any]) -> Any:
            a, b = left(env), right(env)
            if symbol == "*" and _repeat_length(a, b) > MAX_SEQUENCE_LENGTH:
                raise ExprError(
                    f"'*' would build a sequence longer than {MAX_SEQUENCE_LENGTH}", column=self._col(node)
                )
            return func(a, b)

        return binop

    def _Compare(self, node: ast.Compare) -> _Evaluator:
        operands = [self.compile(node.left)] + [self.compile(c) for c in node.comparators]
        raw = [node.left, *node.comparators]
        funcs = []
        for i, op in enumerate(node.ops):
            if isinstance(op, ast.Is | ast.IsNot) and not any(
                isinstance(n, ast.Constant) and n.value is None for n in raw[i : i + 2]
            ):
                raise ExprError(
                    "'is' / 'is not' may only compare with None (use == / !=)", column=self._col(node)
                )
            funcs.append(_COMPARE[type(op)])

        def compare(env: Mapping[str, Any]) -> bool:
            left = operands[0](env)
            for func, operand in zip(funcs, operands[1:], strict=True):
                right = operand(env)
                if not func(left, right):
                    return False
                left = right
            return True

        return compare

    def _IfExp(self, node: ast.IfExp) -> _Evaluator:
        test, body, orelse = self.compile(node.test), self.compile(node.body), self.compile(node.orelse)
        return lambda env: body(env) if test(env) else orelse(env)

    def _literal_items(self, node: ast.Tuple | ast.List) -> list[Any]:
        items = []
        for elt in node.elts:
            value = _literal_value(elt)
            if value is _NOT_LITERAL:
                raise ExprError("tuple and list items must be literals", column=self._col(elt))
            items.append(value)
        return items

    def _Tuple(self, node: ast.Tuple) -> _Evaluator:
        value = tuple(self._literal_items(node))
        return lambda env: value

    def _List(self, node: ast.List) -> _Evaluator:
        items = tuple(self._literal_items(node))
        # a fresh list each time: nothing can mutate it, but a shared one would alias
        return lambda env: list(items)

    def _Call(self, node: ast.Call) -> _Evaluator:
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            target = node.func.id if isinstance(node.func, ast.Name) else None
            allowed = ", ".join(FUNCTIONS)
            what = f"call to {target!r}" if target else "call of a computed function"
            raise ExprError(f"{what} is not allowed; allowed functions: {allowed}", column=self._col(node))
        if node.keywords:
            raise ExprError("keyword arguments are not allowed", column=self._col(node.keywords[0]))
        func = FUNCTIONS[node.func.id]
        args = [self.compile(a) for a in node.args]
        return lambda env: func(*(a(env) for a in args))


_NOT_LITERAL = object()


def _literal_value(node: ast.AST) -> Any:
    """The value of a literal item (``3``, ``-1.5``, ``"LL"``, ``None``), or _NOT_LITERAL."""
    if isinstance(node, ast.Constant) and isinstance(node.value, _LITERAL_TYPES):
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub | ast.UAdd)
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, int | float)
        and not isinstance(node.operand.value, bool)
    ):
        return -node.operand.value if isinstance(node.op, ast.USub) else node.operand.value
    return _NOT_LITERAL


def _repeat_length(a: Any, b: Any) -> int:
    """Length of ``a * b`` when it repeats a sequence, else 0."""
    for seq, count in ((a, b), (b, a)):
        if isinstance(seq, str | list | tuple) and isinstance(count, int):
            return len(seq) * max(count, 0)
    return 0


class Expr:
    """A compiled expression: parse (and check) once, evaluate many times."""

    __slots__ = ("_fn", "names", "text")

    def __init__(self, text: str, fn: _Evaluator, names: frozenset[str]):
        self.text = text
        self._fn = fn
        #: the parameter names the expression reads
        self.names = names

    @classmethod
    def parse(cls, text: str, known: Iterable[str] | None = None) -> Expr:
        """Parse ``text``; with ``known``, every name it uses must be one of them.

        Raises :class:`ExprError` naming the construct and its (1-based) column.
        """
        if not isinstance(text, str):
            raise ExprError(f"an expression must be a string, not {type(text).__name__}")
        if not text.strip():
            raise ExprError("empty expression")
        if len(text) > MAX_LENGTH:
            raise ExprError(f"expression longer than {MAX_LENGTH} characters")
        offset = len(text) - len(text.lstrip())
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            column = exc.offset + offset if exc.offset is not None else None
            raise ExprError(f"syntax error: {exc.msg}", column=column, text=text) from None
        except (RecursionError, MemoryError):
            raise ExprError("expression nested too deeply", text=text) from None
        compiler = _Compiler(frozenset(known) if known is not None else None, offset)
        try:
            fn = compiler.compile(tree.body)
        except RecursionError:
            raise ExprError("expression nested too deeply", text=text) from None
        except ExprError as exc:
            exc.text = text
            raise
        return cls(text, fn, frozenset(compiler.names))

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        """Evaluate with ``env`` binding names to values.

        Errors in the expression's arithmetic or types (``None > 4``, ``1 / 0``) raise
        :class:`ExprError` naming the expression.
        """
        try:
            return self._fn(env)
        except ExprError as exc:
            raise ExprError(f"{exc.reason} in {self.text!r}", column=exc.column, text=self.text) from None
        except (TypeError, ValueError, ArithmeticError, RecursionError) as exc:
            raise ExprError(
                f"cannot evaluate {self.text!r}: {type(exc).__name__}: {exc}", text=self.text
            ) from None

    def __call__(self, env: Mapping[str, Any]) -> Any:
        return self.evaluate(env)

    def __repr__(self) -> str:
        return f"Expr({self.text!r})"
