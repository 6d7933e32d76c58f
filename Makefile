# livelab: every target a user or CI runs. `make help` lists them.
SHELL := /bin/bash
LAB := .venv/bin/lab
PYTEST := .venv/bin/pytest
TOPOLOGY ?= auto
CLIENT ?=
CLIENT_CMD ?=
N ?= 1
DURATION ?=
ENDPOINT ?= twin
# the realtime protocol the twin and the client speak: gemini (default) or openai (lab/protocols.py)
PROTOCOL ?= gemini
BUDGET ?=
SCENARIO ?=
SOAK_OUT ?=
# parallel test workers for `make test`: the tests mostly wait on real timers and packets, not the CPU
# (a scenario run in namespaces uses ~4 s of CPU in its ~50 s), so there are more workers than cores
TEST_WORKERS ?= 8
RUN_ARGS = --topology $(TOPOLOGY) --endpoint $(ENDPOINT) --protocol $(PROTOCOL) -n $(N) $(if $(CLIENT),--client $(CLIENT)) \
           $(if $(DURATION),--duration $(DURATION)) $(if $(BUDGET),--budget $(BUDGET)) \
           $(if $(CLIENT_CMD),--client-cmd "$(CLIENT_CMD)") $(if $(JUNIT),--junit-xml $(JUNIT))
# JUNIT=file: lab run / lab matrix also write the verdicts as JUnit XML (for a CI's test tab)
JUNIT ?=

.DEFAULT_GOAL := help
.PHONY: examples help setup peers-setup test test-unit test-netns test-peers test-e2e lab-run lab-b1 lab-b2 lab-r1 lab-r2 lab-s2 lab-stop lab-matrix lab-all bench bench-false-alarms soak down clean

help: ## list the targets
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'
	@echo "  variables: TOPOLOGY=auto|netns|compose  CLIENT=probe|recovery|naive|guard|session-manager|livekit[@REL[+BUILD]]|pipecat|adk  CLIENT_CMD='python my_agent.py'  N=runs  DURATION=seconds"
	@echo "             SPEECH=1 (lab-stop: the spoken set too)  STOP_OUT=folder (lab-stop's batch)"
	@echo "             PROTOCOL=gemini|openai (openai: CLIENT=openai|openai-recovery); lab-matrix: also gemini,openai (side by side)"
	@echo "             ENDPOINT=twin|live (live needs GEMINI_API_KEY; PROTOCOL=openai: OPENAI_API_KEY)  BUDGET=sessions  SCENARIO=name (lab-run)"
	@echo "             SOAK_OUT=folder (soak)"
	@echo "             MATRIX_SCENARIOS=sets or names  MATRIX_CLIENTS=a,b,c  MATRIX_OUT=folder (lab-matrix)"

setup: ## install system tools (root) and the project venv; idempotent
	@scripts/phase.sh set-up scripts/setup.sh

# each phase of `make test` is timed (scripts/phase.sh); the images and venvs are built before the
# tests, by the same scripts the tests' fixtures call, so their time is not buried in a test's
export PHASE_LOG := /tmp/livelab-phases-$(shell date +%s%N).log
# the framework releases the tests run besides the pinned ones (tests/integration/test_lk003.py): their
# venvs are built with the others, before the tests, instead of inside the first test that needs one
TEST_RELEASES ?= livekit@1.8.0 livekit@1.8.0+pr003
# every test's outcome and time as JUnit XML, for a CI's test tab and for finding the slow groups
TEST_XML ?= $(PHASE_LOG:.log=-tests.xml)
test: setup ## run every test: units, namespaces (root), the Compose and pod end-to-end runs; prints the slowest and each phase's time
	@# the images and the framework venvs share nothing (no apt, no lock): they are built side by side,
	@# before the tests. (Started beside the tests too, they took as long: the two cores are the limit.)
	@if [ "$$(id -u)" = 0 ]; then scripts/phase.sh images scripts/docker-setup.sh --images & img=$$!; fi; \
	  v=0; scripts/phase.sh venvs --ok 75 scripts/peers-setup.sh all $(TEST_RELEASES) || v=$$?; \
	  i=0; if [ -n "$${img:-}" ]; then wait $$img || i=$$?; fi; [ $$v = 0 ] && [ $$i = 0 ]
	@scripts/phase.sh parallel-tests $(PYTEST) -q -n $(TEST_WORKERS) --dist loadgroup -m "not serial" --durations=25 --junitxml=$(TEST_XML)
	@scripts/phase.sh serial-test $(PYTEST) -q -m serial
	@scripts/phase.sh --summary

test-unit: setup ## pure unit tests only (no root, no network)
	$(PYTEST) -q tests/unit

test-netns: setup ## integration tests in network namespaces (root)
	$(PYTEST) -q tests/integration

peers-setup: ## the framework clients' own venvs (.venv-livekit, .venv-pipecat, .venv-adk); idempotent
	@scripts/peers-setup.sh all

test-peers: setup peers-setup ## framework clients: one turn each against the twin; livekit passes control in netns; a plain app by hostname in B1
	$(PYTEST) -q tests/integration/test_peers.py tests/integration/test_frameworks.py tests/integration/test_client_cmd.py

test-e2e: setup ## the Compose and pod end-to-end runs (installs and starts dockerd if needed)
	$(PYTEST) -q tests/e2e

lab-b1: setup ## B1 silent loss: the path never returns (DURATION=900 by default)
	$(LAB) run b1-silent-loss $(RUN_ARGS)

lab-b2: setup ## B2 path return: refused until the client closes the old connection
	$(LAB) run b2-path-return $(RUN_ARGS)

lab-r1: setup ## round 1: idle abort, clean close, abort while speaking
	$(LAB) run r1-idle-abort-immediate r1-idle-abort-delayed r1-clean-close r1-abort-speaking $(RUN_ARGS)

lab-r2: setup ## round 2: application-level freeze through the CONNECT proxy
	$(LAB) run r2-freeze $(RUN_ARGS)

lab-s2: setup ## stage 2: the reference recovery client, with and without the status note
	$(LAB) run s2-recovery s2-recovery-no-note s2-control $(RUN_ARGS)

# the stop study (001): A-F typed; SPEECH=1 adds them spoken (espeak-ng) and G2, the barge-in
STOP_TEXT := stop-a-pending stop-b-pending-late stop-c-blocking stop-d-after-commit stop-e-silent stop-f-early
STOP_SPEECH := stop-a-pending-speech stop-c-blocking-speech stop-d-after-commit-speech \
               stop-g2-barge-in-speech
STOP_CLIENTS = $(or $(CLIENT),probe guard)
STOP_OUT ?= captures/$(shell date -u +%Y%m%d-%H%M%S)-stop

lab-stop: setup ## the stop study: A-F for probe and guard, then stop.md (SPEECH=1: spoken too, and G2)
	@out="$(STOP_OUT)"; for c in $(STOP_CLIENTS); do \
	  $(LAB) run $(STOP_TEXT) $(if $(SPEECH),$(STOP_SPEECH)) --client $$c --out "$$out" --topology $(TOPOLOGY) \
	    --endpoint $(ENDPOINT) -n $(N) $(if $(BUDGET),--budget $(BUDGET)); done; \
	$(LAB) report "$$out" --no-timeline

# the conformance matrix (issue 11): scenario sets (resume, stop, lifecycle; default: all three) x
# clients, N runs each; DURATION caps the scenarios that run their whole duration (B1's 900 s)
MATRIX_SCENARIOS ?= default
# empty: each protocol's own clients (lab/matrix.py DEFAULT_CLIENTS for gemini; PROTOCOL=gemini,openai: both sets)
MATRIX_CLIENTS ?=
MATRIX_OUT ?= captures/$(shell date -u +%Y%m%d-%H%M%S)-matrix

lab-matrix: setup peers-setup ## the conformance matrix: scenarios x clients, then matrix.md and matrix.json
	$(LAB) matrix --scenarios $(MATRIX_SCENARIOS) $(if $(MATRIX_CLIENTS),--clients $(MATRIX_CLIENTS)) -n $(N) --topology $(TOPOLOGY) --protocol $(PROTOCOL) \
	  --out "$(MATRIX_OUT)" $(if $(DURATION),--duration $(DURATION)) $(if $(JUNIT),--junit-xml $(JUNIT))

# the release board (docs/matrix.md): the latest release of each framework across the resume, router and
# lifecycle sets against the twin, cells side by side; board.md/json beside the matrix
BOARD_SCENARIOS ?= resume router lifecycle
BOARD_CLIENTS ?= livekit@latest,pipecat@latest,adk@latest
BOARD_OUT ?= captures/$(shell date -u +%Y%m%d-%H%M%S)-board

lab-board: setup ## the release board: the frameworks' latest releases x resume, router, lifecycle (twin); board.md/json
	$(LAB) matrix --scenarios $(BOARD_SCENARIOS) --clients $(BOARD_CLIENTS) -j auto --out "$(BOARD_OUT)" \
	  $(if $(DURATION),--duration $(DURATION))

lab-run: setup ## one scenario by name: make lab-run SCENARIO=r2-freeze
	@test -n "$(SCENARIO)" || { echo "make lab-run: set SCENARIO= (see: .venv/bin/lab list)" >&2; exit 2; }
	$(LAB) run $(SCENARIO) $(RUN_ARGS)

lab-all: setup ## every scenario in the catalogue
	$(LAB) run --all $(RUN_ARGS)

EXAMPLE_SCENARIOS ?= b1-silent-loss b2-path-return l1-goaway n1-network-switch
examples: setup peers-setup ## each example agent (examples/clients.txt) through B1, B2, L1, N1 (DURATION=S caps B1)
	@rc=0; while read -r dir client; do \
	  case "$$dir" in ''|'#'*) continue;; esac; \
	  for scn in $(EXAMPLE_SCENARIOS); do \
	    case "$$scn" in b1-*) cap="$(if $(DURATION),--duration $(DURATION))";; *) cap="";; esac; \
	    (cd examples/$$dir && $(CURDIR)/$(LAB) run $$scn --client $$client --conversation lines.txt \
	       --topology $(TOPOLOGY) $$cap --out $(CURDIR)/captures/examples-$$dir/$$scn) || rc=1; \
	  done; \
	done < examples/clients.txt; exit $$rc

bench: setup ## benchmarks: twin (streaming audio, idle), fault onset, recovery, run overhead, router (prints figures and ratios)
	$(LAB) bench twin
	$(LAB) bench faults
	$(LAB) bench recovery
	$(LAB) bench overhead
	$(LAB) bench router

bench-false-alarms: setup ## 10 minutes of a healthy path with 300 ms jitter and 1 % loss: false loss detections (DURATION=seconds)
	$(LAB) bench false-alarms $(if $(DURATION),-- --duration $(DURATION))

soak: setup ## live soak against your key (GEMINI_API_KEY; PROTOCOL=openai: OPENAI_API_KEY): scenarios repeated, one summary
	$(LAB) soak --endpoint live --protocol $(PROTOCOL) $(if $(CLIENT),--client $(CLIENT)) $(if $(DURATION),--duration $(DURATION)) \
	  $(if $(SOAK_OUT),--out $(SOAK_OUT)) $(if $(JUNIT),--junit-xml $(JUNIT))

down: ## remove what runs whose owner is gone left behind (rules, namespaces, processes, containers); live runs stay
	$(LAB) down

clean: down ## remove results and the venv
	rm -rf captures/*/ .venv .venv-livekit .venv-pipecat .venv-adk .pytest_cache
