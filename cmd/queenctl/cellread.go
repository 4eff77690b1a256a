package main

// The whole cell's listing, for queues and top (docs/cli.md, "A cell").
// A member lists only what it serves (docs/cell.md, "What a member's
// listing shows"), and status reads are never relayed, so the CLI asks
// every member itself: the view from the URL given, then each member's
// listing in parallel with the same identity, merged by queue name with
// each queue's contents taken from its owner.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/queenmq/ephemeral/cell/rendezvous"
	"github.com/queenmq/ephemeral/client"
)

// memberTimeout bounds each member's listing (and --timeout, when
// shorter): a member that is paused or unreachable costs the reader no
// more than this.
const memberTimeout = 5 * time.Second

// maxMembers bounds the members a view may name: the view comes from the
// server at --url, which may not be an honest broker, and each member
// costs a client and a connection. A cell is a few members to a few
// dozen (docs/cell.md, "How a cell scales").
const maxMembers = 256

// cellQueue is one queue of the merged listing with the member that owns it.
type cellQueue struct {
	client.QueueInfo
	Owner string `json:"owner"`
}

// cellMemberRead is one member's part of a cell listing; Error is empty
// when it answered.
type cellMemberRead struct {
	ID    string `json:"id"`
	URL   string `json:"url"`
	Error string `json:"error,omitempty"`
}

// cellQueues is the merged listing, as `queues --json` prints it: the
// broker's document, each queue with its owner, plus the view it came from.
type cellQueues struct {
	Queues     []cellQueue      `json:"queues"`
	Count      int              `json:"count"`
	CellBytes  int64            `json:"cellBytes"` // every answering member's footprint, summed
	Generation uint64           `json:"generation"`
	Members    []cellMemberRead `json:"members"`
}

// missing answers the members that did not answer.
func (l *cellQueues) missing() []cellMemberRead {
	var out []cellMemberRead
	for _, m := range l.Members {
		if m.Error != "" {
			out = append(out, m)
		}
	}
	return out
}

// partialError: the listing was printed without the members that did not
// answer (exit status 5, docs/cli.md).
type partialError struct{ missing, of int }

func (e partialError) Error() string {
	return fmt.Sprintf("the listing lacks %d of the cell's %d members (see above)", e.missing, e.of)
}

// cellReader reads listings, keeping one client per member across
// reads (top reads every second).
type cellReader struct {
	a          *app
	c          *client.Client // the URL given
	memberOnly bool
	members    map[string]*client.Client // by public URL
}

func newCellReader(a *app, c *client.Client, memberOnly bool) *cellReader {
	return &cellReader{a: a, c: c, memberOnly: memberOnly, members: map[string]*client.Client{}}
}

// read answers the cell's merged listing, or nil and this broker's own
// listing when the URL is not a cell member (or --member-only).
func (r *cellReader) read(ctx context.Context) (*cellQueues, *client.QueuesResult, error) {
	if r.memberOnly {
		res, err := r.c.Queues(ctx)
		return nil, res, err
	}
	v, err := r.c.Cell(ctx)
	var ce *client.Error
	if errors.As(err, &ce) && ce.Status == http.StatusNotFound || err == nil && v.Generation == 0 {
		// Not a cell, or a broker or gateway older than the view read.
		res, err := r.c.Queues(ctx)
		return nil, res, err
	}
	if err != nil {
		return nil, nil, err
	}
	if len(v.Members) > maxMembers {
		return nil, nil, fmt.Errorf("the cell view at %s names %d members, more than %d: not a broker's answer (--member-only reads this member alone)",
			r.c.URL(), len(v.Members), maxMembers)
	}
	clients := make([]*client.Client, len(v.Members))
	for i, m := range v.Members {
		if clients[i], err = r.memberClient(v.Self, m); err != nil {
			return nil, nil, err
		}
	}
	bound := memberTimeout
	if t := r.a.g.timeout; t > 0 && t < bound {
		bound = t
	}
	listings := make([]*client.QueuesResult, len(v.Members))
	errs := make([]error, len(v.Members))
	var wg sync.WaitGroup
	for i := range v.Members {
		if clients[i] == nil {
			errs[i] = errors.New("it publishes no URL for clients (QUEEN_CELL_PUBLIC_URL)")
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			mctx, cancel := context.WithTimeout(ctx, bound)
			defer cancel()
			listings[i], errs[i] = clients[i].Queues(mctx)
		}()
	}
	wg.Wait()
	out := merge(v, listings, errs)
	if len(out.missing()) == len(v.Members) {
		// Nobody answered: the error of the member at the URL given, as
		// a member-only read would report it.
		for i, m := range v.Members {
			if m.ID == v.Self {
				return nil, nil, errs[i]
			}
		}
		return nil, nil, errs[0]
	}
	return out, nil, nil
}

// memberClient answers the client that reads member m: the URL given for
// the member that answered the view (its public URL may not be reachable
// from here when the given one is), a client of its own for the others,
// nil for one that publishes no URL.
func (r *cellReader) memberClient(self string, m client.CellMember) (*client.Client, error) {
	if m.ID == self {
		return r.c, nil
	}
	if m.URL == "" {
		return nil, nil
	}
	if c := r.members[m.URL]; c != nil {
		return c, nil
	}
	opts, err := r.a.options()
	if err != nil {
		return nil, err
	}
	c, err := client.New(m.URL, opts...)
	if err != nil {
		return nil, nil // an unusable URL is reported as a member without one
	}
	r.members[m.URL] = c
	return c, nil
}

// close closes the members' clients (the given one is the app's).
func (r *cellReader) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, c := range r.members {
		_ = c.Close(ctx)
	}
}

// merge builds the cell's listing from the members' (listings[i] is
// v.Members[i]'s, nil with errs[i] when it did not answer). A queue's row
// is its owner's (rendezvous.OwnerOf over the view's ids): a declared
// queue is listed by every member, with zero contents where another
// member owns it. An implicit queue only its owner lists; when the view
// moved and the member that lists it is not the owner by this view, its
// row is taken anyway, with that member as the owner: it serves it. A
// declared queue whose owner did not answer is left out (its contents
// are unknown), as are the queues of such an owner; the warning says so.
func merge(v *client.CellView, listings []*client.QueuesResult, errs []error) *cellQueues {
	ids := make([]string, len(v.Members))
	for i, m := range v.Members {
		ids[i] = m.ID
	}
	out := &cellQueues{Generation: v.Generation, Queues: []cellQueue{}}
	rows := map[string]int{} // queue -> index in out.Queues
	for i, m := range v.Members {
		read := cellMemberRead{ID: m.ID, URL: m.URL}
		if errs[i] != nil {
			read.Error = errs[i].Error()
		}
		out.Members = append(out.Members, read)
		res := listings[i]
		if res == nil {
			continue
		}
		out.CellBytes += res.CellBytes
		for _, q := range res.Queues {
			isOwner := rendezvous.OwnerOf(ids, v.Tenant, q.Queue) == m.ID
			j, seen := rows[q.Queue]
			switch {
			case isOwner && seen:
				out.Queues[j] = cellQueue{QueueInfo: q, Owner: m.ID}
			case isOwner:
				rows[q.Queue] = len(out.Queues)
				out.Queues = append(out.Queues, cellQueue{QueueInfo: q, Owner: m.ID})
			case q.Tier != "declared" && !seen:
				rows[q.Queue] = len(out.Queues)
				out.Queues = append(out.Queues, cellQueue{QueueInfo: q, Owner: m.ID})
			}
		}
	}
	slices.SortFunc(out.Queues, func(a, b cellQueue) int { return strings.Compare(a.Queue, b.Queue) })
	out.Count = len(out.Queues)
	return out
}
