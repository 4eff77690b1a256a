package server

// The kill switch (D15): an operator pauses the ephemeral surface. It is
// applied in memory at once and written to the store by persistKillSwitch;
// ksGen counts this broker's changes and ksWritten the last one stored, so
// that a reconcile never overwrites a newer change with an older stored one.

import (
	"context"
	"time"

	"github.com/queenmq/ephemeral/store"
)

// killSwitch returns the state in force.
func (s *Server) killSwitch() store.KillSwitch {
	s.ksMu.Lock()
	defer s.ksMu.Unlock()
	return s.ks
}

// setKillSwitch applies k in memory at once, answers parked pops empty when
// it pauses, and has the persister write it.
func (s *Server) setKillSwitch(k store.KillSwitch) {
	s.ksMu.Lock()
	s.ks = k
	s.ksGen++
	// Under the lock, so that a stored kill switch applied concurrently
	// (applyStoredKillSwitch) cannot leave the flags of the other one.
	s.paused.Store(!k.Enabled)
	s.retryAfter.Store(max(1, k.RetryAfterSeconds))
	s.ksMu.Unlock()
	if !k.Enabled {
		s.e.ReleaseWaiters()
	}
	select {
	case s.ksDirty <- struct{}{}:
	default:
	}
}

// ksGenerationNow is the count of the operator's changes on this broker.
func (s *Server) ksGenerationNow() uint64 {
	s.ksMu.Lock()
	defer s.ksMu.Unlock()
	return s.ksGen
}

// applyStoredKillSwitch applies k, read from the store by a reconcile that
// began at kill switch generation gen, unless memory is newer: an operator
// set one here since gen, or one set here is not written yet (D15: applied
// at once, kept in the store once it answers; the stored value is then the
// older). It reports whether it changed anything. Pausing answers parked
// pops empty, as setting does. deferred reports that memory was newer: the
// caller looks again later, since the write that will settle it may be
// one it has already counted.
func (s *Server) applyStoredKillSwitch(k store.KillSwitch, gen uint64) (changed, deferred bool) {
	s.ksMu.Lock()
	if s.ksGen != gen || s.ksWritten != s.ksGen {
		s.ksMu.Unlock()
		return false, true
	}
	if s.ks == k {
		s.ksMu.Unlock()
		return false, false
	}
	s.ks = k
	s.paused.Store(!k.Enabled)
	s.retryAfter.Store(max(1, k.RetryAfterSeconds))
	s.ksMu.Unlock()
	if !k.Enabled {
		s.e.ReleaseWaiters()
	}
	return true, false
}

// persistKillSwitch writes the kill switch whenever it changes, retrying
// until it is written (D15: applied in memory even when the store is down,
// kept in the store once it answers).
func (s *Server) persistKillSwitch() {
	var written uint64
	for {
		select {
		case <-s.ksDirty:
		case <-s.quit:
			return
		}
		for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
			s.ksMu.Lock()
			k, gen := s.ks, s.ksGen
			s.ksMu.Unlock()
			if gen == written {
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StoreTimeout)
			err := store.SaveKillSwitch(ctx, s.st, k)
			cancel()
			if err == nil {
				written = gen
				s.ksMu.Lock()
				s.ksWritten = max(s.ksWritten, gen)
				s.ksMu.Unlock()
				continue
			}
			s.cfg.Logger.Warn("the kill switch could not be written; retrying", "err", err, "in", delay)
			select {
			case <-time.After(delay):
			case <-s.quit:
				return
			}
		}
	}
}
