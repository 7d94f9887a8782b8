# tablekeeper's build and test entry points. `make test` is what CI runs.

AZURITE_DIR := test/azurite
AZURITE_STAMP := $(AZURITE_DIR)/node_modules/.tablekeeper-installed

.PHONY: test demo azurite vet bench clean

## test: install Azurite if needed, check formatting and vet, run every test
## (the Azurite-backed ones start their own emulator on free loopback ports).
test: azurite vet
	go test -count=1 ./...

## demo: run the worker's demo on the in-process store (no Azure, no Node).
demo:
	go run ./cmd/worker -demo

## azurite: install the pinned Azurite from package-lock.json with npm ci.
azurite: $(AZURITE_STAMP)

$(AZURITE_STAMP): $(AZURITE_DIR)/package.json $(AZURITE_DIR)/package-lock.json
	@command -v npm >/dev/null || { echo "npm is required to install Azurite for the tests (Node.js 20, or 22+ as Azurite declares)"; exit 1; }
	# test/azurite/.npmrc keeps npm to errors (no EBADENGINE warnings on Node 20).
	cd $(AZURITE_DIR) && npm ci
	touch $@

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

## bench: print the localstore benchmark figures recorded in BENCHMARKS.md.
bench:
	go test -run '^$$' -bench . -benchmem ./localstore/

clean:
	rm -rf $(AZURITE_DIR)/node_modules
