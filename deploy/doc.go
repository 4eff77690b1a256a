// Package deploy holds the files an operator deploys the broker with: the
// Grafana dashboard, the Prometheus alert rules, the systemd unit and its
// environment file (docs/operator.md). It has no code; its test checks
// that the files parse and name only metric families the broker exports.
package deploy
