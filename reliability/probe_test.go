//go:build reliability

package reliability

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
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

	onSample func(health, pushPop time.Duration) // the child reports each sample
	cmd      *exec.Cmd                           // the probe's own process (startProbe)
	stdin    io.WriteCloser                      // closed to stop it
}

// probeAnswers are what the probe may be answered: its push may be refused
// by the broker's total while the attack holds it (the probe's queue gets
// no exemption, and the spec's answer for that is a 503 or a 403).
var probeAnswers = []string{"200", "201", "403 ephemeral_quota_exceeded", "503 ephemeral_unavailable"}

func newLocalProbe(base, queue, auth string) *probe {
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
	return p // the caller starts p.loop
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
		p.record(t1.Sub(t0), t2.Sub(t1))
		if p.onSample != nil {
			p.onSample(t1.Sub(t0), t2.Sub(t1))
		}
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
	if p.stdin != nil {
		p.stdin.Close() // the child stops, reports its errors and codes, and exits
	}
	<-p.done
	if p.cmd != nil {
		_ = p.cmd.Wait()
	} else {
		p.hc.CloseIdleConnections()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return probeFigures{
		HealthP50: percentile(p.health, 0.5), HealthP99: percentile(p.health, 0.99),
		PushPopP50: percentile(p.pushPop, 0.5), PushPopP99: percentile(p.pushPop, 0.99),
		Samples: len(p.health), Errors: p.errors, FirstErr: p.firstErr,
	}
}

func (p *probe) record(health, pushPop time.Duration) {
	p.mu.Lock()
	p.health = append(p.health, health)
	p.pushPop = append(p.pushPop, pushPop)
	p.mu.Unlock()
}

// startProbe runs the probe in a process of its own (this test binary again,
// runProbeChild), so that its latencies are the broker's and the kernel's,
// not those of the attack's goroutines sharing its Go scheduler. It returns
// once the probe's connection is open and has been answered.
func startProbe(base, queue, auth string) *probe {
	p := &probe{codes: newCodes(), stop: make(chan struct{}), done: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), "QUEEN_RELIABILITY_PROBE="+base,
		"QUEEN_RELIABILITY_PROBE_QUEUE="+queue, "QUEEN_RELIABILITY_PROBE_AUTH="+auth)
	p.cmd.Stderr = os.Stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		panic(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		panic(err)
	}
	if err := p.cmd.Start(); err != nil {
		panic(err)
	}
	ready := make(chan struct{})
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			kind, rest, _ := strings.Cut(sc.Text(), " ")
			switch kind {
			case "R":
				close(ready)
			case "S":
				h, pp, _ := strings.Cut(rest, " ")
				hn, _ := strconv.ParseInt(h, 10, 64)
				pn, _ := strconv.ParseInt(pp, 10, 64)
				p.record(time.Duration(hn), time.Duration(pn))
			case "E":
				n, first, _ := strings.Cut(rest, " ")
				p.mu.Lock()
				p.errors, _ = strconv.Atoi(n)
				p.firstErr = first
				p.mu.Unlock()
			case "K":
				key, n, _ := strings.Cut(rest, "\t")
				k, _ := strconv.ParseInt(n, 10, 64)
				for range k {
					p.codes.addKey(key)
				}
			}
		}
	}()
	select {
	case <-ready:
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
	return p
}

// runProbeChild is the probe's process: it probes base until its standard
// input closes, writing "S health pushPop" (nanoseconds) per sample, then
// "E errors firstError" and one "K code\tcount" per answer code.
func runProbeChild(base string) {
	p := newLocalProbe(base, os.Getenv("QUEEN_RELIABILITY_PROBE_QUEUE"), os.Getenv("QUEEN_RELIABILITY_PROBE_AUTH"))
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	emit := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(w, format, args...)
		w.Flush()
		mu.Unlock()
	}
	p.onSample = func(h, pp time.Duration) { emit("S %d %d\n", h.Nanoseconds(), pp.Nanoseconds()) }
	go p.loop()
	emit("R\n")
	_, _ = io.Copy(io.Discard, os.Stdin)
	close(p.stop)
	<-p.done
	p.mu.Lock()
	emit("E %d %s\n", p.errors, strings.ReplaceAll(p.firstErr, "\n", " "))
	p.mu.Unlock()
	for k, n := range p.codes.snapshot() {
		emit("K %s\t%d\n", k, n)
	}
}
