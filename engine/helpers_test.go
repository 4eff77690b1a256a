package engine

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// harness is an engine on a manual clock, plus helpers the tests share.
type harness struct {
	t   testing.TB
	e   *Engine
	clk *ManualClock
}

func newHarness(t testing.TB, mod func(*Config)) *harness {
	t.Helper()
	clk := NewManualClock()
	cfg := Config{Clock: clk, Incarnation: 0xabcdef123456}
	if mod != nil {
		mod(&cfg)
	}
	e := New(cfg)
	t.Cleanup(e.Close)
	return &harness{t: t, e: e, clk: clk}
}

// payloadOnly is a harness option for the tests of payload rules: object
// charges off, so budgets count payload bytes alone (charge_test.go tests
// the charges).
func payloadOnly(c *Config) { c.payloadOnly = true }

// advance moves time and fires whatever is due.
func (h *harness) advance(d time.Duration) {
	h.clk.Add(d)
	h.e.Tick()
}

// collector is a Consumer that keeps copies of what it was handed.
type collector struct {
	mu        sync.Mutex
	msgs      []got
	completed int
	done      bool
	e         *Engine
}

type got struct {
	ID        string
	Partition string
	Seq       uint64
	Attempts  int
	Payload   string
}

func (c *collector) Deliver(m Message) {
	id := ""
	if c.e != nil {
		id = string(c.e.AppendID(nil, m.Partition, m.Seq))
	}
	c.mu.Lock()
	c.msgs = append(c.msgs, got{id, m.Partition, m.Seq, m.Attempts, string(m.Payload)})
	c.mu.Unlock()
}

func (c *collector) Complete(n int, _ Origin) {
	c.mu.Lock()
	c.completed, c.done = n, true
	c.mu.Unlock()
}

func (c *collector) isDone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

func payloads(ps ...string) [][]byte {
	out := make([][]byte, len(ps))
	for i, p := range ps {
		out[i] = []byte(p)
	}
	return out
}

func (h *harness) push(queue, partition string, ps ...string) {
	h.t.Helper()
	n, err := h.e.Push("default", queue, partition, payloads(ps...))
	if err != nil || n != len(ps) {
		h.t.Fatalf("push %s/%s: n=%d err=%v", queue, partition, n, err)
	}
}

func (h *harness) pop(r PopRequest) []got {
	h.t.Helper()
	if r.Tenant == "" {
		r.Tenant = "default"
	}
	c := &collector{e: h.e}
	n, parked, err := h.e.Pop(&r, c)
	if err != nil {
		h.t.Fatalf("pop %+v: %v", r, err)
	}
	if !parked.IsZero() {
		h.t.Fatalf("pop %+v parked", r)
	}
	if n != len(c.msgs) {
		h.t.Fatalf("pop returned %d but delivered %d", n, len(c.msgs))
	}
	return c.msgs
}

func (h *harness) ack(queue, group string, status AckStatus, ms ...got) []Outcome {
	h.t.Helper()
	items := make([]AckItem, len(ms))
	for i, m := range ms {
		items[i] = AckItem{ID: []byte(m.ID), Status: status}
	}
	out, err := h.e.Ack("default", queue, group, items, nil)
	if err != nil {
		h.t.Fatalf("ack: %v", err)
	}
	return out
}

func payloadsOf(ms []got) string {
	s := ""
	for i, m := range ms {
		if i > 0 {
			s += ","
		}
		s += m.Payload
	}
	return s
}

func outcomes(os []Outcome) string {
	return fmt.Sprint(os)
}

// --- helpers for the behavioural tests (push/pop/ack/wait/retention/status/ttl/lifecycle) ---

// configure declares queue with the options as sent, failing the test on error.
func (h *harness) configure(queue string, set OptionSet) {
	h.t.Helper()
	if err := h.e.Configure("default", queue, set); err != nil {
		h.t.Fatalf("configure %s: %v", queue, err)
	}
}

// pushErr pushes and returns what the engine answered, without judging it.
func (h *harness) pushErr(queue, partition string, ps ...string) (int, error) {
	return h.e.Push("default", queue, partition, payloads(ps...))
}

// park issues a pop that must park, and returns its consumer and handle.
func (h *harness) park(r PopRequest) (*collector, Parked) {
	h.t.Helper()
	if r.Tenant == "" {
		r.Tenant = "default"
	}
	if !r.Wait {
		r.Wait = true
	}
	if r.Timeout == 0 {
		r.Timeout = time.Minute
	}
	c := &collector{e: h.e}
	n, parked, err := h.e.Pop(&r, c)
	if err != nil {
		h.t.Fatalf("pop %+v: %v", r, err)
	}
	if parked.IsZero() {
		h.t.Fatalf("pop %+v was answered at once with %d messages; it should have parked", r, n)
	}
	return c, parked
}

// ackIDs acks raw id strings for a group.
func (h *harness) ackIDs(queue, group string, status AckStatus, ids ...string) []Outcome {
	h.t.Helper()
	items := make([]AckItem, len(ids))
	for i, id := range ids {
		items[i] = AckItem{ID: []byte(id), Status: status}
	}
	out, err := h.e.Ack("default", queue, group, items, nil)
	if err != nil {
		h.t.Fatalf("ack: %v", err)
	}
	return out
}

// depthOf reads the depth of queue for group ("" = no group).
func (h *harness) depthOf(queue, group string) DepthInfo {
	h.t.Helper()
	var d DepthInfo
	if err := h.e.Depth("default", queue, group, &d); err != nil {
		h.t.Fatalf("depth %s: %v", queue, err)
	}
	return d
}

// infoOf is queue's row of the default tenant's listing.
func (h *harness) infoOf(queue string) QueueInfo {
	h.t.Helper()
	for _, qi := range h.e.Queues("default", nil) {
		if qi.Name == queue {
			return qi
		}
	}
	h.t.Fatalf("queue %s is not in the listing", queue)
	return QueueInfo{}
}

// listed reports whether queue is in the default tenant's listing.
func (h *harness) listed(queue string) bool {
	for _, qi := range h.e.Queues("default", nil) {
		if qi.Name == queue {
			return true
		}
	}
	return false
}

// groupDepth finds one group's row of a depth read.
func groupDepth(t testing.TB, d DepthInfo, name string) GroupDepth {
	t.Helper()
	for _, g := range d.Groups {
		if g.Group == name {
			return g
		}
	}
	t.Fatalf("group %s not in depth read %+v", name, d.Groups)
	return GroupDepth{}
}

// partitionDepth finds one partition's row of a depth read.
func partitionDepth(t testing.TB, d DepthInfo, name string) PartitionDepth {
	t.Helper()
	for _, p := range d.Partitions {
		if p.Partition == name {
			return p
		}
	}
	t.Fatalf("partition %s not in depth read %+v", name, d.Partitions)
	return PartitionDepth{}
}

// attemptsOf lists the attempts of delivered messages, e.g. "1,0".
func attemptsOf(ms []got) string {
	s := ""
	for i, m := range ms {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprint(m.Attempts)
	}
	return s
}

// numbered returns n payloads "prefix0", "prefix1", ...
func numbered(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// declare is an OptionSet with the given presence bits and values.
func declare(has uint16, o Options) OptionSet { return OptionSet{Has: has, Options: o} }
