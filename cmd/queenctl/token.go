package main

// token: mint a JWT for development.

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/queenmq/ephemeral/internal/jwtmint"
)

func tokenCmd(a *app) *cobra.Command {
	var c jwtmint.Claims
	var secret, keyFile string
	cmd := &cobra.Command{
		Use:   "token --secret S | --key FILE [--tenant T] [--role R] [--ttl D]",
		Short: "Mint a JWT for development, printed alone for QUEEN_TOKEN",
		Long: `token signs a JWT in the claims a broker in mode jwt (and queen-gateway)
verifies: the tenant claim, role and exp (docs/server.md, "Identity").
HS256 with --secret (the broker's QUEEN_JWT_SECRET), or RS256 or EdDSA with
--key, a PEM private key whose type picks the algorithm (the broker holds the
public key in QUEEN_JWT_PUBLIC_KEY). It prints the token alone on stdout and
calls no broker.

For development and tests: a production token comes from the tenant's own
identity provider, and a secret on a command line is in the shell's history.`,
		Example: `  export QUEEN_TOKEN=$(queenctl token --secret "$QUEEN_JWT_SECRET" --tenant acme)
  queenctl token --key dev-ed25519.pem --tenant acme --role admin --ttl 15m`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			var tok string
			var err error
			switch {
			case secret != "" && keyFile != "":
				return usagef("--secret and --key exclude each other: --secret signs HS256, --key RS256 or EdDSA")
			case secret != "":
				tok, err = jwtmint.HS256([]byte(secret), c)
			case keyFile != "":
				pemBytes, rerr := os.ReadFile(keyFile)
				if rerr != nil {
					return usagef("--key: %v", rerr)
				}
				k, perr := jwtmint.ParseKey(pemBytes)
				if perr != nil {
					return usagef("--key %s: %v", keyFile, perr)
				}
				tok, err = k.Sign(c)
			default:
				return usagef("token needs --secret (HS256, the broker's QUEEN_JWT_SECRET) or --key FILE (a PEM private key: RS256 or EdDSA)")
			}
			if err != nil {
				return usagef("%s", flagNamed(err.Error()))
			}
			_, err = fmt.Fprintln(a.stdout, tok)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&secret, "secret", "", "HS256: the broker's QUEEN_JWT_SECRET")
	f.StringVar(&keyFile, "key", "", "RS256 or EdDSA: a PEM private key file (RSA or Ed25519; the broker holds the public key)")
	f.StringVar(&c.Tenant, "tenant", "", `the tenant claim (default: none, which a broker reads as tenant "default")`)
	f.StringVar(&c.Role, "role", "read-write", "read-only, write-only, read-write or admin")
	f.DurationVar(&c.TTL, "ttl", time.Hour, "how long the token lives (exp)")
	f.StringVar(&c.TenantClaim, "tenant-claim", "tenant", "the claim naming the tenant (the broker's QUEEN_JWT_TENANT_CLAIM)")
	f.StringVar(&c.Issuer, "issuer", "", "the iss claim, for a broker with QUEEN_JWT_ISSUER")
	f.StringVar(&c.Audience, "audience", "", "the aud claim, for a broker with QUEEN_JWT_AUDIENCE")
	return cmd
}

// flagNamed turns jwtmint's "role ..." or "ttl ..." into the flag's name,
// so the message says which flag to change.
func flagNamed(msg string) string {
	for _, name := range []string{"role", "ttl", "tenant"} {
		if strings.HasPrefix(msg, name+" ") {
			return "--" + msg
		}
	}
	return msg
}
