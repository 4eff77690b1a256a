package main

// version and commit are stamped by `make build` (as cmd/queen's are).
var (
	version = "dev"
	commit  = ""
)
