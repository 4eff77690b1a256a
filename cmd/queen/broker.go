package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/server"
	"github.com/queenmq/ephemeral/store"
	"github.com/queenmq/ephemeral/store/storeenv"
)

// broker is a running broker and what runs beside its server: the store,
// the engine and, in a cell, the membership and the relay.
type broker struct {
	log  *slog.Logger
	st   store.Store
	e    *engine.Engine
	srv  *server.Server
	cell *cellParts // nil: a cell of one
}

// startBroker builds the broker from cfg and starts it, in the one order
// that works: the identity, the store, the engine and the server; in a
// cell, the relay attached to the server before the member joins
// (AttachCell), the membership started (cell.Start) and handed to the
// server (SetMembership) before the server starts (Start: from then on a
// request may be relayed), and the relay's port served only once the
// server's loops run (they serve it). On an error, what started is stopped.
func startBroker(cfg brokerConfig, log *slog.Logger) (*broker, error) {
	acfg := cfg.Auth
	if cfg.JWTPublicKeyPath != "" {
		pem, err := os.ReadFile(cfg.JWTPublicKeyPath)
		if err != nil {
			return nil, fmt.Errorf("QUEEN_JWT_PUBLIC_KEY: %w", err)
		}
		acfg.JWTPublicKey = pem
	}
	auth, err := identity.New(acfg)
	if err != nil {
		return nil, err
	}
	st, err := storeenv.Open(context.Background(), cfg.Store, log)
	if err != nil {
		return nil, fmt.Errorf("open the store: %w", err)
	}
	b := &broker{log: log, st: st, e: engine.New(cfg.Engine)}
	scfg := cfg.Server
	scfg.Logger, scfg.Auth, scfg.Engine, scfg.Store = log, auth, b.e, st
	b.srv = server.New(scfg)
	if cfg.Cell.Enabled() {
		if b.cell, err = startCell(cfg.Cell, cfg.RelayDelay, cfg.Store, b.e, b.srv, log); err != nil {
			b.close()
			return nil, err
		}
	}
	if err := b.srv.Start(); err != nil {
		b.cell.stop(context.Background())
		b.close()
		return nil, err
	}
	b.cell.serve()
	if auth.Mode() == identity.ModeNone && len(scfg.AdminToken) == 0 {
		log.Info("protected mode: the admin routes and /metrics answer loopback clients only; set QUEEN_ADMIN_TOKEN to administer remotely")
	}
	return b, nil
}

// stop ends the broker (SIGTERM): it leaves the cell first, with a bound
// of its own, so that the others own its queues at once and the requests
// still landing here are relayed to them rather than refused; then it
// answers the parked pops and closes the connections, closes the relay,
// and closes the store and the engine last.
func (b *broker) stop() error {
	cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer ccancel()
	b.cell.leave(cctx)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := b.srv.Shutdown(ctx)
	b.cell.stop(cctx)
	b.close()
	return err
}

// close closes the store and the engine.
func (b *broker) close() {
	b.st.Close()
	b.e.Close()
}
