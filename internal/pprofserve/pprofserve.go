// Package pprofserve serves net/http/pprof on a listener of its own, apart
// from the event loops' port, for QUEEN_PPROF_ADDR of cmd/queen and
// cmd/queen-gateway (profiles/README.md says how to read what it gives).
package pprofserve

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"time"
)

// Serve listens on addr and serves the pprof handlers there until the
// process ends. It also turns on sampling of mutex contention (one event in
// 10) and blocking (one sample per 100 µs blocked), which are off by default.
func Serve(addr string, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	runtime.SetMutexProfileFraction(10)
	runtime.SetBlockProfileRate(100_000)
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil {
			log.Warn("pprof listener stopped", "err", err)
		}
	}()
	log.Info("serving pprof", "addr", ln.Addr().String())
	return nil
}
