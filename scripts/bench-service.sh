#!/usr/bin/env bash
# Benchmarks rate limit services over gRPC on this machine, all on one
# throwaway Redis and one configuration (domain "bench", a limit per value
# of the descriptor key "user"), with bench/cmd/rlsload driving them
# interleaved round by round:
#
#   noop        bench/cmd/noop-rls, which answers OK without deciding: the
#               ceiling of gRPC on this machine;
#   envoy       envoyproxy/ratelimit with its defaults;
#   envoy-best  envoyproxy/ratelimit with its best settings here
#               (ENVOY_BEST, below);
#   ratekeeper  server/cmd/ratekeeper-server, when it exists.
#
# Usage: scripts/bench-service.sh [rlsload flags...]
#        scripts/bench-service.sh -tune [rlsload flags...]
# e.g.   scripts/bench-service.sh -dur 4s -rounds 3
#
# -tune runs envoyproxy/ratelimit alone in each setting of ENVOY_TUNE, to
# choose ENVOY_BEST. The flags after it go to rlsload (defaults below).
#
# Environment:
#   ENVOY_BEST     envoyproxy/ratelimit's settings for envoy-best
#   ENVOY_TUNE     settings tried by -tune, separated by ";"
#   ENVOY_RATELIMIT_BIN  a service_cmd binary to use instead of building one
#   RATEKEEPER_SERVER_BIN  a ratekeeper-server binary to use instead of
#                  building server/cmd/ratekeeper-server
#   BENCH_SERVICE_TIMEOUT  the longest any server runs (default 30m)
#
# envoyproxy/ratelimit is built once from the Go module proxy (about a
# minute) into ${XDG_CACHE_HOME:-~/.cache}/ratekeeper/. Every server
# listens on loopback only and is stopped when the script exits.
set -euo pipefail

ENVOY_RATELIMIT_VERSION=v1.4.1-0.20260122083618-3fb702589d36
ENVOY_BEST=${ENVOY_BEST:-REDIS_PIPELINE_WINDOW=150us LOCAL_CACHE_SIZE_IN_BYTES=1048576}
ENVOY_TUNE=${ENVOY_TUNE:-REDIS_PIPELINE_WINDOW=150us;REDIS_PIPELINE_WINDOW=150us LOCAL_CACHE_SIZE_IN_BYTES=1048576;REDIS_PIPELINE_WINDOW=500us;REDIS_POOL_SIZE=32;REDIS_PIPELINE_WINDOW=150us REDIS_POOL_SIZE=32}
BENCH_SERVICE_TIMEOUT=${BENCH_SERVICE_TIMEOUT:-30m}

root=$(cd "$(dirname "$0")/.." && pwd)

# A Redis of its own: rlsload counts its commands.
if [ -z "${BENCH_SERVICE_REDIS:-}" ]; then
	BENCH_SERVICE_REDIS=1 exec "$root/scripts/with-redis.sh" "$0" "$@"
fi
redis_addr=$RATEKEEPER_REDIS_ADDR

tune=
if [ "${1:-}" = -tune ]; then
	tune=1
	shift
fi

dir=$(mktemp -d)
pids=()
cleanup() {
	local p
	for p in ${pids[@]+"${pids[@]}"}; do
		kill "$p" 2>/dev/null || true
	done
	for p in ${pids[@]+"${pids[@]}"}; do
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM

# free_port prints a loopback port that is free now.
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_http waits up to 30 s for URL to answer 200, while process PID lives.
wait_http() {
	local name=$1 pid=$2 url=$3
	for _ in $(seq 300); do
		if curl -fsS -o /dev/null --max-time 1 "$url" 2>/dev/null; then
			return 0
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "bench-service: $name exited; its log:" >&2
			cat "$dir/$name.log" >&2 || true
			exit 1
		fi
		sleep 0.1
	done
	echo "bench-service: $name not ready at $url after 30 s; its log:" >&2
	cat "$dir/$name.log" >&2 || true
	exit 1
}

# The configuration, in envoyproxy/ratelimit's format, read by every
# service: 100 requests per second per value, far above what one value
# gets when the load spreads over 10,000 values, so nearly every request is
# allowed.
mkdir -p "$dir/runtime/rl/config"
cat >"$dir/runtime/rl/config/bench.yaml" <<'EOF'
domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 100
EOF

echo "bench-service: building" >&2
mkdir -p "$dir/bin"
(cd "$root/bench" && go build -o "$dir/bin/" ./cmd/noop-rls ./cmd/rlsload)
ratekeeper_bin=
if [ -n "$tune" ]; then
	:
elif [ -n "${RATEKEEPER_SERVER_BIN:-}" ]; then
	ratekeeper_bin=$RATEKEEPER_SERVER_BIN
elif [ -d "$root/server/cmd/ratekeeper-server" ]; then
	(cd "$root/server" && go build -o "$dir/bin/" ./cmd/ratekeeper-server)
	ratekeeper_bin=$dir/bin/ratekeeper-server
else
	echo "bench-service: server/cmd/ratekeeper-server does not exist yet: measuring without ratekeeper" >&2
fi

envoy_bin=${ENVOY_RATELIMIT_BIN:-}
if [ -z "$envoy_bin" ]; then
	cache=${XDG_CACHE_HOME:-$HOME/.cache}/ratekeeper/envoy-ratelimit-$ENVOY_RATELIMIT_VERSION
	envoy_bin=$cache/service_cmd
	if [ ! -x "$envoy_bin" ]; then
		echo "bench-service: building envoyproxy/ratelimit $ENVOY_RATELIMIT_VERSION into $cache (about a minute)" >&2
		mkdir -p "$cache"
		(cd "$dir" && GOWORK=off GOFLAGS=-mod=mod GOBIN="$cache" \
			go install "github.com/envoyproxy/ratelimit/src/service_cmd@$ENVOY_RATELIMIT_VERSION")
	fi
fi

targets=()
target_pids=()

# add_target NAME PORT PID names a running service to rlsload; PID is the
# timeout(1) that runs it, whose child is the service whose CPU time
# rlsload reads.
add_target() {
	local child
	targets+=("$1=127.0.0.1:$2")
	child=$(pgrep -P "$3" | head -1 || true)
	if [ -n "$child" ]; then
		target_pids+=("$1=$child")
	fi
}

# start_envoy NAME [VAR=value...] starts envoyproxy/ratelimit with its
# defaults, overridden by the given settings. Each instance has a key
# prefix of its own, of the same length, so that they share no counter.
start_envoy() {
	local name=$1
	shift
	local grpc http debug
	grpc=$(free_port) http=$(free_port) debug=$(free_port)
	env REDIS_SOCKET_TYPE=tcp REDIS_URL="$redis_addr" USE_STATSD=false LOG_LEVEL=warn \
		RUNTIME_ROOT="$dir/runtime" RUNTIME_SUBDIRECTORY=rl RUNTIME_WATCH_ROOT=false \
		HOST=127.0.0.1 PORT="$http" GRPC_HOST=127.0.0.1 GRPC_PORT="$grpc" \
		DEBUG_HOST=127.0.0.1 DEBUG_PORT="$debug" \
		CACHE_KEY_PREFIX="$(printf '%s' "$name" | sha1sum | cut -c1-8):" "$@" \
		timeout -k 5 "$BENCH_SERVICE_TIMEOUT" "$envoy_bin" >"$dir/$name.log" 2>&1 &
	pids+=($!)
	wait_http "$name" $! "http://127.0.0.1:$http/healthcheck"
	add_target "$name" "$grpc" $!
	echo "bench-service: $name on 127.0.0.1:$grpc${*:+ with $*}" >&2
}

start_noop() {
	local grpc http
	grpc=$(free_port) http=$(free_port)
	timeout -k 5 "$BENCH_SERVICE_TIMEOUT" "$dir/bin/noop-rls" -grpc-addr "127.0.0.1:$grpc" -http-addr "127.0.0.1:$http" \
		>"$dir/noop.log" 2>&1 &
	pids+=($!)
	wait_http noop $! "http://127.0.0.1:$http/readyz"
	add_target noop "$grpc" $!
	echo "bench-service: noop on 127.0.0.1:$grpc" >&2
}

start_ratekeeper() {
	local grpc http
	grpc=$(free_port) http=$(free_port)
	timeout -k 5 "$BENCH_SERVICE_TIMEOUT" "$ratekeeper_bin" -config "$dir/runtime/rl/config/bench.yaml" \
		-grpc-addr "127.0.0.1:$grpc" -http-addr "127.0.0.1:$http" -redis "redis://$redis_addr" \
		>"$dir/ratekeeper.log" 2>&1 &
	pids+=($!)
	wait_http ratekeeper $! "http://127.0.0.1:$http/readyz"
	add_target ratekeeper "$grpc" $!
	echo "bench-service: ratekeeper on 127.0.0.1:$grpc" >&2
}

baseline=envoy-best,noop
if [ -n "$tune" ]; then
	start_envoy envoy
	i=0
	IFS=';' read -ra settings <<<"$ENVOY_TUNE"
	for s in "${settings[@]}"; do
		i=$((i + 1))
		# shellcheck disable=SC2086 # each setting is a list of VAR=value
		start_envoy "envoy-$i" $s
	done
	baseline=envoy
else
	start_noop
	start_envoy envoy
	# shellcheck disable=SC2086 # ENVOY_BEST is a list of VAR=value
	start_envoy envoy-best $ENVOY_BEST
	if [ -n "$ratekeeper_bin" ]; then
		start_ratekeeper
	fi
fi

echo "bench-service: envoy-best is envoyproxy/ratelimit with $ENVOY_BEST" >&2
timeout -k 5 "$BENCH_SERVICE_TIMEOUT" "$dir/bin/rlsload" -redis "$redis_addr" \
	-targets "$(IFS=,; echo "${targets[*]}")" -pids "$(IFS=,; echo "${target_pids[*]}")" -baseline "$baseline" \
	-conc 1,16,128 -dur 2s -warmup 250ms -rounds 7 -keys 10000 "$@"
