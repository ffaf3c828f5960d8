# make test: vet, staticcheck and the race-enabled tests against a
# throwaway redis-server (installed with apt-get when missing and root),
# then the demo's page in headless Chromium (likewise installed), and a vet
# with the oldest Go release go.mod allows.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: test check lint e2e demo server fuzz bench bench-service soak min-go

test:
	./scripts/with-redis.sh $(MAKE) --no-print-directory check

# -short: one seed of each random sequence, and no test of a million keys;
# make soak runs them all.
check: lint
	go test -race -short -count=1 -timeout 20m ./...
	# Alone and without the race detector, every call on a live Cluster
	# master's key must meet its deadline while another master is down.
	go test -count=1 -run '^TestClusterMasterDown$$/./^pipelined$$' ./internal/faults/
	# Alone and without the race detector, fleets with leases admit 95% of
	# the rate at twice its demand, and no Limiter waits longer than one
	# without leases, plus a TTL (with -short above, only the bound).
	go test -count=1 ./internal/leasetest/
	cd metrics && go test -race -count=1 ./...
	cd grpclimit && go test -race -count=1 ./...
	cd server && go test -race -short -count=1 -timeout 20m $$(go list ./... | grep -v /internal/envoyit)
	# envoyproxy/ratelimit's own integration tests, against the built
	# binary: their time is their own sleeps, which the race detector
	# would only stretch.
	cd server && go test -count=1 -timeout 10m ./internal/envoyit/...
	cd bench && go test -count=1 ./...
	$(MAKE) --no-print-directory e2e
	$(MAKE) --no-print-directory min-go

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	go run $(STATICCHECK) ./...
	cd e2e && go vet ./... && go run $(STATICCHECK) ./...
	cd metrics && go vet ./... && go run $(STATICCHECK) ./...
	cd grpclimit && go vet ./... && go run $(STATICCHECK) ./...
	cd server && go vet ./... && go run $(STATICCHECK) ./...

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

# The long runs of internal/soak (not part of make test, which runs them
# for a few seconds): a minute of load per algorithm, every admission
# checked against the policy's bound, then 30 s of load on the demo server
# with its memory watched. Without -race, so the rates and the memory are
# the real ones.
soak:
	./scripts/with-redis.sh env RATEKEEPER_SOAK_DURATION=60s RATEKEEPER_SOAK_LOAD_DURATION=30s \
		go test -count=1 -v -timeout 20m ./internal/soak/
	# What make test runs with -short: every seed of the random sequences,
	# a million keys in memstore, 100,000 descriptors in one file.
	./scripts/with-redis.sh go test -race -count=1 -timeout 30m ./driver/... ./memstore/ ./internal/conformance/
	cd server && go test -race -count=1 -run 'TestLargePlainFile' ./config/

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
