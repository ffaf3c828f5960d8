#!/usr/bin/env bash
# Measures ratekeeper-server's rate limit quota service (RLQS) against its
# rate limit service (RLS) at the same traffic, with
# server/internal/rlqsload: 8 simulated Envoys sharing one bucket of
# 10,000/s on a throwaway Redis. Run it while the machine is otherwise
# idle. rlqsload's flags go after the script's name, e.g. -dur 20s.
# Everything listens on loopback only and stops when the script exits.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${BENCH_RLQS_REDIS:-}" ]; then
	BENCH_RLQS_REDIS=1 exec "$root/scripts/with-redis.sh" "$0" "$@"
fi

dir=$(mktemp -d)
pid=
cleanup() {
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi
	rm -rf "$dir"
}
trap cleanup EXIT

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

cat >"$dir/api.yaml" <<'YAML'
domain: api
descriptors:
  - key: name
    value: global
    rate_limit: {unit: second, requests_per_unit: 10000, algorithm: token_bucket}
quota_buckets:
  - bucket: {name: global}
    rate_limit: {unit: second, requests_per_unit: 10000}
YAML

echo "bench-rlqs: building" >&2
(cd "$root/server" && go build -o "$dir/" ./cmd/ratekeeper-server ./internal/rlqsload)
grpc=$(free_port) http=$(free_port)
timeout -k 5 10m "$dir/ratekeeper-server" -config "$dir/api.yaml" -grpc-addr "127.0.0.1:$grpc" \
	-http-addr "127.0.0.1:$http" -redis "redis://$RATEKEEPER_REDIS_ADDR" >"$dir/server.log" 2>&1 &
pid=$!
for _ in $(seq 300); do
	curl -fsS -o /dev/null --max-time 1 "http://127.0.0.1:$http/readyz" 2>/dev/null && break
	if ! kill -0 "$pid" 2>/dev/null; then
		cat "$dir/server.log" >&2
		exit 1
	fi
	sleep 0.1
done
server=$(pgrep -P "$pid" | head -1)
timeout -k 5 5m "$dir/rlqsload" -addr "127.0.0.1:$grpc" -pid "$server" "$@"
