"""The page's ES modules in node: node's test runner over tests/js/, and one JS body run against data from a test.

Node 20 reads static/js/*.js as ES modules when told to detect them (the page's folder has no package.json)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.helpers import ROOT, node

JS_TESTS = ROOT / "tests" / "js"
NODE_FLAGS = ["--experimental-detect-module"]
_STATIC = (ROOT / "static" / "js").as_uri() + "/"


def run_node_tests(path: Path) -> subprocess.CompletedProcess[str]:
    """node --test over one test file, reported as TAP."""
    return subprocess.run(
        [node(), *NODE_FLAGS, "--test", "--test-reporter=tap", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def run_page_js(body: str, data: Any = None) -> Any:
    """Run an async JS body that may `await mod("state.js")` (one of the page's modules) and read `data` (the JSON
    given here); its returned value comes back as JSON."""
    script = (
        "import { readFileSync } from 'node:fs';\n"
        f"const mod = (name) => import({json.dumps(_STATIC)} + name);\n"
        "const data = JSON.parse(readFileSync(0, 'utf8'));\n"
        f"const out = await (async () => {{ {body} }})();\n"
        "process.stdout.write(JSON.stringify(out ?? null));\n"
    )
    proc = subprocess.run(
        [node(), *NODE_FLAGS, "--input-type=module", "-e", script],
        input=json.dumps(data),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)
