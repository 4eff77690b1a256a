package conformance

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestCellLostRelayAnswersNothingBehind: a landing member that loses the
// answer of a relayed request (its owner died holding it) closes the
// client's connection without answering the requests the client
// pipelined behind it. HTTP/1.1 pairs answers with requests by order
// alone, so an answer written behind the lost one is taken by the client
// as the lost request's: a push handed an ack's or a pop's 2xx, which the
// Go SDK reports as "malformed JSON answer" (TestCellChaos saw it once),
// and the request it belonged to is left without its own.
//
// The member closes the connection with gnet's Close, which runs as a task
// after the events of the poll: a read of the same connection in that poll
// used to serve what waited behind the lost request. This test puts the
// two events in one poll: A (one event loop, so the client's connection
// and the relay link share it) relays a push to B, which holds it
// (QUEEN_TEST_RELAY_DELAY_MS); the client pipelines a push that A owns
// behind it; A is stopped (SIGSTOP), B killed, the client writes a third
// request, and A continues: the link's end and the client's bytes are read
// in the same poll, the link's first (it was ready first).
func TestCellLostRelayAnswersNothingBehind(t *testing.T) {
	t.Parallel()
	c := newTestCell(t)
	a := c.start(advertise(t), map[string]string{"QUEEN_EVENT_LOOPS": "1"})
	b := c.start(advertise(t), map[string]string{"QUEEN_TEST_RELAY_DELAY_MS": "5000"})
	all := ids(a, b)
	c.waitLive(all...)
	onB, onA := queueOwnedBy(t, "lost-relay", b.id, all...), queueOwnedBy(t, "behind", a.id, all...)

	nc, err := net.Dial("tcp", a.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	push := func(q, payload string) string {
		body := string(pushBody(q, "", payload))
		return "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: " +
			strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	relayed := func() float64 {
		m, _ := a.scrape(t)
		return m["queen_ephemeral_relayed_total"]
	}
	if _, err := io.WriteString(nc, push(onB, `"relayed"`)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for relayed() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("A never relayed the push to B")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Behind the relayed push: waits unread in A while the push is out.
	if _, err := io.WriteString(nc, push(onA, `"behind"`)); err != nil {
		t.Fatal(err)
	}
	a.scrape(t) // a round trip through A's one loop, which has read it by now

	a.stopCont(t, syscall.SIGSTOP)
	b.kill(t) // the relay link's end waits in A's socket
	if _, err := io.WriteString(nc, push(onA, `"third"`)); err != nil {
		a.stopCont(t, syscall.SIGCONT)
		t.Fatal(err)
	}
	a.stopCont(t, syscall.SIGCONT)

	_ = nc.SetReadDeadline(time.Now().Add(15 * time.Second))
	got, err := io.ReadAll(bufio.NewReader(nc))
	if len(got) != 0 {
		t.Fatalf("after the relayed push's answer was lost, A answered the requests behind it: %q; want the connection closed with nothing on it (the client would take the first answer for the lost push's)", got)
	}
	if err != nil {
		t.Fatalf("after the relayed push's answer was lost: %v; want the connection closed", err)
	}
}
