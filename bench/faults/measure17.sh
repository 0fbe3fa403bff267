#!/bin/bash
# Issue 17's measurements, rerun against a build of egressd (root):
#
#   go build -o /tmp/m17/egressd ./cmd/egressd
#   bench/faults/measure17.sh /tmp/m17/egressd            # all five
#   M17_ONLY="3 4" bench/faults/measure17.sh /tmp/m17/egressd
#
# It prints, per measurement, the command it ran and its figures:
#   1. reload race: `go test -run TestReloadUnderLoad -v ./daemon`, M17_RELOAD_RUNS
#      times (default 3): requests allowed by an unverified or rolled-back policy
#      over 50 reloads under load (expect 0);
#   2. full disk: bench/faults/fulldisk.sh (audit log on a full tmpfs in a private
#      mount namespace): status codes, /readyz, audit verify, the stop's exit code,
#      a restart on the full disk;
#   3. stalled upstreams: 200 clients through the proxy to an origin that stalls
#      mid-body and one that dribbles a byte every 3 s, then the clients close:
#      egressd's goroutines, open fds (/metrics) and /proc/PID/fd at baseline,
#      connected, and 1, 10 and 60 s after they left (expect baseline), and the
#      origin's own count of upstream connections egressd still holds;
#   4. twenty concurrent 20 MB response heads: client status codes, time, egressd's
#      peak RSS (VmHWM, reset with clear_refs first) — expect 502s and a small peak;
#   5. DNS flood: random labels under denied.example for M17_FLOOD (60s): egressd's
#      log lines about those names, and queries/s (egressd_dns_queries_total);
#      limits.dns_queries_per_second is M17_DNS_QPS (default 1000000, so every
#      query reaches the denial path; 50, egressd's default, tests the rate limit).
#
# Measurements 2-5 run in a network namespace (and mount namespace) of their own
# with only lo up: nothing reaches the machine's network, and `egressd serve`
# never runs as root in the machine's own namespace. egressd runs with
# --no-selftest --allow-unverified (a self-test has nothing to probe there), and
# 3-5 are pinned to one CPU (M17_CPU, default 1) to keep the load modest.
# The fault origin and clients are bench/faults/m17 (built here).
set -u
if [ -z "${M17_IN_NETNS:-}" ]; then
  [ "$(id -u)" = 0 ] || { echo "root only (network and mount namespaces)" >&2; exit 2; }
  BIN=$(readlink -f "${1:?usage: $0 EGRESSD_BINARY}")
  cd "$(dirname "$0")/../.." || exit 2
  W=${M17_DIR:-/tmp/egressd-measure17}; rm -rf "$W"; mkdir -p "$W"
  go build -o "$W/m17" ./bench/faults/m17 || exit 1
  if [[ " ${M17_ONLY:-1 2 3 4 5} " == *" 1 "* ]]; then
    echo "## 1. reload race: go test -count=1 -run TestReloadUnderLoad -v ./daemon (x${M17_RELOAD_RUNS:-3})"
    for i in $(seq "${M17_RELOAD_RUNS:-3}"); do
      go test -count=1 -run TestReloadUnderLoad -v ./daemon 2>&1 | grep -E 'reloads \(|^(--- |FAIL|ok )' | sed 's/^ *//; s/^/  /'
    done
  fi
  M17_IN_NETNS=1 exec unshare --net --mount --propagation private -- "$0" "$BIN" "$W"
fi

BIN=$1; W=$2
ip link set lo up || exit 1
[ "$(readlink /proc/self/ns/net)" != "$(readlink /proc/1/ns/net 2>/dev/null)" ] || { echo "not in a new network namespace" >&2; exit 2; }
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done' EXIT
want() { [[ " ${M17_ONLY:-1 2 3 4 5} " == *" $1 "* ]]; }

if want 2; then
  echo "## 2. full disk: bench/faults/fulldisk.sh $BIN measure17 (in this network namespace)"
  bench/faults/fulldisk.sh "$BIN" measure17
fi
want 3 || want 4 || want 5 || exit 0

B=$(( 20000 + RANDOM % 10000 ))
STALL=$B DRIBBLE=$((B+1)) BIGHEAD=$((B+2)) PP=$((B+3)) AP=$((B+4)) DP=$((B+5))
CPU=${M17_CPU:-1}
cat > "$W/egressd.yaml" <<EOC
version: 1
listen: {proxy: "127.0.0.1:$PP", admin: "127.0.0.1:$AP", dns: "127.0.0.1:$DP"}
resolver: {upstreams: ["127.0.0.1:9"]}
allow:
  - {name: faults, cidrs: [127.0.0.1/32], ports: ["$STALL-$BIGHEAD"], pages: ["*"]}
limits:
  dns_queries_per_second: ${M17_DNS_QPS:-1000000}   # default: the flood exercises the denial path, not the rate limit
EOC
taskset -c "$CPU" "$W/m17" origin -stall 127.0.0.1:$STALL -dribble 127.0.0.1:$DRIBBLE -bighead 127.0.0.1:$BIGHEAD > "$W/origin.log" 2>&1 &
ORIG=$!; PIDS+=($ORIG)
taskset -c "$CPU" "$BIN" serve --no-selftest --allow-unverified --config "$W/egressd.yaml" --state-dir "$W/state" 2> "$W/egressd.log" &
EG=$!; PIDS+=($EG)
for i in $(seq 200); do curl -s -o /dev/null "http://127.0.0.1:$AP/healthz" && grep -q listening "$W/origin.log" && break; sleep 0.1; done
kill -0 $EG 2>/dev/null || { echo "egressd exited: $(tail -3 "$W/egressd.log")"; exit 1; }
metric() { curl -s "http://127.0.0.1:$AP/metrics" | awk -v n="$1" '$1==n {print $2+0}'; }
held() { kill -USR1 $ORIG; sleep 0.2; tail -1 "$W/origin.log" | grep -o '[0-9]* upstream'; }
sample() { printf '  %-26s goroutines %4s  open fds %4s  /proc fd %4s  origin: %s connections open\n' "$1" "$(metric go_goroutines)" "$(metric process_open_fds)" "$(ls /proc/$EG/fd | wc -l)" "$(held | cut -d' ' -f1)"; }

if want 3; then
  echo "## 3. stalled upstreams: m17 clients -n 200 via the proxy to a stalling and a dribbling origin, then they close"
  sample "baseline"
  "$W/m17" clients -proxy 127.0.0.1:$PP -n 200 -url "http://127.0.0.1:$STALL/,http://127.0.0.1:$DRIBBLE/" > "$W/clients.log" 2>&1 &
  CL=$!; PIDS+=($CL)
  for i in $(seq 600); do grep -q connected "$W/clients.log" && break; sleep 0.1; done
  echo "  $(cat "$W/clients.log")"
  sample "200 clients connected"
  kill -TERM $CL; wait $CL; T0=$(date +%s.%N)
  for at in 1 10 60; do
    sleep "$(echo "$T0 + $at - $(date +%s.%N)" | bc)"
    sample "${at} s after they left"
  done
  echo "  egressd_responses_cut_total: $(curl -s http://127.0.0.1:$AP/metrics | grep '^egressd_responses_cut_total' | tr '\n' ' ')"
fi

if want 4; then
  echo "## 4. twenty 20 MB response heads: m17 heads -n 20 via the proxy (limits.response_header_bytes default)"
  echo 5 > /proc/$EG/clear_refs && CLR=reset || CLR="not reset"
  echo "  before: $(grep -E 'VmRSS|VmHWM' /proc/$EG/status | tr -s ' \t\n' ' ') (HWM $CLR)"
  echo "  $(taskset -c "$CPU" "$W/m17" heads -proxy 127.0.0.1:$PP -url "http://127.0.0.1:$BIGHEAD/" -n 20)"
  echo "  after: $(grep -E 'VmRSS|VmHWM' /proc/$EG/status | tr -s ' \t\n' ' ')"
  echo "  502 decision lines: $(grep -c '"status":502' "$W/egressd.log")"
fi

if want 5; then
  F=${M17_FLOOD:-60s}
  echo "## 5. DNS flood: m17 dnsflood -server 127.0.0.1:$DP -zone denied.example -dur $F (limits.dns_queries_per_second ${M17_DNS_QPS:-1000000})"
  L0=$(grep -c 'denied\.example' "$W/egressd.log"); Q0=$(curl -s http://127.0.0.1:$AP/metrics | awk '/^egressd_dns_queries_total/ {s+=$2} END {print s+0}')
  echo "  $(taskset -c "$CPU" "$W/m17" dnsflood -server 127.0.0.1:$DP -zone denied.example -dur "$F")"
  sleep 0.5
  L1=$(grep -c 'denied\.example' "$W/egressd.log"); Q1=$(curl -s http://127.0.0.1:$AP/metrics | awk '/^egressd_dns_queries_total/ {s+=$2} END {print s+0}')
  S=${F%s}
  echo "  egressd: $((Q1-Q0)) queries counted ($(( (Q1-Q0) / S ))/s); $((L1-L0)) log lines about denied.example ($(( (L1-L0) * 60 / S )) a minute); all log lines in the run: $(wc -l < "$W/egressd.log")"
  echo "  $(curl -s http://127.0.0.1:$AP/metrics | grep '^egressd_dns_queries_total' | tr '\n' ' ')"
  echo "  last denial line: $(grep 'denied\.example' "$W/egressd.log" | tail -1 | cut -c1-300)"
fi
kill -TERM $EG; wait $EG; echo "egressd stopped: exit $?"
kill $ORIG; wait $ORIG 2>/dev/null
