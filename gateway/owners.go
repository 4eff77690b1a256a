package gateway

import (
	"slices"
	"unsafe"

	"github.com/queenmq/ephemeral/cell/rendezvous"
	"github.com/queenmq/ephemeral/wire"
)

// Routing to owners (docs/gateway.md, "Routing to owners"; D19).
//
// In front of a cell, a push, pop or ack that lands on a member that does
// not own its queue is relayed by that member to the owner, which with N
// members is (N-1)/N of them and costs the cell about twice the CPU. The
// gateway knows the members, where they are reached and the ownership
// function (cell/rendezvous), so it sends each push, pop and ack on its
// link to the member that owns the queue in its current view of the cell
// (cellwatch.go keeps that view). It does so only on links: when the
// owner's link is not open (being dialled, refused, failed lately, a member
// that publishes no URL the gateway can dial, QUEEN_GATEWAY_LINK=false),
// the request goes the way it went before, to any configured member, which
// relays it. So a wrong or stale view costs a relay, never a call.
//
// The view is immutable and swapped whole (Gateway.owners); a loop reads it
// once per request and computes the owner without allocating: the members'
// seeds are computed once per view.

// maxLearned bounds the member addresses the gateway learns from views
// beyond the configured upstreams (each loop keeps a link slot for each);
// a member past it is reached through the others (relayed).
const maxLearned = 256

// ownerView is the gateway's view of the cell behind it: the members
// sorted by id, as the members compute ownership over them.
type ownerView struct {
	gen   uint64   // the answering member's generation (local to it)
	ids   []string // the members' ids, sorted
	seeds []uint64 // rendezvous.Seed of each id
	ups   []int    // each member's index in Gateway.upstreams; -1: no URL the gateway can dial
}

// owner is the index in Gateway.upstreams of the member that owns (tenant,
// queue), -1 when it has no address the gateway can dial.
func (v *ownerView) owner(tenant string, queue []byte) int {
	i := rendezvous.Owner(rendezvous.Key(tenant, bytesString(queue)), v.seeds)
	if i < 0 {
		return -1
	}
	return v.ups[i]
}

// viewMember is one member as the view read lists it.
type viewMember struct {
	ID  string `json:"id"`
	URL string `json:"url"`
}

// newOwnerView makes the view of members (in any order), resolving each
// URL to an upstream index with addr (-1 for none).
func newOwnerView(gen uint64, members []viewMember, addr func(url string) int) *ownerView {
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b viewMember) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	v := &ownerView{gen: gen, ids: make([]string, len(ms)), seeds: make([]uint64, len(ms)), ups: make([]int, len(ms))}
	for i, m := range ms {
		v.ids[i], v.seeds[i], v.ups[i] = m.ID, rendezvous.Seed(m.ID), -1
		if m.URL != "" {
			v.ups[i] = addr(m.URL)
		}
	}
	return v
}

// sameMembers reports whether v and w route alike: the same ids at the
// same addresses.
func (v *ownerView) sameMembers(w *ownerView) bool {
	return v != nil && w != nil && slices.Equal(v.ids, w.ids) && slices.Equal(v.ups, w.ups)
}

// How a push, pop or ack was sent, for queen_gateway_owner_routed_total.
type routedHow uint8

const (
	routedNone     routedHow = iota // not in front of a cell (no view)
	routedOwner                     // on the link to its queue's owner
	routedFallback                  // to any configured member, which relays it
)

// ownerLink returns the loop's open link to the owner of (tenant, queue)
// in the gateway's view, and how the request is routed: routedOwner with
// the link, routedFallback (nil) in a cell when the owner's link is not
// open (it is dialled then, unless that failed lately) or the owner has no
// address, routedNone (nil) outside a cell or without a queue (a body
// that does not decode: the broker refuses it).
func (ls *loopState) ownerLink(tenant string, queue []byte, now int64) (*linkConn, routedHow) {
	v := ls.g.owners.Load()
	if v == nil || len(v.seeds) == 0 || queue == nil {
		return nil, routedNone
	}
	if up := v.owner(tenant, queue); up >= 0 {
		if l := ls.linkFor(up, now); l != nil {
			return l, routedOwner
		}
	}
	return nil, routedFallback
}

// queueOf is the queue a push, pop or ack names, read while the request is
// judged: a push's from its body (decoded once, for its item count too:
// items), a pop's from its query (kindOf), an ack's from its body, decoded
// only in front of a cell (a single broker needs no owner). nil when the
// body does not decode; the broker refuses it as it would.
func (ls *loopState) queueOf(kind exchangeKind, isAck bool, req *wire.Request, popQueue []byte) (queue []byte, items int) {
	switch {
	case kind == exPush:
		if err := ls.push.Decode(req.Body); err != nil {
			return nil, 0
		}
		items = len(ls.push.Payloads)
		clear(ls.push.Payloads)
		return ls.push.Queue, items
	case kind == exPop:
		return popQueue, 0
	case isAck && ls.g.owners.Load() != nil:
		if ls.ack.Decode(req.Body) != nil {
			return nil, 0
		}
		return ls.ack.Queue, 0
	}
	return nil, 0
}

// bytesString views b as a string without copying, for hashing it.
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
