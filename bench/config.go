package bench

import (
	"fmt"
	"io"
	"time"
)

// Scenarios lists the scenario names in the order "all" runs them.
var Scenarios = []string{"reqreply", "throughput", "fanout", "inboxes", "parked", "idle"}

// Targets lists the target names.
var Targets = []string{"broker", "redis", "nats"}

// DefaultAddr is each target's default address.
var DefaultAddr = map[string]string{
	"broker": "127.0.0.1:6632",
	"redis":  "127.0.0.1:6379",
	"nats":   "127.0.0.1:4222",
}

// Config is one scenario run against one target.
type Config struct {
	Scenario string
	Target   string
	Addr     string
	PID      int // the target's process, for RSS and CPU; 0: found by the listening port
	// RespAddr, for the broker's reqreply with the raw client: the address
	// the responders use (another member of a cell, so that every round
	// trip is relayed); empty: Addr.
	RespAddr string
	// BehindPID is a process behind the target (the broker behind a
	// gateway): its CPU over the measured window is reported as cpu.behind,
	// so one run gives what each hop costs. 0: none.
	BehindPID int
	// CPUPIDs, when set, are the processes whose CPU and read/write system
	// calls over the measured window are the target's (summed): every
	// member of a cell the client reaches through one of them. Empty: PID.
	CPUPIDs []int
	// Label names the run in its report (-label), for tables that compare
	// runs of one scenario against one target made in different setups.
	Label string
	// Token, when set, is sent as "Authorization: Bearer <Token>" on every
	// request to the broker target (a broker in jwt mode, or a gateway).
	Token string

	// Client is how the broker target is driven: "raw" (bench/internal/rawhttp,
	// the tool's own pipelining client) or "sdk" (the Go SDK, package client).
	// Redis and NATS are always driven through their standard clients.
	Client string
	// Inbox is where reqreply's replies go: "requester" (each requester owns
	// one inbox, key or subject for the whole run) or "request" (a fresh one
	// per round trip, as a user of Request does). Empty: "request" with
	// -client sdk (the SDK's Request mints one per call), else "requester".
	Inbox string

	Duration time.Duration // the measured window
	Warmup   time.Duration // load before the window, not measured
	Size     int           // payload bytes (at least 24)

	Requesters, Responders, RespBatch int     // reqreply
	Services                          int     // reqreply with -client sdk: request queues, each with its owner in a cell
	Producers, Consumers, Batch       int     // throughput (Batch also fanout)
	Rate                              float64 // throughput: messages/s in, 0 = as fast as possible
	Window                            int     // messages produced and not yet consumed, at most
	Groups                            int     // fanout
	Inboxes                           int     // inboxes
	Collect                           time.Duration
	Parked                            int // parked
	Wakers                            int // parked, inboxes: connections that push

	Progress io.Writer // a line a second; nil for none
	NS       string    // prefix of every queue, key and subject of this run
}

// Defaults returns the defaults.
func Defaults() Config {
	return Config{
		Duration:   10 * time.Second,
		Warmup:     time.Second,
		Size:       64,
		Requesters: 32, Responders: 4, RespBatch: 16, Services: 1,
		Producers: 4, Consumers: 4, Batch: 100,
		Window:  5000,
		Groups:  8,
		Inboxes: 100000, Collect: 30 * time.Second,
		Parked: 20000, Wakers: 4,
		Client: ClientRaw,
	}
}

func (c *Config) check() error {
	switch {
	case c.Size < 24:
		return fmt.Errorf("-size %d: at least 24 bytes (a timestamp rides in the payload)", c.Size)
	case c.Duration <= 0:
		return fmt.Errorf("-d must be positive")
	case c.Requesters < 1 || c.Responders < 1 || c.RespBatch < 1:
		return fmt.Errorf("-c, -w and -rbatch must be at least 1")
	case c.Producers < 1 || c.Consumers < 1 || c.Batch < 1 || c.Batch > 10000:
		return fmt.Errorf("-p and -k at least 1, -batch 1..10000")
	case c.Window < c.Batch:
		return fmt.Errorf("-window %d is smaller than -batch %d", c.Window, c.Batch)
	case c.Groups < 1 || c.Inboxes < 1 || c.Parked < 1 || c.Wakers < 1:
		return fmt.Errorf("-groups, -inboxes, -parked and -wakers must be at least 1")
	case c.Client != ClientRaw && c.Client != ClientSDK && c.Client != ClientSDKHTTP:
		return fmt.Errorf("-client %q: raw, sdk or sdk-http", c.Client)
	case c.Inbox != "" && c.Inbox != InboxRequest && c.Inbox != InboxRequester:
		return fmt.Errorf("-inbox %q: request or requester", c.Inbox)
	}
	if c.sdk() {
		if c.Scenario != "reqreply" {
			return fmt.Errorf("-client sdk drives the reqreply scenario only (the SDK's Request, Pop and Reply); run %s with -client raw", c.Scenario)
		}
		if c.Inbox == InboxRequester {
			return fmt.Errorf("-client sdk -inbox requester: the SDK's Request mints a fresh inbox per call; use -inbox request")
		}
	}
	if c.Services < 1 {
		return fmt.Errorf("-services %d: at least 1", c.Services)
	}
	if c.Services > 1 && !c.sdk() {
		return fmt.Errorf("-services %d: with -client sdk only (the raw client asks one queue)", c.Services)
	}
	if c.Inbox == "" {
		c.Inbox = InboxRequester
		if c.sdk() {
			c.Inbox = InboxRequest
		}
	}
	return nil
}

// The values of Config.Client and Config.Inbox.
const (
	ClientRaw      = "raw"
	ClientSDK      = "sdk"
	ClientSDKHTTP  = "sdk-http" // the Go SDK kept on HTTP/1.1 (client.WithHTTPOnly), no link
	InboxRequest   = "request"
	InboxRequester = "requester"
)

// sdk tells whether the broker target is driven through the Go SDK.
func (c *Config) sdk() bool {
	return c.Target == "broker" && (c.Client == ClientSDK || c.Client == ClientSDKHTTP)
}

// freshInbox tells whether reqreply mints a reply address per round trip.
func (c *Config) freshInbox() bool { return c.Inbox == InboxRequest }
