# Entry points; each is a thin wrapper around a script in scripts/ that also runs on its own.
.PHONY: venv test lint unit molecule e2e sandbox collection bench bench-sandbox bench-distribution bench-fabric clean

venv:         ## create or refresh .venv/ (pinned tools and collections)
	bash scripts/bootstrap-venv.sh

test:         ## every check from a bare machine: the e2e lane beside the check lane; prints the total time
	bash scripts/test.sh

lint:         ## ruff, yamllint, ansible-lint (production), ansible-test sanity, syntax-check
	bash scripts/test.sh venv lint syntax

unit:         ## pytest unit tests
	bash scripts/test.sh venv unit

collection:   ## build the collection tarball and install it into a temp path
	bash scripts/test.sh venv collection

molecule:     ## every molecule scenario (MOLECULE_SCENARIOS="a b" to choose)
	bash scripts/test.sh venv molecule

e2e:          ## the sandbox cluster end to end: site.yml, a re-run, a frozen rank, Slurm with a killed rank, resumes
	bash scripts/test.sh venv e2e

sandbox:      ## the main job: site.yml on the local sandbox cluster
	bash scripts/sandbox.sh

bench:        ## benchmarks that print figures against their targets (and the all-reduce gate's floors by fabric)
	bash scripts/bootstrap-venv.sh && .venv/bin/python bench/bench_probes.py && .venv/bin/python bench/bench_watch.py && \
	  .venv/bin/python bench/bench_fabric_gate.py

bench-sandbox: ## wall time of site.yml on the sandbox cluster by stage (BENCH_ARGS=--fresh for a first run)
	bash scripts/bootstrap-venv.sh && bash scripts/ensure-docker.sh && \
	  bash -c 'source scripts/env.sh && export INSTINCT_IMAGE_JAMMY_SYSTEMD=$$(molecule/resources/images/build.sh jammy-systemd) && python bench/bench_sandbox.py $(BENCH_ARGS)'

bench-distribution: ## seconds to put a 1 GiB wheel on 8 nodes: node to node against through the controller
	bash scripts/bootstrap-venv.sh && bash scripts/ensure-docker.sh && \
	  bash -c 'source scripts/env.sh && export INSTINCT_IMAGE_JAMMY=$$(molecule/resources/images/build.sh jammy) && python bench/bench_distribution.py $(BENCH_ARGS)'

bench-fabric: ## seconds from the fabric stage's start to its failure for a wrong interface and an unreachable master
	bash scripts/bootstrap-venv.sh && bash scripts/ensure-docker.sh && \
	  bash -c 'source scripts/env.sh && python bench/bench_fabric_failure.py $(BENCH_ARGS)'

clean:
	rm -rf .venv .pytest_cache .ruff_cache instinct-finetune-*.tar.gz
