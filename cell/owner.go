package cell

import (
	"time"

	"github.com/queenmq/ephemeral/cell/rendezvous"
)

// Owner returns the index in v.Members of the owner of (tenant, queue), or
// -1 when v is nil or empty: the rendezvous function (package rendezvous)
// over the view's members, whose seeds the view holds. Every member that
// holds the same set computes the same owner. It does not allocate.
func Owner(v *View, tenant, queue string) int {
	if v == nil || len(v.Members) == 0 {
		return -1
	}
	return rendezvous.Owner(keyHash(tenant, queue), v.seeds)
}

// keyHash is rendezvous.Key.
func keyHash(tenant, queue string) uint64 { return rendezvous.Key(tenant, queue) }

// OwnerOf returns which of ids owns (tenant, queue), as every member whose
// live set is ids computes it; "" when ids is empty. It builds a view, so
// it is for tools and tests (which must predict owners from outside), not
// for the request path.
func OwnerOf(ids []string, tenant, queue string) string {
	ms := make([]Member, len(ids))
	for i, id := range ids {
		ms[i] = Member{ID: id}
	}
	v := newView(0, "", ms, true, 0, func() time.Duration { return 0 })
	i := Owner(v, tenant, queue)
	if i < 0 {
		return ""
	}
	return ids[i]
}
