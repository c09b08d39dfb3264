package report

// Resolver returns the resolver that symbolized r's stacks, for a caller
// that keeps the stacks' addresses and wants the same frames for them (the
// query index, which answers windows from the report's pass).
func (r *Report) Resolver() Resolver { return r.resolver }
