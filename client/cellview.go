package client

import "context"

// CellView is the cell as the member at the client's URL sees it (docs/routes.md,
// "cell"): Generation 0 and no members when the URL is not a cell member.
type CellView struct {
	Generation uint64       `json:"generation"`
	Tenant     string       `json:"tenant"`
	Self       string       `json:"self"` // the id of the member that answered
	Members    []CellMember `json:"members"`
}

// CellMember is one member of the view: its id and the URL it publishes
// for clients (empty when it publishes none).
type CellMember struct {
	ID  string `json:"id"`
	URL string `json:"url"`
}

// Cell reads the view once (GET /api/v1/ephemeral/cell), for tools that
// show the whole cell (queenctl queues, top). A broker or gateway older
// than the route answers 404 (an *Error): for a reader, not a cell either.
func (c *Client) Cell(ctx context.Context) (*CellView, error) {
	a, err := c.readView(ctx, 0, false, 0)
	if err != nil {
		return nil, err
	}
	v := &CellView{Generation: a.Generation, Tenant: a.Tenant, Self: a.Self, Members: make([]CellMember, 0, len(a.Members))}
	for _, m := range a.Members {
		v.Members = append(v.Members, CellMember{ID: m.ID, URL: m.URL})
	}
	return v, nil
}
