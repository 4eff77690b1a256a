// Package bench is the end-to-end load generator behind queenbench: five
// scenarios (reqreply, throughput, fanout, inboxes, parked) run against the
// broker over loopback HTTP/1.1 and, for comparison, against Redis and NATS
// through their standard Go clients. Each scenario is one file and talks to
// a target through a small driver interface that broker.go, redis.go and
// nats.go implement. Results carry HDR-histogram latencies, rates, the CPU
// the tool and the target used, and the target's resident memory.
package bench
