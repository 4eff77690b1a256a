package engine

import (
	"fmt"
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

// advance moves time and fires whatever is due.
func (h *harness) advance(d time.Duration) {
	h.clk.Add(d)
	h.e.Tick()
}

// collector is a Consumer that keeps copies of what it was handed.
type collector struct {
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
	c.msgs = append(c.msgs, got{id, m.Partition, m.Seq, m.Attempts, string(m.Payload)})
}

func (c *collector) Complete(n int) { c.completed, c.done = n, true }

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
