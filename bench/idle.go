package bench

import "context"

// idle: nothing at all for the window, with the tool's connections to the
// target open: what the server costs while nobody uses it. Measured: the
// target's CPU, shown as milliseconds of CPU per second. A server that
// wakes often for nothing (a fine-grained ticker, polling) shows here, and
// in a cell every member that owns nothing a client uses is idle in this
// sense: its cost is added to the cell's per round trip.
func runIdle(ctx context.Context, cfg *Config, _ target, m *meter, res *Result) error {
	res.Unit = "idle seconds"
	m.setPhase("idle")
	w := newWindow(cfg)
	cpu := cpuOver(ctx, cfg, w)
	sleepUntil(ctx, w.end)
	res.CPU = cpu()
	res.Seconds = w.seconds()
	return ctx.Err()
}
