package bench

import "context"

// throughput: P producers push batches of Batch payloads of Size bytes; K
// consumers in one group take batches and acknowledge them. Measured:
// messages per second in and out, and end-to-end latency from the
// timestamp in each payload. With -rate the producers push at that many
// messages per second in all and stamp each batch with its scheduled time,
// so a late batch counts its lateness (no coordinated omission).
func runThroughput(ctx context.Context, cfg *Config, t target, m *meter, res *Result) error {
	res.Unit = "messages"
	res.Params = map[string]any{"producers": cfg.Producers, "consumers": cfg.Consumers, "batch": cfg.Batch,
		"size": cfg.Size, "rate": cfg.Rate, "window": cfg.Window}
	takers := make([]int, cfg.Consumers) // all in group 0
	return runFlow(ctx, cfg, t, m, res, flowLayout{
		kind: kindThroughput, producers: cfg.Producers, groups: 1, takerOf: takers, rate: cfg.Rate,
	})
}
