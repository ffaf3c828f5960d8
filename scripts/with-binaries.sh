#!/usr/bin/env bash
# Builds, once, the binaries the tests run, into a temporary directory, and
# runs a command with their paths in the environment (internal/prebuilt
# reads them), removing them afterwards, whatever happened:
#   RATEKEEPER_SERVER_BIN       ratekeeper-server, by the Dockerfile's own
#                               go build command (no race detector)
#   RATEKEEPER_SERVER_RACE_BIN  ratekeeper-server with -race
#   RATEKEEPER_DEMO_BIN         ratekeeper-demo
#   RATEKEEPER_DEMO_RACE_BIN    ratekeeper-demo with -race
# A test whose variable is unset (a plain go test) builds its binary
# itself.
# Usage: scripts/with-binaries.sh command [args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT INT TERM
began=$(date +%s%N)

# The Dockerfile's RUN line with go build, run from the tree's root as the
# Dockerfile runs it from its copy of the tree, its -o path replaced by
# ours: server/cmd/ratekeeper-server's TestEnvoyGatewayEnvironment runs
# this binary, and checks that its build settings are those of that line.
build=$(sed -n 's/^RUN \(.*go build .*-o [^ ]* .*\)$/\1/p' "$root/Dockerfile")
out=$(printf '%s\n' "$build" | sed -n 's/.* -o \([^ ]*\) .*/\1/p')
if [ -z "$build" ] || [ -z "$out" ] || [ "$(printf '%s\n' "$build" | wc -l)" != 1 ]; then
	echo "with-binaries: no single 'RUN ... go build ... -o OUT PKG' line in the Dockerfile" >&2
	exit 1
fi
(cd "$root" && sh -c "${build/ -o $out / -o $dir/ratekeeper-server }")
# The race-enabled binaries in one go command, which compiles the
# packages they share once.
(cd "$root/server" && go build -race -o "$dir/race/" ./cmd/ratekeeper-server github.com/ratekeeper/ratekeeper/cmd/ratekeeper-demo)
(cd "$root" && go build -o "$dir/ratekeeper-demo" ./cmd/ratekeeper-demo)

export RATEKEEPER_SERVER_BIN=$dir/ratekeeper-server
export RATEKEEPER_SERVER_RACE_BIN=$dir/race/ratekeeper-server
export RATEKEEPER_DEMO_BIN=$dir/ratekeeper-demo
export RATEKEEPER_DEMO_RACE_BIN=$dir/race/ratekeeper-demo
echo "with-binaries: ratekeeper-server and ratekeeper-demo, with and without -race, built in $((($(date +%s%N) - began) / 1000000)) ms" >&2
"$@"
