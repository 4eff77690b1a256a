package server

import (
	"context"
	"fmt"
	"time"

	"github.com/queenmq/ephemeral/wire"
)

// loadDeclarations applies every stored declaration, so each declared queue
// exists, configured and empty (D16), and every tenant grant's allowance.
// A queue created implicitly meanwhile becomes declared and keeps its
// contents, as configure does.
func (s *Server) loadDeclarations(ctx context.Context) error {
	decls, err := s.st.LoadDeclarations(ctx)
	if err != nil {
		return fmt.Errorf("load declarations: %w", err)
	}
	for _, d := range decls {
		var o wire.Options
		if len(d.Options) > 0 {
			if o, err = wire.ParseOptions(d.Options); err != nil {
				s.cfg.Logger.Error("a stored declaration does not parse; skipped", "tenant", d.Tenant, "queue", d.Queue, "err", err)
				continue
			}
		}
		if err := s.e.Configure(d.Tenant, d.Queue, optionSet(o)); err != nil {
			s.cfg.Logger.Error("a stored declaration was not applied", "tenant", d.Tenant, "queue", d.Queue, "err", err)
		}
	}
	grants, err := s.st.LoadGrants(ctx)
	if err != nil {
		return fmt.Errorf("load grants: %w", err)
	}
	for _, g := range grants {
		s.setGrant(g.Tenant, &g)
	}
	if err := s.loadKillSwitch(ctx); err != nil {
		return fmt.Errorf("load the kill switch: %w", err)
	}
	s.loaded.Store(true)
	s.cfg.Logger.Info("declarations loaded", "queues", len(decls), "grants", len(grants))
	return nil
}

// loadWhenReady waits for the store and loads, retrying until it succeeds
// or the server stops (D16: a broker that booted with the database down
// loads the declarations when it comes back).
func (s *Server) loadWhenReady() {
	<-s.st.Ready()
	for delay := 100 * time.Millisecond; !s.stopping.Load(); delay = min(2*delay, 5*time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.loadDeclarations(ctx)
		cancel()
		if err == nil {
			return
		}
		s.cfg.Logger.Warn("loading declarations failed; retrying", "err", err, "in", delay)
		time.Sleep(delay)
	}
}
