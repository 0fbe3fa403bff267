#!/usr/bin/env bash
# egressd serve's start and SIGHUP reloads with a 1,000,000-host policy, the
# hosts once inline in the YAML and once in allow[].hosts_files (half exact
# names, half wildcards, over 10 rules): wall and CPU seconds and peak RSS
# (VmHWM, reset before each step) of the start (exec to the boot self-test's
# verdict) and of each reload (SIGHUP to its outcome).
#
#   sudo bash bench/bigpolicy.sh [EGRESSD_BINARY] [HOSTS] [RELOADS] [LOAD]
#
# LOAD (default 0): that many curl streams keep opening tunnels to an
# allowed host through the proxy (8 at a time each) from the start's end to
# the last reload's, so the reloads compete with traffic for the CPUs; the
# requests each stream completed are printed at the end.
#
# serve runs in a network namespace of its own with only loopback: its
# self-test finds no network there, so each reload is verified, fails and
# rolls back, which is all of a reload's work. Needs root (unshare --net).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "bench/bigpolicy.sh: run as root (sudo bash bench/bigpolicy.sh)" >&2
	exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bin=${1:-}
if [ -z "$bin" ]; then
	go build -o "$tmp/egressd" ./cmd/egressd
	bin=$tmp/egressd
fi
hosts=${2:-1000000}
reloads=${3:-3}
load=${4:-0}

head='version: 1
listen:
  proxy: 127.0.0.1:13128
  admin: 127.0.0.1:19090
allow:'
host='function host(k) { return k % 2 == 0 ? sprintf("host%d.example%d.com", k, k % 997) : sprintf("*.svc%d.example%d.org", k, k % 991) }'
{
	echo "$head"
	awk -v n="$hosts" "$host"'
		BEGIN { per = int(n / 10); for (r = 0; r < 10; r++) {
			printf "  - name: rule%d\n    ports: [443]\n    pages: [\"*\"]\n    hosts:\n", r
			for (i = 0; i < per; i++) printf "      - \"%s\"\n", host(r * per + i) } }'
} >"$tmp/inline.yaml"
{
	echo "$head"
	for r in 0 1 2 3 4 5 6 7 8 9; do
		printf '  - name: rule%d\n    ports: [443]\n    pages: ["*"]\n    hosts_files: [rule%d.txt]\n' "$r" "$r"
		awk -v n="$hosts" -v r="$r" "$host"'
			BEGIN { per = int(n / 10); for (i = 0; i < per; i++) print host(r * per + i) }' >"$tmp/rule$r.txt"
	done
} >"$tmp/files.yaml"

cat >"$tmp/measure.sh" <<'EOF'
set -eu
ip link set lo up
bin=$1 cfg=$2 reloads=$3 dir=$4 load=$5
log=$dir/serve-$(basename "$cfg").log
: >"$log" # before serve starts: the wait reads it
now() { date +%s.%N; }
cpu() { awk '{printf "%.2f", ($14+$15)/100}' /proc/$pid/stat; }
hwm() { awk '/VmHWM/{printf "%.0f", $2/1024}' /proc/$pid/status; }
rss() { awk '/VmRSS/{printf "%.0f", $2/1024}' /proc/$pid/status; }
waitlog() { while [ "$(grep -cE "$2" "$log")" -lt "$1" ]; do sleep 0.02; done; }
rm -rf "$dir/state" && mkdir -p "$dir/state"
t0=$(now)
"$bin" serve --config "$cfg" --state-dir "$dir/state" >"$log" 2>&1 &
pid=$!
waitlog 1 '"msg":"(ready|not ready)"'
echo "| start | $(echo "$(now) - $t0" | bc | xargs printf %.2f) | $(cpu) | $(hwm) | $(rss) |"
loaders=()
urls=$(printf -- '-o /dev/null https://host0.example0.com/ %.0s' $(seq 500)) # each a CONNECT decided against the 1M hosts
for l in $(seq 1 "$load"); do
	(n=0; while true; do
		curl -s --parallel --parallel-max 8 -x http://127.0.0.1:13128 $urls >/dev/null 2>&1 || true
		n=$((n + 500)); echo $n >"$dir/load$l"
	done) &
	loaders+=($!)
done
for i in $(seq 1 "$reloads"); do
	echo 5 >/proc/$pid/clear_refs # VmHWM from here
	c0=$(cpu) t0=$(now)
	kill -HUP $pid
	waitlog "$i" '"msg":"reload (applied|rolled back|rejected)'
	echo "| reload $i | $(echo "$(now) - $t0" | bc | xargs printf %.2f) | $(echo "$(cpu) - $c0" | bc | xargs printf %.2f) | $(hwm) | $(rss) |"
done
for l in "${loaders[@]}"; do kill "$l"; done
[ "$load" -gt 0 ] && echo "load: $load streams, $(cat "$dir"/load* | paste -sd+ | bc) requests completed during the reloads"
kill $pid
wait $pid || true
EOF

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for form in inline files; do
	echo
	echo "### $hosts hosts, $([ $form = inline ] && echo inline in the YAML || echo in allow[].hosts_files)"
	echo
	echo "| step | wall s | CPU s | peak RSS MiB | RSS after MiB |"
	echo "|---|--:|--:|--:|--:|"
	rm -f "$tmp"/load*
	unshare --net --mount -- bash "$tmp/measure.sh" "$bin" "$tmp/$form.yaml" "$reloads" "$tmp" "$load"
done
