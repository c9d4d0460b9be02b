# Two commands set everything up on a fresh machine:
#   make study   create .venv, install the pinned set for this machine, run `snakemake --cores $(CORES)`
#   make test    install the dev tools too, run the whole test suite
# STACK picks the pinned set, by itself unless given:
#   gpu     `nvidia-smi -L` lists a GPU: envs/requirements-gpu.txt (torch 2.11.0, SGLang 0.5.16,
#           sglang-kernel 0.4.5, flashinfer 0.7.2.post1, the study's tools)
#   cpu     otherwise: the study's tools, transformers serving and CPU-capable torch 2.13.0
#   system  (only when asked) reuse the torch / flashinfer / sgl-kernel / sglang already installed
#           in the Python that runs make: .venv sees its packages and installs no torch.
# `make print-stack` prints the choice alone.
PYTHON ?= python3
VENV ?= .venv
CORES ?= 8
NVIDIA_SMI ?= nvidia-smi
SNAKEMAKE_ARGS ?=

ifeq ($(origin STACK),undefined)
GPU_COUNT := $(shell n=0; if out=$$($(NVIDIA_SMI) -L 2>/dev/null); then n=$$(printf '%s\n' "$$out" | grep -c '^GPU '); fi; echo $$n)
ifeq ($(GPU_COUNT),0)
STACK := cpu
STACK_WHY := no GPU: nvidia-smi -L is missing, failed or listed none
else
STACK := gpu
STACK_WHY := nvidia-smi lists $(GPU_COUNT) GPU$(if $(filter 1,$(GPU_COUNT)),,s)
endif
else
STACK_WHY := STACK set by $(origin STACK)
endif
ifeq ($(filter $(STACK),cpu gpu system),)
$(error STACK=$(STACK): use cpu, gpu or system)
endif
ifeq ($(MAKECMDGOALS),print-stack)
else
$(info make: STACK=$(STACK) ($(STACK_WHY)))
endif

BIN := $(VENV)/bin
ifeq ($(STACK),system)
VENV_FLAGS := --system-site-packages
STACK_PINS := envs/requirements-study.txt envs/requirements-serving.txt
INSTALL := $(BIN)/python -m pip install -q -r envs/requirements-study.txt -r envs/requirements-serving.txt
else ifeq ($(STACK),gpu)
VENV_FLAGS :=
STACK_PINS := envs/requirements-gpu.txt envs/requirements-gpu-base.txt envs/requirements-study.txt envs/requirements-serving.txt
# sglang goes in with --no-deps (see envs/requirements-gpu.txt); the rest resolves normally.
INSTALL := $(BIN)/python -m pip install -q -r envs/requirements-gpu-base.txt \
	&& $(BIN)/python -m pip install -q --no-deps -r envs/requirements-gpu.txt
else
VENV_FLAGS :=
STACK_PINS := envs/requirements-study.txt envs/requirements-serving.txt envs/requirements-torch.txt
INSTALL := $(BIN)/python -m pip install -q -r envs/requirements-study.txt -r envs/requirements-serving.txt -r envs/requirements-torch.txt
endif

.PHONY: study test report sweep compare lint clean-results print-stack

print-stack:
	@echo $(STACK)

# make study CONFIG=file.yaml: the file checked first (one line naming file and line), then
# passed as --configfile.
# SNAKEMAKE_ARGS go first: Snakemake reads every word after --configfile as a config file, so a
# target there would be read as one.
study: $(VENV)/.study-$(STACK)
	$(if $(CONFIG),$(BIN)/python scripts/check_config.py $(CONFIG))
	$(BIN)/snakemake --cores $(CORES) $(SNAKEMAKE_ARGS) $(if $(CONFIG),--configfile $(CONFIG))

report: $(VENV)/.study-$(STACK)
	$(BIN)/snakemake --cores $(CORES) report

# Rerun one backend's sweep (or several: BACKEND='torch flashinfer') and what depends on it:
# make sweep BACKEND=flashinfer. Each name is checked first against the backends and the
# config (CONFIG too): an unknown or disabled one is named, not "No rule to produce ...".
sweep: $(VENV)/.study-$(STACK)
	@test -n "$(BACKEND)" || (echo "usage: make sweep BACKEND=torch|flashinfer|sgl_kernel" >&2; exit 2)
	@$(BIN)/python scripts/check_config.py --sweep-backends '$(subst ','\'',$(BACKEND))' $(CONFIG)
	$(BIN)/snakemake --cores $(CORES) $(SNAKEMAKE_ARGS) --forcerun $(foreach b,$(BACKEND),results/sweeps/$(b).parquet) $(if $(CONFIG),--configfile $(CONFIG))

# Before and after: this run's sweep against a baseline (a results folder, a sweep file or a
# pattern of files), rendered into the report: make compare BASELINE=examples/h200x2-2026-11-29
compare: $(VENV)/.study-$(STACK)
	@test -n "$(BASELINE)" || (echo "usage: make compare BASELINE=results-folder|sweep-file|'files-pattern*.csv'" >&2; exit 2)
	@$(BIN)/snakemake results/report/index.html --cores $(CORES) --config 'compare_baseline=$(subst ','\'',$(BASELINE))' $(if $(CONFIG),--configfile $(CONFIG)) \
		|| { grep -h "ERROR study.compare" results/logs/compare.log 2>/dev/null | tail -n 1 >&2; exit 1; }
	@tail -n 3 results/logs/compare.log

test: $(VENV)/.dev-$(STACK)
	$(BIN)/python -m pytest -q

lint: $(VENV)/.dev-$(STACK)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/snakefmt --check Snakefile rules
	$(BIN)/snakemake --lint --cores 1

$(BIN)/python:
	$(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Stamps make reruns instant; they depend on the pin files, so a changed pin reinstalls.
$(VENV)/.study-$(STACK): $(STACK_PINS) | $(BIN)/python
	$(INSTALL)
	touch $@

$(VENV)/.dev-$(STACK): $(VENV)/.study-$(STACK) envs/requirements-dev.txt
	$(BIN)/python -m pip install -q -r envs/requirements-dev.txt
	touch $@

clean-results:
	@# Everything the study wrote, hidden sweep journals included (results/README.md stays).
	find results -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
