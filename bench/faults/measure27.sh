#!/bin/bash
# Issue 27's door measurements, rerun against a build of egressd (root):
#
#   go build -o /tmp/m27/egressd ./cmd/egressd
#   bench/faults/measure27.sh /tmp/m27/egressd
#   M27_ONLY="3" M27_TUNNELS=500 bench/faults/measure27.sh /tmp/m27/egressd
#
# Everything runs in a network namespace of its own with only lo up (nothing
# reaches the machine's network; `egressd serve` never runs as root in the
# machine's own namespace), with the real self-test (proxy-only mode: no
# --walls). A rule allows tunnel.example.com:443 (resolved by the origin's
# resolver to an echo origin on 127.0.0.1:443), so every self-test runs the
# silent-tunnel probe and takes about 5 s, as in the issue.
# It prints, per measurement, what it did and its figures:
#   1. reloads at a cadence: M27_RELOADS (4) changed configs, one every
#      M27_CADENCE seconds (30), then one SIGHUP with nothing changed, while
#      M27_CLIENTS (4) clients ask an allowed origin without pause: requests,
#      refusals (goal 0), and the reload results egressd logged;
#   2. a reload storm: M27_STORM (20) config writes, one every 0.5 s (the file
#      watcher reloads), under the same load: refusals, and how many self-tests
#      the storm cost;
#   3. drain at SIGTERM: M27_TUNNELS (2000) CONNECT tunnels open, then SIGTERM
#      with limits.shutdown_grace M27_GRACE (5s): time to exit, what the
#      tunnels saw, and the audit log (`egressd audit verify`, and counts of
#      tunnel open, tunnel close and CONNECT decision records).
# The origin and the clients are bench/faults/m17 (built here).
set -u
if [ -z "${M27_IN_NETNS:-}" ]; then
  [ "$(id -u)" = 0 ] || { echo "root only (a network namespace)" >&2; exit 2; }
  BIN=$(readlink -f "${1:?usage: $0 EGRESSD_BINARY}")
  cd "$(dirname "$0")/../.." || exit 2
  W=${M27_DIR:-/tmp/egressd-measure27}; rm -rf "$W"; mkdir -p "$W"
  go build -o "$W/m17" ./bench/faults/m17 || exit 1
  M27_IN_NETNS=1 exec unshare --net -- "$0" "$BIN" "$W"
fi

BIN=$1; W=$2
ip link set lo up || exit 1
[ "$(readlink /proc/self/ns/net)" != "$(readlink /proc/1/ns/net 2>/dev/null)" ] || { echo "not in a new network namespace" >&2; exit 2; }
ulimit -n "$(ulimit -Hn)"  # 2,000 tunnels: about 4,000 descriptors in egressd
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done' EXIT
want() { [[ " ${M27_ONLY:-1 2 3} " == *" $1 "* ]]; }

HTTP=18080 ECHO=18081 PP=13128 AP=19090 UPDNS=15353
"$W/m17" door-origin -http 127.0.0.1:$HTTP -echo 127.0.0.1:$ECHO,127.0.0.1:443 -dns 127.0.0.1:$UPDNS > "$W/origin.log" 2>&1 &
PIDS+=($!)
for i in $(seq 100); do grep -q listening "$W/origin.log" && break; sleep 0.1; done

# A build without limits.shutdown_grace (before issue 27) refuses the key:
# it then runs without it (its stop does not drain).
GRACE="shutdown_grace: ${M27_GRACE:-5s}"
printf 'version: 1\nlimits:\n  %s\n' "$GRACE" > "$W/grace.yaml"
"$BIN" validate --config "$W/grace.yaml" > /dev/null 2>&1 || { GRACE="# no limits.shutdown_grace in this build"; echo "note: this build has no limits.shutdown_grace"; }

# config N writes a config whose extra rule names port 20000+N: each N is a
# real change of the policy (a new self-test), the same N is not.
config() {
  cat > "$W/egressd.yaml.tmp" <<EOC
version: 1
listen: {proxy: "127.0.0.1:$PP", admin: "127.0.0.1:$AP"}
resolver: {upstreams: ["127.0.0.1:$UPDNS"]}
allow:
  - {name: origin, cidrs: [127.0.0.1/32], ports: [$HTTP], pages: ["*"]}
  - {name: echo, cidrs: [127.0.0.1/32], ports: [$ECHO], pages: ["*"], tls: false}
  - {name: tunnelable, hosts: [tunnel.example.com], cidrs: [127.0.0.1/32], ports: [443]}
  - {name: extra, cidrs: [127.0.0.1/32], ports: [$((20000 + $1))]}
limits:
  $GRACE
  conns_per_identity: 100000
  client_conns_per_identity: 100000
EOC
  mv "$W/egressd.yaml.tmp" "$W/egressd.yaml"
}

# start: egressd with a fresh log; waits for its boot self-test.
start() {
  "$BIN" serve --config "$W/egressd.yaml" --state-dir "$W/state" "$@" 2> "$W/egressd.log" &
  EG=$!; PIDS+=($EG)
  for i in $(seq 300); do grep -qE '"msg":"(ready|not ready)"' "$W/egressd.log" && break; sleep 0.1; done
  curl -s "http://127.0.0.1:$AP/readyz" | sed 's/^/  readyz: /'
}
stop() { kill "$EG" 2>/dev/null; wait "$EG" 2>/dev/null; }
loadstart() {
  "$W/m17" load -proxy 127.0.0.1:$PP -url "http://127.0.0.1:$HTTP/" -c "${M27_CLIENTS:-4}" > "$W/load.out" 2>&1 &
  LOAD=$!; PIDS+=($LOAD)
}
loadstop() { kill "$LOAD"; wait "$LOAD" 2>/dev/null; sed 's/^/  /' "$W/load.out"; }
reloads() { grep -oE '"msg":"reload[^"]*"' "$W/egressd.log" | sort | uniq -c | sed 's/^/  /'; }
selftests() { grep -c '"msg":"self-test sealed","trigger":"reload"' "$W/egressd.log"; }

if want 1 || want 2; then
  config 0
  start
  if want 1; then
    R=${M27_RELOADS:-4}; C=${M27_CADENCE:-30}
    echo "## 1. $R reloads, one every ${C}s, then an unchanged SIGHUP, under ${M27_CLIENTS:-4} clients"
    loadstart
    for i in $(seq "$R"); do
      sleep "$C"; config "$i"; kill -HUP "$EG"
    done
    sleep "$C"; kill -HUP "$EG"; sleep 10
    loadstop
    reloads
    echo "  refusals per reload: $(awk -v r=$((R + 1)) '/refused/ {printf "%.1f", $6 / r}' "$W/load.out") (over $((R + 1)) reloads, the unchanged SIGHUP included)"
  fi
  if want 2; then
    N=${M27_STORM:-20}
    echo "## 2. a reload storm: $N config writes, one every 0.5 s"
    before=$(selftests)
    loadstart
    sleep 2
    t0=$(date +%s.%N)
    for i in $(seq "$N"); do config $((100 + i)); sleep 0.5; done
    # until the last reload has ended (its self-test, or none if unchanged)
    for i in $(seq 600); do
      last=$(grep -oE '"msg":"reload[^"]*"' "$W/egressd.log" | tail -1)
      sleep 0.5
      [ "$(grep -oE '"msg":"reload[^"]*"' "$W/egressd.log" | tail -1)" = "$last" ] && [ "$(curl -s "http://127.0.0.1:$AP/metrics" | awk '$1=="egressd_reloads_total{result=\"applied\"}" {print $2}')" != "" ] && break
    done
    sleep 6
    loadstop
    echo "  storm took $(echo "$(date +%s.%N) - $t0" | bc) s to settle; self-tests it ran: $(( $(selftests) - before ))"
    reloads
  fi
  stop
fi

if want 3; then
  T=${M27_TUNNELS:-2000}
  echo "## 3. SIGTERM with $T open tunnels (limits.shutdown_grace ${M27_GRACE:-5s}), audit log on"
  config 0
  rm -f "$W/audit.jsonl"
  start --audit-log "$W/audit.jsonl"
  "$W/m17" tunnels -proxy 127.0.0.1:$PP -target 127.0.0.1:$ECHO -n "$T" > "$W/tunnels.out" 2>&1 &
  TUN=$!; PIDS+=($TUN)
  for i in $(seq 600); do grep -q '^open' "$W/tunnels.out" && break; sleep 0.1; done
  sed 's/^/  tunnels: /' "$W/tunnels.out"
  t0=$(date +%s.%N)
  kill -TERM "$EG"; wait "$EG"; rc=$?
  echo "  egressd exited $rc after $(echo "$(date +%s.%N) - $t0" | bc) s"
  kill "$TUN"; wait "$TUN" 2>/dev/null
  sed -n 's/^closed/  tunnels: closed/p' "$W/tunnels.out"
  grep -E '"msg":"(stopping|drained)' "$W/egressd.log" | cut -c1-300 | sed 's/^/  /'
  "$BIN" audit verify "$W/audit.jsonl" | sed 's/^/  audit verify: /'
  echo "  records: tunnel open $(grep -c '"tunnel":"open"' "$W/audit.jsonl"), tunnel close $(grep -c '"tunnel":"close"' "$W/audit.jsonl"), CONNECT decisions $(grep '"method":"CONNECT"' "$W/audit.jsonl" | grep -vc '"tunnel":')"
fi
