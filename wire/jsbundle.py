"""A small bundler for the page's own ES modules: one entry and what it imports, as ONE classic script.

The page's modules (static/js) import each other with `import { a, b as c } from "./x.js";` and export with
`export function/async function/class/const/let/var NAME` and `export { a, b as c };`. A file opened from disk,
or a notebook's sandboxed iframe, cannot load modules, so a standalone page gets them inlined:

    (() => {
    "use strict";
    const __attnlab_colors = (() => {
      ...colors.js, its `export` keywords stripped...
      return { VIRIDIS, colorAt, ... };
    })();
    const __attnlab_heatmap = (() => {
      const { colorAt, MASK_FILL } = __attnlab_colors;   // import { colorAt, MASK_FILL } from "./colors.js";
      ...heatmap.js...
      return { drawHeatmap, ... };
    })();
    __attnlab_standalone.boot();                          // the entry's `call`, when given
    })();

Each module runs once, in a function scope of its own, after the modules it imports (a depth-first order), so an
import is the exported value once its module has run: what ES modules give for everything but an exported `let`
that its module reassigns later (the importer keeps the value it had when its module finished running).

Anything else raises BundleError rather than produce a script that fails in the browser: default and namespace
imports, `export default`, re-exports (`export ... from`), dynamic `import()` and `import.meta`, an `export const`
with more than one declarator or a destructuring pattern, an import of a name its module does not export, a
specifier that is not "./name.js", a module in `forbid`, and an import cycle. A small lexer finds the top-level
statements: strings, template literals, comments and regular expression literals are skipped, so an "import" in
any of them is left alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path


class BundleError(ValueError):
    """A module uses syntax the bundler does not handle, or the modules do not link (a missing name, a cycle)."""


IDENT = r"[A-Za-z_$][\w$]*"
SPECIFIER = re.compile(r"\./([A-Za-z0-9_-]+\.js)")
IMPORT_NAMED = re.compile(r"import\s*\{(?P<names>[^}]*)\}\s*from\s*(?P<q>[\"'])(?P<spec>[^\"']*)(?P=q)\s*;?")
IMPORT_BARE = re.compile(r"import\s*(?P<q>[\"'])(?P<spec>[^\"']*)(?P=q)\s*;?")
EXPORT_LIST = re.compile(r"export\s*\{(?P<names>[^}]*)\}(?P<reexport>\s*from\b)?\s*;?")
EXPORT_DECL = re.compile(
    rf"export\s+(?P<kw>async\s+function\s*\*?|function\s*\*?|class|const|let|var)\s*(?P<name>{IDENT})?"
)
# after these a `/` starts a regular expression, not a division
REGEX_AFTER_WORDS = {
    "return",
    "typeof",
    "instanceof",
    "in",
    "of",
    "new",
    "delete",
    "void",
    "throw",
    "case",
    "do",
    "else",
}
REGEX_AFTER_PUNCT = set("(,=:[!&|?{};+-*%<>~^")


@dataclass
class Statement:
    kind: str  # "import" or "export"
    start: int
    end: int  # exclusive; for a declaration, the end of the `export` keyword only
    imports: list[tuple[str, str]] = field(default_factory=list)  # (exported name, local name)
    source: str | None = None  # the imported file, "x.js"
    exports: list[tuple[str, str]] = field(default_factory=list)  # (local name, exported name)


@dataclass
class Module:
    name: str
    body: str  # the source with its import statements removed and its `export` keywords stripped
    imports: list[tuple[str, list[tuple[str, str]]]]  # (file, [(exported, local)]) in source order
    exports: list[tuple[str, str]]  # (local, exported)


def _line(source: str, at: int) -> int:
    return source.count("\n", 0, at) + 1


@dataclass
class Scan:
    keywords: list[tuple[int, str, int]]  # (position, "import" | "export", depth): 0 at the top level
    commas: list[int]  # positions of the top level's commas and semicolons
    semicolons: list[int]


def _scan(source: str, name: str) -> Scan:
    """Each `import`/`export` token in code (not in strings, comments, templates or regular expressions), with the
    open brackets around it counted, and the top level's commas and semicolons."""
    found: list[tuple[int, str, int]] = []
    commas: list[int] = []
    semicolons: list[int] = []
    depth = 0
    templates: list[int] = []  # for each `${` open inside a template literal: the depth it opened at
    prev = ""  # the last significant code token (a punctuator, or a word)
    i, n = 0, len(source)

    def fail(msg: str, at: int) -> BundleError:
        return BundleError(f"{name}:{_line(source, at)}: {msg}")

    def skip_template(j: int) -> tuple[int, bool]:
        """From inside a template literal at j: the position after its closing backtick (False) or after a `${`
        (True)."""
        while j < n:
            c = source[j]
            if c == "\\":
                j += 2
            elif c == "`":
                return j + 1, False
            elif c == "$" and source.startswith("${", j):
                return j + 2, True
            else:
                j += 1
        raise fail("unterminated template literal", j)

    while i < n:
        c = source[i]
        if c in " \t\r\n":
            i += 1
        elif source.startswith("//", i):
            end = source.find("\n", i)
            i = n if end < 0 else end
        elif source.startswith("/*", i):
            end = source.find("*/", i + 2)
            if end < 0:
                raise fail("unterminated comment", i)
            i = end + 2
        elif c in "'\"":
            j = i + 1
            while j < n and source[j] != c:
                if source[j] == "\n":
                    raise fail("unterminated string", i)
                j += 2 if source[j] == "\\" else 1
            if j >= n:
                raise fail("unterminated string", i)
            i = j + 1
            prev = "str"
        elif c == "`":
            i, opened = skip_template(i + 1)
            if opened:
                templates.append(depth)
                depth += 1
                prev = "{"
            else:
                prev = "str"
        elif c == "/":
            if prev in REGEX_AFTER_PUNCT or prev in REGEX_AFTER_WORDS or prev == "":
                j, in_class = i + 1, False
                while j < n:
                    d = source[j]
                    if d == "\\":
                        j += 2
                        continue
                    if d == "\n":
                        raise fail("unterminated regular expression", i)
                    if d == "[":
                        in_class = True
                    elif d == "]":
                        in_class = False
                    elif d == "/" and not in_class:
                        break
                    j += 1
                j += 1
                while j < n and (source[j].isalnum() or source[j] in "_$"):
                    j += 1
                i = j
                prev = "str"
            else:
                i += 1
                prev = "/"
        elif c in "([{":
            depth += 1
            i += 1
            prev = c
        elif c in ")]}":
            if c == "}" and templates and templates[-1] == depth - 1:
                templates.pop()
                depth -= 1
                i, opened = skip_template(i + 1)
                if opened:
                    templates.append(depth)
                    depth += 1
                    prev = "{"
                else:
                    prev = "str"
                continue
            depth -= 1
            if depth < 0:
                raise fail(f"unbalanced {c!r}", i)
            i += 1
            prev = ")" if c != "}" else "}"
        elif c.isalpha() or c in "_$" or (c == "\\" and source.startswith("\\u", i)):
            m = re.compile(r"[\w$]+").match(source, i)
            assert m is not None
            word = m.group()
            if word in ("import", "export") and prev != ".":  # not obj.import
                found.append((i, word, depth))
            i = m.end()
            prev = word
        elif c.isdigit():
            m = re.compile(r"[\w.]+").match(source, i)
            assert m is not None
            i = m.end()
            prev = "num"
        else:
            # a punctuator; `++`/`--` end an operand, so a `/` after them divides
            if source.startswith(("++", "--"), i):
                i += 2
                prev = ")"
            else:
                if depth == 0 and c == ",":
                    commas.append(i)
                elif depth == 0 and c == ";":
                    semicolons.append(i)
                i += 1
                prev = c
    if depth != 0 or templates:
        raise fail("unbalanced brackets at the end of the file", n)
    return Scan(found, commas, semicolons)


def _names(text: str, where: str) -> list[tuple[str, str]]:
    """`a, b as c` -> [("a", "a"), ("b", "c")]."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        m = re.fullmatch(rf"({IDENT})(?:\s+as\s+({IDENT}))?", part)
        if m is None:
            raise BundleError(f"{where}: cannot read {part!r} in an import or export list")
        out.append((m.group(1), m.group(2) or m.group(1)))
    return out


def _one_declarator(scan: Scan, at: int, name: str, where: str) -> None:
    """Refuse `export const a = 1, b = 2` (one declarator per export): a top-level comma before the declaration's
    semicolon; and a declaration with no semicolon after it (this bundler does not insert them)."""
    end = next((p for p in scan.semicolons if p > at), None)
    if end is None:
        raise BundleError(f"{where}: export {name}: end the declaration with a semicolon")
    if any(at < p < end for p in scan.commas):
        raise BundleError(f"{where}: export {name}: one declarator per exported const/let/var")


def parse_module(name: str, source: str) -> Module:
    """Split a module into its imports, its exports and its body (the code, with those statements removed)."""
    statements: list[Statement] = []
    scan = _scan(source, name)
    for at, word, depth in scan.keywords:
        where = f"{name}:{_line(source, at)}"
        rest = source[at + len(word) :].lstrip()
        if word == "import" and rest[:1] in ("(", "."):
            raise BundleError(f"{where}: dynamic import() and import.meta are not bundled; import statically")
        if depth != 0:
            raise BundleError(f"{where}: {word} inside a block")
        if word == "import":
            m = IMPORT_NAMED.match(source, at)
            if m is not None:
                imports = _names(m.group("names"), where)
            else:
                m = IMPORT_BARE.match(source, at)
                imports = []
            if m is None:
                snippet = source[at : source.find("\n", at)]
                raise BundleError(f'{where}: only `import {{ a, b as c }} from "./x.js"` is bundled: {snippet!r}')
            spec = SPECIFIER.fullmatch(m.group("spec"))
            if spec is None:
                raise BundleError(f'{where}: import specifier {m.group("spec")!r}: only "./name.js" is bundled')
            statements.append(Statement("import", at, m.end(), imports=imports, source=spec.group(1)))
            continue
        m = EXPORT_LIST.match(source, at)
        if m is not None:
            if m.group("reexport"):
                raise BundleError(f"{where}: re-exports (export {{...}} from) are not bundled")
            statements.append(Statement("export", at, m.end(), exports=_names(m.group("names"), where)))
            continue
        m = EXPORT_DECL.match(source, at)
        if m is None or m.group("name") is None:
            snippet = source[at : source.find("\n", at)]
            raise BundleError(
                f"{where}: only export function/class/const/let/var NAME and export {{ a, b }} are bundled: {snippet!r}"
            )
        ident = m.group("name")
        if m.group("kw") in ("const", "let", "var"):
            _one_declarator(scan, at, ident, where)
        keyword_end = at + len("export")
        while source[keyword_end] in " \t":
            keyword_end += 1
        statements.append(Statement("export", at, keyword_end, exports=[(ident, ident)]))
    body = []
    last = 0
    for st in statements:
        body.append(source[last : st.start])
        last = st.end
    body.append(source[last:])
    exports = [e for st in statements for e in st.exports]
    seen: set[str] = set()
    for _, exported in exports:
        if exported in seen:
            raise BundleError(f"{name}: {exported} is exported twice")
        seen.add(exported)
    linked = [(st.source, st.imports) for st in statements if st.kind == "import" and st.source is not None]
    return Module(name, "".join(body), linked, exports)


def module_order(entry: str, read: dict[str, str] | Path, forbid: frozenset[str] = frozenset()) -> list[Module]:
    """The entry and every module it imports, transitively, each after the modules it imports.

    `read`: a folder of modules, or {file name: source} (tests)."""
    loaded: dict[str, Module] = {}
    order: list[Module] = []
    stack: list[str] = []

    def source_of(file: str) -> str:
        if isinstance(read, dict):
            if file not in read:
                raise BundleError(f"{file}: no such module")
            return read[file]
        path = read / file
        if not path.is_file():
            raise BundleError(f"{file}: no such module in {read}")
        return path.read_text(encoding="utf-8")

    def visit(file: str, by: str | None) -> None:
        if file in stack:
            cycle = " -> ".join([*stack[stack.index(file) :], file])
            raise BundleError(f"import cycle: {cycle}")
        if file in loaded:
            return
        if file in forbid:
            raise BundleError(f"{by} imports {file}, which a standalone page must not include")
        stack.append(file)
        module = parse_module(file, source_of(file))
        for dep, _ in module.imports:
            visit(dep, file)
        stack.pop()
        loaded[file] = module
        order.append(module)

    visit(entry, None)
    for module in order:
        for dep, names in module.imports:
            exported = {e for _, e in loaded[dep].exports}
            for imported, _ in names:
                if imported not in exported:
                    raise BundleError(f"{module.name} imports {imported} from {dep}, which does not export it")
    return order


def _var(file: str) -> str:
    return "__attnlab_" + re.sub(r"\W", "_", file.removesuffix(".js"))


def bundle(
    entry: str,
    read: dict[str, str] | Path,
    *,
    forbid: frozenset[str] = frozenset(),
    call: str | None = None,
    as_module: bool = False,
) -> str:
    """One classic script holding `entry` and its imports; `call`: an export of the entry to call at the end.
    `as_module`: one ES module instead, whose default export is the entry's exports (an anywidget's `_esm`: its
    `render`), the modules inlined the same way."""
    order = module_order(entry, read, forbid)
    parts = ["const __attnlab_entry = (() => {" if as_module else "(() => {", '"use strict";']
    for module in order:
        parts.append(f"// ---- {module.name}")
        parts.append(f"const {_var(module.name)} = (() => {{")
        for dep, names in module.imports:
            if names:
                fields = ", ".join(e if e == local else f"{e}: {local}" for e, local in names)
                parts.append(f"const {{ {fields} }} = {_var(dep)};")
        parts.append(module.body.strip("\n"))
        fields = ", ".join(e if e == local else f"{e}: {local}" for local, e in module.exports)
        parts.append(f"return {{ {fields} }};")
        parts.append("})();")
    if call is not None:
        if call not in {e for _, e in order[-1].exports}:
            raise BundleError(f"{entry} does not export {call}")
        parts.append(f"{_var(entry)}.{call}();")
    if as_module:
        parts.extend([f"return {_var(entry)};", "})();", "export default __attnlab_entry;"])
    else:
        parts.append("})();")
    return "\n".join(parts) + "\n"
