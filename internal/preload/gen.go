package preload

// The interposer is built from csrc/ and committed, so that `go build` needs
// no C compiler. CI runs `go generate ./...` and requires the result to be
// byte-identical to what is committed.
//go:generate sh csrc/build.sh

// protocol.go holds csrc/protocol.h's constants, generated from it.
//go:generate go run ./internal/protogen -o protocol.go csrc/protocol.h
