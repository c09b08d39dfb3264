package inject

// The trampoline is assembled from csrc/tramp.S and committed, so that `go
// build` needs no assembler. CI runs `go generate ./...` and requires the
// result to be byte-identical to what is committed.
//go:generate go run ./internal/gentramp -o tramp_amd64.go csrc/tramp.S
