package bench

import "context"

// fanout: one producer pushes batches of Batch payloads; G groups (one
// consumer each) every one receive everything. Measured: deliveries per
// second (messages times groups) and end-to-end latency.
func runFanout(ctx context.Context, cfg *Config, t target, m *meter, res *Result) error {
	res.Unit = "deliveries"
	res.Params = map[string]any{"groups": cfg.Groups, "batch": cfg.Batch, "size": cfg.Size, "window": cfg.Window}
	takers := make([]int, cfg.Groups)
	for i := range takers {
		takers[i] = i
	}
	return runFlow(ctx, cfg, t, m, res, flowLayout{
		kind: kindFanout, producers: 1, groups: cfg.Groups, takerOf: takers,
	})
}
