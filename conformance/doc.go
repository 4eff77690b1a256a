// Package conformance holds the broker's conformance tests (T1, docs/decisions.md):
// they build the real `queen` binary once, start it on free loopback ports
// with a given environment and store (the embedded one under a fresh
// QUEEN_DATA_DIR, or a throwaway PostgreSQL started by store/storetest),
// and speak HTTP/1.1 to it with Go's net/http and with raw TCP where the
// test is about the wire. Every assertion is exact: status, `code`, counts
// and order, as docs/routes.md, docs/contract.md, docs/decisions.md and
// docs/engine.md state them.
//
// example35.sh is example 35 (docs/contract.md) performed with curl; a
// test runs it against a fresh broker and checks what it prints.
//
// The package has no code of its own: everything is in its _test.go files.
//
//	go test -race -count=1 ./conformance/
//	bash conformance/example35.sh http://127.0.0.1:6632
package conformance
