#!/usr/bin/env bash
# Runs a command with a throwaway redis-server on a free loopback port, its
# address in RATEKEEPER_REDIS_ADDR, and a throwaway Redis Cluster of three
# masters, their addresses in RATEKEEPER_REDIS_CLUSTER (comma-separated),
# and stops every server afterwards, whatever happened.
# Usage: scripts/with-redis.sh command [args...]
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
cluster_pids=()
# stop kills the given servers, then waits for them all.
stop() {
	local p
	for p in "$@"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "$@"; do
		wait "$p" 2>/dev/null || true
	done
}
cleanup() {
	stop $pid ${cluster_pids[@]+"${cluster_pids[@]}"}
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

# The cluster: three masters, no replicas. A cluster node also listens on
# its port + 10000 (the cluster bus), so both must be free.
free_cluster_ports() {
	python3 -c '
import random, socket
ports = []
while len(ports) < 3:
    p = random.randint(20000, 55000)
    if any(abs(p - q) in (0, 10000) for q in ports):
        continue
    try:
        for q in (p, p + 10000):
            socket.socket().bind(("127.0.0.1", q))
    except OSError:
        continue
    ports.append(p)
print(*ports)' 2>/dev/null ||
		echo $((20000 + RANDOM % 10000)) $((30000 + RANDOM % 10000)) $((50000 + RANDOM % 5000))
}

# start_cluster_nodes starts three empty cluster nodes and waits until each
# answers; it fails if one exits or stays silent for 5 s.
start_cluster_nodes() {
	local p i
	read -ra cluster_ports <<<"$(free_cluster_ports)"
	cluster_pids=()
	for p in "${cluster_ports[@]}"; do
		mkdir -p "$dir/cluster-$p"
		redis-server --bind 127.0.0.1 --port "$p" --save '' --appendonly no \
			--dir "$dir/cluster-$p" --logfile "$dir/cluster-$p/redis.log" --maxmemory-policy noeviction \
			--cluster-enabled yes --cluster-config-file "$dir/cluster-$p/nodes.conf" &
		cluster_pids+=($!)
	done
	for i in 0 1 2; do
		p=${cluster_ports[$i]}
		for _ in $(seq 50); do
			if redis-cli -h 127.0.0.1 -p "$p" ping >/dev/null 2>&1; then
				continue 2
			fi
			if ! kill -0 "${cluster_pids[$i]}" 2>/dev/null; then
				return 1
			fi
			sleep 0.1
		done
		return 1
	done
}

# cluster_fail prints every cluster log and exits.
cluster_fail() {
	local f
	echo "with-redis: could not start the redis cluster: $1; its logs:" >&2
	for f in "$dir"/cluster-*/redis.log "$dir/cluster-create.log"; do
		if [ -f "$f" ]; then
			echo "--- ${f#"$dir"/}" >&2
			cat "$f" >&2
		fi
	done
	exit 1
}

began=$(date +%s%N)
for attempt in 1 2 3 4 5; do
	if start_cluster_nodes; then
		break
	fi
	if [ "$attempt" = 5 ]; then
		cluster_fail "a node did not start"
	fi
	stop "${cluster_pids[@]}"
	cluster_pids=()
	rm -rf "$dir"/cluster-*
done
cluster_addrs=()
for p in "${cluster_ports[@]}"; do
	cluster_addrs+=("127.0.0.1:$p")
done
redis-cli --cluster create "${cluster_addrs[@]}" --cluster-replicas 0 --cluster-yes \
	>"$dir/cluster-create.log" 2>&1 </dev/null ||
	cluster_fail "redis-cli --cluster create failed"
# Every node must see every slot served before a client asks it for the
# slot map.
for p in "${cluster_ports[@]}"; do
	for _ in $(seq 150); do
		if redis-cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; then
			continue 2
		fi
		sleep 0.1
	done
	cluster_fail "127.0.0.1:$p not in cluster_state:ok after 15 s"
done

export RATEKEEPER_REDIS_CLUSTER=$(IFS=,; echo "${cluster_addrs[*]}")
echo "with-redis: redis cluster of 3 masters on $RATEKEEPER_REDIS_CLUSTER, ready in $((($(date +%s%N) - began) / 1000000)) ms" >&2
"$@"
