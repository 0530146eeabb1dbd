"""wire/jsbundle.py: the page's ES modules as one classic script, on toy modules (run by node) and the page's."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from server.routes.pages import STATIC_DIR
from tests.helpers import node
from wire.jsbundle import BundleError, bundle, module_order, parse_module

TOY = {
    "a.js": 'export const A = 1;\nexport function twice(x) {\n  return 2 * x;\n}\nconst hidden = "import x";\n',
    "b.js": 'import { A, twice as double } from "./a.js";\nexport let B = double(A);\nexport { B as renamed };\n',
    "main.js": (
        'import { renamed } from "./b.js";\n'
        'import { A } from "./a.js";\n'
        "// export function notReally() {}\n"
        "const re = /export {[/]/;\n"
        "const t = `import ${A} export`;\n"
        "export class Thing {}\n"
        "export async function start() {\n  globalThis.out = [renamed, A, re.source, t];\n}\n"
    ),
}


def test_parse_module_strips_exports_and_reads_imports() -> None:
    m = parse_module("b.js", TOY["b.js"])
    assert m.imports == [("a.js", [("A", "A"), ("twice", "double")])]
    assert m.exports == [("B", "B"), ("B", "renamed")]
    assert "import" not in m.body and "export" not in m.body
    assert "let B = double(A);" in m.body


def test_parse_module_leaves_strings_comments_regexes_and_templates_alone() -> None:
    m = parse_module("main.js", TOY["main.js"])
    assert [name for name, _ in m.imports] == ["b.js", "a.js"]
    assert m.exports == [("Thing", "Thing"), ("start", "start")]
    assert "// export function notReally() {}" in m.body
    assert "/export {[/]/" in m.body and "`import ${A} export`" in m.body
    assert "async function start()" in m.body and "class Thing {}" in m.body


def test_bundle_orders_dependencies_first() -> None:
    assert [m.name for m in module_order("main.js", TOY)] == ["a.js", "b.js", "main.js"]


def test_bundle_runs_as_the_modules_would(tmp_path: Path) -> None:
    script = bundle("main.js", TOY, call="start")
    (tmp_path / "bundle.js").write_text(script + "\nconsole.log(JSON.stringify(globalThis.out));\n")
    out = subprocess.run([node(), str(tmp_path / "bundle.js")], capture_output=True, text=True, check=True).stdout
    assert out.strip() == '[2,1,"export {[/]","import 1 export"]'


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ('import x from "./a.js";', "only `import {"),
        ('import * as a from "./a.js";', "only `import {"),
        ('import { A } from "a.js";', "specifier"),
        ('import { A } from "https://cdn.example/a.js";', "specifier"),
        ("export default function f() {}", "only export function"),
        ('export { A } from "./a.js";', "re-exports"),
        ('export * from "./a.js";', "only export function"),
        ("export const A = 1, B = 2;", "one declarator"),
        ("export const { A, B } = obj;", "only export function"),
        ("export const A = 1", "semicolon"),
        ('const m = await import("./a.js");', "dynamic import"),
        ("const u = import.meta.url;", "dynamic import"),
        ("if (x) {\n  export const A = 1;\n}", "inside a block"),
        ("export const A = 1;\nexport { A };", "exported twice"),
        ("const s = 'open;\n", "unterminated string"),
        ("function f() {\n", "unbalanced"),
    ],
)
def test_parse_module_refuses_what_it_does_not_handle(source: str, words: str) -> None:
    with pytest.raises(BundleError, match=re.escape(words)):
        parse_module("x.js", source)


def test_bundle_refuses_a_cycle() -> None:
    modules = {
        "a.js": 'import { B } from "./b.js";\nexport const A = 1;\n',
        "b.js": 'import { C } from "./c.js";\nexport const B = 1;\n',
        "c.js": 'import { A } from "./a.js";\nexport const C = 1;\n',
    }
    with pytest.raises(BundleError, match=r"import cycle: a\.js -> b\.js -> c\.js -> a\.js"):
        bundle("a.js", modules)


def test_bundle_refuses_a_missing_name_a_missing_module_and_a_forbidden_one() -> None:
    with pytest.raises(BundleError, match=re.escape("imports nope from a.js, which does not export it")):
        bundle("m.js", {"a.js": "export const A = 1;\n", "m.js": 'import { nope } from "./a.js";\n'})
    with pytest.raises(BundleError, match=re.escape("gone.js: no such module")):
        bundle("m.js", {"m.js": 'import { A } from "./gone.js";\n'})
    with pytest.raises(BundleError, match="must not include"):
        bundle("m.js", {"store.js": "", "m.js": 'import { A } from "./store.js";\n'}, forbid=frozenset({"store.js"}))


def test_every_real_module_parses_or_fails_loudly() -> None:
    """The page's own modules: each parses, with as many exports as lines starting `export `; those that load
    modules at run time (import()) or resolve a URL through the import map (import.meta: frames.js starts its
    worker) are refused, never half-bundled."""
    for path in sorted((STATIC_DIR / "js").glob("*.js")):
        source = path.read_text(encoding="utf-8")
        if "import(" in source or "import.meta" in source:
            with pytest.raises(BundleError, match="dynamic import"):
                parse_module(path.name, source)
            continue
        m = parse_module(path.name, source)
        assert len(m.exports) == len(re.findall(r"(?m)^export ", source)), path.name
        assert not re.search(r"(?m)^(import|export)\b", m.body), path.name
