// Package docs holds the tests of the module's Markdown (README.md, docs/
// and every other .md file): the shell recipes marked runnable run as
// written against real processes, from the root of a copy of the checkout
// (recipes_test.go), no sh block puts go run in the background (same
// file), every relative link resolves (links_test.go), development.md's
// Layout names every directory (layout_test.go), openapi.yaml describes
// the routes the broker serves, as it answers them (openapi_test.go), and
// guide.md's nginx block, marked <!-- nginx: tls-proxy --> on the line
// before its ```nginx fence, proxies TLS and the SDKs' links to a broker
// (tlsproxy_test.go; it skips without nginx, unless CI=true).
//
// A runnable recipe is a ```sh block preceded, on the line just before its
// fence, by an HTML comment that GitHub does not render:
//
//	<!-- recipe: NAME -->
//	<!-- recipe: NAME postgres node -->
//
// Blocks of one file that share a NAME are one script, run in the order
// they appear, so that a guide can start a broker in one block and use it
// in the next. "postgres" gives the script a PostgreSQL server through the
// PG* variables (PGHOST, PGPORT, PGUSER), as psql and createdb read them;
// "node" says it needs Node 20.3 and npm (skipped without them, unless
// QUEEN_TEST_REQUIRE_NODE=1).
// docs/guide.md, "How the recipes are tested", says what a recipe may
// assume; the package has no code of its own.
//
//	go test -race -count=1 ./docs/
//	go test -count=1 -run 'TestRecipes/guide.md' ./docs/
package docs
