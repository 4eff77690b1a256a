package main

// version and commit are stamped by `make build` with
// -ldflags "-X main.version=... -X main.commit=..." (git describe and the
// revision); a binary built another way leaves them as they are here, and
// internal/buildinfo reads what the Go toolchain recorded instead.
var (
	version = "dev"
	commit  = ""
)
