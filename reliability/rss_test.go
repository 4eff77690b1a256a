//go:build reliability

package reliability

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// sampler reads the broker's VmRSS and VmHWM from /proc/PID/status every
// 50 ms. The peak is the larger of the highest sample and VmHWM, so a spike
// between two samples still counts. Once RSS passes its cap it cancels the
// attack's context; past twice the cap it kills the broker (SIGKILL), since
// a broker without its bounds can go on growing after the attack stopped
// (it still answers what it was sent) and the machine is shared.
type sampler struct {
	cancel context.CancelFunc
	cap    int64

	mu      sync.Mutex
	pid     int
	rss     int64 // last sample
	peak    int64 // max of samples and VmHWM since the last mark
	capHit  bool
	killed  bool
	stopped chan struct{}
	stop    chan struct{}
}

func startSampler(pid int, capBytes int64, cancel context.CancelFunc) *sampler {
	s := &sampler{pid: pid, cap: capBytes, cancel: cancel, stop: make(chan struct{}), stopped: make(chan struct{})}
	s.sample()
	go func() {
		defer close(s.stopped)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *sampler) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	rss, hwm, err := readStatus(s.pid)
	if err != nil {
		return // the process is gone (or being restarted); keep the last figures
	}
	s.rss = rss
	s.peak = max(s.peak, rss, hwm)
	if rss > 2*s.cap && !s.killed {
		s.killed = true
		_ = syscall.Kill(s.pid, syscall.SIGKILL)
	}
	if rss > s.cap && !s.capHit {
		s.capHit = true
		if s.cancel != nil {
			s.cancel()
		}
	}
}

// follow makes the sampler read another process: the broker restarted.
func (s *sampler) follow(pid int) {
	s.mu.Lock()
	s.pid = pid
	s.mu.Unlock()
}

// mark starts a new peak from the current RSS: it resets VmHWM too
// (writing 5 to /proc/PID/clear_refs, Linux 4.0 and later), so that the
// peak is that of what follows, not of what came before.
func (s *sampler) mark() int64 {
	s.mu.Lock()
	_ = os.WriteFile("/proc/"+strconv.Itoa(s.pid)+"/clear_refs", []byte("5"), 0)
	s.peak = 0
	s.mu.Unlock()
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rss
}

// Close stops the sampling goroutine.
func (s *sampler) Close() {
	close(s.stop)
	<-s.stopped
}

// now is the latest RSS, sampled afresh.
func (s *sampler) now() int64 {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rss
}

func (s *sampler) peakRSS() int64 {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

func (s *sampler) hitCap() (capHit, killed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.capHit, s.killed
}

// readStatus returns VmRSS and VmHWM of pid in bytes.
func readStatus(pid int) (rss, hwm int64, err error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var dst *int64
		switch {
		case strings.HasPrefix(line, "VmRSS:"):
			dst = &rss
		case strings.HasPrefix(line, "VmHWM:"):
			dst = &hwm
		default:
			continue
		}
		fields := strings.Fields(line) // "VmRSS:", "12345", "kB"
		if len(fields) < 2 {
			return 0, 0, fmt.Errorf("/proc/%d/status: %q", pid, line)
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			return 0, 0, err
		}
		*dst = kb << 10
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
	}
	return rss, hwm, sc.Err()
}

// settle polls RSS until it is at most bound, for up to d: the broker gives
// memory back on its own schedule (the collector, the scavenger), so a
// fixed sleep would either waste time or be too short. It returns the last
// RSS and how long it took.
func (s *sampler) settle(bound int64, d time.Duration) (int64, time.Duration) {
	start := time.Now()
	for {
		rss := s.now()
		if rss <= bound || time.Since(start) >= d {
			return rss, time.Since(start)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
