// Command queen-routes writes the gateway's route table, the JSON document
// gateway/routes embeds, from the broker's own route table
// (server.RouteTable): run by `go generate ./gateway/routes` (or `make
// generate`) whenever a route of the ephemeral family changes. A test of
// gateway/routes fails while the file is stale.
//
//	queen-routes [-o file]   (default: standard output)
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/queenmq/ephemeral/internal/routegen"
)

func main() {
	out := flag.String("o", "", "write the table to this file (default: standard output)")
	flag.Parse()
	b := routegen.JSON()
	var err error
	if *out == "" {
		_, err = os.Stdout.Write(b)
	} else {
		err = os.WriteFile(*out, b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "queen-routes:", err)
		os.Exit(1)
	}
}
