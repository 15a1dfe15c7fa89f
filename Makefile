# Two commands: `make run` (the whole pipeline) and `make test` (the whole suite).
# Both create .venv from the pinned requirements when it is missing or out of date.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SNAKEMAKE := $(BIN)/snakemake

.PHONY: run check test test-server test-browser lint format bench report cluster-install clean

# `kvlab run`: config.yaml checked as data first (no YTE templating, no alias bombs, the schema), then Snakemake,
# one run at a time in this folder, recovering from a killed run. FORCE=results/x.json reruns what makes that
# file (and what reads it), for a file edited by hand.
run: $(VENV)/.run-installed
	$(BIN)/kvlab run $(if $(FORCE),-- --forcerun $(FORCE))

# Are the committed results what the committed code and config make? One line per file that is not, with its
# repair; when all are, one line saying how many it compared (a full regeneration in work/check/, about half a
# minute).
check: $(VENV)/.run-installed
	@echo "Regenerating every artifact in work/check/ to compare with results/ ..."
	$(BIN)/kvlab check

# The suite on every core (pytest-xdist), a test file per worker (its module's fixtures are built once).
test: $(VENV)/.dev-installed
	$(BIN)/python -m pytest -n auto --dist loadfile --no-loadscope-reorder

# The lab on a real server (server/check.py): llama-cpp-python serving a tiny model on 127.0.0.1, measured by
# `kvlab measure`, its hits read from its log and compared request by request with `kvlab replay --server
# llama-cpp`; about 15 seconds once the server extra is installed (the first install compiles llama.cpp).
test-server: $(VENV)/.server-installed
	@echo "Measuring the lab's passes on a real llama-cpp-python server ..."
	$(BIN)/python server/check.py --out work/server/measurement.jsonl

# kvlab serve's page in a real browser (browser/test_page.py): headless Chromium (Debian's chromium and
# chromium-driver, installed with apt-get the first time) fills the form for the lab and for the conversation
# trace, checks every figure against kvlab.plan, uploads a bad trace; screenshots and times in work/browser/.
test-browser: $(VENV)/.browser-installed
	@echo "Driving kvlab serve's page in headless Chromium (about 15 seconds) ..."
	$(BIN)/python -m pytest -q -p no:cacheprovider browser

$(VENV)/.browser-installed: requirements-browser.txt $(VENV)/.dev-installed
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
		echo "Installing Debian's chromium and chromium-driver (apt-get, about a minute) ..."; \
		apt-get install -y -qq chromium chromium-driver >/dev/null || \
		{ apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; }; }
	$(BIN)/python -m pip install --disable-pip-version-check -r requirements-browser.txt
	touch $@

# ruff, snakefmt and `snakemake --lint` (less its one documented exception, see Snakefile)
lint: $(VENV)/.dev-installed
	$(BIN)/python -m pytest -q tests/test_workflow.py -k "lint or snakefmt or ruff"

# Snakemake's HTML report of the results: report.html, a build product, not committed. It runs the pipeline
# first, so that every artifact has its provenance (a fresh clone has none).
report: run
	$(SNAKEMAKE) --report report.html

# Replay speed beside a bare OrderedDict loop (bench/replay_speed.py), what each design and eviction
# policy costs beside write-through + lru (bench/policy_speed.py), both on a Mooncake trace
# (TRACE=path for another); LRUCache beside a bare loop, cachetools and libCacheSim
# (bench/lru_speed.py), and the exact curve beside 50 libCacheSim runs (bench/mrc_speed.py).
bench: $(VENV)/.bench-installed
	$(BIN)/python bench/replay_speed.py $(if $(TRACE),--trace $(TRACE))
	$(BIN)/python bench/policy_speed.py $(if $(TRACE),--trace $(TRACE))
	$(BIN)/python bench/lru_speed.py
	$(BIN)/python bench/mrc_speed.py

# The scale bench (bench/scale.py): kvlab replay and kvlab mrc beside libCacheSim's LRU and KVCache.AI's
# kvcache-simulator, CPU time per block access and peak memory, on Mooncake traces of 1x, 4x and 16x the
# conversation trace (bench/scale_traces.py writes them to work/bench/traces/; SIZES=1x,4x,16x,100m adds 100 M
# accesses); the figures also go to work/bench/scale.json.
.PHONY: bench-scale
bench-scale: $(VENV)/.bench-installed
	$(BIN)/python bench/scale.py $(if $(SIZES),--sizes $(SIZES))

# A real engine under load (docs/simulate.md): llama.cpp's llama-server (4 slots, a host-RAM prompt cache) under two
# Poisson loads, its per-request reuse (from its log) and TTFT beside kvlab/simulator/llama_server.py's, calibrated on
# the first run (server/load_check.py, about 1.5 minutes; --strict-time: the TTFT within 15% is part of the verdict).
# server/build_llama_server.sh builds llama-server once (6 min 41 s on 2 cores) into ~/.cache/kvlab.
.PHONY: bench-server
bench-server: $(VENV)/.server-installed
	@echo "Building llama.cpp's llama-server (the first time about 7 minutes on 2 cores; kept in ~/.cache/kvlab) ..."
	server/build_llama_server.sh
	@echo "A real llama-server under Poisson load beside kvlab's model of it (server/load_check.py, about 1.5 minutes) ..."
	$(BIN)/python server/load_check.py --strict-time --out work/server-load-check

# kvlab simulate beside NVIDIA AISimulate on the conversation trace (bench/aisimulate_side_by_side.py): reuse per
# tier, TTFT, CPU seconds, both tools in one run; one instance, then 4 behind round-robin with private and with
# shared host tiers, then 4 behind Dynamo's KV router (AISimulate's Dynamo stack). AISimulate pins its own jax stack,
# so it gets a venv of its own (.venv-aisimulate, about 1.5 GB, about a minute to install), and its Dynamo stack
# another (.venv-aisimulate-dynamo); kvlab's .venv is the one `make run` makes.
.PHONY: bench-aisimulate
bench-aisimulate: $(VENV)/.run-installed .venv-aisimulate/.installed .venv-aisimulate-dynamo/.installed
	$(BIN)/python bench/aisimulate_side_by_side.py
	$(BIN)/python bench/aisimulate_side_by_side.py --instances 4
	$(BIN)/python bench/aisimulate_side_by_side.py --instances 4 --cpu-scope shared --cpu-only
	$(BIN)/python bench/aisimulate_side_by_side.py --instances 4 --router dynamo

# kvlab simulate beside vLLM 0.33's own scheduler, block pool and OffloadingConnector, request by request, on the
# conversation trace's first 1,000 requests (bench/vllm_side_by_side.py, docs/simulate.md "Beside vLLM"): eight
# settings, about 5 minutes. vLLM gets a venv of its own (.venv-vllm, requirements-vllm.txt: about 3.7 GB, a minute
# and a half to install).
.PHONY: bench-vllm
bench-vllm: $(VENV)/.run-installed .venv-vllm/.installed
	@echo "Running vLLM 0.33's scheduler beside kvlab simulate (about 5 minutes) ..."
	$(BIN)/python bench/vllm_side_by_side.py

.venv-vllm/.installed: requirements-vllm.txt
	@echo "Installing vLLM 0.33.0 (CPU) into .venv-vllm (about 3.7 GB, a minute and a half) ..."
	rm -rf .venv-vllm
	$(PYTHON) -m venv .venv-vllm
	.venv-vllm/bin/pip install --quiet --disable-pip-version-check torch==2.13.0
	.venv-vllm/bin/pip install --quiet --disable-pip-version-check --no-deps -r requirements-vllm.txt
	touch $@

# kvlab search beside NVIDIA aiconfigurator's `cli default` (bench/aiconfigurator_side_by_side.py): the best aggregated
# and disaggregated configurations and their tokens/s/GPU for Llama-3.1-8B and 70B on H100s and the README's Qwen3-32B
# setting, then the conversation trace's reuse. aiconfigurator pins its own stack: .venv-aiconfigurator (about 25 s).
.PHONY: bench-aiconfigurator
bench-aiconfigurator: $(VENV)/.run-installed .venv-aiconfigurator/.installed
	@echo "Running aiconfigurator and kvlab search side by side (a few minutes) ..."
	$(BIN)/python bench/aiconfigurator_side_by_side.py

.venv-aiconfigurator/.installed: requirements-aiconfigurator.txt
	@echo "Installing the aiconfigurator bench extra into .venv-aiconfigurator ..."
	$(PYTHON) -m venv .venv-aiconfigurator
	.venv-aiconfigurator/bin/pip install --quiet -r requirements-aiconfigurator.txt
	touch $@

.venv-aisimulate/.installed: requirements-aisimulate.txt
	@echo "Installing the AISimulate bench extra into .venv-aisimulate ..."
	$(PYTHON) -m venv .venv-aisimulate
	.venv-aisimulate/bin/pip install --quiet -r requirements-aisimulate.txt
	touch $@

.venv-aisimulate-dynamo/.installed: requirements-aisimulate-dynamo.txt
	@echo "Installing AISimulate's Dynamo stack (ai-dynamo 1.6.1) into .venv-aisimulate-dynamo ..."
	$(PYTHON) -m venv .venv-aisimulate-dynamo
	.venv-aisimulate-dynamo/bin/pip install --quiet --no-deps -r requirements-aisimulate-dynamo.txt
	touch $@

# Snakemake's SLURM executor plugin (requirements-cluster.txt), for `kvlab run -- --profile profiles/slurm`:
# see docs/cluster.md.
cluster-install: $(VENV)/.cluster-installed

format: $(VENV)/.dev-installed
	$(BIN)/ruff format .
	$(BIN)/snakefmt .

# .venv/.created is written last: a .venv without it (its creation was killed) is made again from scratch.
$(VENV)/.created:
	@$(PYTHON) -c 'import sys; sys.exit("kvlab needs Python 3.11 or newer" if sys.version_info < (3, 11) else 0)'
	@echo "Creating $(VENV) ..."
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	touch $@

# kvlab itself is installed editable (the `kvlab` command); its build backend, setuptools, is pinned in
# requirements.txt, so the install needs no other download.
INSTALL_KVLAB = $(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .

$(VENV)/.run-installed: requirements.txt pyproject.toml | $(VENV)/.created
	@echo "Installing the pinned dependencies into $(VENV) (the first time takes a minute or two) ..."
	$(BIN)/python -m pip install --disable-pip-version-check --progress-bar on -r requirements.txt
	$(INSTALL_KVLAB)
	touch $@

$(VENV)/.dev-installed: requirements.txt requirements-dev.txt pyproject.toml | $(VENV)/.created
	@echo "Installing the pinned dependencies and test tools into $(VENV) (the first time takes a minute or two) ..."
	$(BIN)/python -m pip install --disable-pip-version-check --progress-bar on -r requirements-dev.txt
	$(INSTALL_KVLAB)
	touch $(VENV)/.run-installed $@

# The bench extra, not part of `make run`: see requirements-bench.txt for --no-deps.
$(VENV)/.bench-installed: requirements-bench.txt $(VENV)/.run-installed
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-bench.txt
	touch $@

# The server extra, for `make test-server` only (requirements-server.txt).
$(VENV)/.server-installed: requirements-server.txt $(VENV)/.run-installed
	@echo "Installing llama-cpp-python's server into $(VENV) (the first time compiles llama.cpp: about 6.5 minutes on 2 cores) ..."
	$(BIN)/python -m pip install --disable-pip-version-check -r requirements-server.txt
	touch $@

# The cluster extra, not part of `make run`: requirements-cluster.txt includes requirements.txt, whose pins it
# leaves as they are.
$(VENV)/.cluster-installed: requirements-cluster.txt $(VENV)/.run-installed
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-cluster.txt
	touch $@

clean:
	rm -rf work logs .snakemake
