# tablekeeper's build and test entry points. `make test` is what CI runs.

AZURITE_DIR := test/azurite
AZURITE_STAMP := $(AZURITE_DIR)/node_modules/.tablekeeper-installed

.PHONY: test demo azurite browser vet bench clean build image

## test: install Azurite and the headless browser if needed, check formatting
## and vet, run every test (the Azurite-backed ones start their own emulator
## on free loopback ports, the browser tests their own browser).
test: azurite browser vet
	go test -count=1 ./...

## demo: run the worker's demo on the in-process store (no Azure, no Node).
demo:
	go run ./cmd/demo

## azurite: install the pinned Azurite from package-lock.json with npm ci.
azurite: $(AZURITE_STAMP)

$(AZURITE_STAMP): $(AZURITE_DIR)/package.json $(AZURITE_DIR)/package-lock.json
	@command -v npm >/dev/null || { echo "npm is required to install Azurite for the tests (Node.js 20, or 22+ as Azurite declares)"; exit 1; }
	# test/azurite/.npmrc keeps npm to errors (no EBADENGINE warnings on Node 20).
	cd $(AZURITE_DIR) && npm ci
	touch $@

## browser: install Debian's chromium-headless-shell, the headless browser the
## browser tests drive (test/browser), and a font for legible screenshots.
## Nothing happens when its binary is there, or when TABLEKEEPER_BROWSER names
## another or TABLEKEEPER_SKIP_BROWSER=1 skips those tests; apt-get update runs
## only when the install cannot find the packages. Not root: through sudo.
BROWSER_PKG := chromium-headless-shell
BROWSER_FONTS := fonts-dejavu-core
BROWSER_BIN := /usr/lib/chromium/chromium-headless-shell
browser: $(BROWSER_BIN)

$(BROWSER_BIN):
	@if [ -n "$$TABLEKEEPER_BROWSER" ]; then echo "browser: using TABLEKEEPER_BROWSER=$$TABLEKEEPER_BROWSER, installing none"; exit 0; fi; \
	if [ "$$TABLEKEEPER_SKIP_BROWSER" = 1 ]; then echo "browser: TABLEKEEPER_SKIP_BROWSER=1, installing none"; exit 0; fi; \
	command -v apt-get >/dev/null || { echo "apt-get is required to install $(BROWSER_PKG) for the browser tests (Debian or Ubuntu); elsewhere set TABLEKEEPER_BROWSER to a Chromium headless shell, or TABLEKEEPER_SKIP_BROWSER=1 to skip those tests"; exit 1; }; \
	sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	export DEBIAN_FRONTEND=noninteractive; \
	$$sudo apt-get install -y -q --no-install-recommends $(BROWSER_PKG) $(BROWSER_FONTS) || \
	  { $$sudo apt-get update -q && $$sudo apt-get install -y -q --no-install-recommends $(BROWSER_PKG) $(BROWSER_FONTS); } || exit 1; \
	test -x $@ || { echo "$(BROWSER_PKG) is installed but $@ is not there: dpkg -L $(BROWSER_PKG) shows where it went"; exit 1; }

## vet: gofmt, go vet, staticcheck and a tidy go.mod must all be clean.
## staticcheck runs at a pinned version through the module proxy, so a fresh
## machine needs nothing installed by hand.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
vet:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './test/azurite/node_modules/*')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	go run $(STATICCHECK) ./...
	@go mod tidy -diff >/dev/null || { echo "go.mod/go.sum are not tidy: run go mod tidy"; go mod tidy -diff; exit 1; }

## build: the static worker and enqueue binaries into $(BIN)/ (default bin/),
## built exactly as deploy/Dockerfile builds them (deploy/deploy_test.go runs
## this target and checks that the two build lines agree).
## VERSION, COMMIT and DATE come from git unless given: make build VERSION=v1.2.3
## DATE is the commit's time, not the build's, so one commit gives one binary.
BIN ?= bin
VERSION ?= $(shell git describe --tags --always --dirty --match 'v[0-9]*' 2>/dev/null)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell test -z "$$(git status --porcelain 2>/dev/null)" || echo -dirty)
DATE ?= $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null)
VERSION_PKG := github.com/tablekeeper/tablekeeper/internal/version
LDFLAGS := -s -w -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Commit=$(COMMIT) -X $(VERSION_PKG).Date=$(DATE)
build:
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/worker ./cmd/enqueue

## image: build the container image $(IMAGE) from deploy/Dockerfile with docker
## or podman (CONTAINER_TOOL=podman to choose; docker when its daemon answers,
## else podman, else docker to say why it cannot).
IMAGE ?= tablekeeper:$(or $(VERSION),dev)
image:
	@tool="$(CONTAINER_TOOL)"; \
	if [ -z "$$tool" ]; then \
	  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then tool=docker; \
	  elif command -v podman >/dev/null 2>&1; then tool=podman; \
	  elif command -v docker >/dev/null 2>&1; then tool=docker; \
	  else echo "make image needs docker or podman (neither is on PATH); or set CONTAINER_TOOL"; exit 1; fi; \
	fi; \
	echo "$$tool build -t $(IMAGE) (version $(VERSION), commit $(COMMIT))"; \
	$$tool build -f deploy/Dockerfile -t "$(IMAGE)" \
	  --build-arg VERSION="$(VERSION)" --build-arg COMMIT="$(COMMIT)" --build-arg DATE="$(DATE)" .

## bench: print the localstore benchmark figures recorded in BENCHMARKS.md, each beside the
## baseline's measured in the same run (BASE=<revision>, default where HEAD left main) and their
## ratio; BENCH=<regexp> and COUNT=<rounds> narrow or widen it.
BENCH ?= .
COUNT ?= 5
bench:
	go run ./test/benchcmp -pkg ./localstore/ -bench '$(BENCH)' -count $(COUNT) $(if $(BASE),-base '$(BASE)')

clean:
	rm -rf $(AZURITE_DIR)/node_modules bin
