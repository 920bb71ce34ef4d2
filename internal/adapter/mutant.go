//go:build !idem_mutant

package adapter

// mutantHeldStatusEscapes is false: production builds have no broken
// variants, and the compiler drops the branch it guards.
func mutantHeldStatusEscapes() bool { return false }
