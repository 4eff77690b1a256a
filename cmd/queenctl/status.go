package main

// The two status reads as tables: queues and depth.

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/queenmq/ephemeral/client"
)

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

func queuesCmd(a *app) *cobra.Command {
	var memberOnly bool
	cmd := &cobra.Command{
		Use:   "queues",
		Short: "List the tenant's queues with their gauges (every member of a cell)",
		Long: `queues prints the listing of GET /api/v1/ephemeral/queues: every queue of the tenant,
declared and implicit, with depth (pending messages), bytes (payload memory held),
partitions, groups and drops by cause (bounds: the queue is too small or its producer
too fast; ttl: the consumer is too slow; retry: the handlers fail).
On a member of a cell it asks every member and shows the whole cell, each queue with
its OWNER (the member id); a member that does not answer is named on stderr and the
exit status is 5. --member-only prints this member's own listing.`,
		Example: `  queenctl queues
  queenctl queues --json | jq '.queues[] | select(.depth > 100) | .queue'
  queenctl queues --member-only`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			r := newCellReader(a, c, memberOnly)
			defer r.close()
			cell, res, err := r.read(cmd.Context())
			if err != nil {
				return sdk(err)
			}
			if cell == nil {
				return a.printQueues(res)
			}
			if err := a.printCellQueues(cell); err != nil {
				return err
			}
			return warnMissing(a.stderr, cell)
		},
	}
	cmd.Flags().BoolVar(&memberOnly, "member-only", false, "on a member of a cell, only this member's listing (no OWNER column)")
	return cmd
}

// printQueues prints one broker's listing (not a cell, or --member-only).
func (a *app) printQueues(res *client.QueuesResult) error {
	if a.g.json {
		return a.printJSON(res)
	}
	tw := newTable(a.stdout)
	fmt.Fprintln(tw, "QUEUE\tTIER\tDEPTH\tBYTES\tPARTITIONS\tGROUPS\tDROPS(BOUNDS/TTL/RETRY)")
	for _, q := range res.Queues {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d/%d/%d\n", visible(q.Queue), visible(q.Tier), q.Depth, q.Bytes,
			q.Partitions, q.Groups, q.Drops.Bounds, q.Drops.TTL, q.Drops.Retry)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(a.stdout, "%d queues; broker footprint %d bytes\n", res.Count, res.CellBytes)
	return err
}

// printCellQueues prints the cell's merged listing, with the OWNER column.
func (a *app) printCellQueues(l *cellQueues) error {
	if a.g.json {
		return a.printJSON(l)
	}
	tw := newTable(a.stdout)
	fmt.Fprintln(tw, "QUEUE\tOWNER\tTIER\tDEPTH\tBYTES\tPARTITIONS\tGROUPS\tDROPS(BOUNDS/TTL/RETRY)")
	for _, q := range l.Queues {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d/%d/%d\n", visible(q.Queue), visible(q.Owner), visible(q.Tier), q.Depth, q.Bytes,
			q.Partitions, q.Groups, q.Drops.Bounds, q.Drops.TTL, q.Drops.Retry)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	answered := len(l.Members) - len(l.missing())
	_, err := fmt.Fprintf(a.stdout, "%d queues on %d of %d members (cell generation %d); footprint %d bytes\n",
		l.Count, answered, len(l.Members), l.Generation, l.CellBytes)
	return err
}

// warnMissing names each member that did not answer on stderr and
// answers the partial result's error (exit status 5), or nil.
func warnMissing(w io.Writer, l *cellQueues) error {
	missing := l.missing()
	for _, m := range missing {
		fmt.Fprintf(w, "warning: member %s (%s) did not answer: %s; its queues are not listed\n",
			visible(m.ID), visible(m.URL), visible(m.Error))
	}
	if len(missing) == 0 {
		return nil
	}
	return partialError{missing: len(missing), of: len(l.Members)}
}

func depthCmd(a *app) *cobra.Command {
	var o client.DepthOptions
	cmd := &cobra.Command{
		Use:   "depth <queue>",
		Short: "Read one queue's depth per partition and per group",
		Example: `  queenctl depth jobs
  queenctl depth jobs --group workers --json`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			res, err := c.Depth(cmd.Context(), args[0], o)
			if err != nil {
				return sdk(err)
			}
			if a.g.json {
				return a.printJSON(res)
			}
			return printDepth(a.stdout, res)
		},
	}
	cmd.Flags().StringVar(&o.Group, "group", "", "read pending for this group")
	return cmd
}

func printDepth(w io.Writer, d *client.DepthResult) error {
	group := "(none)"
	if d.Group != nil {
		group = visible(*d.Group)
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "QUEUE\tTIER\tGROUP\tPENDING\tPARTITIONS PENDING\tBYTES")
	fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\n", visible(d.Queue), visible(d.Tier), group, d.Pending, d.PartitionsPending, d.Bytes)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(d.Partitions) > 0 {
		fmt.Fprintln(w)
		tw = newTable(w)
		fmt.Fprintln(tw, "PARTITION\tPENDING\tBYTES")
		for _, p := range d.Partitions {
			fmt.Fprintf(tw, "%s\t%d\t%d\n", visible(p.Partition), p.Pending, p.Bytes)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(d.Groups) > 0 {
		fmt.Fprintln(w)
		tw = newTable(w)
		fmt.Fprintln(tw, "GROUP\tPENDING\tSKIPPED")
		for _, g := range d.Groups {
			fmt.Fprintf(tw, "%s\t%d\t%d\n", visible(g.Group), g.Pending, g.Skipped)
		}
		return tw.Flush()
	}
	return nil
}
