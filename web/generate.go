package web

// The page's API types come from the Go types of the answers (before the
// bundle, which type-checks the page against them: server.go's directive).
//go:generate go run ./internal/tsgen
