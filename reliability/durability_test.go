//go:build reliability

package reliability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/store/storetest"
)

// What survives a crash and a database outage, under load (docs/routes.md, configure:
// "written to PostgreSQL first and applied to memory second"; ack: stale;
// docs/server.md, Declaration writes).

// needPG returns the run's PostgreSQL, or skips (never under CI=true:
// storetest.MainWithPostgres failed the run already).
func needPG(t *testing.T) *storetest.Postgres {
	t.Helper()
	if pg == nil && os.Getenv("CI") == "true" {
		t.Fatal("CI=true and no PostgreSQL")
	}
	storetest.NeedManaged(t, pg)
	return pg
}

// pgEnv is a broker's environment on a fresh schema of the run's PostgreSQL.
func pgEnv(t *testing.T) map[string]string {
	p := needPG(t)
	return map[string]string{
		"QUEEN_DATABASE_URL":                  p.URL(),
		"QUEEN_DATABASE_SCHEMA":               p.FreshSchema(t),
		"QUEEN_DATABASE_ACQUIRE_TIMEOUT_MS":   "500",
		"QUEEN_DATABASE_STATEMENT_TIMEOUT_MS": "1000",
	}
}

// TestKill9UnderLoad, on each store, five times: pushes, pops that take
// leases, and configures of new queues run while the broker is killed
// with SIGKILL; after the restart every configure answered 201 is declared
// with the options sent, and an ack of any id popped before answers stale.
func TestKill9UnderLoad(t *testing.T) {
	for _, store := range []string{"embedded", "postgres"} {
		t.Run(store, func(t *testing.T) {
			env := map[string]string{}
			if store == "postgres" {
				env = pgEnv(t)
			}
			c := newCase(t, env)
			c.probe.Stop() // the probe's connection does not survive the kills
			declared := map[string]int{}
			allCodes := newCodes()
			for round := 1; round <= 5; round++ {
				ids, cfg := c.loadUntilKilled(round, scaled(3*time.Second, time.Second), allCodes)
				for q, ml := range cfg {
					declared[q] = ml
				}
				port, err := brokertest.FreePort()
				if err != nil {
					t.Fatal(err)
				}
				c.b.StartOn(t, port)
				c.addr = strings.TrimPrefix(c.b.URL(), "http://")
				c.rss.follow(c.b.PID())
				if err := waitStoreOK(c.b.URL(), 20*time.Second); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				rows, err := listingOptions(c.b.URL())
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				missing := 0
				for q, ml := range declared {
					if got, ok := rows[q]; !ok || got != ml {
						missing++
						if missing <= 3 {
							c.fail("round %d: %s answered 201 with maxLength %d, after the restart %v (present %v)", round, q, ml, got, ok)
						}
					}
				}
				outcomes := c.ackStale(ids)
				for k, v := range outcomes.snapshot() {
					if k != "stale" {
						c.fail("round %d: %d acks of ids popped before the kill answered %q, want stale", round, v, k)
					}
				}
				c.f.Extra[fmt.Sprintf("round%dDeclared", round)] = float64(len(cfg))
				c.f.Extra[fmt.Sprintf("round%dStaleAcks", round)] = float64(outcomes.get("stale"))
				if len(cfg) == 0 || outcomes.get("stale") == 0 {
					c.fail("round %d: the load made %d declarations and held %d ids: nothing was tested", round, len(cfg), len(ids))
				}
			}
			c.f.Extra["declaredTotal"] = float64(len(declared))
			c.checkCodes("load ", allCodes, "200", "201", "429 queue_full", "conn error")
			c.f.PeakRSSMiB = mib(c.rss.peakRSS())
		})
	}
}

// loadUntilKilled runs pushes (2 connections, 64 partitions), pops taking
// leases (group g, 1 connection: one lease per partition, D1, so the
// partitions fill up to the queue's maxLength and pushes meet 429
// queue_full, which is the spec's answer) and configures (1 connection, one at a time) for d, then
// kills the broker with SIGKILL while they run. It returns the ids popped
// and the queues whose configure answered 201, with the maxLength sent.
func (c *rcase) loadUntilKilled(round int, d time.Duration, cs *codes) ([]string, map[string]int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var ids []string
	cfg := map[string]int{}
	var wg sync.WaitGroup
	wg.Go(func() {
		flood(ctx, c.addr, 2, 8, cs, func(conn int) func() []byte {
			i := conn
			return func() []byte {
				i += 2
				return pushReq("work", fmt.Sprintf("p%d", i%64), 10, "1")
			}
		}, nil)
	})
	wg.Go(func() {
		flood(ctx, c.addr, 1, 4, cs, func(int) func() []byte {
			return func() []byte { return request("GET", "/api/v1/ephemeral/pop?queue=work&group=g&batch=5", nil) }
		}, func(status int, body []byte, _ time.Duration) {
			var p struct{ Messages []struct{ ID string } }
			if status == 200 && json.Unmarshal(body, &p) == nil {
				mu.Lock()
				for _, m := range p.Messages {
					ids = append(ids, m.ID)
				}
				mu.Unlock()
			}
		})
	})
	wg.Go(func() {
		i := 0
		var sent []string
		flood(ctx, c.addr, 1, 1, cs, func(int) func() []byte {
			return func() []byte {
				i++
				q := fmt.Sprintf("decl-%d-%d", round, i)
				sent = append(sent, q)
				return request("POST", "/api/v1/ephemeral/configure", []byte(fmt.Sprintf(`{"queue":%q,"options":{"maxLength":%d}}`, q, i)))
			}
		}, func(status int, _ []byte, _ time.Duration) {
			// Answers come in order, one at a time: the latest sent is answered.
			if status == 201 {
				mu.Lock()
				cfg[sent[len(sent)-1]] = len(sent)
				mu.Unlock()
			}
		})
	})
	time.Sleep(d) // the load runs for d: a duration, not a state
	c.b.Kill()
	cancel()
	wg.Wait()
	return ids, cfg
}

// ackStale acks ids (group g, queue work, 500 at a time) and counts the
// outcomes.
func (c *rcase) ackStale(ids []string) *codes {
	out := newCodes()
	var reqs [][]byte
	for len(ids) > 0 {
		n := min(len(ids), 500)
		var b strings.Builder
		b.WriteString(`{"queue":"work","group":"g","acks":[`)
		for i, id := range ids[:n] {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"id":%q,"status":"completed"}`, id)
		}
		b.WriteString("]}")
		reqs = append(reqs, request("POST", "/api/v1/ephemeral/ack", []byte(b.String())))
		ids = ids[n:]
	}
	flood(context.Background(), c.addr, 1, 4, newCodes(), func(int) func() []byte { return list(reqs) },
		func(status int, body []byte, _ time.Duration) {
			var a struct{ Results []struct{ Outcome string } }
			if status != 200 || json.Unmarshal(body, &a) != nil {
				out.addKey(fmt.Sprintf("answer %d", status))
				return
			}
			for _, r := range a.Results {
				out.addKey(r.Outcome)
			}
		})
	return out
}

// waitStoreOK polls /health until it reports "store": "ok".
func waitStoreOK(base string, d time.Duration) error {
	var last string
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(base + "/health")
		if err != nil {
			last = err.Error()
			continue
		}
		var h struct{ Store string }
		_ = json.NewDecoder(resp.Body).Decode(&h)
		resp.Body.Close()
		if h.Store == "ok" {
			return nil
		}
		last = "store " + h.Store
	}
	return errors.New("/health never reported store ok: " + last)
}

// listingOptions is every declared queue's maxLength in force, from the
// listing (small here: the declarations of five rounds).
func listingOptions(base string) (map[string]int, error) {
	resp, err := http.Get(base + "/api/v1/ephemeral/queues")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var l struct {
		Queues []struct {
			Queue   string
			Tier    string
			Options struct{ MaxLength int }
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, q := range l.Queues {
		if q.Tier == "declared" {
			out[q.Queue] = q.Options.MaxLength
		}
	}
	return out, nil
}

// TestPostgresOutage: PostgreSQL stopped for 10 s under load. Push and pop
// go on unaffected (every answer 201/200, probe p99 ≤ 50 ms), a configure
// during the outage is 503 ephemeral_unavailable, and configures answer 201
// again once it is back.
func TestPostgresOutage(t *testing.T) {
	p := needPG(t)
	c := newCase(t, pgEnv(t))
	if err := waitStoreOK(c.b.URL(), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	work := newCodes()
	var wg sync.WaitGroup
	wg.Go(func() {
		flood(ctx, c.addr, 2, 4, work, func(conn int) func() []byte {
			i := 0
			return func() []byte {
				i++
				if i%2 == 1 {
					return pushReq(fmt.Sprintf("out-%d", conn), "", 10, "1")
				}
				return request("GET", fmt.Sprintf("/api/v1/ephemeral/pop?queue=out-%d&batch=10&autoAck=true", conn), nil)
			}
		}, nil)
	})
	configure := func(q string) (int, string) {
		var status int
		var code string
		flood(context.Background(), c.addr, 1, 1, newCodes(), func(int) func() []byte {
			return once(request("POST", "/api/v1/ephemeral/configure", []byte(`{"queue":"`+q+`"}`)))
		}, func(s int, body []byte, _ time.Duration) {
			status = s
			var e struct{ Code string }
			_ = json.Unmarshal(body, &e)
			code = e.Code
		})
		return status, code
	}
	if s, code := configure("before"); s != 201 {
		t.Fatalf("configure before the outage: %d %s", s, code)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	during := newCodes()
	for i := 0; time.Since(stopped) < 10*time.Second; i++ {
		s, code := configure(fmt.Sprintf("during-%d", i))
		during.addKey(strings.TrimSpace(fmt.Sprint(s, " ", code)))
		time.Sleep(200 * time.Millisecond) // a configure every 200 ms: a rate, not a wait
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	var back time.Duration
	for time.Since(restarted) < 30*time.Second {
		if s, _ := configure("after"); s == 201 {
			back = time.Since(restarted)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	c.endLoad()
	c.checkCodes("work ", work, "200", "201")
	c.checkCodes("configure during ", during, "503 ephemeral_unavailable")
	if during.get("503 ephemeral_unavailable") == 0 {
		c.fail("no configure was tried during the outage")
	}
	c.f.Extra["configure201AfterS"] = back.Seconds()
	if back == 0 {
		c.fail("configure did not answer 201 within 30 s of PostgreSQL's return")
	}
}
