# make test: vet, staticcheck and the race-enabled tests against a
# throwaway redis-server (installed with apt-get when missing and root),
# then the demo's page in headless Chromium (likewise installed), and a vet
# with the oldest Go release go.mod allows. The race-enabled tests run with
# -short: one seed of the random sequences, not the longest runs, which
# make soak runs in full. The binaries the tests run (ratekeeper-server by
# the Dockerfile's command and with -race, ratekeeper-demo with and
# without -race) are built once per run by scripts/with-binaries.sh, into
# a temporary directory, their paths handed to the tests in
# RATEKEEPER_SERVER_BIN, RATEKEEPER_SERVER_RACE_BIN, RATEKEEPER_DEMO_BIN
# and RATEKEEPER_DEMO_RACE_BIN (internal/prebuilt); without them, as
# under make check or a plain go test, each test binary builds its own.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: test check check-race check-envoyit lint e2e demo server fuzz bench bench-service bench-rlqs soak min-go

test:
	./scripts/with-redis.sh ./scripts/with-binaries.sh $(MAKE) --no-print-directory check

# The race-enabled tests and envoyit's (check-race, check-envoyit) run at
# once: envoyit's time is mostly its own sleeps. Each one's output is
# printed whole when it ends.
check: lint
	$(MAKE) -j2 --output-sync=target --no-print-directory check-race check-envoyit
	# Alone and without the race detector, every call on a live Cluster
	# master's key must meet its deadline while another master is down.
	go test -count=1 -run '^TestClusterMasterDown$$/./^pipelined$$' ./internal/faults/
	# Alone and without the race detector, fleets with leases admit 95% of
	# the rate at twice its demand, and no Limiter waits longer than one
	# without leases, plus a TTL (with -short above, only the bound).
	go test -count=1 ./internal/leasetest/
	$(MAKE) --no-print-directory e2e
	$(MAKE) --no-print-directory min-go

# The race-enabled tests of the root module, metrics, grpclimit and the
# service (but envoyit) in one go command, which runs one module's tests
# while it compiles another's. -parallel 4: the parallel tests, most of
# them waiting for Redis or for processes they start, use more than the 2
# of a 2-core machine.
check-race:
	go test -race -short -count=1 -parallel 4 -timeout 20m ./... ./metrics/... ./grpclimit/... \
		$$(go list ./server/... | grep -v /internal/envoyit)

# envoyproxy/ratelimit's own integration tests, against the built binary:
# their time is their own sleeps, which the race detector would only
# stretch; and the benchmarks' tools, also without it.
check-envoyit:
	go test -count=1 -timeout 10m ./server/internal/envoyit/... ./bench/...

# The modules' packages, by the workspace (go.work), so that one go
# command takes them all: each shared package is loaded once, and the
# tests of one module run while another's compile.
LINTED := ./... ./e2e/... ./metrics/... ./grpclimit/... ./server/...

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet $(LINTED)
	go run $(STATICCHECK) $(LINTED)

# The browser test (its own module, e2e/): it builds cmd/ratekeeper-demo,
# runs it against the Redis in RATEKEEPER_REDIS_ADDR (else the in-process
# store), drives the page with /usr/bin/chromium (Debian's chromium, which
# scripts/need-chromium.sh installs when missing and root), saving its
# screenshots in a temporary directory (see make screenshot).
# RATEKEEPER_E2E=1 makes a missing browser a failure instead of a skip.
e2e:
	./scripts/need-chromium.sh
	cd e2e && RATEKEEPER_E2E=1 go test -race -count=1 ./...

# The demo on http://localhost:8090 (loopback only): Redis from REDIS_URL, else
# localhost:6379, else limits kept in process. Its flags go in ARGS, as in
# make demo ARGS='-addr 127.0.0.1:9090'.
demo:
	go run ./cmd/ratekeeper-demo $(ARGS)

# The rate limit service on gRPC :8081 and HTTP :8080, on the example
# configuration server/examples/config.yaml: Redis from REDIS_URL, else
# limits kept in process. Its flags go in ARGS, as in
# make server ARGS='-redis redis://localhost:6379 -shadow'.
server:
	go run ./server/cmd/ratekeeper-server -config server/examples/config.yaml $(ARGS)

# The root module vetted with the Go release its go.mod names as the
# minimum, when the module proxy serves that toolchain (skipped otherwise).
min-go:
	./scripts/check-min-go.sh

# Fuzz the models' arithmetic for a while (not part of make test).
fuzz:
	go test -run '^$$' -fuzz FuzzTokenBucket -fuzztime 60s .

bench:
	./scripts/with-redis.sh go test -run '^$$' -bench . -benchmem -count 5 ./...

# The rate limit service over gRPC against envoyproxy/ratelimit (its
# defaults and its best settings) and a no-op service, on one throwaway
# Redis, at 1, 16 and 128 callers (a few minutes; not part of make test).
# rlsload's flags go in ARGS, as in make bench-service ARGS='-rounds 5'.
bench-service:
	./scripts/bench-service.sh $(ARGS)

# The rate limit quota service (RLQS) against one rate limit service call
# per request, at the same traffic: 8 simulated Envoys on one bucket of
# 10,000/s (about 30 s; not part of make test). rlqsload's flags go in
# ARGS, as in make bench-rlqs ARGS='-interval 2s'.
bench-rlqs:
	./scripts/bench-rlqs.sh $(ARGS)

# The long runs, none of them part of make test:
#   - internal/soak (which make test runs for a few seconds): a minute of
#     load per algorithm, every admission checked against the policy's
#     bound, then 30 s of load on the demo server with its memory watched.
#     Without -race, so the rates and the memory are the real ones.
#   - what make test's -short leaves out, under -race: the random
#     sequences of driver/drivertest (decisions, and leases) from all
#     three seeds rather than the first, on memstore, one Redis and the
#     Cluster; memstore's million keys (TestCardinality); and the
#     service's largest configuration (server/config's size test).
SOAK_RACE := ./driver/... ./memstore/... ./internal/conformance/...
soak:
	./scripts/with-redis.sh sh -c 'set -e; \
		RATEKEEPER_SOAK_DURATION=60s RATEKEEPER_SOAK_LOAD_DURATION=30s \
			go test -count=1 -v -timeout 20m ./internal/soak/; \
		go test -race -count=1 -timeout 40m $(SOAK_RACE); \
		cd server && go test -race -count=1 -timeout 20m ./config/...'

# Refresh the README's picture of the page, docs/demo.png (make test never
# writes it): the browser test's first page against a throwaway Redis, its
# badge showing localhost:6379 rather than the throwaway's random port.
.PHONY: screenshot
screenshot:
	./scripts/with-redis.sh sh -c 'cd e2e && RATEKEEPER_E2E=1 RATEKEEPER_SCREENSHOT=$(CURDIR)/docs/demo.png go test -count=1 -run "^TestDemoPage$$" ./...'

# Tidy the nested modules. Their go.mod files have no replace directive
# (go install refuses one), so each is tidied with a temporary one that
# points at the working tree's root module.
.PHONY: tidy
tidy:
	for m in metrics grpclimit server bench e2e; do \
		(cd $$m && go mod edit -replace=github.com/ratekeeper/ratekeeper@v0.1.0=../ && \
			GOWORK=off go mod tidy; rc=$$?; \
			go mod edit -dropreplace=github.com/ratekeeper/ratekeeper@v0.1.0; exit $$rc) || exit 1; \
	done
