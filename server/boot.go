package server

import (
	"context"
	"time"
)

// loadDeclarations applies every stored declaration, so each declared queue
// exists, configured and empty (D16), every tenant grant's allowance, and
// the stored kill switch (unless an operator set one since this process
// started). It is the first reconcile (sync.go): a queue created implicitly
// meanwhile becomes declared and keeps its contents, as configure does.
func (s *Server) loadDeclarations(ctx context.Context) error {
	d, err := s.reconcile(ctx, true)
	if err != nil {
		return err
	}
	s.loaded.Store(true)
	s.cfg.Logger.Info("declarations loaded", "queues", d.decls, "grants", d.grants)
	return nil
}

// loadWhenReady waits for the store and loads, retrying until it succeeds
// or the server stops (D16: a broker that booted with the database down
// loads the declarations when it comes back).
func (s *Server) loadWhenReady() {
	select {
	case <-s.st.Ready():
	case <-s.quit:
		return
	}
	for delay := 100 * time.Millisecond; !s.stopping.Load(); delay = min(2*delay, 5*time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.loadDeclarations(ctx)
		cancel()
		if err == nil {
			return
		}
		s.cfg.Logger.Warn("loading declarations failed; retrying", "err", err, "in", delay)
		select {
		case <-time.After(delay):
		case <-s.quit:
			return
		}
	}
}
