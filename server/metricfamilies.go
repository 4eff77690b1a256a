package server

import "slices"

// Family is one metric family GET /metrics can show: its name, its type,
// its labels and its HELP text.
type Family struct {
	Name   string
	Type   string // counter, gauge or histogram
	Labels []string
	Help   string
}

// families is every family the server exports, inside a cell or not. It
// is the one source of the HELP texts (those of the families that
// VictoriaMetrics/metrics writes are filled in by fillHelp); the tests
// check a real scrape against it, and the alert rules of deploy/ name only
// families in it. docs/operator.md documents each one: keep both in step.
var families = []Family{
	// Traffic.
	{"queen_ephemeral_pushed_messages_total", "counter", []string{"tenant"},
		"Messages accepted by push, by tenant (metering; a refused push counts nothing)."},
	{"queen_ephemeral_delivered_messages_total", "counter", []string{"tenant"},
		"Messages handed out by pop answers, by tenant (metering; a parked pop counts when it completes)."},
	{"queen_ephemeral_ack_outcomes_total", "counter", []string{"outcome"},
		"Ack results by outcome: acked, redelivered (failed or retry), stale (minted by a gone incarnation), unknown (no such lease)."},
	{"queen_ephemeral_refusals_total", "counter", []string{"code"},
		"Error answers, by their code (every 4xx and 5xx the server writes)."},
	{"queen_ephemeral_request_duration_seconds", "histogram", []string{"route"},
		"Time from serving a request on its loop to its answer, by route."},

	// Drops, engine-wide and per declared queue.
	{"queen_ephemeral_dropped_total", "counter", []string{"cause"},
		"Messages dropped, by cause: bounds (a full queue's policy), ttl (aged out), retry (past the retry limit)."},
	{"queen_ephemeral_queue_dropped_total", "counter", []string{"tenant", "queue", "cause"},
		"Messages dropped from a declared queue, by cause, since the queue was made (implicit queues only count in queen_ephemeral_dropped_total)."},

	// Memory and queues.
	{"queen_ephemeral_bytes", "gauge", []string{"scope"},
		"The footprint the broker total counts: payload bytes plus the charges of queues, partitions, groups, parked pops and connections."},
	{"queen_ephemeral_max_bytes", "gauge", []string{"scope"},
		"The broker total budget in force (QUEEN_EPHEMERAL_MAX_BYTES): queen_ephemeral_bytes is held below it."},
	{"queen_ephemeral_tenant_bytes", "gauge", []string{"tenant"},
		"The footprint a tenant allowance counts (payload bytes plus object charges), by tenant."},
	{"queen_ephemeral_queues", "gauge", []string{"tier"},
		"Live queues, by tier (declared, implicit)."},
	{"queen_ephemeral_queue_depth", "gauge", []string{"tenant", "queue"},
		"Pending messages of a declared queue (the listing's depth)."},
	{"queen_ephemeral_queue_bytes", "gauge", []string{"tenant", "queue"},
		"Payload bytes held by a declared queue (the listing's bytes)."},
	{"queen_ephemeral_parked_pops", "gauge", nil,
		"Pops parked waiting for messages."},

	// Transport.
	{"queen_ephemeral_connections", "gauge", nil,
		"Client connections open now (relay links between members not included)."},
	{"queen_ephemeral_accept_errors_total", "counter", nil,
		"Failed accepts (descriptor limit reached, for one); accepting pauses and retries."},
	{"queen_ephemeral_accept_paused", "gauge", nil,
		"1 while accepting is paused after an accept error, else 0."},
	{"queen_ephemeral_idle_shed_total", "counter", nil,
		"Idle keep-alive connections closed so that a new connection could be accepted when descriptors ran out."},
	{"queen_ephemeral_gateway_links", "gauge", nil,
		"Connections a gateway upgraded to a gateway link (not counted in queen_ephemeral_connections)."},
	{"queen_ephemeral_client_links", "gauge", nil,
		"Connections clients upgraded to a link (docs/link.md; not counted in queen_ephemeral_connections)."},
	{"queen_ephemeral_inflight_request_bytes", "gauge", nil,
		"Request body bytes being read by all connections together (bounded by QUEEN_MAX_INFLIGHT_BYTES)."},
	{"queen_ephemeral_inflight_refusals_total", "counter", nil,
		"Request bodies refused because the in-flight bound was reached."},
	{"queen_ephemeral_outbound_closed_total", "counter", nil,
		"Connections closed because their client left too many answer bytes unread."},

	// The cell (only on a member of one).
	{"queen_ephemeral_cell_members", "gauge", nil,
		"Members in this member's live view of the cell."},
	{"queen_ephemeral_cell_fenced", "gauge", nil,
		"1 while this member is fenced (its own heartbeat is older than the member timeout: it answers as the owner of nothing), else 0."},
	{"queen_ephemeral_relayed_total", "counter", nil,
		"Requests this member relayed to the owner of their queue."},
	{"queen_ephemeral_relay_served_total", "counter", nil,
		"Relayed requests this member served as the owner."},
	{"queen_ephemeral_relay_closed_unanswered_total", "counter", nil,
		"Relayed requests whose link closed before the owner answered (the client's connection is closed)."},
	{"queen_ephemeral_relay_dials_total", "counter", nil,
		"Dials of relay links to other members."},
	{"queen_ephemeral_relay_links", "gauge", nil,
		"Relay links to or from other members, open or being dialled."},
	{"queen_ephemeral_relay_handshakes_refused_total", "counter", nil,
		"Connections to the relay port that failed the cell secret's handshake."},
	{"queen_ephemeral_relay_shed_total", "counter", nil,
		"Connections to the relay port closed before their handshake: handshakes in progress at their cap, or descriptors near the limit."},

	// The build.
	{"queen_ephemeral_build_info", "gauge", []string{"version", "commit", "goversion"},
		"Always 1; the labels say which build is running (as queen --version and /health do)."},
}

var familyByName = func() map[string]Family {
	m := make(map[string]Family, len(families))
	for _, f := range families {
		m[f.Name] = f
	}
	return m
}()

// Families returns every metric family the server can export, for tools
// and tests that check names against it (deploy/'s alert rules).
func Families() []Family { return slices.Clone(families) }
