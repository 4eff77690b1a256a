// Package libcompare holds the micro-benchmarks that measure our code
// against a peer library doing the same job, on the same input, in one
// run. They are test-only and live in the bench module so that the root
// module requires none of those libraries:
//
//   - wire_test.go: the measurement behind decoding the route bodies with
//     wire's own scanner rather than goccy/go-json (wire/decisions.md): the
//     bodies of wire's benchmarks (wire/wiretest) decoded by goccy and by
//     encoding/json, and a test that both decode what ours does. Ours, on
//     the same bodies, from the repository's root:
//     go test -run '^$' -bench 'Decode(Push100x64|Ack100)$' -benchmem ./wire/
//   - cell_test.go: cell.Owner against github.com/dgryski/go-rendezvous
//     (docs/cell.md, "Cost").
//
// Run them from bench/:
//
//	go test -run '^$' -bench . -benchmem ./libcompare/
package libcompare
