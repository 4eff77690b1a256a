//go:build reliability

package reliability

import (
	"bytes"
	"io"
	"net/http"
	"sync"
	"time"
)

// probe is a well-behaved client beside the attack: every 20 ms, on one
// keep-alive connection of its own, a GET /health and a small push+pop on a
// queue of its own. It records how long each took and what was answered:
// the issue's "the broker keeps answering /health and a small push+pop
// within 50 ms p99 meanwhile".
type probe struct {
	base  string
	queue string
	auth  string // an Authorization header value, for a broker in jwt mode
	hc    *http.Client
	codes *codes

	mu       sync.Mutex
	health   []time.Duration
	pushPop  []time.Duration
	errors   int
	firstErr string

	stop chan struct{}
	done chan struct{}
}

// probeAnswers are what the probe may be answered: its push may be refused
// by the broker's total while the attack holds it (the probe's queue gets
// no exemption, and the spec's answer for that is a 503 or a 403).
var probeAnswers = []string{"200", "201", "403 ephemeral_quota_exceeded", "503 ephemeral_unavailable"}

func startProbe(base, queue, auth string) *probe {
	p := &probe{
		base: base, queue: queue, auth: auth, codes: newCodes(),
		hc: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, DisableCompression: true,
		}},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	// Its connection is opened before the attack starts: the probe is a
	// client already connected (past the descriptor limit, the broker
	// serves the connections it has, not new ones).
	p.do("GET", "/health", nil)
	go p.loop()
	return p
}

func (p *probe) loop() {
	defer close(p.done)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	push := pushBody(p.queue, "", 1, `"probe"`)
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		t0 := time.Now()
		p.do("GET", "/health", nil)
		t1 := time.Now()
		p.do("POST", "/api/v1/ephemeral/push", push)
		p.do("GET", "/api/v1/ephemeral/pop?queue="+p.queue+"&autoAck=true&batch=10", nil)
		t2 := time.Now()
		p.mu.Lock()
		p.health = append(p.health, t1.Sub(t0))
		p.pushPop = append(p.pushPop, t2.Sub(t1))
		p.mu.Unlock()
	}
}

func (p *probe) do(method, path string, body []byte) {
	req, _ := http.NewRequest(method, p.base+path, bytes.NewReader(body))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if p.auth != "" {
		req.Header.Set("Authorization", p.auth)
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		p.mu.Lock()
		p.errors++
		if p.firstErr == "" {
			p.firstErr = err.Error()
		}
		p.mu.Unlock()
		return
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	p.codes.add(resp.StatusCode, b)
}

func (p *probe) samples() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.health)
}

// probeFigures is what a probe measured.
type probeFigures struct {
	HealthP50, HealthP99, PushPopP50, PushPopP99 time.Duration
	Samples, Errors                              int
	FirstErr                                     string
}

// Stop ends the probe and returns its figures.
func (p *probe) Stop() probeFigures {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
	p.hc.CloseIdleConnections()
	p.mu.Lock()
	defer p.mu.Unlock()
	return probeFigures{
		HealthP50: percentile(p.health, 0.5), HealthP99: percentile(p.health, 0.99),
		PushPopP50: percentile(p.pushPop, 0.5), PushPopP99: percentile(p.pushPop, 0.99),
		Samples: len(p.health), Errors: p.errors, FirstErr: p.firstErr,
	}
}
