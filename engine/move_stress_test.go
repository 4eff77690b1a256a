package engine

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestStressMovesUnderLoad drops a declared and an implicit queue for a
// move again and again while producers push, consumers pop (some parked)
// and ack, on the real clock (T2). It checks what a move promises: an ack
// of an id popped before a move that began after the pop answers stale,
// never acked; no id is acked twice or minted twice; every parked pop is
// answered; a declared queue stays declared; the charges all come back.
func TestStressMovesUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("stress test: skipped with -short")
	}
	e := New(Config{MaxBytes: 1 << 30})
	defer e.Close()
	must(t, e.Configure("default", "d", OptionSet{Has: HasLeaseSeconds, Options: Options{LeaseSeconds: 60}}))
	queues := []string{"d", "i"}
	deadline := time.Now().Add(400 * time.Millisecond)

	// moves counts the moves that have returned. A pop that read moves == m
	// after it returned predates move m+2 entirely (move m+1 may have been
	// in flight then): an ack that reads moves >= m+2 must answer stale.
	var moves atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for time.Now().Before(deadline) {
			for _, q := range queues {
				if _, err := e.DropForMove("default", q); err != nil {
					t.Error(err)
				}
			}
			moves.Add(1)
			time.Sleep(200 * time.Microsecond)
		}
		close(stop)
	}()
	for _, q := range queues {
		wg.Add(1)
		go func(q string) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := e.Push("default", q, "p", payloads("a", "b", "c")); err != nil && err != ErrQueueFull {
					t.Error(err)
					return
				}
				time.Sleep(20 * time.Microsecond)
			}
		}(q)
	}

	var mu sync.Mutex
	acked := map[string]bool{} // by queue and id: ids do not name their queue
	minted := map[string]bool{}
	var late, stale, total atomic.Int64
	for k := 0; k < 4; k++ {
		q := queues[k%2]
		wg.Add(1)
		go func(q string, k int) {
			defer wg.Done()
			var held []got
			var heldAt int64
			for {
				select {
				case <-stop:
					return
				default:
				}
				if len(held) > 0 && k >= 2 {
					time.Sleep(time.Millisecond) // let a move or two pass
				}
				if len(held) > 0 {
					at := moves.Load()
					items := make([]AckItem, len(held))
					for i, m := range held {
						items[i] = AckItem{ID: []byte(m.ID)}
					}
					out, err := e.Ack("default", q, "g", items, nil)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					for i, o := range out {
						total.Add(1)
						switch {
						case at >= heldAt+2 && o != OutcomeStale:
							t.Errorf("id %s popped before move %d, acked after move %d returned: %v", held[i].ID, heldAt+2, at, o)
						case o == OutcomeAcked && acked[q+" "+held[i].ID]:
							t.Errorf("id %s of %s acked twice", held[i].ID, q)
						case o == OutcomeAcked:
							acked[q+" "+held[i].ID] = true
						case o == OutcomeStale:
							stale.Add(1)
							if at >= heldAt+2 {
								late.Add(1)
							}
						}
					}
					mu.Unlock()
					held = nil
				}
				c := &collector{e: e}
				r := PopRequest{Tenant: "default", Queue: q, Group: "g", Batch: 4, Wait: k%2 == 1, Timeout: 5 * time.Millisecond}
				_, parked, err := e.Pop(&r, c)
				if err != nil {
					t.Error(err)
					return
				}
				if !parked.IsZero() {
					waitDone(c) // a move answers it empty; else a push or the timeout
				}
				heldAt = moves.Load()
				held = c.msgs
				mu.Lock()
				for _, m := range held {
					if m.Attempts == 0 && minted[q+" "+m.ID] {
						t.Errorf("id %s of %s minted twice", m.ID, q)
					}
					minted[q+" "+m.ID] = true
				}
				mu.Unlock()
			}
		}(q, k)
	}
	wg.Wait()
	if moves.Load() < 10 || late.Load() == 0 || total.Load() == 0 {
		t.Fatalf("the run proved little: %d moves, %d acks, %d stale, %d of them after a later move", moves.Load(), total.Load(), stale.Load(), late.Load())
	}
	t.Logf("%d moves, %d acks, %d stale (%d after a later move), %d acked", moves.Load(), total.Load(), stale.Load(), late.Load(), len(acked))
	if !e.lookup("default", "d").declared.Load() {
		t.Fatal("the declared queue is no longer declared")
	}
	for _, q := range queues {
		if _, err := e.Delete("default", q); err != nil {
			t.Fatal(err)
		}
	}
	if e.CellBytes() != 0 || e.arena.Held() != 0 {
		t.Fatalf("after delete: cell %d arena %d, want every charge and byte given back", e.CellBytes(), e.arena.Held())
	}
}
