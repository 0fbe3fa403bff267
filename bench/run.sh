#!/usr/bin/env bash
# egressd side by side with Squid, tinyproxy, smokescreen and the Go floor
# (bench/gofloor: a proxy with no policy on Go's standard runtime), on loopback in
# a network namespace of its own; prints the Markdown report on stdout
# (progress on stderr). Installs the peers at run time (apt-get for squid and
# tinyproxy, go install for smokescreen into a temporary directory), builds
# egressd and the bench, and runs it with the proxy pinned to CPU 0 and the
# load generator and origin to CPU 1. Extra arguments go to the bench
# (go run ./bench -h lists them), e.g.:
#
#   bash bench/run.sh                 # the full comparison, then the scale runs
#   bash bench/run.sh -runs 2         # two comparisons in one go (stability)
#   bash bench/run.sh -scale=false    # the table only
#
# Needs root (apt-get, unshare --net, and the descriptor limit) and 2 CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "bench/run.sh: run as root (sudo bash bench/run.sh)" >&2
	exit 2
fi

installed=()
for pkg in squid tinyproxy; do
	if ! command -v "$pkg" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$pkg" ]; then
		installed+=("$pkg")
	fi
done
if [ ${#installed[@]} -gt 0 ]; then
	echo "bench: installing ${installed[*]}" >&2
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${installed[@]}" >&2
	# The packages start their own daemons on hosts with an init system;
	# the bench runs its own instances and leaves none behind.
	if command -v systemctl >/dev/null 2>&1; then
		systemctl disable --now "${installed[@]}" >/dev/null 2>&1 || true
	fi
fi
squid=$(command -v squid || echo /usr/sbin/squid)
tinyproxy=$(command -v tinyproxy || echo /usr/bin/tinyproxy)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the newest tagged smokescreen, unless SMOKESCREEN_VERSION names one
smk=${SMOKESCREEN_VERSION:-$(go list -m -versions github.com/stripe/smokescreen 2>/dev/null | awk '$NF ~ /^v/ {print $NF}')}
smk=${smk:-v0.1.0}
echo "bench: building egressd and the bench; go install smokescreen@$smk" >&2
GOBIN="$tmp/bin" go install "github.com/stripe/smokescreen@$smk" >&2
go build -o "$tmp/bin/egressd" ./cmd/egressd
go build -o "$tmp/bin/bench" ./bench
go build -o "$tmp/bin/gofloor" ./bench/gofloor

# 10,000 idle tunnels take 20,000 descriptors in egressd: raise the limit as
# far as this machine lets (the bench says when it has to use fewer).
ulimit -Hn 1048576 2>/dev/null || ulimit -Hn 65536 2>/dev/null || true
ulimit -n "$(ulimit -Hn)"

# A network namespace of its own: only loopback, nothing else reachable, and
# the run's tens of thousands of connections (and their TIME_WAIT entries)
# stay out of the machine's own namespace. It goes away with the bench.
unshare --net -- sh -c '
	ip link set lo up
	echo "1024 65535" > /proc/sys/net/ipv4/ip_local_port_range
	exec taskset -c 1 "$@"
' bench "$tmp/bin/bench" -egressd-version "egressd $(git describe --always --dirty 2>/dev/null || echo devel)" -egressd "$tmp/bin/egressd" -squid "$squid" -tinyproxy "$tinyproxy" -smokescreen "$tmp/bin/smokescreen" -gofloor "$tmp/bin/gofloor" -proxy-cpu 0 "$@"
