package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// target is an open connection to a broker, Redis or NATS; each scenario
// asks it for the driver interface it needs (rrDriver, flowDriver, ...).
type target interface {
	close()
}

func openTarget(cfg *Config) (target, error) {
	switch cfg.Target {
	case "broker":
		if cfg.sdk() {
			return newBrokerSDK(cfg)
		}
		return newBroker(cfg)
	case "redis":
		return newRedis(cfg)
	case "nats":
		return newNATS(cfg)
	}
	return nil, fmt.Errorf("unknown target %q (broker, redis or nats)", cfg.Target)
}

type scenarioFunc func(ctx context.Context, cfg *Config, t target, m *meter, res *Result) error

func scenarioByName(name string) (scenarioFunc, error) {
	switch name {
	case "reqreply":
		return runReqReply, nil
	case "throughput":
		return runThroughput, nil
	case "fanout":
		return runFanout, nil
	case "inboxes":
		return runInboxes, nil
	case "parked":
		return runParked, nil
	case "idle":
		return runIdle, nil
	}
	return nil, fmt.Errorf("unknown scenario %q (%s)", name, strings.Join(Scenarios, ", "))
}

// Run runs one scenario against one target and returns its result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	run, err := scenarioByName(cfg.Scenario)
	if err != nil {
		return nil, err
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr[cfg.Target]
	}
	if cfg.NS == "" {
		cfg.NS = NewNS()
	}
	t, err := openTarget(&cfg)
	if err != nil {
		return nil, fmt.Errorf("%s at %s: %w", cfg.Target, cfg.Addr, err)
	}
	defer t.close()
	res := &Result{Scenario: cfg.Scenario, Target: cfg.Target, Addr: cfg.Addr, CPU: unknownCPU()}
	if cfg.Target == "broker" {
		res.Client = cfg.Client
	}
	res.Label = cfg.Label
	if cfg.PID == 0 {
		if pid, err := pidByAddr(cfg.Addr); err == nil {
			cfg.PID = pid
		} else {
			res.Notes = append(res.Notes, "target process not found ("+err.Error()+"): no RSS or target CPU")
		}
	}
	m := &meter{}
	m.setPhase("setup")
	stop := progress(cfg.Progress, cfg.Scenario+"/"+cfg.Target, m)
	err = run(ctx, &cfg, t, m, res)
	stop()
	if res.Seconds > 0 {
		res.Rate = float64(res.Ops) / res.Seconds
	}
	if res.Ops > 0 && res.Seconds > 0 {
		res.CPU.ClientPerOp = res.CPU.Client * res.Seconds / float64(res.Ops) * 1e6
	}
	return res, err
}

// NewNS returns a fresh prefix for the names a run uses, so runs never see
// each other's messages.
func NewNS() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "qb" + hex.EncodeToString(b[:])
}

// base is the zero of now(): one monotonic clock for every timestamp a run
// puts in a payload and reads back.
var base = time.Now()

func now() int64 { return int64(time.Since(base)) }

// sleepUntil sleeps until now() reaches t or ctx ends.
func sleepUntil(ctx context.Context, t int64) {
	if d := time.Duration(t - now()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
}

// window is the measured part of a time-bound scenario: operations that
// complete in [start, end) count.
type window struct{ start, end int64 }

func newWindow(cfg *Config) window {
	start := now() + int64(cfg.Warmup)
	return window{start, start + int64(cfg.Duration)}
}

func (w window) in(t int64) bool  { return t >= w.start && t < w.end }
func (w window) seconds() float64 { return float64(w.end-w.start) / 1e9 }

// cpuMark is a reading of the CPU time used so far by this process, the
// target and the process behind it, and of the target's read/write system
// calls.
type cpuMark struct {
	pids              []int
	behindPID         int
	wall              int64
	self, target, sys float64 // target and sys are -1 when unknown
	behind            float64 // -1 when unknown or not asked for
	rw, behindRW      int64   // -1 when unknown
}

// targetPIDs are the processes whose CPU is the target's: cfg.CPUPIDs, or
// cfg.PID alone.
func targetPIDs(cfg *Config) []int {
	if len(cfg.CPUPIDs) > 0 {
		return cfg.CPUPIDs
	}
	if cfg.PID > 0 {
		return []int{cfg.PID}
	}
	return nil
}

// markCPU reads the CPU so far of this process, of pids summed (the
// target; unknown when one of them cannot be read) and of behindPID.
func markCPU(pids []int, behindPID int) cpuMark {
	m := cpuMark{pids: pids, behindPID: behindPID, wall: now(), self: selfCPUSeconds(), target: -1, sys: -1, behind: -1, rw: -1, behindRW: -1}
	if len(pids) > 0 {
		m.target, m.sys, m.rw = 0, 0, 0
	}
	for _, pid := range pids {
		if t, s, err := cpuSeconds(pid); err == nil && m.target >= 0 {
			m.target, m.sys = m.target+t, m.sys+s
		} else {
			m.target, m.sys = -1, -1
		}
		if n, err := readWriteSyscalls(pid); err == nil && m.rw >= 0 {
			m.rw += n
		} else {
			m.rw = -1
		}
	}
	if behindPID > 0 {
		if t, _, err := cpuSeconds(behindPID); err == nil {
			m.behind = t
		}
		if n, err := readWriteSyscalls(behindPID); err == nil {
			m.behindRW = n
		}
	}
	return m
}

// unknownCPU is a CPU with every reading of another process unknown (-1).
func unknownCPU() CPU {
	return CPU{Target: -1, TargetSys: -1, TargetRW: -1, Behind: -1, BehindRW: -1}
}

// since is the CPU used since the mark, in cores.
func (m cpuMark) since() CPU {
	end := markCPU(m.pids, m.behindPID)
	wall := float64(end.wall-m.wall) / 1e9
	if wall <= 0 {
		return unknownCPU()
	}
	c := unknownCPU()
	c.Client = (end.self - m.self) / wall
	if m.target >= 0 && end.target >= 0 {
		c.Target = (end.target - m.target) / wall
		c.TargetSys = (end.sys - m.sys) / wall
	}
	if m.rw >= 0 && end.rw >= 0 {
		c.TargetRW = end.rw - m.rw
	}
	if m.behind >= 0 && end.behind >= 0 {
		c.Behind = (end.behind - m.behind) / wall
	}
	if m.behindRW >= 0 && end.behindRW >= 0 {
		c.BehindRW = end.behindRW - m.behindRW
	}
	return c
}

// cpuOver measures the CPU used over w in the background; the returned
// function waits for the end of w and gives it.
func cpuOver(ctx context.Context, cfg *Config, w window) func() CPU {
	ch := make(chan CPU, 1)
	go func() {
		sleepUntil(ctx, w.start)
		m := markCPU(targetPIDs(cfg), cfg.BehindPID)
		sleepUntil(ctx, w.end)
		ch <- m.since()
	}()
	return func() CPU { return <-ch }
}

// meter counts completed operations for the progress line.
type meter struct {
	ops   atomic.Int64
	phase atomic.Pointer[string]
}

func (m *meter) setPhase(s string) { m.phase.Store(&s) }

// progress prints one line a second to w (nothing when w is nil) until the
// returned function is called.
func progress(w io.Writer, label string, m *meter) func() {
	if w == nil {
		return func() {}
	}
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		start, last := time.Now(), m.ops.Load()
		for {
			select {
			case <-done:
				if tty {
					fmt.Fprintln(w)
				}
				return
			case <-t.C:
				ops := m.ops.Load()
				line := fmt.Sprintf("%-18s %-10s %5.0fs %12s ops/s %14s ops", label, *m.phase.Load(),
					time.Since(start).Seconds(), thousands(float64(ops-last)), thousands(float64(ops)))
				last = ops
				if tty {
					fmt.Fprintf(w, "\r%s ", line)
				} else {
					fmt.Fprintln(w, line)
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}

// thousands formats v rounded, with thousands separators.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
