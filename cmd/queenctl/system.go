package main

// The system routes: the kill switch (pause, resume) and the grants. They
// need the broker's operator (docs/server.md, "Admin scope"): a loopback
// client when the broker runs with no identity and no admin token, else
// --token with the admin token.

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/queenmq/ephemeral/client"
)

func (a *app) printKillSwitch(k *client.KillSwitch) error {
	if a.g.json {
		return a.printJSON(k)
	}
	var err error
	if k.Enabled {
		_, err = fmt.Fprintln(a.stdout, "ephemeral surface enabled")
	} else {
		_, err = fmt.Fprintf(a.stdout, "ephemeral surface paused (clients told to retry after %d s)\n", max(1, k.RetryAfterSeconds))
	}
	return err
}

func pauseCmd(a *app) *cobra.Command {
	var retryAfter time.Duration
	cmd := &cobra.Command{
		Use:   "pause",
		Short: "Pause the ephemeral surface (the kill switch): push, pop and ack answer 503 ephemeral_disabled",
		Long: `pause sets the kill switch (POST /api/v1/system/ephemeral {"enabled": false}): every push,
pop and ack of every tenant answers 503 ephemeral_disabled with Retry-After, and
parked pops are answered with an empty batch. The state is kept in the store, so a
paused broker restarts paused. resume lifts it. Needs the broker's operator.`,
		Example: `  queenctl pause --retry-after 30s
  QUEEN_TOKEN=$QUEEN_ADMIN_TOKEN queenctl --url http://broker:6632 pause`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if retryAfter < 0 {
				return usagef("--retry-after %s: want a non-negative duration", retryAfter)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			// The broker counts whole seconds; round up so 1500ms is not 1 s.
			secs := int64((retryAfter + time.Second - 1) / time.Second)
			k, err := c.SetKillSwitch(cmd.Context(), client.KillSwitch{Enabled: false, RetryAfterSeconds: secs})
			if err != nil {
				return sdk(err)
			}
			return a.printKillSwitch(k)
		},
	}
	cmd.Flags().DurationVar(&retryAfter, "retry-after", 0, "the Retry-After clients are sent (whole seconds; at least 1 s is sent)")
	return cmd
}

func resumeCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "resume",
		Short:   "Lift the kill switch: the ephemeral surface serves again",
		Example: `  queenctl resume`,
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			k, err := c.SetKillSwitch(cmd.Context(), client.KillSwitch{Enabled: true})
			if err != nil {
				return sdk(err)
			}
			return a.printKillSwitch(k)
		},
	}
}

func (a *app) printGrant(g *client.Grant) error {
	if a.g.json {
		return a.printJSON(g)
	}
	unlimited := func(n int64) string {
		if n == 0 {
			return "unlimited"
		}
		return fmt.Sprint(n)
	}
	tw := newTable(a.stdout)
	fmt.Fprintln(tw, "TENANT\tMAX BYTES\tMAX QUEUES\tMESSAGES/S")
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", visible(g.Tenant), unlimited(g.MaxBytes), unlimited(g.MaxQueues), unlimited(g.MessagesPerSecond))
	return tw.Flush()
}

func grantCmd(a *app) *cobra.Command {
	grant := &cobra.Command{
		Use:   "grant",
		Short: "Read, set or delete a tenant's grant (its allowance on the ephemeral class)",
		Long: `A grant bounds a tenant: bytes held, queues, messages per second (0: unlimited).
With QUEEN_EPHEMERAL_REQUIRE_GRANT on (the default in gateway mode) a tenant without a
grant is refused 403 feature_gated. Setting and deleting need the broker's operator;
a tenant's admin may read its own grant.`,
	}
	get := &cobra.Command{
		Use:     "get <tenant>",
		Short:   "Print a tenant's grant (404 grant_not_found when it has none)",
		Example: `  queenctl grant get acme`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			g, err := c.Grant(cmd.Context(), args[0])
			if err != nil {
				return sdk(err)
			}
			return a.printGrant(g)
		},
	}
	var g client.Grant
	set := &cobra.Command{
		Use:   "set <tenant>",
		Short: "Write a tenant's grant: the row is replaced, a flag left out is 0 (unlimited)",
		Example: `  queenctl grant set acme --max-bytes 67108864 --max-queues 1000 --messages-per-second 5000
  queenctl grant set acme                       # granted, with no limit`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if g.MaxBytes < 0 || g.MaxQueues < 0 || g.MessagesPerSecond < 0 {
				return usagef("grant allowances are non-negative (0 is unlimited)")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			g.Tenant = args[0]
			out, err := c.SetGrant(cmd.Context(), g)
			if err != nil {
				return sdk(err)
			}
			return a.printGrant(out)
		},
	}
	set.Flags().Int64Var(&g.MaxBytes, "max-bytes", 0, "bytes the tenant may hold (0: unlimited)")
	set.Flags().Int64Var(&g.MaxQueues, "max-queues", 0, "queues the tenant may have (0: unlimited)")
	set.Flags().Int64Var(&g.MessagesPerSecond, "messages-per-second", 0, "pushed messages per second (0: unlimited)")
	del := &cobra.Command{
		Use:     "delete <tenant>",
		Short:   "Delete a tenant's grant (not an error when it has none)",
		Example: `  queenctl grant delete acme`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			res, err := c.DeleteGrant(cmd.Context(), args[0])
			if err != nil {
				return sdk(err)
			}
			if a.g.json {
				return a.printJSON(res)
			}
			if res.Deleted {
				_, err = fmt.Fprintf(a.stdout, "grant of %s deleted\n", visible(res.Tenant))
			} else {
				_, err = fmt.Fprintf(a.stdout, "%s had no grant\n", visible(res.Tenant))
			}
			return err
		},
	}
	grant.AddCommand(get, set, del)
	return grant
}
