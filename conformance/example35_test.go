package conformance

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

// TestExample35 runs example35.sh (the spec's example 35 with curl) against
// a fresh broker on each store and checks that it prints what the spec's
// comments say: pushed 2, the listing, the depth, the two users popped,
// two acks, the audit group's 2 and the reset's count (every message held,
// docs/engine.md: reset reports every message held as dropped).
func TestExample35(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "grep", "sed", "paste"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("example35.sh needs %s: %v", tool, err)
		}
	}
	forEachStore(t, func(t *testing.T, st storeKind) {
		b := startBrokerOn(t, st, nil)
		cmd := exec.Command("bash", "example35.sh", b.url(""))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("example35.sh: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
		lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
		if len(lines) != 7 {
			t.Fatalf("example35.sh printed %d lines, want 7:\n%s", len(lines), stdout.String())
		}
		if lines[0] != "pushed 2" {
			t.Errorf("line 1: %q, want %q", lines[0], "pushed 2")
		}

		alice, bob := `{"user":"alice","typing":true}`, `{"user":"bob","typing":true}`
		nb := int64(len(alice) + len(bob))
		var l listing
		if err := json.Unmarshal([]byte(lines[1]), &l); err != nil {
			t.Fatalf("line 2 is not the listing: %q", lines[1])
		}
		// cellBytes is the footprint: the payloads plus the charges of the
		// queue, its partition room-7 and a ring of 2 slots (docs/engine.md,
		// "What the budgets count").
		footprint := nb + queueCharge("presence") + partitionCharge("room-7") + ringCharge(2)
		want := listing{Count: 1, CellBytes: footprint, Queues: []queueRow{{
			Queue: "presence", Tier: "declared", Depth: 2, Bytes: nb, Partitions: 1, Groups: 0,
			Options: options{MaxBytes: 1048576, MaxLength: 1000, Policy: "dropOldest", TTLSeconds: 30, LeaseSeconds: 15, RetryLimit: 3},
		}}}
		if !reflect.DeepEqual(l, want) {
			t.Errorf("the listing:\n got %+v\nwant %+v", l, want)
		}
		var d depthResp
		if err := json.Unmarshal([]byte(lines[2]), &d); err != nil {
			t.Fatalf("line 3 is not the depth read: %q", lines[2])
		}
		wantD := depthResp{Queue: "presence", Tier: "declared", Pending: 2, PartitionsPending: 1, Bytes: nb,
			Partitions: []partDepth{{"room-7", 2, nb}}, Groups: []groupDepth{}}
		if d = d.sorted(); !reflect.DeepEqual(d, wantD) {
			t.Errorf("the depth read:\n got %+v\nwant %+v", d, wantD)
		}
		for i, w := range []string{"popped alice, bob", "outcomes acked, acked", "the audit group saw 2", "reset dropped 2"} {
			if lines[3+i] != w {
				t.Errorf("line %d: %q, want %q", 4+i, lines[3+i], w)
			}
		}
		if stderr.Len() != 0 {
			t.Errorf("example35.sh wrote to stderr: %s", stderr.String())
		}
		// The script ends with delete: nothing is left.
		if l := b.queues(t); l.Count != 0 || l.CellBytes != 0 {
			t.Errorf("after the example: %v, cellBytes %d; want none and 0", l.names(), l.CellBytes)
		}
	})
}
