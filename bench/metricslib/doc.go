// Package metricslib measures the two candidate metrics libraries,
// VictoriaMetrics/metrics and prometheus/client_golang, on what the broker
// does per request: increment a labelled counter, observe a histogram. It
// is its own module so that client_golang stays out of the broker's
// dependencies:
//
//	cd bench/metricslib && go test -run '^$' -bench . -benchmem -count 3
package metricslib
