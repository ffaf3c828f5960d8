#!/usr/bin/env bash
# Makes sure /usr/bin/chromium, Debian's chromium, is there for the browser
# test: installs it with apt-get when missing and run as root, and says how
# to install it otherwise.
set -euo pipefail

chromium=/usr/bin/chromium
if [ -x "$chromium" ]; then
	exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
	echo "need-chromium: installing chromium" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y chromium >/dev/null 2>&1 ||
		{ apt-get update >/dev/null && apt-get install -y chromium >/dev/null; }
fi
if [ ! -x "$chromium" ]; then
	echo "need-chromium: $chromium not found; the browser test needs Debian's chromium (sudo apt-get install -y chromium)" >&2
	exit 1
fi
