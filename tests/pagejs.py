"""The page's ES modules in node: node's test runner over tests/js/, and one JS body run against data from a test.

The page's modules are ES modules in files named *.js with no package.json above them (the browser reads them as
modules because the page's <script type="module"> says so). Node before 20.19 reads a .js file as a module only where
the nearest package.json says "type": "module" (Debian 12's nodejs is 18.19), so the tests run on a copy of static/js/
beside one; tests/js/lib.mjs imports from the folder ATTNLAB_PAGE_JS names."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.helpers import ROOT, node

JS_TESTS = ROOT / "tests" / "js"
STATIC_JS = ROOT / "static" / "js"


def copy_page_modules(to: Path) -> Path:
    """static/js/*.js copied into `to`, beside a package.json that makes node read them as ES modules."""
    to.mkdir(parents=True, exist_ok=True)
    for path in STATIC_JS.glob("*.js"):
        shutil.copyfile(path, to / path.name)
    (to / "package.json").write_text('{"type": "module"}\n', encoding="utf-8")
    return to


def run_node_tests(path: Path, modules: Path) -> subprocess.CompletedProcess[str]:
    """node --test over one test file against the page's modules in `modules`, reported as TAP."""
    return subprocess.run(
        [node(), "--test", "--test-reporter=tap", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "ATTNLAB_PAGE_JS": str(modules)},
    )


def run_page_js(modules: Path, body: str, data: Any = None) -> Any:
    """Run an async JS body that may `await mod("state.js")` (one of the page's modules, from `modules`) and read
    `data` (the JSON given here); its returned value comes back as JSON."""
    script = (
        "import { readFileSync } from 'node:fs';\n"
        f"const mod = (name) => import({json.dumps(modules.as_uri() + '/')} + name);\n"
        "const data = JSON.parse(readFileSync(0, 'utf8'));\n"
        f"const out = await (async () => {{ {body} }})();\n"
        "process.stdout.write(JSON.stringify(out ?? null));\n"
    )
    proc = subprocess.run(
        [node(), "--input-type=module", "-e", script],
        input=json.dumps(data),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)
