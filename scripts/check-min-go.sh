#!/usr/bin/env bash
# Vets the root module with the oldest Go release its go.mod names, and
# with its own requirements rather than the workspace's, as a user on that
# release builds it. The go command fetches that toolchain from the module
# proxy; when it cannot, the check is skipped, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(awk '$1 == "go" { print $2; exit }' go.mod)
toolchain=go$version
if ! out=$(GOTOOLCHAIN=$toolchain go version 2>&1); then
	echo "check-min-go: SKIPPED: cannot get the $toolchain toolchain (go.mod's minimum) to check the module with it:" >&2
	echo "$out" | sed 's/^/check-min-go:   /' >&2
	exit 0
fi
echo "check-min-go: go vet ./... with $toolchain and the root go.mod's requirements" >&2
GOWORK=off GOTOOLCHAIN=$toolchain go vet ./...
