package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/store"
	"github.com/queenmq/ephemeral/wire"
)

// Keeping memory in line with the store (D17): a configure, a delete, a
// grant or the kill switch written on one broker reaches every broker on
// the same database within SyncInterval, with no restart. The store keeps a
// change counter (store.Store.Revision) that every committed write raises,
// and tells of changes (Changes: LISTEN/NOTIFY for PostgreSQL); each broker
// compares the counter with the one it last applied, on every notification
// and every SyncInterval (the safety net when a notification is lost with
// its connection), and on a difference reloads the declarations, the
// grants and the kill switch and applies the difference (reconcile). The
// boot load is the first reconcile. docs/cell.md, "Declarations, grants and
// the kill switch across members", records the decisions.
//
// A broker's own writes never make it undo anything: a configure or delete
// holds declMu shared from its store write to its memory change, and a
// reconcile holds it exclusively from its load to its last change, so a
// reconcile either sees a local write whole (store and memory) or runs
// entirely before it; grants do the same with grantMu; a kill switch set
// here is not overwritten by a stored one until it has been written
// (ksWritten) and none was set since the reconcile began (ksGen).

// syncState is the server's part of that.
type syncState struct {
	mu      sync.Mutex   // one reconcile at a time
	declMu  sync.RWMutex // shared by configure and delete, exclusive for a reconcile
	applied atomic.Int64 // the store revision last applied
	failing atomic.Bool  // the last reconcile failed: log the next at debug

	// grants is every stored grant as last applied (the grant handler keeps it
	// too). It is written holding both Server.grantMu and grantsMu, and
	// read holding either.
	grants map[string]store.Grant
	// grantsMu guards grants and their application to memory (setGrant),
	// and is never held across a store call, unlike grantMu: redivide
	// takes it on the membership goroutine, whose heartbeats must not
	// wait for the database's answers to a grant verb or a reconcile.
	grantsMu sync.Mutex

	// Counters for tests and logs.
	reconciles, configured, undeclared, grantChanges, killSwitchChanges atomic.Int64
}

// revisionUnknown is applied when a reconcile could not apply everything it
// read: no store revision equals it, so the next look reloads.
const revisionUnknown = -1 << 63

// synced is what one reconcile changed.
type synced struct {
	decls, configured, undeclared, grants, grantChanges int
	// notApplied counts stored declarations the engine refused (the
	// tenant's queue allowance, the broker's memory): the next look tries
	// them again.
	notApplied int
	killSwitch bool
}

func (d synced) changed() bool {
	return d.configured+d.undeclared+d.grantChanges > 0 || d.killSwitch
}

// reconcile loads the declarations, the grants and the kill switch and
// applies the difference with memory. The revision is read first: a write
// committed after it moves it again, so the next look reloads. The boot
// load (boot set) only adds: what memory declares before it did not come
// from this store, and nothing is taken back.
func (s *Server) reconcile(ctx context.Context, boot bool) (synced, error) {
	s.sy.mu.Lock()
	defer s.sy.mu.Unlock()
	var d synced
	rev, err := s.st.Revision(ctx)
	if err != nil {
		return d, fmt.Errorf("read the store revision: %w", err)
	}
	ksGen := s.ksGenerationNow() // before loading: a change set after it wins
	if err := s.syncDeclarations(ctx, &d, boot); err != nil {
		return d, err
	}
	if err := s.syncGrants(ctx, &d); err != nil {
		return d, err
	}
	k, found, err := store.LoadKillSwitch(ctx, s.st)
	if err != nil {
		return d, fmt.Errorf("load the kill switch: %w", err)
	}
	if !found {
		k = store.KillSwitch{Enabled: true} // never written: enabled
	}
	var deferred bool
	d.killSwitch, deferred = s.applyStoredKillSwitch(k, ksGen)
	if deferred {
		// A kill switch set here is newer than the stored one, or not
		// written yet: the next look reloads (its write moves the revision,
		// but another member's write may have been counted here already).
		rev = revisionUnknown
	}
	if d.notApplied > 0 {
		// Marking the revision applied would leave those declarations out
		// until some other write moves it; the owner of such a queue would
		// serve it on the default options meanwhile.
		rev = revisionUnknown
	}
	s.sy.applied.Store(rev)
	s.sy.reconciles.Add(1)
	s.sy.configured.Add(int64(d.configured))
	s.sy.undeclared.Add(int64(d.undeclared))
	s.sy.grantChanges.Add(int64(d.grantChanges))
	if d.killSwitch {
		s.sy.killSwitchChanges.Add(1)
	}
	return d, nil
}

// syncDeclarations configures every stored declaration that memory does
// not hold with the same options in force, and takes back every
// declaration memory holds that the store does not (engine.Undeclare: the
// contents stay; docs/cell.md says why).
func (s *Server) syncDeclarations(ctx context.Context, d *synced, boot bool) error {
	s.sy.declMu.Lock()
	defer s.sy.declMu.Unlock()
	decls, err := s.st.LoadDeclarations(ctx)
	if err != nil {
		return fmt.Errorf("load declarations: %w", err)
	}
	d.decls = len(decls)
	type key struct{ tenant, queue string }
	stored := make(map[key]struct{}, len(decls))
	for _, dc := range decls {
		stored[key{dc.Tenant, dc.Queue}] = struct{}{} // even if it does not parse: never taken back for that
		var o wire.Options
		if len(dc.Options) > 0 {
			if o, err = wire.ParseOptions(dc.Options); err != nil {
				s.cfg.Logger.Error("a stored declaration does not parse; skipped", "tenant", dc.Tenant, "queue", dc.Queue, "err", err)
				continue
			}
		}
		sent := optionSet(o)
		if cur, ok := s.e.Declared(dc.Tenant, dc.Queue); ok && cur == s.e.Resolve(sent) {
			continue
		}
		if err := s.e.Configure(dc.Tenant, dc.Queue, sent); err != nil {
			s.cfg.Logger.Error("a stored declaration was not applied; tried again at the next look", "tenant", dc.Tenant, "queue", dc.Queue, "err", err)
			d.notApplied++
			continue
		}
		d.configured++
	}
	if boot {
		return nil
	}
	var gone []key
	s.e.EachDeclared(func(tenant, queue string, _ engine.Options) bool {
		if _, ok := stored[key{tenant, queue}]; !ok {
			gone = append(gone, key{tenant, queue})
		}
		return true
	})
	for _, k := range gone {
		if s.e.Undeclare(k.tenant, k.queue) {
			d.undeclared++
		}
	}
	return nil
}

// syncGrants applies every stored grant that differs from the one last
// applied, and the absence of each one gone.
func (s *Server) syncGrants(ctx context.Context, d *synced) error {
	s.grantMu.Lock()
	defer s.grantMu.Unlock()
	grants, err := s.st.LoadGrants(ctx)
	if err != nil {
		return fmt.Errorf("load grants: %w", err)
	}
	d.grants = len(grants)
	seen := make(map[string]struct{}, len(grants))
	for _, g := range grants {
		seen[g.Tenant] = struct{}{}
		if cur, ok := s.sy.grants[g.Tenant]; ok && cur == g {
			continue
		}
		s.setGrantLocked(g.Tenant, &g)
		d.grantChanges++
	}
	for tenant := range s.sy.grants {
		if _, ok := seen[tenant]; !ok {
			s.setGrantLocked(tenant, nil)
			d.grantChanges++
		}
	}
	return nil
}

// setGrantLocked applies a grant (nil: none) and remembers it as applied.
// The caller holds grantMu.
func (s *Server) setGrantLocked(tenant string, g *store.Grant) {
	s.sy.grantsMu.Lock()
	defer s.sy.grantsMu.Unlock()
	s.setGrant(tenant, g)
	if s.sy.grants == nil {
		s.sy.grants = make(map[string]store.Grant)
	}
	if g != nil {
		s.sy.grants[tenant] = *g
	} else {
		delete(s.sy.grants, tenant)
	}
}

// watchStore reconciles whenever the store's revision differs from the one
// applied: looked at on every change notification and every SyncInterval.
// It runs only for a store others can write (Changes is not nil), and
// reconciles only once the boot load is done (loadWhenReady does that one).
func (s *Server) watchStore() {
	changes := s.st.Changes()
	if changes == nil {
		return
	}
	t := time.NewTicker(s.cfg.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-changes:
		case <-t.C:
		case <-s.quit:
			return
		}
		if s.loaded.Load() {
			s.syncOnce()
		}
	}
}

// syncOnce reconciles when the revision moved.
func (s *Server) syncOnce() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*s.cfg.StoreTimeout)
	defer cancel()
	rev, err := s.st.Revision(ctx)
	if err == nil && rev == s.sy.applied.Load() {
		s.syncRecovered()
		return
	}
	var d synced
	if err == nil {
		d, err = s.reconcile(ctx, false)
	}
	if err != nil {
		if !s.sy.failing.Swap(true) {
			s.cfg.Logger.Warn("the store could not be read for changes; retrying every sync interval", "err", err, "every", s.cfg.SyncInterval)
		} else {
			s.cfg.Logger.Debug("the store still could not be read for changes", "err", err)
		}
		return
	}
	s.syncRecovered()
	if d.changed() {
		s.cfg.Logger.Info("store changes applied", "configured", d.configured, "undeclared", d.undeclared,
			"grants", d.grantChanges, "kill_switch", d.killSwitch, "revision", s.sy.applied.Load())
	}
}

func (s *Server) syncRecovered() {
	if s.sy.failing.Swap(false) {
		s.cfg.Logger.Info("the store answers again; changes are followed")
	}
}
