#!/usr/bin/env bash
# Example 35 ("the whole surface in one program": six verbs and two status
# reads, docs/routes.md) performed with curl against a running broker, printing what
# the example's console.log lines print:
#
#   pushed 2
#   <the listing, as JSON>
#   <the depth read, as JSON>
#   popped alice, bob
#   outcomes acked, acked
#   the audit group saw 2
#   reset dropped 2
#
# Usage: example35.sh BASE_URL   (e.g. http://localhost:6632)
# Needs bash, curl, grep and sed: the answers' few fields are read with
# grep and sed, which is enough for the known shapes of this example.
set -euo pipefail

base=${1:?usage: example35.sh BASE_URL}
api=${base%/}/api/v1/ephemeral

# call METHOD PATH [BODY]: the answer's body; a non-2xx answer fails the script.
call() {
	if [ $# -ge 3 ]; then
		curl -sS --fail-with-body -X "$1" -H 'Content-Type: application/json' --data-binary "$3" "$api$2"
	else
		curl -sS --fail-with-body -X "$1" "$api$2"
	fi
}

# number KEY: the number that KEY has in the JSON on standard input.
number() { sed -n 's/.*"'"$1"'" *: *\([0-9][0-9]*\).*/\1/p'; }
# values KEY: every string value of KEY in the JSON on standard input, one a line.
values() { grep -o '"'"$1"'" *: *"[^"]*"' | sed 's/.*: *"\([^"]*\)"$/\1/'; }
# joined: standard input's lines joined with ", ".
joined() { paste -sd, - | sed 's/,/, /g'; }

queue=presence
room=room-7

# configure: declare the queue and its bounds. Optional, because a push or a
# pop that names an unknown queue creates it.
call POST /configure '{"queue":"presence","options":{"maxLength":1000,"maxBytes":1048576,"policy":"dropOldest","ttlSeconds":30,"leaseSeconds":15,"retryLimit":3}}' >/dev/null

# push: one queue per request, all or nothing, answering {pushed}.
echo "pushed $(call POST /push '{"queue":"presence","partition":"room-7","messages":[{"payload":{"user":"alice","typing":true}},{"payload":{"user":"bob","typing":true}}]}' | number pushed)"

# queues and depth: gauges read out of the broker's own memory.
call GET /queues
echo
call GET "/queues/$queue/depth"
echo

# pop: the group is the consumption semantics; wait is a real long poll.
popped=$(call GET "/pop?queue=$queue&partition=$room&group=widget&batch=10&wait=true&timeout=2000")
echo "popped $(printf '%s' "$popped" | values user | joined)"

# ack: with the same group the pop used, because cursors are per group.
acks=$(printf '%s' "$popped" | values id | sed 's/.*/{"id":"&","status":"completed"}/' | paste -sd, -)
echo "outcomes $(call POST /ack '{"queue":"presence","group":"widget","acks":['"$acks"']}' | values outcome | joined)"

# A second group over the same ring receives everything the first consumed.
echo "the audit group saw $(call GET "/pop?queue=$queue&partition=$room&group=audit&batch=10" | values id | grep -c .)"

# reset: drop every message, void every lease, rewind every cursor.
echo "reset dropped $(call POST /reset '{"queue":"presence"}' | number dropped)"

# delete: the contents, the cursors, and the declaration.
if ! call DELETE "/queue/$queue" | grep -q '"deleted" *: *true'; then
	echo "delete did not delete $queue" >&2
	exit 1
fi
