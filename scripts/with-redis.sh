#!/usr/bin/env bash
# Runs a command with a throwaway redis-server on a free loopback port, its
# address in RATEKEEPER_REDIS_ADDR, and stops the server afterwards,
# whatever happened. Usage: scripts/with-redis.sh command [args...]
set -euo pipefail

if ! command -v redis-server >/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "with-redis: installing redis-server" >&2
		(apt-get install -y redis-server >/dev/null 2>&1 ||
			{ apt-get update >/dev/null && apt-get install -y redis-server >/dev/null; })
	else
		echo "with-redis: redis-server not found; install it (Debian: sudo apt-get install -y redis-server)" >&2
		exit 1
	fi
fi

dir=$(mktemp -d)
pid=
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM

# A free port: ask the kernel for one, then let redis-server claim it; try
# again if another process took it in between.
for attempt in 1 2 3 4 5; do
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
		echo $((20000 + RANDOM % 20000)))
	redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
		--dir "$dir" --logfile "$dir/redis.log" --maxmemory-policy noeviction &
	pid=$!
	for _ in $(seq 50); do
		if redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1; then
			break 2
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			break
		fi
		sleep 0.1
	done
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	pid=
done
if [ -z "$pid" ]; then
	echo "with-redis: could not start redis-server; its log:" >&2
	cat "$dir/redis.log" >&2 || true
	exit 1
fi

export RATEKEEPER_REDIS_ADDR="127.0.0.1:$port"
echo "with-redis: redis-server $(redis-server --version | awk '{print $3}') on $RATEKEEPER_REDIS_ADDR" >&2
"$@"
