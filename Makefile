# make test: vet, staticcheck and the race-enabled tests against a
# throwaway redis-server (installed with apt-get when missing and root).
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: test check lint fuzz bench

test:
	./scripts/with-redis.sh $(MAKE) --no-print-directory check

check: lint
	go test -race -count=1 ./...

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	go run $(STATICCHECK) ./...

# Fuzz the models' arithmetic for a while (not part of make test).
fuzz:
	go test -run '^$$' -fuzz FuzzTokenBucket -fuzztime 60s .

bench:
	./scripts/with-redis.sh go test -run '^$$' -bench . -benchmem -count 5 ./...
