# Two commands set everything up on a fresh machine:
#   make study   create .venv, install the pinned study set, run `snakemake --cores $(CORES)`
#   make test    install the dev tools too, run the whole test suite
# STACK=system reuses the torch / flashinfer / sgl-kernel / sglang already installed in the
# Python that runs make (a GPU serving box): .venv sees its packages and installs no torch.
PYTHON ?= python3
VENV ?= .venv
CORES ?= 8
STACK ?= venv
SNAKEMAKE_ARGS ?=

BIN := $(VENV)/bin
ifeq ($(STACK),system)
VENV_FLAGS := --system-site-packages
TORCH_REQ :=
else
VENV_FLAGS :=
TORCH_REQ := -r envs/requirements-torch.txt
endif

.PHONY: study test report sweep lint clean-results

study: $(VENV)/.study-$(STACK)
	$(BIN)/snakemake --cores $(CORES) $(SNAKEMAKE_ARGS)

report: $(VENV)/.study-$(STACK)
	$(BIN)/snakemake --cores $(CORES) report

# Rerun one backend's sweep and what depends on it: make sweep BACKEND=flashinfer
sweep: $(VENV)/.study-$(STACK)
	@test -n "$(BACKEND)" || (echo "usage: make sweep BACKEND=torch|flashinfer|sgl_kernel" >&2; exit 2)
	$(BIN)/snakemake --cores $(CORES) --forcerun results/sweeps/$(BACKEND).parquet $(SNAKEMAKE_ARGS)

test: $(VENV)/.dev-$(STACK)
	$(BIN)/python -m pytest -q

lint: $(VENV)/.dev-$(STACK)
	$(BIN)/ruff check scripts tests
	$(BIN)/ruff format --check scripts tests
	$(BIN)/snakefmt --check Snakefile rules
	$(BIN)/snakemake --lint --cores 1

$(BIN)/python:
	$(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Stamps make reruns instant; they depend on the pin files, so a changed pin reinstalls.
$(VENV)/.study-$(STACK): envs/requirements-study.txt envs/requirements-torch.txt envs/requirements-serving.txt | $(BIN)/python
	$(BIN)/python -m pip install -q -r envs/requirements-study.txt -r envs/requirements-serving.txt $(TORCH_REQ)
	touch $@

$(VENV)/.dev-$(STACK): $(VENV)/.study-$(STACK) envs/requirements-dev.txt
	$(BIN)/python -m pip install -q -r envs/requirements-dev.txt
	touch $@

clean-results:
	rm -rf results/hardware.json results/sweeps results/tables results/figures results/report results/logs
