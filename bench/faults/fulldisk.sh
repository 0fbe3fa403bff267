#!/bin/bash
# The audit log on a full disk, end to end: egressd serve on a 256 KiB tmpfs
# mounted in a private mount namespace (nothing is mounted where the host sees
# it: the script re-runs itself under unshare and refuses to mount unless its
# mount namespace differs from the one it was started in). Root only:
#   bench/faults/fulldisk.sh /tmp/egressd NAME
# (NAME: a work directory under ${EGRESSD_FULLDISK_DIR:-/tmp/egressd-fulldisk})
# egressd runs with --no-selftest --allow-unverified (without the latter it
# refuses everything); run the script inside a network namespace of your own
# (bench/faults/measure17.sh does) so serve never runs as root in the host's.

set -u
if [ -z "${EGRESSD_FULLDISK_PARENT_NS:-}" ]; then
  EGRESSD_FULLDISK_PARENT_NS=$(readlink /proc/self/ns/mnt) exec unshare -m --propagation private "$0" "$@"
fi
if [ -z "$EGRESSD_FULLDISK_PARENT_NS" ] || [ "$(readlink /proc/self/ns/mnt)" = "$EGRESSD_FULLDISK_PARENT_NS" ]; then
  echo "not in a private mount namespace: refusing to mount" >&2; exit 2
fi
BIN=$1; D=${EGRESSD_FULLDISK_DIR:-/tmp/egressd-fulldisk}/$2; rm -rf $D; mkdir -p $D/mnt
mount -t tmpfs -o size=256k egressd-fd $D/mnt || exit 1
OP=$(( 20000 + RANDOM % 10000 )); PP=$((OP+1)); AP=$((OP+2))
python3 -m http.server $OP --bind 127.0.0.1 -d $D >/dev/null 2>&1 & ORIG=$!
EG=
trap 'kill $ORIG $EG 2>/dev/null; umount $D/mnt 2>/dev/null' EXIT
cat > $D/egressd.yaml <<EOC
version: 1
listen: {proxy: "127.0.0.1:$PP", admin: "127.0.0.1:$AP"}
allow:
  - {name: origin, cidrs: [127.0.0.1/32], ports: ["$OP"], pages: ["*"]}
EOC
start() { $BIN serve --no-selftest --allow-unverified --config $D/egressd.yaml --state-dir $D/state --audit-log $D/mnt/audit.jsonl 2>>$D/stderr.log & EG=$!; for i in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:$AP/healthz && return 0; kill -0 $EG 2>/dev/null || { echo "  egressd exited at start: $(tail -1 $D/stderr.log)"; return 1; }; sleep 0.1; done; }
req() { local h=""; for i in $(seq $1); do h="$h $(curl -s -o /dev/null -w '%{http_code}' -x http://127.0.0.1:$PP http://127.0.0.1:$2/)"; done; echo $h | tr ' ' '\n' | sort | uniq -c | tr '\n' ' '; }
ready() { curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$AP/readyz; }
met() { curl -s http://127.0.0.1:$AP/metrics | grep -E '^egressd_audit' | tr '\n' ' '; }
start || exit 1
until curl -s -o /dev/null http://127.0.0.1:$OP/; do sleep 0.1; done
echo "  healthy: allowed $(req 5 $OP), readyz $(ready)"
dd if=/dev/zero of=$D/mnt/fill bs=4k 2>/dev/null
echo "  disk full: allowed: $(req 50 $OP); denied (port 1): $(req 5 1); readyz $(ready); $(met)"
echo "  audit error lines: $(grep -c '"msg":"audit log cannot be written' $D/stderr.log); stderr decision lines: $(grep -c '"msg":"decision"' $D/stderr.log); audit decision lines: $(grep -c '"msg":"decision"' $D/mnt/audit.jsonl)"
tail -c 200 $D/mnt/audit.jsonl | tail -1 | cut -c1-40 | sed 's/^/  last line starts: /'
$(dirname $BIN)/$(basename $BIN) audit verify --live $D/mnt/audit.jsonl 2>&1 | sed 's/^/  verify --live: /'
rm $D/mnt/fill
echo "  space back: allowed $(req 5 $OP), readyz $(ready); $(met); recovery lines: $(grep -c '"msg":"audit log writable again' $D/stderr.log)"
# Before refilling, leave less room in the audit file's last tmpfs page than a
# seal needs (~140 B): requests whose paths pad their decision lines to the
# room there is, so the stop below cannot write its seal.
size() { stat -c %s $D/mnt/audit.jsonl; }
room() { echo $(( (4096 - $(size) % 4096) % 4096 )); }
wrote() { local s0=$(size); curl -s -o /dev/null -x http://127.0.0.1:$PP "http://127.0.0.1:$OP/$1"; for i in $(seq 50); do [ "$(size)" != "$s0" ] && break; sleep 0.02; done; echo $(( $(size) - s0 )); }
LINE=$(wrote "")
# k lines padded evenly (the log keeps 200 bytes of a path: pad at most 150)
# to end ~70 B before the page's end; a plain line moves on to the next page
# when k lines cannot be made to fit
for i in $(seq 40); do
  R=$(room); [ "$R" -lt 140 ] && break
  T=$((R - 70)); k=$(( (T + LINE + 149) / (LINE + 150) ))
  if [ $((k * LINE)) -gt $T ]; then wrote "" >/dev/null; continue; fi
  P=$(( (T - k * LINE) / k )); [ $P -gt 150 ] && P=150
  wrote "$(head -c $P /dev/zero | tr '\0' a)" >/dev/null
done
echo "  room left in the audit file's last page: $(room) B"
dd if=/dev/zero of=$D/mnt/fill bs=4k 2>/dev/null
for i in $(seq 20); do [ "$(ready)" = 503 ] && break; req 1 $OP >/dev/null; done
echo "  refilled: readyz $(ready)"
# exit 2 and "not sealed" (exit 0 and a seal if the room above was not made)
kill -TERM $EG; wait $EG; echo "  stop on a full disk: exit $?: $(grep -o 'not sealed[^"]*' $D/stderr.log | tail -1 | cut -c1-120) last record: $(tail -1 $D/mnt/audit.jsonl | grep -o '"audit":"[a-z]*"')"
start && echo "  restart on the full disk: running, readyz $(ready), allowed $(req 3 $OP)"
rm $D/mnt/fill
echo "  space back: allowed $(req 3 $OP)"
kill -TERM $EG; wait $EG; echo "  clean stop: exit $?"
$BIN audit verify $D/mnt/audit.jsonl 2>&1 | sed 's/^/  verify: /'
kill $ORIG
umount $D/mnt
