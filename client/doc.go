// Package client is the Go SDK of the ephemeral storage class of Queen MQ:
// the routes under /api/v1/ephemeral. Calls ride links (docs/link.md): two
// upgraded connections per broker URL carry every call, each on a stream of
// its own; a URL whose upgrade is refused (an older broker, a proxy that
// drops Upgrade) is spoken to over HTTP/1.1 instead. In a cell each queue's
// calls go to the member that owns it (docs/sdk-transport.md, "Links" and
// "Owner routing").
//
// Over HTTP/1.1 the client has its own transport (docs/sdk-transport.md, "Go
// client"): short calls are pipelined on a few shared connections per
// broker, a waiting pop takes a connection of its own for its duration,
// and [Client.Request] writes its push and the inbox's pop together in one
// write. A push or a pop allocates nothing beyond its payloads and its
// result. A call is sent again only when it provably never reached the
// broker or is safe to repeat (the listing, the depth read, configure); a
// push whose answer was lost is an error, never silently repeated. An
// https:// broker, or any broker when [WithHTTPClient] is given, is reached
// through net/http instead. [WithToken] sends a static bearer token;
// [WithTokenFunc] takes it from a function, for tokens that rotate: cached
// until shortly before its exp, and sent on each open link in a token frame
// before the old one expires, so that links and their parked pops outlive
// it (docs/sdk-transport.md, "Tokens that rotate").
//
// A [Client] is built with [New] from one broker URL or several (the others
// are tried in turn when a broker cannot be reached). Its methods mirror the
// verbs of the wire: [Client.Configure], [Client.Push], [Client.Pop],
// [Client.Ack], [Client.Reset], [Client.Delete], [Client.Queues] and
// [Client.Depth]. The operator's system routes have theirs too:
// [Client.KillSwitch] and [Client.SetKillSwitch] (pause and resume the
// ephemeral surface), [Client.Grant], [Client.SetGrant] and
// [Client.DeleteGrant] (a tenant's allowance). On top of them it offers:
//
//   - buffered pushes ([PushOptions.Buffered]): messages are batched
//     client-side by count and time, bounded in memory; a producer blocks
//     when the buffer is full; a flush drains against 429 and 503 with
//     backoff, honouring Retry-After; a flush that finally fails is reported
//     by the next buffered push, by [Client.Flush] and by [Client.Close];
//   - request/reply ([Client.Request], [Client.Reply]) over an inbox queue
//     that nobody declares, and [Client.Serve], the responder's loop that
//     sends a batch's replies with its next waiting pop in one write;
//   - a consume loop ([Client.Consume]) with bounded concurrency.
//
// Every refusal of the broker is an [*Error] carrying the HTTP status and
// the specification's code; branch on the code (or use errors.Is with the
// Err* values), never on the message. In a cell of several brokers two
// refusals say the request was not applied, [CodeOwnerMoved] and
// [CodeForwardFailed]: every call sends such a request again by itself,
// with exponential backoff and jitter or after the broker's Retry-After,
// within its own bound (WithTimeout, a waiting pop's or a Request's
// timeout) and its context, and returns the last refusal only when those
// end first (docs/sdk-transport.md, "Cell refusals"). Nothing else needs
// configuring to use a cell: given one member's URL, the client learns the
// others from one view read kept waiting and sends each queue's push, pop,
// ack and depth read to the member that owns it, instead of having the
// member it was given relay them (docs/sdk-transport.md, "Owner routing"). A 404 from any route but the depth
// read means the broker (or a proxy in front of it) predates the ephemeral
// routes and is reported with the code [CodeUnsupported].
//
// The class keeps nothing across a broker restart: an ack that carries an id
// minted by an incarnation that is gone answers [OutcomeStale], which is
// information and not an error.
package client
