package server

import "github.com/queenmq/ephemeral/wire"

// health serves GET /health: 200 while the broker serves, with the store's
// state, the incarnation and the version (D16). The store counts as ok once
// it answers and the declarations are loaded from it.
func (cs *conn) health(req *wire.Request) {
	s := cs.s
	st := "down"
	if s.st.Healthy() && s.loaded.Load() {
		st = "ok"
	}
	b := append(cs.ls.scratch[:0], `{"status":"ok","store":`...)
	b = wire.AppendString(b, st)
	b = append(b, `,"incarnation":`...)
	b = wire.AppendString(b, s.e.Incarnation())
	b = append(b, `,"version":`...)
	b = wire.AppendString(b, s.cfg.Version)
	b = s.appendCellHealth(b)
	cs.ls.scratch = append(b, '}')
	cs.answer(req, 200, cs.ls.scratch)
}
