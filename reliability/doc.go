// Package reliability is the reliability suite: every attack on
// the broker's memory bounds reproduced against the real binary, with the
// bounds asserted (RSS, refusal codes, probe latency, recovery), and the
// crash and PostgreSQL outage cases. Its tests carry the build tag
// `reliability`, so `go test ./...` does not run them: `make reliability`
// does (RELIABILITY.md says what each case does and what it measured).
package reliability
