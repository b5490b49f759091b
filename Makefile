# The whole set-up on a fresh machine is one of these two commands:
#   make demo   create .venv, install attnlab and its 'lab' extra (torch pinned to the CPU build 2.13.0),
#               run `attnlab demo`
#   make test   the same set-up with the dev extras (they include 'lab'), then ruff and pytest
#   make test-long   the end-to-end runs of ten seconds to minutes (CI runs them after make test)
#   make test-fast   the tests not marked slow (no subprocess CLI runs, ring launches, training or browser, nor a
#                    case measured over 0.3 s of CPU)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# torch is pinned: an unpinned torch pulls a multi-GB CUDA build; 2.13.0 (CPU) installs from local disk here.
TORCH  ?= torch==2.13.0
# Every package at the version the suite last passed with (constraints.txt): a new release of a dependency is taken on
# purpose, by `make constraints`, which resolves afresh in a venv of its own, runs the suite there and rewrites the
# file only when it passes. CONSTRAINTS= (empty) installs without it.
CONSTRAINTS ?= constraints.txt
PIP_C  := $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
# The test runs keep Python's bytecode cache even where PYTHONDONTWRITEBYTECODE is set: without it every run and
# every worker compiles the package and rewrites the tests' asserts again (collection 9 s instead of 3 s here).
# The learner's own file is never cached: the lab's loader reads it from its source (attnlab.judge.apart.loader).
# Every run says where its time went (the 25 slowest tests) and fails when a test's mark does not fit its CPU time:
# `slow` costs at least 0.2 s of CPU, a test without it at most 2 s (tests/costs.py).
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest --durations=25 --check-costs

.PHONY: demo test test-fast test-long lint install install-dev browser clean constraints corpora

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS) | $(PY)
	$(PY) -m pip install --quiet $(PIP_C) "$(TORCH)"
	$(PY) -m pip install --quiet $(PIP_C) -e ".[lab]"
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed pyproject.toml $(CONSTRAINTS)
	$(PY) -m pip install --quiet $(PIP_C) -e ".[dev]"
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

# The lesson page's browser test drives Debian's chromium (never a browser Playwright downloads).
# Idempotent: nothing happens when /usr/bin/chromium is there; sudo only when not root.
# tools/apt-install waits up to APT_LOCK_S seconds for another install to let go of apt's locks, instead of failing.
APT_LOCK_S ?= 600
browser:
	@[ -x /usr/bin/chromium ] || APT_LOCK_S=$(APT_LOCK_S) tools/apt-install chromium

demo: install
	$(VENV)/bin/attnlab demo

lint: install-dev
	$(VENV)/bin/ruff check src tests benchmarks

# Two workers (pytest-xdist): most slow tests wait on a child interpreter, so the suite's wall time nearly halves
# on two cores; the tests of the built pages share one worker (tests/conftest.py).
test: install-dev browser lint
	$(PYTEST) -q -n 2 --dist loadgroup -m "not long"

# The end-to-end runs of ten seconds to minutes (the default model's training, the mutant corpus at one seed, the GPU
# script's dry run, the Triton interpreter, compiled flex, PyTorch's SDPA tests on every form, the loops form on the
# float64 grid, the planted wrong functions, the oracle's longest cases, and console-script runs whose seams make test
# holds another way): CI (.ci/run) runs them after `make test`.
test-long: install-dev
	$(PYTEST) -q -n 2 -m long

# Two workers here too, as make test.
test-fast: install-dev lint
	$(PYTEST) -q -n 2 --dist loadgroup -m "not slow"

# The blind corpora (tests/unseen: kernels and learners' files written by people who had not read the judge), each
# judged and graded against the truths its writers set down; exit 1 when one is under its bars (tests/unseen/grade.py).
# About two hours on 2 cores: run by hand after a change to the judge or the lab's readings, not in CI's lanes.
CORPORA_OUT ?= benchmarks/results/unseen
# held5 to held11 were each run once as they came (benchmarks/results/unseen/held{5,...,11}-*; held8's first runs as
# *.first.*); their runs since are written beside those files, never over them (*.after.*), and held5, held7, held8,
# held9 and held10 are graded by their labels with the keys that came after that run (held5-after, ...:
# tests/unseen/labels.py).
CORPORA ?= dev held held2 held3 held4 held5 held6 held7 held8 held9 held10 held11
corpora: install-dev
	mkdir -p $(CORPORA_OUT)
	for c in $(CORPORA); do x=; case $$c in held[5-9]|held1[01]) x=.after;; esac; \
	  $(PY) -m tests.unseen.run $$c --json $(CORPORA_OUT)/$$c-kernels$$x.json > $(CORPORA_OUT)/$$c-kernels$$x.log && \
	  TRITON_INTERPRET=1 $(PY) -m tests.unseen.run $$c --slips --json $(CORPORA_OUT)/$$c-slips$$x.json \
	    > $(CORPORA_OUT)/$$c-slips$$x.log || exit 2; done
	status=0; for c in $(CORPORA); do x=; l=; case $$c in held5|held7|held8|held9|held10) x=.after; l=-after;; held6|held11) x=.after;; esac; \
	  $(PY) -m tests.unseen.grade $(CORPORA_OUT)/$$c-kernels$$x.json $$c$$l --check || status=1; \
	  $(PY) -m tests.unseen.grade $(CORPORA_OUT)/$$c-slips$$x.json $$c-slips$$l --check || status=1; done; exit $$status

# Take today's releases on purpose: a fresh venv (.venv-update) resolved without constraints.txt, the whole suite run
# in it, and only then its versions written to constraints.txt (torch without a local label such as +cpu).
constraints:
	rm -rf .venv-update
	$(MAKE) VENV=.venv-update CONSTRAINTS= test
	{ echo "# The versions the suite last passed with (make test installs these; make constraints updates them: README)."; \
	  .venv-update/bin/python -m pip freeze --exclude-editable | sed -E 's/^(torch==[^+]*)\+.*/\1/'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	@echo "constraints.txt: $$(wc -l < constraints.txt) packages at the versions the suite just passed with"

clean:
	rm -rf $(VENV) .venv-update attnlab-out .pytest_cache .ruff_cache
