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
	return &cobra.Command{
		Use:   "queues",
		Short: "List the tenant's queues with their gauges",
		Long: `queues prints the listing of GET /api/v1/ephemeral/queues: every queue of the tenant
on this broker, declared and implicit, with depth (pending messages), bytes (payload
memory held), partitions, groups and drops by cause (bounds: the queue is too small or
its producer too fast; ttl: the consumer is too slow; retry: the handlers fail).`,
		Example: `  queenctl queues
  queenctl queues --json | jq '.queues[] | select(.depth > 100) | .queue'`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			res, err := c.Queues(cmd.Context())
			if err != nil {
				return sdk(err)
			}
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
			_, err = fmt.Fprintf(a.stdout, "%d queues; broker footprint %d bytes\n", res.Count, res.CellBytes)
			return err
		},
	}
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
